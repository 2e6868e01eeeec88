"""NHWC <-> compute-layout conversion (the pipelines always produce NHWC, docs/ORIGINAL.md#network-structure)."""
import keras
from keras import ops

# Keras' data_format strings for the two compute layouts accepted on the command line.
KERAS_DATA_FORMATS = {"NHWC": "channels_last", "NCHW": "channels_first"}


def channel_axis(data_format):
    """Channel axis of a 4-D activation in the given Keras data format."""
    return 1 if data_format == "channels_first" else -1


def spatial_axes(data_format):
    """The H and W axes of a 4-D activation in the given Keras data format."""
    return (2, 3) if data_format == "channels_first" else (1, 2)


class ToChannelsFirst(keras.layers.Layer):
    """NHWC -> NCHW transpose (the original's `input_reshape` scope)."""

    def call(self, images):
        return ops.transpose(images, (0, 3, 1, 2))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        return (batch, channels, height, width)
