"""`conv2d_block` of the original: conv (no bias) -> BN -> optional ReLU (SPEC §3.2).

Sub-layer names mirror the TF1 scopes (`conv2d`, `BatchNorm`); the TF1 variable names themselves come from the
explicit map in model/checkpoint_names.py.
"""
import keras
from keras import ops

from model.layers.batch_norm import BatchNorm
from model.layers.conv import Conv2D
from model.layers.grouped_conv import GroupedConv2D
from model.layers.layout import channel_axis


class Conv2DBlock(keras.layers.Layer):
    def __init__(self, filters, kernel_size, strides=1, use_relu=True, cardinality=1, data_format="channels_last",
                 kernel_initializer=None, grouped_implementation="auto", **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.use_relu = use_relu
        self.cardinality = cardinality
        if cardinality > 1:
            self.conv = GroupedConv2D(filters, kernel_size, strides, groups=cardinality, data_format=data_format,
                                      kernel_initializer=kernel_initializer or "glorot_uniform",
                                      implementation=grouped_implementation, name="group_filter",
                                      dtype=self.dtype_policy)
        else:
            self.conv = Conv2D(filters, kernel_size, strides, padding="same", use_bias=False,
                                            data_format=data_format,
                                            kernel_initializer=kernel_initializer or "glorot_uniform",
                                            name="conv2d", dtype=self.dtype_policy)
        self.bn = BatchNorm(axis=channel_axis(data_format), name="BatchNorm", dtype=self.dtype_policy)

    def call(self, inputs, training=None):
        outputs = self.bn(self.conv(inputs), training=training)
        return ops.relu(outputs) if self.use_relu else outputs
