"""runtime/train_step.py: the eval and predict steps against NumPy (the train step is tested through the Runner in
test_main.py, test_gpu_paths.py and test_performance_contract.py)."""

import keras
import numpy as np
import tensorflow as tf

from runtime import train_step


def _model(classes=6):
    model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(), keras.layers.Dense(classes)])
    rng = np.random.default_rng(1)
    for variable in model.variables:
        variable.assign(rng.normal(0, 1, variable.shape).astype("f4"))
    return model


def test_eval_step_counts_hits_loss_and_non_finite_logits():
    model = _model()
    images = np.random.default_rng(2).normal(0, 1, (5, 4, 4, 3)).astype("f4")
    images[3, 0, 0, 0] = np.inf  # one image whose logits cannot be finite
    labels = np.array([0, 1, 2, 3, 4], np.int32)
    hits1, hits5, loss, non_finite = train_step.make_eval_step(model, 6)(images, labels)
    logits = images.reshape(5, -1) @ model.weights[0].numpy() + model.weights[1].numpy()
    finite = np.isfinite(logits).all(axis=1)
    order = np.argsort(-np.where(np.isfinite(logits), logits, -np.inf), axis=1)
    expected1 = sum(bool(f and order[i, 0] == labels[i]) for i, f in enumerate(finite))
    expected5 = sum(bool(f and labels[i] in order[i, :5]) for i, f in enumerate(finite))
    assert (int(hits1), int(hits5), int(non_finite)) == (expected1, expected5, 1)
    assert not np.isfinite(float(loss))  # the mean loss includes the broken image


def test_predict_step_is_the_softmax_of_the_logits():
    model = _model()
    images = np.random.default_rng(3).normal(0, 1, (2, 4, 4, 3)).astype("f4")
    logits = images.reshape(2, -1) @ model.weights[0].numpy() + model.weights[1].numpy()
    expected = np.exp(logits - logits.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    np.testing.assert_allclose(train_step.make_predict_step(model, 4)(tf.constant(images)).numpy(), expected,
                               rtol=1e-5, atol=1e-6)
