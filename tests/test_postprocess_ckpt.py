"""postprocess_ckpt.py: dense -> 1x1 conv classifier, for our checkpoints and the original's TF1 checkpoints."""

import numpy as np
import pytest
import tensorflow as tf

from model import checkpoint, resnet
from model.layers.quantization import QuantizationConfig
from tests import _shallow
from tests._cli import tool_in_process
from tests.test_checkpoint_names import random_values, write_tf1_checkpoint

pytestmark = pytest.mark.shallow

NUM_CLASSES = 5


def run(*args):
    """`python postprocess_ckpt.py args` called in-process (tests/_cli.py)."""
    return tool_in_process("postprocess_ckpt", *args, check=False)


def images():
    return np.random.RandomState(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")


@pytest.fixture(scope="module")
def qat_checkpoint(tmp_path_factory):
    """A QAT-trained resnet50 checkpoint in the object-based format earlier versions of the runner wrote."""
    directory = tmp_path_factory.mktemp("ours")
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32, seed=1,
                               quantization=QuantizationConfig())
    tf.function(lambda x: model(x, training=True))(tf.constant(images()))
    import keras
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)  # as the runner: it then holds the trainables' checkpoint keys
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=tf.Variable(42, dtype=tf.int64))
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=5, checkpoint_name="model.ckpt")
    manager.save(checkpoint_number=42)
    return directory, model


def test_ours_round_trip(qat_checkpoint, tmp_path):
    directory, model = qat_checkpoint
    output = tmp_path / "out"
    result = run("--input", str(directory), "--output", str(output))  # a model_dir is accepted
    assert result.returncode == 0, result.stderr
    assert "Rewriting checkpoint completed" in result.stdout
    latest = tf.train.latest_checkpoint(str(output))
    assert latest.endswith("model.ckpt-42")
    # What it did and could not carry over, as for a named checkpoint: the reshape, and the size it does not know.
    assert f"Reshaped resnet50/output/dense/kernel [2048, {NUM_CLASSES}] -> [1, 1, 2048, {NUM_CLASSES}] (the " \
           "1x1-conv classifier)" in result.stdout
    assert "does not record its image size (an object-based checkpoint of an earlier version of this port), so " \
           "neither does the checkpoint written: pass --image_size to the tools that read it" in result.stdout
    info = checkpoint.inspect(latest)
    assert (info.format, info.step, info.use_final_conv, info.has_quantization_ranges) == ("named", 42, True, True)
    converted = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32, use_final_conv=True,
                                   quantization=QuantizationConfig())
    report = checkpoint.restore_model(converted, info, "resnet50", "the converted model")
    assert report.restored == len(converted.variables)
    assert converted.get_layer("output").dense.kernel.shape == (1, 1, 2048, NUM_CLASSES)
    np.testing.assert_allclose(converted(images(), training=False), model(images(), training=False), atol=1e-4)
    # QAT ranges came along too.
    ranges = {v.path: v.numpy() for v in model.variables if "act_quant" in v.path}
    for variable in converted.variables:
        if variable.path in ranges:
            np.testing.assert_array_equal(variable.numpy(), ranges[variable.path])


