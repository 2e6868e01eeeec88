"""Convolution with CPU-friendly formulations of the same SAME-padded conv (same HWIO kernel variable).

Measured on the 2-vCPU machine (TF 2.21, batch 32, forward + both gradients; docs/PERFORMANCE.md):
- a 1x1 conv is a matmul over channels; TF's CPU Conv2DBackpropInput is 2-15x slower than the matmul gradient
  for 1x1 kernels at 7x7 spatial and below (e.g. 512->2048 at 7x7: 190 ms conv vs 72 ms matmul);
- a kxk conv on a small feature map (<= 7x7) is faster as patches + matmul (c512 at 7x7: 272 ms vs 198 ms;
  at 1x1: 280 ms vs 17 ms); on larger maps the native conv wins, so it is kept there.
On GPU (`implementation="native"`, utils/devices.Platform) and in NCHW the native `tf.nn.conv2d` (cuDNN) is used
unchanged.

Forward-only calls (`training` false: evaluation, predict, SavedModel export) use the native conv as well: the
formulations pay off in the backward pass, while oneDNN's forward conv is faster (the eval step at batch 32:
12.8 img/s with native convs against 10.0 with these formulations, docs/BENCHMARKS.md, inference), and exported
graphs then hold plain Conv2D ops that deployment converters (tf2onnx, TensorRT) handle.
`native_at_inference = False` on a layer keeps the training formulation there too (for benchmarks).
"""

import keras
import tensorflow as tf

# Spatial positions (H*W of the output) up to which a kxk conv runs as patches + matmul on CPU.
PATCHES_MAX_POSITIONS = 49
IMPLEMENTATIONS = ("native", "cpu")


def resolve_implementation(implementation, data_format):
    """"cpu" (the formulations above) applies to NHWC only: NCHW convs are always native."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    return "native" if data_format == "channels_first" else implementation


def _pointwise(inputs, kernel, strides):
    if strides > 1:
        # SAME padding with a 1x1 kernel needs no padding: output (i, j) reads input (s*i, s*j).
        inputs = inputs[:, ::strides, ::strides, :]
    return tf.einsum("bhwc,co->bhwo", inputs, kernel[0, 0])


def _patches(inputs, kernel, strides):
    size_h, size_w, channels_in, channels_out = kernel.shape
    patches = tf.image.extract_patches(inputs, [1, size_h, size_w, 1], [1, strides, strides, 1], [1, 1, 1, 1],
                                       "SAME")
    # extract_patches orders each patch as (row, column, channel): the HWIO kernel flattened the same way.
    return tf.einsum("bhwk,ko->bhwo", patches, tf.reshape(kernel, [size_h * size_w * channels_in, channels_out]))


def conv2d_nhwc(inputs, kernel, strides, implementation="cpu"):
    """SAME conv of NHWC `inputs` with HWIO `kernel` (no groups), by the formulation fastest on CPU."""
    if implementation == "native":
        return tf.nn.conv2d(inputs, kernel, strides, "SAME")
    size_h, size_w = kernel.shape[0], kernel.shape[1]
    if size_h == 1 and size_w == 1:
        return _pointwise(inputs, kernel, strides)
    height, width = inputs.shape[1], inputs.shape[2]
    if height is not None and width is not None:
        out_positions = -(-height // strides) * -(-width // strides)
        if out_positions <= PATCHES_MAX_POSITIONS:
            return _patches(inputs, kernel, strides)
    return tf.nn.conv2d(inputs, kernel, strides, "SAME")


class Conv2D(keras.layers.Conv2D):
    """keras.layers.Conv2D (SAME padding, square strides) with the CPU formulations above; same variables."""

    def __init__(self, *args, implementation="cpu", **kwargs):
        super().__init__(*args, **kwargs)
        self.implementation = resolve_implementation(implementation, self.data_format)
        self.native_at_inference = True
        self._forward_only = False

    def call(self, inputs, training=None):
        # Conv2DBlock calls `self.conv(inputs)`: Keras fills `training` from the enclosing call's context.
        self._forward_only = not training and self.native_at_inference
        try:
            return super().call(inputs)
        finally:
            self._forward_only = False

    def convolution_op(self, inputs, kernel):
        if self.implementation == "native" or self._forward_only or self.groups != 1 \
                or self.dilation_rate != (1, 1) or self.padding != "same" or self.strides[0] != self.strides[1]:
            return super().convolution_op(inputs, kernel)
        return conv2d_nhwc(inputs, kernel, self.strides[0], "cpu")

    def get_config(self):
        config = super().get_config()
        config["implementation"] = self.implementation
        return config
