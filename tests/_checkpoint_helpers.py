"""Small resnet50 models and checkpoints of them in the named and object formats, for the checkpoint tests."""
import numpy as np
import tensorflow as tf

from model import checkpoint
from model.resnet import build_model
from tests.test_checkpoint_names import NUM_CLASSES
from utils.optimizers import build_optimizer
from utils.precision import Precision


def small_model(**options):
    return build_model("resnet50", num_classes=options.pop("num_classes", NUM_CLASSES), image_size=32, **options)


def randomise(model, seed):
    """Distinct values in every variable (BN statistics included), so a swap or a skipped variable shows."""
    rng = np.random.default_rng(seed)
    for variable in model.variables:
        value = rng.uniform(0.5, 1.5, variable.shape) if "variance" in variable.path else rng.normal(
            0, 0.05, variable.shape)
        variable.assign(value.astype("float32"))


def values_of(model):
    return {variable.path: variable.numpy() for variable in model.variables}


def training_state(model, loss_scaling=None):
    optimizer = build_optimizer(0.1, 0.9, Precision(loss_scaling=loss_scaling))
    optimizer.build(model.trainable_variables)
    return optimizer, tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")


def save_named(directory, model, step=7, image_size=32, **writer_options):
    optimizer, global_step = training_state(model)
    global_step.assign(step)
    for index, accumulator in enumerate(optimizer.accumulators):
        accumulator.assign(tf.fill(accumulator.shape, float(index)))
    writer = checkpoint.CheckpointWriter(
        str(directory), checkpoint.training_entries(model, optimizer, global_step, "resnet50"),
        checkpoint.metadata("resnet50", NUM_CLASSES, image_size, False, False), **writer_options)
    return writer, writer.save(step), optimizer


def save_object_based(directory, model, step=5):
    """The object format (tf.train.Checkpoint + CheckpointManager over model, optimizer and step)."""
    optimizer, global_step = training_state(model)
    global_step.assign(step)
    state = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=global_step)
    manager = tf.train.CheckpointManager(state, str(directory), max_to_keep=5, checkpoint_name="model.ckpt")
    return manager.save(checkpoint_number=step), optimizer

