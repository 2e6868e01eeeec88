"""Which distribution engine the environment asks for, read from environment variables only: no TensorFlow, so
a tool can refuse a launch it does not support before paying for TensorFlow's import (utils/distributed.py
builds the engine's Distribution)."""

import contextlib
import dataclasses
import json
import os
import signal

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
    source: str = ""  # the environment variable the engine was chosen from ("" for the default, single)

    @property
    def multi_process(self):
        return self.name in ("multi_worker", "horovod") and self.size > 1

    def describe(self):
        """For the log: e.g. "horovod (from OMPI_COMM_WORLD_SIZE)", "single (no launcher variable set)"."""
        return "{} ({})".format(self.name, "from " + self.source if self.source else "no launcher variable set")


# What SlurmClusterResolver reads from a job step (and SLURM_LOCALID, the GPU of a task on its node). `srun` sets
# them all; a shell that inherited some from an old job, or set them by hand, has only part.
SLURM_STEP_VARIABLES = ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NODELIST",
                        "SLURM_STEP_TASKS_PER_NODE")
# What horovodrun's Gloo launcher gives each process (horovod/runner/gloo_run.py). Without the rendezvous address
# Horovod's hvd.init() runs the process alone ("assuming single process execution"); with part of them it waits for
# a rendezvous that never comes, then aborts.
HOROVOD_GLOO_VARIABLES = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                          "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                          "HOROVOD_GLOO_RENDEZVOUS_PORT")


def check_launch_environment(engine, horovod_over_mpi=False, environ=None):
    """Raises a UserError naming the variables set and those missing when the environment asks for several
    processes (a SLURM job step, horovodrun's Gloo launcher) but holds only part of what that launcher sets: a stale
    or hand-made environment, which otherwise ended in TensorFlow's traceback (`SLURM_STEP_NODELIST not found`) or
    in Horovod's abort after a 30 s wait. `horovod_over_mpi`: this Horovod is built with MPI, which then brings the
    processes together when they were not started by the Gloo launcher (HOROVOD_SIZE)."""
    environ = os.environ if environ is None else environ
    if engine.name == "multi_worker" and "TF_CONFIG" not in environ:  # utils/distributed.create: SLURM's resolver
        needed, launcher, chosen_by = SLURM_STEP_VARIABLES, "srun", ("SLURM_STEP_NUM_TASKS",)
    elif engine.name == "horovod" and engine.size > 1 and (engine.source == "HOROVOD_SIZE" or not horovod_over_mpi):
        needed, launcher, chosen_by = HOROVOD_GLOO_VARIABLES, "horovodrun", MPI_SIZE_VARIABLES
    else:
        return
    missing = [name for name in needed if environ.get(name, "") == ""]
    if not missing:
        return
    given = [name for name in dict.fromkeys(needed + chosen_by) if environ.get(name, "") != ""]
    unset = [name for name in chosen_by + ("RN50_ENGINE",) if environ.get(name, "") != ""]
    raise UserError("{}={} asks for the {} engine over {} processes started by {}, but {} {} not set (set: {}): "
                    "variables left from another job, or set by hand? Start the processes with {} (or `python -m "
                    "runtime.launch --nproc N main.py ...`), or run as one process: unset {}".format(
                        engine.source, environ.get(engine.source, ""), engine.name, engine.size, launcher,
                        ", ".join(missing), "is" if len(missing) == 1 else "are", ", ".join(given), launcher,
                        " ".join(unset)))


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


def _first_number(names, environ):
    """The first of `names` whose value is a number (the one int_env read)."""
    return next(name for name in names if int_env(name, environ=environ) is not None)


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
        source = "RN50_ENGINE" if forced else _first_number(MPI_SIZE_VARIABLES, environ)
        return Engine("horovod", size=mpi_size, source=source)  # rank/size are Horovod's own after hvd.init()
    if forced in ("single", "mirrored"):
        return Engine(forced, source="RN50_ENGINE")
    tf_config = _tf_config_workers(environ)
    if tf_config is not None and (forced == "multi_worker" or tf_config[0] > 1):
        workers, rank = tf_config
        return Engine("multi_worker", rank=rank, size=workers,
                      local_rank=int_env("RN50_LOCAL_RANK", "LOCAL_RANK", default=0, environ=environ),
                      source="RN50_ENGINE" if forced else "TF_CONFIG")
    slurm_tasks = int_env("SLURM_STEP_NUM_TASKS", default=1, environ=environ)
    if slurm_tasks > 1 or (forced == "multi_worker" and "SLURM_PROCID" in environ):
        return Engine("multi_worker", rank=int_env("SLURM_PROCID", default=0, environ=environ), size=slurm_tasks,
                      local_rank=int_env("SLURM_LOCALID", default=0, environ=environ),
                      source="SLURM_STEP_NUM_TASKS" if slurm_tasks > 1 else "RN50_ENGINE")
    if forced == "multi_worker":
        raise UserError("RN50_ENGINE=multi_worker needs TF_CONFIG (python -m runtime.launch writes it) or SLURM")
    return Engine("single")


def number_ranges(numbers, separator=","):
    """[0, 1, 2, 5] -> "0-2,5": sorted, runs of consecutive numbers as ranges (as taskset -c takes CPU cores)."""
    runs = []
    for number in sorted(numbers):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return separator.join(str(first) if first == last else "{}-{}".format(first, last) for first, last in runs)


# The signals that end a worker waiting for the others (utils/distributed.WorkerWait).
WAIT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def wait_signals_blocked(engine):
    """For an engine whose start waits for other processes (multi_worker, or horovod over several), WAIT_SIGNALS are
    blocked in this thread from before TensorFlow is imported until the wait is over: the threads TensorFlow and
    Horovod start inherit the mask, so none of them takes such a signal (TensorFlow's preemption notifier would
    swallow a SIGTERM), and one sent during the wait stays pending for WorkerWait's watcher to see. On leaving, a
    signal still pending is delivered to the handlers of the command wrapper (utils/errors.py) as usual. Other
    engines, and threads other than the main one, are left alone."""
    import threading
    if engine.name not in ("multi_worker", "horovod") or engine.size <= 1 \
            or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, WAIT_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
