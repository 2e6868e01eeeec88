"""Where a training step's time goes: a TF profiler trace (tf.profiler.experimental) of our train step, summarised
as the top op types by self time on the CPU executor threads.

    .venv/bin/python -m bench.profile_step [--batch 32] [--size 224] [--steps 2] [--top 15] [--logdir /tmp/rn50_prof]

The trace stays in --logdir for TensorBoard's profile plugin; the summary reads the XPlane protobuf directly
(no plugin needed). Percentages are of the summed op time (2 threads run ops concurrently, so the sum exceeds
the wall time).
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from utils.errors import doc_part

# Profiler events named like ops that are not ops (whole function/process spans).
NOT_OPS = {"Process"}


def op_type_times(xplane_path):
    """{op type: (total ps, count)} over the TF op events of the host plane."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as handle:
        space.ParseFromString(handle.read())
    totals = collections.defaultdict(lambda: [0, 0])
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        metadata = plane.event_metadata
        for line in plane.lines:
            if "TraceMe" in line.name or "python" in line.name.lower():
                continue
            for event in line.events:
                name = metadata[event.metadata_id].name
                if ":" not in name:  # TF op events are "op_name:OpType"
                    continue
                op_type = name.rsplit(":", 1)[1]
                # oneDNN's rewrites keep their own names (_MklEinsum, _MklNativeConv2D...): they count too.
                if not op_type or not op_type.lstrip("_")[:1].isupper() or " " in op_type or op_type in NOT_OPS:
                    continue
                totals[op_type][0] += event.duration_ps
                totals[op_type][1] += 1
    return totals


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--logdir", default="/tmp/rn50_prof")
    args = parser.parse_args(argv)
    import tensorflow as tf
    ours = common.OurModel(args.arch, args.batch, args.size, amp=args.amp)
    step = common.our_train_step(ours)
    images, labels = common.synthetic_batch(args.batch, args.size)
    common.fetch(step(images, labels))  # trace and warm up outside the profile
    tf.profiler.experimental.start(args.logdir)
    for _ in range(args.steps):
        common.fetch(step(images, labels))
    tf.profiler.experimental.stop()
    newest = max(glob.glob(os.path.join(args.logdir, "plugins/profile/*/*.xplane.pb")), key=os.path.getmtime)
    totals = op_type_times(newest)
    grand = sum(total for total, _ in totals.values()) or 1
    print(f"load {os.getloadavg()}  trace {newest}")
    print("| op type | share of op time | ms per step | calls per step |")
    print("|---|---|---|---|")
    for op_type, (total, count) in sorted(totals.items(), key=lambda item: -item[1][0])[:args.top]:
        print(f"| {op_type} | {100 * total / grand:.1f}% | {total / 1e9 / args.steps:.0f} | {count // args.steps} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
