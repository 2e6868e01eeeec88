"""Input normalisation of raw 0..255 RGB pixels (docs/ORIGINAL.md#input-normalisation-and-labels).

The constants (utils/image_processing.py) are shared with the DALI pipeline, which normalises on its own and
builds the model with `input_normalized=True`.
"""
import keras
from keras import ops

from utils.image_processing import CHANNEL_MEANS, CHANNEL_STDS  # noqa: F401 - re-exported for the model's users


class InputNormalization(keras.layers.Layer):
    """`(x - mean) / std` per channel on NHWC float pixels.

    Always computed in float32 (before any cast to a mixed-precision compute dtype and before any NHWC->NCHW
    transpose), as the original does inside its model function.
    """

    def __init__(self, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def call(self, images):
        images = ops.cast(images, "float32")
        mean = ops.convert_to_tensor(CHANNEL_MEANS, dtype="float32")
        std = ops.convert_to_tensor(CHANNEL_STDS, dtype="float32")
        return (images - mean) / std

    def compute_output_shape(self, input_shape):
        return input_shape
