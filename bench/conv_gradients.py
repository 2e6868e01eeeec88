"""Per-op cost of a ResNet-50 conv's forward and of each way to compute its two gradients, at the model's shapes.

    .venv/bin/python -m bench.conv_gradients [--batch 32] [--repeats 5] [--json FILE]

For the native (oneDNN) 3x3 convs on maps larger than 7x7 and the 7x7 stem: forward `Conv2D`; input gradient by
`Conv2DBackpropInput` and (stride 1) by a forward conv of the output gradient with the kernel rotated by 180
degrees and its in/out channels swapped; kernel gradient by `Conv2DBackpropFilter` and by patches + matmul.
Each alternative is first checked against TF's op (max relative difference printed). Milliseconds, median of `--repeats`, each variant timed alone (not interleaved: per-op
numbers for choosing a formulation, not whole-step figures).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from utils.errors import doc_part

# (name, input map, kernel, channels in, channels out, stride) of ResNet-50 v1.5's native convs at 224 px.
SHAPES = [("stem 224 7x7 3->64 s2", 224, 7, 3, 64, 2), ("56 3x3 64 s1", 56, 3, 64, 64, 1),
          ("28 3x3 128 s1", 28, 3, 128, 128, 1), ("14 3x3 256 s1", 14, 3, 256, 256, 1),
          ("56->28 3x3 128 s2", 56, 3, 128, 128, 2), ("28->14 3x3 256 s2", 28, 3, 256, 256, 2)]


def measure(shape, batch, repeats):
    import tensorflow as tf
    from model.layers import conv
    name, size, k, channels_in, channels_out, stride = shape
    generator = tf.random.Generator.from_seed(0)
    x = generator.normal([batch, size, size, channels_in])
    w = generator.normal([k, k, channels_in, channels_out]) * 0.05
    out = -(-size // stride)
    dy = generator.normal([batch, out, out, channels_out])
    strides = [1, stride, stride, 1]

    def input_grad_tf():
        return tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(x), filter=w, out_backprop=dy, strides=strides,
                                              padding="SAME")

    def kernel_grad_tf():
        return tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=tf.shape(w), out_backprop=dy, strides=strides,
                                               padding="SAME")

    def kernel_grad_patches():
        patches = tf.image.extract_patches(x, [1, k, k, 1], strides, [1, 1, 1, 1], "SAME")
        return tf.reshape(tf.einsum("bhwk,bhwo->ko", patches, dy), w.shape)

    variants = {"forward": lambda: tf.nn.conv2d(x, w, stride, "SAME"), "input_grad_tf": input_grad_tf,
                "kernel_grad_tf": kernel_grad_tf, "kernel_grad_patches": kernel_grad_patches}
    if stride == 1:
        variants["input_grad_rotated_conv"] = lambda: tf.nn.conv2d(dy, conv.rotated_kernel(w), 1, "SAME")
    row = {"shape": name}
    checks = {"input_grad_rotated_conv": "input_grad_tf", "kernel_grad_patches": "kernel_grad_tf"}
    for key, fn in variants.items():
        fn = tf.function(fn)
        result = fn()
        if key in checks:
            reference = tf.function(variants[checks[key]])()
            row[key + "_max_rel_diff"] = float(tf.reduce_max(tf.abs(result - reference))
                                               / tf.reduce_max(tf.abs(reference)))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn().numpy()
            times.append(time.perf_counter() - start)
        row[key + "_ms"] = round(common.median(times) * 1000, 1)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    info = common.machine_info()
    rows = []
    for shape in SHAPES:
        rows.append(measure(shape, args.batch, args.repeats))
        print(rows[-1], file=sys.stderr, flush=True)
    common.report(args.json, {"benchmark": "conv_gradients", "batch": args.batch, "machine": info, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
