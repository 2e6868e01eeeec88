"""Tests of model/checkpoint_names.py against TF1 checkpoints written with tf.compat.v1.train.Saver."""
import os
import subprocess
import sys

import numpy as np
import pytest

from model.checkpoint_names import keras_to_tf1_names, load_tf1_checkpoint, tf1_variable_map
from model.resnet import build_model
from tests._model_tf1_names import expected_keras_path, tf1_names_and_shapes
from utils.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES = 5


def write_tf1_checkpoint(directory, values):
    """TF1 name-based checkpoint of `values` ({tf1 name: array}); returns the checkpoint prefix."""
    npz = os.path.join(directory, "values.npz")
    np.savez(npz, **{name.replace("/", "|"): value for name, value in values.items()})
    prefix = os.path.join(directory, "model.ckpt-100")
    subprocess.run([sys.executable, "-m", "tests._model_write_tf1_checkpoint", prefix, npz], cwd=ROOT, check=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}, timeout=300)
    return prefix


def random_values(arch, rng, num_classes=NUM_CLASSES):
    # Distinct random values per variable, so any swap between same-shaped variables shows.
    return {name: rng.normal(0, 1, shape).astype("f4")
            for name, shape in tf1_names_and_shapes(arch, num_classes).items()}


@pytest.fixture(scope="module")
def se_resnext():
    return build_model("se-resnext101-32x4d", num_classes=NUM_CLASSES, image_size=32)


@pytest.fixture(scope="module")
def resnet50_checkpoint(tmp_path_factory):
    values = random_values("resnet50", np.random.default_rng(1))
    return write_tf1_checkpoint(str(tmp_path_factory.mktemp("rn50")), values), values


@pytest.mark.parametrize("arch", ["resnet50", "se-resnext101-32x4d"])
def test_map_names_and_shapes_follow_the_spec(arch, se_resnext):
    model = se_resnext if arch != "resnet50" else build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    expected = tf1_names_and_shapes(arch, NUM_CLASSES)
    mapping = tf1_variable_map(model, arch)
    assert set(mapping) == set(expected)
    assert len({id(v) for v in mapping.values()}) == len(model.variables)
    for name, variable in mapping.items():
        assert list(variable.shape) == expected[name], name
        assert variable.path == expected_keras_path(name, arch), name
    inverse = keras_to_tf1_names(model, arch)
    assert all(inverse[variable.path] == name for name, variable in mapping.items())


def test_load_se_resnext_checkpoint_puts_every_variable_in_place(se_resnext, tmp_path):
    arch = "se-resnext101-32x4d"
    values = random_values(arch, np.random.default_rng(2))
    # Non-model entries a real training checkpoint carries; they must be ignored.
    extras = {"global_step": np.array(100, np.int64),
              f"{arch}/output/dense/kernel/Momentum": np.zeros((2048, NUM_CLASSES), "f4"),
              "current_loss_scale": np.array(128.0, "f4")}
    prefix = write_tf1_checkpoint(str(tmp_path), {**values, **extras})
    restored = load_tf1_checkpoint(se_resnext, prefix, arch)
    assert len(restored) == len(se_resnext.variables)
    by_path = {v.path: v for v in se_resnext.variables}
    for name, value in values.items():  # located by Keras path from string rules, not by our map
        np.testing.assert_array_equal(by_path[expected_keras_path(name, arch)].numpy(), value, err_msg=name)
    block = se_resnext.get_layer("btlnck_block_2_7")
    np.testing.assert_array_equal(block.bottleneck_2.conv.kernel.numpy(),
                                  values[f"{arch}/btlnck_block_2_7/bottleneck_2/bottleneck_2group_filter"])
    np.testing.assert_array_equal(block.bottleneck_3.bn.moving_variance.numpy(),
                                  values[f"{arch}/btlnck_block_2_7/bottleneck_3/BatchNorm/moving_variance"])
    np.testing.assert_array_equal(block.se.excite.bias.numpy(),
                                  values[f"{arch}/btlnck_block_2_7/bottleneck_se_layer/dense_1/bias"])


def test_trainable_only_leaves_moving_statistics(resnet50_checkpoint):
    prefix, values = resnet50_checkpoint
    model = build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    load_tf1_checkpoint(model, prefix, "resnet50", trainable_only=True)
    stem = model.get_layer("conv2d")
    np.testing.assert_array_equal(stem.bn.moving_variance.numpy(), 1)
    np.testing.assert_array_equal(stem.bn.moving_mean.numpy(), 0)
    np.testing.assert_array_equal(stem.bn.gamma.numpy(), values["resnet50/conv2d/BatchNorm/gamma"])
    np.testing.assert_array_equal(stem.conv.kernel.numpy(), values["resnet50/conv2d/conv2d/kernel"])


def test_dense_checkpoint_loads_into_final_conv_model(resnet50_checkpoint):
    prefix, values = resnet50_checkpoint
    model = build_model("resnet50", num_classes=NUM_CLASSES, image_size=32, use_final_conv=True)
    load_tf1_checkpoint(model, prefix, "resnet50")
    np.testing.assert_array_equal(model.get_layer("output").dense.kernel.numpy(),
                                  values["resnet50/output/dense/kernel"].reshape(1, 1, 2048, NUM_CLASSES))


def test_mismatched_checkpoint_is_refused_with_a_clear_message(resnet50_checkpoint, tmp_path):
    _, values = resnet50_checkpoint
    broken = dict(values)
    del broken["resnet50/btlnck_block_1_2/bottleneck_2/BatchNorm/moving_mean"]
    broken["resnet50/btlnck_block_3_0/bottleneck_1/conv2d/kernel"] = np.zeros((1, 1, 1024, 256), "f4")
    broken["resnet50/extra_layer/kernel"] = np.zeros((3,), "f4")
    prefix = write_tf1_checkpoint(str(tmp_path), broken)
    model = build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    before = model.get_layer("conv2d").conv.kernel.numpy()
    with pytest.raises(UserError) as error:
        load_tf1_checkpoint(model, prefix, "resnet50")
    message = str(error.value)
    assert "\n" not in message
    assert "1 missing: resnet50/btlnck_block_1_2/bottleneck_2/BatchNorm/moving_mean" in message
    assert "1 unexpected: resnet50/extra_layer/kernel" in message
    assert "1 mis-shaped: resnet50/btlnck_block_3_0/bottleneck_1/conv2d/kernel [1, 1, 1024, 256]" in message
    np.testing.assert_array_equal(model.get_layer("conv2d").conv.kernel.numpy(), before)  # nothing assigned


def test_wrong_architecture_lists_are_truncated(resnet50_checkpoint, se_resnext):
    prefix, _ = resnet50_checkpoint
    with pytest.raises(UserError, match=r"missing: .*\.\.\. and \d+ more"):
        load_tf1_checkpoint(se_resnext, prefix, "se-resnext101-32x4d")


def test_unreadable_checkpoint_is_a_user_error(tmp_path, se_resnext):
    with pytest.raises(UserError, match="cannot read"):
        load_tf1_checkpoint(se_resnext, str(tmp_path / "nothing"), "se-resnext101-32x4d")
