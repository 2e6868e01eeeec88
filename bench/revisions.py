"""The same benchmark at two git revisions, or in two environments, in processes that alternate A B A B ... on this
machine, so a drift in the machine's speed falls on both: the before/after ratio of a change.

    .venv/bin/python -m bench.revisions --base 06864d8 [--head HEAD] [--pairs 4] [--json FILE] -- \
        bench.train_step --variants ours --size 40 --batch 32 --rounds 6 --no_ceiling
    .venv/bin/python -m bench.revisions --base HEAD --head_env TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 \
        --control onnx_b1 -- bench.inference --variants ours,frozen,onnx --batches 1
    .venv/bin/python -m bench.revisions --base 7b04848 --pairs 4 -- main.py --mode training_benchmark \
        --synthetic_data_size 40 --batch_size 32 --num_classes 10 --num_iter 100 --iter_unit batch

Each revision is checked out once into a temporary `git worktree` (the current venv runs both); each process runs
the benchmark module given after `--`, which must print one JSON line with `results` (bench/train_step.py,
bench/inference.py and bench/model_build.py do). `--head_env KEY=VALUE` (repeatable) sets a variable in the head's
processes only: with `--head` left at the base's revision that measures a setting that must be made before
TensorFlow starts. The per-pair ratio is head / base of `s_per_step` (or `ms_per_batch`, or `seconds`) per variant;
with `--control VARIANT` every time is first divided by that variant's time in the same process (a variant the
change cannot touch, e.g. ONNX Runtime, so the process-to-process drift cancels). The report gives every process's
medians and the median of the pair ratios.
`-- main.py ARGS` times the training as users run it instead, at any revision (one whose bench/ modules differ or
are missing too): each process is that tree's `main.py ARGS --results_dir <a fresh directory>`, and its time per
image is 1 / the `train_throughput_total` of its log (warm-up steps excluded), reported as the variant `main.py`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from utils.errors import doc_part

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIME_KEYS = ("s_per_step", "ms_per_batch", "seconds", "s_per_image")
MAIN_PY = "main.py"


def _git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout.strip()


def _run(tree, module_args, env=None):
    """One benchmark process in `tree` with `env` added to this one's environment; {variant: seconds} from its JSON
    line (or, for `main.py ARGS`, its log's throughput)."""
    if module_args[0] == MAIN_PY:
        return _run_main_py(tree, module_args, env)
    command = [sys.executable, "-m", *module_args]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise SystemExit(f"benchmark failed in {tree} (exit {done.returncode}): {last}")
    payload = json.loads(done.stdout.strip().splitlines()[-1])
    times = {}
    for variant, row in payload["results"].items():
        key = next(key for key in TIME_KEYS if key in row)
        times[variant] = row[key]
    return times


def _run_main_py(tree, args, env=None):
    """One `main.py` training in `tree`: {"main.py": {"s_per_image": 1 / its log's train_throughput_total}}."""
    from bench.step_data_source import read_throughput
    results = tempfile.mkdtemp(prefix="bench_revisions_run_")
    try:
        command = [sys.executable, *args, "--results_dir", results]
        done = subprocess.run(command, cwd=tree, capture_output=True, text=True, env={**os.environ, **(env or {})})
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            raise SystemExit(f"main.py failed in {tree} (exit {done.returncode}): {last}")
        return {MAIN_PY: 1.0 / read_throughput(os.path.join(results, "log.json"))}
    finally:
        shutil.rmtree(results, ignore_errors=True)


def _assignment(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _relative(times, control):
    """The times of one process divided by its control variant's time."""
    if control not in times:
        raise SystemExit(f"--control {control}: the benchmark reported no such variant (it has {sorted(times)})")
    return {variant: seconds / times[control] for variant, seconds in times.items()}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m bench.revisions --base REV [--head REV] -- MODULE [ARGS...]")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--base", required=True, help="the revision before the change")
    parser.add_argument("--head", default="HEAD", help="the revision after it (default HEAD)")
    parser.add_argument("--pairs", type=int, default=4, help="base/head process pairs, alternating")
    parser.add_argument("--head_env", type=_assignment, action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for the head's processes only (repeatable)")
    parser.add_argument("--control", default=None, metavar="VARIANT",
                        help="divide every time by this variant's time in the same process before the ratios")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv[:split])
    module_args = argv[split + 1:]
    sys.path.insert(0, ROOT)
    from bench import common

    revisions = {"base": _git("rev-parse", args.base), "head": _git("rev-parse", args.head)}
    head_env = dict(args.head_env)
    with tempfile.TemporaryDirectory(prefix="bench_revisions_") as scratch:
        trees = {}
        for label, commit in revisions.items():
            trees[label] = os.path.join(scratch, label)
            _git("worktree", "add", "--detach", trees[label], commit)
        try:
            runs = {"base": [], "head": []}
            for index in range(args.pairs):
                order = ("base", "head") if index % 2 == 0 else ("head", "base")  # neither always goes first
                for label in order:
                    env = head_env if label == "head" and head_env else None
                    runs[label].append(_run(trees[label], module_args, env))
                    print(f"pair {index} {label}: {runs[label][-1]}  load {os.getloadavg()[0]:.1f}", file=sys.stderr,
                          flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=False)
    compared = runs
    if args.control:
        compared = {label: [_relative(run, args.control) for run in runs[label]] for label in runs}
    results = {}
    for variant in runs["base"][0]:
        base = [run[variant] for run in runs["base"]]
        head = [run[variant] for run in runs["head"]]
        ratios = [b / h for b, h in zip((run[variant] for run in compared["base"]),
                                        (run[variant] for run in compared["head"]))]
        results[variant] = {"base": base, "head": head, "base_median": statistics.median(base),
                            "head_median": statistics.median(head), "pair_speedups": [round(r, 3) for r in ratios],
                            "speedup_median_of_pairs": round(statistics.median(ratios), 3)}
    common.report(args.json, {"benchmark": "revisions", "base": revisions["base"], "head": revisions["head"],
                              "head_env": head_env, "control": args.control, "command": module_args,
                              "pairs": args.pairs, "machine": common.machine_info(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
