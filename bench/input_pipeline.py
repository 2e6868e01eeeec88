"""Input-pipeline throughput on the same TFRecords: our tf.data training/eval pipelines, DALI on the CPU, and a
PIL loader doing what a PyTorch DataLoader worker would (PIL decode, random-resized crop, resize, flip, float).

    .venv/bin/python -m bench.input_pipeline [--records 2000] [--size 224] [--batch 64] [--images 1536]
    .venv/bin/python -m bench.input_pipeline --autotune_rounds 6 [--size 40]

Prints images/s in total and per core (total / cores the pipeline can use; the PIL loader is one process).
`--autotune_rounds N` instead times our training and evaluation pipelines as they are (tf.data's autotuning off)
against the same with it on, alternating in one process for N rounds, and prints the medians.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import random
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from utils.errors import doc_part  # noqa: E402


def make_records(directory, num_records, shards=8, seed=0):
    """~256x(256..340) JPEGs (quality 90) in TF-slim records; reused when already there."""
    from tests._data_helpers import encode_image, make_example, random_image
    import tensorflow as tf

    paths = [os.path.join(directory, "train-%05d-of-%05d" % (i, shards)) for i in range(shards)]
    if all(os.path.exists(p) for p in paths):
        return paths
    rng = np.random.default_rng(seed)
    per_shard = math.ceil(num_records / shards)
    for shard, path in enumerate(paths):
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(per_shard):
                height, width = 256, int(rng.integers(256, 341))
                if rng.random() < 0.5:
                    height, width = width, height
                jpeg = encode_image(random_image(rng, height, width), quality=90)
                writer.write(make_example(jpeg, 1 + (shard * per_shard + i) % 1000, height, width))
    return paths


def time_dataset(dataset, batch, num_images, warmup_batches=3):
    iterator = iter(dataset)
    for _ in range(warmup_batches):
        next(iterator)
    batches = max(1, num_images // batch)
    start = time.perf_counter()
    for _ in range(batches):
        images, _ = next(iterator)
    _ = images.numpy()
    return batches * batch / (time.perf_counter() - start)


def pil_loader(paths, size, num_images, seed=0):
    """One worker of a torchvision-style loader: Example parse, PIL decode, RandomResizedCrop(0.08-1 area,
    3/4-4/3 aspect, 10 attempts, centre fallback), bilinear resize, flip, HWC float32."""
    import tensorflow as tf
    from PIL import Image
    import io

    rnd = random.Random(seed)

    def crop_box(w, h):
        area = w * h
        for _ in range(10):
            target = area * rnd.uniform(0.08, 1.0)
            aspect = math.exp(rnd.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
            if 0 < cw <= w and 0 < ch <= h:
                x, y = rnd.randint(0, w - cw), rnd.randint(0, h - ch)
                return x, y, x + cw, y + ch
        side = min(w, h)
        return (w - side) // 2, (h - side) // 2, (w + side) // 2, (h + side) // 2

    def records():
        while True:
            for path in paths:
                for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
                    yield record

    stream = records()
    for _ in range(32):  # warmup
        next(stream)
    start = time.perf_counter()
    for _ in range(num_images):
        example = tf.train.Example.FromString(next(stream))
        data = example.features.feature["image/encoded"].bytes_list.value[0]
        image = Image.open(io.BytesIO(data)).convert("RGB")
        image = image.resize((size, size), Image.BILINEAR, box=crop_box(*image.size))
        if rnd.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        _ = np.asarray(image, dtype=np.float32)
    return num_images / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--images", type=int, default=1536, help="images timed per pipeline")
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(), "bench_input_pipeline"))
    parser.add_argument("--skip_dali", action="store_true")
    parser.add_argument("--autotune_rounds", type=int, default=0,
                        help="compare our pipelines with tf.data's autotuning off (as they are) and on, N rounds")
    args = parser.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    from utils import data_utils

    cores = len(os.sched_getaffinity(0))
    os.makedirs(args.data_dir, exist_ok=True)
    paths = make_records(args.data_dir, args.records)
    data_utils.check_tfrecord_files(paths)
    rows = []

    def add(name, images_per_s, cores_used):
        rows.append((name, images_per_s, images_per_s / cores_used, cores_used))
        print("  %-40s %8.1f img/s" % (name, images_per_s), file=sys.stderr, flush=True)

    size, batch = args.size, args.batch
    if args.autotune_rounds:
        return autotune_ab(paths, size, batch, args.images, args.autotune_rounds)
    add("tf.data training (ours)", time_dataset(data_utils.get_tfrecords_input_fn(
        paths, batch, size, size, training=True, deterministic=True, seed=0), batch, args.images), cores)
    add("tf.data evaluation (ours)", time_dataset(data_utils.get_tfrecords_input_fn(
        paths, batch, size, size, training=False), batch, args.images), cores)
    if not args.skip_dali:
        from utils import dali_utils
        dali_utils.require_dali()
        idx = []
        for path in paths:
            idx.append(path + ".idx")
            if not os.path.exists(idx[-1]):
                dali_utils.make_dali_index(path, idx[-1])
        for training in (True, False):
            name = "DALI CPU %s" % ("training" if training else "evaluation")
            dataset = dali_utils.get_dali_input_fn(paths, idx, batch, size, size, training=training,
                                                   num_threads=cores, deterministic=True, seed=0)
            add(name, time_dataset(dataset, batch, args.images), cores)
    add("PIL loader, 1 worker (torchvision-like)", pil_loader(paths, size, min(args.images, 768)), 1)

    print("\nInput pipeline throughput, %dx%d output, batch %d, %d records of ~256x300 JPEG, %s, %d vCPU" % (
        size, size, batch, args.records, datetime.date.today().isoformat(), cores))
    print("| pipeline | images/s | images/s per core | cores used |")
    print("|---|---:|---:|---:|")
    for name, total, per_core, used in rows:
        print("| %s | %.1f | %.1f | %d |" % (name, total, per_core, used))


def autotune_ab(paths, size, batch, num_images, rounds):
    """Our pipelines as built (autotuning off) against the same with tf.data's autotuning turned back on."""
    import statistics
    import tensorflow as tf
    from utils import data_utils

    def autotuned(dataset):
        options = tf.data.Options()
        options.autotune.enabled = True
        return dataset.with_options(options)

    builds = {
        "training": lambda: data_utils.get_tfrecords_input_fn(paths, batch, size, size, training=True,
                                                              deterministic=True, seed=0),
        "evaluation": lambda: data_utils.get_tfrecords_input_fn(paths, batch, size, size, training=False)}
    times = {}
    for index in range(rounds):
        for name, build in builds.items():
            for autotune in ((False, True) if index % 2 == 0 else (True, False)):
                dataset = autotuned(build()) if autotune else build()
                times.setdefault((name, autotune), []).append(time_dataset(dataset, batch, num_images))
    print("\nOur pipelines, tf.data autotuning off (as built) and on, %dx%d output, batch %d, %d rounds, %s" % (
        size, size, batch, rounds, datetime.date.today().isoformat()))
    print("| pipeline | off: img/s (median) | on: img/s (median) | off / on |")
    print("|---|---:|---:|---:|")
    for name in builds:
        off, on = statistics.median(times[(name, False)]), statistics.median(times[(name, True)])
        print("| %s | %.1f | %.1f | %.2f |" % (name, off, on, off / on))


if __name__ == "__main__":
    main()
