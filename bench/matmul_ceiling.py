"""The machine's matmul ceiling: GFLOP/s of large square matmuls in TensorFlow (float32, bfloat16) and in NumPy's BLAS.

    .venv/bin/python -m bench.matmul_ceiling [--sizes 1024,2048,3072] [--repeats 5]

This is the practical upper bound for a conv net on this CPU (convolutions are matmuls underneath); the training
and inference benchmarks report their model FLOP/s as a fraction of it. TensorFlow's matmul rate depends on the
size and drifts (2048 alone read 89-123 GFLOP/s on one idle machine, 3072 125-152), so the TF ceiling is the
best median over `--sizes`. NumPy's OpenBLAS sgemm is measured beside it as an engine-independent figure for
what the cores can do (172-173 GFLOP/s there, 1.1-1.4x TF's best).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from utils.errors import doc_part  # noqa: E402


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

    return _gflops(lambda: run(a, b).numpy(), 2.0 * size ** 3 * chain, repeats)


def _gflops(run, flop, repeats):
    """{median, max} GFLOP/s of `repeats` timed calls of `run` (doing `flop` FLOPs each) after one warm-up call."""
    run()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        rates.append(flop / (time.perf_counter() - start) / 1e9)
    rates.sort()
    return {"median": rates[len(rates) // 2], "max": rates[-1]}


def best_tf_gflops(dtype="float32", sizes=(1024, 2048, 3072), repeats=5):
    """The best median GFLOP/s of TF matmuls over `sizes` (the TF ceiling the benchmarks divide by)."""
    return max(matmul_gflops(dtype, size, repeats)["median"] for size in sizes)


def blas_gflops(size=2048, repeats=5):
    """Median GFLOP/s of NumPy's float32 matmul (its BLAS: OpenBLAS in the pinned wheel), the same threads."""
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    return _gflops(lambda: a @ b, 2.0 * size ** 3, repeats)


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--sizes", default="1024,2048,3072")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    from bench import common
    result = {"loadavg": [round(x, 2) for x in os.getloadavg()], "machine": common.machine_info()}
    for dtype in ("float32", "bfloat16"):
        result[dtype] = {size: matmul_gflops(dtype, int(size), args.repeats) for size in args.sizes.split(",")}
    result["numpy_blas_float32"] = blas_gflops(repeats=args.repeats)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
