"""Convolution with CPU-friendly formulations of the same SAME-padded conv (same HWIO kernel variable).

`implementation="cpu"` (NHWC only), chosen for CPU training (model/kernels.py):
- a 1x1 conv is a matmul over channels: TF's CPU Conv2DBackpropInput is much slower than the matmul gradient for
  1x1 kernels on small maps;
- a kxk conv on a small feature map (<= PATCHES_MAX_POSITIONS output positions) is faster as patches + matmul; on
  larger maps the native conv wins, so it is kept there;
- the input gradients, where oneDNN's backward conv and Eigen's product with a transposed matrix are slow on AVX2
  CPUs, by formulations that compute the same sums: for a patches conv the patches' gradient added back to the
  positions each patch read (folded_input_gradient), for a native conv a forward conv with the rotated kernel
  (input_gradient_formulation), for a 1x1 conv a product computed the other way round (_pointwise).
`implementation="native"`: plain `tf.nn.conv2d` (cuDNN on GPU, oneDNN on CPU), the choice on GPU, in NCHW, and for
CPU inference and export, where oneDNN's forward conv is the faster one and graphs hold plain Conv2D ops that
deployment converters (tf2onnx, TensorRT) handle. The measurements are in docs/PERFORMANCE.md#on-cpu-measured.
A layer uses the formulation it was built with in every call, training or not.
"""

import keras
import numpy as np
import tensorflow as tf

# Spatial positions (H*W of the output) up to which a kxk conv runs as patches + matmul on CPU.
PATCHES_MAX_POSITIONS = 49
# When a conv's input gradient is not oneDNN's backward conv (input_gradient_formulation): its kernel has at least
# ROTATED_MIN_CHANNELS input x output channels and, for a strided native conv, its input at most
# DILATED_MAX_POSITIONS positions (H*W).
ROTATED_MIN_CHANNELS = 128 * 128
DILATED_MAX_POSITIONS = 100
# Output channels from which a patches conv's patch gradient is computed as (kernel x upstream^T)^T.
FOLD_OTHER_WAY_MIN_CHANNELS = 256
# Output positions (H*W) up to which a stride-1 patches conv's input gradient is folded back (above: rotated conv).
FOLD_MAX_POSITIONS = 9
# Rows (batch x positions) up to which a matmul's input gradient is computed as (kernel x upstream^T)^T.
TRANSPOSED_MAX_ROWS = 256
IMPLEMENTATIONS = ("native", "cpu")


def resolve_implementation(implementation, data_format):
    """"cpu" (the formulations above) applies to NHWC only: NCHW convs are always native."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    return "native" if data_format == "channels_first" else implementation


def _matmul_over_channels(inputs, matrix, product=tf.matmul):
    """[B, H, W, K] x [K, O] -> [B, H, W, O] as one 2-D `product` (MatMul): its gradients are two MatMuls, where an
    Einsum's gradients add Transpose ops (docs/PERFORMANCE.md#the-40-px-step)."""
    shape = tf.shape(inputs)
    outputs = product(tf.reshape(inputs, [-1, matrix.shape[0]]), matrix)
    return tf.reshape(outputs, tf.concat([shape[:3], [matrix.shape[1]]], axis=0))


def takes_other_way_input_gradient(rows):
    """Whether a 1x1 conv's product of `rows` rows (None: unknown when the graph is built) computes its input
    gradient the other way round (_matmul_input_gradient_other_way)."""
    return rows is not None and rows <= TRANSPOSED_MAX_ROWS


def _static_rows(shape):
    """Batch x positions of an NHWC shape, None when a dimension is unknown when the graph is built."""
    rows = 1
    for extent in shape[:-1]:
        if extent is None:
            return None
        rows *= extent
    return rows


def _times_transposed_other_way(upstream, matrix):
    """upstream x matrix^T computed as (matrix x upstream^T)^T: with a few hundred rows or fewer, Eigen's product with
    the transposed matrix runs up to 3x slower on an AVX2 CPU than this product plus the transpose of the small
    result (a 1x1 conv's input gradient, a patches conv's patch gradients)."""
    return tf.transpose(tf.matmul(matrix, upstream, transpose_b=True))


