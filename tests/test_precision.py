"""utils/precision.py: --amp / --amp_dtype / --static_loss_scale resolved once into a Precision, and what the train
step's LossScaler does with it (dynamic scaling through Keras' LossScaleOptimizer, static by hand)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from runtime import train_step
from runtime.config import RunConfig
from utils.devices import CPU, Platform
from utils.errors import UserError
from utils.optimizers import TF1Momentum
from utils.precision import LossScaler, Precision

NUM_CLASSES = 5


@pytest.mark.gpu_path
def test_amp_dtype_is_resolved_once_and_checked():
    assert Precision.resolve(True, -1, CPU) == Precision("mixed_bfloat16", None)
    assert Precision.resolve(True, -1, Platform(gpu=True)) == Precision("mixed_float16", "dynamic")
    assert Precision.resolve(True, -1, CPU, "float16") == Precision("mixed_float16", "dynamic")
    assert Precision.resolve(True, 128, CPU, "float16") == Precision("mixed_float16", "static", 128.0)
    assert Precision.resolve(True, -1, Platform(gpu=True), "bfloat16") == Precision("mixed_bfloat16", None)
    assert Precision.resolve(False, -1, CPU, None) == Precision()
    with pytest.raises(UserError, match="--amp_dtype only takes effect with --amp"):
        RunConfig(amp_dtype="float16")
    with pytest.raises(UserError, match="--amp_dtype must be one of float16, bfloat16"):
        RunConfig(amp=True, amp_dtype="float8")


@pytest.mark.gpu_path
def test_dynamic_loss_scale_skips_a_non_finite_step_and_grows_after_its_interval():
    """The train step of main.py with a float16 model: a step with non-finite gradients leaves the weights alone,
    says it was skipped and halves the scale; `dynamic_growth_steps` good steps in a row double it."""
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(NUM_CLASSES, dtype="mixed_float16")])
    optimizer = keras.optimizers.LossScaleOptimizer(TF1Momentum(0.1, 0.9), initial_scale=1024.0,
                                                    dynamic_growth_steps=2)
    optimizer.build(model.trainable_variables)
    global_step = tf.Variable(0, dtype=tf.int64)
    step = train_step.make_train_step(
        model, optimizer, lambda: tf.constant(0.1), global_step, loss=train_step.LossSettings(NUM_CLASSES),
        regularized=model.trainable_variables, scaler=LossScaler(Precision("mixed_float16", "dynamic"), optimizer),
        reduce_gradients=lambda grads: grads, strategy=tf.distribute.get_strategy(),
        mixup_seed=tf.constant(0, tf.int64))
    images = tf.constant(np.random.default_rng(0).normal(0, 1, (4, 6)), tf.float32)
    labels = tf.constant([0, 1, 2, 3], tf.int32)

    outputs = [step(images, labels) for _ in range(3)]
    assert [float(o["loss_scale"]) for o in outputs] == [1024.0, 1024.0, 2048.0]  # doubled after 2 good steps
    assert not any(bool(o["skipped"]) for o in outputs)
    before = [v.numpy().copy() for v in model.trainable_variables]
    bad = step(tf.fill([4, 6], np.float32("inf")), labels)
    assert bool(bad["skipped"]) and float(bad["loss_scale"]) == 2048.0
    assert float(optimizer.dynamic_scale.numpy()) == 1024.0
    for old, new in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(old, new.numpy())
    assert int(global_step.numpy()) == 4  # a skipped step still counts, as the original's global step


def test_a_static_loss_scale_multiplies_the_loss_divides_the_gradients_and_never_skips():
    """The original's FixedLossScalerOptimizer: loss x 128 before the gradient, gradients / 128 after it."""
    scaler = LossScaler(Precision("mixed_float16", "static", 128.0), optimizer=None)
    assert float(scaler.scale(tf.constant(0.75))) == 96.0
    grads = scaler.unscale([tf.constant([256.0, -64.0]), tf.constant(1.0)])
    assert [g.numpy().tolist() for g in grads] == [[2.0, -0.5], 1.0 / 128]
    assert float(scaler.current()) == 128.0 and not bool(scaler.skipped(tf.constant(128.0)))
    # No loss scaling (float32, bfloat16): the loss and the gradients pass unchanged, the scale in force is 1.
    plain = LossScaler(Precision("mixed_bfloat16", None), optimizer=None)
    assert float(plain.scale(tf.constant(0.75))) == 0.75
    assert float(plain.unscale([tf.constant(3.0)])[0]) == 3.0 and float(plain.current()) == 1.0
    with pytest.raises(ValueError, match="a static loss scale must be > 0"):
        Precision("mixed_float16", "static", 0.0)


def test_cpu_bfloat16_note_warns_of_emulation_and_points_to_native_bfloat16():
    from utils.precision import cpu_bfloat16_note
    assert "no bfloat16 instructions" in cpu_bfloat16_note("mixed_bfloat16", False)
    assert "--amp (mixed bfloat16)" in cpu_bfloat16_note(None, True)
    for policy, native in (("mixed_bfloat16", True), (None, False), (None, None), ("mixed_bfloat16", None),
                           ("mixed_float16", False), ("mixed_float16", True)):
        assert cpu_bfloat16_note(policy, native) is None
