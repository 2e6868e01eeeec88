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


def test_main_py_workers_started_without_a_gpu_are_said_to_run_on_the_cpu_unless_cpu_is_passed(capsys, monkeypatch):
    """An 8-GPU recipe run on a machine without GPUs started 8 CPU workers, said only by rank 0's note (an audit,
    2026-12-08): the launcher says it once, when it checks main.py's flags; with --cpu the CPU is meant, and another
    script's flags are its own."""
    from runtime import launch
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # (no GPU for visible_gpus, whatever the machine has)
    args = ["--mode", "training_benchmark", "--batch_size", "2"]
    launch.check_script_args("main.py", args, 8)
    assert capsys.readouterr().err == ("runtime.launch: no GPU visible: the 8 workers run on the CPU (pass --cpu to "
                                       "say the CPU is meant)\n")
    launch.check_script_args("main.py", args + ["--cpu"], 8)
    launch.check_script_args("tests/_dist_signal_worker.py", ["x", "wait"], 8)
    assert capsys.readouterr().err == ""


def test_the_launcher_names_the_worker_that_caused_the_stop_not_one_that_followed(tmp_path):
    """Worker 1 exits first, but with PeerStopped's status (it stopped because another worker did): the launcher
    waits for the cause, rank 0, names it and exits with its status."""
    result = _launch("tests/_dist_signal_worker.py", tmp_path, "peer")
    assert result.returncode == 2, result.stderr
    assert "runtime.launch: worker 0 (rank 0, pid" in result.stderr and "exited with code 2" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "runtime.launch: job failed: worker 0 exited with code 2"
    assert "worker 1 (rank 1" not in result.stderr


def test_an_error_every_worker_prints_is_shown_once_and_rank_0_is_named(tmp_path):
    """Both workers meet the same bad input; worker 1 says it and exits first. Rank 0's ERROR line is the one shown
    (worker 1's, the same, is not shown again: said in one line), rank 0 is named (it gets BAD_INPUT_WAIT s to say
    it rather than being terminated), and worker 1's own WARNING line, which differs, is shown."""
    result = _launch("tests/_dist_signal_worker.py", tmp_path, "same_error")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stdout.splitlines() if "started, local rank" not in line]
    # worker 1's own warning waited for rank 0 to say it, until rank 0's output ended
    assert lines == ["WARNING: the dataset has no manifest", "ERROR: --num_classes 5 cannot hold the labels 1..10",
                     "[worker 1] WARNING: shard 3 of worker 1 is short"], result.stdout
    assert result.stderr.splitlines()[-4:] == [
        "runtime.launch: worker 0 (rank 0, pid {}) exited with code 2".format(
            result.stderr.split("(rank 0, pid ")[1].split(")")[0]),
        "runtime.launch: worker 1 printed the same WARNING line (not shown again)",
        "runtime.launch: worker 1 printed the same ERROR line (not shown again)",
        "runtime.launch: job failed: worker 0 exited with code 2"], result.stderr


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