@tf.custom_gradient
def _matmul_input_gradient_other_way(flat, matrix):
    """flat x matrix, whose input gradient upstream x matrix^T is computed the other way round
    (_times_transposed_other_way)."""
    def gradient(upstream):
        return _times_transposed_other_way(upstream, matrix), tf.matmul(flat, upstream, transpose_a=True)

    return tf.matmul(flat, matrix), gradient


def _pointwise(inputs, kernel, strides):
    if strides > 1:
        # SAME padding with a 1x1 kernel needs no padding: output (i, j) reads input (s*i, s*j). A 1x1 average
        # pool picks exactly those elements (a mean of one) and, with its gradient, runs ~3x faster than the
        # strided slice and its StridedSliceGrad (docs/PERFORMANCE.md#the-40-px-step).
        inputs = tf.nn.avg_pool2d(inputs, 1, strides, "SAME")
    product = _matmul_input_gradient_other_way if takes_other_way_input_gradient(_static_rows(inputs.shape)) \
        else tf.matmul
    # A reshape, not kernel[0, 0]: a slice's gradient writes a zero-filled copy of the kernel.
    return _matmul_over_channels(inputs, tf.reshape(kernel, kernel.shape[2:]), product)


def patches_input_gradient_formulation(kernel_shape, output_size, strides):
    """How a patches conv's input gradient is computed, on an AVX2 CPU the fastest by measurement: from
    ROTATED_MIN_CHANNELS channels in x out "fold" (folded_input_gradient) for a strided conv and on maps of at most
    FOLD_MAX_POSITIONS positions (1.1-2.4x faster than the rotated conv at the 40 px step's, 2.2-2.7x faster than
    the backward conv at the 224 px step's 14x14 -> 7x7), "rotated" (rotated_input_gradient) on larger maps at
    stride 1 (5x5, 7x7: 1.1-1.4x faster than the fold); "backward_conv" (Conv2DBackpropInput) below, as
    input_gradient_formulation (docs/PERFORMANCE.md#the-patches-input-gradient-folded-back-2026-12-07)."""
    if kernel_shape[2] * kernel_shape[3] < ROTATED_MIN_CHANNELS:
        return "backward_conv"
    return "fold" if strides > 1 or output_size[0] * output_size[1] <= FOLD_MAX_POSITIONS else "rotated"


