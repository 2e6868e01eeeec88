"""Tests of model/checkpoint_io.py: formats told apart by content, verified restores, layout-independent keys,
atomic saves with retention, the fallback past incomplete checkpoints, fine-tuning to another class count."""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from model import checkpoint_io
from model.checkpoint_names import tf1_variable_map
from model.layers.quantization import QuantizationConfig
from model.resnet import build_model
from tests._model_tf1_names import expected_keras_path
from tests.test_checkpoint_names import NUM_CLASSES, random_values, write_tf1_checkpoint
from utils.errors import UserError
from utils.optimizers import build_optimizer
from utils.precision import Precision

IMAGES = np.random.RandomState(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")


def small_model(**options):
    return build_model("resnet50", num_classes=options.pop("num_classes", NUM_CLASSES), image_size=32, **options)


def randomise(model, seed):
    """Distinct values in every variable (BN statistics included), so a swap or a skipped variable shows."""
    rng = np.random.default_rng(seed)
    for variable in model.variables:
        value = rng.uniform(0.5, 1.5, variable.shape) if "variance" in variable.path else rng.normal(
            0, 0.05, variable.shape)
        variable.assign(value.astype("float32"))


def values_of(model):
    return {variable.path: variable.numpy() for variable in model.variables}


def training_state(model, loss_scaling=None):
    optimizer = build_optimizer(0.1, 0.9, Precision(loss_scaling=loss_scaling))
    optimizer.build(model.trainable_variables)
    return optimizer, tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")


def save_named(directory, model, step=7, image_size=32, **writer_options):
    optimizer, global_step = training_state(model)
    global_step.assign(step)
    for index, accumulator in enumerate(optimizer.accumulators):
        accumulator.assign(tf.fill(accumulator.shape, float(index)))
    writer = checkpoint_io.CheckpointWriter(
        str(directory), checkpoint_io.training_entries(model, optimizer, global_step, "resnet50"),
        checkpoint_io.metadata("resnet50", NUM_CLASSES, image_size, False, False), **writer_options)
    return writer, writer.save(step), optimizer


def save_object_based(directory, model, step=5):
    """The format earlier versions of this port wrote (tf.train.Checkpoint + CheckpointManager)."""
    optimizer, global_step = training_state(model)
    global_step.assign(step)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=global_step)
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=5, checkpoint_name="model.ckpt")
    return manager.save(checkpoint_number=step), optimizer


@pytest.fixture(scope="module")
def resnet50_checkpoint(tmp_path_factory):
    values = random_values("resnet50", np.random.default_rng(1))
    return write_tf1_checkpoint(str(tmp_path_factory.mktemp("rn50")), values), values


@pytest.fixture(scope="module")
def trained_model():
    model = small_model(seed=3)
    randomise(model, 11)
    return model


# ---------------------------------------------------------------- the original's TF1 checkpoints

def test_tf1_se_resnext_checkpoint_puts_every_variable_in_place(tmp_path):
    arch = "se-resnext101-32x4d"
    model = build_model(arch, num_classes=NUM_CLASSES, image_size=32)
    values = random_values(arch, np.random.default_rng(2))
    # Non-model entries a real training checkpoint carries; they must be ignored.
    extras = {"global_step": np.array(100, np.int64),
              f"{arch}/output/dense/kernel/Momentum": np.zeros((2048, NUM_CLASSES), "f4"),
              "current_loss_scale": np.array(128.0, "f4")}
    prefix = write_tf1_checkpoint(str(tmp_path), {**values, **extras})
    info = checkpoint_io.inspect(prefix)
    assert (info.format, info.arch, info.num_classes, info.step, info.use_final_conv) == (
        "tf1", arch, NUM_CLASSES, 100, False)
    report = checkpoint_io.restore_model(model, info, arch, "the model")
    assert report.restored == report.total == len(model.variables)
    by_path = {v.path: v for v in model.variables}
    for name, value in values.items():  # located by Keras path from string rules, not by our map
        np.testing.assert_array_equal(by_path[expected_keras_path(name, arch)].numpy(), value, err_msg=name)


