"""Where float16 gradients overflow on this CPU: our ResNet-50 against keras.applications.ResNet50.

For each (image size, batch) and each loss scale 2^0 .. 2^15, both models (mixed_float16, fresh weights from the
same seed, the same images and labels) compute the gradients of scale x softmax cross-entropy of their float32
logits; the first scale with a non-finite gradient is reported per model. Both see the same normalised images at
their first convolution: ours takes pixels and normalises them itself (as main.py feeds it), the peer takes that
normalisation's output. When the two models overflow from the same scale, the overflow is the CPU's float16 path
at that batch, not the port.

    python -m bench.fp16_overflow                       # 32 px batch 4 and 96 px batch 8, seed 0
    python -m bench.fp16_overflow --cases 32x4,96x8,224x8 --seeds 0,1,2 --output bench/results/fp16_overflow.json

It measures, it does not time: it may run beside other work.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from utils.errors import doc_part

def parse_cases(text):
    cases = []
    for item in text.split(","):
        size, _, batch = item.partition("x")
        cases.append((int(size), int(batch)))
    return cases


def pixel_batch(batch_size, image_size, num_classes, seed):
    """Pixels in [0, 255] as the TFRecord pipeline hands them to our model, and labels."""
    import tensorflow as tf
    generator = tf.random.Generator.from_seed(seed)
    images = generator.uniform([batch_size, image_size, image_size, 3], 0, 255)
    labels = generator.uniform([batch_size], 0, num_classes, dtype=tf.int32)
    return images, labels


def first_overflow(model, images, labels, scales):
    """The smallest loss scale whose gradients hold a non-finite value (None if none does), and whether the
    gradients were finite at each scale tried (the scales up to that one)."""
    import tensorflow as tf

    @tf.function
    def finite_gradients(scale):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            scaled = loss * scale
        gradients = tape.gradient(scaled, model.trainable_variables)
        return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in gradients])

    finite = {}
    for scale in scales:
        finite[scale] = bool(finite_gradients(tf.constant(float(scale))))
        if not finite[scale]:
            return scale, finite
    return None, finite


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__), allow_abbrev=False)
    parser.add_argument("--cases", default="32x4,96x8", help="image size x batch, comma-separated")
    parser.add_argument("--num_classes", type=int, default=1001)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (weights, images and labels)")
    parser.add_argument("--max_scale_power", type=int, default=15, help="loss scales 2^0 .. 2^this")
    parser.add_argument("--output", default=None, help="JSON result file (bench/results/...)")
    args = parser.parse_args(argv)

    import keras
    info = common.machine_info()
    scales = [2 ** power for power in range(args.max_scale_power + 1)]
    results = []
    for image_size, batch_size in parse_cases(args.cases):
        for seed in [int(s) for s in args.seeds.split(",")]:
            results.append(compare(image_size, batch_size, seed, args.num_classes, scales))
            keras.mixed_precision.set_global_policy("float32")
    common.report(args.output, {"benchmark": "fp16_overflow", "machine": info, "scales": scales, "results": results})


def compare(image_size, batch_size, seed, num_classes, scales):
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(seed)
    ours = common.OurModel(batch_size=batch_size, image_size=image_size, amp=True, amp_dtype="float16",
                           num_classes=num_classes, seed=seed)
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(seed)
    peer = keras.applications.ResNet50(weights=None, classes=num_classes, classifier_activation=None,
                                       input_shape=(image_size, image_size, 3))
    pixels, labels = pixel_batch(batch_size, image_size, num_classes, seed)
    normalised = tf.cast(ours.model.get_layer("input_normalization")(pixels), tf.float32)
    row = {"image_size": image_size, "batch_size": batch_size, "seed": seed}
    for name, model, images in (("ours", ours.model, pixels), ("keras_applications", peer, normalised)):
        overflow, finite = first_overflow(model, images, labels, scales)
        policies = sorted({layer.dtype_policy.name for layer in model.layers if layer.trainable_weights})
        row[name] = {"first_nonfinite_scale": overflow, "policies_of_weighted_layers": policies,
                     "finite": {str(scale): ok for scale, ok in finite.items()}}
        print(f"{image_size} px, batch {batch_size}, seed {seed}, {name:<18}: gradients non-finite from loss scale "
              f"{overflow if overflow else f'(none up to {scales[-1]})'}", flush=True)
    return row


if __name__ == "__main__":
    main()
