"""Squeeze-and-excitation: spatial mean -> dense d/r + ReLU -> dense d + sigmoid -> scale
(docs/ORIGINAL.md#network-structure)."""
import keras
from keras import ops

from model.layers.layout import spatial_axes


class SqueezeExcitation(keras.layers.Layer):
    def __init__(self, channels, ratio=16, data_format="channels_last", kernel_initializers=None, **kwargs):
        super().__init__(**kwargs)
        self.channels = channels
        self.data_format = data_format
        kernel_initializers = kernel_initializers or ("glorot_uniform", "glorot_uniform")
        # Names follow the original's TF1 auto-names inside `bottleneck_se_layer`.
        self.squeeze = keras.layers.Dense(channels // ratio, activation="relu", kernel_initializer=kernel_initializers[0],
                                          name="dense", dtype=self.dtype_policy)
        self.excite = keras.layers.Dense(channels, activation="sigmoid", kernel_initializer=kernel_initializers[1],
                                         name="dense_1", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.squeeze.build((input_shape[0], self.channels))
        self.excite.build((input_shape[0], self.squeeze.units))

    def call(self, inputs):
        axes = spatial_axes(self.data_format)
        scale = self.excite(self.squeeze(ops.mean(inputs, axis=axes)))
        return inputs * ops.expand_dims(ops.expand_dims(scale, axes[0]), axes[1])

    def compute_output_shape(self, input_shape):
        return input_shape
