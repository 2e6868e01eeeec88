"""QAT numerics (model/layers/quantization.py, qat_layers.py) against NumPy, quant_delay, BN folding."""
import numpy as np
import pytest
import tensorflow as tf

from model.blocks.conv2d_block import Conv2DBlock
from model.layers.quantization import (EMA_DECAY, INITIAL_RANGE, ActivationQuantizer, QuantizationConfig,
                                       QuantizationState, quantize_dequantize, quantize_weights)


def numpy_fake_quant(x, lo, hi, narrow):
    """TF FakeQuantWithMinMaxVars: nudge zero onto the grid, clamp, round half up."""
    f32 = np.float32  # TF computes the nudging in float32; 0.5 ties depend on it
    x, lo, hi = x.astype(f32), f32(lo), f32(hi)
    qmin, qmax = f32(1 if narrow else 0), f32(255)
    scale = f32((hi - lo) / (qmax - qmin))
    zero = f32(qmin - lo / scale)
    nudged_zero = f32(np.clip(np.floor(zero + f32(0.5)), qmin, qmax))
    nmin, nmax = f32((qmin - nudged_zero) * scale), f32((qmax - nudged_zero) * scale)
    inverse = f32(1.0) / scale
    return np.floor((np.clip(x, nmin, nmax) - nmin) * inverse + f32(0.5)) * scale + nmin


def numpy_qdq(x, lo, hi, narrow):
    """TF QuantizeAndDequantizeV4 (signed, range given): scale-only, the tighter side sets the scale."""
    qmin, qmax = (-127 if narrow else -128), 127
    from_min = qmin / lo if lo < 0 else np.inf
    from_max = qmax / hi if hi > 0 else np.inf
    if from_min < from_max:
        scale, hi = from_min, qmax / from_min
    else:
        scale, lo = from_max, qmin / from_max
    return np.round(np.clip(x, lo, hi) * scale) / scale  # np.round is half to even, as HALF_TO_EVEN


def reference(x, lo, hi, config, narrow):
    if config.symmetric:
        bound = max(abs(lo), abs(hi))
        lo, hi = -bound, bound
    return (numpy_qdq if config.use_qdq else numpy_fake_quant)(x, lo, hi, narrow)


CONFIGS = [QuantizationConfig(symmetric=s, use_qdq=q) for s in (False, True) for q in (False, True)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"sym{int(c.symmetric)}-qdq{int(c.use_qdq)}")
def test_ops_match_numpy(config):
    rng = np.random.RandomState(0)
    x = rng.uniform(-3, 5, 1000).astype(np.float32)
    for lo, hi, narrow in ((-1.3, 2.7, False), (-2.0, 0.9, True), (0.0, 4.0, False)):
        got = quantize_dequantize(tf.constant(x), lo, hi, config, narrow_range=narrow).numpy()
        want = reference(x, lo, hi, config, narrow)
        np.testing.assert_allclose(got, want, atol=1e-5)
        assert len(np.unique(got)) <= 256
    weights = rng.normal(0, 0.1, (3, 3, 4, 8)).astype(np.float32)
    got = quantize_weights(tf.constant(weights), config).numpy()
    want = reference(weights, weights.min(), weights.max(), config, narrow=config.symmetric)
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"sym{int(c.symmetric)}-qdq{int(c.use_qdq)}")
def test_activation_ema_ranges(config):
    state = QuantizationState(config)
    owner = Conv2DBlock(4, 1, quantization=state, owns_quant_step=True)  # creates the step counter
    quantizer = ActivationQuantizer(state)
    quantizer.build(())
    # TF1's assign_moving_average(zero_debias=True) literally: a biased accumulator from 0 and a step count.
    biased, decay = np.zeros(2), np.float64(EMA_DECAY)
    rng = np.random.RandomState(1)
    for step in range(1, 6):
        owner.quant_step.assign(step)  # what the stem does at the start of each training forward pass
        # Some batches entirely positive or negative: the range is extended to include 0 first (contrib).
        low, high = [(-1, 3), (0.5, 3), (-1, 3), (-4, -0.5), (-2, 7)][step - 1]
        x = rng.uniform(low, high, (2, 5)).astype(np.float32)
        got = quantizer(tf.constant(x), training=True).numpy()
        biased = biased * decay + np.array([min(x.min(), 0.0), max(x.max(), 0.0)]) * (1 - decay)
        lo, hi = biased / (1 - decay ** step)
        np.testing.assert_allclose([quantizer.range_min.numpy(), quantizer.range_max.numpy()], [lo, hi], rtol=1e-5)
        if step == 1:  # nothing of the initial [-6, 6] is left
            assert (lo, hi) == pytest.approx((x.min(), x.max()), rel=1e-6)
        np.testing.assert_allclose(got, reference(x, lo, hi, config, False), atol=1e-5)
    # Inference calls read the ranges without updating them; a float-eval model does not quantise.
    x = rng.uniform(-1, 3, (2, 5)).astype(np.float32)
    np.testing.assert_array_equal(quantizer(tf.constant(x), training=False).numpy(), x)
    assert quantizer.range_min.numpy() == pytest.approx(lo)


def block_and_input(config, seed=0):
    state = QuantizationState(config)
    block = Conv2DBlock(6, 3, 2, use_relu=True, quantization=state, owns_quant_step=True, name="conv2d")
    x = tf.constant(np.random.RandomState(seed).normal(0, 1, (4, 16, 16, 3)).astype(np.float32))
    block(x, training=False)  # build
    rng = np.random.RandomState(seed + 1)
    block.bn.gamma.assign(rng.uniform(0.5, 1.5, 6))
    block.bn.beta.assign(rng.normal(0, 0.3, 6))
    block.bn.moving_mean.assign(rng.normal(0, 0.3, 6))
    block.bn.moving_variance.assign(rng.uniform(0.5, 2, 6))
    return block, x


