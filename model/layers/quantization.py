"""Fake quantisation for quantisation-aware training, our Keras 3 stand-in for `tf.contrib.quantize`
(docs/ORIGINAL.md#quantisation-aware-training).

Numerics (8 bits, per tensor):
- weights: range = the current min/max of the (BN-folded) weight tensor, recomputed every call (no variables);
- activations: range = exponential moving averages (decay 0.999) of the batch min/max, each first extended to
  include 0, as contrib's `MovingAvgQuantize`; updated in every training call (also during `quant_delay`, as
  contrib did), read as they are in inference calls. contrib called TF1's `assign_moving_average` with its default
  `zero_debias=True`, so the stored range is the *debiased* average: after t updates with batch values v_1..v_t it
  is sum_i (1-d) d^(t-i) v_i / (1 - d^t) - exactly v_1 after the first step, never a mix with the initial
  [-6, 6] (those only serve an eval before any training step). TF1 kept a `biased` accumulator and a `local_step`
  per range; the same value follows from the previous one and t alone (`debiased_ema_weight`), and t is the
  model's training-call counter `quant_step`, so no variables are added;
- asymmetric by default: the op receives [min, max] as they are (FakeQuant nudges zero onto the grid; the QDQ op
  is scale-only, TF picks the scale from whichever side is tighter);
- `symmetric`: the range becomes [-m, m] with m = max(|min|, |max|); weights then use the narrow range
  (-127..127, FakeQuant levels 1..255) as contrib's symmetric mode did, activations the full range;
- op kind: `tf.quantization.fake_quant_with_min_max_vars` (FakeQuantWithMinMaxVars), or with `use_qdq`
  `tf.quantization.quantize_and_dequantize_v2` (op QuantizeAndDequantizeV4; signed, range given; gradient = straight-through inside the range).

`quant_delay`: quantisation is the identity for the first `quant_delay` training steps. The step counter is one
non-trainable int64 variable (`quant_step`) owned by the stem block, incremented at the start of every
training-mode forward pass and checkpointed with the model, so resuming continues the count. Inference calls
quantise only when the model was built with `QuantizationConfig(quantized_inference=True)` (the eval graph of
`export_frozen_graph.py --quantize`), and then always (contrib's eval graph had no delay).
"""
import dataclasses

import keras
import tensorflow as tf

NUM_BITS = 8
EMA_DECAY = 0.999
INITIAL_RANGE = (-6.0, 6.0)


@dataclasses.dataclass(frozen=True)
class QuantizationConfig:
    symmetric: bool = False
    use_qdq: bool = False
    quant_delay: int = 0
    # Quantise in training=False calls too (QAT eval graph). False = the float eval graph main.py uses.
    quantized_inference: bool = False

    @classmethod
    def from_flags(cls, quantize, symmetric=False, use_qdq=False, quant_delay=0, quantized_inference=False):
        """The settings of the --quantize / --symmetric / --use_qdq / --quant_delay flags; None without
        --quantize (the float model)."""
        if not quantize:
            return None
        return cls(symmetric=symmetric, use_qdq=use_qdq, quant_delay=quant_delay,
                   quantized_inference=quantized_inference)


def is_quantization_variable(variable):
    """QAT range/step variables: the only variables QAT adds; every one has 'quant' in its path."""
    return "quant" in variable.path


def debiased_ema_weight(updates):
    """Weight w of the previous value in a zero-debiased EMA's t-th update, value_t = w value_{t-1} + (1-w) v_t.

    From TF1's biased accumulator b_t = d b_{t-1} + (1-d) v_t and value_t = b_t / (1 - d^t):
    w = d (1 - d^(t-1)) / (1 - d^t); 0 at t = 1, tending to d."""
    t = tf.maximum(tf.cast(updates, tf.float64), 1.0)
    decay = tf.constant(EMA_DECAY, tf.float64)
    return tf.cast(decay * (1.0 - decay ** (t - 1.0)) / (1.0 - decay ** t), tf.float32)


