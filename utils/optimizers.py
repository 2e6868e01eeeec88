"""Optimizer semantics of the original (docs/ORIGINAL.md#optimizer, docs/ORIGINAL.md#mixed-precision-and-loss-scaling).

TF1 `MomentumOptimizer` applies the learning rate at update time:
    accum = momentum * accum + grad;  var -= lr * accum
Keras `SGD` folds the rate into the velocity (`v = m*v - lr*g; w += v`), which differs whenever the rate changes
(warmup, cosine, step decay). `TF1Momentum` is the TF1 rule as a Keras 3 optimizer, so distribution strategies,
checkpointing of its slots and `LossScaleOptimizer` work unchanged.
"""

import keras
import tensorflow as tf


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
        learning_rate = keras.ops.cast(learning_rate, variable.dtype)
        gradient = keras.ops.cast(gradient, variable.dtype)
        accumulator = self.accumulators[self._get_variable_index(variable)]
        self.assign(accumulator, accumulator * self.momentum + gradient)
        self.assign_sub(variable, learning_rate * accumulator)

    def get_config(self):
        config = super().get_config()
        config["momentum"] = self.momentum
        return config


def build_optimizer(learning_rate, momentum, loss_scaling):
    """`loss_scaling` is "dynamic" (Keras LossScaleOptimizer: 2**15, growth every 2000 steps, skips non-finite
    steps), or None (no scaling, or static scaling done by the train step: scale the loss, unscale the gradients,
    never skip — as the original's FixedLossScalerOptimizer)."""
    optimizer = TF1Momentum(learning_rate=learning_rate, momentum=momentum)
    if loss_scaling == "dynamic":
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def inner_optimizer(optimizer):
    return getattr(optimizer, "inner_optimizer", optimizer)


def current_loss_scale(optimizer, static_scale=None):
    """The loss scale in force: the dynamic scale variable, the static value, or 1."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return tf.convert_to_tensor(optimizer.dynamic_scale)
    return tf.constant(float(static_scale or 1.0))
