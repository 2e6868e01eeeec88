"""Tests of model/checkpoint_names.py; helpers that write TF1 checkpoints with tf.compat.v1.train.Saver."""
import os
import subprocess
import sys

import numpy as np
import pytest

from model.checkpoint_names import keras_to_tf1_names, tf1_variable_map
from model.resnet import build_model
from tests._model_tf1_names import expected_keras_path, tf1_names_and_shapes

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


def random_values(arch, rng, num_classes=NUM_CLASSES, layers=None):
    # Distinct random values per variable, so any swap between same-shaped variables shows.
    return {name: rng.normal(0, 1, shape).astype("f4")
            for name, shape in tf1_names_and_shapes(arch, num_classes, layers).items()}


@pytest.fixture(scope="module")
def se_resnext():
    return build_model("se-resnext101-32x4d", num_classes=NUM_CLASSES, image_size=32)


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
