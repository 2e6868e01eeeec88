"""Multi-worker training (utils/distributed.py, runtime/launch.py): two workers on loopback, CPU only.

- engine level: the averaged gradient equals the mean of the per-shard gradients computed in one process,
  under MultiWorkerMirroredStrategy and under Horovod (tests/_dist_grad_worker.py; under Horovod in the same job as
  the end-to-end run);
- end to end: `python -m runtime.launch --nproc 2 main.py --mode train ...` (and `horovodrun -np 2 --gloo`):
  identical weights on both workers (tests/_dist_train_worker.py records them), only rank 0 logs, checkpoints and
  evaluates (`train_and_evaluate`: the resumed run, and the Horovod run), a second run resumes from the checkpoint;
- the engine each process detects from its environment.
The launcher's own behaviour (a dead worker, signals, its flags) is tested in tests/test_launch.py.
The Horovod tests FAIL when horovod.tensorflow is not importable (install: scripts/install_horovod.sh), unless
ALLOW_NO_HOROVOD=1.
"""

import glob
import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from tests._data_helpers import write_tfrecord_shards
from utils.errors import UserError
from tests.test_launch import PYTHON, _env, _launch, _run

pytestmark = pytest.mark.shallow


def _check(result):
    if result.returncode != 0:
        raise AssertionError("exit {}:\n{}\n{}".format(result.returncode, result.stdout[-4000:],
                                                       result.stderr[-4000:]))
    return result


def _horovodrun():
    path = shutil.which("horovodrun") or os.path.join(os.path.dirname(PYTHON), "horovodrun")
    return path


def _require_horovod():
    result = subprocess.run([PYTHON, "-c", "import horovod.tensorflow"], capture_output=True, text=True)
    if result.returncode != 0 or not os.path.exists(_horovodrun()):
        if os.environ.get("ALLOW_NO_HOROVOD") == "1":
            pytest.skip("horovod not importable and ALLOW_NO_HOROVOD=1")
        pytest.fail("horovod.tensorflow is not importable: run `bash scripts/install_horovod.sh` "
                    "(or set ALLOW_NO_HOROVOD=1 to skip the Horovod tests)\n" + result.stderr[-1000:])


def _horovod(*args, env=None):
    """horovodrun as the recipes run it when PYTHON has Horovod: through runtime/horovodrun.py."""
    return _run([PYTHON, "-m", "runtime.horovodrun", "-np", "2", "--gloo", "-H", "localhost:2", PYTHON,
                 *map(str, args)], env=env)


# ------------------------------------------------------------------------------------------ engine level
def _grad_results(out_dir):
    results = [json.load(open(os.path.join(out_dir, "grad-rank{}.json".format(r)))) for r in range(2)]
    assert [r["rank"] for r in results] == [0, 1]
    return results


def _assert_averaged(results, lr=0.5):
    per_shard = [[np.array(g) for g in shard] for shard in results[0]["reference_grads"]]
    mean = [(a + b) / 2 for a, b in zip(*per_shard)]
    assert all(np.abs(a - b).max() > 1e-3 for a, b in zip(*per_shard))  # the shards do differ
    for worker in results:
        assert worker["size"] == 2 and worker["num_replicas"] == 2
        for variant in ("plain", "loss_scale"):
            averaged = [np.array(g) for g in worker[variant]["averaged_grads"]]
            for got, want in zip(averaged, mean):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            # first TF1-momentum step: w1 = w0 - lr * mean gradient (not the sum)
            for before, after, grad in zip(worker[variant]["weights_before"], worker[variant]["weights_after"], mean):
                np.testing.assert_allclose(np.array(after), np.array(before) - lr * grad, rtol=1e-5, atol=1e-6)
        assert worker["flag_agreed_at_call"] == 10  # rank 1 raised it at call 3; agreed at the 10-call sync
    for a, b in zip(results[0]["plain"]["weights_after"], results[1]["plain"]["weights_after"]):
        np.testing.assert_array_equal(np.array(a), np.array(b))
    return per_shard


