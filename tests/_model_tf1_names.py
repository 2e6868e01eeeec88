"""The original's TF1 variable names and shapes, generated from the rules of docs/ORIGINAL.md#variable-names
(independent of model/)."""

TABLE = {  # arch: (blocks per stage, widths, expansion, cardinality, se)
    "resnet50": ((3, 4, 6, 3), (64, 128, 256, 512), 4, 1, False),
    "resnext101-32x4d": ((3, 4, 23, 3), (128, 256, 512, 1024), 2, 32, False),
    "se-resnext101-32x4d": ((3, 4, 23, 3), (128, 256, 512, 1024), 2, 32, True),
}


def _bn(scope, channels):
    return {f"{scope}/BatchNorm/{v}": [channels] for v in ("beta", "gamma", "moving_mean", "moving_variance")}


def tf1_names_and_shapes(arch, num_classes, layers=None):
    """{name: shape} of `arch`'s variables; `layers` (blocks per stage) overrides the architecture's depth."""
    depth, widths, expansion, cardinality, se = TABLE[arch]
    layers = layers or depth
    names = {f"{arch}/conv2d/conv2d/kernel": [7, 7, 3, 64], **_bn(f"{arch}/conv2d", 64)}
    c_in = 64
    for s, n in enumerate(layers):
        w = widths[s]
        d = w * expansion
        for l in range(n):
            scope = f"{arch}/btlnck_block_{s}_{l}"
            names[f"{scope}/bottleneck_1/conv2d/kernel"] = [1, 1, c_in, w]
            names.update(_bn(f"{scope}/bottleneck_1", w))
            if cardinality > 1:
                names[f"{scope}/bottleneck_2/bottleneck_2group_filter"] = [3, 3, w // cardinality, w]
            else:
                names[f"{scope}/bottleneck_2/conv2d/kernel"] = [3, 3, w, w]
            names.update(_bn(f"{scope}/bottleneck_2", w))
            names[f"{scope}/bottleneck_3/conv2d/kernel"] = [1, 1, w, d]
            names.update(_bn(f"{scope}/bottleneck_3", d))
            if c_in != d:
                names[f"{scope}/shortcut/conv2d/conv2d/kernel"] = [1, 1, c_in, d]
                names.update(_bn(f"{scope}/shortcut/conv2d", d))
            if se:
                names[f"{scope}/bottleneck_se_layer/dense/kernel"] = [d, d // 16]
                names[f"{scope}/bottleneck_se_layer/dense/bias"] = [d // 16]
                names[f"{scope}/bottleneck_se_layer/dense_1/kernel"] = [d // 16, d]
                names[f"{scope}/bottleneck_se_layer/dense_1/bias"] = [d]
            c_in = d
    names[f"{arch}/output/dense/kernel"] = [2048, num_classes]
    names[f"{arch}/output/dense/bias"] = [num_classes]
    return names


def expected_keras_path(tf1_name, arch):
    """Where our model keeps a TF1 variable (Keras path), by string rules only."""
    path = tf1_name[len(arch) + 1:]
    path = path.replace("bottleneck_2/bottleneck_2group_filter", "bottleneck_2/group_filter/group_filter")
    path = path.replace("shortcut/conv2d/", "shortcut/")
    return path