def test_a_launcher_whose_stdout_closes_stops_its_workers_and_ends_as_a_closed_pipe_does(tmp_path):
    """`python -m runtime.launch ... | head`: the launcher's relay died on the broken pipe, nobody read the workers'
    pipes any more, and a worker writing on blocked for good (a hang; a training's output was lost under status
    0). Now the workers get SIGTERM (a training checkpoints), their pipes are drained, and the launcher ends as a
    tool whose stdout closed."""
    script = tmp_path / "spam.py"
    script.write_text("for i in range(200000):\n    print('line', i, 'x' * 60)\n")
    process = subprocess.Popen([PYTHON, "-m", "runtime.launch", "--nproc", "1", str(script)], cwd=ROOT, env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline().startswith(b"line 0 ")
    process.stdout.close()  # the reader goes, as `head -1` does
    assert process.wait(timeout=60) == 128 + signal.SIGPIPE
    stderr = process.stderr.read().decode()
    assert stderr.splitlines()[-1] == (
        "INTERRUPTED: runtime.launch stopped by SIGPIPE; the workers were sent SIGTERM (a training stops at its "
        "next step, with a checkpoint): run the same command again to resume")
    assert "Traceback" not in stderr


def test_launcher_forwards_a_closed_terminals_sighup_to_every_worker(tmp_path):
    """The workers run in their own sessions, so a closed terminal's SIGHUP reached only the launcher, which died
    at once and left them training, orphaned, their output lost."""
    process = _launch_ready_workers(tmp_path, "wait")
    process.send_signal(signal.SIGHUP)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert sorted(os.listdir(tmp_path)) == ["got-0-SIGHUP", "got-1-SIGHUP", "ready-0", "ready-1"]


def test_after_a_ctrl_c_the_launcher_waits_for_every_worker_and_exits_130(tmp_path):
    # A worker that stopped on the forwarded SIGINT exits 130 (main.py's training does, after its checkpoint): that
    # is no failure to stop the others for, or rank 0's checkpoint would be cut short.
    process = _launch_ready_workers(tmp_path, "ctrl_c")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert sorted(os.listdir(tmp_path)) == ["ready-0", "ready-1", "stopped-0"]
    assert "terminating" not in stderr and "job failed" not in stderr


def test_a_worker_blocked_after_rank_0_stopped_on_a_ctrl_c_is_killed_after_the_grace(tmp_path):
    """A Ctrl-C during start-up can leave a worker blocked in the collective its peer left, where no signal reaches
    it: the job waited forever (seen 2026-12-05: over 10 minutes, a second Ctrl-C did nothing). Once rank 0 has
    stopped on the signal, a worker still running --grace seconds later is killed with one line, and the job
    exits 130 as an interrupted one, not as a failure."""
    process = subprocess.Popen([PYTHON, "-m", "runtime.launch", "--nproc", "2", "--grace", "1",
                                "tests/_dist_signal_worker.py", str(tmp_path), "stuck"], cwd=ROOT, env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not all(os.path.exists(tmp_path / "ready-{}".format(r)) for r in range(2)):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "stopped-0" in os.listdir(tmp_path)
    lines = [line for line in stderr.splitlines() if line.startswith("runtime.launch")]
    assert len(lines) == 1 and lines[0].startswith("runtime.launch: worker 1 (pid ")
    assert lines[0].endswith("had not stopped 1 s after rank 0 stopped on the signal (blocked in a collective rank 0 "
                             "left; it had nothing to save): killed")


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
    assert errors == ["ERROR: Unknown command line arg: --batch (did you mean --batch_size?)"]


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

        def stdout_lost(self):
            pass

    monkeypatch.setattr(launch, "Launcher", Recorder)
    saved = {signum: signal.getsignal(signum)
             for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert launch.main(["--nproc", "2", str(tmp_path / "job.py")]) == 0
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert seen["handlers"] == (signal.SIG_IGN, seen["forward"])


# What worker 1 printed after the launcher's INTERRUPTED line when a Ctrl-C reached a 2-worker run during start-up
# (1 run of 6, 2026-12-05): rank 0 had stopped, so worker 1's broadcast of the initial variables was aborted.
ABORT_OUTPUT = [
    b"E0000 00:00:1796515200.123456    4801 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
    b"UNAVAILABLE: recvmsg:Connection reset by peer\n",
    b"Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
    b"/tensorflow.WorkerService/RecvBuf:\n",
    b':{"created":"@1796515200.123456789","description":"Error received from peer ipv4:127.0.0.1:57949",'
    b'"grpc_message":"recvmsg:Connection reset by peer","grpc_status":14}\n',
    b"/w/.venv/lib/python3.11/site-packages/keras/src/layers/layer.py:1581: UserWarning: Layer 'conv2d' looks like "
    b"it has unbuilt state, but Keras is not able to trace the layer `call()` in order to build it automatically. "
    b"Possible causes:\n",
    b"1. The `call()` method of your layer may be crashing. Try to `__call__()` the layer eagerly ...\n",
    b"2. If the `call()` method is correct, then you may need to implement the `def build(self, input_shape)` ...\n",
    b"Exception encountered: ''{{function_node __wrapped__CollectiveBcastRecv_device_/job:worker/replica:0/task:1/"
    b"device:CPU:0}} Collective ops is aborted by: recvmsg:Connection reset by peer\n",
    b"Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
    b"/tensorflow.WorkerService/RecvBuf:\n",
    b':{"created":"@1796515200.123456789","grpc_message":"recvmsg:Connection reset by peer","grpc_status":14}\n',
    b"The error could be from a previous operation. Restart your program to reset. [Op:CollectiveBcastRecv] "
    b"name: ''\n",
    b"  warnings.warn(\n",
]
# Another run (2026-12-05): the gRPC detail in another form, and the coordination service's lost tasks.
ABORT_OUTPUT_2 = [
    b"E0000 00:00:1796516316.996769   11928 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
    b"UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:35551: Failed to connect "
    b"to remote host: Connection refused\n",
    b"Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
    b"/tensorflow.WorkerService/CompleteInstance:\n",
    b':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"failed to connect to all addresses; last '
    b'error: UNKNOWN: ipv4:127.0.0.1:35551: Failed to connect to remote host: Connection refused"}\n',
    b"E0000 00:00:1796516317.100000   11928 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
    b"UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n",
    b"/job:worker/replica:0/task:1\n",
    b"The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, "
    b"eviction) to debug further. [type.googleapis.com/tensorflow.CoordinationServiceError='']\n",
]
# A peer killed (kill -9) mid-training, 2026-12-07: the survivor's ring all-reduce aborts.
ABORT_OUTPUT_3 = [
    b"E0000 00:00:1796653400.123456   20111 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: recvmsg:Connection "
    b"reset by peer\n",
    b"Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling "
    b"/tensorflow.WorkerService/RecvBuf:\n",
    b':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection reset by peer"}\n',
    b"E0000 00:00:1796653400.123999   20111 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
    b"UNAVAILABLE: recvmsg:Connection reset by peer\n",
]
INTERRUPTED = b"INTERRUPTED: main.py stopped by SIGINT; its work is not complete; run the same command again\n"


def _pumped(lines, capsysbinary, interrupt_at=0, filter_abort=True):
    """(stdout lines, stderr) of launch._pump for worker 1 printing `lines`; the launcher forwards the interrupt
    just before line `interrupt_at`."""
    from runtime import launch
    import threading
    state = {"read": 0}

    class Stream:
        def readline(self):
            line = lines[state["read"]] if state["read"] < len(lines) else b""
            state["read"] += 1
            return line

        def close(self):
            pass

    launch._pump(Stream(), 1, False, threading.Lock(), lambda: state["read"] > interrupt_at, filter_abort)
    out, err = capsysbinary.readouterr()
    return out.splitlines(keepends=True), err.decode()


def test_after_an_interrupt_the_aborted_collectives_output_of_a_worker_is_one_count(capsysbinary):
    """Only the lines above go (11, counted once), after the interrupt; before it, and without the
    filter (--verbose), everything is shown."""
    before = [b"Current step: 0\n", ABORT_OUTPUT[0]]
    out, err = _pumped(before + ABORT_OUTPUT + [INTERRUPTED], capsysbinary, interrupt_at=len(before))
    assert out == [b"[worker 1] " + line for line in before + [INTERRUPTED]]
    assert err == ("runtime.launch: 11 line(s) of worker 1's output on the collectives aborted by the interrupt or a "
                   "worker's stop not shown (RN50_VERBOSE=1 shows them)\n")
    out, err = _pumped(ABORT_OUTPUT_2 + [INTERRUPTED], capsysbinary)
    assert out == [b"[worker 1] " + INTERRUPTED] and err.startswith("runtime.launch: 6 line(s) of worker 1's")
    out, err = _pumped(ABORT_OUTPUT + [INTERRUPTED], capsysbinary, filter_abort=False)
    assert (len(out), err) == (len(ABORT_OUTPUT) + 1, "")
    peer_stopped = b"ERROR: worker 1 stopped: a collective with the other workers failed (UnavailableError) ...\n"
    out, err = _pumped(ABORT_OUTPUT_3 + [peer_stopped], capsysbinary)
    assert out == [b"[worker 1] " + peer_stopped] and err.startswith("runtime.launch: 4 line(s) of worker 1's")


def test_abort_lines_that_come_just_before_the_launcher_sees_the_failure_are_counted_not_shown(capsysbinary):
    """A peer killed with -9 resets the connections as it exits: a worker may print its abort lines before the
    launcher has reaped the killed one (a newcomer's audit saw six lines shown, 2026-12-07). An abort line met before
    a failure is known waits up to launch.ABORT_SETTLE seconds for one; a line that is no abort line does not wait."""
    import threading
    import time
    from runtime import launch
    lines = [b"Current step: 16\n"] + ABORT_OUTPUT_3

    class Stream:
        def __init__(self):
            self.left = list(lines)

        def readline(self):
            return self.left.pop(0) if self.left else b""

        def close(self):
            pass

    failed_at = time.monotonic() + 0.3  # the launcher learns of the failure 0.3 s after the first abort line
    launch._pump(Stream(), 0, False, threading.Lock(), lambda: time.monotonic() > failed_at)
    out, err = capsysbinary.readouterr()
    assert out.splitlines(keepends=True) == [b"Current step: 16\n"]  # (rank 0 unprefixed)
    assert err.decode().startswith("runtime.launch: {} line(s) of worker 0's output".format(len(ABORT_OUTPUT_3)))


def test_the_sigterm_the_launcher_sends_after_a_failure_is_said_to_be_its_own(capsysbinary):
    """After worker 0 was killed, the survivor's "Received signal SIGTERM" read as if the user had sent it (an
    audit, 2026-12-07): once the launcher terminates the others it names itself and the failure on that line; a
    SIGTERM line before that (the user's, forwarded) is shown as printed."""
    import threading
    from runtime import launch
    said = b"Received signal SIGTERM: stopping at the next step the workers agree on (send it again to exit at " \
        b"once)\n"
    for terminated_by, expected in ((None, said), (0, said.replace(
            b"SIGTERM:", b"SIGTERM (sent by runtime.launch, after worker 0's failure):"))):
        lines = [b"Current step: 3\n", said]

        class Stream:
            def readline(self):
                return lines.pop(0) if lines else b""

            def close(self):
                pass

        launch._pump(Stream(), 1, False, threading.Lock(), terminated_by=lambda: terminated_by)
        out = capsysbinary.readouterr().out.splitlines(keepends=True)
        assert out == [b"[worker 1] Current step: 3\n", b"[worker 1] " + expected]


def test_the_launcher_filters_the_aborted_collectives_once_a_worker_has_failed(monkeypatch):
    """A worker killed (or stopped on its own ERROR) aborts its peers' collectives as an interrupt does: from its
    exit on, the pumps filter those lines. A worker that exited 0 is no failure."""
    from runtime import launch
    launcher = launch.Launcher.__new__(launch.Launcher)
    launcher.interrupted = False

    class Exited:
        def __init__(self, code):
            self.code = code

        def poll(self):
            return self.code

    for codes, stopping in (((None, None), False), ((0, None), False), ((-9, None), True), ((None, 2), True)):
        launcher.processes = [Exited(code) for code in codes]
        assert launcher._stopping() is stopping
    launcher.processes, launcher.interrupted = [Exited(None)], True
    assert launcher._stopping()


def test_after_an_interrupt_other_warnings_and_a_real_traceback_are_shown_whole(capsysbinary):
    other_warning = [b"/w/x.py:3: UserWarning: Layer 'dense' looks like it has unbuilt state, but ...\n",
                     b"Exception encountered: ''shapes (3, 4) and (5,) are incompatible''\n", b"  warnings.warn(\n"]
    traceback = [b"Traceback (most recent call last):\n", b'  File "main.py", line 160, in <module>\n',
                 b"tensorflow.python.framework.errors_impl.InternalError: bad\n"] + ABORT_OUTPUT[:3]
    # a line that looks like a status continuation but follows no abort line is the worker's own
    lines = [b"/job:worker/replica:0/task:1\n"] + other_warning + traceback + [b"ERROR: a real failure\n"]
    out, err = _pumped(lines, capsysbinary)
    assert (out, err) == ([b"[worker 1] " + line for line in lines], "")


def test_repeated_error_and_warning_lines_are_shown_once_and_different_ones_all():
    """launch.RepeatedLines on captured lines: what several workers print alike is shown once (rank 0's when rank 0
    says it, whichever came first), with one note naming the others; everything else is shown, in each worker's
    order."""
    from runtime import launch
    now = [0.0]
    lines = launch.RepeatedLines(wait=5.0, clock=lambda: now[0])
    error = b"ERROR: --num_classes 5 cannot hold dataset d's labels 1..10\n"
    assert lines.feed(1, error) == []  # held: rank 0 may say it too
    assert lines.feed(2, b"ERROR: worker 2's own problem\n") == []
    assert lines.feed(0, b"Current step: 0\n") == [(0, b"Current step: 0\n")]  # other lines pass at once
    assert lines.feed(0, error) == [(0, error)]  # rank 0's, not held
    assert lines.feed(3, error) == []  # said already
    assert lines.end(1) == []  # worker 1's held line was rank 0's
    assert lines.end(0) == [(2, b"ERROR: worker 2's own problem\n")]  # differs: shown when rank 0 is done
    assert lines.notes() == ["runtime.launch: workers 1, 3 printed the same ERROR line (not shown again)"]

    # rank 0 never says it: the first worker's is shown when it has waited long enough, the others' not again
    lines = launch.RepeatedLines(wait=5.0, clock=lambda: now[0])
    warning = b"WARNING: the learning rate warms up the whole run\n"
    assert lines.feed(1, warning) == [] and lines.feed(2, warning) == []
    now[0] = 4.9
    assert lines.expire() == []
    now[0] = 5.0
    assert lines.expire() == [(1, warning)]
    assert lines.release() == []
    assert lines.notes() == ["runtime.launch: worker 2 printed the same WARNING line as worker 1 (not shown again)"]

    # a worker's next line releases what it held, in its order; a line said twice by each worker is shown twice
    lines = launch.RepeatedLines(wait=5.0, clock=lambda: now[0])
    assert lines.feed(1, warning) == []
    assert lines.feed(1, b"worker 1 stopped with the others at step 10\n") == [
        (1, warning), (1, b"worker 1 stopped with the others at step 10\n")]
    assert lines.feed(0, warning) == []  # worker 1's was shown first: not again
    assert lines.feed(0, warning) == [(0, warning)] and lines.feed(1, warning) == []
    assert lines.notes() == ["runtime.launch: worker 0 printed the same WARNING line as worker 1 (not shown again)",
                             "runtime.launch: worker 1 printed the same WARNING line (not shown again)"]
    assert launch._ranks([5, 1, 2, 3]) == "workers 1-3, 5" and launch._ranks([4]) == "worker 4"

    # a Ctrl-C during start-up: each worker stops with the same line, which was shown twice (2026-12-07)
    lines = launch.RepeatedLines(wait=5.0, clock=lambda: now[0])
    interrupted = b"INTERRUPTED: main.py stopped by SIGINT; its work is not complete; run the same command again\n"
    assert lines.feed(1, interrupted) == [] and lines.feed(0, interrupted) == [(0, interrupted)]
    assert lines.end(1) == [] and lines.end(0) == []
    assert lines.notes() == ["runtime.launch: worker 1 printed the same INTERRUPTED line (not shown again)"]


def test_horovodrun_through_runtime_horovodrun_reads_as_one_run(capsys, monkeypatch):
    """runtime/horovodrun.py around horovodrun's run_commandline (a stand-in writing what horovodrun wrote for a
    2-process job whose workers both found --num_classes too small, 2026-12-06): the ERROR line once, one note, and
    one line with the worker's status instead of horovodrun's RuntimeError traceback and status 1."""
    from runtime import horovodrun
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")  # what quiet.setup would set, restored after the test
    error = "ERROR: --num_classes 5 cannot hold dataset d's labels 1..10 (10 classes); pass --num_classes 10 or more\n"

    def failing_job():
        assert sys.argv[0] == "horovodrun" and sys.argv[1:3] == ["-np", "2"]
        sys.stderr.write("[1]<stderr>:" + error)
        sys.stderr.write("[0]<stderr>:" + error)
        sys.stderr.write("[0]<stderr>:WARNING: rank 0's own\n")
        print("Process 1 exit with status code 2.")
        raise RuntimeError("Horovod detected that one or more processes exited with non-zero status, thus causing "
                           "the job to be terminated. The first process to do so was:\nProcess name: 1\nExit code: 2\n")

    assert horovodrun.main(["-np", "2", "python", "main.py"], failing_job, install_filter=False) == 2
    out, err = capsys.readouterr()
    assert out == "Process 1 exit with status code 2.\n"
    assert err.splitlines() == ["[1]<stderr>:" + error.strip(), "[0]<stderr>:WARNING: rank 0's own",
                                "runtime.horovodrun: process 0 printed the same ERROR line as process 1 (not shown "
                                "again)",
                                "runtime.horovodrun: job failed: process 1 exited with code 2"]
    assert sys.argv[0] != "horovodrun"  # restored

    def killed_job():  # what horovodrun wrote after a kill -9 of process 0, 2026-12-08
        print("Process 0 exit with status code 137.")
        print("Terminating remaining workers after failure of Process 0.")
        print("[1]<stdout>:Received signal SIGTERM: stopping at the next step the workers agree on (they do every 10 "
              "steps) (send it again to exit at once)")
        sys.stderr.write("[1]<stderr>:[2026-12-08 01:28:18.625953: E /tmp/horovod-0.28.1/horovod/common/operations.cc"
                         ":697] [1]: Horovod background loop uncaught exception: [/tmp/horovod-0.28.1/third_party/"
                         "gloo/gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:21927: Connection reset by "
                         "peer\n")
        sys.stderr.write("[1]<stderr>:ERROR: worker 1 stopped: a collective with the other workers failed\n")
        raise RuntimeError("Horovod detected that one or more processes exited with non-zero status, thus causing "
                           "the job to be terminated. The first process to do so was:\nProcess name: 0\n"
                           "Exit code: 137\n")

    assert horovodrun.main(["-np", "2", "python", "main.py"], killed_job, install_filter=False) == 137
    out, err = capsys.readouterr()
    assert out.splitlines()[2] == ("[1]<stdout>:Received signal SIGTERM (sent by horovodrun, after process 0's "
                                   "failure): stopping at the next step the workers agree on (they do every 10 steps) "
                                   "(send it again to exit at once)")
    assert err.splitlines() == ["[1]<stderr>:ERROR: worker 1 stopped: a collective with the other workers failed",
                                "runtime.horovodrun: 1 line of Horovod's on a connection a stopped process closed "
                                "not shown (RN50_VERBOSE=1 shows them)",
                                "runtime.horovodrun: job failed: process 0 exited with code 137"]
    monkeypatch.setenv("RN50_VERBOSE", "1")
    assert horovodrun.main(["-np", "2", "python", "main.py"], killed_job, install_filter=False) == 137
    assert "Connection reset by peer" in capsys.readouterr().err
    monkeypatch.delenv("RN50_VERBOSE")

    def other_failure():
        raise RuntimeError("could not find a usable network interface\nmore detail")

    assert horovodrun.main(["-np", "2", "python", "main.py"], other_failure, install_filter=False) == 1
    assert capsys.readouterr().err == "ERROR: horovodrun: could not find a usable network interface\n"
    assert horovodrun.main(["-np", "2", "python", "main.py"], lambda: None, install_filter=False) == 0

    def interrupted_job():  # horovodrun's launcher registers its handlers, then a Ctrl-C reaches it
        import os
        from horovod.runner import gloo_run
        event = gloo_run.register_shutdown_event()
        os.kill(os.getpid(), signal.SIGINT)
        assert event.wait(5)  # horovodrun's own handler still ran: it stops the workers
        print("[0]<stdout>:training stopped by a signal at step 20; checkpoint written")

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert horovodrun.main(["-np", "2", "python", "main.py"], interrupted_job, install_filter=False) == 130
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert capsys.readouterr().err == ("INTERRUPTED: the workers stopped on SIGINT (horovodrun sends them SIGTERM) at "
                                       "a checkpoint; run the same command again to resume\n")
    from horovod.runner import gloo_run
    assert gloo_run.register_shutdown_event.__name__ == "register_shutdown_event"  # put back