def test_multi_worker_gradient_is_the_mean_of_the_workers_gradients(tmp_path):
    _check(_launch("tests/_dist_grad_worker.py", tmp_path))
    results = _grad_results(tmp_path)
    assert results[0]["backend"] == "multi_worker"
    per_shard = _assert_averaged(results)
    # What Keras 3 alone would do (why utils/distributed.py takes the reduction over): it SUMS the replicas'
    # gradients in optimizer.apply.
    total = [a + b for a, b in zip(*per_shard)]
    for before, after, grad in zip(results[0]["keras_default"]["weights_before"],
                                   results[0]["keras_default"]["weights_after"], total):
        np.testing.assert_allclose(np.array(after), np.array(before) - 0.5 * grad, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("dist_data"))
    write_tfrecord_shards(directory, "train", 4, 6, 32, num_classes=5)
    write_tfrecord_shards(directory, "validation", 1, 4, 32, num_classes=5)
    return directory


def _train_args(data_dir, results_dir, run_iter, weights_dir, mode="train"):
    """main.py's flags, run by tests/_dist_train_worker.py, which records each worker's weights in weights_dir."""
    return ["tests/_dist_train_worker.py", weights_dir, "--mode", mode, "--arch", "resnet50", "--batch_size", 2,
            "--num_iter", 3, "--iter_unit", "batch", "--run_iter", run_iter, "--data_dir", data_dir, "--num_classes", 5,
            "--image_size", 32, "--results_dir", results_dir, "--seed", 3, "--no_progress", "--display_every", 1,
            "--lr_init", 0.01]


def _checkpoint_steps(directory):
    return sorted(int(path.rsplit("-", 1)[1].split(".")[0]) for path in glob.glob(os.path.join(directory, "*.index")))


def _check_two_worker_run(result, results_dir, weights_dir, backend, expected_step, start_step):
    stdout = result.stdout
    # no TF start-up noise from the workers (utils/quiet.py) and no false crash report at the end (main.py's final
    # barrier); nor from horovodrun's own process, which imports TensorFlow before any worker starts
    # (runtime/horovodrun.py: until 2026-12-06 its start-up lines came first, twice)
    output = (stdout + result.stderr).splitlines()
    for noise in ("cuInit", "absl::InitializeLog", "NodeDef mentions", "StartAbort",
                  "triggered tf.function retracing", "oneDNN custom operations", "cuda drivers", "cpu_feature_guard"):
        assert not [line for line in output if noise in line], noise
    records = [line for line in open(os.path.join(results_dir, "log.json")) if line.startswith("DLLL")]
    # rank 0 alone logs: one PARAMETER dump per run in log.json, no DLL line from worker 1
    assert sum('"PARAMETER"' in line and '"arch"' in line for line in records) == (2 if start_step else 1)
    if backend == "multi_worker":
        # said once, by rank 0; worker 1 resumed at the same step, or Distribution.check_same_step would have
        # stopped the run (tested below)
        assert "Current step: {}".format(start_step) in stdout.splitlines()
        assert "Current step" not in stdout.replace("Current step: {}\n".format(start_step), "", 1)
        assert not any(line.startswith("[worker 1] DLL") for line in stdout.splitlines())
        assert "Num GPUs 2" in stdout
        # --batch_size is per replica: the global batch and how the replicas are spread are said and recorded
        assert "Global Batch Size 4 (2 processes x 1 replica, multi_worker)" in stdout.splitlines()
        parameters = [json.loads(line.split(" ", 1)[1]) for line in records if '"PARAMETER"' in line][-1]["data"]
        assert (parameters["replicas"], parameters["processes"], parameters["engine"]) == (2, 2, "multi_worker")
    weights = [json.load(open(os.path.join(weights_dir, "weights-rank{}.json".format(r)))) for r in range(2)]
    assert [w["backend"] for w in weights] == [backend, backend]
    assert [w["step"] for w in weights] == [expected_step, expected_step]
    assert weights[0]["trainable_sha256"] == weights[1]["trainable_sha256"]
    assert _checkpoint_steps(results_dir)[-1] == expected_step


