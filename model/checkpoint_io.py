"""Restoring model weights from either checkpoint format, for the deployment tools (export, postprocess).

- ours: object-based `tf.train.Checkpoint(model=..., optimizer=..., global_step=...)` (runtime/runner.py), given as
  a prefix (`.../model.ckpt-N`) or a directory holding a `checkpoint` file;
- the original's: TF1 name-based checkpoints (`resnet50/conv2d/conv2d/kernel`, ...), via model/checkpoint_names.py.
"""
import os

import tensorflow as tf

from model.layers.quantization import is_quantization_variable
from utils.errors import UserError

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def resolve_checkpoint(path, flag="--checkpoint"):
    """A directory -> its latest checkpoint; a prefix must have an index file. UserError otherwise."""
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise UserError(f"{flag} {path}: no checkpoint in that directory")
        return latest
    if not os.path.exists(path + ".index"):
        raise UserError(f"{flag} {path}: no such checkpoint (expected {path}.index or a directory with a "
                        "`checkpoint` file)")
    return path


def checkpoint_shapes(path):
    try:
        return tf.train.load_checkpoint(path).get_variable_to_shape_map()
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as error:
        raise UserError(f"cannot read checkpoint {path}: {str(error).splitlines()[0][:300]}") from None


def is_object_based(path):
    return OBJECT_GRAPH_KEY in checkpoint_shapes(path)


def has_quantization_ranges(path):
    return any("quant" in name.lower() for name in checkpoint_shapes(path))


def copy_variables(source, target):
    """Copy every variable of `source` into the variable with the same path in `target` (QAT variables of
    `target` that `source` lacks keep their values). Shapes may differ only by the 1x1-conv classifier reshape."""
    by_path = {v.path: v for v in target.variables}
    for variable in source.variables:
        destination = by_path.get(variable.path)
        if destination is None:
            if is_quantization_variable(variable):
                continue
            raise AssertionError(f"no variable {variable.path} in the target model")
        destination.assign(tf.reshape(variable, destination.shape))


def restore_ours(model, path, describe, build_twin=None):
    """Strict restore of an object-based checkpoint into `model`.

    A float checkpoint cannot match a QAT model strictly (the range variables are absent), so then `build_twin()`
    builds the float twin, which is restored strictly and copied over by variable path.
    """
    model_has_ranges = any(is_quantization_variable(v) for v in model.variables)
    if model_has_ranges and not has_quantization_ranges(path):
        if build_twin is None:
            raise UserError(f"checkpoint {path} has no quantisation ranges")
        twin = build_twin()
        restore_ours(twin, path, describe)
        copy_variables(twin, model)
        return
    try:
        status = tf.train.Checkpoint(model=model).read(path)
        status.assert_existing_objects_matched()
        status.expect_partial()  # optimizer slots and global_step are not wanted here
    except (ValueError, AssertionError, tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UserError(f"checkpoint {path} does not fit {describe}: {first[:300]}") from None


def restore_weights(model, path, arch, describe, build_twin=None):
    """Restore `model` from our checkpoint or the original's TF1 checkpoint (detected from the file)."""
    from model import checkpoint_names
    path = resolve_checkpoint(path)
    if is_object_based(path):
        restore_ours(model, path, describe, build_twin)
    else:
        checkpoint_names.load_tf1_checkpoint(model, path, arch)
    return path
