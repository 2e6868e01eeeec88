"""Quantised forward passes of the model's layers (QAT, docs/ORIGINAL.md#quantisation-aware-training); same variables
as the float layers.

Batch-norm folding (contrib.quantize's approach, without its `freeze_bn_delay`, which defaults to never):
- training call: a float conv with the raw kernel gives the batch mean/variance (and updates the moving
  statistics exactly as model/layers/batch_norm.py: momentum 0.9, unbiased variance); the kernel folded with the
  *moving* statistics, w * gamma / sqrt(moving_var + eps), is fake-quantised and convolved; the result is
  corrected by sqrt(moving_var + eps) / sqrt(batch_var + eps) and gets the bias beta - gamma * batch_mean /
  sqrt(batch_var + eps). Without quantisation this equals conv -> BN(batch statistics) exactly (gradients too).
- inference call (quantised eval graph): kernel w * gamma / sqrt(moving_var + eps) fake-quantised, bias
  beta - gamma * moving_mean / sqrt(moving_var + eps): what a deployment engine sees (one conv + bias per block).
Folding happens only in the quantised paths; float inference (main.py evaluate/predict/export) is unchanged.
"""
import tensorflow as tf
from keras import ops

from model.layers.classifier import Classifier
from model.layers.grouped_conv import GroupedConv2D, grouped_conv2d
from model.layers.layout import channel_axis, spatial_axes
from model.layers.quantization import ActivationQuantizer
from model.layers.squeeze_excitation import SqueezeExcitation


def _per_channel(vector, data_format):
    """Broadcastable shape of a [C] vector against a 4-D activation in `data_format`."""
    return tf.reshape(vector, [1, -1, 1, 1] if data_format == "channels_first" else [1, 1, 1, -1])


def _convolve(conv, inputs, kernel):
    if isinstance(conv, GroupedConv2D):
        return grouped_conv2d(inputs, kernel, conv.strides, conv.groups, conv.data_format, conv.implementation)
    return conv.convolution_op(inputs, kernel)


def _ensure_built(block, inputs):
    if not block.conv.built:
        block.conv.build(inputs.shape)
    if not block.bn.built:
        shape = list(inputs.shape)
        shape[channel_axis(block.conv.data_format)] = block.filters
        block.bn.build(tuple(shape))


def _fork(x):
    """`x` as a new tensor whose gradient terms are summed apart from those of `x`'s other consumers (the
    shortcut, the residual add): TF sums all the gradient terms of one tensor with one AddN, and its CPU kernel
    starts from whichever input buffer it can reuse at run time, so three or more terms are added in a run-dependent
    order (--seed runs were not bit-identical); two are exact in either order. Grappler's arithmetic optimizer would
    merge the sums again: a seeded --quantize run turns it off (runtime/startup.configure_determinism)."""
    return tf.identity(x)


def folded_kernel_and_bias(block, training_stats=None):
    """Folded (kernel, bias) of a conv2d_block from moving statistics (or `training_stats` = (mean, var))."""
    bn = block.bn
    gamma = tf.cast(bn.gamma, tf.float32)
    beta = tf.cast(bn.beta, tf.float32)
    moving_std = tf.sqrt(tf.cast(bn.moving_variance, tf.float32) + bn.epsilon)
    kernel = tf.cast(block.conv.kernel, tf.float32) * (gamma / moving_std)
    mean, std = (tf.cast(bn.moving_mean, tf.float32), moving_std) if training_stats is None else training_stats
    return kernel, beta - gamma * mean / std


