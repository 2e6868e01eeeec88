"""Tests of runtime/checkpoints.py: the one-line refusals naming the flag to change, and what the inference modes
restore."""
import keras
import pytest
import tensorflow as tf

from model import checkpoint
from runtime import checkpoints
from tests._checkpoint_helpers import save_named, save_object_based, small_model
from tests.test_checkpoint_names import NUM_CLASSES
from utils.errors import UserError

pytestmark = pytest.mark.shallow


def test_another_architecture_is_named(resnet50_checkpoint):
    prefix, _ = resnet50_checkpoint
    info = checkpoint.inspect(prefix)
    with pytest.raises(UserError, match=r"is a resnet50 checkpoint; this run builds se-resnext101-32x4d "
                                        r"\(pass --arch resnet50\)"):
        checkpoints.check_fits(info, "se-resnext101-32x4d", NUM_CLASSES)
    with pytest.raises(UserError, match=rf"has {NUM_CLASSES} classes; this run builds 1001 "
                                        rf"\(pass --num_classes {NUM_CLASSES}\)"):
        checkpoints.check_fits(info, "resnet50", 1001)
    checkpoints.check_fits(info, "resnet50", 1001, allow_other_classes=True)


def test_inference_restores_everything_then_refuses_ema_weights_the_checkpoint_lacks(trained_model, tmp_path):
    save_named(tmp_path, trained_model, step=7)
    model = small_model()
    global_step = tf.Variable(0, dtype=tf.int64)
    lines = []
    with pytest.raises(UserError, match=r"has no EMA weights \(train with --moving_average_decay to get them\), "
                                        r"so --use_ema_weights cannot be used with it"):
        checkpoints.restore_for_inference(model, global_step, str(tmp_path), "resnet50", NUM_CLASSES, ema=True,
                                          log=lines.append)
    assert len(lines) == 1 and lines[0].startswith(f"Restored {len(model.variables)} of {len(model.variables)}")
    assert int(global_step.numpy()) == 7


def test_object_based_checkpoint_of_another_class_count_is_refused(trained_model, tmp_path):
    save_object_based(tmp_path, trained_model)
    info = checkpoint.inspect(checkpoint.latest_checkpoint(str(tmp_path)))
    with pytest.raises(UserError, match="pass --num_classes 5"):
        checkpoints.check_fits(info, "resnet50", 10)
    keras.backend.clear_session()