def test_trainable_only_leaves_moving_statistics(resnet50_checkpoint):
    prefix, values = resnet50_checkpoint
    model = small_model()
    report = checkpoint_io.load(model, prefix, "resnet50", trainable_only=True)
    assert report.restored == len(model.trainable_variables)
    stem = model.get_layer("conv2d")
    np.testing.assert_array_equal(stem.bn.moving_variance.numpy(), 1)
    np.testing.assert_array_equal(stem.bn.moving_mean.numpy(), 0)
    np.testing.assert_array_equal(stem.bn.gamma.numpy(), values["resnet50/conv2d/BatchNorm/gamma"])
    np.testing.assert_array_equal(stem.conv.kernel.numpy(), values["resnet50/conv2d/conv2d/kernel"])


def test_dense_checkpoint_loads_into_final_conv_model(resnet50_checkpoint):
    prefix, values = resnet50_checkpoint
    model = small_model(use_final_conv=True)
    checkpoint_io.load(model, prefix, "resnet50")
    np.testing.assert_array_equal(model.get_layer("output").dense.kernel.numpy(),
                                  values["resnet50/output/dense/kernel"].reshape(1, 1, 2048, NUM_CLASSES))


def test_mismatched_checkpoint_is_refused_in_one_line_and_assigns_nothing(resnet50_checkpoint, tmp_path):
    _, values = resnet50_checkpoint
    broken = dict(values)
    del broken["resnet50/btlnck_block_1_2/bottleneck_2/BatchNorm/moving_mean"]
    broken["resnet50/btlnck_block_3_0/bottleneck_1/conv2d/kernel"] = np.zeros((1, 1, 1024, 256), "f4")
    broken["resnet50/extra_layer/kernel"] = np.zeros((3,), "f4")
    prefix = write_tf1_checkpoint(str(tmp_path), broken)
    model = small_model()
    before = model.get_layer("conv2d").conv.kernel.numpy()
    with pytest.raises(UserError) as error:
        checkpoint_io.load(model, prefix, "resnet50")
    message = str(error.value)
    assert "\n" not in message
    assert "1 missing: resnet50/btlnck_block_1_2/bottleneck_2/BatchNorm/moving_mean" in message
    assert "1 unexpected: resnet50/extra_layer/kernel" in message
    assert "1 mis-shaped: resnet50/btlnck_block_3_0/bottleneck_1/conv2d/kernel [1, 1, 1024, 256]" in message
    np.testing.assert_array_equal(model.get_layer("conv2d").conv.kernel.numpy(), before)  # nothing assigned


def test_another_architecture_is_named(resnet50_checkpoint):
    prefix, _ = resnet50_checkpoint
    info = checkpoint_io.inspect(prefix)
    with pytest.raises(UserError, match=r"is a resnet50 checkpoint; this run builds se-resnext101-32x4d "
                                        r"\(pass --arch resnet50\)"):
        checkpoint_io.check_fits(info, "se-resnext101-32x4d", NUM_CLASSES)
    with pytest.raises(UserError, match=rf"has {NUM_CLASSES} classes; this run builds 1001 "
                                        rf"\(pass --num_classes {NUM_CLASSES}\)"):
        checkpoint_io.check_fits(info, "resnet50", 1001)
    checkpoint_io.check_fits(info, "resnet50", 1001, allow_other_classes=True)


def test_missing_checkpoint_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such checkpoint"):
        checkpoint_io.find_checkpoint(str(tmp_path / "nothing"), "--checkpoint")
    with pytest.raises(UserError, match="no complete checkpoint in that directory"):
        checkpoint_io.find_checkpoint(str(tmp_path), "--checkpoint")


# ---------------------------------------------------------------- our named format

