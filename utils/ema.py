"""Exponential moving average (EMA) of model variables, the `--moving_average_decay` extension.

After every optimizer step each average moves towards its variable:
    decay_n = min(decay, (1 + n) / (10 + n)),   average <- average - (1 - decay_n) * (average - variable)
where n is the number of optimizer steps before this one (the global step before its increment). This is TF1's
`tf.train.ExponentialMovingAverage(decay, num_updates=global_step)` and Model Garden's dynamic decay: early in
training the average follows the weights closely, later it settles to `decay`. The averages start as copies of the
variables, and are float32 whatever the variables' dtype.
"""

import tensorflow as tf

EMA_SUFFIX = "/ExponentialMovingAverage"  # TF1's name of a shadow variable: <variable name>/ExponentialMovingAverage


def effective_decay(decay, num_updates):
    """The decay of the update after `num_updates` earlier ones (a float32 tensor)."""
    n = tf.cast(num_updates, tf.float32)
    return tf.minimum(tf.constant(decay, tf.float32), (1.0 + n) / (10.0 + n))


class WeightAverage:
    """The averages of `variables` (created under the current distribution strategy's scope, if any)."""

    def __init__(self, variables, decay):
        if not 0.0 < decay < 1.0:
            raise ValueError("EMA decay must be in (0, 1), got {}".format(decay))
        self.decay = float(decay)
        self.sources = list(variables)
        # ONLY_FIRST_REPLICA: the replicas hold the same weights after the gradient all-reduce; one update counts.
        self.averages = [tf.Variable(tf.cast(v, tf.float32), trainable=False, name=_short_name(v) + "_ema",
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                         for v in self.sources]
        self._by_source = {id(source): average for source, average in zip(self.sources, self.averages)}

    def average_of(self, variable):
        """The average of `variable` (one of `sources`); KeyError for any other."""
        if id(variable) not in self._by_source:
            raise KeyError(variable.path if hasattr(variable, "path") else variable.name)
        return self._by_source[id(variable)]

    def update(self, num_updates):
        """One EMA step (inside the train step, after the optimizer's); `num_updates`: steps before this one."""
        decay = effective_decay(self.decay, num_updates)
        for source, average in zip(self.sources, self.averages):
            average.assign_sub((1.0 - decay) * (average - tf.cast(source, tf.float32)))

    def reset(self):
        """Averages := the variables (a run that starts without saved averages)."""
        for source, average in zip(self.sources, self.averages):
            average.assign(tf.cast(source, tf.float32))


def _short_name(variable):
    path = getattr(variable, "path", None) or variable.name
    return path.replace("/", "_").replace(":", "_")
