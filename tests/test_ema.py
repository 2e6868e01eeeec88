"""utils/ema.py: the EMA update against its formula in NumPy."""
import numpy as np
import pytest
import tensorflow as tf

from utils.ema import EMA_SUFFIX, WeightAverage, effective_decay


def test_effective_decay_is_tf1_num_updates_rule():
    for n, decay in [(0, 0.9999), (5, 0.9999), (1000, 0.9999), (10 ** 6, 0.9999), (3, 0.2)]:
        assert float(effective_decay(decay, n)) == pytest.approx(min(decay, (1 + n) / (10 + n)), rel=1e-6)


def test_update_moves_each_average_towards_its_variable():
    rng = np.random.default_rng(0)
    weights = [tf.Variable(rng.normal(size=(3, 2)).astype("f4")), tf.Variable(rng.normal(size=4).astype("f4"))]
    averages = WeightAverage(weights, 0.99)
    expected = [w.numpy().astype("f8") for w in weights]
    for n in range(30):
        for w in weights:
            w.assign_add(rng.normal(size=w.shape).astype("f4"))
        averages.update(tf.constant(n, tf.int64))
        decay = min(0.99, (1 + n) / (10 + n))
        expected = [e - (1 - decay) * (e - w.numpy()) for e, w in zip(expected, weights)]
    for average, want in zip(averages.averages, expected):
        np.testing.assert_allclose(average.numpy(), want, rtol=1e-5, atol=1e-6)
    assert averages.average_of(weights[1]) is averages.averages[1]
    averages.reset()
    for average, w in zip(averages.averages, weights):
        np.testing.assert_array_equal(average.numpy(), w.numpy())


def test_averages_are_float32_and_decay_must_be_in_0_1():
    half = tf.Variable(np.ones(3, "f2"))
    assert WeightAverage([half], 0.5).averages[0].dtype == tf.float32
    with pytest.raises(ValueError):
        WeightAverage([half], 1.0)
    with pytest.raises(KeyError):
        WeightAverage([half], 0.5).average_of(tf.Variable(1.0))
    assert EMA_SUFFIX == "/ExponentialMovingAverage"  # TF1's shadow-variable name, which checkpoints use
