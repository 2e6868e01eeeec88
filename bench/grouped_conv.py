"""Grouped 3x3 convolution formulations on CPU (ResNeXt's 32x4d blocks), forward + both gradients, interleaved.

    .venv/bin/python -m bench.grouped_conv [--batch 8] [--rounds 5] [--json FILE]

  split            the model's formulation (model/layers/grouped_conv.py): per-group tf.nn.conv2d (oneDNN), concat
  batched_patches  extract_patches -> [B,H,W,9,G,C/G], one einsum batched over the 32 groups
  batched_slices   the same with the 9 shifted views stacked by slicing (cheaper gradient than ExtractImagePatches)
  batched_gmajor   batched_slices transposed group-major, one tf.matmul [G, B*H*W, 9*C/G] x [G, 9*C/G, O/G]
Every formulation is checked against `split` (output and both gradients) before timing.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

import tensorflow as tf  # noqa: E402

from utils.errors import doc_part


def _same_pad(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return out, total // 2, total - total // 2


def shifted_patches(inputs, k, s):
    """[B,H',W',k*k,C] stack of the k*k shifted (strided) views of the SAME-padded NHWC input."""
    _, h, w, _ = inputs.shape
    oh, ph0, ph1 = _same_pad(h, k, s)
    ow, pw0, pw1 = _same_pad(w, k, s)
    x = tf.pad(inputs, [[0, 0], [ph0, ph1], [pw0, pw1], [0, 0]])
    views = [x[:, i:i + (oh - 1) * s + 1:s, j:j + (ow - 1) * s + 1:s, :] for i in range(k) for j in range(k)]
    return tf.stack(views, axis=3)


def _grouped_einsum(patches, kernel, groups):
    """patches [B,H,W,k*k*C] (or [B,H,W,k*k,C]) in (row, column, channel) order -> grouped conv output."""
    k, _, cg, o = kernel.shape
    oh, ow = patches.shape[1], patches.shape[2]
    p = tf.reshape(patches, [-1, oh, ow, k * k, groups, cg])
    kern = tf.reshape(kernel, [k * k, cg, groups, o // groups])
    y = tf.einsum("bhwkgc,kcgo->bhwgo", p, kern)
    return tf.reshape(y, [-1, oh, ow, o])


def batched_slices(inputs, kernel, s, groups):
    return _grouped_einsum(shifted_patches(inputs, kernel.shape[0], s), kernel, groups)  # [B,H,W,k*k,C]


def batched_patches(inputs, kernel, s, groups):
    k = kernel.shape[0]
    patches = tf.image.extract_patches(inputs, [1, k, k, 1], [1, s, s, 1], [1, 1, 1, 1], "SAME")
    return _grouped_einsum(patches, kernel, groups)


def batched_gmajor(inputs, kernel, s, groups):
    """Same as batched_slices but builds patches group-major so the matmul batch axis is outermost."""
    k, _, cg, o = kernel.shape
    p = shifted_patches(inputs, k, s)
    oh, ow = p.shape[1], p.shape[2]
    p = tf.reshape(p, [-1, k * k, groups, cg])              # [BHW, kk, G, cg]
    p = tf.transpose(p, [2, 0, 1, 3])                       # [G, BHW, kk, cg]
    p = tf.reshape(p, [groups, -1, k * k * cg])
    kern = tf.reshape(kernel, [k * k, cg, groups, o // groups])
    kern = tf.reshape(tf.transpose(kern, [2, 0, 1, 3]), [groups, k * k * cg, o // groups])
    y = tf.matmul(p, kern)                                  # [G, BHW, og]
    y = tf.transpose(y, [1, 0, 2])
    return tf.reshape(y, [-1, oh, ow, o])


def main(argv=None):
    import numpy as np
    import tensorflow as tf
    from model.layers.grouped_conv import grouped_conv2d
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    info = common.machine_info()
    groups = 32
    # (map size, channels, stride) of ResNeXt101-32x4d's grouped convs at 224 px.
    cases = [(56, 128, 1), (56, 256, 2), (28, 256, 1), (14, 512, 1), (7, 1024, 1)]
    impls = {"split": lambda x, k, s: grouped_conv2d(x, k, s, groups, "channels_last", "split"),
             "batched_patches": lambda x, k, s: batched_patches(x, k, s, groups),
             "batched_slices": lambda x, k, s: batched_slices(x, k, s, groups),
             "batched_gmajor": lambda x, k, s: batched_gmajor(x, k, s, groups)}
    rng = np.random.RandomState(0)
    variants = {}
    for h, c, s in cases:
        x = tf.constant(rng.randn(args.batch, h, h, c).astype("f4"))
        out = c if s == 1 else c // 2
        kernel = tf.Variable(rng.randn(3, 3, c // groups, out).astype("f4") * 0.1)
        reference = None
        for name, function in impls.items():
            @tf.function
            def step(x, function=function, kernel=kernel, s=s):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = function(x, kernel, s)
                    loss = tf.reduce_sum(y * y)
                return [y] + tape.gradient(loss, [x, kernel])
            values = [v.numpy() for v in step(x)]
            if reference is None:
                reference = values
            for got, want in zip(values, reference):
                assert np.abs(got - want).max() <= 1e-5 * (np.abs(want).max() + 1e-9), (name, h, c)
            variants[f"{h}x{h}_c{c}_s{s}/{name}"] = lambda step=step, x=x: [v.numpy() for v in step(x)]
    times = common.interleaved(variants, args.rounds, 0, log=lambda text: None)
    results = {key: round(common.median(value) * 1e3, 1) for key, value in times.items()}
    common.report(args.json, {"benchmark": "grouped_conv", "batch": args.batch, "unit": "ms fwd+bwd",
                              "machine": info, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
