"""ResNet-50 v1.5, ResNeXt101-32x4d and SE-ResNeXt101-32x4d as Keras models (docs/ORIGINAL.md#architectures).

`python -m model.resnet --arch ARCH [--num_classes N] [--image_size S]` prints a per-stage summary.
"""
import dataclasses
import math
import sys

if __name__ == "__main__":  # the tool (main below): TensorFlow's start-up lines filtered as every tool's, before
    from utils import quiet  # keras imports it (utils/quiet.py; RN50_VERBOSE=1 shows them)
    quiet.setup(sys.argv[1:])

import keras  # noqa: E402

from model.blocks.conv2d_block import Conv2DBlock
from model.blocks.resnet_bottleneck_block import BottleneckBlock
from model.kernels import Kernels, check_purpose, choose_kernels
from model.layers.classifier import Classifier
from model.layers.initializers import Initializers
from model.layers.conv import same_output_extent
from model.layers.layout import KERAS_DATA_FORMATS, ToChannelsFirst
from model.layers.normalization import InputNormalization
from model.layers.pooling import MaxPool2D
from model.layers.qat_layers import QuantizedClassifier
from model.layers.quantization import QuantizationConfig, QuantizationState
from utils import defaults
from utils.devices import CPU
from utils.errors import ArgumentParser, UserError, doc_part


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    layers: tuple        # bottleneck blocks per stage
    widths: tuple        # bottleneck (3x3) width per stage
    expansions: int      # output depth = width * expansions
    cardinality: int     # groups of the 3x3 conv
    use_se: bool
    se_ratio: int = 16

    def out_channels(self, stage):
        return self.widths[stage] * self.expansions


ARCHITECTURES = {
    "resnet50": ArchSpec(layers=(3, 4, 6, 3), widths=(64, 128, 256, 512), expansions=4, cardinality=1,
                         use_se=False),
    "resnext101-32x4d": ArchSpec(layers=(3, 4, 23, 3), widths=(128, 256, 512, 1024), expansions=2, cardinality=32,
                                 use_se=False),
    "se-resnext101-32x4d": ArchSpec(layers=(3, 4, 23, 3), widths=(128, 256, 512, 1024), expansions=2,
                                    cardinality=32, use_se=True, se_ratio=16),
}

STEM_FILTERS = 64
STEM_KERNEL = 7