def same_output_extent(extent, strides):
    """The output elements of a SAME conv or pool along an axis of `extent` input elements at `strides`."""
    return -(-extent // strides)


def _same_padding_before(extent, size, strides):
    """The zeros SAME padding puts before an axis of `extent` elements for a kernel of `size` at `strides`."""
    return max((same_output_extent(extent, strides) - 1) * strides + size - extent, 0) // 2


def fold_positions(input_size, kernel_size, strides):
    """For each element of a SAME patches conv's patches of one image, in extract_patches' order (output row,
    output column, kernel row, kernel column), the input position (row * W + column) it reads, or -1 where it
    reads SAME padding: a NumPy int32 vector of out_h * out_w * k_h * k_w entries, fixed when the graph is built."""
    (height, width), (size_h, size_w) = input_size, kernel_size
    top, left = _same_padding_before(height, size_h, strides), _same_padding_before(width, size_w, strides)
    rows = np.arange(same_output_extent(height, strides))[:, None, None, None] * strides - top \
        + np.arange(size_h)[None, None, :, None]
    columns = np.arange(same_output_extent(width, strides))[None, :, None, None] * strides - left \
        + np.arange(size_w)[None, None, None, :]
    inside = (rows >= 0) & (rows < height) & (columns >= 0) & (columns < width)
    return np.where(inside, rows * width + columns, -1).astype(np.int32).reshape(-1)


def folded_input_gradient(upstream, kernel, input_size, strides, other_way=None):
    """The input gradient of a SAME patches conv of an `input_size` (H, W) map: the patches' gradient upstream x
    kernel^T ([rows, k_h * k_w * C_in]; from FOLD_OTHER_WAY_MIN_CHANNELS output channels as (kernel x upstream^T)^T,
    as _matmul_input_gradient_other_way), each element added to the input position its patch read by one
    UnsortedSegmentSum, the elements read from SAME padding dropped. The same sum as ExtractImagePatches' own
    gradient, without its transposes, and as the backward conv. `other_way` overrides the product's direction
    (bench.small_map_ops times both)."""
    size_h, size_w, channels_in, channels_out = kernel.shape
    flat_kernel = tf.reshape(kernel, [size_h * size_w * channels_in, channels_out])
    flat_upstream = tf.reshape(upstream, [-1, channels_out])
    if other_way is None:
        other_way = channels_out >= FOLD_OTHER_WAY_MIN_CHANNELS
    if other_way:
        patch_grads = _times_transposed_other_way(flat_upstream, flat_kernel)
    else:
        patch_grads = tf.matmul(flat_upstream, flat_kernel, transpose_b=True)
    height, width = input_size
    positions = fold_positions(input_size, (size_h, size_w), strides)
    batch = tf.shape(upstream)[0]
    # image n's positions are n * H * W + its own; padding stays -1, which UnsortedSegmentSum drops
    segments = tf.where(positions < 0, -1, positions + height * width * tf.range(batch)[:, None])
    grads = tf.math.unsorted_segment_sum(tf.reshape(patch_grads, [-1, channels_in]), tf.reshape(segments, [-1]),
                                         batch * height * width)
    return tf.reshape(grads, [batch, height, width, channels_in])


def input_gradient_formulation(kernel_shape, input_size, strides):
    """How a native CPU conv's input gradient is computed: "rotated" (rotated_input_gradient) or "backward_conv"
    (oneDNN's Conv2DBackpropInput). With at least ROTATED_MIN_CHANNELS channels in x out, oneDNN's backward conv on
    an AVX2 CPU runs up to 19x slower on small maps, and 1.7-1.9x slower on the 224 px step's 14x14 maps, than the
    rotated conv, which computes the same sum. Below that neither is consistently faster and the one op is kept; a
    strided conv from more than DILATED_MAX_POSITIONS positions keeps it too, where the zeros cost more
    (docs/PERFORMANCE.md#the-input-gradient-on-an-avx2-cpu-2026-12-06)."""
    if kernel_shape[2] * kernel_shape[3] < ROTATED_MIN_CHANNELS or (
            strides > 1 and input_size[0] * input_size[1] > DILATED_MAX_POSITIONS):
        return "backward_conv"
    return "rotated"


def rotated_kernel(kernel):
    """The HWIO kernel rotated by 180 degrees with inputs and outputs swapped: the kernel of the forward conv that
    maps a conv's output gradient to its input gradient."""
    return tf.transpose(tf.reverse(kernel, [0, 1]), [0, 1, 3, 2])


def rotated_input_gradient(upstream, kernel, input_size, strides):
    """The input gradient of a SAME conv of an `input_size` (H, W) map as a forward conv of the output gradient
    `upstream` with the kernel rotated by 180 degrees (inputs and outputs swapped); for stride s the output
    gradient is first spread out with s-1 zeros between its elements."""
    size_h, size_w = kernel.shape[0], kernel.shape[1]
    rotated = rotated_kernel(kernel)
    if strides > 1:
        # Each element of the output gradient goes to the first of its s x s cell; the others are zeros.
        zeros = tf.zeros_like(upstream)
        upstream = tf.nn.depth_to_space(tf.concat([upstream] + [zeros] * (strides * strides - 1), axis=3), strides)
    paddings = []
    for size, extent, spread in zip((size_h, size_w), input_size, upstream.shape[1:3]):
        before = _same_padding_before(extent, size, strides)
        paddings.append([size - 1 - before, extent + before - spread])
    crop = [min(after, 0) for _, after in paddings]
    if any(crop):  # a spread gradient longer than the padded input needs ends in zeros the conv must not see
        upstream = upstream[:, :upstream.shape[1] + crop[0], :upstream.shape[2] + crop[1]]
    paddings = [[0, 0]] + [[before, max(after, 0)] for before, after in paddings] + [[0, 0]]
    return tf.nn.conv2d(tf.pad(upstream, paddings), rotated, 1, "VALID")


def _patches(inputs, kernel, strides):
    size_h, size_w, channels_in, channels_out = kernel.shape
    depth = size_h * size_w * channels_in

    @tf.custom_gradient
    def patches_conv(inputs, kernel):
        patches = tf.image.extract_patches(inputs, [1, size_h, size_w, 1], [1, strides, strides, 1], [1, 1, 1, 1],
                                           "SAME")
        # extract_patches orders each patch as (row, column, channel): the HWIO kernel flattened the same way.
        flat = tf.reshape(patches, [-1, depth])
        outputs = _matmul_over_channels(patches, tf.reshape(kernel, [depth, channels_out]))

        def gradient(upstream):
            # The kernel's gradient from the patches already made; the input's by patches_input_gradient_formulation.
            kernel_grad = tf.matmul(flat, tf.reshape(upstream, [-1, channels_out]), transpose_a=True)
            # (static: patches need it)
            output_size = [same_output_extent(extent, strides) for extent in inputs.shape[1:3]]
            formulation = patches_input_gradient_formulation(kernel.shape, output_size, strides)
            if formulation == "fold":
                input_grad = folded_input_gradient(upstream, kernel, inputs.shape[1:3], strides)
            elif formulation == "rotated":
                input_grad = rotated_input_gradient(upstream, kernel, inputs.shape[1:3], strides)
            else:
                input_grad = tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(inputs), filter=kernel,
                                                             out_backprop=upstream, strides=[1, strides, strides, 1],
                                                             padding="SAME")
            return input_grad, tf.reshape(kernel_grad, kernel.shape)

        return outputs, gradient

    return patches_conv(inputs, tf.convert_to_tensor(kernel))


