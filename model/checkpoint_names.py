"""Map between our Keras variables and the original's TF1 variable names (docs/ORIGINAL.md#variable-names);
model/checkpoint/ reads and writes checkpoints by it.

The map is built by walking the model's structure (stem `conv2d`, blocks `btlnck_block_{s}_{l}`, head `output`),
never from Keras' own variable paths, so it does not depend on Keras naming rules.
"""
from model.resnet import block_name, get_arch

BN_VARIABLES = ("beta", "gamma", "moving_mean", "moving_variance")


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
