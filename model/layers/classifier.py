"""Classifier head (scope `output`, docs/ORIGINAL.md#classifier): spatial mean -> dense or 1x1 conv -> float32 logits.

With `use_final_conv` the mean keeps its spatial dims and a 1x1 conv named `dense` (kernel [1,1,2048,N] + bias)
maps it to [B,1,1,N] (NHWC) or [B,N,1,1] (NCHW), squeezed over the spatial axes of the layout. This is the path the
original meant but broke (docs/ORIGINAL.md#known-bugs-of-the-original); it gives the same logits as the dense head
on reshaped weights.
"""
import keras
from keras import ops

from model.layers.layout import spatial_axes


class Classifier(keras.layers.Layer):
    def __init__(self, num_classes, use_final_conv=False, data_format="channels_last", kernel_initializer=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.use_final_conv = use_final_conv
        self.data_format = data_format
        kernel_initializer = kernel_initializer or "glorot_uniform"
        if use_final_conv:
            self.dense = keras.layers.Conv2D(num_classes, 1, use_bias=True, data_format=data_format,
                                             kernel_initializer=kernel_initializer, name="dense",
                                             dtype=self.dtype_policy)
        else:
            self.dense = keras.layers.Dense(num_classes, use_bias=True, kernel_initializer=kernel_initializer,
                                            name="dense", dtype=self.dtype_policy)

    def call(self, features):
        axes = spatial_axes(self.data_format)
        pooled = ops.mean(features, axis=axes, keepdims=self.use_final_conv)
        logits = self.dense(pooled)
        if self.use_final_conv:
            logits = ops.squeeze(logits, axis=axes)
        # Softmax and loss are computed in float32 whatever the compute dtype.
        return ops.cast(logits, "float32")
