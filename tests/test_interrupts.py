"""Every tool ends an interrupt the same way (utils/errors.command, docs/RELIABILITY.md#interrupts): one line on
stderr (what stopped, what was kept, how to go on), status 130 for SIGINT / 143 for SIGTERM, no traceback, no
temporary file left. Each test signals a real tool once it is demonstrably busy; the in-process unit tests of the
wrapper are in tests/test_errors.py, of the clean-up in tests/test_export.py."""
import glob
import os
import signal
import sys
import time

import numpy as np
import pytest

from tests._data_helpers import write_tfrecord_shards
from tests._reliability_helpers import NUM_CLASSES, ROOT, SMALL, Process

pytestmark = pytest.mark.shallow

STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def stderr_lines(process):
    return process.stderr().strip().splitlines()


def group_ends(pgid, timeout=20):
    """Whether every process of the group has ended (and been reaped) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    """A validation split and a model_dir holding a checkpoint of random weights (no training needed)."""
    import tensorflow as tf
    from model import checkpoint, resnet
    root = tmp_path_factory.mktemp("evaluation")
    data_dir, model_dir = root / "data", root / "model"
    write_tfrecord_shards(str(data_dir), "validation", 1, 8, 32, num_classes=NUM_CLASSES)
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32, weight_init="fan_in", seed=1)
    os.makedirs(model_dir)
    entries = dict(checkpoint.model_entries(model, "resnet50"), global_step=tf.constant(3, tf.int64))
    checkpoint.write(str(model_dir / "model.ckpt-3"), entries,
                     checkpoint.metadata("resnet50", NUM_CLASSES, 32, False, False))
    return {"data_dir": str(data_dir), "model_dir": str(model_dir)}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_evaluate_stops_on_a_signal_with_one_line(tmp_path, evaluation, signum):
    # --iter_unit batch repeats the validation split: the evaluation would run for hours.
    process = Process(["--mode", "evaluate", "--data_dir", evaluation["data_dir"], "--model_dir",
                       evaluation["model_dir"], "--results_dir", tmp_path / "results", "--batch_size", 4,
                       "--num_iter", 1000000, "--iter_unit", "batch", *SMALL], tmp_path, "evaluate")
    try:
        process.wait_for(lambda: "Starting Model Evaluation" in process.stdout(), what="the evaluation")
        process.signal(signum)
        assert process.finish(timeout=120) == STATUS[signum], process.stderr()[-3000:]
    finally:
        process.kill()
    assert stderr_lines(process) == ["INTERRUPTED: main.py stopped by {}; no evaluation result was written; run the "
                                     "same command again".format(signal.Signals(signum).name)]
    assert "Traceback" not in process.stdout() and "Model evaluation finished" not in process.stdout()


def test_ctrl_c_in_dataprep_stops_the_workers_quietly_and_keeps_complete_shards(tmp_path):
    """Ctrl-C reaches the whole process group, the spawned writers included: they ignore it, the parent
    terminates them."""
    from PIL import Image
    source = tmp_path / "source.JPEG"
    noise = np.random.default_rng(0).integers(0, 256, (800, 800), dtype=np.uint8)
    Image.fromarray(noise, "L").save(source, "JPEG", quality=75)  # greyscale: every image is converted (slow)
    for label in ("apple", "mango"):
        os.makedirs(tmp_path / "train" / label)
        for index in range(150):
            os.link(source, tmp_path / "train" / label / "{}_{}.JPEG".format(label, index))
    output = tmp_path / "out"
    process = Process(["-m", "dataprep.build_tfrecords", "--train_directory", tmp_path / "train",
                       "--output_directory", output, "--train_shards", 2, "--num_workers", 2, "--no_progress"],
                      tmp_path, "dataprep", command=[sys.executable], new_session=True)
    try:
        process.wait_for(lambda: glob.glob(str(output / ".tmp.train-*")), what="a worker writing a shard")
        process.signal_group(signal.SIGINT)
        assert process.finish(timeout=120) == 130, process.stderr()[-3000:]
    finally:
        process.kill()
    assert stderr_lines(process) == ["INTERRUPTED: dataprep.build_tfrecords stopped by SIGINT; complete shards are "
                                     "kept; run the same command with --resume to finish"]
    assert "Traceback" not in process.stdout()
    assert group_ends(process.popen.pid), "a worker outlived the interrupted parent"
    assert not glob.glob(str(output / "train-*")), "no shard can have been completed yet"


SLOW_WRITE = """
import runpy, sys, time
sys.path.insert(0, {root!r})
from model import export

