"""Tests of model/checkpoint/restore.py: verified restores of every format, layout-independent keys, resuming the
training state, fine-tuning to another class count, a checkpoint of an earlier main.py resumed from the CLI."""
import os

import numpy as np
import pytest
import tensorflow as tf

from model import checkpoint
from model.kernels import GPU_KERNELS
from model.layers.quantization import QuantizationConfig
from model.resnet import build_model
from tests._cli import main_in_process
from tests._checkpoint_helpers import randomise, save_named, save_object_based, small_model, training_state, values_of
from tests._model_tf1_names import expected_keras_path
from tests.test_checkpoint_names import NUM_CLASSES, random_values, write_tf1_checkpoint
from tests._data_helpers import write_tfrecord_shards
from utils.errors import UserError


# ---------------------------------------------------------------- the original's TF1 checkpoints

def test_tf1_se_resnext_checkpoint_puts_every_variable_in_place(tmp_path):
    arch = "se-resnext101-32x4d"
    model = build_model(arch, num_classes=NUM_CLASSES, image_size=32, kernels=GPU_KERNELS)  # builds fastest
    values = random_values(arch, np.random.default_rng(2))
    # Non-model entries a real training checkpoint carries; they must be ignored.
    extras = {"global_step": np.array(100, np.int64),
              f"{arch}/output/dense/kernel/Momentum": np.zeros((2048, NUM_CLASSES), "f4"),
              "current_loss_scale": np.array(128.0, "f4")}
    prefix = write_tf1_checkpoint(str(tmp_path), {**values, **extras})
    info = checkpoint.inspect(prefix)
    assert (info.format, info.arch, info.num_classes, info.step, info.use_final_conv) == (
        "tf1", arch, NUM_CLASSES, 100, False)
    report = checkpoint.restore_model(model, info, arch, "the model")
    assert report.restored == report.total == len(model.variables)
    by_path = {v.path: v for v in model.variables}
    for name, value in values.items():  # located by Keras path from string rules, not by our map
        np.testing.assert_array_equal(by_path[expected_keras_path(name, arch)].numpy(), value, err_msg=name)


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
    del broken["resnet50/btlnck_block_1_2/bottleneck_2/BatchNorm/moving_mean"]
    broken["resnet50/btlnck_block_3_0/bottleneck_1/conv2d/kernel"] = np.zeros((1, 1, 1024, 256), "f4")
    broken["resnet50/extra_layer/kernel"] = np.zeros((3,), "f4")
    prefix = write_tf1_checkpoint(str(tmp_path), broken)
    model = small_model()
    before = model.get_layer("conv2d").conv.kernel.numpy()
    with pytest.raises(UserError) as error:
        checkpoint.load(model, prefix, "resnet50")
    message = str(error.value)
    assert "\n" not in message
    assert "1 missing: resnet50/btlnck_block_1_2/bottleneck_2/BatchNorm/moving_mean" in message
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


# ---------------------------------------------------------------- a checkpoint of an earlier main.py, at full depth
LAYOUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "checkpoint_layout_dd0e2a5.json")


def _write_from_layout(directory, layout):
    """A checkpoint with exactly the tensors (names, shapes, dtypes) and metadata main.py wrote at that commit,
    filled with small deterministic values (positive BN variances)."""
    import json
    rng = np.random.default_rng(0)
    names, tensors = [], []
    for name, (shape, dtype) in sorted(layout["tensors"].items()):
        if name == "checkpoint_metadata":
            value = tf.constant(json.dumps(layout["metadata"]))
        elif name == "global_step" or dtype.startswith("int"):
            value = tf.constant(layout["metadata"]["step"] if name == "global_step" else 0, dtype=dtype, shape=shape)
        elif "moving_variance" in name:
            value = tf.constant(rng.uniform(0.5, 2.0, shape), dtype=dtype)
        else:
            value = tf.constant(rng.normal(0, 0.02, shape), dtype=dtype)
        names.append(name)
        tensors.append(value)
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, "model.ckpt-{}".format(layout["metadata"]["step"]))
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
    from model import checkpoint
    checkpoint.write_state_file(directory, [os.path.basename(prefix)])
    return prefix


def test_a_checkpoint_of_the_main_before_the_runtime_redesign_resumes_and_evaluates(tmp_path):
    """tests/data/checkpoint_layout_dd0e2a5.json lists what main.py wrote before runtime/ was split up: today's
    training writes the same tensors, and such a checkpoint resumes training (optimizer state included) and is
    evaluated from the CLI."""
    import json
    from model import checkpoint
    from utils.optimizers import build_optimizer
    from utils.precision import Precision
    layout = json.load(open(LAYOUT))
    model = build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    optimizer = build_optimizer(0.1, 0.9, Precision())
    optimizer.build(model.trainable_variables)
    entries = checkpoint.training_entries(model, optimizer, tf.Variable(0, dtype=tf.int64), "resnet50")
    written = {key: [list(variable.shape), tf.as_dtype(variable.dtype).name] for key, variable in entries.items()}
    assert written == {key: value for key, value in layout["tensors"].items() if key != "checkpoint_metadata"}

    results, data = tmp_path / "results", tmp_path / "data"
    _write_from_layout(str(results), layout)
    write_tfrecord_shards(str(data), "train", 1, 8, 40, num_classes=NUM_CLASSES)
    write_tfrecord_shards(str(data), "validation", 1, 4, 40, num_classes=NUM_CLASSES)
    result = main_in_process("--mode", "train_and_evaluate", "--batch_size", 4, "--num_iter", 3, "--iter_unit",
                             "batch", "--data_dir", data, "--num_classes", NUM_CLASSES, "--image_size", 32,
                             "--results_dir", results, "--no_progress", check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Restored 267 of 267 variables" in result.stdout and "with the optimizer state" in result.stdout
    assert "Current step: 2" in result.stdout
    assert "top1_accuracy" in result.stdout
    assert checkpoint.latest_checkpoint(str(results)).endswith("model.ckpt-3")
