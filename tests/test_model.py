"""Tests of model/: counts, topology, numerics against NumPy, BN statistics, init, layouts, precision."""
import functools
import math

import keras
import numpy as np

import pytest
import tensorflow as tf

from model.blocks.resnet_bottleneck_block import BottleneckBlock
from model.layers.batch_norm import BatchNorm
from model.layers.classifier import Classifier
from model.layers.conv import Conv2D
from model.layers.grouped_conv import GroupedConv2D
from model.layers.initializers import Initializers
from model.layers.normalization import CHANNEL_MEANS, CHANNEL_STDS
from model.kernels import CPU_PLAIN_KERNELS, GPU_KERNELS
from model.resnet import ARCHITECTURES, build_model, forward_macs, last_map_side, regularized_variables
from tests import _model_reference as ref
from utils.devices import CPU
from utils.errors import UserError

EXPECTED_COUNTS = {  # docs/ORIGINAL.md#parameter-counts, 1001 classes
    "resnet50": (25559081, 53120, 161),
    "resnext101-32x4d": (44179753, 137856, 314),
    "se-resnext101-32x4d": (48957465, 137856, 446),
}


def test_the_tf_free_name_list_is_the_architecture_table():
    from model.arch_names import ARCH_NAMES
    assert tuple(ARCHITECTURES) == ARCH_NAMES


def _counts(model):
    return (sum(math.prod(v.shape) for v in model.trainable_variables),
            sum(math.prod(v.shape) for v in model.non_trainable_variables), len(model.trainable_variables))


@pytest.fixture(scope="module")
def models_1001():
    """One 1001-class model per arch at 64 px, built once per module. Its shapes and variables are the same with any
    kernels (tests/test_kernels.py::test_train_inference_and_gpu_builds_have_the_same_checkpoint_keys); the GPU's
    single grouped convolution builds fastest."""
    return {arch: build_model(arch, image_size=64, seed=0, kernels=GPU_KERNELS) for arch in ARCHITECTURES}


@pytest.mark.parametrize("arch", sorted(EXPECTED_COUNTS))
def test_parameter_and_variable_counts(models_1001, arch):
    assert _counts(models_1001[arch]) == EXPECTED_COUNTS[arch]


@pytest.mark.parametrize("arch, quantize", [("resnet50", False), ("se-resnext101-32x4d", True)])
def test_a_model_is_built_from_shapes_with_every_variable_and_a_call_adds_none(arch, quantize, monkeypatch):
    """build_model traces no block's call() (Keras builds the blocks from their shapes: ResNeXt101's build took 44 s
    with the tracing, docs/PERFORMANCE.md), and still creates every variable: calling the model, inference then
    training, adds none (QAT's SE range variables included, which call() used to create)."""
    from model.layers.quantization import QuantizationConfig
    traced = []
    original = BottleneckBlock.call

    @functools.wraps(original)  # (Keras reads call()'s signature to name build()'s shapes)
    def recording_call(self, *args, **kwargs):
        traced.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BottleneckBlock, "call", recording_call)
    model = build_model(arch, num_classes=10, image_size=32, seed=1,
                        quantization=QuantizationConfig() if quantize else None)
    assert traced == []
    built = [(v.path, tuple(v.shape)) for v in model.variables]
    images = np.zeros([1, 32, 32, 3], np.float32)
    for training in (False, True):
        model(images, training=training)
    assert len(traced) == 2 * len([layer for layer in model.layers if isinstance(layer, BottleneckBlock)])
    assert [(v.path, tuple(v.shape)) for v in model.variables] == built


