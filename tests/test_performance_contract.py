"""What the speed of the train step rests on, as testable facts (docs/PERFORMANCE.md): the fused batch norm keeps
TF1's statistics exactly, the model really runs it, and the train step traces once and never leaves the graph."""
import numpy as np
import pytest
import tensorflow as tf

from model import resnet
from model.layers.batch_norm import BN_EPSILON, BN_MOMENTUM, BatchNorm, set_implementation

PYTHON_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}


def test_fused_batch_norm_op_returns_the_bessel_corrected_batch_variance():
    x = np.random.RandomState(0).normal(2.0, 3.0, (4, 5, 5, 3)).astype(np.float32)
    gamma = np.array([1.0, 0.5, 2.0], np.float32)
    beta = np.array([0.0, 1.0, -1.0], np.float32)
    empty = tf.constant([], tf.float32)
    y, mean, variance, _, _, _ = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta, mean=empty, variance=empty, epsilon=BN_EPSILON, exponential_avg_factor=1.0,
        data_format="NHWC", is_training=True)
    flat = x.reshape(-1, 3).astype(np.float64)
    np.testing.assert_allclose(mean, flat.mean(0), rtol=1e-6)
    np.testing.assert_allclose(variance, flat.var(0, ddof=1), rtol=1e-5)
    expected = (x - flat.mean(0)) / np.sqrt(flat.var(0) + BN_EPSILON) * gamma + beta
    np.testing.assert_allclose(y, expected, atol=1e-5)


def _layer(implementation, channels, axis=-1):
    layer = BatchNorm(axis=axis, implementation=implementation)
    shape = (None, 5, 5, channels) if axis == -1 else (None, channels, 5, 5)
    layer.build(shape)
    rng = np.random.RandomState(1)
    layer.gamma.assign(rng.uniform(0.5, 1.5, channels).astype(np.float32))
    layer.beta.assign(rng.normal(0, 0.5, channels).astype(np.float32))
    layer.moving_mean.assign(rng.normal(0, 0.5, channels).astype(np.float32))
    layer.moving_variance.assign(rng.uniform(0.5, 2.0, channels).astype(np.float32))
    return layer


@pytest.mark.parametrize("shape", [(8, 7, 7, 16), (2, 1, 1, 8), (1, 3, 3, 4)])
@pytest.mark.parametrize("jit", [False, True])
def test_fused_and_reference_agree_on_outputs_gradients_and_moving_statistics(shape, jit):
    x = tf.constant(np.random.RandomState(2).normal(1.0, 2.0, shape).astype(np.float32))
    upstream = tf.constant(np.random.RandomState(3).normal(size=shape).astype(np.float32))
    results = {}
    for implementation in ("fused", "reference"):
        layer = _layer(implementation, shape[-1])

        @tf.function(jit_compile=jit or None)
        def step(inputs):
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                y = layer(inputs, training=True)
                loss = tf.reduce_sum(y * upstream)
            grads = tape.gradient(loss, [inputs, layer.gamma, layer.beta])
            return y, grads

        y, grads = step(x)
        results[implementation] = (y.numpy(), [g.numpy() for g in grads], layer.moving_mean.numpy(),
                                   layer.moving_variance.numpy(), layer(x, training=False).numpy())
    fused, reference = results["fused"], results["reference"]
    # XLA's variance (E[x^2] - E[x]^2) differs in rounding; at n = 2 the normalised values carry it at ~1e-5.
    np.testing.assert_allclose(fused[0], reference[0], atol=1e-4)
    for got, want in zip(fused[1], reference[1]):
        np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(fused[2], reference[2], atol=1e-6)
    np.testing.assert_allclose(fused[3], reference[3], rtol=1e-5)
    np.testing.assert_allclose(fused[4], reference[4], atol=1e-5)
    # The moving update against NumPy: decay 0.9 towards the batch mean and the unbiased variance.
    flat = x.numpy().reshape(-1, shape[-1]).astype(np.float64)
    start = _layer("reference", shape[-1])
    unbiased = flat.var(0, ddof=1) if flat.shape[0] > 1 else flat.var(0)
    np.testing.assert_allclose(fused[3], start.moving_variance.numpy() * BN_MOMENTUM + unbiased * (1 - BN_MOMENTUM),
                               rtol=1e-5)
    np.testing.assert_allclose(fused[2], start.moving_mean.numpy() * BN_MOMENTUM + flat.mean(0) * (1 - BN_MOMENTUM),
                               atol=1e-6)


def test_fused_batch_norm_under_bfloat16_keeps_float32_statistics():
    import keras
    x = tf.constant(np.random.RandomState(4).normal(3.0, 2.0, (4, 5, 5, 6)).astype(np.float32))
    layer = BatchNorm(dtype=keras.mixed_precision.DTypePolicy("mixed_bfloat16"))
    y = layer(tf.cast(x, tf.bfloat16), training=True)
    assert y.dtype == tf.bfloat16 and layer.moving_variance.dtype == "float32"
    reference = _layer("reference", 6)
    reference.gamma.assign(layer.gamma)
    reference.beta.assign(layer.beta)
    reference.moving_mean.assign(np.zeros(6, np.float32))
    reference.moving_variance.assign(np.ones(6, np.float32))
    expected = reference(tf.cast(tf.cast(x, tf.bfloat16), tf.float32), training=True)
    np.testing.assert_allclose(tf.cast(y, tf.float32), expected, atol=0.05)
    np.testing.assert_allclose(layer.moving_variance.numpy(), reference.moving_variance.numpy(), rtol=1e-5)


def test_set_implementation_switches_every_layer_and_refuses_unknown_names():
    from model import resnet
    model = resnet.build_model("resnet50", num_classes=10, image_size=32)
    assert set_implementation(model, "reference") == 53
    assert {layer.implementation for layer in model._flatten_layers() if isinstance(layer, BatchNorm)} == {"reference"}
    with pytest.raises(ValueError, match="implementation"):
        set_implementation(model, "cudnn")


def _ours():
    from bench import common
    return common.OurModel("resnet50", batch_size=4, image_size=32, num_classes=10)


def _all_op_types(concrete):
    graph_def = concrete.graph.as_graph_def()
    types = [node.op for node in graph_def.node]
    for function in graph_def.library.function:
        types += [node.op for node in function.node_def]
    return types


@pytest.mark.shallow
def test_train_step_traces_once_runs_fused_batch_norm_and_stays_in_the_graph(tmp_path):
    from bench import common
    state = common.our_train_state(_ours())
    step = state.train_step
    outputs = []
    for seed in range(3):  # new data every step, same shapes
        images, labels = common.synthetic_batch(4, 32, num_classes=10, seed=seed)
        outputs.append(step(images, labels))
    assert step.experimental_get_tracing_count() == 1
    assert int(state.global_step.numpy()) == 3
    assert all(set(values) >= {"cross_entropy", "total_loss", "learning_rate"} for values in outputs)
    op_types = _all_op_types(step.get_concrete_function(images, labels))
    assert not PYTHON_OPS & set(op_types)
    spec = resnet.ARCHITECTURES["resnet50"]
    norms = 1 + 3 * sum(spec.layers) + len(spec.layers)  # the stem's, 3 per block, each stage's projection shortcut
    assert op_types.count("FusedBatchNormV3") == norms and op_types.count("FusedBatchNormGradV3") == norms