def test_two_workers_train_identically_and_resume(tmp_path, data_dir):
    results_dir, weights_dir = str(tmp_path / "results"), str(tmp_path / "weights")
    first = _check(_launch(*_train_args(data_dir, results_dir, 2, weights_dir)))
    _check_two_worker_run(first, results_dir, weights_dir, "multi_worker", expected_step=2, start_step=0)
    assert _checkpoint_steps(results_dir) == [0, 2]  # rank 0's initial and final checkpoints, nothing else
    assert sorted(os.listdir(weights_dir)) == ["weights-rank0.json", "weights-rank1.json"]
    # resume: both workers restore step 2 and finish the 3 steps; then rank 0 alone evaluates while worker 1 waits
    # (its model built outside the strategy: in its scope, creating variables is a collective worker 1 never joins)
    second = _check(_launch(*_train_args(data_dir, results_dir, -1, weights_dir, mode="train_and_evaluate")))
    _check_two_worker_run(second, results_dir, weights_dir, "multi_worker", expected_step=3, start_step=2)
    assert "Evaluated 4 of 4 images" in second.stdout and "[worker 1] Starting Model Evaluation" not in second.stdout
    # its batch is said to be rank 0's alone (after training's "Global Batch Size" over both workers, 2026-12-07)
    assert ("Note: rank 0 evaluates alone, on one device, so this batch is --batch_size's, as the original's; the "
            "other replica waits") in second.stdout.splitlines()
    assert any('"top1_accuracy"' in line for line in open(os.path.join(results_dir, "log.json")))


def test_horovod_gradient_is_the_mean_and_two_workers_train_identically(tmp_path, data_dir):
    """One `horovodrun -np 2` job: each worker first runs the engine-level gradient check, then main.py's
    train_and_evaluate (rank 0 evaluates)."""
    _require_horovod()
    results_dir, weights_dir, grad_dir = (str(tmp_path / name) for name in ("results", "weights", "grad"))
    result = _check(_horovod(*_train_args(data_dir, results_dir, -1, weights_dir, mode="train_and_evaluate"),
                             env=_env(DIST_GRAD_DIR=grad_dir)))
    results = _grad_results(grad_dir)
    assert results[0]["backend"] == "horovod"
    _assert_averaged(results)
    _check_two_worker_run(result, results_dir, weights_dir, "horovod", expected_step=3, start_step=0)
    assert result.stdout.count("Current step: 0") == 1  # rank 0 alone (each worker checked it resumes there)
    assert result.stdout.count("Evaluated 4 of 4 images") == 1  # rank 0 alone evaluates


def test_inference_modes_refuse_several_workers(tmp_path):
    result = _launch("main.py", "--mode", "inference_benchmark", "--batch_size", 2, "--num_iter", 1,
                     "--iter_unit", "batch", "--synthetic_data_size", 32, "--results_dir", tmp_path)
    # Refused once, by the launcher, before any worker starts.
    assert (result.returncode, result.stderr.strip(), result.stdout) == (
        2, "ERROR: Only single GPU inference is implemented. (--mode inference_benchmark runs in one process on one "
           "device: run main.py directly, without runtime.launch, horovodrun, mpirun, srun or RN50_ENGINE=mirrored)",
        "")


def test_a_run_into_a_busy_model_dir_stops_every_worker_with_one_line_each(tmp_path, data_dir):
    """Rank 0 cannot take model_dir's lock (another run holds it): it says so, and worker 1, which would otherwise
    build the model and fail in a collective rank 0 never joins (a 45-line traceback), stops at the start with
    one line too."""
    from utils.run_lock import RunLock
    results_dir = tmp_path / "results"
    with RunLock(str(results_dir)):  # another run's, as far as the workers can tell
        result = _launch(*_train_args(data_dir, results_dir, -1, str(tmp_path / "weights")))
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "Current step" not in output
    assert "ERROR: model_dir {} is in use by another run (pid {}".format(results_dir, os.getpid()) in output
    assert "[worker 1] ERROR: worker 1 stopped: another worker could not start this run (its ERROR line says " \
           "why)" in output.splitlines()
    # worker 1 may exit first, but the launcher names rank 0 as the cause (worker 1's status says it followed)
    assert "runtime.launch: job failed: worker 0 exited with code 2" in output.splitlines()
    assert _checkpoint_steps(results_dir) == []


