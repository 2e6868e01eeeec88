"""Optimizer semantics of the original (docs/ORIGINAL.md#optimizer, docs/ORIGINAL.md#mixed-precision-and-loss-scaling).

TF1 `MomentumOptimizer` applies the learning rate at update time:
    accum = momentum * accum + grad;  var -= lr * accum
Keras `SGD` folds the rate into the velocity (`v = m*v - lr*g; w += v`), which differs whenever the rate changes
(warmup, cosine, step decay). `TF1Momentum` is the TF1 rule as a Keras 3 optimizer, so distribution strategies,
checkpointing of its slots and `LossScaleOptimizer` work unchanged.
"""

import keras
import tensorflow as tf


def _handle(variable):
    """The resource handle of a Keras or tf.Variable (a distributed one's local copy, as its own `.handle` gives)."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).handle


class TF1Momentum(keras.optimizers.Optimizer):
    """Momentum SGD with TF1 semantics. `learning_rate` may be a float or a zero-argument callable."""

    def __init__(self, learning_rate=0.1, momentum=0.9, name="Momentum", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = float(momentum)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.accumulators = self.add_optimizer_variables(variables, "momentum")

    def update_step(self, gradient, variable, learning_rate):
        """TF1's own kernel: `ResourceApplyMomentum` (use_nesterov=False) is the rule above in one op per variable,
        where the composed form took six (docs/PERFORMANCE.md#the-per-variable-tail). Inside a strategy's update
        `variable` and the accumulator's `.handle` are the copies on the device being updated."""
        accumulator = self.accumulators[self._get_variable_index(variable)]
        dtype = variable.dtype
        tf.raw_ops.ResourceApplyMomentum(
            var=_handle(variable), accum=_handle(accumulator), lr=tf.cast(learning_rate, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype), momentum=tf.constant(self.momentum, dtype),
            use_locking=False, use_nesterov=False)

    def get_config(self):
        config = super().get_config()
        config["momentum"] = self.momentum
        return config


def build_optimizer(learning_rate, momentum, precision):
    """TF1 momentum, wrapped in Keras' LossScaleOptimizer for dynamic loss scaling (utils/precision.py); static
    scaling is the train step's (utils/precision.LossScaler)."""
    optimizer = TF1Momentum(learning_rate=learning_rate, momentum=momentum)
    if precision.dynamic:
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
