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


def test_a_training_in_a_model_dir_without_checkpoint_says_it_is_new_and_where(tmp_path, monkeypatch):
    """A model_dir typed relative to the wrong directory starts a new training: said with the absolute path, the
    model it trains and where its weights start; the modes that need a checkpoint name the absolute path too."""
    monkeypatch.chdir(tmp_path)
    lines = []
    assert checkpoints.restore_or_initialise(None, None, None, "A", "resnet50", 1001, image_size=224,
                                             log=lines.append) is None
    assert lines == [f"model_dir {tmp_path / 'A'} has no checkpoint, so this is a new training of resnet50, 1001 "
                     "classes, 224x224, from freshly initialised weights"]
    assert str(checkpoints.no_checkpoint("A")) == (
        f"no checkpoint in model_dir A ({tmp_path / 'A'}) (train first, or point --model_dir at a directory with "
        "model.ckpt-* files)")
    assert str(checkpoints.no_checkpoint(str(tmp_path / "A"))).startswith(f"no checkpoint in model_dir {tmp_path}/A (")


def test_a_savedmodel_given_as_model_dir_is_named_with_what_serves_it_and_its_checkpoint(tmp_path):
    """A user holding only an export passes it to main.py: the error says what it is, that inference.py serves
    it, and the checkpoint directory its record names (none named when it records none)."""
    import json
    export = tmp_path / "export" / "1700000000"
    (export / "assets.extra").mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    assert str(checkpoints.no_checkpoint(str(export))) == (
        f"model_dir {export} is a SavedModel (an export), not a training directory: serve it with python inference.py "
        f"--model {export} (--to-predict <images> for their classes, --data-dir <TFRecords> for its accuracy)")
    (export / "assets.extra" / "source.json").write_text(json.dumps({"checkpoint": "/runs/a/model.ckpt-7", "step": 7}))
    assert str(checkpoints.no_checkpoint(str(export))).endswith(
        "for its accuracy), or give --model_dir the directory of the checkpoint it was exported from, /runs/a")
    # the --export_dir holding it: the newest export is the one to serve (until 2026-12-07 "train first")
    assert str(checkpoints.no_checkpoint(str(export.parent))) == (
        f"model_dir {export.parent} is an --export_dir holding 1 SavedModel (an export), the newest {export}, not a "
        f"training directory: serve it with python inference.py --model {export} (--to-predict <images> for their "
        "classes, --data-dir <TFRecords> for its accuracy), or give --model_dir the directory of the checkpoint it was "
        "exported from, /runs/a")


def test_a_new_training_from_a_finetune_checkpoint_says_so(resnet50_checkpoint, tmp_path, monkeypatch):
    prefix, _ = resnet50_checkpoint
    from model import resnet
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    lines = []
    checkpoints.restore_or_initialise(model, None, None, str(tmp_path / "new"), "resnet50", NUM_CLASSES,
                                      finetune_checkpoint=prefix, log=lines.append)
    assert lines[0] == (f"model_dir {tmp_path / 'new'} has no checkpoint, so this is a new training of resnet50, "
                        f"{NUM_CLASSES} classes, from --finetune_checkpoint {prefix}")
