"""runtime/train_state.py: the one wiring of a training run, checked against the formulas it wires together and
against what a checkpoint of the original holds."""

import numpy as np
import pytest
import tensorflow as tf

from model import checkpoint
from runtime import train_state
from runtime.config import RunConfig
from runtime.inputs import TrainingLength
from utils import distributed
from utils.devices import CPU
from utils.precision import Precision

SIZE, CLASSES, BATCH = 32, 5, 4


def _config(**values):
    return RunConfig(arch="resnet50", batch_size=BATCH, num_classes=CLASSES, image_size=SIZE, lr_init=0.256,
                     lr_warmup_epochs=2, momentum=0.875, weight_decay=1e-4, **values)


def _state(length=TrainingLength(20, 4, 20, 5.0), **values):
    return train_state.create_train_state(_config(**values), CPU, Precision(), distributed.single_process(), length,
                                          mixup_seed=0)


@pytest.fixture(scope="module")
def state():
    return _state()


def test_the_schedule_is_the_original_warmup_of_the_scaled_rate(state):
    # lr_init * global batch / 256, warmed up linearly over lr_warmup_epochs * steps_per_epoch steps
    peak = 0.256 * BATCH / 256
    for step in (0, 3, 9):
        state.global_step.assign(step)
        assert float(state.learning_rate()) == pytest.approx(peak * step / 10, rel=1e-6)
    state.global_step.assign(0)


def test_the_optimizer_is_tf1_momentum_over_every_trainable_variable(state):
    assert state.optimizer.momentum == pytest.approx(0.875)
    slots = [v for v in state.optimizer.variables if v.shape != ()]
    assert sorted(tuple(v.shape) for v in slots) == sorted(tuple(v.shape) for v in state.model.trainable_variables)
    assert state.averages is None


def test_checkpoint_entries_are_the_original_names_and_the_metadata_says_what_was_built(state):
    names = set(state.checkpoint_entries)
    assert "global_step" in names and "resnet50/conv2d/conv2d/kernel" in names
    assert "resnet50/conv2d/conv2d/kernel/Momentum" in names
    assert state.checkpoint_entries["global_step"] is state.global_step
    assert names == set(checkpoint.training_entries(state.model, state.optimizer, state.global_step, "resnet50"))
    meta = state.checkpoint_metadata
    assert (meta["arch"], meta["num_classes"], meta["image_size"], meta["use_final_conv"]) == \
        ("resnet50", CLASSES, SIZE, False)
    assert meta["training"]["quantize"] is False and meta["training"]["moving_average_decay"] == 0


def test_one_step_updates_weights_slots_and_the_step_counter(state):
    images = tf.random.stateless_uniform([BATCH, SIZE, SIZE, 3], (1, 2), 0, 255)
    labels = tf.constant([0, 1, 2, 3])
    before = [v.numpy() for v in state.model.trainable_variables]
    state.global_step.assign(5)  # past the first warmup step: a non-zero rate
    values = state.train_step(images, labels)
    assert int(state.global_step.numpy()) == 6
    assert float(values["learning_rate"]) == pytest.approx(0.256 * BATCH / 256 * 5 / 10, rel=1e-6)
    # the reported total is the smoothed cross entropy plus the coupled L2 term
    assert float(values["total_loss"]) == pytest.approx(float(values["cross_entropy"]) + float(values["l2_loss"]),
                                                       rel=1e-6)
    changed = sum(not np.array_equal(a, v.numpy()) for a, v in zip(before, state.model.trainable_variables))
    assert changed == len(before)


def test_ema_and_accumulation_are_part_of_the_state():
    state = _state(moving_average_decay=0.999, grad_accum_steps=2)
    assert state.averages is not None and state.averages.decay == pytest.approx(0.999)
    assert any(key.endswith("/ExponentialMovingAverage") for key in state.checkpoint_entries)
    assert state.checkpoint_metadata["training"]["moving_average_decay"] == pytest.approx(0.999)
    assert train_state.global_batch_size(_config(grad_accum_steps=2), distributed.single_process()) == 2 * BATCH
    assert len(state.variables) == (len(state.model.variables) + len(state.optimizer.variables) + 1 +
                                    len(state.averages.averages))
