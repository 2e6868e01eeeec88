"""Tests of model/checkpoint/restore.py: verified restores of every format, layout-independent keys, resuming the
training state, fine-tuning to another class count. Shallow models (tests/_shallow.py): the restore works variable by
variable; the original's checkpoints at full depth, and one of an earlier main.py, are restored in
test_checkpoint_names.py."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from model import checkpoint
from model.layers.quantization import QuantizationConfig
from tests._checkpoint_helpers import randomise, save_named, save_object_based, small_model, training_state, values_of
from tests.test_checkpoint_names import NUM_CLASSES, write_tf1_checkpoint
from utils.errors import UserError

pytestmark = pytest.mark.shallow


# ---------------------------------------------------------------- the original's TF1 checkpoints

def test_trainable_only_leaves_moving_statistics(resnet50_checkpoint):
    prefix, values = resnet50_checkpoint
    model = small_model()
    report = checkpoint.load(model, prefix, "resnet50", trainable_only=True)
    assert report.restored == len(model.trainable_variables)
    stem = model.get_layer("conv2d")
    np.testing.assert_array_equal(stem.bn.moving_variance.numpy(), 1)
    np.testing.assert_array_equal(stem.bn.moving_mean.numpy(), 0)
    np.testing.assert_array_equal(stem.bn.gamma.numpy(), values["resnet50/conv2d/BatchNorm/gamma"])
    np.testing.assert_array_equal(stem.conv.kernel.numpy(), values["resnet50/conv2d/conv2d/kernel"])


def test_dense_checkpoint_loads_into_final_conv_model(resnet50_checkpoint):
    prefix, values = resnet50_checkpoint
    model = small_model(use_final_conv=True)
    checkpoint.load(model, prefix, "resnet50")
    np.testing.assert_array_equal(model.get_layer("output").dense.kernel.numpy(),
                                  values["resnet50/output/dense/kernel"].reshape(1, 1, 2048, NUM_CLASSES))


def test_mismatched_checkpoint_is_refused_in_one_line_and_assigns_nothing(resnet50_checkpoint, tmp_path):
    _, values = resnet50_checkpoint
    broken = dict(values)
    del broken["resnet50/btlnck_block_1_0/bottleneck_2/BatchNorm/moving_mean"]
    broken["resnet50/btlnck_block_3_0/bottleneck_1/conv2d/kernel"] = np.zeros((1, 1, 1024, 256), "f4")
    broken["resnet50/extra_layer/kernel"] = np.zeros((3,), "f4")
    prefix = write_tf1_checkpoint(str(tmp_path), broken)
    model = small_model()
    before = model.get_layer("conv2d").conv.kernel.numpy()
    with pytest.raises(UserError) as error:
        checkpoint.load(model, prefix, "resnet50")
    message = str(error.value)
    assert "\n" not in message
    assert "1 missing: resnet50/btlnck_block_1_0/bottleneck_2/BatchNorm/moving_mean" in message
    assert "1 unexpected: resnet50/extra_layer/kernel" in message
    assert "1 mis-shaped: resnet50/btlnck_block_3_0/bottleneck_1/conv2d/kernel [1, 1, 1024, 256]" in message
    np.testing.assert_array_equal(model.get_layer("conv2d").conv.kernel.numpy(), before)  # nothing assigned


# ---------------------------------------------------------------- our named format

def test_nhwc_checkpoint_loads_into_an_nchw_model(trained_model, tmp_path):
    """Keys follow the variables' names, not the Keras tracking order that differs between layouts."""
    _, prefix, _ = save_named(tmp_path, trained_model)
    nchw = small_model(compute_format="NCHW", allow_nchw_on_cpu=True)
    report = checkpoint.load(nchw, prefix, "resnet50")
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
    entries = checkpoint.training_entries(model, optimizer, global_step, "resnet50")
    writer = checkpoint.CheckpointWriter(str(tmp_path), entries,
                                         checkpoint.metadata("resnet50", NUM_CLASSES, 32, False, False))
    prefix = writer.save(40)
    resumed = small_model()
    resumed_optimizer, resumed_step = training_state(resumed, "dynamic")
    checkpoint.restore_training(resumed, resumed_optimizer, resumed_step, checkpoint.inspect(prefix),
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
        checkpoint.restore_training(model, optimizer, global_step, checkpoint.inspect(prefix), "resnet50",
                                    "the model")


def test_float_checkpoint_into_qat_model_keeps_initial_ranges(trained_model, tmp_path):
    _, prefix, _ = save_named(tmp_path, trained_model)
    qat = small_model(quantization=QuantizationConfig())
    report = checkpoint.load(qat, prefix, "resnet50")
    assert report.restored == len(trained_model.variables) < len(qat.variables)


def test_finetune_to_another_class_count_keeps_a_fresh_classifier(trained_model, tmp_path):
    _, prefix, _ = save_named(tmp_path, trained_model)
    target = small_model(num_classes=3, seed=9)
    fresh_kernel = target.get_layer("output").dense.kernel.numpy()
    report = checkpoint.load(target, prefix, "resnet50", trainable_only=True, skip_classifier=True)
    assert sorted(report.fresh) == ["resnet50/output/dense/bias", "resnet50/output/dense/kernel"]
    assert "2 initialised fresh" in report.describe()
    np.testing.assert_array_equal(target.get_layer("output").dense.kernel.numpy(), fresh_kernel)
    source = values_of(trained_model)
    for variable in target.trainable_variables:
        if not variable.path.startswith("output/"):
            np.testing.assert_array_equal(variable.numpy(), source[variable.path], err_msg=variable.path)
    with pytest.raises(UserError, match=r"2 mis-shaped: resnet50/output/dense/bias \[5\] vs model \[3\]"):
        checkpoint.load(small_model(num_classes=3), prefix, "resnet50")
    assert "its EMA weights" not in report.describe()
    # from a checkpoint with EMA weights a fine-tune takes the raw ones, which its line said nowhere (2026-12-07)
    averaged = dataclasses.replace(report, info=dataclasses.replace(report.info, has_weight_averages=True))
    assert "; trainable variables only (BN moving statistics start fresh, as the original's fine-tune, and the raw " \
           "weights, not its EMA weights)" in averaged.describe()


# ---------------------------------------------------------------- the object format

def test_object_based_checkpoint_loads_into_nhwc_and_nchw(trained_model, tmp_path):
    prefix, _ = save_object_based(tmp_path, trained_model)
    info = checkpoint.inspect(checkpoint.latest_checkpoint(str(tmp_path)))
    assert (info.format, info.arch, info.num_classes, info.step, info.use_final_conv) == (
        "object", "resnet50", NUM_CLASSES, 5, False)
    expected = values_of(trained_model)
    for options in ({}, {"compute_format": "NCHW", "allow_nchw_on_cpu": True}):
        model = small_model(**options)
        report = checkpoint.restore_model(model, info, "resnet50", "the model")
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
    checkpoint.restore_training(model, resumed_optimizer, global_step, checkpoint.inspect(prefix),
                                "resnet50", "the model")
    assert int(global_step.numpy()) == 9
    np.testing.assert_array_equal(model.get_layer("conv2d").conv.kernel.numpy(),
                                  trained_model.get_layer("conv2d").conv.kernel.numpy())
