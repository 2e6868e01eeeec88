"""The train and eval steps (docs/ORIGINAL.md#loss-and-label-smoothing, docs/ORIGINAL.md#optimizer): module-level
builders that take everything they use as arguments and return a `tf.function`. The Runner, the benchmarks and the
tests call these same functions.

One train step: forward, loss (smoothed cross-entropy + coupled L2 of docs/ORIGINAL.md#weight-decay), backward,
loss scaling (utils/precision.LossScaler), the gradient average over replicas, the TF1-momentum update and the step
counter; it returns the scalars the logger needs. The extensions of docs/EXTENSIONS.md hook in here: CutMix next to
mixup, gradient accumulation over micro-batches, the EMA update after the optimizer's.
"""

import dataclasses

import tensorflow as tf

from model import resnet
from utils import losses


@dataclasses.dataclass(frozen=True)
class LossSettings:
    num_classes: int
    label_smoothing: float = 0.0
    weight_decay: float = 1e-4
    mixup: float = 0.0  # Beta(mixup, mixup) mixing weights; 0 = no mixup
    cutmix: float = 0.0  # Beta(cutmix, cutmix) box areas; 0 = no CutMix
    mixup_switch_prob: float = 0.5  # with both: the chance that an example gets CutMix rather than mixup


def _mixing(loss, batch, image_shape, seed):
    """The random numbers of one micro-batch's mixup / CutMix, seeded by `seed` (int64 [2]); {} without either.
    `image_shape`: the shape of the batch's images (CutMix needs H and W at [1] and [2])."""
    mix = {}
    if loss.mixup > 0:
        mix["lam"] = losses.sample_beta([batch], loss.mixup, seed=seed)
    if loss.cutmix > 0:
        fold = tf.random.experimental.stateless_fold_in
        lam = losses.sample_beta([batch], loss.cutmix, seed=fold(seed, 1))
        mix["boxes"] = losses.cutmix_boxes(lam, image_shape[1], image_shape[2], fold(seed, 2))
        if loss.mixup > 0:
            mix["use_cutmix"] = tf.random.stateless_uniform([batch], seed=fold(seed, 3)) < loss.mixup_switch_prob
    return mix


def _mix(images, targets, mix):
    if "boxes" in mix:
        mixed = losses.mixup(images, targets, mix["lam"]) if "lam" in mix else None
        return losses.cutmix(images, targets, mix["boxes"], mix.get("use_cutmix"), mixed)
    if "lam" in mix:
        return losses.mixup(images, targets, mix["lam"])
    return images, targets


