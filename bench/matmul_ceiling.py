"""The machine's matmul ceiling for TensorFlow: GFLOP/s of large square matmuls in float32 and bfloat16.

    .venv/bin/python -m bench.matmul_ceiling [--size 2048] [--repeats 5]

This is the practical upper bound for a conv net on this CPU (convolutions are matmuls underneath); the training
and inference benchmarks report their model FLOP/s as a fraction of it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def matmul_gflops(dtype="float32", size=2048, repeats=5, chain=4):
    """Median GFLOP/s over `repeats` runs of `chain` dependent [size x size] matmuls in one tf.function."""
    import tensorflow as tf
    a = tf.random.uniform([size, size], dtype=tf.float32)
    b = tf.random.uniform([size, size], dtype=tf.float32) / size
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)

    @tf.function
    def run(a, b):
        for _ in range(chain):
            a = tf.matmul(a, b)
        return tf.reduce_sum(tf.cast(a[:1, :1], tf.float32))

    run(a, b).numpy()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(a, b).numpy()
        rates.append(2.0 * size ** 3 * chain / (time.perf_counter() - start) / 1e9)
    rates.sort()
    return {"median": rates[len(rates) // 2], "max": rates[-1]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    result = {"loadavg": [round(x, 2) for x in os.getloadavg()]}
    for dtype in ("float32", "bfloat16"):
        result[dtype] = matmul_gflops(dtype, args.size, args.repeats)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