def test_existing_output_is_refused_unless_overwrite(qat_checkpoint, tmp_path):
    directory, _ = qat_checkpoint
    (tmp_path / "out").mkdir()
    result = run("--input", str(directory), "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "ERROR: --output" in result.stderr and "already exists" in result.stderr and "--overwrite" in result.stderr
    result = run("--input", str(directory), "--output", str(tmp_path / "out"), "--overwrite")
    assert result.returncode == 0
    assert "also holds" not in result.stdout  # an empty directory: nothing else to say
    # an earlier checkpoint's files and evaluation events stay (nothing of the user's is deleted), said not to be
    # this checkpoint's (an audit's TensorBoard showed the old evaluation beside the new checkpoint, 2026-12-07)
    (tmp_path / "out" / "eval").mkdir()
    (tmp_path / "out" / "model.ckpt-64.index").write_bytes(b"")
    result = run("--input", str(directory), "--output", str(tmp_path / "out"), "--overwrite")
    assert result.returncode == 0
    assert (f"Note: --output {tmp_path / 'out'} also holds what this run did not write (eval, model.ckpt-64.index): "
            "not this checkpoint's (an evaluation's events in it would be another checkpoint's); remove them if they "
            "are not wanted") in result.stdout.splitlines()
    assert (tmp_path / "out" / "eval").is_dir() and (tmp_path / "out" / "model.ckpt-64.index").exists()


def test_missing_checkpoint(tmp_path):
    result = run("--input", str(tmp_path / "model.ckpt-1"), "--output", str(tmp_path / "out"))
    assert result.returncode == 2 and "ERROR: --input" in result.stderr and "no such checkpoint" in result.stderr
    assert not (tmp_path / "out").exists()


def test_tf1_round_trip(tmp_path):
    rng = np.random.RandomState(3)
    values = random_values("resnet50", rng, layers=_shallow.LAYERS)
    values["global_step"] = np.array(1234, dtype=np.int64)
    values["resnet50/output/dense/kernel/Momentum"] = rng.normal(size=(2048, NUM_CLASSES)).astype("f4")
    prefix = write_tf1_checkpoint(str(tmp_path), values)
    output = tmp_path / "out"
    result = run("--input", prefix, "--output", str(output))
    assert result.returncode == 0, result.stderr
    assert "Rewriting checkpoint completed" in result.stdout
    new = str(output / "new.ckpt")
    assert tf.train.latest_checkpoint(str(output)) == new
    reader = tf.train.load_checkpoint(new)
    assert reader.get_variable_to_shape_map()["resnet50/output/dense/kernel"] == [1, 1, 2048, NUM_CLASSES]
    assert reader.get_tensor("global_step") == 1234
    np.testing.assert_array_equal(reader.get_tensor("resnet50/output/dense/kernel/Momentum"),
                                  values["resnet50/output/dense/kernel/Momentum"])
    dense = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    checkpoint.load(dense, prefix, "resnet50")
    conv = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32, use_final_conv=True)
    assert checkpoint.inspect(new).format == "tf1"  # the original's format in, the original's format out
    checkpoint.load(conv, new, "resnet50")
    np.testing.assert_allclose(conv(images(), training=False), dense(images(), training=False), rtol=1e-4,
                               atol=1e-3)
    assert not (tmp_path / "out" / "labels.txt").exists()  # none beside it, and said
    assert "No class names to copy (no labels.txt beside the input checkpoint): predict on the output shows class " \
           "indices, unless given --labels_file or a --data_dir with a labels.txt" in result.stdout.splitlines()
    wrong = run("--input", prefix, "--output", str(tmp_path / "out2"), "--dense_layer", "resnet50/nope/kernel")
    assert wrong.returncode == 2 and "--dense_layer resnet50/nope/kernel is not in" in wrong.stderr