def test_a_collective_that_failed_because_another_worker_is_gone_is_one_line():
    """The worker that is left gets TensorFlow's UnavailableError (connection refused, reset) from the collective:
    its line says so instead of a traceback; one process, and errors of another kind, are left as they are."""
    import tensorflow as tf
    from utils.distributed import Distribution
    from utils.errors import UserError
    gone = tf.errors.UnavailableError(None, None, "Graph execution error:\n... Connection refused")
    failure = Distribution(tf.distribute.get_strategy(), rank=0, size=2).peer_failure(gone)
    assert isinstance(failure, UserError) and str(failure) == (
        "worker 0 stopped: a collective with the other workers failed (UnavailableError) because another worker "
        "stopped (its own ERROR line, or the launcher's line naming it when it was killed, says why) or lost its "
        "connection")
    assert Distribution(tf.distribute.get_strategy()).peer_failure(gone) is None
    assert Distribution(tf.distribute.get_strategy(), rank=1, size=2).peer_failure(
        tf.errors.InvalidArgumentError(None, None, "a shape")) is None
    # Keras re-raises an error from a layer's call (building the model: variables are broadcast from rank 0) as a
    # TypeError when it cannot rebuild TensorFlow's, with the collective's error as its context.
    try:
        try:
            raise gone
        except tf.errors.UnavailableError:
            raise TypeError("UnavailableError.__init__() missing 2 required positional arguments") from None
    except TypeError as wrapped:
        failure = Distribution(tf.distribute.get_strategy(), rank=1, size=2).peer_failure(wrapped)
    assert str(failure).startswith("worker 1 stopped: a collective with the other workers failed (UnavailableError)")
    assert Distribution(tf.distribute.get_strategy(), rank=1, size=2).peer_failure(TypeError("a bug")) is None
    # Horovod's all-reduce after a peer was killed (seen 2026-12-05, in two wordings: a 40-line traceback on rank 0)
    for message, sign in (("Horovod has been shut down. This was caused by an exception on one of the ranks ...",
                           "Horovod has been shut down"),
                          ("[gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:19877: Connection reset by peer\n"
                           "\t [[{{node HorovodGroupedAllreduce_AddN_17_0_AddN_71_0}}]]", "Horovod: Connection reset by peer")):
        error = tf.errors.UnknownError(None, None, "Graph execution error:\n... " + message)
        assert str(Distribution(tf.distribute.get_strategy(), rank=0, size=2).peer_failure(error)) == (
            "worker 0 stopped: a collective with the other workers failed ({}) because another worker "
            "stopped (its own ERROR line, or the launcher's line naming it when it was killed, says why) or lost its "
            "connection".format(sign))
    assert Distribution(tf.distribute.get_strategy(), rank=0, size=2).peer_failure(
        tf.errors.UnknownError(None, None, "Connection reset by peer")) is None  # not a Horovod op's


def test_workers_start_together_and_one_that_cannot_stops_the_others():
    from utils.distributed import Distribution
    from utils.errors import UserError

    class _Workers(Distribution):
        """Two workers whose sum over workers is given (no collective runs)."""

        def __init__(self, rank, total):
            super().__init__(None, rank=rank, size=2)
            self.total = total

        def _sum_over_workers(self, value):
            return self.total

    _Workers(rank=1, total=0.0).start_together()  # every worker started
    own = UserError("model_dir m is in use by another run")
    with pytest.raises(UserError) as raised:
        _Workers(rank=0, total=1.0).start_together(own)
    assert raised.value is own  # rank 0 says its own reason
    with pytest.raises(UserError, match=r"^worker 1 stopped: another worker could not start this run \(its ERROR "
                                        r"line says why\)$"):
        _Workers(rank=1, total=1.0).start_together()
    with pytest.raises(UserError) as raised:  # both failed: each says its own reason
        _Workers(rank=1, total=2.0).start_together(own)
    assert raised.value is own
    Distribution(None).start_together()  # one process: nothing to agree on


