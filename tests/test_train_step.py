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


# ---------------------------------------------------------------- the extensions (docs/EXTENSIONS.md)

def _conv_model(seed, batch_norm=False):
    """A small conv net; BN-free unless `batch_norm`, so a batch's gradient is the mean of its examples'."""
    layers = [keras.Input((6, 6, 3)), keras.layers.Conv2D(4, 3, activation="relu")]
    if batch_norm:
        layers.append(keras.layers.BatchNormalization(momentum=0.9))
    layers += [keras.layers.Flatten(), keras.layers.Dense(5)]
    model = keras.Sequential(layers)
    rng = np.random.default_rng(seed)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("f4"))
    return model


def _step(model, accumulation=1, averages=None, loss=None, jit_compile=False, lr=0.1):
    from utils import optimizers
    from utils.precision import FLOAT32, LossScaler
    global_step = tf.Variable(0, dtype=tf.int64)
    optimizer = optimizers.build_optimizer(lambda: tf.constant(lr), 0.9, FLOAT32)
    optimizer.build(model.trainable_variables)
    step = train_step.make_train_step(
        model, optimizer, lambda: tf.constant(lr), global_step,
        loss=loss or train_step.LossSettings(5, label_smoothing=0.1, weight_decay=1e-3),
        regularized=[model.trainable_variables[0]], scaler=LossScaler(FLOAT32, optimizer),
        reduce_gradients=lambda grads: grads, strategy=tf.distribute.get_strategy(),
        mixup_seed=tf.constant(np.int64(7)), jit_compile=jit_compile, accumulation=accumulation, averages=averages)
    return step, global_step


def _batch(seed, size=8):
    rng = np.random.default_rng(seed)
    return (tf.constant(rng.uniform(0, 1, (size, 6, 6, 3)).astype("f4")),
            tf.constant(rng.integers(0, 5, size).astype("i4")))


def test_accumulated_micro_batches_give_the_update_of_one_big_batch():
    """4 micro-batches of 2 (--grad_accum_steps 4) = one batch of 8: same loss, same weights after two steps of TF1
    momentum; and the first update is the one of a gradient computed directly with a tape."""
    accumulated, plain, reference = _conv_model(3), _conv_model(3), _conv_model(3)
    step_a, _ = _step(accumulated, accumulation=4)
    step_b, _ = _step(plain, accumulation=1)
    images, labels = _batch(4)
    targets = tf.one_hot(labels, 5, on_value=0.9 + 0.02, off_value=0.02)
    with tf.GradientTape() as tape:
        logits = reference(images, training=True)
        total = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(targets, logits)) + \
            1e-3 * tf.nn.l2_loss(reference.trainable_variables[0])
    gradients = tape.gradient(total, reference.trainable_variables)
    expected_first = [w.numpy() - 0.1 * g.numpy() for w, g in zip(reference.trainable_variables, gradients)]
    out_a, out_b = step_a(images, labels), step_b(images, labels)
    np.testing.assert_allclose(float(out_a["total_loss"]), float(total), rtol=1e-5)
    np.testing.assert_allclose(float(out_a["cross_entropy"]), float(out_b["cross_entropy"]), rtol=1e-5)
    for got, want in zip(accumulated.trainable_variables, expected_first):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    step_a(*_batch(5))
    step_b(*_batch(5))
    for got, want in zip(accumulated.trainable_variables, plain.trainable_variables):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_accumulation_keeps_batch_norm_per_micro_batch():
    """BN normalises each micro-batch on its own and updates its moving mean once per micro-batch."""
    model = _conv_model(6, batch_norm=True)
    step, _ = _step(model, accumulation=2, lr=0.0)
    images, labels = _batch(7)
    conv = keras.Model(model.inputs, model.layers[0].output)
    bn = model.layers[1]
    start = bn.moving_mean.numpy()
    means = [conv(images[:4]).numpy().mean(axis=(0, 1, 2)), conv(images[4:]).numpy().mean(axis=(0, 1, 2))]
    step(images, labels)
    expected = start
    for mean in means:
        expected = 0.9 * expected + 0.1 * mean
    np.testing.assert_allclose(bn.moving_mean.numpy(), expected, rtol=1e-5, atol=1e-6)
    whole = 0.9 * start + 0.1 * conv(images).numpy().mean(axis=(0, 1, 2))
    assert not np.allclose(bn.moving_mean.numpy(), whole, atol=1e-4)


def test_ema_follows_the_weights_with_the_dynamic_decay():
    """The EMA after each step against the NumPy recurrence of utils/ema.py's formula, over the weights each step
    left; the weights themselves are untouched by it."""
    from utils.ema import WeightAverage
    model, twin = _conv_model(8), _conv_model(8)
    averages = WeightAverage(model.trainable_variables, 0.5)
    step, global_step = _step(model, averages=averages)
    step_twin, _ = _step(twin)
    expected = [v.numpy() for v in model.trainable_variables]
    for n in range(4):
        batch = _batch(10 + n)
        step(*batch)
        step_twin(*batch)
        decay = min(0.5, (1 + n) / (10 + n))
        expected = [e - (1 - decay) * (e - v.numpy()) for e, v in zip(expected, model.trainable_variables)]
    assert int(global_step.numpy()) == 4
    for got, want in zip(averages.averages, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-7)
    for got, want in zip(model.trainable_variables, twin.trainable_variables):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert not np.allclose(averages.averages[0].numpy(), model.trainable_variables[0].numpy())


def test_cutmix_and_mixup_together_are_the_same_with_and_without_xla():
    settings = train_step.LossSettings(5, mixup=0.4, cutmix=1.0)
    eager, compiled = _conv_model(11), _conv_model(11)
    step_eager, _ = _step(eager, accumulation=2, loss=settings)
    step_xla, _ = _step(compiled, accumulation=2, loss=settings, jit_compile=True)
    for seed in (12, 13):
        out_eager, out_xla = step_eager(*_batch(seed)), step_xla(*_batch(seed))
        np.testing.assert_allclose(float(out_eager["cross_entropy"]), float(out_xla["cross_entropy"]), rtol=1e-4)
    for got, want in zip(compiled.trainable_variables, eager.trainable_variables):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


def test_cutmix_changes_the_loss_and_mixup_alone_is_unchanged_by_it():
    """--cutmix 0 leaves the original's mixup step as it was (same seeds, same loss); --cutmix > 0 changes it."""
    images, labels = _batch(14)
    losses_of = {}
    for name, settings in {"mixup": train_step.LossSettings(5, mixup=0.4),
                           "mixup_cutmix0": train_step.LossSettings(5, mixup=0.4, cutmix=0.0),
                           "cutmix": train_step.LossSettings(5, cutmix=1.0)}.items():
        step, _ = _step(_conv_model(15), loss=settings)
        losses_of[name] = float(step(images, labels)["cross_entropy"])
    assert losses_of["mixup"] == losses_of["mixup_cutmix0"]
    assert losses_of["cutmix"] != losses_of["mixup"]
