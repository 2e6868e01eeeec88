"""The whole training step as users run it, fed by synthetic data and by TFRecords: is the input the bottleneck?

    .venv/bin/python -m bench.step_data_source [--size 224] [--batch 32] [--steps 8] [--warmup 2] [--rounds 2]

Each run is a separate `main.py --mode training_benchmark` process (synthetic data, or `--data_dir` with JPEG
TFRecords: decode, bbox crop, flip, resize), so the pipeline's threads compete with the step for the same cores,
as in training. Runs alternate (synthetic, TFRecord, synthetic, ...); the result is each source's median of
`train_throughput_total` (images / measured seconds, warm-up steps excluded) and the ratio TFRecord / synthetic.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import common  # noqa: E402
from utils.errors import doc_part  # noqa: E402


def read_throughput(log_path):
    """`train_throughput_total` of the run's closing summary in its DLLogger JSON log."""
    with open(log_path) as handle:
        for line in handle:
            if line.startswith("DLLL "):
                data = json.loads(line[5:]).get("data", {})
                if "train_throughput_total" in data:
                    return float(data["train_throughput_total"])
    raise RuntimeError("no train_throughput_total in {}".format(log_path))


def run_once(args, work_dir, tag, data_dir):
    results = os.path.join(work_dir, tag)
    os.makedirs(results, exist_ok=True)
    command = [sys.executable, os.path.join(ROOT, "main.py"), "--mode", "training_benchmark",
               "--arch", args.arch, "--batch_size", str(args.batch), "--iter_unit", "batch",
               "--num_iter", str(args.warmup + args.steps), "--warmup_steps", str(args.warmup),
               "--image_size", str(args.size), "--synthetic_data_size", str(args.size),
               "--results_dir", results, "--no_progress", "--display_every", "1000"]
    if data_dir:
        command += ["--data_dir", data_dir]
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise RuntimeError("main.py failed ({}):\n{}".format(" ".join(command), result.stdout[-3000:]))
    if ("Using Synthetic Data" in result.stdout) != (data_dir is None):  # the run read what it was meant to
        raise RuntimeError("run '{}' did not use the intended input:\n{}".format(tag, result.stdout[-3000:]))
    return read_throughput(os.path.join(results, "log.json"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=8, help="measured steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured steps per run (tracing)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per source")
    parser.add_argument("--records", type=int, default=800, help="JPEG records to generate (~256x300)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from bench.input_pipeline import make_records
    info = common.machine_info()
    with tempfile.TemporaryDirectory(prefix="rn50_step_data_") as work_dir:
        data_dir = os.path.join(work_dir, "data")
        os.makedirs(data_dir)
        make_records(data_dir, args.records)
        runs = {"synthetic": [], "tfrecord": []}
        for index in range(args.rounds):
            for tag, source in (("synthetic", None), ("tfrecord", data_dir)):
                runs[tag].append(run_once(args, work_dir, "{}_{}".format(tag, index), source))
                print("  round {} {}: {:.2f} img/s  load {:.1f}".format(
                    index, tag, runs[tag][-1], os.getloadavg()[0]), file=sys.stderr, flush=True)
    medians = {tag: statistics.median(values) for tag, values in runs.items()}
    payload = dict(info, benchmark="step_data_source", arch=args.arch, batch=args.batch, size=args.size,
                   steps=args.steps, warmup=args.warmup, runs=runs, median_img_per_s=medians,
                   tfrecord_vs_synthetic=medians["tfrecord"] / medians["synthetic"])
    common.report(args.json, payload)


if __name__ == "__main__":
    main()
