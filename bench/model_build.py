"""How long `model.resnet.build_model` takes: the part of every command's start that builds the Keras model.

    .venv/bin/python -m bench.model_build [--archs resnet50,resnext101-32x4d,se-resnext101-32x4d]
        [--purposes train,inference] [--size 224] [--repeats 2] [--json FILE]

Each (architecture, purpose) is built `--repeats` times in this process, one after another, and the median is
reported in seconds (`seconds` in each result row, which `bench.revisions` compares across two revisions). "train"
is the CPU training build main.py's training modes make, "inference" the one evaluate, predict and the SavedModel
export make (model/kernels.choose_kernels). The variables made are counted, so that two revisions that build
different models do not pass for a faster build.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from utils.errors import doc_part  # noqa: E402


def build_seconds(arch, purpose, size, repeats, log=print):
    """(median seconds, variables) of `repeats` builds of `arch` for `purpose` at `size` px."""
    import keras
    from model.resnet import build_model
    times, count = [], None
    for attempt in range(repeats):
        keras.backend.clear_session()
        start = time.perf_counter()
        model = build_model(arch, num_classes=1001, image_size=size, seed=attempt, purpose=purpose)
        times.append(time.perf_counter() - start)
        count = len(model.variables)
        log(f"  {arch} {purpose}: {times[-1]:.2f} s ({count} variables)")
    return statistics.median(times), count


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--archs", default="resnet50,resnext101-32x4d,se-resnext101-32x4d")
    parser.add_argument("--purposes", default="train,inference")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    machine = common.machine_info()
    results = {}
    for arch in args.archs.split(","):
        for purpose in args.purposes.split(","):
            seconds, count = build_seconds(arch, purpose, args.size, args.repeats,
                                           log=lambda text: print(text, file=sys.stderr))
            results[f"{arch}_{purpose}"] = {"seconds": round(seconds, 3), "variables": count}
    payload = {"benchmark": "model_build", "size": args.size, "repeats": args.repeats, "machine": machine,
               "results": results}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(payload, handle, indent=1)
    print(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