def test_a_worker_that_resumes_at_another_step_than_rank_0_stops_naming_both():
    """Rank 0 alone says `Current step: N`; every worker first compares its restored step with rank 0's, so a worker
    that restored another checkpoint (a model_dir its node does not share) is said, not trained on silently."""
    from utils.distributed import Distribution
    from utils.errors import UserError

    class _Workers(Distribution):
        def __init__(self, rank, chief_step):
            super().__init__(None, rank=rank, size=2)
            self.chief_step, self.sent = chief_step, None

        def _sum_over_workers(self, value):
            self.sent = value
            return self.chief_step + (value if self.rank else 0.0)  # rank 0's step plus the others' (zero)

    chief = _Workers(rank=0, chief_step=2.0)
    assert chief.check_same_step(2) == 2 and chief.sent == 2.0
    follower = _Workers(rank=1, chief_step=2.0)
    assert follower.check_same_step(2) == 2 and follower.sent == 0.0
    with pytest.raises(UserError, match=r"^worker 1 resumed at step 0 but rank 0 at step 2: the workers did not "
                                        r"restore the same checkpoint \(--model_dir must be on a file system every "
                                        r"worker shares, docs/SCALING.md\)$"):
        _Workers(rank=1, chief_step=2.0).check_same_step(0)
    assert Distribution(None).check_same_step(7) == 7  # one process: no collective


def test_slurm_s_resolver_is_given_the_gpus_this_process_sees_not_nvidia_smi_s(monkeypatch, tmp_path):
    """`srun -n 2` on CPU nodes: TensorFlow's SlurmClusterResolver counted the node's GPUs with `nvidia-smi` and
    crashed (FileNotFoundError) where there is none. It now gets this process's visible GPUs (none here)."""
    from utils import distributed
    step = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_STEP_NODELIST": "localhost",
            "SLURM_STEP_TASKS_PER_NODE": "2", "PATH": str(tmp_path)}  # no nvidia-smi on the PATH
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in step.items():
        monkeypatch.setenv(name, value)
    resolver = distributed.cluster_resolver()
    assert resolver.num_accelerators() == {"GPU": 0}
    assert resolver.cluster_spec().as_dict() == {"worker": ["localhost:8888", "localhost:8889"]}
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)


