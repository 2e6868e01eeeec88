"""Loss pieces of the original (docs/ORIGINAL.md#loss-and-label-smoothing): smoothed one-hot targets, mixup,
batch-mean softmax cross entropy, coupled L2. Pure functions of tensors."""

import tensorflow as tf


def smoothed_one_hot(labels, num_classes, smoothing):
    """One-hot over all `num_classes` outputs with `on = 1 - eps + eps/n`, `off = eps/n` (TF1 semantics)."""
    off = smoothing / num_classes
    on = 1.0 - smoothing + off
    return tf.one_hot(labels, num_classes, on_value=on, off_value=off, dtype=tf.float32)


def sample_beta(shape, alpha, seed=None):
    """Beta(alpha, alpha) from two Gamma(alpha) draws (tf.distributions.Beta is gone in TF2)."""
    if seed is None:
        g1 = tf.random.gamma(shape, alpha)
        g2 = tf.random.gamma(shape, alpha)
    else:
        g1 = tf.random.stateless_gamma(shape, seed=seed, alpha=alpha)
        g2 = tf.random.stateless_gamma(shape, seed=seed + tf.constant([0, 1], seed.dtype), alpha=alpha)
    return g1 / (g1 + g2)


def mixup(images, targets, lam):
    """`x' = lam*x + (1-lam)*reverse(x)` and the same for the (smoothed) targets; `lam` has shape [B].

    Pairs example i with example B-1-i, as the original. Mixing raw pixels equals mixing normalised ones
    because the normalisation is affine per channel and the two weights sum to 1 (the original mixes after it,
    docs/ORIGINAL.md#mixup).
    """
    lam_images = tf.cast(tf.reshape(lam, [-1, 1, 1, 1]), images.dtype)
    lam_targets = tf.reshape(lam, [-1, 1])
    mixed_images = lam_images * images + (1.0 - lam_images) * tf.reverse(images, axis=[0])
    mixed_targets = lam_targets * targets + (1.0 - lam_targets) * tf.reverse(targets, axis=[0])
    return mixed_images, mixed_targets


def softmax_cross_entropy(targets, logits):
    """Batch mean of `-sum(targets * log_softmax(logits))`, in float32 (TF1 `tf.losses.softmax_cross_entropy`)."""
    logits = tf.cast(logits, tf.float32)
    per_example = tf.nn.softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    return tf.reduce_mean(per_example)


def l2_loss(variables, weight_decay):
    """`weight_decay * sum(v**2) / 2` over `variables` (cast to float32), 0 if there are none."""
    if not variables or weight_decay == 0:
        return tf.constant(0.0, tf.float32)
    return weight_decay * tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in variables])


def top_k_hits(labels, logits, k):
    """Number of examples whose label is in the top k (`in_top_k` semantics: ties at the k-th value are hits)."""
    hits = tf.math.in_top_k(tf.cast(labels, tf.int32), tf.cast(logits, tf.float32), k)
    return tf.reduce_sum(tf.cast(hits, tf.int32))
