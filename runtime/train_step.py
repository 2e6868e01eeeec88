"""The train and eval steps (docs/ORIGINAL.md#loss-and-label-smoothing, docs/ORIGINAL.md#optimizer): module-level
builders that take everything they use as arguments and return a `tf.function`. The Runner, the benchmarks and the
tests call these same functions.

One train step: forward, loss (smoothed cross-entropy + coupled L2 of docs/ORIGINAL.md#weight-decay), backward,
loss scaling (utils/precision.LossScaler), the gradient average over replicas, the TF1-momentum update and the step
counter; it returns the scalars the logger needs.
"""

import dataclasses

import tensorflow as tf

from utils import losses


@dataclasses.dataclass(frozen=True)
class LossSettings:
    num_classes: int
    label_smoothing: float = 0.0
    weight_decay: float = 1e-4
    mixup: float = 0.0  # Beta(mixup, mixup) mixing weights; 0 = no mixup


def make_train_step(model, optimizer, learning_rate_fn, global_step, *, loss, regularized, scaler,
                    reduce_gradients, strategy, mixup_seed, jit_compile=False):
    """A tf.function (images, labels) -> dict of scalars (cross_entropy, l2_loss, total_loss, learning_rate,
    top1_hits, loss_scale, skipped) that does one optimizer step under `strategy`.

    `learning_rate_fn`: zero-argument callable, the rate at `global_step`; `loss`: LossSettings; `regularized`: the
    variables of the L2 term; `scaler`: utils/precision.LossScaler; `reduce_gradients`: list -> list, the average
    over workers (utils/distributed.py); `mixup_seed`: int64 scalar tensor, with `global_step` the seed of the step's
    mixing weights; `jit_compile`: XLA-compile the step's core (forward, backward, update).
    """
    trainable = model.trainable_variables

    def step_with_weights(images, labels, lam):
        lr = learning_rate_fn()
        with tf.GradientTape() as tape:
            targets = losses.smoothed_one_hot(labels, loss.num_classes, loss.label_smoothing)
            if lam is not None:
                images, targets = losses.mixup(images, targets, lam)
            logits = model(images, training=True)
            cross_entropy = losses.softmax_cross_entropy(targets, logits)
            l2 = losses.l2_loss(regularized, loss.weight_decay)
            total = cross_entropy + l2
            scaled = scaler.scale(total)
        grads = scaler.unscale(tape.gradient(scaled, trainable))
        grads = reduce_gradients(grads)
        scale_before = scaler.current()
        optimizer.apply(grads, trainable)
        skipped = scaler.skipped(scale_before)
        global_step.assign_add(1)
        top1 = losses.top_k_hits(labels, logits, 1)
        return {"cross_entropy": cross_entropy, "l2_loss": l2, "total_loss": total, "learning_rate": lr,
                "top1_hits": top1, "loss_scale": scale_before, "skipped": skipped}

    # Under jit_compile the mixup weights are drawn outside the compiled part: their Gamma sampler
    # (StatelessRandomGammaV3) has no XLA kernel. Same op, same seed: the same numbers with or without XLA.
    # Without jit the step stays one function (a nested tf.function must not hold the gradient all-reduce).
    core = tf.function(step_with_weights, jit_compile=True, reduce_retracing=True) if jit_compile \
        else step_with_weights

    def replica_step(images, labels):
        lam = None
        if loss.mixup > 0:
            lam = losses.sample_beta([tf.shape(images)[0]], loss.mixup, seed=tf.stack([mixup_seed, global_step]))
        return core(images, labels, lam)

    compiled = tf.function(replica_step, reduce_retracing=True)

    @tf.function
    def train_step(images, labels):
        outputs = strategy.run(compiled, args=(images, labels))
        return {key: strategy.experimental_local_results(value)[0] for key, value in outputs.items()}

    return train_step


def make_eval_step(model, num_classes, jit_compile=False):
    """A tf.function (images, labels) -> (top-1 hits, top-5 hits, mean cross-entropy, images with a non-finite
    logit) of the inference call. A non-finite logit is never a hit."""

    @tf.function(jit_compile=jit_compile or None)
    def eval_step(images, labels):
        logits = model(images, training=False)
        loss = losses.softmax_cross_entropy(tf.one_hot(labels, num_classes), logits)
        non_finite = tf.reduce_sum(tf.cast(tf.reduce_any(~tf.math.is_finite(logits), axis=1), tf.int32))
        return losses.top_k_hits(labels, logits, 1), losses.top_k_hits(labels, logits, 5), loss, non_finite

    return eval_step


def make_predict_step(model, image_size):
    """A tf.function float32 [B, S, S, 3] raw pixels -> float32 softmax probabilities."""

    @tf.function(input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.float32)])
    def predict_step(images):
        return tf.nn.softmax(tf.cast(model(images, training=False), tf.float32))

    return predict_step
