"""Which distribution engine the environment asks for, read from environment variables only: no TensorFlow, so
a tool can refuse a launch it does not support before paying for TensorFlow's import (utils/distributed.py
builds the engine's Distribution)."""

import dataclasses
import json
import os

from utils.errors import UserError

# Environment variables that mean "this process was started by mpirun / horovodrun" (Open MPI, MPICH/PMI,
# Intel MPI, PMIx, Horovod's Gloo launcher).
MPI_SIZE_VARIABLES = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


@dataclasses.dataclass(frozen=True)
class Engine:
    """What the environment asks for, known before TensorFlow touches a device."""

    name: str
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def multi_process(self):
        return self.name in ("multi_worker", "horovod") and self.size > 1


def int_env(*names, default=None, environ=None):
    environ = os.environ if environ is None else environ
    for name in names:
        value = environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                continue
    return default


def _tf_config_workers(environ):
    raw = environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        config = json.loads(raw)
        cluster = config.get("cluster", {})
        workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
        task = config["task"]
        rank = int(task["index"]) + (len(cluster.get("chief", [])) if task["type"] == "worker" else 0)
    except (ValueError, KeyError, TypeError) as error:
        raise UserError("TF_CONFIG is not valid: {}".format(error)) from None
    return workers, rank


def detect_engine(environ=None):
    """The engine the environment asks for (no TensorFlow device is touched).

    RN50_ENGINE={single,mirrored,multi_worker,horovod} forces one. Otherwise: started by mpirun/horovodrun with
    more than one process -> horovod; TF_CONFIG with more than one worker -> multi_worker; inside an `srun` job
    step with more than one task -> multi_worker (SLURM); else single.
    """
    environ = os.environ if environ is None else environ
    forced = environ.get("RN50_ENGINE", "").strip().lower()
    if forced and forced not in ("single", "mirrored", "multi_worker", "horovod"):
        raise UserError("RN50_ENGINE={} is not one of single, mirrored, multi_worker, horovod".format(forced))
    mpi_size = int_env(*MPI_SIZE_VARIABLES, default=1, environ=environ)
    if forced == "horovod" or (not forced and mpi_size > 1):
        return Engine("horovod", size=mpi_size)  # rank/size are Horovod's own after hvd.init()
    if forced in ("single", "mirrored"):
        return Engine(forced)
    tf_config = _tf_config_workers(environ)
    if tf_config is not None and (forced == "multi_worker" or tf_config[0] > 1):
        workers, rank = tf_config
        return Engine("multi_worker", rank=rank, size=workers,
                      local_rank=int_env("RN50_LOCAL_RANK", "LOCAL_RANK", default=0, environ=environ))
    slurm_tasks = int_env("SLURM_STEP_NUM_TASKS", default=1, environ=environ)
    if slurm_tasks > 1 or (forced == "multi_worker" and "SLURM_PROCID" in environ):
        return Engine("multi_worker", rank=int_env("SLURM_PROCID", default=0, environ=environ), size=slurm_tasks,
                      local_rank=int_env("SLURM_LOCALID", default=0, environ=environ))
    if forced == "multi_worker":
        raise UserError("RN50_ENGINE=multi_worker needs TF_CONFIG (python -m runtime.launch writes it) or SLURM")
    return Engine("single")
