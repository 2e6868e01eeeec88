"""Learning-rate schedule of the original (docs/ORIGINAL.md#learning-rate): linear warmup from 0, then step decay or
cosine.

Written with TensorFlow ops so the train step computes it from the global-step variable on the device (no host
round trip); it also accepts Python numbers and then returns a scalar tensor.
"""

import math

import tensorflow as tf

STEP_DECAY_EPOCHS = (30, 60, 80, 90)
STEP_DECAY_FACTORS = (1.0, 0.1, 0.01, 0.001, 0.0001)


REFERENCE_BATCH = 256  # the global batch whose rate --lr_init is


def base_learning_rate(lr_init, global_batch_size):
    """Linear scaling rule of the original: `lr_init` is the rate for a batch of REFERENCE_BATCH."""
    return lr_init * global_batch_size / float(REFERENCE_BATCH)


def warmup_steps(steps_per_epoch, warmup_epochs):
    """W of the schedule below: the steps of linear warmup."""
    return int(steps_per_epoch * warmup_epochs)


def warmup_reach(steps_per_epoch, warmup_epochs, num_steps):
    """(W, the fraction of the peak rate the last step of a `num_steps` run gets) when the warmup lasts the whole
    run, so the rate rises throughout and never reaches its peak or decays; else None."""
    warmup = warmup_steps(steps_per_epoch, warmup_epochs)
    if warmup <= 0 or num_steps <= 0 or warmup < num_steps:
        return None
    return warmup, (num_steps - 1) / warmup


def percent_of_peak(fraction):
    """`fraction` (< 1) of the peak rate as a percentage, rounded down where rounding would say it reaches 100%."""
    if fraction < 0.995:
        return "{:.0%}".format(fraction)
    return "{:.1f}%".format(min(math.floor(fraction * 1000) / 10, 99.9))


def learning_rate_schedule(global_step, lr_init, global_batch_size, steps_per_epoch, warmup_epochs,
                           num_decay_steps, use_cosine):
    """LR at `global_step` (tensor or number) -> float32 scalar tensor.

    - warmup: `t < W` with `W = int(S * warmup_epochs)`: `lr0 * t / W` (exactly 0 at t = 0);
    - step: TF1 `piecewise_constant` with boundaries int(S*30|60|80|90): value i while b[i-1] < t <= b[i];
    - cosine: `lr0 * 0.5 * (1 + cos(pi * min(t, D) / D))`, anchored at step 0 (not at the end of warmup).
    """
    lr0 = base_learning_rate(lr_init, global_batch_size)
    step = tf.cast(global_step, tf.float32)
    warmup = warmup_steps(steps_per_epoch, warmup_epochs)
    if use_cosine:
        decay_steps = float(max(num_decay_steps, 1))
        progress = tf.minimum(step, decay_steps) / decay_steps
        decayed = lr0 * 0.5 * (1.0 + tf.cos(math.pi * progress))
    else:
        boundaries = [float(int(steps_per_epoch * epoch)) for epoch in STEP_DECAY_EPOCHS]
        decayed = tf.constant(lr0 * STEP_DECAY_FACTORS[-1], tf.float32)
        # Walk from the last interval down so the first boundary that holds wins.
        for boundary, factor in reversed(list(zip(boundaries, STEP_DECAY_FACTORS))):
            decayed = tf.where(step <= boundary, lr0 * factor, decayed)
    if warmup > 0:
        warm = lr0 * step / float(warmup)
        return tf.cast(tf.where(step < float(warmup), warm, decayed), tf.float32)
    return tf.cast(decayed, tf.float32)
