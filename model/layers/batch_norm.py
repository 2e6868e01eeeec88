"""Batch normalisation with the original's TF1 fused-BN semantics (SPEC §3.3)."""
import keras
import tensorflow as tf
from keras import ops

BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


class BatchNorm(keras.layers.BatchNormalization):
    """Keras BN with decay 0.9, epsilon 1e-5, and TF1's moving-variance update.

    TF1's fused kernel normalises with the biased batch variance but feeds the unbiased (Bessel-corrected,
    factor n/(n-1) with n = N*H*W) variance into the moving average; Keras 3 feeds the biased one. Only the moving
    update is corrected here, so the training-mode output and its gradient are exactly Keras'/TF1's.
    Masks and renormalisation are not used by this model and are not supported.
    """

    def __init__(self, axis=-1, **kwargs):
        super().__init__(axis=axis, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, center=True, scale=True, **kwargs)

    def call(self, inputs, training=None):
        # Statistics in float32 even under mixed precision (fp16 sums of squares overflow).
        inputs = ops.cast(inputs, "float32")
        reduction_axes = [axis for axis in range(len(inputs.shape)) if axis != self.axis % len(inputs.shape)]
        if training and self.trainable:
            mean, variance = ops.moments(inputs, axes=reduction_axes)
            count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), reduction_axes)), inputs.dtype)
            unbiased_variance = variance * count / tf.maximum(count - 1.0, 1.0)
            self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
            self.moving_variance.assign(
                self.moving_variance * self.momentum + unbiased_variance * (1.0 - self.momentum))
        else:
            mean, variance = self.moving_mean, self.moving_variance
        outputs = ops.batch_normalization(
            inputs, mean=ops.cast(mean, "float32"), variance=ops.cast(variance, "float32"), axis=self.axis,
            offset=ops.cast(self.beta, "float32"), scale=ops.cast(self.gamma, "float32"), epsilon=self.epsilon)
        return ops.cast(outputs, self.compute_dtype)
