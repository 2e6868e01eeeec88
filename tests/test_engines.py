"""utils/engines.py: which engine the environment asks for, decided without TensorFlow."""
import json
import os
import subprocess
import sys

from tests._cli import ROOT, child_env
from utils import engines


def test_engine_detection():
    assert engines.detect_engine({}).name == "single"
    tf_config = json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}})
    engine = engines.detect_engine({"TF_CONFIG": tf_config, "RN50_LOCAL_RANK": "1"})
    assert (engine.name, engine.rank, engine.size, engine.local_rank) == ("multi_worker", 1, 2, 1)
    assert engines.detect_engine({"OMPI_COMM_WORLD_SIZE": "4"}).name == "horovod"
    assert engines.detect_engine({"HOROVOD_SIZE": "2"}).name == "horovod"
    assert engines.detect_engine({"OMPI_COMM_WORLD_SIZE": "1"}).name == "single"
    slurm = engines.detect_engine({"SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "3", "SLURM_LOCALID": "1"})
    assert (slurm.name, slurm.rank, slurm.size, slurm.local_rank) == ("multi_worker", 3, 8, 1)
    assert engines.detect_engine({"RN50_ENGINE": "mirrored"}).name == "mirrored"


def test_choosing_the_engine_imports_no_tensorflow_and_inference_refuses_several_workers_before_it():
    """main.py refuses a multi-process inference launch before TensorFlow's import (one line, status 2)."""
    code = "import sys; from utils import engines; engines.detect_engine(); print('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    env = child_env(OMPI_COMM_WORLD_SIZE="2", PYTHONPROFILEIMPORTTIME="1")  # what mpirun sets: complete
    result = subprocess.run([sys.executable, "main.py", "--mode", "predict", "--to_predict", os.devnull,
                             "--batch_size", "1"],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert "ERROR: Only single GPU inference is implemented." in result.stderr
    assert not any(line.split("|")[-1].strip() == "tensorflow" for line in result.stderr.splitlines())


def test_a_partial_slurm_or_horovod_environment_is_one_line_naming_what_is_set_and_missing():
    """A stale SLURM step (SLURM_STEP_NUM_TASKS without the node list: TensorFlow's resolver raised a RuntimeError
    with a traceback) and a partial Gloo launch (HOROVOD_SIZE/RANK alone: hvd.init() waited 30 s, then aborted)
    stop with a UserError naming what is set, what is missing and how to run as one process."""
    import pytest
    from utils.errors import UserError
    stale = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    engine = engines.detect_engine(stale)
    assert (engine.name, engine.source) == ("multi_worker", "SLURM_STEP_NUM_TASKS")
    with pytest.raises(UserError) as error:
        engines.check_launch_environment(engine, environ=stale)
    assert str(error.value) == (
        "SLURM_STEP_NUM_TASKS=2 asks for the multi_worker engine over 2 processes started by srun, but SLURM_LOCALID, "
        "SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE are not set (set: SLURM_STEP_NUM_TASKS, SLURM_PROCID): "
        "variables left from another job, or set by hand? Start the processes with srun (or `python -m runtime.launch "
        "--nproc N main.py ...`), or run as one process: unset SLURM_STEP_NUM_TASKS")
    step = dict(stale, SLURM_LOCALID="0", SLURM_STEP_NODELIST="localhost", SLURM_STEP_TASKS_PER_NODE="2")
    engines.check_launch_environment(engines.detect_engine(step), environ=step)  # what srun sets: no error

    partial = {"HOROVOD_SIZE": "2", "HOROVOD_RANK": "1"}
    engine = engines.detect_engine(partial)
    assert (engine.name, engine.source, engine.describe()) == ("horovod", "HOROVOD_SIZE",
                                                               "horovod (from HOROVOD_SIZE)")
    with pytest.raises(UserError, match=r"^HOROVOD_SIZE=2 asks for the horovod engine over 2 processes started by "
                       r"horovodrun, but HOROVOD_LOCAL_RANK, .*HOROVOD_GLOO_RENDEZVOUS_PORT are not set \(set: "
                       r"HOROVOD_RANK, HOROVOD_SIZE\).* run as one process: unset HOROVOD_SIZE$"):
        engines.check_launch_environment(engine, horovod_over_mpi=True, environ=partial)
    mpi = {"OMPI_COMM_WORLD_SIZE": "2"}
    engines.check_launch_environment(engines.detect_engine(mpi), horovod_over_mpi=True, environ=mpi)  # MPI's own
    with pytest.raises(UserError, match="unset OMPI_COMM_WORLD_SIZE$"):  # a Horovod without MPI needs the Gloo set
        engines.check_launch_environment(engines.detect_engine(mpi), horovod_over_mpi=False, environ=mpi)
    assert engines.detect_engine({}).describe() == "single (no launcher variable set)"


def test_inference_under_a_partial_launcher_environment_is_refused_for_that_not_for_several_gpus(monkeypatch):
    """`main.py --mode predict` with a stale SLURM_STEP_NUM_TASKS=2 (or HOROVOD_SIZE=2) and not the rest of what srun
    (horovodrun) sets was refused with the original's "Only single GPU inference is implemented.", which sent the
    user looking for GPUs; the line now names the variables set and missing, as the training modes' does."""
    from tests._cli import main_in_process
    for name in ("TF_CONFIG", "RN50_ENGINE") + engines.MPI_SIZE_VARIABLES + engines.SLURM_STEP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for partial, named in (({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"},
                            "SLURM_STEP_NUM_TASKS=2 asks for the multi_worker engine over 2 processes started by srun"),
                           ({"HOROVOD_SIZE": "2"}, "HOROVOD_SIZE=2 asks for the horovod engine over 2 processes")):
        with monkeypatch.context() as patch:
            for name, value in partial.items():
                patch.setenv(name, value)
            result = main_in_process("--mode", "predict", "--to_predict", os.devnull, "--batch_size", "1", check=False)
        assert result.returncode == 2
        assert result.stderr.startswith("ERROR: " + named) and "Only single GPU" not in result.stderr, result.stderr
        assert len(result.stderr.splitlines()) == 1


def test_the_wait_signals_are_held_for_a_multi_process_start_and_delivered_as_usual_before_the_wait(capsys):
    """main.py blocks SIGINT/SIGTERM/SIGHUP from before TensorFlow starts its threads until the wait for the other
    workers is over (utils/distributed.WorkerWait's watcher sees them pending). One sent before the wait (during
    TensorFlow's import) is delivered to the command wrapper as the wait starts: its usual line and status."""
    import signal
    import threading
    from utils import distributed
    from utils.errors import command
    seen = {}

    @command
    def main(argv=None):
        with engines.wait_signals_blocked(engines.Engine("single")):
            seen["single"] = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        with engines.wait_signals_blocked(engines.Engine("multi_worker", size=2)):
            seen["held"] = set(engines.WAIT_SIGNALS) <= signal.pthread_sigmask(signal.SIG_BLOCK, [])
            # to this thread: in a test process other threads (TensorFlow's, started before) would take one sent to
            # the process; in main.py they start under the block
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            seen["pending"] = signal.SIGTERM in signal.sigpending()
            distributed.deliver_pending_wait_signals()
            seen["not reached"] = True

    assert main() == 143
    assert seen == {"single": False, "held": True, "pending": True}
    assert capsys.readouterr().err.startswith("INTERRUPTED: {} stopped by SIGTERM;".format(__name__))
    assert not set(engines.WAIT_SIGNALS) & signal.pthread_sigmask(signal.SIG_BLOCK, [])  # unblocked on leaving
