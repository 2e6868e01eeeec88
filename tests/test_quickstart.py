"""scripts/quickstart.sh: a Ctrl-C stops it (status 130, nothing after the training runs) and the same command then
continues the interrupted run from its checkpoint instead of deleting it. A short run (8 steps at 32 px) in a child
shell, signalled as a terminal's Ctrl-C is: the whole process group."""
import os
import signal
import subprocess
import sys
import time

from tests._cli import ROOT, child_env

STEPS = 8


def _start(out):
    command = ["bash", "scripts/quickstart.sh", "--num_iter", STEPS, "--iter_unit", "batch",
               "--checkpoint_interval", 1, "--no_progress"]
    return subprocess.Popen([str(part) for part in command], cwd=ROOT, start_new_session=True,
                            env=child_env(OUT=str(out), SIZE="32", PYTHON=sys.executable),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ctrl_c_stops_the_quickstart_and_the_same_command_continues_it(tmp_path):
    out = tmp_path / "quickstart"
    process = _start(out)
    deadline = time.monotonic() + 600
    while not (out / "model.ckpt-2.index").exists():  # training has run two steps
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    assert "INTERRUPTED: main.py stopped by SIGINT; checkpoint written at step" in stderr
    assert "== 3/4" not in stdout and "quickstart done" not in stdout  # the script stopped with main.py
    stopped = int(stdout.split("training stopped by a signal at step ")[1].split(";")[0])
    assert 2 <= stopped < STEPS

    process = _start(out)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    assert f"== continuing the interrupted quickstart in {out}" in stdout
    assert f"Current step: {stopped}" in stdout
    assert "quickstart done in" in stdout and "(this run, which continued an interrupted one)" in stdout
    assert f"checkpoint   {out}/model.ckpt-{STEPS}" in stdout
    assert (out / ".quickstart-done").exists()
