"""Worker for tests/test_distributed.py: one training step of a tiny model through the engine of
utils/distributed.py, started by `python -m runtime.launch` (MultiWorkerMirroredStrategy) or `horovodrun`.

Each worker trains on its own shard (batch seeded by its rank) and, before that, computes in plain TensorFlow
(no strategy) the gradient of the mean loss over EVERY shard: the single-process reference. It writes
<out_dir>/grad-rank<R>.json with: the engine's averaged gradient, the reference per-shard gradients, the
weights before and after one step of TF1 momentum (plain and under a dynamic LossScaleOptimizer), and the
step at which any_worker_flag first agreed on a flag raised by rank 1 only.
Usage: python tests/_dist_grad_worker.py OUT_DIR
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

from utils import distributed, optimizers  # noqa: E402
from utils.precision import Precision  # noqa: E402

FEATURES, CLASSES, BATCH, LR = 4, 3, 8, 0.5


def shard(rank):
    rng = np.random.default_rng(100 + rank)
    return (rng.normal(size=(BATCH, FEATURES)).astype(np.float32),
            rng.integers(0, CLASSES, size=BATCH).astype(np.int32))


def initial_weights():
    rng = np.random.default_rng(7)
    return [rng.normal(size=(FEATURES, CLASSES)).astype(np.float32), rng.normal(size=(CLASSES,)).astype(np.float32)]


def make_model():
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(CLASSES)])
    model.set_weights(initial_weights())
    return model


def loss_fn(model, x, y):
    logits = model(x, training=True)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def reference_gradient(rank):
    model = make_model()
    x, y = shard(rank)
    with tf.GradientTape() as tape:
        loss = loss_fn(model, x, y)
    return [g.numpy().tolist() for g in tape.gradient(loss, model.trainable_variables)]


def main(out_dir):
    engine = distributed.init_engine(distributed.detect_engine())
    distribution = distributed.create(engine)
    rank, size = distribution.rank, distribution.size
    references = [reference_gradient(r) for r in range(size)]

    results = {"rank": rank, "size": size, "backend": distribution.backend,
               "num_replicas": distribution.num_replicas, "reference_grads": references}
    x, y = shard(rank)
    # "keras_default" skips our hooks: it shows what Keras 3 alone does with the replicas' gradients.
    for name, dynamic in (("plain", False), ("loss_scale", True), ("keras_default", False)):
        ours = name != "keras_default"
        with distribution.strategy.scope():
            model = make_model()
            optimizer = optimizers.build_optimizer(LR, 0.9, Precision(loss_scaling="dynamic" if dynamic else None))
            optimizer.build(model.trainable_variables)
            if ours:
                distribution.prepare_optimizer(optimizer)
        distribution.broadcast_variables(model.trainable_variables)
        before = [v.numpy().tolist() for v in model.trainable_variables]

        def replica_step(x, y, model=model, optimizer=optimizer, dynamic=dynamic, ours=ours):
            with tf.GradientTape() as tape:
                loss = loss_fn(model, x, y)
                scaled = optimizer.scale_loss(loss) if dynamic else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            if ours:
                grads = distribution.reduce_gradients(grads)
            optimizer.apply(grads, model.trainable_variables)
            scale = optimizer.dynamic_scale if dynamic else tf.constant(1.0)
            return [g / scale for g in grads]

        @tf.function
        def step(x, y, replica_step=replica_step):
            outputs = distribution.strategy.run(replica_step, args=(x, y))
            return [distribution.strategy.experimental_local_results(o)[0] for o in outputs]

        averaged = step(tf.constant(x), tf.constant(y))
        results[name] = {"averaged_grads": [g.numpy().tolist() for g in averaged],
                         "weights_before": before,
                         "weights_after": [v.numpy().tolist() for v in model.trainable_variables]}

    agreed_at = None
    for call in range(1, 2 * distributed.SIGNAL_SYNC_EVERY + 1):
        if distribution.any_worker_flag(rank == 1 and call >= 3):
            agreed_at = call
            break
    results["flag_agreed_at_call"] = agreed_at
    distribution.barrier()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "grad-rank{}.json".format(rank)), "w", encoding="utf-8") as handle:
        json.dump(results, handle)
    print("grad worker {} of {} ({}) done".format(rank, size, distribution.backend), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