def test_quant_delay_switches_at_the_right_step():
    block, x = block_and_input(QuantizationConfig(quant_delay=2))
    step = tf.function(lambda t: block(t, training=True))
    outputs = [step(x).numpy() for _ in range(4)]
    assert int(block.quant_step.numpy()) == 4
    # Steps 1-2 (0-based 0 and 1, i.e. < quant_delay) are float: few quantisation levels only from step 3 on.
    distinct = [len(np.unique(np.round(o, 6))) for o in outputs]
    assert distinct[0] > 256 and distinct[1] > 256
    assert distinct[2] <= 256 and distinct[3] <= 256


def test_bn_folding_preserves_float_outputs():
    """Folded conv (no quantisation) equals conv + BN: in inference (moving stats) and in training (batch stats)."""
    never = QuantizationConfig(quant_delay=10 ** 9, quantized_inference=False)
    block, x = block_and_input(never)
    from model.layers.qat_layers import folded_conv_bn, folded_kernel_and_bias
    float_inference = block.bn(block.conv(x), training=False)
    kernel, bias = folded_kernel_and_bias(block)
    folded = tf.nn.conv2d(x, kernel, 2, "SAME") + bias
    np.testing.assert_allclose(folded.numpy(), float_inference.numpy(), atol=1e-5)
    moving = [block.bn.moving_mean.numpy(), block.bn.moving_variance.numpy()]
    block.quant_step.assign(1)
    training_folded = folded_conv_bn(block, x, True, block._quantization).numpy()
    folded_moving = [block.bn.moving_mean.numpy(), block.bn.moving_variance.numpy()]
    for variable, value in zip((block.bn.moving_mean, block.bn.moving_variance), moving):
        variable.assign(value)
    float_training = block.bn(block.conv(x), training=True).numpy()
    np.testing.assert_allclose(training_folded, float_training, atol=1e-4)
    # Same moving-statistics update as the float BN.
    np.testing.assert_allclose(folded_moving[0], block.bn.moving_mean.numpy(), atol=1e-6)
    np.testing.assert_allclose(folded_moving[1], block.bn.moving_variance.numpy(), atol=1e-6)


def test_quantized_inference_uses_folded_quantised_weights():
    block, x = block_and_input(QuantizationConfig(quantized_inference=True))
    from model.layers.qat_layers import folded_kernel_and_bias
    kernel, bias = folded_kernel_and_bias(block)
    expected = np.maximum(tf.nn.conv2d(x, quantize_weights(kernel, block._quantization.config), 2, "SAME") + bias, 0)
    expected = quantize_dequantize(expected, *INITIAL_RANGE, block._quantization.config).numpy()
    np.testing.assert_allclose(block(x, training=False).numpy(), expected, atol=1e-5)


def test_float_model_variables_unchanged_and_checkpoint_map_ignores_ranges():
    from model import resnet
    from model.checkpoint_names import tf1_variable_map
    float_model = resnet.build_model("resnet50", num_classes=1001, image_size=32)
    qat_model = resnet.build_model("resnet50", num_classes=1001, image_size=32, quantization=QuantizationConfig())
    assert len(qat_model.trainable_variables) == 161
    assert [v.path for v in qat_model.trainable_variables] == [v.path for v in float_model.trainable_variables]
    extra = [v for v in qat_model.variables if "quant" in v.path]
    assert extra and all(not v.trainable for v in extra)
    assert len(qat_model.variables) - len(extra) == len(float_model.variables)
    assert len({v.path for v in qat_model.variables}) == len(qat_model.variables)
    assert len(tf1_variable_map(qat_model, "resnet50")) == len(tf1_variable_map(float_model, "resnet50"))


def _wide_add_ns(graph):
    """AddN ops with more than two inputs in `graph` and the functions it calls."""
    found = [op.name for op in graph.get_operations() if op.type == "AddN" and len(op.inputs) > 2]
    for function in graph._functions.values():
        if hasattr(function, "graph"):
            found += _wide_add_ns(function.graph)
    return found


@pytest.mark.parametrize("arch", ["resnet50", "se-resnext101-32x4d"])
@pytest.mark.parametrize("quant_delay", [0, 5])
def test_no_gradient_of_the_qat_step_sums_more_than_two_terms(arch, quant_delay, monkeypatch):
    """TF sums a tensor's gradient terms with one AddN, whose CPU kernel starts from whichever input buffer it can
    reuse at run time: two terms are exact in either order, three or more are not, and --seed runs were not
    bit-identical (tests/test_main.py). The QAT forward reads each kernel and input once for its two convs, and
    utils/losses.l2_loss adds its terms in a fixed order, so no AddN gets more than two."""
    from model import resnet
    from tests._shallow import apply
    from utils import losses
    apply(monkeypatch)
    model = resnet.build_model(arch, num_classes=10, image_size=32, quantization=QuantizationConfig(
        quant_delay=quant_delay))
    images, labels = tf.zeros([2, 32, 32, 3]), tf.constant([1, 2])
    regularized = resnet.regularized_variables(model)

    @tf.function(autograph=False)
    def gradients():
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = losses.softmax_cross_entropy(tf.one_hot(labels, 10), logits) + losses.l2_loss(regularized, 1e-4)
        return tape.gradient(loss, model.trainable_variables)

    assert _wide_add_ns(gradients.get_concrete_function().graph) == []
