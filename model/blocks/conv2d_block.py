"""`conv2d_block` of the original: conv (no bias) -> BN -> optional ReLU (docs/ORIGINAL.md#network-structure).

Sub-layer names mirror the TF1 scopes (`conv2d`, `BatchNorm`); the TF1 variable names themselves come from the
explicit map in model/checkpoint_names.py.
"""
import keras
from keras import ops

from model.kernels import CPU_TRAINING_KERNELS
from model.layers.batch_norm import BatchNorm
from model.layers.conv import Conv2D
from model.layers.grouped_conv import GroupedConv2D
from model.layers.layout import channel_axis
from model.layers.qat_layers import folded_conv_bn
from model.layers.quantization import ActivationQuantizer


class Conv2DBlock(keras.layers.Layer):
    def __init__(self, filters, kernel_size, strides=1, use_relu=True, cardinality=1, data_format="channels_last",
                 kernel_initializer=None, kernels=CPU_TRAINING_KERNELS, quantization=None, owns_quant_step=False,
                 **kwargs):
        """`kernels`: the conv formulations (a model.kernels.Kernels);
        `quantization`: a model.layers.quantization.QuantizationState for QAT (None = float block);
        `owns_quant_step`: this block (the stem) holds and increments the QAT step counter."""
        super().__init__(**kwargs)
        self.filters = filters
        self.use_relu = use_relu
        self.cardinality = cardinality
        if cardinality > 1:
            self.conv = GroupedConv2D(filters, kernel_size, strides, groups=cardinality, data_format=data_format,
                                      kernel_initializer=kernel_initializer or "glorot_uniform",
                                      implementation=kernels.grouped, name="group_filter",
                                      dtype=self.dtype_policy)
        else:
            self.conv = Conv2D(filters, kernel_size, strides, padding="same", use_bias=False,
                               data_format=data_format, kernel_initializer=kernel_initializer or "glorot_uniform",
                               implementation=kernels.conv, name="conv2d", dtype=self.dtype_policy)
        self.bn = BatchNorm(axis=channel_axis(data_format), name="BatchNorm", dtype=self.dtype_policy)
        self._quantization = quantization
        self.owns_quant_step = owns_quant_step
        if quantization is not None:
            if owns_quant_step:
                self.quant_step = quantization.create_step(self)
            self.act_quant = ActivationQuantizer(quantization, name="act_quant")

    def build(self, input_shape):
        # The sublayers in the order call() first uses them. With build() and compute_output_shape() defined, Keras
        # builds a functional model from shapes alone instead of tracing every block's call() in a scratch graph
        # (docs/PERFORMANCE.md, Start-up: the model built from its shapes).
        self.conv.build(input_shape)
        output_shape = self.conv.compute_output_shape(input_shape)
        self.bn.build(output_shape)
        if self._quantization is not None:
            self.act_quant.build(output_shape)

    def compute_output_shape(self, input_shape):
        return self.conv.compute_output_shape(input_shape)

    def call(self, inputs, training=None):
        if self._quantization is not None and self._quantization.quantizes(training):
            return self._quantized_call(inputs, training)
        outputs = self.bn(self.conv(inputs), training=training)
        outputs = ops.relu(outputs) if self.use_relu else outputs
        if self._quantization is not None:
            outputs = self.act_quant(outputs, training=training)  # identity here; builds its range variables
        return outputs

    def _quantized_call(self, inputs, training):
        if training and self.owns_quant_step:
            self.quant_step.assign_add(1)
        outputs = folded_conv_bn(self, inputs, training, self._quantization)
        if self.use_relu:
            outputs = ops.relu(outputs)
        return ops.cast(self.act_quant(outputs, training=training), self.compute_dtype)