def test_named_round_trip_keeps_everything_and_records_the_final_conv(tmp_path):
    from tests._checkpoint_helpers import randomise, save_named
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    randomise(model, 4)
    _, prefix, _ = save_named(tmp_path / "in", model, step=12)
    (tmp_path / "in" / "labels.txt").write_text("".join(f"class {k}\n" for k in range(NUM_CLASSES)))
    output = tmp_path / "out"
    result = run("--input", str(tmp_path / "in"), "--output", str(output))
    assert result.returncode == 0, result.stderr
    # The class names stay beside the checkpoint, so predict on the output still names classes.
    assert (output / "labels.txt").read_text() == (tmp_path / "in" / "labels.txt").read_text()
    assert f"Copied the class names to {output / 'labels.txt'}" in result.stdout
    assert f"Reshaped resnet50/output/dense/kernel [2048, {NUM_CLASSES}] -> [1, 1, 2048, {NUM_CLASSES}] (the 1x1-conv " \
           "classifier)" in result.stdout.splitlines()
    latest = tf.train.latest_checkpoint(str(output))
    assert latest.endswith("model.ckpt-12")
    info = checkpoint.inspect(latest)
    assert (info.format, info.step, info.use_final_conv, info.image_size) == ("named", 12, True, 32)
    before, after = tf.train.load_checkpoint(prefix), tf.train.load_checkpoint(latest)
    assert set(before.get_variable_to_shape_map()) == set(after.get_variable_to_shape_map())
    np.testing.assert_array_equal(after.get_tensor("resnet50/conv2d/conv2d/kernel/Momentum"),
                                  before.get_tensor("resnet50/conv2d/conv2d/kernel/Momentum"))
    conv = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32, use_final_conv=True)
    assert checkpoint.restore_model(conv, info, "resnet50", "conv").restored == len(conv.variables)
    np.testing.assert_allclose(conv(images(), training=False), model(images(), training=False), rtol=1e-4,
                               atol=1e-4)


def small_named_checkpoint(directory, step=3):
    """A named checkpoint with metadata, a dense classifier and one large tensor (what convert_named reads)."""
    import os
    os.makedirs(directory, exist_ok=True)
    entries = {checkpoint.GLOBAL_STEP_KEY: np.int64(step),
               "resnet50/output/dense/kernel": np.ones([8, NUM_CLASSES], np.float32),
               "resnet50/conv2d/conv2d/kernel": np.ones([100_000], np.float32)}
    prefix = checkpoint.write(str(directory / f"model.ckpt-{step}"), entries,
                              dict(checkpoint.metadata("resnet50", NUM_CLASSES, 32, False, False), step=step))
    checkpoint.write_state_file(str(directory), [f"model.ckpt-{step}"])
    return prefix


def single_error(result):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("ERROR: "), result.stderr
    return lines[0]


def test_an_output_that_cannot_be_created_is_one_line(tmp_path):
    small_named_checkpoint(tmp_path / "in")
    (tmp_path / "a_file").write_text("x")
    assert single_error(run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "a_file" / "out"))) == \
        f"ERROR: --output {tmp_path / 'a_file' / 'out'} cannot be created: {tmp_path / 'a_file'} is not a directory"


def test_a_corrupt_tensor_is_one_line_and_leaves_no_output(tmp_path):
    prefix = small_named_checkpoint(tmp_path / "in")
    with open(prefix + ".data-00000-of-00001", "r+b") as handle:
        handle.seek(1000)  # inside the large kernel; the metadata, written last, stays readable
        handle.write(bytes(1000))
    error = single_error(run("--input", prefix, "--output", str(tmp_path / "out")))
    assert error.startswith(f"ERROR: checkpoint {prefix} is corrupt or truncated (resnet50/")
    assert not (tmp_path / "out").exists()


def test_a_failed_write_removes_the_output_it_created_but_not_one_it_was_given(tmp_path, monkeypatch):
    from utils.errors import UserError
    small_named_checkpoint(tmp_path / "in")

    def full_disk(prefix, *_):
        raise UserError(f"cannot write checkpoint {prefix} (No space left on device)")

    monkeypatch.setattr(checkpoint, "write", full_disk)
    error = single_error(run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")))
    assert error == f"ERROR: cannot write checkpoint {tmp_path / 'out' / 'model.ckpt-3'} (No space left on device)"
    assert not (tmp_path / "out").exists()  # a retry needs no --overwrite
    (tmp_path / "given").mkdir()
    (tmp_path / "given" / "notes.txt").write_text("mine")
    single_error(run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "given"), "--overwrite"))
    assert (tmp_path / "given" / "notes.txt").read_text() == "mine"