def _free_port():
    import socket
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def test_a_worker_waiting_for_workers_that_never_come_says_so_and_stops_on_ctrl_c_or_its_deadline(tmp_path):
    """A TF_CONFIG left from another run: the strategy's creation waited for ever for worker 1, in C++ holding the
    GIL, printing nothing and deaf to signals (only kill -9 ended it). Now one line first says which engine was chosen
    from which variable and what it waits for; a SIGINT ends it at once with one line, as does the deadline
    (RN50_WORKER_WAIT_SECONDS) with an ERROR line; nothing was written (no results_dir, no lock)."""
    import signal
    from tests._reliability_helpers import Process
    tf_config = json.dumps({"cluster": {"worker": ["localhost:{}".format(_free_port()),
                                                   "localhost:{}".format(_free_port())]},
                            "task": {"type": "worker", "index": 0}})
    peer = json.loads(tf_config)["cluster"]["worker"][1]
    args = ["--mode", "train", "--data_dir", tmp_path, "--batch_size", 4, "--image_size", 32, "--num_classes", 10,
            "--iter_unit", "batch", "--num_iter", 4]
    waiting = "engine multi_worker (from TF_CONFIG): worker 0 of 2 waiting for the other workers ({}) to start; " \
        .format(peer)
    # SIGTERM too: TensorFlow's preemption notifier took it over during the wait, which then went on (until
    # 2026-12-06); every thread now blocks it, and the watcher sees it pending.
    for signum in (signal.SIGINT, signal.SIGTERM):
        name = signal.Signals(signum).name
        process = Process([*args, "--results_dir", tmp_path / "interrupted"], tmp_path, name,
                          extra_env={"TF_CONFIG": tf_config})
        try:
            process.wait_for(lambda: waiting in process.stdout(), timeout=300, what="the waiting line")
            time.sleep(2)  # inside the C++ wait
            process.signal(signum)
            started = time.monotonic()
            assert process.finish(timeout=30) == -signal.SIGKILL
            assert time.monotonic() - started < 5
        finally:
            process.kill()
        assert process.stdout().strip().splitlines()[-1].startswith(waiting)
        assert process.stderr().strip().splitlines()[-1] == (
            "INTERRUPTED: main.py stopped by {} while waiting for the other workers ({}) to start: no step had run, "
            "nothing to keep (the wait, in TensorFlow's C++, cannot be interrupted: the process was killed, status "
            "137)".format(name, peer))
    process = Process([*args, "--results_dir", tmp_path / "late"], tmp_path, "late",
                      extra_env={"TF_CONFIG": tf_config, "RN50_WORKER_WAIT_SECONDS": "3"})
    try:
        assert process.finish(timeout=300) != 0
    finally:
        process.kill()
    assert process.stderr().strip().splitlines()[-1] == (
        "ERROR: worker 0 of 2 waited for the other workers ({}) to start; they did not within 3 s "
        "(RN50_WORKER_WAIT_SECONDS). If TF_CONFIG is left from another run, unset it to run as one process"
        .format(peer))
    assert not os.path.exists(tmp_path / "interrupted") and not os.path.exists(tmp_path / "late")


def test_a_refused_horovod_rendezvous_is_one_line_not_horovod_s_abort():
    """HOROVOD_* variables left from another job, the rendezvous server gone: hvd.init() retried for about 5 s, then
    aborted in C++ (status 134) after the waiting line. The rendezvous is probed first, in Python."""
    from utils.distributed import check_rendezvous
    port = _free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(UserError, match=r"^Horovod's rendezvous 127.0.0.1:{} cannot be reached \(Connection refused\) "
                       r"within 0.5 s: horovodrun, which serves it, is not running; .* unset HOROVOD_SIZE to run as "
                       r"one process$".format(port)):
        check_rendezvous("127.0.0.1", str(port), seconds=0.5)
    assert time.monotonic() - started < 5
    with pytest.raises(UserError, match=r"^HOROVOD_GLOO_RENDEZVOUS_PORT=http is not a port number$"):
        check_rendezvous("127.0.0.1", "http")
    import socket
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        check_rendezvous("127.0.0.1", str(server.getsockname()[1]), seconds=0.5)  # served: no error


def test_worker_wait_lines_are_built_from_who_and_what_not_cut_from_one_sentence():
    """The lines were cut from one sentence by splitting at its fifth space ("worker 0 of 2 waiting for ..."): a
    caller naming itself in other words got a garbled line. They are now built from the parts."""
    from utils.distributed import WorkerWait
    from utils.engines import Engine
    wait = WorkerWait(Engine("multi_worker", rank=0, size=2, source="TF_CONFIG"), "worker 0 of 2 (node a b)",
                      "the other workers (h:1, h:2) to start", seconds=3, setting="RN50_WORKER_WAIT_SECONDS")
    interrupted, late = wait._lines()
    assert interrupted.startswith("INTERRUPTED: main.py stopped by {signal} while waiting for the other workers "
                                  "(h:1, h:2) to start: no step had run")
    assert late == ("ERROR: worker 0 of 2 (node a b) waited for the other workers (h:1, h:2) to start; they did not "
                    "within 3 s (RN50_WORKER_WAIT_SECONDS). If TF_CONFIG is left from another run, unset it to run as "
                    "one process")
