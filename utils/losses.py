"""Loss pieces of the original (docs/ORIGINAL.md#loss-and-label-smoothing): smoothed one-hot targets, mixup,
batch-mean softmax cross entropy, coupled L2; and the CutMix extension (docs/EXTENSIONS.md#cutmix). Pure functions
of tensors."""

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


def cutmix_boxes(lam, height, width, seed):
    """One box per example for CutMix (Yun et al. 2019): side ratio sqrt(1 - lam) of the image's sides, centre
    uniform over the image, clipped to it. `lam` [B] from Beta(alpha, alpha); `seed` int64 [2]. Returns int32
    [B, 4] (y0, x0, y1, x1), half-open."""
    ratio = tf.sqrt(1.0 - tf.cast(lam, tf.float32))
    cut_h = tf.cast(tf.cast(height, tf.float32) * ratio, tf.int32)
    cut_w = tf.cast(tf.cast(width, tf.float32) * ratio, tf.int32)
    size = tf.shape(lam)
    cy = tf.random.stateless_uniform(size, seed=seed, maxval=height, dtype=tf.int32)
    cx = tf.random.stateless_uniform(size, seed=seed + tf.constant([0, 1], seed.dtype), maxval=width,
                                     dtype=tf.int32)
    y0 = tf.clip_by_value(cy - cut_h // 2, 0, height)
    y1 = tf.clip_by_value(cy + cut_h // 2, 0, height)
    x0 = tf.clip_by_value(cx - cut_w // 2, 0, width)
    x1 = tf.clip_by_value(cx + cut_w // 2, 0, width)
    return tf.stack([y0, x0, y1, x1], axis=1)


def cutmix(images, targets, boxes, use_cutmix=None, mixed=None):
    """CutMix: example i takes the pixels of example B-1-i (the pairing of `mixup`) inside its box, and its target
    becomes `w * t_i + (1 - w) * t_{B-1-i}` with `w = 1 - box area / image area`, the share of its own pixels.

    `use_cutmix` (bool [B], optional) with `mixed` (images, targets) of another mix: examples where it is False
    keep `mixed` instead (mixup and CutMix together, one of the two per example)."""
    height, width = tf.shape(images)[1], tf.shape(images)[2]
    y0, x0, y1, x1 = (tf.reshape(boxes[:, k], [-1, 1, 1]) for k in range(4))
    rows = tf.reshape(tf.range(height), [1, -1, 1])
    cols = tf.reshape(tf.range(width), [1, 1, -1])
    inside = (rows >= y0) & (rows < y1) & (cols >= x0) & (cols < x1)  # [B, H, W]
    area = tf.cast((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), tf.float32)
    own = tf.reshape(1.0 - area / tf.cast(height * width, tf.float32), [-1, 1])
    out_images = tf.where(inside[..., None], tf.reverse(images, axis=[0]), images)
    out_targets = own * targets + (1.0 - own) * tf.reverse(targets, axis=[0])
    if use_cutmix is not None:
        out_images = tf.where(tf.reshape(use_cutmix, [-1, 1, 1, 1]), out_images, mixed[0])
        out_targets = tf.where(tf.reshape(use_cutmix, [-1, 1]), out_targets, mixed[1])
    return out_images, out_targets


def softmax_cross_entropy(targets, logits):
    """Batch mean of `-sum(targets * log_softmax(logits))`, in float32 (TF1 `tf.losses.softmax_cross_entropy`)."""
    logits = tf.cast(logits, tf.float32)
    per_example = tf.nn.softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    return tf.reduce_mean(per_example)


def l2_loss(variables, weight_decay):
    """`weight_decay * sum(v**2) / 2` over `variables` (cast to float32), 0 if there are none."""
    if not variables or weight_decay == 0:
        return tf.constant(0.0, tf.float32)
    # One reduction over the stacked terms, not tf.add_n: its CPU kernel adds three or more inputs in a run-time
    # order (it starts from whichever input buffer it can reuse), and Grappler merges a chain of adds back into one
    # AddN, so --seed runs logged L2 terms that differed in the last bit.
    return weight_decay * tf.reduce_sum(tf.stack([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in variables]))


def top_k_hits(labels, logits, k):
    """Number of examples whose label is in the top k (`in_top_k` semantics: ties at the k-th value are hits)."""
    hits = tf.math.in_top_k(tf.cast(labels, tf.int32), tf.cast(logits, tf.float32), k)
    return tf.reduce_sum(tf.cast(hits, tf.int32))