def get_arch(arch):
    if arch not in ARCHITECTURES:
        raise UserError(f"unknown --arch {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def block_name(stage, index):
    return f"btlnck_block_{stage}_{index}"


def block_strides(stage, index):
    """v1.5 downsampling: the first block of stages 1-3 has stride 2."""
    return 2 if index == 0 and stage != 0 else 1


def _data_format(compute_format, platform, allow_nchw_on_cpu):
    if compute_format not in KERAS_DATA_FORMATS:
        raise UserError(f"--data_format must be NHWC or NCHW, got {compute_format!r}")
    if not allow_nchw_on_cpu:
        platform.check_compute_format(compute_format)  # fail here instead of deep inside TF
    return KERAS_DATA_FORMATS[compute_format]


def _dtype_policy(dtype_policy):
    try:
        return keras.dtype_policies.get(dtype_policy or "float32")
    except (ValueError, TypeError) as error:
        raise UserError(f"unknown dtype policy {dtype_policy!r}: {error}") from None


def on_raw_pixels(model):
    """`model` as a function of raw 0..255 RGB pixels (`f(images, training=False)`): the model itself when it
    normalises its input, else the normalisation and then the model (one built with `input_normalized=True` for
    DALI's normalised batches, which predict and the SavedModel export must not feed raw pixels)."""
    if not getattr(model, "input_normalized", False):  # normalises its own input (or is not one of ours)
        return model
    normalize = InputNormalization(name="input_normalization")
    return lambda images, training=False: model(normalize(images), training=training)


def build_model(arch, num_classes=defaults.NUM_CLASSES, compute_format="NHWC", dtype_policy=None, weight_init="fan_out",
                use_final_conv=False, input_normalized=False, image_size=None, seed=None, *, platform=CPU,
                allow_nchw_on_cpu=False, purpose="train", kernels=None, quantization=None):
    """Build the Keras model: NHWC float32 images -> float32 logits [B, num_classes].

    `platform` (utils/devices.Platform, decided at start-up) and `purpose` ("train", "inference" or "export")
    pick the conv formulations (model/kernels.choose_kernels): cuDNN's on GPU; on CPU the training-friendly ones
    for "train" and plain conv ops for "inference" / "export". `kernels` (a model.kernels.Kernels) overrides that
    choice. The variables, their names and order and the function computed (up to float rounding) are the same
    whichever is chosen; the layers keep the chosen formulation in every call, training or not.
    `allow_nchw_on_cpu` builds an NCHW model without a GPU; it then only runs under
    `tf.function(jit_compile=True)` (XLA compiles NCHW conv/pool on CPU), which is how the tests use it.
    `quantization`: a `QuantizationConfig` for QAT (model/layers/quantization.py), None for the float model; it adds
    only non-trainable variables (`quant` in their paths) and leaves the float variables' names and order alone.
    """
    spec = get_arch(arch)
    data_format = _data_format(compute_format, platform, allow_nchw_on_cpu)
    check_purpose(purpose)
    if kernels is None:
        kernels = choose_kernels(platform, purpose)
    elif not isinstance(kernels, Kernels):
        raise TypeError(f"kernels must be a model.kernels.Kernels or None, got {type(kernels).__name__}")
    policy = _dtype_policy(dtype_policy)
    init = Initializers(weight_init, seed)
    if quantization is not None and not isinstance(quantization, QuantizationConfig):
        raise TypeError(f"quantization must be a QuantizationConfig or None, got {type(quantization).__name__}")
    qat = QuantizationState(quantization) if quantization is not None else None

    images = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="input")
    x = images
    if not input_normalized:
        x = InputNormalization(name="input_normalization")(x)
    if data_format == "channels_first":
        x = ToChannelsFirst(name="input_reshape", dtype=policy)(x)
    x = Conv2DBlock(STEM_FILTERS, STEM_KERNEL, 2, use_relu=True, data_format=data_format,
                    kernel_initializer=init.conv(), name="conv2d", dtype=policy, quantization=qat,
                    owns_quant_step=qat is not None, kernels=kernels)(x)
    x = MaxPool2D(3, 2, data_format=data_format, name="max_pooling2d", dtype=policy)(x)
    in_channels = STEM_FILTERS
    for stage, num_blocks in enumerate(spec.layers):
        for index in range(num_blocks):
            block = BottleneckBlock(
                in_channels, spec.widths[stage], spec.expansions, strides=block_strides(stage, index),
                cardinality=spec.cardinality, use_se=spec.use_se, se_ratio=spec.se_ratio, data_format=data_format,
                initializers=init, name=block_name(stage, index), dtype=policy, quantization=qat, kernels=kernels)
            x = block(x)
            in_channels = block.out_channels
    head, head_kwargs = (Classifier, {}) if qat is None else (QuantizedClassifier, {"state": qat})
    logits = head(num_classes, use_final_conv=use_final_conv, data_format=data_format,
                  kernel_initializer=init.classifier(num_classes), name="output", dtype=policy, **head_kwargs)(x)
    model = keras.Model(images, logits, name=arch)
    model.input_normalized = input_normalized  # on_raw_pixels: what its callers must feed it
    return model


def _all_layers(model):
    # Keras 3 has no public recursive layer walk; _flatten_layers is the one its own tracking uses.
    return model._flatten_layers(include_self=False, recursive=True)


def regularized_variables(model):
    """The L2 set (docs/ORIGINAL.md#weight-decay): every trainable variable except BN gamma/beta (biases included),
    identified by layer type."""
    bn_variables = {id(v) for layer in _all_layers(model) if isinstance(layer, keras.layers.BatchNormalization)
                    for v in layer.weights}
    return [v for v in model.trainable_variables if id(v) not in bn_variables]


def averaged_variables(model):
    """The variables the EMA extension averages (utils/ema.py): the trainable ones and the BN moving statistics,
    as Model Garden does; the QAT ranges are left out (they are running min/max already)."""
    bn_statistics = [v for layer in _all_layers(model) if isinstance(layer, keras.layers.BatchNormalization)
                     for v in layer.non_trainable_weights]
    return list(model.trainable_variables) + bn_statistics


# --- summary ---------------------------------------------------------------------------------------------------