def make_train_step(model, optimizer, learning_rate_fn, global_step, *, loss, regularized, scaler,
                    reduce_gradients, strategy, mixup_seed, jit_compile=False, accumulation=1, averages=None):
    """A tf.function (images, labels) -> dict of scalars (cross_entropy, l2_loss, total_loss, learning_rate,
    top1_hits, loss_scale, skipped) that does one optimizer step under `strategy`.

    `learning_rate_fn`: zero-argument callable, the rate at `global_step`; `loss`: LossSettings; `regularized`: the
    variables of the L2 term; `scaler`: utils/precision.LossScaler; `reduce_gradients`: list -> list, the average
    over workers (utils/distributed.py); `mixup_seed`: int64 scalar tensor, with `global_step` the seed of the step's
    mixup / CutMix numbers; `jit_compile`: XLA-compile the step's core (forward, backward, update).

    `accumulation` N > 1 (--grad_accum_steps): each batch holds N micro-batches, one after the other; their
    gradients are averaged (a tf.while_loop, so one micro-batch's activations are alive at a time) before the one
    update, and BN normalises and updates its statistics per micro-batch. The returned cross entropy is the
    micro-batches' mean. `averages`: a utils/ema.WeightAverage, updated after each optimizer step.
    """
    trainable = model.trainable_variables

    def forward_backward(images, labels, mix):
        with tf.GradientTape() as tape:
            images, targets = _mix(images, losses.smoothed_one_hot(labels, loss.num_classes, loss.label_smoothing),
                                   mix)
            logits = model(images, training=True)
            cross_entropy = losses.softmax_cross_entropy(targets, logits)
            l2 = losses.l2_loss(regularized, loss.weight_decay)
            scaled = scaler.scale(cross_entropy + l2)
        return tape.gradient(scaled, trainable), cross_entropy, l2, losses.top_k_hits(labels, logits, 1)

    def accumulated(images, labels, mix):
        """Mean gradient and cross entropy of the N micro-batches (the L2 term is the same in each)."""
        micro_images = tf.reshape(images, tf.concat([[accumulation, -1], tf.shape(images)[1:]], axis=0))
        micro_labels = tf.reshape(labels, [accumulation, -1])

        def body(i, grad_sums, cross_entropy_sum, l2, hits):
            grads, cross_entropy, l2, top1 = forward_backward(
                micro_images[i], micro_labels[i], {key: value[i] for key, value in mix.items()})
            return (i + 1, [total + g for total, g in zip(grad_sums, grads)], cross_entropy_sum + cross_entropy, l2,
                    hits + top1)

        zeros = [tf.zeros_like(v, dtype=tf.float32) for v in trainable]
        _, grad_sums, cross_entropy_sum, l2, hits = tf.while_loop(
            lambda i, *_: i < accumulation, body,
            (tf.constant(0), zeros, tf.constant(0.0), tf.constant(0.0), tf.constant(0)), parallel_iterations=1)
        return [g / accumulation for g in grad_sums], cross_entropy_sum / accumulation, l2, hits

    def step_with_weights(images, labels, mix):
        lr = learning_rate_fn()
        if accumulation == 1:
            grads, cross_entropy, l2, top1 = forward_backward(images, labels, {k: v[0] for k, v in mix.items()})
        else:
            grads, cross_entropy, l2, top1 = accumulated(images, labels, mix)
        grads = scaler.unscale(grads)
        grads = reduce_gradients(grads)
        scale_before = scaler.current()
        optimizer.apply(grads, trainable)
        skipped = scaler.skipped(scale_before)
        if averages is not None:
            averages.update(global_step)  # the steps before this one (utils/ema.py)
        global_step.assign_add(1)
        return {"cross_entropy": cross_entropy, "l2_loss": l2, "total_loss": cross_entropy + l2,
                "learning_rate": lr, "top1_hits": top1, "loss_scale": scale_before, "skipped": skipped}

    # Under jit_compile the mixup / CutMix numbers are drawn outside the compiled part: their Gamma sampler
    # (StatelessRandomGammaV3) has no XLA kernel. Same op, same seed: the same numbers with or without XLA.
    # Without jit the step stays one function (a nested tf.function must not hold the gradient all-reduce).
    core = tf.function(step_with_weights, jit_compile=True, reduce_retracing=True, autograph=False) if jit_compile \
        else step_with_weights

    def replica_step(images, labels):
        shape = tf.shape(images)
        # Micro-batch i of step s draws with seed (mixup_seed, s * N + i): with N = 1, the seed (mixup_seed, s).
        draws = [_mixing(loss, shape[0] // accumulation, shape, tf.stack([mixup_seed, global_step * accumulation + i]))
                 for i in range(accumulation)]
        mix = {key: tf.stack([draw[key] for draw in draws]) for key in draws[0]}
        return core(images, labels, mix)

    compiled = tf.function(replica_step, reduce_retracing=True, autograph=False)

    @tf.function(autograph=False)
    def train_step(images, labels):
        outputs = strategy.run(compiled, args=(images, labels))
        return {key: strategy.experimental_local_results(value)[0] for key, value in outputs.items()}

    return train_step


def make_eval_step(model, num_classes, jit_compile=False):
    """A tf.function (images, labels) -> (top-1 hits, top-5 hits, mean cross-entropy, images with a non-finite
    logit) of the inference call. A non-finite logit is never a hit."""

    @tf.function(jit_compile=jit_compile or None, autograph=False)
    def eval_step(images, labels):
        logits = model(images, training=False)
        loss = losses.softmax_cross_entropy(tf.one_hot(labels, num_classes), logits)
        non_finite = tf.reduce_sum(tf.cast(tf.reduce_any(~tf.math.is_finite(logits), axis=1), tf.int32))
        return losses.top_k_hits(labels, logits, 1), losses.top_k_hits(labels, logits, 5), loss, non_finite

    return eval_step


def make_predict_step(model, image_size, jit_compile=False):
    """A tf.function float32 [B, S, S, 3] raw pixels -> float32 softmax probabilities (normalised first when the
    model was built for DALI's normalised input); compiled by XLA with `jit_compile` (--xla, as the original's
    predict Estimator ran)."""
    model = resnet.on_raw_pixels(model)

    @tf.function(input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.float32)], autograph=False,
                 jit_compile=jit_compile or None)
    def predict_step(images):
        return tf.nn.softmax(tf.cast(model(images, training=False), tf.float32))

    return predict_step
