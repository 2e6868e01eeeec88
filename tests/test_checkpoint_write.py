"""Tests of model/checkpoint/write.py: the named format's keys and metadata, atomic saves with retention."""
import json
import os

import tensorflow as tf

from model import checkpoint
from model.checkpoint_names import tf1_variable_map
from tests._checkpoint_helpers import save_named
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
