"""Map between our Keras variables and the original's TF1 variable names (SPEC §3.8), and a TF1 checkpoint reader.

The map is built by walking the model's structure (stem `conv2d`, blocks `btlnck_block_{s}_{l}`, head `output`),
never from Keras' own variable paths, so it does not depend on Keras naming rules.
"""
import numpy as np
import tensorflow as tf

from model.resnet import block_name, get_arch
from utils.errors import UserError

BN_VARIABLES = ("beta", "gamma", "moving_mean", "moving_variance")
_MAX_LISTED = 10


def _bn_entries(scope, bn):
    return {f"{scope}/BatchNorm/{name}": getattr(bn, name) for name in BN_VARIABLES}


def _conv_block_entries(scope, block, grouped_name=None):
    """Conv kernel + BN of one conv2d_block under TF1 scope `scope`."""
    if block.cardinality > 1:
        entries = {f"{scope}/{grouped_name}": block.conv.kernel}
    else:
        entries = {f"{scope}/conv2d/kernel": block.conv.kernel}
    entries.update(_bn_entries(scope, block.bn))
    return entries


def tf1_variable_map(model, arch):
    """{TF1 variable name: Keras variable} for every model variable (trainable and BN moving statistics)."""
    spec = get_arch(arch)
    names = {}
    # The stem is a conv2d_block named `conv2d`, so its conv sits one scope deeper: conv2d/conv2d/kernel.
    names.update(_conv_block_entries(f"{arch}/conv2d", model.get_layer("conv2d")))
    for stage, num_blocks in enumerate(spec.layers):
        for index in range(num_blocks):
            scope = f"{arch}/{block_name(stage, index)}"
            block = model.get_layer(block_name(stage, index))
            names.update(_conv_block_entries(f"{scope}/bottleneck_1", block.bottleneck_1))
            names.update(_conv_block_entries(f"{scope}/bottleneck_2", block.bottleneck_2,
                                             grouped_name="bottleneck_2group_filter"))
            names.update(_conv_block_entries(f"{scope}/bottleneck_3", block.bottleneck_3))
            if block.shortcut is not None:
                names.update(_conv_block_entries(f"{scope}/shortcut/conv2d", block.shortcut))
            if block.se is not None:
                for tf1_dense, dense in (("dense", block.se.squeeze), ("dense_1", block.se.excite)):
                    names[f"{scope}/bottleneck_se_layer/{tf1_dense}/kernel"] = dense.kernel
                    names[f"{scope}/bottleneck_se_layer/{tf1_dense}/bias"] = dense.bias
    head = model.get_layer("output").dense
    names[f"{arch}/output/dense/kernel"] = head.kernel
    names[f"{arch}/output/dense/bias"] = head.bias
    # QAT range/step variables (`quant` in their path, model/layers/quantization.py) have no TF1 counterpart here.
    float_variables = [v for v in model.variables if "quant" not in v.path]
    if len(names) != len(float_variables):
        raise AssertionError(f"name map covers {len(names)} of {len(float_variables)} model variables")
    return names


def keras_to_tf1_names(model, arch):
    """The inverse map: {Keras variable path: TF1 variable name}."""
    inverse = {variable.path: name for name, variable in tf1_variable_map(model, arch).items()}
    if len(inverse) != len([v for v in model.variables if "quant" not in v.path]):
        raise AssertionError("Keras variable paths are not unique")
    return inverse


def _is_ignored(name):
    """Checkpoint entries that are not model variables: step counter, optimizer slots, loss scale, QAT ranges."""
    lowered = name.lower()
    return (name == "global_step" or name.endswith("/Momentum") or "loss_scale" in lowered
            or "lossscale" in lowered or "good_steps" in lowered or "quant" in lowered)


def _listing(title, items):
    items = sorted(items)
    shown = ", ".join(items[:_MAX_LISTED])
    more = f" ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return f"{len(items)} {title}: {shown}{more}"


def _compatible(checkpoint_shape, variable_shape):
    """Equal shapes, or the classifier kernel as dense [2048,N] vs 1x1 conv [1,1,2048,N] (SPEC §3.5)."""
    a, b = tuple(checkpoint_shape), tuple(variable_shape)
    return a == b or (1, 1) + a == b or a == (1, 1) + b


def load_tf1_checkpoint(model, path, arch, trainable_only=False):
    """Assign every mapped variable from a TF1 name-based checkpoint; refuse (UserError) on any mismatch.

    `trainable_only` restores trainables only (the original's --finetune_checkpoint: BN moving statistics keep
    their initial values). Returns the list of TF1 names that were restored.
    """
    try:
        reader = tf.train.load_checkpoint(path)
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as error:
        raise UserError(f"cannot read TF1 checkpoint {path!r}: {str(error).splitlines()[0]}") from None
    checkpoint_shapes = reader.get_variable_to_shape_map()
    name_map = tf1_variable_map(model, arch)
    wanted = {name: variable for name, variable in name_map.items() if variable.trainable or not trainable_only}
    missing = [name for name in wanted if name not in checkpoint_shapes]
    unexpected = [name for name in checkpoint_shapes if name not in name_map and not _is_ignored(name)]
    mis_shaped = [f"{name} {list(checkpoint_shapes[name])} vs model {list(variable.shape)}"
                  for name, variable in wanted.items()
                  if name in checkpoint_shapes and not _compatible(checkpoint_shapes[name], variable.shape)]
    problems = [_listing(title, items) for title, items in
                (("missing", missing), ("unexpected", unexpected), ("mis-shaped", mis_shaped)) if items]
    if problems:
        raise UserError(f"checkpoint {path} does not match {arch}: " + "; ".join(problems))
    for name, variable in wanted.items():
        value = reader.get_tensor(name)
        variable.assign(np.reshape(value, variable.shape).astype(variable.dtype))
    return sorted(wanted)