def test_named_keys_are_the_original_names_with_slots_step_and_metadata(trained_model, tmp_path):
    _, prefix, _ = save_named(tmp_path, trained_model)
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    names = set(tf1_variable_map(trained_model, "resnet50"))
    assert names <= set(shapes)
    slots = {name + "/Momentum" for name, v in tf1_variable_map(trained_model, "resnet50").items() if v.trainable}
    assert slots <= set(shapes)
    assert {"global_step", checkpoint_io.METADATA_KEY} <= set(shapes)
    assert not any("_operations" in key or ".ATTRIBUTES" in key for key in shapes)
    info = checkpoint_io.inspect(prefix)
    assert (info.format, info.step, info.arch, info.num_classes, info.image_size, info.use_final_conv) == (
        "named", 7, "resnet50", NUM_CLASSES, 32, False)
    meta = json.loads(tf.train.load_checkpoint(prefix).get_tensor(checkpoint_io.METADATA_KEY))
    assert meta["step"] == 7 and meta["version"] == checkpoint_io.METADATA_VERSION


def test_nhwc_checkpoint_loads_into_an_nchw_model(trained_model, tmp_path):
    """Keys follow the variables' names, not the Keras tracking order that differs between layouts."""
    _, prefix, _ = save_named(tmp_path, trained_model)
    nchw = small_model(compute_format="NCHW", allow_nchw_on_cpu=True)
    report = checkpoint_io.load(nchw, prefix, "resnet50")
    assert report.restored == len(nchw.variables)
    expected = values_of(trained_model)
    for path, value in values_of(nchw).items():
        np.testing.assert_array_equal(value, expected[path], err_msg=path)


def test_resume_restores_slots_step_and_loss_scale(trained_model, tmp_path):
    model = small_model()
    randomise(model, 5)
    optimizer, global_step = training_state(model, "dynamic")
    optimizer.dynamic_scale.assign(512.0)
    optimizer.step_counter.assign(17)
    global_step.assign(40)
    entries = checkpoint_io.training_entries(model, optimizer, global_step, "resnet50")
    writer = checkpoint_io.CheckpointWriter(str(tmp_path), entries,
                                            checkpoint_io.metadata("resnet50", NUM_CLASSES, 32, False, False))
    prefix = writer.save(40)
    resumed = small_model()
    resumed_optimizer, resumed_step = training_state(resumed, "dynamic")
    checkpoint_io.restore_training(resumed, resumed_optimizer, resumed_step, checkpoint_io.inspect(prefix),
                                   "resnet50", "the model")
    assert int(resumed_step.numpy()) == 40
    assert float(resumed_optimizer.dynamic_scale.numpy()) == 512.0
    assert int(resumed_optimizer.step_counter.numpy()) == 17
    for source, target in zip(optimizer.inner_optimizer.accumulators, resumed_optimizer.inner_optimizer.accumulators):
        np.testing.assert_array_equal(source.numpy(), target.numpy())
    for path, value in values_of(resumed).items():
        np.testing.assert_array_equal(value, values_of(model)[path], err_msg=path)


def test_resume_from_a_checkpoint_without_slots_is_refused(resnet50_checkpoint):
    prefix, _ = resnet50_checkpoint
    model = small_model()
    optimizer, global_step = training_state(model)
    with pytest.raises(UserError, match="has no optimizer state .*--finetune_checkpoint"):
        checkpoint_io.restore_training(model, optimizer, global_step, checkpoint_io.inspect(prefix), "resnet50",
                                       "the model")


def test_float_checkpoint_into_qat_model_keeps_initial_ranges(trained_model, tmp_path):
    _, prefix, _ = save_named(tmp_path, trained_model)
    qat = small_model(quantization=QuantizationConfig())
    report = checkpoint_io.load(qat, prefix, "resnet50")
    assert report.restored == len(trained_model.variables) < len(qat.variables)


def test_retention_keeps_the_newest_and_a_killed_save_leaves_the_previous_one(trained_model, tmp_path):
    writer, _, _ = save_named(tmp_path, trained_model, step=1, max_to_keep=2)
    writer.save(2)
    writer.save(3)
    assert sorted(os.path.basename(p) for p in tf.io.gfile.glob(str(tmp_path / "*.index"))) == [
        "model.ckpt-2.index", "model.ckpt-3.index"]
    assert checkpoint_io.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
    # A fresh writer (a resumed run) continues the same list.
    again = checkpoint_io.CheckpointWriter(str(tmp_path), writer.entries, writer.meta, max_to_keep=2)
    again.save(4)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-4")
    assert not os.path.exists(str(tmp_path / "model.ckpt-2.index"))
    assert not tf.io.gfile.glob(str(tmp_path / "*_temp"))