def last_map_side(image_size):
    """The side of the last stage's feature maps at `image_size`: the stem conv, the max-pool and the first block of
    stages 1-3 each halve it, rounding up as SAME padding does (the same for every architecture)."""
    size = same_output_extent(same_output_extent(image_size, 2), 2)
    for stage, num_blocks in enumerate(ARCHITECTURES["resnet50"].layers):
        for index in range(num_blocks):
            size = same_output_extent(size, block_strides(stage, index))
    return size


def forward_macs(arch, num_classes=defaults.NUM_CLASSES, image_size=defaults.IMAGE_SIZE):
    """Multiply-adds per image of every conv and dense layer, as {row name: MACs} in network order."""
    spec = get_arch(arch)
    size = same_output_extent(image_size, 2)
    macs = {"stem": size * size * STEM_KERNEL * STEM_KERNEL * 3 * STEM_FILTERS}
    size = same_output_extent(size, 2)
    in_channels = STEM_FILTERS
    for stage, num_blocks in enumerate(spec.layers):
        width, out_channels = spec.widths[stage], spec.out_channels(stage)
        total = 0
        for index in range(num_blocks):
            out_size = same_output_extent(size, block_strides(stage, index))
            total += size * size * in_channels * width                                  # bottleneck_1
            total += out_size * out_size * 9 * (width // spec.cardinality) * width     # bottleneck_2
            total += out_size * out_size * width * out_channels                        # bottleneck_3
            if in_channels != out_channels:
                total += out_size * out_size * in_channels * out_channels              # projection
            if spec.use_se:
                total += 2 * out_channels * (out_channels // spec.se_ratio)
            size, in_channels = out_size, out_channels
        macs[f"stage {stage}"] = total
    macs["output"] = in_channels * num_classes
    return macs


def _summary_rows(model, spec):
    rows = [("stem", ["conv2d", "max_pooling2d"])]
    for stage, num_blocks in enumerate(spec.layers):
        rows.append((f"stage {stage}", [block_name(stage, index) for index in range(num_blocks)]))
    rows.append(("output", ["output"]))
    return rows


def summary_lines(model, arch, image_size=defaults.IMAGE_SIZE, num_classes=defaults.NUM_CLASSES):
    spec = get_arch(arch)
    macs = forward_macs(arch, num_classes, image_size)
    lines = [f"{arch}: input [B, {image_size}, {image_size}, 3], {num_classes} classes",
             f"{'stage':<10}{'output shape':<24}{'trainable':>14}{'non-trainable':>16}{'GMACs':>10}"]
    for row, layer_names in _summary_rows(model, spec):
        layers = [model.get_layer(name) for name in layer_names]
        trainable = sum(math.prod(v.shape) for layer in layers for v in layer.trainable_weights)
        frozen = sum(math.prod(v.shape) for layer in layers for v in layer.non_trainable_weights)
        shape = "[B, " + ", ".join(str(d) for d in layers[-1].output.shape[1:]) + "]"
        lines.append(f"{row:<10}{shape:<24}{trainable:>14,}{frozen:>16,}{macs[row] / 1e9:>10.3f}")
    lines.append(f"forward GMACs (multiply-adds, conv+dense, per image at {image_size}px): "
                 f"{sum(macs.values()) / 1e9:.3f}")
    trainable = sum(math.prod(v.shape) for v in model.trainable_variables)
    frozen = sum(math.prod(v.shape) for v in model.non_trainable_variables)
    lines.append(f"trainable_params={trainable} non_trainable_params={frozen} "
                 f"trainable_variables={len(model.trainable_variables)}")
    return lines


def main(argv=None):
    parser = ArgumentParser(prog="python -m model.resnet", description=doc_part(__doc__, 0, "\n"),
                            allow_abbrev=False)
    parser.add_argument("--arch", required=True, choices=sorted(ARCHITECTURES))
    parser.add_argument("--num_classes", type=int, default=defaults.NUM_CLASSES)
    parser.add_argument("--image_size", type=int, default=defaults.IMAGE_SIZE)
    args = parser.parse_args(argv)
    model = build_model(args.arch, num_classes=args.num_classes, image_size=args.image_size)
    print("\n".join(summary_lines(model, args.arch, args.image_size, args.num_classes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
