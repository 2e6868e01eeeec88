"""The training state of a run, built in one place: `create_train_state(config, platform, precision,
distribution, length)` gives the model, its step counter, the optimizer, the learning-rate schedule, the weight
averages, the train step and what the checkpoints hold. The Runner, the benchmarks and the tests build training
through it, so they train the same thing.
"""

import dataclasses
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from model import checkpoint, resnet
from runtime import settings, startup, train_step
from utils import learning_rate, optimizers
from utils.ema import WeightAverage
from utils.precision import LossScaler


@dataclasses.dataclass
class TrainState:
    """What one training run updates and saves. `train_step`: a tf.function (images, labels) -> dict of scalars
    (runtime/train_step.make_train_step); `learning_rate`: zero-argument callable, the rate at `global_step`;
    `checkpoint_entries`: {checkpoint key: variable}, `checkpoint_metadata`: the record saved beside them
    (model/checkpoint)."""
    model: object
    global_step: tf.Variable
    optimizer: object
    learning_rate: Callable
    averages: Optional[WeightAverage]
    train_step: Callable
    checkpoint_entries: dict
    checkpoint_metadata: dict

    @property
    def variables(self):
        """Every variable of the state (what a multi-worker start makes equal on all workers)."""
        return (list(self.model.variables) + list(self.optimizer.variables) + [self.global_step] +
                (list(self.averages.averages) if self.averages is not None else []))


def create_step_counter():
    """The global step. Call inside the strategy's scope: every replica steps it once per step, and with several
    replicas one increment counts (ONLY_FIRST_REPLICA)."""
    return tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def global_batch_size(config, distribution):
    """The images of one optimizer step: all replicas, all --grad_accum_steps micro-batches."""
    return settings.images_per_step(config, distribution.num_replicas)


def create_train_state(config, platform, precision, distribution, length, *, model=None, mixup_seed=None):
    """The TrainState of `config` (runtime/config.RunConfig) on `platform` (utils/devices.Platform) at `precision`
    (utils/precision.Precision) under `distribution` (utils/distributed.Distribution), for a run of `length`
    (runtime/inputs.TrainingLength: the schedule's epoch and decay lengths).

    `model`: a model of `config` built elsewhere (the benchmarks' variants); by default the run's training model
    (runtime/startup.build_model). `mixup_seed`: the seed of the mixup / CutMix draws; by default --seed, else a
    random one. Nothing is restored here: the state starts from its initial values (runtime/checkpoints).
    """
    strategy = distribution.strategy
    batch = global_batch_size(config, distribution)
    with strategy.scope():
        if model is None:
            model = startup.build_model(config, platform, precision)
        global_step = create_step_counter()

        def schedule():
            return learning_rate.learning_rate_schedule(
                global_step, config.lr_init, batch, length.steps_per_epoch, config.lr_warmup_epochs,
                length.num_decay_steps, config.cosine_lr)

        optimizer = optimizers.build_optimizer(schedule, config.momentum, precision)
        optimizer.build(model.trainable_variables)
        distribution.prepare_optimizer(optimizer)
        averages = WeightAverage(resnet.averaged_variables(model), config.moving_average_decay) \
            if config.moving_average_decay > 0 else None
    if mixup_seed is None:
        mixup_seed = config.seed if config.seed is not None else np.random.randint(2 ** 31 - 1)
    step = train_step.make_train_step(
        model, optimizer, schedule, global_step,
        loss=train_step.LossSettings(config.num_classes, config.label_smoothing, config.weight_decay,
                                     config.mixup, config.cutmix, config.mixup_switch_prob),
        regularized=resnet.regularized_variables(model), scaler=LossScaler(precision, optimizer),
        reduce_gradients=distribution.reduce_gradients, strategy=strategy,
        mixup_seed=tf.constant(mixup_seed, tf.int64), jit_compile=config.xla and distribution.jit_in_step,
        accumulation=config.grad_accum_steps, averages=averages)
    return TrainState(
        model=model, global_step=global_step, optimizer=optimizer, learning_rate=schedule, averages=averages,
        train_step=step,
        checkpoint_entries=checkpoint.training_entries(model, optimizer, global_step, config.arch, averages),
        checkpoint_metadata=checkpoint.metadata(config.arch, config.num_classes, config.input_size,
                                                config.use_final_conv, config.uses_dali,
                                                settings.training_state(config, distribution.num_replicas,
                                                                        length.num_samples, length,
                                                                        workers=distribution.size)))
