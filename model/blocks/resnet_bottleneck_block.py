"""ResNet v1.5 bottleneck block, optionally grouped (ResNeXt) and with squeeze-excitation
(docs/ORIGINAL.md#network-structure).

1x1 -> 3x3 (stride here, v1.5; grouped when cardinality > 1) -> 1x1 -> [SE] -> + shortcut -> ReLU.
The shortcut is a projection (1x1 conv with the block stride + BN, no ReLU) whenever the input depth differs from
the output depth, which is the first block of every stage including stage 0 at stride 1.
"""
import keras
from keras import ops

from model.blocks.conv2d_block import Conv2DBlock
from model.kernels import CPU_TRAINING_KERNELS
from model.layers.qat_layers import QuantizedSqueezeExcitation
from model.layers.quantization import ActivationQuantizer
from model.layers.squeeze_excitation import SqueezeExcitation


class BottleneckBlock(keras.layers.Layer):
    def __init__(self, in_channels, width, expansion, strides=1, cardinality=1, use_se=False, se_ratio=16,
                 data_format="channels_last", initializers=None, kernels=CPU_TRAINING_KERNELS, quantization=None,
                 **kwargs):
        super().__init__(**kwargs)
        self._quantization = quantization  # QAT state (model/layers/quantization.py) or None
        self.in_channels = in_channels
        self.out_channels = width * expansion
        self.strides = strides
        init = initializers
        policy = self.dtype_policy

        convs = {"kernels": kernels}

        def conv_init():
            return init.conv() if init else None

        self.bottleneck_1 = Conv2DBlock(width, 1, 1, use_relu=True, data_format=data_format,
                                        kernel_initializer=conv_init(), name="bottleneck_1", dtype=policy,
                                        quantization=quantization, **convs)
        self.bottleneck_2 = Conv2DBlock(
            width, 3, strides, use_relu=True, cardinality=cardinality, data_format=data_format,
            kernel_initializer=(init.grouped_filter() if cardinality > 1 else init.conv()) if init else None,
            name="bottleneck_2", dtype=policy, quantization=quantization, **convs)
        self.bottleneck_3 = Conv2DBlock(self.out_channels, 1, 1, use_relu=False, data_format=data_format,
                                        kernel_initializer=conv_init(), name="bottleneck_3", dtype=policy,
                                        quantization=quantization, **convs)
        self.se = None
        if use_se:
            se_inits = (init.se_dense(), init.se_dense()) if init else None
            se_class, se_kwargs = SqueezeExcitation, {}
            if quantization is not None:
                se_class, se_kwargs = QuantizedSqueezeExcitation, {"state": quantization}
            self.se = se_class(self.out_channels, se_ratio, data_format=data_format, kernel_initializers=se_inits,
                               name="bottleneck_se_layer", dtype=policy, **se_kwargs)
        self.shortcut = None
        self.shortcut_pool = None
        if in_channels != self.out_channels:
            self.shortcut = Conv2DBlock(self.out_channels, 1, strides, use_relu=False, data_format=data_format,
                                        kernel_initializer=conv_init(), name="shortcut", dtype=policy,
                                        quantization=quantization, **convs)
        elif strides != 1:
            # Unreachable with the three architectures; a 1x1 average pool is plain subsampling.
            self.shortcut_pool = keras.layers.AveragePooling2D(1, strides, padding="same", data_format=data_format,
                                                               name="shortcut_pool", dtype=policy)
        if quantization is not None:
            # contrib.quantize quantised the residual add's output after its ReLU.
            self.act_quant = ActivationQuantizer(quantization, name="act_quant")

    def build(self, input_shape):
        # The sublayers in the order call() first uses them, from shapes alone (Conv2DBlock.build says why).
        shape = input_shape
        for block in (self.bottleneck_1, self.bottleneck_2, self.bottleneck_3):
            block.build(shape)
            shape = block.compute_output_shape(shape)
        if self.se is not None:
            self.se.build(shape)
        if self.shortcut is not None:
            self.shortcut.build(input_shape)
        elif self.shortcut_pool is not None:
            self.shortcut_pool.build(input_shape)
        if self._quantization is not None:
            self.act_quant.build(shape)

    def compute_output_shape(self, input_shape):
        shape = input_shape
        for block in (self.bottleneck_1, self.bottleneck_2, self.bottleneck_3):
            shape = block.compute_output_shape(shape)
        return shape

    def call(self, inputs, training=None):
        residual = self.bottleneck_1(inputs, training=training)
        residual = self.bottleneck_2(residual, training=training)
        residual = self.bottleneck_3(residual, training=training)
        if self.se is not None:
            residual = self.se(residual)
        if self.shortcut is not None:
            shortcut = self.shortcut(inputs, training=training)
        elif self.shortcut_pool is not None:
            shortcut = self.shortcut_pool(inputs)
        else:
            shortcut = inputs
        outputs = ops.relu(shortcut + residual)
        if self._quantization is not None:
            outputs = ops.cast(self.act_quant(outputs, training=training), self.compute_dtype)
        return outputs
