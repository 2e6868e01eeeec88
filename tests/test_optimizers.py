"""TF1 momentum semantics against a NumPy implementation of the TF1 rule, and proof that Keras SGD differs."""

import keras
import numpy as np
import tensorflow as tf

from utils.optimizers import TF1Momentum


def run_three_steps(optimizer_factory, lrs, grads, start):
    var = tf.Variable(start)
    step = tf.Variable(0, dtype=tf.int64)
    schedule = lambda: tf.gather(tf.constant(lrs, tf.float32), step)  # noqa: E731
    optimizer = optimizer_factory(schedule)
    optimizer.build([var])
    for grad in grads:
        optimizer.apply([tf.constant(grad)], [var])
        step.assign_add(1)
    return var.numpy()


def numpy_tf1_momentum(start, lrs, grads, momentum):
    var = start.copy()
    accum = np.zeros_like(var)
    for lr, grad in zip(lrs, grads):
        accum = momentum * accum + grad
        var = var - lr * accum
    return var


def test_three_steps_with_changing_lr_match_tf1_rule_and_differ_from_keras_sgd():
    rng = np.random.default_rng(0)
    start = rng.normal(size=(5,)).astype(np.float32)
    grads = [rng.normal(size=(5,)).astype(np.float32) for _ in range(3)]
    lrs = [0.0, 0.5, 0.1]  # warmup from zero, then a drop: where the two rules part ways
    ours = run_three_steps(lambda lr: TF1Momentum(learning_rate=lr, momentum=0.9), lrs, grads, start)
    expected = numpy_tf1_momentum(start, lrs, grads, 0.9)
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-6)

    keras_sgd = run_three_steps(lambda lr: keras.optimizers.SGD(learning_rate=lr, momentum=0.9), lrs, grads,
                                start)
    assert np.max(np.abs(keras_sgd - expected)) > 1e-2


def test_constant_lr_makes_both_rules_agree():
    # With a constant rate the two formulations are algebraically the same: a sanity check of the harness.
    rng = np.random.default_rng(1)
    start = rng.normal(size=(4,)).astype(np.float32)
    grads = [rng.normal(size=(4,)).astype(np.float32) for _ in range(3)]
    lrs = [0.3, 0.3, 0.3]
    ours = run_three_steps(lambda lr: TF1Momentum(learning_rate=lr, momentum=0.9), lrs, grads, start)
    keras_sgd = run_three_steps(lambda lr: keras.optimizers.SGD(learning_rate=lr, momentum=0.9), lrs, grads,
                                start)
    np.testing.assert_allclose(ours, keras_sgd, rtol=1e-5, atol=1e-6)


def test_dynamic_loss_scale_skips_non_finite_step_and_halves_scale():
    var = tf.Variable([1.0, 2.0])
    optimizer = keras.optimizers.LossScaleOptimizer(TF1Momentum(learning_rate=0.1, momentum=0.9))
    optimizer.build([var])
    scale = float(optimizer.dynamic_scale.numpy())
    optimizer.apply([tf.constant([np.inf, 1.0])], [var])
    np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])
    assert float(optimizer.dynamic_scale.numpy()) == scale / 2
    # a finite (scaled) gradient is unscaled before the update
    optimizer.apply([tf.constant([1.0, 1.0]) * optimizer.dynamic_scale], [var])
    np.testing.assert_allclose(var.numpy(), [0.9, 1.9], rtol=1e-6)
