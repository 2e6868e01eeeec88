"""Max pooling in either layout.

Keras' MaxPooling2D transposes channels_first inputs to NHWC on the TF backend; calling tf.nn.max_pool2d with the
layout itself keeps NCHW native on GPU (and under XLA on CPU), as the original's `tf.layers.max_pooling2d` did.
"""
import keras
import tensorflow as tf

from model.layers.layout import spatial_axes


class MaxPool2D(keras.layers.Layer):
    def __init__(self, pool_size=3, strides=2, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.pool_size = pool_size
        self.strides = strides
        self.data_format = data_format

    def call(self, inputs):
        tf_format = "NCHW" if self.data_format == "channels_first" else "NHWC"
        return tf.nn.max_pool2d(inputs, self.pool_size, self.strides, "SAME", data_format=tf_format)

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        for axis in spatial_axes(self.data_format):
            if shape[axis] is not None:
                shape[axis] = -(-shape[axis] // self.strides)  # SAME padding: ceil(size / stride)
        return tuple(shape)

    def get_config(self):
        return {**super().get_config(), "pool_size": self.pool_size, "strides": self.strides,
                "data_format": self.data_format}
