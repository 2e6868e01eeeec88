"""scripts/quickstart.sh: a Ctrl-C stops it (status 130, nothing after the training runs) and the same command then
continues the interrupted run from its checkpoint instead of deleting it. A short run (8 steps at 32 px) in a child
shell, signalled as a terminal's Ctrl-C is: the whole process group."""
import signal
import sys

from tests._reliability_helpers import Process

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