def test_summary_command_last_line(capsys):
    from model import resnet
    assert resnet.main(["--arch", "resnet50"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "trainable_params=25559081 non_trainable_params=53120 trainable_variables=161"
    gmacs_line = [line for line in lines if line.startswith("forward GMACs (multiply-adds")][0]
    assert 4.0 < float(gmacs_line.split()[-1]) < 4.2  # ResNet-50 v1.5: ~4.1 G multiply-adds at 224 px


def test_forward_macs_formula():
    macs = forward_macs("resnet50", 1001, 224)
    assert macs["stem"] == 112 * 112 * 7 * 7 * 3 * 64
    assert macs["output"] == 2048 * 1001
    # Stage 0 by hand, all at 56x56: 1x1 (64 or 256 -> 64), 3x3 64->64, 1x1 64->256, one projection 64->256.
    expected = 56 * 56 * ((64 + 256 + 256) * 64 + 3 * (9 * 64 * 64 + 64 * 256) + 64 * 256)
    assert macs["stage 0"] == expected
    # At the quick start's 40 px: the stem's 20x20 pooled to 10x10, then 10, 5, 3 and 2 px maps (SAME rounds up).
    macs = forward_macs("resnet50", 10, 40)
    assert macs["stem"] == 20 * 20 * 7 * 7 * 3 * 64
    # stage 3: block 0 reduces 1024 channels at 3x3 before its strided 3x3 conv to 2x2; blocks 1 and 2 at 2x2
    assert macs["stage 3"] == 3 * 3 * 1024 * 512 + 2 * 2 * (9 * 512 * 512 + 512 * 2048 + 1024 * 2048) \
        + 2 * 2 * 2 * (2048 * 512 + 9 * 512 * 512 + 512 * 2048)
    assert macs["output"] == 2048 * 10


# --- topology ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", sorted(EXPECTED_COUNTS))
def test_stage_shapes_strides_projections_and_se(models_1001, arch):
    model, spec = models_1001[arch], ARCHITECTURES[arch]
    assert tuple(model.get_layer("conv2d").output.shape) == (None, 32, 32, 64)
    assert model.get_layer("conv2d").conv.strides == (2, 2)
    assert tuple(model.get_layer("max_pooling2d").output.shape) == (None, 16, 16, 64)
    sizes = [16, 8, 4, 2]
    assert spec.layers == ((3, 4, 6, 3) if arch == "resnet50" else (3, 4, 23, 3))
    for stage, num_blocks in enumerate(spec.layers):
        depth = 256 * 2 ** stage
        for index in range(num_blocks):
            block = model.get_layer(f"btlnck_block_{stage}_{index}")
            stride = 2 if (index == 0 and stage > 0) else 1
            assert tuple(block.output.shape) == (None, sizes[stage], sizes[stage], depth)
            # v1.5: stride on the 3x3 only.
            assert block.bottleneck_1.conv.strides in ((1, 1), 1)
            assert block.bottleneck_2.conv.strides in ((stride, stride), stride)
            assert block.bottleneck_3.conv.strides in ((1, 1), 1)
            assert (block.shortcut is not None) == (index == 0)
            if block.shortcut is not None:
                assert block.shortcut.conv.strides == (stride, stride)
                assert not block.shortcut.use_relu
            assert (block.se is not None) == (arch == "se-resnext101-32x4d")
            width = spec.widths[stage]
            assert tuple(block.bottleneck_2.conv.kernel.shape) == (3, 3, width // spec.cardinality, width)
            if block.se is not None:
                assert block.se.squeeze.units == depth // 16 and block.se.excite.units == depth
    assert tuple(model.output.shape) == (None, 1001)


def test_the_last_stage_map_side_is_the_built_models():
    """What the training's few-values warning counts on (runtime/metrics.few_batch_norm_values_warning): 32 px
    ends in 1x1 maps and 224 in 7x7; at 33 px every halving rounds up, as the built model's SAME padding does."""
    assert [last_map_side(size) for size in (32, 33, 40, 64, 65, 224)] == [1, 2, 2, 2, 3, 7]
    model = build_model("resnet50", num_classes=10, image_size=33)
    assert tuple(model.get_layer("btlnck_block_3_2").output.shape)[1:3] == (2, 2)


def test_unknown_arch_and_weight_init_are_user_errors():
    with pytest.raises(UserError):
        build_model("resnet18")
    with pytest.raises(UserError):
        build_model("resnet50", weight_init="uniform")


def test_regularized_variables_exclude_only_bn_scale_and_offset(models_1001):
    model = models_1001["se-resnext101-32x4d"]
    chosen = {id(v) for v in regularized_variables(model)}
    assert len(chosen) == 446 - 2 * 104
    for variable in model.trainable_variables:
        is_bn = variable.path.split("/")[-2] == "BatchNorm"
        assert (id(variable) in chosen) != is_bn, variable.path
    paths = {v.path for v in regularized_variables(model)}
    assert "output/dense/bias" in paths and "btlnck_block_0_0/bottleneck_se_layer/dense/bias" in paths


# --- numerics against NumPy ---------------------------------------------------------------------------------------

def _randomise_block(block, rng):
    """Random weights everywhere (incl. BN statistics) and the same values keyed for the NumPy reference."""
    params = {}
    parts = {"b1/": block.bottleneck_1, "b2/": block.bottleneck_2, "b3/": block.bottleneck_3}
    if block.shortcut is not None:
        parts["sc/"] = block.shortcut
    for prefix, part in parts.items():
        kernel = rng.normal(0, 0.2, part.conv.kernel.shape).astype("f4")
        part.conv.kernel.assign(kernel)
        params[prefix + "kernel"] = kernel
        for name in ("gamma", "beta", "moving_mean", "moving_variance"):
            value = rng.uniform(0.5, 1.5, part.bn.gamma.shape).astype("f4") if name in ("gamma", "moving_variance") \
                else rng.normal(0, 0.3, part.bn.gamma.shape).astype("f4")
            getattr(part.bn, name).assign(value)
            params[prefix + name] = value
    if block.se is not None:
        for name, dense in (("dense", block.se.squeeze), ("dense_1", block.se.excite)):
            for attr in ("kernel", "bias"):
                value = rng.normal(0, 0.3, getattr(dense, attr).shape).astype("f4")
                getattr(dense, attr).assign(value)
                params[f"se/{name}/{attr}"] = value
    return params


@pytest.mark.parametrize("config", [
    dict(in_channels=64, width=64, expansion=2, strides=2, cardinality=32, use_se=True),   # grouped + SE + proj
    dict(in_channels=32, width=8, expansion=4, strides=1, cardinality=1, use_se=False),    # identity shortcut
    dict(in_channels=16, width=8, expansion=4, strides=2, cardinality=1, use_se=False),    # strided projection
])
def test_bottleneck_block_matches_numpy(config):
    rng = np.random.default_rng(1)
    block = BottleneckBlock(**config, se_ratio=16, name="block")
    x = rng.normal(0, 1, (2, 7, 7, config["in_channels"])).astype("f4")
    block(x, training=False)  # build
    params = _randomise_block(block, rng)
    expected = ref.bottleneck_inference(x, params, config["strides"], config["cardinality"],
                                        projection=config["in_channels"] != config["width"] * config["expansion"],
                                        se=config["use_se"])
    actual = block(x, training=False).numpy()
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_head_matches_numpy_and_final_conv_equals_dense():
    rng = np.random.default_rng(2)
    features = rng.normal(0, 1, (3, 2, 2, 2048)).astype("f4")
    dense_head = Classifier(7, name="output")
    conv_head = Classifier(7, use_final_conv=True, name="output")
    dense_head(features), conv_head(features)
    kernel = rng.normal(0, 0.05, (2048, 7)).astype("f4")
    bias = rng.normal(0, 1, 7).astype("f4")
    dense_head.dense.kernel.assign(kernel), dense_head.dense.bias.assign(bias)
    conv_head.dense.kernel.assign(kernel.reshape(1, 1, 2048, 7)), conv_head.dense.bias.assign(bias)
    expected = ref.head(features, kernel, bias)
    np.testing.assert_allclose(dense_head(features).numpy(), expected, rtol=1e-5, atol=1e-5)
    conv_logits = conv_head(features)
    assert conv_logits.shape == (3, 7)
    np.testing.assert_allclose(conv_logits.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.shallow
def test_input_normalisation_inside_model():
    model = build_model("resnet50", num_classes=5, image_size=32, seed=3)
    assert CHANNEL_MEANS == (123.68, 116.28, 103.53) and CHANNEL_STDS == (58.395, 57.120, 57.385)
    raw = np.random.default_rng(3).uniform(0, 255, (2, 32, 32, 3)).astype("f4")
    normalised = model.get_layer("input_normalization")(raw).numpy()
    np.testing.assert_allclose(normalised, (raw - np.array(CHANNEL_MEANS)) / np.array(CHANNEL_STDS), rtol=1e-5,
                               atol=1e-5)
    # input_normalized=True skips the layer: raw input to that model == normalised input to this one.
    bare = build_model("resnet50", num_classes=5, image_size=32, input_normalized=True)
    for target, source in zip(bare.variables, model.variables):
        target.assign(source)
    np.testing.assert_allclose(bare(normalised, training=False).numpy(), model(raw, training=False).numpy(),
                               rtol=1e-4, atol=1e-4)


# --- batch norm ---------------------------------------------------------------------------------------------------

def test_batch_norm_training_step_matches_numpy():
    rng = np.random.default_rng(4)
    x = rng.normal(2.0, 3.0, (4, 5, 5, 6)).astype("f4")
    bn = BatchNorm(name="BatchNorm")
    bn.build(x.shape)
    assert (bn.momentum, bn.epsilon) == (0.9, 1e-5)
    np.testing.assert_array_equal(bn.gamma.numpy(), 1), np.testing.assert_array_equal(bn.beta.numpy(), 0)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), 0)
    np.testing.assert_array_equal(bn.moving_variance.numpy(), 1)
    gamma, beta = rng.uniform(0.5, 2, 6).astype("f4"), rng.normal(0, 1, 6).astype("f4")
    bn.gamma.assign(gamma), bn.beta.assign(beta)
    out = bn(x, training=True).numpy()
    x64 = x.astype(np.float64)
    mean, biased_var = x64.mean(axis=(0, 1, 2)), x64.var(axis=(0, 1, 2))
    n = 4 * 5 * 5
    np.testing.assert_allclose(out, (x64 - mean) / np.sqrt(biased_var + 1e-5) * gamma + beta, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-6)
    # TF1 fused BN: the moving variance gets the unbiased batch variance.
    np.testing.assert_allclose(bn.moving_variance.numpy(), 0.9 + 0.1 * biased_var * n / (n - 1), rtol=1e-5)
    # Inference uses the moving statistics.
    moving_mean, moving_var = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    np.testing.assert_allclose(bn(x, training=False).numpy(),
                               (x64 - moving_mean) / np.sqrt(moving_var + 1e-5) * gamma + beta, rtol=1e-4, atol=1e-4)


# --- initialisation -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_conv_init_statistics(mode):
    shape = (3, 3, 128, 512)  # fan_in 1152 != fan_out 4608, so the modes are distinguishable
    fan = 9 * (128 if mode == "fan_in" else 512)
    values = Initializers(mode, seed=5).conv()(shape).numpy()
    target = math.sqrt(2.0 / fan)  # std after truncation (TF1 divides by 0.8796 to get this)
    assert abs(values.std() / target - 1) < 0.03
    assert abs(values.mean()) < 0.02 * target
    assert np.abs(values).max() <= 2 * target / 0.87962566103423978 * (1 + 1e-5)  # truncated at 2 stddev
    assert np.abs(values).max() > 1.9 * target / 0.87962566103423978  # ... and not narrower


def test_model_uses_weight_init_mode_and_glorot_grouped_filter(models_1001):
    fan_in_model = build_model("resnet50", num_classes=10, image_size=32, weight_init="fan_in", seed=6)
    kernel = fan_in_model.get_layer("btlnck_block_3_1").bottleneck_1.conv.kernel.numpy()  # [1,1,2048,512]
    assert abs(kernel.std() / math.sqrt(2.0 / 2048) - 1) < 0.03
    out_kernel = models_1001["resnet50"].get_layer("btlnck_block_3_1").bottleneck_1.conv.kernel.numpy()
    assert abs(out_kernel.std() / math.sqrt(2.0 / 512) - 1) < 0.03  # default fan_out
    head = models_1001["resnet50"].get_layer("output").dense
    assert abs(head.kernel.numpy().std() / math.sqrt(2.0 / 1001) - 1) < 0.03
    np.testing.assert_array_equal(head.bias.numpy(), 0)
    grouped = models_1001["resnext101-32x4d"].get_layer("btlnck_block_3_0").bottleneck_2.conv.kernel.numpy()
    assert grouped.shape == (3, 3, 32, 1024)
    limit = math.sqrt(6.0 / (9 * 32 + 9 * 1024))
    assert np.abs(grouped).max() <= limit
    assert abs(grouped.std() / (limit / math.sqrt(3)) - 1) < 0.03  # uniform(-a, a) has std a/sqrt(3)
    quartiles = np.quantile(grouped, [0.25, 0.5, 0.75]) / limit
    np.testing.assert_allclose(quartiles, [-0.5, 0.0, 0.5], atol=0.02)
    se = models_1001["se-resnext101-32x4d"].get_layer("btlnck_block_3_0").se
    assert abs(se.squeeze.kernel.numpy().std() / math.sqrt(1.0 / 2048) - 1) < 0.03
    np.testing.assert_array_equal(se.excite.bias.numpy(), 0)


@pytest.mark.parametrize("num_classes,fan", [(1001, 1001), (10, 1001), (3, 1001), (2000, 2000)])
def test_classifier_init_fan_out_counts_at_least_the_original_1001_classes(num_classes, fan):
    """fan_out: variance 2 / max(K, 1001), i.e. the original's exactly at 1001 (and any K >= 1001) and its
    1001-class logit scale below (2 / K would give K = 10 ten times the original's logits)."""
    values = Initializers("fan_out", seed=3).classifier(num_classes)((2048, num_classes)).numpy()
    target = math.sqrt(2.0 / fan)  # std after truncation
    assert abs(values.std() / target - 1) < 0.03
    assert np.abs(values).max() <= 2 * target / 0.87962566103423978 * (1 + 1e-5)
    fan_in = Initializers("fan_in", seed=3).classifier(num_classes)((2048, num_classes)).numpy()
    assert abs(fan_in.std() / math.sqrt(2.0 / 2048) - 1) < 0.03  # fan_in does not depend on K


def test_small_class_count_model_uses_the_capped_classifier_init():
    head = build_model("resnet50", num_classes=10, image_size=32, seed=4).get_layer("output").dense
    assert abs(head.kernel.numpy().std() / math.sqrt(2.0 / 1001) - 1) < 0.1  # 20480 values


def test_seed_makes_init_deterministic_but_not_repetitive(monkeypatch):
    # Seeding is not about depth: resnet50's blocks with stage 0's three (blocks 0_1 and 0_2 have the same shapes)
    # and one in each later stage, 6 bottlenecks instead of 16.
    import dataclasses
    monkeypatch.setitem(ARCHITECTURES, "resnet50", dataclasses.replace(ARCHITECTURES["resnet50"], layers=(3, 1, 1, 1)))
    first = build_model("resnet50", num_classes=10, image_size=32, seed=11)
    second = build_model("resnet50", num_classes=10, image_size=32, seed=11)
    for a, b in zip(first.variables, second.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    k1 = first.get_layer("btlnck_block_0_1").bottleneck_1.conv.kernel.numpy()
    k2 = first.get_layer("btlnck_block_0_2").bottleneck_1.conv.kernel.numpy()
    assert not np.array_equal(k1, k2)


# --- grouped convolution ----------------------------------------------------------------------------------------

def _per_group_reference(x, kernel, strides, groups):
    """Forward and gradients with one tf.nn.conv2d per group (written here, independent of the layer)."""
    x = tf.constant(x)
    kernel = tf.constant(kernel)
    with tf.GradientTape() as tape:
        tape.watch([x, kernel])
        cg, og = kernel.shape[2], kernel.shape[3] // groups
        y = tf.concat([tf.nn.conv2d(x[..., g * cg:(g + 1) * cg], kernel[..., g * og:(g + 1) * og], strides, "SAME")
                       for g in range(groups)], axis=-1)
        loss = tf.reduce_sum(y * tf.cos(y))
    return y.numpy(), [g.numpy() for g in tape.gradient(loss, [x, kernel])]


@pytest.mark.parametrize("implementation,execution", [
    ("split", "eager"), ("split", "function"), ("split", "jit"), ("per_group_conv", "function"), ("native", "jit")])
def test_grouped_conv_forward_and_gradient(implementation, execution):
    rng = np.random.default_rng(7)
    x = rng.normal(0, 1, (2, 9, 9, 64)).astype("f4")
    layer = GroupedConv2D(128, 3, strides=2, groups=32, implementation=implementation, name="gc")
    layer.build(x.shape)
    kernel = rng.normal(0, 0.3, (3, 3, 2, 128)).astype("f4")
    layer.kernel.assign(kernel)

    def step(inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            y = layer(inputs)
            loss = tf.reduce_sum(y * tf.cos(y))
        return (y,) + tuple(tape.gradient(loss, [inputs, layer.kernel]))

    if execution != "eager":
        step = tf.function(step, jit_compile=execution == "jit")
    y, grad_x, grad_k = step(tf.constant(x))
    expected_y, (expected_gx, expected_gk) = _per_group_reference(x, kernel, 2, 32)
    np.testing.assert_allclose(y.numpy(), ref.conv2d(x, kernel, 2, 32), rtol=1e-4, atol=1e-4)  # NumPy forward
    np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grad_x.numpy(), expected_gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grad_k.numpy(), expected_gk, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size,kernel_size,stride,channels", [
    (9, 3, 1, (6, 5)), (10, 5, 1, (6, 5)), (8, 1, 2, (6, 5)), (7, 1, 2, (6, 5)), (16, 7, 2, (6, 5)), (5, 3, 1, (6, 5)),
    (7, 3, 2, (6, 5)), (6, 3, 2, (6, 5)), (5, 3, 1, (128, 128)), (2, 3, 1, (128, 128)), (3, 3, 2, (128, 128)),
    (6, 3, 2, (64, 256)), (4, 5, 1, (256, 64)), (5, 2, 1, (128, 128)), (12, 3, 3, (128, 128)),
    (14, 3, 2, (128, 128)), (3, 3, 1, (112, 112)), (8, 3, 1, (128, 128)),
    (16, 3, 2, (128, 128)), (10, 1, 1, (6, 5)), (2, 3, 1, (256, 256))])
@pytest.mark.parametrize("execution", ["eager", "function", "jit"])
def test_conv_layer_cpu_formulations_forward_and_gradients_match_numpy(size, kernel_size, stride, channels,
                                                                         execution):
    # 8x8 to 16x16 kxk (> 49 output positions): native conv; 1x1: matmul (stride 2 after a 1x1 average pool); the
    # kxk convs of maps down to 2x2, odd and even kernels, strides 1-3: patches + matmul. From 128 x 128 channels
    # in x out, a patches conv's input gradient is, strided or on maps of at most 9 positions, its patch gradients
    # folded back by a segment sum (the product computed the other way round from 256 output channels), and
    # otherwise, as a native conv's, a forward conv of the (spread-out) output gradient with the rotated kernel;
    # below that (112 x 112), and for strided native convs from more than 100 input positions (16x16), a backward
    # conv. A 1x1 conv's input gradient is the product computed the other
    # way round up to 256 rows, batch 3 x positions (10x10: 300 rows, the plain product).
    # Forward and both gradients against NumPy, eagerly, in a graph and under XLA.
    channels_in, channels_out = channels
    rng = np.random.default_rng(11)
    x = rng.normal(0, 1, (3, size, size, channels_in)).astype("f4")
    # Scaled with the channels so outputs spread alike: the loss's y * cos(y) amplifies rounding in a large y.
    kernel = rng.normal(0, 0.3 * np.sqrt(6 / channels_in),
                        (kernel_size, kernel_size, channels_in, channels_out)).astype("f4")
    layer = Conv2D(channels_out, kernel_size, strides=stride, padding="same", use_bias=False, implementation="cpu")
    layer.build(x.shape)
    layer.kernel.assign(kernel)

    def step(inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            y = layer(inputs)
            loss = tf.reduce_sum(y * tf.cos(y))
        return (y,) + tuple(tape.gradient(loss, [inputs, layer.kernel]))

    if execution != "eager":
        step = tf.function(step, jit_compile=execution == "jit")
    y, grad_x, grad_k = step(tf.constant(x))
    expected_y = ref.conv2d(x, kernel, stride)
    expected_gx, expected_gk = ref.conv2d_gradients(x, kernel, np.cos(expected_y) - expected_y * np.sin(expected_y),
                                                    stride)
    for actual, expected in ((y, expected_y), (grad_x, expected_gx), (grad_k, expected_gk)):
        np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    if execution == "function":  # the formulation the layer chose
        graph = step.get_concrete_function(tf.constant(x)).graph.as_graph_def()
        ops = [node.op for node in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
        rows = 3 * (-(-size // stride)) ** 2
        native = kernel_size > 1 and rows > 3 * 49
        patches = kernel_size > 1 and not native
        wide = channels_in * channels_out >= 128 * 128
        fold = patches and wide and (stride > 1 or rows <= 3 * 9)
        backward_conv = kernel_size > 1 and (not wide or (native and stride > 1 and size * size > 100))
        rotated = kernel_size > 1 and not (backward_conv or fold)
        assert ("Conv2DBackpropInput" in ops) == backward_conv
        # The forward conv: a native layer's, or the one computing the rotated input gradient.
        assert ("Conv2D" in ops) == (native or rotated)
        assert ("ExtractImagePatches" in ops) == patches
        assert ("UnsortedSegmentSum" in ops) == fold
        assert ("DepthToSpace" in ops) == (rotated and stride > 1)
        if kernel_size == 1:  # the product computed the other way round, then transposed
            assert ("Transpose" in ops) == (rows <= 256)
        if fold:  # the patch gradients computed the other way round, then transposed, from 256 output channels
            assert ("Transpose" in ops) == (channels_out >= 256)
        assert "Einsum" not in ops
        # A strided 1x1 conv samples its input with a 1x1 average pool; no StridedSliceGrad, none from the kernel
        # either (reshaped, not sliced).
        assert ("AvgPoolGrad" in ops) == (kernel_size == 1 and stride > 1) and "StridedSliceGrad" not in ops


def test_native_grouped_conv_forward_runs_eagerly_on_cpu():
    rng = np.random.default_rng(8)
    x = rng.normal(0, 1, (1, 5, 5, 64)).astype("f4")
    layer = GroupedConv2D(64, 3, groups=32, implementation="native", name="gc")
    np.testing.assert_allclose(layer(x).numpy(), ref.conv2d(x, layer.kernel.numpy(), 1, 32), rtol=1e-4, atol=1e-4)


# --- layouts ------------------------------------------------------------------------------------------------------

def test_nchw_without_gpu_is_a_clear_user_error():
    with pytest.raises(UserError, match="--data_format NCHW needs a GPU"):
        build_model("resnet50", compute_format="NCHW", platform=CPU)
    with pytest.raises(UserError):
        build_model("resnet50", compute_format="NHCW")


@pytest.mark.shallow
@pytest.mark.gpu_path
@pytest.mark.parametrize("arch,use_final_conv", [("resnet50", True)])
def test_nhwc_and_nchw_give_the_same_logits(arch, use_final_conv):
    """NCHW runs on CPU under XLA; both layouts compiled the same way, same weights, both BN modes."""
    # Same conv formulation in both (NCHW always runs tf.nn.conv2d): only the layout differs. Training-mode BN over
    # N*H*W = 2 values at 1x1 maps would amplify the rounding differences of the CPU matmul formulation.
    nhwc = build_model(arch, num_classes=10, image_size=32, seed=9, use_final_conv=use_final_conv,
                       kernels=CPU_PLAIN_KERNELS)
    nchw = build_model(arch, num_classes=10, image_size=32, compute_format="NCHW", allow_nchw_on_cpu=True,
                       use_final_conv=use_final_conv)
    assert nchw.get_layer("btlnck_block_1_0").bottleneck_2.conv.data_format == "channels_first"
    for a, b in zip(nhwc.variables, nchw.variables):
        assert a.path == b.path
        b.assign(a)
    images = np.random.default_rng(9).uniform(0, 255, (2, 32, 32, 3)).astype("f4")
    run = tf.function(lambda model, x, training: model(x, training=training), jit_compile=True)
    inference = [run(m, images, False).numpy() for m in (nhwc, nchw)]
    np.testing.assert_allclose(inference[1], inference[0], rtol=1e-4, atol=1e-4 * np.abs(inference[0]).max())
    training = [run(m, images, True).numpy() for m in (nhwc, nchw)]
    np.testing.assert_allclose(training[1], training[0], rtol=1e-4, atol=1e-4 * np.abs(training[0]).max())
    np.testing.assert_allclose(nchw.get_layer("conv2d").bn.moving_variance.numpy(),
                               nhwc.get_layer("conv2d").bn.moving_variance.numpy(), rtol=1e-5)


@pytest.mark.gpu_path
def test_nchw_grouped_se_block_matches_nhwc_under_xla():
    rng = np.random.default_rng(10)
    config = dict(in_channels=64, width=64, expansion=2, strides=2, cardinality=32, use_se=True)
    nhwc = BottleneckBlock(**config, name="a")
    nchw = BottleneckBlock(**config, data_format="channels_first", name="b")
    x = rng.normal(0, 1, (2, 6, 6, 64)).astype("f4")
    nhwc(x, training=False)
    nchw(keras.KerasTensor((2, 64, 6, 6)))  # symbolic build: eager NCHW convs don't exist on CPU
    for a, b in zip(nhwc.weights, nchw.weights):
        b.assign(rng.uniform(0.5, 1.0, a.shape).astype("f4") if "variance" in a.path or "gamma" in a.path
                 else rng.normal(0, 0.2, a.shape).astype("f4"))
        a.assign(b)
    out_nhwc = nhwc(x, training=False).numpy()
    out_nchw = tf.function(lambda t: nchw(t, training=False), jit_compile=True)(np.transpose(x, (0, 3, 1, 2)))
    np.testing.assert_allclose(np.transpose(out_nchw.numpy(), (0, 2, 3, 1)), out_nhwc, rtol=1e-4, atol=1e-4)


@pytest.mark.shallow
def test_final_conv_model_equals_dense_model_on_reshaped_weights():
    dense = build_model("resnet50", num_classes=10, image_size=32, seed=12)
    conv = build_model("resnet50", num_classes=10, image_size=32, use_final_conv=True)
    for a, b in zip(dense.variables, conv.variables):
        b.assign(np.reshape(a.numpy(), b.shape))
    assert tuple(conv.get_layer("output").dense.kernel.shape) == (1, 1, 2048, 10)
    images = np.random.default_rng(12).uniform(0, 255, (2, 32, 32, 3)).astype("f4")
    expected = dense(images, training=False).numpy()
    np.testing.assert_allclose(conv(images, training=False).numpy(), expected, rtol=1e-5,
                               atol=1e-5 * np.abs(expected).max())


# --- mixed precision ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy,compute", [("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")])
def test_mixed_precision_keeps_float32_variables_and_logits(policy, compute):
    before = keras.config.dtype_policy().name
    model = build_model("resnet50", num_classes=10, image_size=32, dtype_policy=policy, seed=13)
    assert keras.config.dtype_policy().name == before  # per-layer policy, global untouched
    assert {v.dtype for v in model.variables} == {"float32"}
    assert model.get_layer("btlnck_block_2_0").bottleneck_2.conv.compute_dtype == compute
    images = np.random.default_rng(13).uniform(0, 255, (2, 32, 32, 3)).astype("f4")
    for training in (True, False):
        logits = model(images, training=training)
        assert logits.dtype == tf.float32 and logits.shape == (2, 10)
        assert np.all(np.isfinite(logits.numpy()))


def test_mixed_precision_grouped_se_block():
    block = BottleneckBlock(64, 64, 2, strides=1, cardinality=32, use_se=True, name="b", dtype="mixed_bfloat16")
    x = np.random.default_rng(14).normal(0, 1, (1, 4, 4, 64)).astype("f4")
    out = block(tf.cast(x, tf.bfloat16), training=True)
    assert out.dtype == tf.bfloat16
    assert {w.dtype for w in block.weights} == {"float32"}


@pytest.mark.shallow  # the input normalisation is the subject, not the depth
def test_on_raw_pixels_normalises_for_a_model_built_for_dalis_normalised_input():
    """A model built with input_normalized=True (--dali) has no normalisation layer; predict and the SavedModel feed
    raw pixels, so they normalise first: the same probabilities as the model that normalises itself, with the same
    weights (until 2026-12-04 such a predict put 1.0 on one class)."""
    from model.resnet import on_raw_pixels
    from utils.image_processing import CHANNEL_MEANS, CHANNEL_STDS
    raw_model = build_model("resnet50", num_classes=5, image_size=32, seed=0)
    dali_model = build_model("resnet50", num_classes=5, image_size=32, seed=0, input_normalized=True)
    dali_model.set_weights(raw_model.get_weights())
    pixels = np.random.default_rng(0).uniform(0, 255, [2, 32, 32, 3]).astype(np.float32)
    assert on_raw_pixels(raw_model) is raw_model
    expected = raw_model(pixels, training=False).numpy()
    np.testing.assert_allclose(on_raw_pixels(dali_model)(pixels).numpy(), expected, rtol=1e-4, atol=1e-5)
    normalised = (pixels - np.array(CHANNEL_MEANS, np.float32)) / np.array(CHANNEL_STDS, np.float32)
    np.testing.assert_allclose(dali_model(normalised, training=False).numpy(), expected, rtol=1e-4, atol=1e-5)
