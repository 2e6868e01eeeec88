"""Training step throughput: our Runner's train step (as `main.py --mode training_benchmark` runs it) against
keras.applications.ResNet50 trained by a plain tf.function step, interleaved in one process.

    .venv/bin/python -m bench.train_step [--variants ours,keras,ours_xla,ours_amp] [--batch 32] [--size 224] \
        [--warmup 2] [--rounds 5] [--arch resnet50] [--json bench/results/train_step.json]

Variants:
  ours            Runner train step, fp32 (the default path: fused BN, CPU conv formulations)
  ours_xla        ... with --xla (jit_compile=True)
  ours_amp        ... with --amp (mixed_bfloat16 on CPU)
  ours_ref_bn     ours with the reference (unfused) batch norm, to show what the fused BN buys
  ours_no_wd      ours with --weight_decay 0: what the L2 term's ops (L2Loss, its gradient and the AddN into each
                  kernel's gradient) cost, the most a fused decay-and-update could save
  ours_native     ours built with plain tf.nn.conv2d convs (grouped ones per group; the CPU conv formulations off)
  ours_amp_native ours --amp built with those plain convs
  keras           keras.applications.ResNet50(weights=None), SGD momentum, CE loss, tf.function
  keras_xla       ... with jit_compile=True
The same synthetic batch (already in memory) feeds every variant: this measures the step, not the input pipeline
(bench/input_pipeline.py measures that). Each timed step includes fetching its outputs to the host, as main.py.
Prints one JSON line with medians (s/step, img/s), ratios to `keras`, achieved TFLOP/s and the matmul ceiling.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from utils.errors import doc_part  # noqa: E402


def build_variant(name, args, images, labels):
    if name.startswith("ours"):
        from model import kernels
        xla = name == "ours_xla"
        amp = name in ("ours_amp", "ours_amp_native")
        native = name in ("ours_native", "ours_amp_native")
        extra = {"weight_decay": 0.0} if name == "ours_no_wd" else {}
        ours = common.OurModel(args.arch, args.batch, args.size, xla=xla, amp=amp,
                               kernels=kernels.CPU_PLAIN_KERNELS if native else None, **extra)
        if name == "ours_ref_bn":
            from model.layers import batch_norm
            batch_norm.set_implementation(ours.model, "reference")
        step = common.our_train_step(ours)
        return lambda: common.fetch(step(images, labels))
    if name.startswith("keras"):
        if args.arch != "resnet50":
            raise SystemExit("the keras.applications peer exists for resnet50 only")
        model = common.keras_resnet50(1001, args.size)
        step = common.keras_train_step(model, jit_compile=name == "keras_xla")
        return lambda: common.fetch(step(images, labels))
    raise SystemExit(f"unknown variant {name}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--variants", default="ours,keras,ours_xla,ours_amp")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no_ceiling", action="store_true", help="skip the matmul ceiling measurement")
    parser.add_argument("--json", default=None, help="also write the result to this file")
    args = parser.parse_args(argv)

    info = common.machine_info()
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    images, labels = common.synthetic_batch(args.batch, args.size)
    variants = {}
    for name in args.variants.split(","):
        log(f"building {name}")
        variants[name] = build_variant(name, args, images, labels)
    faults = {}
    times = common.interleaved(variants, args.rounds, args.warmup, log=log, faults=faults)
    ceiling = None
    if not args.no_ceiling:
        from bench.matmul_ceiling import best_tf_gflops, blas_gflops
        gc.collect()
        ceiling = {"float32": best_tf_gflops("float32"), "bfloat16": best_tf_gflops("bfloat16"),
                   "numpy_blas_float32": blas_gflops()["median"]}
    flop_per_image = common.forward_gflop(args.arch, args.size) * common.TRAIN_FLOP_FACTOR
    results = {}
    base = common.median(times["keras"]) if "keras" in times else None
    for name, values in times.items():
        seconds = common.median(values)
        row = {"s_per_step": round(seconds, 3), "img_per_s": round(args.batch / seconds, 2),
               "all_s": [round(v, 3) for v in values], "page_faults_per_step": round(common.median(faults[name]))}
        if base:
            row["speedup_vs_keras"] = round(base / seconds, 3)
        gflops = flop_per_image * args.batch / seconds
        row["model_gflop_per_s"] = round(gflops, 1)
        if ceiling:
            key = "bfloat16" if name.startswith("ours_amp") else "float32"
            row["fraction_of_matmul_ceiling"] = round(gflops / ceiling[key], 3)
            if key == "float32":
                row["fraction_of_numpy_blas"] = round(gflops / ceiling["numpy_blas_float32"], 3)
        results[name] = row
    common.report(args.json, {"benchmark": "train_step", "arch": args.arch, "batch": args.batch, "size": args.size,
                              "warmup": args.warmup, "rounds": args.rounds, "machine": info,
                              "matmul_ceiling_gflops": ceiling, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