def test_incomplete_newest_checkpoint_falls_back_with_a_warning(trained_model, tmp_path):
    writer, _, _ = save_named(tmp_path, trained_model, step=1)
    writer.save(2)
    os.remove(tf.io.gfile.glob(str(tmp_path / "model.ckpt-2.data-*"))[0])
    warnings = []
    assert checkpoint_io.latest_checkpoint(str(tmp_path), warn=warnings.append).endswith("model.ckpt-1")
    assert len(warnings) == 1 and "model.ckpt-2 is incomplete" in warnings[0]
    with pytest.raises(UserError, match="incomplete"):
        checkpoint_io.find_checkpoint(str(tmp_path / "model.ckpt-2"), "--checkpoint")


def test_finetune_to_another_class_count_keeps_a_fresh_classifier(trained_model, tmp_path):
    _, prefix, _ = save_named(tmp_path, trained_model)
    target = small_model(num_classes=3, seed=9)
    fresh_kernel = target.get_layer("output").dense.kernel.numpy()
    report = checkpoint_io.load(target, prefix, "resnet50", trainable_only=True, skip_classifier=True)
    assert sorted(report.fresh) == ["resnet50/output/dense/bias", "resnet50/output/dense/kernel"]
    assert "2 initialised fresh" in report.describe()
    np.testing.assert_array_equal(target.get_layer("output").dense.kernel.numpy(), fresh_kernel)
    source = values_of(trained_model)
    for variable in target.trainable_variables:
        if not variable.path.startswith("output/"):
            np.testing.assert_array_equal(variable.numpy(), source[variable.path], err_msg=variable.path)
    with pytest.raises(UserError, match=r"2 mis-shaped: resnet50/output/dense/bias \[5\] vs model \[3\]"):
        checkpoint_io.load(small_model(num_classes=3), prefix, "resnet50")


# ---------------------------------------------------------------- object-based checkpoints of earlier versions

def test_object_based_checkpoint_loads_into_nhwc_and_nchw(trained_model, tmp_path):
    prefix, _ = save_object_based(tmp_path, trained_model)
    info = checkpoint_io.inspect(checkpoint_io.latest_checkpoint(str(tmp_path)))
    assert (info.format, info.arch, info.num_classes, info.step, info.use_final_conv) == (
        "object", "resnet50", NUM_CLASSES, 5, False)
    expected = values_of(trained_model)
    for options in ({}, {"compute_format": "NCHW", "allow_nchw_on_cpu": True}):
        model = small_model(**options)
        report = checkpoint_io.restore_model(model, info, "resnet50", "the model")
        assert report.restored == len(model.variables)
        for path, value in values_of(model).items():
            np.testing.assert_array_equal(value, expected[path], err_msg=path)


def test_object_based_checkpoint_resumes_training(trained_model, tmp_path):
    prefix, optimizer = save_object_based(tmp_path, trained_model, step=9)
    for index, accumulator in enumerate(optimizer.accumulators):
        accumulator.assign(tf.fill(accumulator.shape, float(index)))
    prefix, optimizer = save_object_based(tmp_path, trained_model, step=9)
    model = small_model()
    resumed_optimizer, global_step = training_state(model)
    checkpoint_io.restore_training(model, resumed_optimizer, global_step, checkpoint_io.inspect(prefix),
                                   "resnet50", "the model")
    assert int(global_step.numpy()) == 9
    np.testing.assert_array_equal(model.get_layer("conv2d").conv.kernel.numpy(),
                                  trained_model.get_layer("conv2d").conv.kernel.numpy())


def test_object_based_checkpoint_of_another_class_count_is_refused(trained_model, tmp_path):
    save_object_based(tmp_path, trained_model)
    info = checkpoint_io.inspect(checkpoint_io.latest_checkpoint(str(tmp_path)))
    with pytest.raises(UserError, match="pass --num_classes 5"):
        checkpoint_io.check_fits(info, "resnet50", 10)
    keras.backend.clear_session()
