"""runtime/launch.py: the launcher of N local workers. A dead worker stops the job with a line naming it, signals
reach every worker, each worker's environment (TF_CONFIG on loopback, one GPU), the launcher's flags are never
abbreviated and main.py's are checked once before any worker starts. The workers are tests/_dist_signal_worker.py
(no TensorFlow); training with the launcher is tested in tests/test_distributed.py, which uses these helpers."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests._cli import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
TIMEOUT = 600


def _env(**extra):
    env = dict(os.environ)
    env.update({"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"})
    for key in ("TF_CONFIG", "RN50_ENGINE"):
        env.pop(key, None)
    env.update({key: str(value) for key, value in extra.items()})
    return env


def _run(command, env=None, timeout=TIMEOUT):
    return run_command(command, check=False, env=env or _env(), timeout=timeout)


def _launch(*args, env=None):
    return _run([PYTHON, "-m", "runtime.launch", "--nproc", "2", *map(str, args)], env=env)


def test_launcher_stops_the_job_when_a_worker_dies(tmp_path):
    start = time.monotonic()
    result = _launch("--grace", 2, "tests/_dist_signal_worker.py", tmp_path, "die")
    assert result.returncode != 0
    assert "worker 1 (rank 1, pid" in result.stderr and "killed by signal SIGKILL" in result.stderr
    assert "terminating the other workers" in result.stderr
    assert not os.path.exists(tmp_path / "survived-0")
    assert time.monotonic() - start < 60


def test_the_launcher_names_the_worker_that_caused_the_stop_not_one_that_followed(tmp_path):
    """Worker 1 exits first, but with PeerStopped's status (it stopped because another worker did): the launcher
    waits for the cause, rank 0, names it and exits with its status."""
    result = _launch("tests/_dist_signal_worker.py", tmp_path, "peer")
    assert result.returncode == 2, result.stderr
    assert "runtime.launch: worker 0 (rank 0, pid" in result.stderr and "exited with code 2" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "runtime.launch: job failed: worker 0 exited with code 2"
    assert "worker 1 (rank 1" not in result.stderr


def _launch_ready_workers(out_dir, mode):
    """The launcher of two tests/_dist_signal_worker.py workers in `mode`, once both are waiting for a signal."""
    process = subprocess.Popen([PYTHON, "-m", "runtime.launch", "--nproc", "2", "tests/_dist_signal_worker.py",
                                str(out_dir), mode], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not all(os.path.exists(out_dir / "ready-{}".format(r)) for r in range(2)):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    return process


def test_launcher_forwards_sigterm_to_every_worker(tmp_path):
    process = _launch_ready_workers(tmp_path, "wait")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert sorted(os.listdir(tmp_path)) == ["got-0-SIGTERM", "got-1-SIGTERM", "ready-0", "ready-1"]
    assert "worker 0 started, local rank 0" in stdout and "[worker 1] worker 1 started, local rank 1" in stdout


def test_after_a_ctrl_c_the_launcher_waits_for_every_worker_and_exits_130(tmp_path):
    # A worker that stopped on the forwarded SIGINT exits 130 (main.py's training does, after its checkpoint): that
    # is no failure to stop the others for, or rank 0's checkpoint would be cut short.
    process = _launch_ready_workers(tmp_path, "ctrl_c")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert sorted(os.listdir(tmp_path)) == ["ready-0", "ready-1", "stopped-0"]
    assert "terminating" not in stderr and "job failed" not in stderr


def test_worker_environments_use_loopback_and_one_gpu_each():
    from runtime import launch
    envs = launch.worker_environments(2, [1111, 2222], {"RN50_ENGINE": "single"}, ["4", "5"])
    configs = [json.loads(env["TF_CONFIG"]) for env in envs]
    assert configs[0]["cluster"]["worker"] == ["127.0.0.1:1111", "127.0.0.1:2222"]
    assert [c["task"]["index"] for c in configs] == [0, 1]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs] == ["4", "5"]
    assert all("RN50_ENGINE" not in env for env in envs)
    assert launch.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert launch.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert len(set(launch.free_ports(4))) == 4


def test_launcher_flags_are_not_abbreviated_and_the_script_keeps_its_own(capsys):
    from runtime import launch
    with pytest.raises(SystemExit):
        launch.parse_args(["--npro", "2", "main.py"])
    assert "the following arguments are required: --nproc" in capsys.readouterr().err  # not taken for --nproc
    args = launch.parse_args(["--nproc", "2", "main.py", "--mode", "train", "--batch"])
    assert (args.nproc, args.script, args.script_args) == (2, "main.py", ["--mode", "train", "--batch"])


def test_the_launcher_checks_main_py_flags_once_before_starting_workers(capsys):
    from runtime import launch
    assert launch.main(["--nproc", "2", "main.py", "--mode", "train", "--batch", "8"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == ["ERROR: Unknown command line arg: --batch (did you mean --batch_size?)",
                      "ERROR: Invalid command line arg(s)"]


def test_main_py_help_through_the_launcher_is_main_py_s(capsys):
    """`runtime.launch ... main.py --help` prints main.py's help under main.py's name, once, and starts no worker."""
    from runtime import launch
    with pytest.raises(SystemExit) as stopped:
        launch.main(["--nproc", "2", "main.py", "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: main.py [-h] [--arch ") and out.count("usage: ") == 1


def test_a_signal_the_parent_ignored_is_not_forwarded(monkeypatch, tmp_path):
    """A launcher started with & from a script inherits SIGINT ignored: it stays ignored, so no worker is stopped
    by a Ctrl-C its launcher was never meant to get; SIGTERM is still forwarded."""
    import signal
    from runtime import launch
    seen = {}

    class Recorder:
        def __init__(self, *args, **kwargs):
            pass

        def forward(self, signum, frame=None):
            pass

        def start(self):
            seen["handlers"] = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
            seen["forward"] = self.forward

        def wait(self):
            return 0

    monkeypatch.setattr(launch, "Launcher", Recorder)
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert launch.main(["--nproc", "2", str(tmp_path / "job.py")]) == 0
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert seen["handlers"] == (signal.SIG_IGN, seen["forward"])
