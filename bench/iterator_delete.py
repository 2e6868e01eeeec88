"""How long deleting a tf.data iterator takes after it has been read for a while, with tf.data's autotuning on
(the default) and off.

    .venv/bin/python -m bench.iterator_delete [--seconds 12] [--repeats 6] [--replicas 1|2] [--json out.json]

Each repeat builds a fresh pipeline shaped like ours (parallel map, batch, prefetch AUTOTUNE), reads it for
`--seconds` (a short sleep between batches, as a training step would leave), then times `del iterator`. The
variants alternate (autotune, no_autotune, autotune, ...). `--replicas 2` reads it as a MirroredStrategy
distributed dataset over two logical CPU devices, as the mirrored engine does. The deletion waits for the iterator's
threads, among them autotuning's model thread; the time it takes is what a run loses at the end of training or
evaluation.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from utils.errors import doc_part  # noqa: E402
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

VARIANTS = ("autotune", "no_autotune")


def delete_seconds(tf, variant, seconds, strategy):
    dataset = tf.data.Dataset.range(10 ** 9).map(lambda x: tf.cast(x, tf.float32) * 2.0,
                                                  num_parallel_calls=tf.data.AUTOTUNE).batch(4)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    if variant == "no_autotune":
        options = tf.data.Options()
        options.autotune.enabled = False
        dataset = dataset.with_options(options)
    if strategy is not None:
        dataset = strategy.distribute_datasets_from_function(lambda _context: dataset)
    iterator = iter(dataset)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        batch = next(iterator)
        if strategy is not None:
            strategy.experimental_local_results(batch)
        time.sleep(0.05)
    start = time.perf_counter()
    del iterator
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--seconds", type=float, default=12.0, help="how long each iterator is read")
    parser.add_argument("--repeats", type=int, default=6, help="deletions per variant")
    parser.add_argument("--replicas", type=int, choices=(1, 2), default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import tensorflow as tf
    from bench import common
    strategy = None
    if args.replicas == 2:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    info = common.machine_info()
    runs = {name: [] for name in VARIANTS}
    for index in range(args.repeats):
        for name in VARIANTS:
            runs[name].append(delete_seconds(tf, name, args.seconds, strategy))
            print("  repeat {} {}: delete {:.2f} s".format(index, name, runs[name][-1]), file=sys.stderr, flush=True)
    payload = dict(info, benchmark="iterator_delete", seconds=args.seconds, repeats=args.repeats,
                   replicas=args.replicas, delete_seconds=runs,
                   median_seconds={name: statistics.median(values) for name, values in runs.items()},
                   max_seconds={name: max(values) for name, values in runs.items()},
                   over_one_second={name: sum(value > 1.0 for value in values) for name, values in runs.items()})
    common.report(args.json, payload)


if __name__ == "__main__":
    main()
