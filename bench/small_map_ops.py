"""Per-op costs of the 40 px step's formulations at the model's shapes (ResNet-50, the quick start's maps 10x10 to
2x2), for choosing among them.

    .venv/bin/python -m bench.small_map_ops [--batch 32] [--repeats 7] [--size 40|224] [--json FILE]

Four tables, milliseconds per call (median of `--repeats` timings of 20 calls each; each variant timed alone,
after a check against the formulation the model uses: max relative difference printed):
- `matmul`: the 1x1 and patches matmuls [M, K] x [K, N], forward, input gradient (transposed kernel; and
  `input_grad_other_way`, the product kernel x upstream^T transposed, `model.layers.conv`'s up to
  TRANSPOSED_MAX_ROWS rows: `model` names the one the model takes) and kernel gradient (transposed input), with
  GFLOP/s;
- `input_grad`: a 3x3 conv's input gradient by `Conv2DBackpropInput` and by a forward conv of the (for stride 2
  spread-out) output gradient with the rotated kernel (`model.layers.conv.rotated_input_gradient`), at the 40 px
  step's 3x3 convs and around the channel count where the model switches between them (`model` names the one
  the model takes: `model.layers.conv.patches_input_gradient_formulation` for a patches conv, of at most 49
  output positions, `input_gradient_formulation` for a native one); for a patches conv also by the patch
  gradients folded back by one segment sum (`model.layers.conv.folded_input_gradient`; `segment_fold_flipped`: its
  patch gradients' product in the direction the model does not take at that channel count), and for stride 1 by
  patches of the output gradient times the rotated kernel and by a matmul to patch gradients folded back with
  nine shifted slices;
- `strided_sample`: a stride-2 1x1 conv's input sampling, forward and gradient, as a strided slice and as a 1x1
  average pool (the model's);
  With `--size 224`, only the matmul table, at the 1x1 convs' shapes of a 224 px step (maps 56x56 to 7x7), and
  the input_grad table at its two patches shapes (7x7, and 14x14 -> 7x7) and its stride-1 native convs;
- `update_tail`: the weight-decay gradient (`grad + wd * w` on the kernels) and the TF1 momentum update
  (`ResourceApplyMomentum`) of ResNet-50's 161 variables, in a graph (the model's) and compiled by XLA as one
  cluster (the only part of the step XLA might speed up on CPU).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from utils.errors import doc_part  # noqa: E402

# (name, rows per image, K, N) of the 40 px step's matmuls: M = batch * rows.
MATMULS = [("10x10 1x1 256->64", 100, 256, 64), ("5x5 1x1 512->128", 25, 512, 128),
           ("5x5 3x3 patches 128", 25, 1152, 128), ("5x5 1x1 128->512", 25, 128, 512),
           ("3x3 1x1 1024->256", 9, 1024, 256), ("3x3 3x3 patches 256", 9, 2304, 256),
           ("3x3 1x1 256->1024", 9, 256, 1024), ("2x2 1x1 2048->512", 4, 2048, 512),
           ("2x2 3x3 patches 512", 4, 4608, 512), ("2x2 1x1 512->2048", 4, 512, 2048)]
# The 1x1 convs of a 224 px step (the 3x3 ones are native convs there, except the 7x7 patches).
MATMULS_224 = [("56x56 1x1 64->64", 3136, 64, 64), ("56x56 1x1 64->256", 3136, 64, 256),
               ("56x56 1x1 256->64", 3136, 256, 64), ("56x56 1x1 256->128", 3136, 256, 128),
               ("28x28 1x1 128->512", 784, 128, 512), ("28x28 1x1 512->128", 784, 512, 128),
               ("28x28 1x1 512->256", 784, 512, 256), ("14x14 1x1 256->1024", 196, 256, 1024),
               ("14x14 1x1 1024->256", 196, 1024, 256), ("7x7 1x1 512->2048", 49, 512, 2048),
               ("7x7 1x1 2048->512", 49, 2048, 512)]
# (input map, channels in, channels out, stride) of the 40 px step's 3x3 convs (10x10 stride 1 is native, the
# rest patches), then of 3x3 maps around the model's channel threshold, then of ResNeXt's per-group convs at
# 40 px; and of the 224 px step's patches convs and stride-1 native convs.
INPUT_GRADS = [(10, 64, 64, 1), (10, 128, 128, 2), (5, 128, 128, 1), (5, 256, 256, 2), (3, 256, 256, 1),
               (3, 512, 512, 2), (2, 512, 512, 1), (3, 64, 64, 1), (3, 112, 112, 1), (3, 64, 256, 1), (3, 256, 64, 1),
               (5, 8, 8, 1), (5, 16, 16, 2), (3, 16, 16, 1), (2, 32, 32, 1)]
INPUT_GRADS_224 = [(14, 512, 512, 2), (7, 512, 512, 1), (14, 256, 256, 1), (28, 128, 128, 1), (56, 64, 64, 1)]
# (map, channels) of the strided 1x1 samplings.
STRIDED_SAMPLES = [(10, 256), (5, 512), (3, 1024)]


def _time(fn, repeats, calls=20):
    fn().numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            result = fn()
        result.numpy()
        times.append((time.perf_counter() - start) / calls)
    return round(common.median(times) * 1000, 3)


def _rel_diff(result, reference):
    import tensorflow as tf
    return float(tf.reduce_max(tf.abs(result - reference)) / tf.reduce_max(tf.abs(reference)))


def _compare(variants, reference, repeats, row):
    """Times every variant ({name: zero-arg tf.function}); each but `reference` first checked against it."""
    expected = variants[reference]()
    for name, fn in variants.items():
        if name != reference:
            row[name + "_max_rel_diff"] = _rel_diff(fn(), expected)
        row[name + "_ms"] = _time(fn, repeats)
    return row


def matmul_rows(batch, repeats, shapes=MATMULS):
    import tensorflow as tf
    from model.layers import conv
    rows = []
    for name, positions, k, n in shapes:
        generator = tf.random.Generator.from_seed(0)
        m = batch * positions
        a, b, g = generator.normal([m, k]), generator.normal([k, n]), generator.normal([m, n])
        row = {"shape": name, "m": m, "k": k, "n": n,
               # a patches conv's input gradient is a conv (the input_grad table), not this product
               "model": "conv" if "patches" in name else
               "other_way" if conv.takes_other_way_input_gradient(m) else "transposed_kernel"}
        for key, fn in (("forward", lambda: tf.matmul(a, b)),
                        ("input_grad", lambda: tf.matmul(g, b, transpose_b=True)),
                        ("input_grad_other_way", lambda: tf.transpose(tf.matmul(b, g, transpose_b=True))),
                        ("kernel_grad", lambda: tf.matmul(a, g, transpose_a=True))):
            row[key + "_ms"] = _time(tf.function(fn), repeats)
            row[key + "_gflop_s"] = round(2 * m * k * n / row[key + "_ms"] / 1e6, 1)
        rows.append(row)
    return rows


def input_grad_rows(batch, repeats, shapes=INPUT_GRADS):
    import tensorflow as tf
    from model.layers import conv
    rows = []
    for size, channels_in, channels_out, stride in shapes:
        out = conv.same_output_extent(size, stride)
        generator = tf.random.Generator.from_seed(0)
        x = generator.normal([batch, size, size, channels_in])
        w = generator.normal([3, 3, channels_in, channels_out]) * 0.05
        dy = generator.normal([batch, out, out, channels_out])

        def patches_of_gradient():
            patches = tf.image.extract_patches(dy, [1, 3, 3, 1], [1, 1, 1, 1], [1, 1, 1, 1], "SAME")
            flat = tf.matmul(tf.reshape(patches, [-1, 9 * channels_out]),
                             tf.reshape(conv.rotated_kernel(w), [9 * channels_out, channels_in]))
            return tf.reshape(flat, x.shape)

        def matmul_and_fold():
            # Patch gradients [B, H, W, 3, 3, C]; input (h, w) collects tap (i, j) of output (h + 1 - i, w + 1 - j).
            grads = tf.reshape(tf.matmul(tf.reshape(dy, [-1, channels_out]),
                                         tf.reshape(w, [9 * channels_in, channels_out]), transpose_b=True),
                               [batch, size, size, 3, 3, channels_in])
            padded = tf.pad(grads, [[0, 0], [1, 1], [1, 1], [0, 0], [0, 0], [0, 0]])
            return tf.add_n([padded[:, 2 - i:2 - i + size, 2 - j:2 - j + size, i, j, :]
                             for i in range(3) for j in range(3)])

        backprop = lambda: tf.raw_ops.Conv2DBackpropInput(  # noqa: E731
            input_sizes=tf.shape(x), filter=w, out_backprop=dy, strides=[1, stride, stride, 1], padding="SAME")
        variants = {"backprop_input": backprop,
                    "rotated_conv": lambda: conv.rotated_input_gradient(dy, w, (size, size), stride)}
        if stride == 1 and size * size <= conv.PATCHES_MAX_POSITIONS:
            variants.update(patches_of_gradient=patches_of_gradient, matmul_and_fold=matmul_and_fold)
        if out * out <= conv.PATCHES_MAX_POSITIONS:  # a patches conv in the model
            variants["segment_fold"] = lambda: conv.folded_input_gradient(dy, w, (size, size), stride)
            flipped = channels_out < conv.FOLD_OTHER_WAY_MIN_CHANNELS  # the product's other direction
            variants["segment_fold_flipped"] = lambda: conv.folded_input_gradient(dy, w, (size, size), stride,
                                                                                  other_way=flipped)
            model = {"fold": "segment_fold", "rotated": "rotated_conv", "backward_conv": "backprop_input"}[
                conv.patches_input_gradient_formulation(w.shape, (out, out), stride)]
        else:
            rotated = conv.input_gradient_formulation(w.shape, (size, size), stride) == "rotated"
            model = "rotated_conv" if rotated else "backprop_input"
        row = {"shape": f"{size}x{size}{f' -> {out}x{out}' if stride > 1 else ''} 3x3 {channels_in}->{channels_out}",
               "stride": stride, "model": model}
        rows.append(_compare({name: tf.function(fn) for name, fn in variants.items()}, "backprop_input", repeats,
                             row))
    return rows


def strided_sample_rows(batch, repeats):
    import tensorflow as tf
    rows = []
    for size, channels in STRIDED_SAMPLES:
        generator = tf.random.Generator.from_seed(0)
        x = generator.normal([batch, size, size, channels])
        out = -(-size // 2)
        upstream = generator.normal([batch, out, out, channels])

        def forward_and_gradient(sample):
            def step():
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = sample(x)
                    loss = tf.reduce_sum(y * upstream)
                return tf.concat([tf.reshape(y, [-1]), tf.reshape(tape.gradient(loss, x), [-1])], 0)
            return tf.function(step)

        variants = {"strided_slice": forward_and_gradient(lambda v: v[:, ::2, ::2, :]),
                    "avg_pool_1x1": forward_and_gradient(lambda v: tf.nn.avg_pool2d(v, 1, 2, "SAME"))}
        rows.append(_compare(variants, "strided_slice", repeats, {"shape": f"{size}x{size} -> {out}x{out}, {channels}"}))
    return rows


def update_tail_rows(batch, repeats):
    import tensorflow as tf
    from model import resnet
    variables = resnet.build_model("resnet50", num_classes=10, image_size=40).trainable_variables
    handles = [variable.value.handle for variable in variables]
    accumulators = [tf.Variable(tf.zeros(variable.shape)) for variable in variables]
    grads = [tf.random.stateless_normal(variable.shape, seed=[0, i]) for i, variable in enumerate(variables)]
    decayed = [variable.path.endswith("kernel") for variable in variables]
    learning_rate, momentum = tf.constant(1e-6), tf.constant(0.875)

    def update():
        for variable, handle, accumulator, grad, decay in zip(variables, handles, accumulators, grads, decayed):
            if decay:
                grad = grad + 3.0517578125e-05 * variable
            tf.raw_ops.ResourceApplyMomentum(var=handle, accum=accumulator.handle, lr=learning_rate, grad=grad,
                                             momentum=momentum, use_locking=False, use_nesterov=False)
        return tf.constant(0.0)

    row = {"variables": len(variables), "decayed": sum(decayed)}
    for name, jit in (("graph", False), ("xla", True)):
        row[name + "_ms"] = _time(tf.function(update, jit_compile=jit, autograph=False), repeats, calls=5)
    return [row]


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=int, choices=(40, 224), default=40,
                        help="224: only the matmul table, at a 224 px step's 1x1 shapes")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    info = common.machine_info()
    tables = {}
    measures = (("matmul", matmul_rows), ("input_grad", input_grad_rows),
                ("strided_sample", strided_sample_rows), ("update_tail", update_tail_rows))
    if args.size == 224:
        measures = (("matmul", lambda batch, repeats: matmul_rows(batch, repeats, MATMULS_224)),
                    ("input_grad", lambda batch, repeats: input_grad_rows(batch, repeats, INPUT_GRADS_224)))
    for name, measure in measures:
        tables[name] = measure(args.batch, args.repeats)
        for row in tables[name]:
            print(name, row, file=sys.stderr, flush=True)
    common.report(args.json, {"benchmark": "small_map_ops", "batch": args.batch, "size": args.size, "machine": info, **tables})
    return 0


if __name__ == "__main__":
    sys.exit(main())
