"""Tests of model/checkpoint/write.py: the named format's keys and metadata, atomic saves with retention."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from model import checkpoint
from model.checkpoint_names import tf1_variable_map
from tests._checkpoint_helpers import save_named
from tests._reliability_helpers import full_disk_for
from tests.test_checkpoint_names import NUM_CLASSES


def test_named_keys_are_the_original_names_with_slots_step_and_metadata(trained_model, tmp_path):
    _, prefix, _ = save_named(tmp_path, trained_model)
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    names = set(tf1_variable_map(trained_model, "resnet50"))
    assert names <= set(shapes)
    slots = {name + "/Momentum" for name, v in tf1_variable_map(trained_model, "resnet50").items() if v.trainable}
    assert slots <= set(shapes)
    assert {"global_step", checkpoint.METADATA_KEY} <= set(shapes)
    assert not any("_operations" in key or ".ATTRIBUTES" in key for key in shapes)
    info = checkpoint.inspect(prefix)
    assert (info.format, info.step, info.arch, info.num_classes, info.image_size, info.use_final_conv) == (
        "named", 7, "resnet50", NUM_CLASSES, 32, False)
    meta = json.loads(tf.train.load_checkpoint(prefix).get_tensor(checkpoint.METADATA_KEY))
    assert meta["step"] == 7 and meta["version"] == checkpoint.METADATA_VERSION


def test_retention_keeps_the_newest_and_a_killed_save_leaves_the_previous_one(trained_model, tmp_path):
    writer, _, _ = save_named(tmp_path, trained_model, step=1, max_to_keep=2)
    writer.save(2)
    writer.save(3)
    assert sorted(os.path.basename(p) for p in tf.io.gfile.glob(str(tmp_path / "*.index"))) == [
        "model.ckpt-2.index", "model.ckpt-3.index"]
    assert checkpoint.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
    # A fresh writer (a resumed run) continues the same list.
    again = checkpoint.CheckpointWriter(str(tmp_path), writer.entries, writer.meta, max_to_keep=2)
    again.save(4)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-4")
    assert not os.path.exists(str(tmp_path / "model.ckpt-2.index"))
    assert not tf.io.gfile.glob(str(tmp_path / "*_temp"))


def test_a_write_that_fails_is_one_line_and_leaves_no_temporary_shards(tmp_path, monkeypatch):
    """A full disk while SaveV2 writes (its shards under `<prefix>_temp/`): the UserError names the checkpoint, and
    nothing of it is left (postprocess_ckpt.py and CheckpointWriter.save both rely on it)."""
    from utils.errors import UserError

    def full_disk(prefix, **_):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        with open(prefix + ".data-00000-of-00001", "wb") as handle:
            handle.write(b"half")
        raise tf.errors.ResourceExhaustedError(None, None, f"{prefix}.data-00000-of-00001; No space left on device")

    monkeypatch.setattr(tf.raw_ops, "SaveV2", full_disk)
    prefix = str(tmp_path / "model.ckpt-3")
    with pytest.raises(UserError) as error:
        checkpoint.write(prefix, {"x": np.zeros([2], np.float32)})
    assert str(error.value) == (f"cannot write checkpoint {prefix} ({prefix}_temp/part.data-00000-of-00001; No space "
                                "left on device)")
    assert os.listdir(tmp_path) == []


def test_discard_only_removes_a_runs_only_checkpoint_and_nothing_else(tmp_path):
    writer = checkpoint.CheckpointWriter(str(tmp_path), {"x": tf.Variable([1.0, 2.0])}, {})
    first = writer.save(0)
    (tmp_path / "labels.txt").write_text("a\n")
    writer.discard_only(first)
    assert sorted(os.listdir(tmp_path)) == ["labels.txt"] and writer.latest_checkpoint is None
    first, second = writer.save(0), writer.save(1)
    with pytest.raises(ValueError, match="is not the only checkpoint"):
        writer.discard_only(first)  # a run with two checkpoints trained something: nothing is removed
    assert checkpoint.latest_checkpoint(str(tmp_path)) == second


def test_every_file_and_then_its_directory_is_synced_before_the_state_file_names_it(tmp_path, monkeypatch):
    """Power-loss order: each checkpoint file is fsynced before its rename, the directory after the renames (a
    rename is durable only then), the state file likewise, and an old checkpoint is removed only after the new one
    and its directory entries are on disk."""
    events = []
    real_fsync, real_replace, real_remove = os.fsync, os.replace, os.remove

    def fsync(descriptor):
        path = os.readlink(f"/proc/self/fd/{descriptor}")
        events.append(("sync", os.path.relpath(path, tmp_path)))
        real_fsync(descriptor)

    def replace(source, destination):
        events.append(("rename", os.path.relpath(destination, tmp_path)))
        real_replace(source, destination)

    def remove(path):
        events.append(("remove", os.path.relpath(path, tmp_path)))
        real_remove(path)

    writer = checkpoint.CheckpointWriter(str(tmp_path), {"x": tf.Variable([1.0, 2.0])}, {}, max_to_keep=1)
    writer.save(1)
    for name, function in (("fsync", fsync), ("replace", replace), ("remove", remove)):
        monkeypatch.setattr(os, name, function)
    writer.save(2)
    data, index = "model.ckpt-2.data-00000-of-00001", "model.ckpt-2.index"
    assert events[:5] == [("sync", "model.ckpt-2_temp/part.data-00000-of-00001"), ("rename", data),
                          ("sync", "model.ckpt-2_temp/part.index"), ("rename", index), ("sync", ".")]
    removed = [i for i, event in enumerate(events) if event[0] == "remove"]
    assert sorted(events[i][1] for i in removed) == ["model.ckpt-1.data-00000-of-00001", "model.ckpt-1.index"]
    # The old checkpoint goes only once the synced state file no longer names it.
    assert events[5:8] == [("sync", "checkpoint.tmp"), ("rename", "checkpoint"), ("sync", ".")]
    assert min(removed) == 8 and len(events) == 10
    assert checkpoint.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-2")


def test_a_state_file_that_cannot_be_written_is_one_line_and_keeps_everything_it_names(tmp_path, monkeypatch):
    """The new checkpoint's files are complete but the state file cannot be replaced: the old state file stays,
    naming the old checkpoints, all still on disk (retention deletes only after the new state file is written);
    the unlisted new checkpoint and the empty `checkpoint.tmp` are removed."""
    from utils.errors import UserError
    writer = checkpoint.CheckpointWriter(str(tmp_path), {"x": tf.Variable([1.0, 2.0])}, {}, max_to_keep=2)
    writer.save(1)
    writer.save(2)
    before = sorted(os.listdir(tmp_path))
    state = (tmp_path / "checkpoint").read_text()
    full_disk_for(monkeypatch, lambda path: os.path.basename(path) == "checkpoint.tmp")
    with pytest.raises(UserError) as error:
        writer.save(3)
    assert str(error.value) == (f"cannot write the checkpoint state file {tmp_path}/checkpoint ([Errno 28] No space "
                                f"left on device); the last complete checkpoint is kept: {tmp_path}/model.ckpt-2")
    assert sorted(os.listdir(tmp_path)) == before
    assert (tmp_path / "checkpoint").read_text() == state
    monkeypatch.undo()
    writer.save(3)  # once there is space, retention goes on from the list on disk
    assert checkpoint.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".index")) == ["model.ckpt-2.index",
                                                                             "model.ckpt-3.index"]


def test_a_first_save_that_fails_says_no_earlier_checkpoint_exists(tmp_path, monkeypatch):
    from utils.errors import UserError
    writer = checkpoint.CheckpointWriter(str(tmp_path), {"x": tf.Variable([1.0, 2.0])}, {})
    full_disk_for(monkeypatch, lambda path: os.path.basename(path) == "checkpoint.tmp")
    with pytest.raises(UserError) as error:
        writer.save(0)
    assert str(error.value).endswith("No space left on device); no earlier checkpoint exists")
    assert os.listdir(tmp_path) == [] and writer.latest_checkpoint is None


def test_a_model_dir_moved_while_the_run_goes_is_said_and_not_created_again(tmp_path):
    """`mv model_dir elsewhere` during a training: a save recreated the old path and wrote the next checkpoint
    there, splitting the training's checkpoints between two directories. The writer knows its directory by
    identity; a directory that did not exist yet is created by the first save."""
    from utils.errors import UserError
    directory = tmp_path / "m"
    writer = checkpoint.CheckpointWriter(str(directory), {"x": tf.Variable([1.0, 2.0])}, {})
    writer.save(0)
    writer.save(2)
    os.rename(directory, tmp_path / "moved")
    for replaced in (False, True):
        if replaced:
            directory.mkdir()  # another directory at the old path
        with pytest.raises(UserError) as error:
            writer.save(4)
        assert str(error.value) == (
            f"cannot write checkpoint {directory}/model.ckpt-...: model_dir {directory} is "
            f"{'another directory' if replaced else 'gone'} now: it was moved, renamed or deleted while the run was "
            "going, with its checkpoints; resume with --model_dir where it went")
    assert sorted(os.listdir(directory)) == []
    assert checkpoint.latest_checkpoint(str(tmp_path / "moved")) == str(tmp_path / "moved" / "model.ckpt-2")