def _native(inputs, kernel, strides):
    """tf.nn.conv2d; where input_gradient_formulation chooses the rotated conv, with that as its input gradient (TF's
    own gradient otherwise: it skips the input gradient of a conv of the images)."""
    if input_gradient_formulation(kernel.shape, inputs.shape[1:3], strides) == "backward_conv":
        return tf.nn.conv2d(inputs, kernel, strides, "SAME")

    @tf.custom_gradient
    def native_conv(inputs, kernel):
        def gradient(upstream):
            kernel_grad = tf.raw_ops.Conv2DBackpropFilter(input=inputs, filter_sizes=tf.shape(kernel),
                                                          out_backprop=upstream, strides=[1, strides, strides, 1],
                                                          padding="SAME")
            return rotated_input_gradient(upstream, kernel, inputs.shape[1:3], strides), kernel_grad

        return tf.nn.conv2d(inputs, kernel, strides, "SAME"), gradient

    return native_conv(inputs, tf.convert_to_tensor(kernel))


def conv2d_nhwc(inputs, kernel, strides, implementation="cpu"):
    """SAME conv of NHWC `inputs` with HWIO `kernel` (no groups), by the formulation fastest on CPU."""
    if implementation == "native":
        return tf.nn.conv2d(inputs, kernel, strides, "SAME")
    size_h, size_w = kernel.shape[0], kernel.shape[1]
    if size_h == 1 and size_w == 1:
        return _pointwise(inputs, kernel, strides)
    height, width = inputs.shape[1], inputs.shape[2]
    if height is not None and width is not None:
        out_positions = same_output_extent(height, strides) * same_output_extent(width, strides)
        if out_positions <= PATCHES_MAX_POSITIONS:
            return _patches(inputs, kernel, strides)
        return _native(inputs, kernel, strides)
    return tf.nn.conv2d(inputs, kernel, strides, "SAME")


class Conv2D(keras.layers.Conv2D):
    """keras.layers.Conv2D (SAME padding, square strides) with the CPU formulations above; same variables."""

    def __init__(self, *args, implementation="cpu", **kwargs):
        super().__init__(*args, **kwargs)
        self.implementation = resolve_implementation(implementation, self.data_format)

    def convolution_op(self, inputs, kernel):
        if self.implementation == "native" or self.groups != 1 or self.dilation_rate != (1, 1) \
                or self.padding != "same" or self.strides[0] != self.strides[1]:
            return super().convolution_op(inputs, kernel)
        return conv2d_nhwc(inputs, kernel, self.strides[0], "cpu")

    def get_config(self):
        config = super().get_config()
        config["implementation"] = self.implementation
        return config
