"""Batch normalisation with the original's TF1 fused-BN semantics (docs/ORIGINAL.md#batch-normalisation).

Two formulations of the same layer, selected per layer by `implementation` (default "fused"):
- "fused": one `FusedBatchNormV3` op per call (and `FusedBatchNormGradV3` for its gradient): oneDNN on CPU,
  cuDNN on GPU, a native XLA lowering under `--xla`. In training it is called with `exponential_avg_factor=0.1`, so
  it returns the moving averages updated with this batch's mean and its *Bessel-corrected* variance, which is
  exactly what TF1's fused kernel fed into them. Used for 4-D inputs (all of this model's BNs).
- "reference": `ops.moments` + `ops.batch_normalization`, with the n/(n-1) correction applied to the moving update by
  hand. Kept as the readable definition the fused path is tested against (tests/test_performance_contract.py) and
  for inputs of another rank.
Both normalise with the biased batch variance in training, so outputs and gradients are TF1's; statistics are
computed in float32 under mixed precision (fp16 sums of squares overflow). Epsilon stays 1e-5 (the raw op accepts
it; TF1's Python wrapper raised it to 1.001e-5).
"""
import keras
import tensorflow as tf
from keras import ops

BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5
IMPLEMENTATIONS = ("fused", "reference")


class BatchNorm(keras.layers.BatchNormalization):
    """Keras BN with decay 0.9, epsilon 1e-5, and TF1's moving-variance update (module docstring).

    Masks and renormalisation are not used by this model and are not supported.
    """

    def __init__(self, axis=-1, implementation="fused", **kwargs):
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
        for fixed in ("momentum", "epsilon", "center", "scale"):  # from_config passes them back: they are fixed
            kwargs.pop(fixed, None)
        super().__init__(axis=axis, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, center=True, scale=True, **kwargs)
        self.implementation = implementation

    def get_config(self):
        return {**super().get_config(), "implementation": self.implementation}

    def call(self, inputs, training=None):
        inputs = ops.cast(inputs, "float32")
        training = bool(training) and self.trainable
        if self.implementation == "fused" and len(inputs.shape) == 4:
            outputs = self._fused(inputs, training)
        else:
            outputs = self._reference(inputs, training)
        return ops.cast(outputs, self.compute_dtype)

    def _update_moving(self, mean, unbiased_variance):
        self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
        self.moving_variance.assign(self.moving_variance * self.momentum + unbiased_variance * (1.0 - self.momentum))

    def _fused(self, inputs, training):
        data_format = "NCHW" if self.axis % 4 == 1 else "NHWC"
        gamma, beta = tf.cast(self.gamma, tf.float32), tf.cast(self.beta, tf.float32)
        if training:
            # With exponential_avg_factor f the op returns the updated moving statistics,
            # (1 - f) * moving + f * batch statistic (the variance Bessel-corrected): the decay-0.9 update of
            # `_update_moving` inside the kernel, not six more ops per layer.
            outputs, moving_mean, moving_variance, _, _, _ = tf.raw_ops.FusedBatchNormV3(
                x=inputs, scale=gamma, offset=beta, mean=tf.cast(self.moving_mean, tf.float32),
                variance=tf.cast(self.moving_variance, tf.float32), epsilon=self.epsilon,
                exponential_avg_factor=1.0 - self.momentum, data_format=data_format, is_training=True)
            self.moving_mean.assign(moving_mean)
            self.moving_variance.assign(moving_variance)
            return outputs
        outputs, _, _, _, _, _ = tf.raw_ops.FusedBatchNormV3(
            x=inputs, scale=gamma, offset=beta, mean=tf.cast(self.moving_mean, tf.float32),
            variance=tf.cast(self.moving_variance, tf.float32), epsilon=self.epsilon, data_format=data_format,
            is_training=False)
        return outputs

    def _reference(self, inputs, training):
        reduction_axes = [axis for axis in range(len(inputs.shape)) if axis != self.axis % len(inputs.shape)]
        if training:
            mean, variance = ops.moments(inputs, axes=reduction_axes)
            count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), reduction_axes)), inputs.dtype)
            self._update_moving(mean, variance * count / tf.maximum(count - 1.0, 1.0))
        else:
            mean, variance = self.moving_mean, self.moving_variance
        return ops.batch_normalization(
            inputs, mean=ops.cast(mean, "float32"), variance=ops.cast(variance, "float32"), axis=self.axis,
            offset=ops.cast(self.beta, "float32"), scale=ops.cast(self.gamma, "float32"), epsilon=self.epsilon)


def set_implementation(model, implementation):
    """Switches every BatchNorm of `model` to `implementation` ("fused" or "reference"); call before tracing."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    layers = [layer for layer in model._flatten_layers(include_self=True) if isinstance(layer, BatchNorm)]
    for layer in layers:
        layer.implementation = implementation
    return len(layers)