def test_an_output_a_running_training_holds_is_refused_before_anything_is_written(tmp_path):
    """Until 2026-12-06 --overwrite wrote another run's checkpoint, state file and labels.txt into a model_dir a
    training held: every reader took the foreign checkpoint as the newest until the training's next save."""
    import os
    import socket
    from utils.run_lock import RunLock
    small_named_checkpoint(tmp_path / "in")
    output = tmp_path / "training"
    with RunLock(str(output), argv=["main.py", "--mode", "train"]):  # as a training in another process holds it
        (output / "labels.txt").write_text("its own\n")
        before = sorted(os.listdir(output))
        error = single_error(run("--input", str(tmp_path / "in"), "--output", str(output), "--overwrite"))
        assert error.startswith(f"ERROR: output {output} is in use by another run (pid {os.getpid()} on host "
                                f"{socket.gethostname()}, started ")
        assert error.endswith("); wait for it to end or use another --output")
        assert sorted(os.listdir(output)) == before and (output / "labels.txt").read_text() == "its own\n"
    result = run("--input", str(tmp_path / "in"), "--output", str(output), "--overwrite")
    assert result.returncode == 0, result.stderr
    assert ".run.lock" not in os.listdir(output)  # the tool's own lock ends with it


def test_dense_layer_on_our_checkpoint_is_said_unused(tmp_path):
    prefix = small_named_checkpoint(tmp_path / "in")
    result = run("--input", prefix, "--output", str(tmp_path / "out"), "--dense_layer", "resnet50/fc/kernel")
    assert result.returncode == 0, result.stderr
    assert f"Note: --dense_layer resnet50/fc/kernel is not used: {prefix} records its architecture, resnet50, whose " \
           "classifier kernel is resnet50/output/dense/kernel" in result.stdout
    assert tf.train.load_checkpoint(str(tmp_path / "out" / "model.ckpt-3")).get_variable_to_shape_map()[
        "resnet50/output/dense/kernel"] == [1, 1, 8, NUM_CLASSES]


def test_help_says_where_the_output_goes_by_default():
    """--output's default, output_dir in the current directory, was not in the help."""
    text = " ".join(run("--help").stdout.split())  # (wrapped at the terminal's width)
    assert ("--output OUTPUT output directory (must not exist; default: output_dir in the current directory, as the "
            "original)") in text


class _ReaderGoneAfter:
    """stdout behind `| head -n`: `lines` lines pass, then the pipe is closed."""

    def __init__(self, lines):
        self.left = lines

    def write(self, text):
        if self.left <= 0:
            raise BrokenPipeError(32, "Broken pipe")
        self.left -= text.count("\n")
        return len(text)

    def flush(self):
        pass


@pytest.mark.parametrize("lines, written", [(1, False), (3, True)])
def test_a_closed_stdout_says_whether_the_checkpoint_was_written(tmp_path, monkeypatch, capsys, lines, written):
    """`| head -1` ended the tool with status 141 and nothing said, its output removed (until 2026-12-06): now the
    INTERRUPTED line says so; a pipe closed after the checkpoint is written says it is there."""
    import postprocess_ckpt
    import sys
    from utils.errors import GuardedStdout
    small_named_checkpoint(tmp_path / "in")
    monkeypatch.setattr(sys, "stdout", GuardedStdout(_ReaderGoneAfter(lines)))
    output = tmp_path / "out"
    assert postprocess_ckpt.main(["--input", str(tmp_path / "in"), "--output", str(output)]) == 141
    kept = (f"the checkpoint was written to {output}; only the lines after it are lost" if written else
            f"no checkpoint was written to --output {output}; run the same command again")
    assert capsys.readouterr().err == f"INTERRUPTED: postprocess_ckpt stopped by SIGPIPE; {kept}\n"
    assert output.exists() == written
    if written:
        assert checkpoint.latest_checkpoint(str(output)).endswith("model.ckpt-3")
