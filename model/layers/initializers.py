"""Weight initialisers of the original (docs/ORIGINAL.md#initialisation), handed out with distinct derived seeds.

Keras initialisers with an integer seed always draw the same values, so every initialiser gets its own seed
(`seed + k` in construction order) to make a seeded build deterministic without giving identically shaped
kernels identical values.
"""
import itertools

import keras

from utils.errors import UserError

WEIGHT_INIT_MODES = ("fan_in", "fan_out")
# The original's classifier width (ImageNet's 1000 classes + background), the only one it trained.
ORIGINAL_NUM_CLASSES = 1001


class Initializers:
    def __init__(self, weight_init="fan_out", seed=None):
        if weight_init not in WEIGHT_INIT_MODES:
            raise UserError(f"--weight_init must be one of {', '.join(WEIGHT_INIT_MODES)}, got {weight_init!r}")
        self.weight_init = weight_init
        self._seeds = itertools.count(seed) if seed is not None else None

    def _next_seed(self):
        return next(self._seeds) if self._seeds is not None else None

    def conv(self):
        """Regular conv kernels (and the classifier's, see `classifier`): variance scaling 2.0, truncated normal."""
        return keras.initializers.VarianceScaling(
            scale=2.0, mode=self.weight_init, distribution="truncated_normal", seed=self._next_seed())

    def classifier(self, num_classes):
        """The classifier kernel [C, K]: the conv init, except that fan_out counts at least 1001 outputs.

        fan_out = K sets the variance 2 / K; the logits' variance is C * 2 / K times the features' mean square,
        so below the original's 1001 classes the initial logits grow as 1 / sqrt(K) (K = 10: 10x the original's,
        a cross-entropy near 30 and diverging first steps). With the fan taken as max(K, 1001) every K <= 1001
        starts with the original's 1001-class logit scale, and K >= 1001 (the original at 1001) is unchanged.
        fan_in (2 / C) does not depend on K and is left alone."""
        if self.weight_init == "fan_out" and num_classes < ORIGINAL_NUM_CLASSES:
            # VarianceScaling divides the scale by fan_out = K: this scale makes it 2 / 1001.
            return keras.initializers.VarianceScaling(
                scale=2.0 * num_classes / ORIGINAL_NUM_CLASSES, mode="fan_out", distribution="truncated_normal",
                seed=self._next_seed())
        return self.conv()

    def grouped_filter(self):
        """The grouped 3x3 filter had no initializer in TF1, i.e. get_variable's Glorot uniform default."""
        return keras.initializers.GlorotUniform(seed=self._next_seed())

    def se_dense(self):
        """SE dense kernels: TF1 variance_scaling_initializer() defaults (1.0, fan_in, truncated normal)."""
        return keras.initializers.VarianceScaling(
            scale=1.0, mode="fan_in", distribution="truncated_normal", seed=self._next_seed())