def quantize_dequantize(x, range_min, range_max, config, narrow_range=False):
    """One fake-quantisation op of the configured kind on float32 `x` with a scalar range."""
    range_min = tf.cast(range_min, tf.float32)
    range_max = tf.cast(range_max, tf.float32)
    if config.symmetric:
        bound = tf.maximum(tf.abs(range_min), tf.abs(range_max))
        range_min, range_max = -bound, bound
    if config.use_qdq:
        return tf.quantization.quantize_and_dequantize_v2(
            x, range_min, range_max, signed_input=True, num_bits=NUM_BITS, range_given=True,
            narrow_range=narrow_range)
    return tf.quantization.fake_quant_with_min_max_vars(x, range_min, range_max, num_bits=NUM_BITS,
                                                        narrow_range=narrow_range)


def quantize_weights(weights, config):
    """Weights quantised over their own current min/max (the range itself carries no gradient)."""
    weights = tf.cast(weights, tf.float32)
    range_min = tf.stop_gradient(tf.reduce_min(weights))
    range_max = tf.stop_gradient(tf.reduce_max(weights))
    return quantize_dequantize(weights, range_min, range_max, config, narrow_range=config.symmetric)


class QuantizationState:
    """What every quantised layer shares: the config and the step counter. A plain object on purpose, so Keras
    does not track the counter a second time in every layer that reads it (the stem block owns it)."""

    def __init__(self, config):
        self.config = config
        self.step = None  # set by the owning layer (model/blocks/conv2d_block.py, the stem)

    def create_step(self, layer):
        self.step = layer.add_weight(shape=(), dtype="int64", initializer="zeros", trainable=False,
                                     name="quant_step")
        return self.step

    def quantizes(self, training):
        """Whether a call takes the quantised (BN-folded) path at all; else the layer runs its float path."""
        return bool(training) or self.config.quantized_inference

    def active(self, training):
        """Python bool or scalar bool tensor: whether quantisation applies in this call."""
        if not training:
            return self.config.quantized_inference
        # The counter was incremented at the start of this forward pass: it is (steps done before) + 1.
        return tf.greater(self.step, self.config.quant_delay)

    def apply(self, training, quantized_fn, x):
        active = self.active(training)
        if isinstance(active, bool):
            return quantized_fn() if active else x
        if self.config.quant_delay == 0:
            return quantized_fn()
        return tf.cond(active, quantized_fn, lambda: tf.identity(x))

    def weights(self, kernel, training):
        kernel = tf.cast(kernel, tf.float32)
        return self.apply(training, lambda: quantize_weights(kernel, self.config), kernel)


class ActivationQuantizer(keras.layers.Layer):
    """EMA-range fake quantisation of an activation tensor (variables `min`, `max`; layer name `act_quant`)."""

    def __init__(self, state, name="act_quant", **kwargs):
        super().__init__(name=name, **kwargs)
        self._state = state

    def build(self, input_shape):
        # Created in build (under the parent's name scope) so the paths are unique: <block>/act_quant/min.
        self.range_min = self.add_weight(shape=(), initializer=keras.initializers.Constant(INITIAL_RANGE[0]),
                                         trainable=False, name="min", dtype="float32")
        self.range_max = self.add_weight(shape=(), initializer=keras.initializers.Constant(INITIAL_RANGE[1]),
                                         trainable=False, name="max", dtype="float32")

    def call(self, inputs, training=None):
        x = tf.cast(inputs, tf.float32)
        if training:
            # contrib: the range always holds 0 (TFLite's requirement), then a zero-debiased EMA (module docstring).
            batch_min = tf.minimum(tf.stop_gradient(tf.reduce_min(x)), 0.0)
            batch_max = tf.maximum(tf.stop_gradient(tf.reduce_max(x)), 0.0)
            # The counter is incremented at the start of every training forward pass: this is update number t.
            weight = debiased_ema_weight(self._state.step)
            self.range_min.assign(self.range_min * weight + batch_min * (1.0 - weight))
            self.range_max.assign(self.range_max * weight + batch_max * (1.0 - weight))
        config = self._state.config
        outputs = self._state.apply(
            training, lambda: quantize_dequantize(x, self.range_min.value, self.range_max.value, config), x)
        return tf.cast(outputs, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape
