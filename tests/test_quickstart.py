"""scripts/quickstart.sh: a Ctrl-C stops it (status 130, nothing after the training runs) and the same command then
continues the interrupted run from its checkpoint instead of deleting it. A short run (8 steps at 32 px) in a child
shell, signalled as a terminal's Ctrl-C is: the whole process group. Its ResNet-50 has one block per stage
(tests/_shallow.py): the script's steps, signals and continuation do not depend on the depth."""
import signal
import sys

import pytest

from tests._reliability_helpers import Process

pytestmark = pytest.mark.shallow

STEPS = 8


def _start(tmp_path, out, name):
    return Process(["scripts/quickstart.sh", "--num_iter", STEPS, "--iter_unit", "batch", "--checkpoint_interval", 1,
                    "--no_progress"], tmp_path, name, command=["bash"], new_session=True,
                   extra_env={"OUT": str(out), "SIZE": "32", "PYTHON": sys.executable})


def test_ctrl_c_stops_the_quickstart_and_the_same_command_continues_it(tmp_path):
    out = tmp_path / "quickstart"
    process = _start(tmp_path, out, "interrupted")
    process.wait_for((out / "model.ckpt-2.index").exists, poll=0.05, what="two training steps")
    process.signal_group(signal.SIGINT)
    assert process.finish(timeout=300) == 130, process.stderr()[-3000:]
    stdout, stderr = process.stdout(), process.stderr()
    assert "INTERRUPTED: main.py stopped by SIGINT; checkpoint written at step" in stderr
    # main.py's lines say "the same command": the quickstart says which one it means
    assert stderr.strip().splitlines()[-1] == ("== quickstart interrupted: the same quickstart command (same OUT, "
                                               "EPOCHS, SIZE and arguments) continues it")
    assert "== 3/4" not in stdout and "quickstart done" not in stdout  # the script stopped with main.py
    stopped = int(stdout.split("training stopped by a signal at step ")[1].split(";")[0])
    assert 2 <= stopped < STEPS

    process = _start(tmp_path, out, "continued")
    assert process.finish() == 0, process.stderr()[-3000:]
    stdout = process.stdout()
    assert f"== continuing the interrupted quickstart in {out}" in stdout
    assert f"Current step: {stopped}" in stdout
    assert "quickstart done in" in stdout and "(this run, which continued an interrupted one)" in stdout
    assert f"checkpoint   {out}/model.ckpt-{STEPS}" in stdout
    assert (out / ".quickstart-done").exists()


def test_a_quickstart_into_the_out_of_a_running_one_stops_before_it_touches_it(tmp_path):
    """Until 2026-12-06 a second quickstart with other settings rm -rf'd the running one's OUT (its lock file too),
    and the same command said `continuing the interrupted quickstart` and re-ran dataprep into the live data dir."""
    import os
    import socket
    from tests._cli import child_env, run_command
    from utils.run_lock import RunLock, read_lock
    out = tmp_path / "quickstart"
    with RunLock(str(out), argv=["main.py", "--mode", "train_and_evaluate"]):  # the running quickstart's main.py
        (out / ".quickstart-run").write_text("epochs=4 size=32 arguments= \n")
        (out / "model.ckpt-3.index").write_text("its checkpoint")
        before = sorted(os.listdir(out))
        for epochs in ("2", "4"):  # other settings (rm -rf), then the same (continue)
            result = run_command(["bash", "scripts/quickstart.sh"], check=False, env=child_env(
                OUT=str(out), SIZE="32", EPOCHS=epochs, PYTHON=sys.executable))
            assert result.returncode == 2, result.stdout + result.stderr
            assert result.stderr.strip().splitlines() == [
                f"ERROR: {out} is in use by another run (pid {os.getpid()} on host {socket.gethostname()}, started "
                f"{read_lock(str(out))['started']}): a quickstart or training is running there; wait for it to end "
                "or give this one another OUT="]
            assert result.stdout == ""
            assert sorted(os.listdir(out)) == before


def test_a_quickstart_into_the_out_of_another_quickstart_between_its_steps_stops_before_it_touches_it(tmp_path):
    """Between the first one's steps (dataprep done, main.py not yet started; training done, predict not yet) no lock
    in OUT is held: the script's own lock beside OUT, held for its whole run, stops the second one there. Until
    2026-12-07 it rm -rf'd the first one's OUT in those seconds."""
    import fcntl
    import os
    from tests._cli import child_env, run_command
    out = tmp_path / "quickstart"
    out.mkdir()
    (out / "model.ckpt-3.index").write_text("its checkpoint")
    lock = tmp_path / ".quickstart.quickstart.lock"
    with open(lock, "a", encoding="utf-8") as handle:  # the first quickstart, between two of its steps
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write_text("pid 12345 on host first, started 2026-12-07T11:00:00+00:00")
        result = run_command(["bash", "scripts/quickstart.sh"], check=False, env=child_env(
            OUT=str(out), SIZE="32", PYTHON=sys.executable))
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.strip().splitlines() == [
            f"ERROR: {out} is in use by another quickstart (pid 12345 on host first, started "
            "2026-12-07T11:00:00+00:00); wait for it to end or give this one another OUT="]
        assert result.stdout == ""
        assert os.listdir(out) == ["model.ckpt-3.index"]
        assert lock.read_text() == "pid 12345 on host first, started 2026-12-07T11:00:00+00:00"


def test_a_relative_out_is_where_the_caller_is_not_the_repository(tmp_path):
    """`cd ~/projects && OUT=qs bash <repo>/scripts/quickstart.sh` writes to ~/projects/qs: the script works from the
    repository, and until 2026-12-07 took a relative OUT from there. Seen here by the lock beside OUT, held (as a
    running quickstart holds it): the refusal names the caller's directory."""
    import fcntl
    from tests._cli import ROOT, child_env, run_command
    lock = tmp_path / ".qs.quickstart.lock"
    with open(lock, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write_text("pid 12345 on host first, started 2026-12-07T11:00:00+00:00")
        # (PYTHON=/bin/false: were OUT taken elsewhere, the script would stop at its first Python step)
        result = run_command(["bash", f"{ROOT}/scripts/quickstart.sh"], check=False, cwd=str(tmp_path),
                             env=child_env(OUT="qs", PYTHON="/bin/false"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        f"ERROR: {tmp_path}/qs is in use by another quickstart (pid 12345 on host first, started "
        "2026-12-07T11:00:00+00:00); wait for it to end or give this one another OUT=")


def test_a_new_quickstart_says_it_removes_its_out_and_refuses_one_that_is_not_a_quickstarts(tmp_path):
    """A second run of a finished quickstart removed OUT without a word, with what the printed next: commands had
    written there (an audit, 2026-12-08), and an OUT of other files was removed alike. Now the removal is said, and
    an OUT that holds no quickstart is refused before anything runs."""
    from tests._cli import ROOT, child_env, run_command
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    refused = run_command(["bash", f"{ROOT}/scripts/quickstart.sh"], check=False,
                          env=child_env(OUT=str(other), PYTHON=sys.executable))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == (f"ERROR: {other} holds files that are not a quickstart's: give another OUT= (a "
                                      "quickstart recreates its directory)")
    assert (other / "notes.txt").read_text() == "keep me"
    done = tmp_path / "qs"
    (done / "predict").mkdir(parents=True)
    for marker in (".quickstart-run", ".quickstart-done"):
        (done / marker).write_text("epochs=4 size=40 arguments=--cpu\n")
    # (main.py refuses the unknown flag at once: the run stops after the removal and the dataprep)
    result = run_command(["bash", f"{ROOT}/scripts/quickstart.sh", "--no_such_flag"], check=False,
                         env=child_env(OUT=str(done), SIZE="32", PYTHON=sys.executable))
    assert result.returncode != 0
    assert result.stdout.splitlines()[0] == (
        f"== {done} holds a finished quickstart: removing it to start afresh (with whatever else was written there, "
        "the next: commands' results included; another OUT= keeps it)")
    assert not (done / "predict").exists()