def folded_conv_bn(block, inputs, training, state):
    """conv -> BN of a Conv2DBlock with BN folded into the (fake-quantised) kernel; before the ReLU."""
    _ensure_built(block, inputs)
    conv, bn = block.conv, block.bn
    data_format = conv.data_format
    x = tf.cast(inputs, tf.float32)
    if training:
        # The input and the kernel are read once and feed the two convs, so each gets exactly two gradient terms
        # here (see _fork): a sum of two is exact whatever TF's AddN kernel adds first, one of three is not.
        x = _fork(x)
        raw_kernel = tf.cast(conv.kernel, tf.float32)
        raw = _convolve(conv, x, raw_kernel)
        axes = [axis for axis in range(4) if axis != channel_axis(data_format) % 4]
        mean, variance = tf.nn.moments(raw, axes=axes)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(raw), axes)), tf.float32)
        unbiased = variance * count / tf.maximum(count - 1.0, 1.0)
        batch_std = tf.sqrt(variance + bn.epsilon)
        # Folded with the moving statistics *before* this step's update (the read precedes the assign); the
        # correction makes the float result exactly BN with batch statistics.
        moving_std = tf.sqrt(tf.cast(bn.moving_variance, tf.float32) + bn.epsilon)
        gamma = tf.cast(bn.gamma, tf.float32)
        kernel = raw_kernel * (gamma / moving_std)
        bn.moving_mean.assign(bn.moving_mean * bn.momentum + mean * (1.0 - bn.momentum))
        bn.moving_variance.assign(bn.moving_variance * bn.momentum + unbiased * (1.0 - bn.momentum))
        bias = tf.cast(bn.beta, tf.float32) - gamma * mean / batch_std
        outputs = _convolve(conv, x, state.weights(kernel, training))
        outputs = outputs * _per_channel(moving_std / batch_std, data_format)
    else:
        kernel, bias = folded_kernel_and_bias(block)
        outputs = _convolve(conv, x, state.weights(kernel, training))
    return outputs + _per_channel(bias, data_format)


class QuantizedSqueezeExcitation(SqueezeExcitation):
    """SE with fake-quantised dense kernels and quantised ReLU / sigmoid outputs (the original's MatMul layers)."""

    def __init__(self, *args, state=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._state = state
        self.squeeze_quant = ActivationQuantizer(state, name="squeeze_act_quant")
        self.excite_quant = ActivationQuantizer(state, name="excite_act_quant")

    def build(self, input_shape):
        super().build(input_shape)
        for quantizer in (self.squeeze_quant, self.excite_quant):  # their range variables, after the kernels
            quantizer.build(())

    def call(self, inputs, training=None):
        state = self._state
        if not state.quantizes(training):
            return super().call(inputs)
        x = tf.cast(inputs, tf.float32)
        pooled = tf.reduce_mean(x, axis=spatial_axes(self.data_format))
        hidden = tf.nn.relu(tf.matmul(pooled, state.weights(self.squeeze.kernel, training))
                            + tf.cast(self.squeeze.bias, tf.float32))
        hidden = self.squeeze_quant(hidden, training=training)
        scale = tf.sigmoid(tf.matmul(hidden, state.weights(self.excite.kernel, training))
                           + tf.cast(self.excite.bias, tf.float32))
        scale = self.excite_quant(scale, training=training)
        axes = spatial_axes(self.data_format)
        outputs = x * ops.expand_dims(ops.expand_dims(scale, axes[0]), axes[1])
        return ops.cast(outputs, self.compute_dtype)


class QuantizedClassifier(Classifier):
    """Classifier with a fake-quantised kernel and quantised logits (contrib quantised the final MatMul too)."""

    def __init__(self, *args, state=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._state = state
        self.logits_quant = ActivationQuantizer(state, name="act_quant")

    def call(self, features, training=None):
        if not self._state.quantizes(training):
            return self.logits_quant(super().call(features), training=training)  # identity; builds its ranges
        axes = spatial_axes(self.data_format)
        pooled = ops.mean(tf.cast(features, tf.float32), axis=axes, keepdims=self.use_final_conv)
        if not self.dense.built:
            self.dense.build(pooled.shape)
        kernel = self._state.weights(self.dense.kernel, training)
        bias = tf.cast(self.dense.bias, tf.float32)
        if self.use_final_conv:
            logits = self.dense.convolution_op(pooled, kernel)
            logits = ops.squeeze(logits + _per_channel(bias, self.data_format), axis=axes)
        else:
            logits = tf.matmul(pooled, kernel) + bias
        return ops.cast(self.logits_quant(logits, training=training), "float32")
