"""The cost of the training extensions (docs/EXTENSIONS.md) at 224 px on this machine.

    .venv/bin/python -m bench.extensions [--size 224] [--batch 16] [--steps 3] [--warmup 1] [--rounds 2]

1. Input pipeline alone: images/s of the TFRecord training pipeline (decode, crop, flip, resize) without an
   augmenter, with AutoAugment and with RandAugment (2 layers, magnitude 9), interleaved per round.
2. The training step as users run it: `main.py --mode training_benchmark --data_dir` (the pipeline's threads share
   the cores with the step) for the original's step and each extension on its own, then all at once; interleaved
   per round; each variant's median `train_throughput_total` and its ratio to the original's.
Gradient accumulation runs micro-batches of batch / 2, twice per step, so every variant steps on `--batch` images.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import common  # noqa: E402
from utils.errors import doc_part  # noqa: E402

PIPELINE_VARIANTS = ("none", "autoaugment", "randaugment")
STEP_VARIANTS = {
    "original": (),
    "randaugment": ("--augmenter_name", "randaugment"),
    "autoaugment": ("--augmenter_name", "autoaugment"),
    "cutmix+mixup": ("--cutmix", "1.0", "--mixup", "0.2"),
    "ema": ("--moving_average_decay", "0.9999"),
    "grad_accum_2": ("--grad_accum_steps", "2"),
    "all": ("--augmenter_name", "randaugment", "--cutmix", "1.0", "--mixup", "0.2", "--moving_average_decay",
            "0.9999", "--grad_accum_steps", "2"),
}


def pipeline_rate(paths, name, size, batch, images):
    from bench.input_pipeline import time_dataset
    from utils import data_utils
    from utils.augment import AugmentSettings
    dataset = data_utils.get_tfrecords_input_fn(paths, batch, size, size, training=True, deterministic=True, seed=1,
                                                num_classes=1000, augment=AugmentSettings(name))
    return time_dataset(dataset, batch, images)


def step_rate(args, work_dir, tag, data_dir, flags):
    from bench.step_data_source import read_throughput
    import subprocess
    results = os.path.join(work_dir, tag)
    os.makedirs(results, exist_ok=True)
    batch = args.batch // 2 if "--grad_accum_steps" in flags else args.batch
    command = [sys.executable, os.path.join(ROOT, "main.py"), "--mode", "training_benchmark",
               "--batch_size", str(batch), "--iter_unit", "batch", "--num_iter", str(args.warmup + args.steps),
               "--warmup_steps", str(args.warmup), "--image_size", str(args.size), "--num_classes", "1001",
               "--data_dir", data_dir, "--results_dir", results, "--no_progress", "--display_every", "1000",
               "--seed", "1", *flags]
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise RuntimeError("main.py failed ({}):\n{}".format(" ".join(command), result.stdout[-3000:]))
    return read_throughput(os.path.join(results, "log.json"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=16, help="images per optimizer step")
    parser.add_argument("--steps", type=int, default=3, help="measured steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps per run (tracing)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=800, help="JPEG records to generate (~256x300)")
    parser.add_argument("--pipeline_images", type=int, default=512, help="images timed per pipeline run")
    parser.add_argument("--skip_step", action="store_true", help="only the input pipeline part")
    parser.add_argument("--step_variants", default=",".join(STEP_VARIANTS),
                        help="comma-separated subset of: " + ", ".join(STEP_VARIANTS))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    variants = args.step_variants.split(",")
    unknown = sorted(set(variants) - set(STEP_VARIANTS))
    if unknown or "original" not in variants:
        parser.error("--step_variants: unknown {} (the list must include 'original')".format(unknown))

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    from bench.input_pipeline import make_records
    info = common.machine_info()
    with tempfile.TemporaryDirectory(prefix="rn50_extensions_") as work_dir:
        data_dir = os.path.join(work_dir, "data")
        os.makedirs(data_dir)
        paths = make_records(data_dir, args.records)
        pipeline = {name: [] for name in PIPELINE_VARIANTS}
        for index in range(args.rounds):
            for name in PIPELINE_VARIANTS:
                pipeline[name].append(pipeline_rate(paths, name, args.size, 64, args.pipeline_images))
                print("  round {} pipeline {}: {:.1f} img/s  load {:.1f}".format(
                    index, name, pipeline[name][-1], os.getloadavg()[0]), file=sys.stderr, flush=True)
        steps = {name: [] for name in variants}
        if not args.skip_step:
            for index in range(args.rounds):
                for name in variants:
                    steps[name].append(step_rate(args, work_dir, "{}_{}".format(name, index), data_dir,
                                                 STEP_VARIANTS[name]))
                    print("  round {} step {}: {:.2f} img/s  load {:.1f}".format(
                        index, name, steps[name][-1], os.getloadavg()[0]), file=sys.stderr, flush=True)
    pipeline_medians = {name: statistics.median(values) for name, values in pipeline.items()}
    payload = dict(info, benchmark="extensions", size=args.size, batch=args.batch, steps=args.steps,
                   warmup=args.warmup, rounds=args.rounds,
                   pipeline_img_per_s=pipeline, pipeline_median=pipeline_medians,
                   pipeline_vs_none={name: value / pipeline_medians["none"]
                                     for name, value in pipeline_medians.items()})
    if not args.skip_step:
        step_medians = {name: statistics.median(values) for name, values in steps.items()}
        payload.update(step_img_per_s=steps, step_median=step_medians,
                       step_vs_original={name: value / step_medians["original"]
                                         for name, value in step_medians.items()})
    common.report(args.json, payload)


if __name__ == "__main__":
    main()
