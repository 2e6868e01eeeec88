"""Tests of model/checkpoint_names.py at full depth: the original's TF1 names and shapes, a TF1 checkpoint restored
variable by variable, and a checkpoint of an earlier main.py resumed and evaluated from the CLI; helpers that write
TF1 checkpoints with tf.compat.v1.train.Saver."""
import os

import numpy as np
import pytest
import tensorflow as tf

from model import checkpoint
from model.checkpoint_names import keras_to_tf1_names, tf1_variable_map
from model.kernels import GPU_KERNELS
from model.resnet import build_model
from tests._cli import main_in_process
from tests._data_helpers import write_tfrecord_shards
from tests._model_tf1_names import expected_keras_path, tf1_names_and_shapes

NUM_CLASSES = 5


def write_tf1_checkpoint(directory, values):
    """TF1 name-based checkpoint of `values` ({tf1 name: array}), written by tf.compat.v1.train.Saver in a graph of
    its own (the process's eager state is not touched); returns the checkpoint prefix."""
    prefix = os.path.join(directory, "model.ckpt-100")
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.Variable(value) for name, value in values.items()}
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix)
    return prefix


def random_values(arch, rng, num_classes=NUM_CLASSES, layers=None):
    # Distinct random values per variable, so any swap between same-shaped variables shows.
    return {name: rng.normal(0, 1, shape).astype("f4")
            for name, shape in tf1_names_and_shapes(arch, num_classes, layers).items()}


@pytest.fixture(scope="module")
def se_resnext():
    """Built with the GPU's single grouped convolution, the fastest build: the variables are the same with any
    kernels (tests/test_kernels.py::test_train_inference_and_gpu_builds_have_the_same_checkpoint_keys)."""
    return build_model("se-resnext101-32x4d", num_classes=NUM_CLASSES, image_size=32, kernels=GPU_KERNELS)


@pytest.mark.parametrize("arch", ["resnet50", "se-resnext101-32x4d"])
def test_map_names_and_shapes_follow_the_spec(arch, se_resnext):
    model = se_resnext if arch != "resnet50" else build_model("resnet50", num_classes=NUM_CLASSES, image_size=32,
                                                               kernels=GPU_KERNELS)
    expected = tf1_names_and_shapes(arch, NUM_CLASSES)
    mapping = tf1_variable_map(model, arch)
    assert set(mapping) == set(expected)
    assert len({id(v) for v in mapping.values()}) == len(model.variables)
    for name, variable in mapping.items():
        assert list(variable.shape) == expected[name], name
        assert variable.path == expected_keras_path(name, arch), name
    inverse = keras_to_tf1_names(model, arch)
    assert all(inverse[variable.path] == name for name, variable in mapping.items())


# ---------------------------------------------------------------- the original's TF1 checkpoints, at full depth

def test_tf1_se_resnext_checkpoint_puts_every_variable_in_place(se_resnext, tmp_path):
    arch, model = "se-resnext101-32x4d", se_resnext
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
    checkpoint.write_state_file(directory, [os.path.basename(prefix)])
    return prefix


def test_a_checkpoint_of_the_main_before_the_runtime_redesign_resumes_and_evaluates(tmp_path):
    """tests/data/checkpoint_layout_dd0e2a5.json lists what main.py wrote before runtime/ was split up: today's
    training writes the same tensors, and such a checkpoint resumes training (optimizer state included) and is
    evaluated from the CLI."""
    import json
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
