"""Worker for tests/test_gpu_paths.py: one step of runtime/train_step.make_train_step under the mirrored engine on
two logical CPU devices (utils/devices.setup_devices, RN50_ENGINE=mirrored), each replica on its own batch.
Prints one JSON line: the per-replica gradients computed in plain TensorFlow (no strategy), and the weights
before and after the step. Usage: python tests/_mirrored_step_worker.py"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from utils import quiet  # noqa: E402

quiet.setup([])
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from runtime import train_step  # noqa: E402
from utils import devices, distributed, optimizers  # noqa: E402
from utils.precision import LossScaler, Precision  # noqa: E402

CLASSES, BATCH, LR = 3, 4, 0.5


def batch(replica):
    rng = np.random.default_rng(50 + replica)
    return rng.normal(size=(BATCH, 5)).astype("f4"), rng.integers(0, CLASSES, BATCH).astype("i4")


def make_model():
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(CLASSES)])
    rng = np.random.default_rng(7)
    model.set_weights([rng.normal(size=(5, CLASSES)).astype("f4"), rng.normal(size=(CLASSES,)).astype("f4")])
    return model


def main():
    engine = distributed.Engine("mirrored")
    platform = devices.setup_devices(engine=engine, cpu_replicas=2)
    distribution = distributed.create(engine, platform.replica_devices)
    reference = []
    for replica in range(2):
        model = make_model()
        x, y = batch(replica)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x, training=True)))
        reference.append([g.numpy().tolist() for g in tape.gradient(loss, model.trainable_variables)])
    with distribution.strategy.scope():
        model = make_model()
        global_step = tf.Variable(0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        optimizer = optimizers.build_optimizer(lambda: tf.constant(LR), 0.9, Precision())
        optimizer.build(model.trainable_variables)
        distribution.prepare_optimizer(optimizer)
    before = [v.numpy().tolist() for v in model.trainable_variables]
    step = train_step.make_train_step(
        model, optimizer, lambda: tf.constant(LR), global_step, loss=train_step.LossSettings(CLASSES, 0.0, 0.0),
        regularized=[], scaler=LossScaler(Precision(), optimizer), reduce_gradients=distribution.reduce_gradients,
        strategy=distribution.strategy, mixup_seed=tf.constant(0, tf.int64))
    inputs = distribution.strategy.experimental_distribute_values_from_function(
        lambda context: tuple(tf.constant(a) for a in batch(context.replica_id_in_sync_group)))
    step(*inputs)
    print(json.dumps({"replicas": distribution.num_replicas, "devices": list(platform.replica_devices),
                      "reference": reference, "before": before, "step": int(global_step.numpy()),
                      "after": [v.numpy().tolist() for v in model.trainable_variables]}))


if __name__ == "__main__":
    main()
