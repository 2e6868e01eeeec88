"""Grouped 3x3 convolution of ResNeXt: one filter variable [k, k, C_in/groups, filters] (HWIO)
(docs/ORIGINAL.md#network-structure).

Formulations (all share the same variable, so checkpoints are unaffected); model/kernels.py picks one per model:
- "split" (CPU training): split input channels and filter into `groups` slices, one conv each by
  model/layers/conv.py's CPU formulation (NHWC; plain `tf.nn.conv2d` per group in NCHW), concatenate. It runs
  forward and backward everywhere and was the fastest CPU-capable formulation for training: the batched-matmul,
  block-diagonal and depthwise+sum ones were slower, and TF's native grouped conv has no CPU gradient kernel
  (under XLA it runs, far slower). The measurements are in docs/PERFORMANCE.md#grouped-convolution-resnext-se-resnext.
- "per_group_conv" (CPU inference and export): per-group plain `tf.nn.conv2d`, so graphs hold only
  Conv2D/Split/ConcatV2 ops.
- "native" (GPU): one `tf.nn.conv2d` (TF infers the groups from the depth ratio, exactly as the original); cuDNN
  runs it forward and backward. On CPU its forward alone runs in TF, but Grappler's remapper then fuses it with the
  following BN/ReLU into a `_FusedConv2D`, which has no grouped CPU kernel ("Fused conv implementation does not
  support grouped convolutions"), so models for CPU inference and export use "per_group_conv".
A layer uses the formulation it was built with in every call, training or not.
"""
import keras
import tensorflow as tf
from keras import ops

from model.layers.conv import conv2d_nhwc
from model.layers.layout import channel_axis, spatial_axes

IMPLEMENTATIONS = ("native", "split", "per_group_conv")


def resolve_implementation(implementation):
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    return implementation


def grouped_conv2d(inputs, kernel, strides, groups, data_format, implementation):
    """SAME-padded grouped convolution of `inputs` with an HWIO `kernel` of input depth C_in/groups."""
    tf_format = "NCHW" if data_format == "channels_first" else "NHWC"
    if implementation == "native":
        return tf.nn.conv2d(inputs, kernel, strides, "SAME", data_format=tf_format)
    axis = channel_axis(data_format)
    input_slices = tf.split(inputs, groups, axis=axis)
    kernel_slices = tf.split(kernel, groups, axis=3)
    if tf_format == "NHWC" and implementation == "split":
        # Per-group convs on small maps are faster as patches + matmul on CPU (model/layers/conv.py).
        outputs = [conv2d_nhwc(x, k, strides) for x, k in zip(input_slices, kernel_slices)]
    else:
        outputs = [tf.nn.conv2d(x, k, strides, "SAME", data_format=tf_format)
                   for x, k in zip(input_slices, kernel_slices)]
    return tf.concat(outputs, axis=axis)


class GroupedConv2D(keras.layers.Layer):
    def __init__(self, filters, kernel_size=3, strides=1, groups=32, data_format="channels_last",
                 kernel_initializer="glorot_uniform", implementation="split", **kwargs):
        super().__init__(**kwargs)
        if filters % groups:
            raise ValueError(f"filters ({filters}) must be divisible by groups ({groups})")
        self.filters = filters
        self.kernel_size = kernel_size
        self.strides = strides
        self.groups = groups
        self.data_format = data_format
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.implementation = resolve_implementation(implementation)

    def build(self, input_shape):
        in_channels = input_shape[channel_axis(self.data_format)]
        if in_channels % self.groups:
            raise ValueError(f"input channels ({in_channels}) must be divisible by groups ({self.groups})")
        self.kernel = self.add_weight(
            name="group_filter", shape=(self.kernel_size, self.kernel_size, in_channels // self.groups, self.filters),
            initializer=self.kernel_initializer, trainable=True)

    def call(self, inputs):
        kernel = ops.cast(self.kernel, self.compute_dtype)
        return grouped_conv2d(inputs, kernel, self.strides, self.groups, self.data_format, self.implementation)

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        for axis in spatial_axes(self.data_format):
            if shape[axis] is not None:
                shape[axis] = -(-shape[axis] // self.strides)
        shape[channel_axis(self.data_format)] = self.filters
        return tuple(shape)