write_atomically = export._write_atomically


def slow(path, write):
    def write_then_wait(temporary):
        write(temporary)
        print("written to", temporary, flush=True)
        time.sleep(300)
    return write_atomically(path, write_then_wait)


export._write_atomically = slow
sys.argv = ["export_frozen_graph.py", *sys.argv[1:]]
runpy.run_path("export_frozen_graph.py", run_name="__main__")
"""


def test_ctrl_c_while_an_export_writes_leaves_no_temporary_file(tmp_path):
    """The export waits after writing its temporary file (the only change to the tool), so the signal lands
    while the file is there, every time."""
    output = tmp_path / "graph" / "rn50.pb"
    process = Process(["--image_size", 32, "--num_classes", NUM_CLASSES, "--compute_format", "NHWC",
                       "--input_format", "NHWC", "--output_file", output], tmp_path, "export",
                      command=[sys.executable, "-c", SLOW_WRITE.format(root=ROOT)])
    try:
        process.wait_for(lambda: "written to" in process.stdout(), what="the temporary GraphDef")
        (temporary,) = glob.glob(str(output) + ".tmp-*")
        assert os.path.getsize(temporary) > 1_000_000  # the whole graph (random ResNet-50 weights)
        process.signal(signal.SIGINT)
        assert process.finish(timeout=120) == 130, process.stderr()[-3000:]
    finally:
        process.kill()
    assert stderr_lines(process) == ["INTERRUPTED: export_frozen_graph.py stopped by SIGINT; no output written to "
                                     "{}".format(output)]
    assert os.listdir(output.parent) == []


def _read_until(fd, text, timeout=600):
    """What the terminal `fd` (a pty's master) shows until `text` appears; fails on timeout or its end."""
    import select
    seen, deadline = b"", time.monotonic() + timeout
    while text.encode() not in seen:
        assert time.monotonic() < deadline, "timeout waiting for {!r}:\n{}".format(text, seen[-3000:])
        if select.select([fd], [], [], 1.0)[0]:
            chunk = os.read(fd, 65536)
            assert chunk, "the terminal's output ended before {!r}:\n{}".format(text, seen[-3000:])
            seen += chunk
    return seen.decode(errors="replace")


def test_a_closed_terminal_s_sighup_stops_training_with_a_checkpoint(tmp_path):
    """SIGHUP (the terminal was closed) stops a training run as SIGTERM does: after the current step, with a
    checkpoint there, status 0, even though every write to its stdout/stderr now fails (EIO). It used to kill the
    run at once (status 129), losing the steps since the last checkpoint (here: all of them)."""
    import pty
    import subprocess
    from tests._reliability_helpers import checkpoint_steps, env
    data_dir, results = tmp_path / "data", tmp_path / "results"
    write_tfrecord_shards(str(data_dir), "train", 1, 8, 32, num_classes=NUM_CLASSES)
    master, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "main.py", "--mode", "train", "--data_dir", str(data_dir),
                                "--results_dir", str(results), "--batch_size", "4", "--num_iter", "100000",
                                "--iter_unit", "batch", "--checkpoint_interval", "100000", *SMALL],
                               cwd=ROOT, env=env(), stdin=terminal, stdout=terminal, stderr=terminal,
                               start_new_session=True)
    os.close(terminal)
    try:
        _read_until(master, "- (0, 2) imgs_per_sec")
        os.close(master)  # the terminal goes: the run's writes to it fail from here on
        process.send_signal(signal.SIGHUP)
        assert process.wait(timeout=300) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert checkpoint_steps(str(results))[-1] >= 2  # the steps it ran are kept, not only the start's checkpoint
