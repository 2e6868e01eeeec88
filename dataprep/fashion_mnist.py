"""Fashion-MNIST (IDX files) -> RGB JPEG TF-slim TFRecord shards, labels.txt and sample images for `predict`.

    python -m dataprep.fashion_mnist --out DIR [--source DIR] [--image_size 32] [--train_count N] [--val_count M]

By default the subset shipped in `datasets/fashion_mnist/` is read (first 9,000 training and first 2,000 test
images); `--source /usr/share/datasets/fashion-mnist` (Debian package `dataset-fashion-mnist`) reads the full
60,000 / 10,000. Training images come from the `train-*` IDX files, validation images from the `t10k-*` files,
taken in file order (the first N / M). Each 28x28 greyscale image is upscaled with bilinear interpolation to
`--image_size`, replicated to 3 channels and JPEG-encoded; records go through the same writer as build_tfrecords
(shuffled with seed 12345, sharded, labels 1..10).
"""
from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import struct
import sys

import numpy as np

from dataprep import records
from dataprep.build_tfrecords import choose_shards, shuffled
from utils.errors import ArgumentParser, UserError, command, doc_part, on_interrupt
from utils.output_paths import check_output_dir, replaced_file
from utils.run_lock import RunLock

CLASS_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED_SOURCE = os.path.join(REPO_ROOT, "datasets", "fashion_mnist")
DEBIAN_SOURCE = "/usr/share/datasets/fashion-mnist"
SOURCE_FILES = {  # split -> (images, labels), as named by the dataset authors
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "validation": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
SOURCE_PREFIX = {"train": "train", "validation": "test"}
JPEG_QUALITY = 95
NUM_SAMPLES = 8
_IDX_DTYPES = {0x08: np.uint8}


def class_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _open_idx(directory: str, stem: str):
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path, (gzip.open(path, "rb") if name.endswith(".gz") else open(path, "rb"))
    raise UserError(f"Fashion-MNIST file {stem}(.gz) not found in {directory}")


def read_idx(directory: str, stem: str, count: int | None = None) -> np.ndarray:
    """Reads the first `count` entries (all if None) of an IDX file (`<stem>.gz` or `<stem>`)."""
    path, f = _open_idx(directory, stem)
    with f:
        try:
            header = f.read(4)
            if len(header) != 4 or header[0] != 0 or header[1] != 0 or header[2] not in _IDX_DTYPES:
                raise UserError(f"{path} is not an unsigned-byte IDX file")
            ndim = header[3]
            dims = struct.unpack(f">{ndim}I", f.read(4 * ndim))
            n = dims[0] if count is None else count
            if n > dims[0]:
                raise UserError(f"{path} holds {dims[0]} entries, {n} requested")
            item_size = int(np.prod(dims[1:], dtype=np.int64))
            data = f.read(n * item_size)
        except (OSError, EOFError, struct.error) as exc:
            raise UserError(f"cannot read {path}: {exc}") from None
    if len(data) != n * item_size:
        raise UserError(f"{path} is truncated")
    return np.frombuffer(data, dtype=np.uint8).reshape((n,) + tuple(dims[1:]))


def idx_length(directory: str, stem: str) -> int:
    path, f = _open_idx(directory, stem)
    with f:
        header = f.read(8)
    if len(header) != 8:
        raise UserError(f"{path} is truncated")
    return struct.unpack(">I", header[4:8])[0]


def to_jpeg(image: np.ndarray, image_size: int) -> bytes:
    """28x28 uint8 greyscale -> image_size x image_size RGB JPEG (bilinear upscale, channel replication)."""
    from PIL import Image

    grey = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8))  # 2-D uint8 -> mode "L"
    if grey.size != (image_size, image_size):
        grey = grey.resize((image_size, image_size), Image.BILINEAR)
    out = io.BytesIO()
    grey.convert("RGB").save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def load_split(source: str, split: str, count: int | None, image_size: int) -> list[records.ImageItem]:
    images_stem, labels_stem = SOURCE_FILES[split]
    available = idx_length(source, labels_stem)
    if count is not None and not 1 <= count <= available:
        raise UserError(f"--{'train' if split == 'train' else 'val'}_count must be in 1..{available} for {source}")
    labels = read_idx(source, labels_stem, count)
    images = read_idx(source, images_stem, len(labels))
    if images.shape[1:] != (28, 28):
        raise UserError(f"{source}/{images_stem}: expected 28x28 images, got {images.shape[1:]}")
    if labels.max(initial=0) >= len(CLASS_NAMES):
        raise UserError(f"{source}/{labels_stem}: label out of range 0..9")
    items = []
    for index, (image, raw_label) in enumerate(zip(images, labels)):
        name = CLASS_NAMES[raw_label]
        items.append(records.ImageItem(filename=f"{SOURCE_PREFIX[split]}_{index:05d}.jpg", label=int(raw_label) + 1,
                                       synset=class_slug(name), text=name, data=to_jpeg(image, image_size)))
    return items


def write_samples(items: list[records.ImageItem], samples_dir: str, count: int = NUM_SAMPLES) -> list[str]:
    """The first validation image of each of the first `count` classes met in file order, named by class."""
    os.makedirs(samples_dir, exist_ok=True)
    for name in os.listdir(samples_dir):  # stale samples of an earlier run would confuse `predict` on the dir
        if name.endswith(".jpg"):
            os.remove(os.path.join(samples_dir, name))
    written, seen = [], set()
    for item in items:
        if item.label in seen:
            continue
        seen.add(item.label)
        path = os.path.join(samples_dir, f"{item.synset}_{os.path.splitext(item.filename)[0]}.jpg")
        with replaced_file(path, "wb") as f:
            f.write(item.data)
        written.append(path)
        if len(written) == count:
            break
    return written


def convert(out: str, source: str = SHIPPED_SOURCE, image_size: int = 32, train_count: int | None = None,
            val_count: int | None = None, train_shards: int | None = None, validation_shards: int | None = None,
            num_workers: int = 1, resume: bool = False, overwrite: bool = False, progress: bool = False) -> dict:
    """Writes shards, labels.txt and samples/ into `out`; returns {split: [ShardResult]}."""
    if not os.path.isdir(source):
        raise UserError(f"Fashion-MNIST source directory not found: {source}")
    if not 8 <= image_size <= 1024:
        raise UserError(f"--image_size must be in 8..1024 (got {image_size})")
    # The run owns `out` from its first check of what is there to its last write: a second dataprep into it is
    # refused, naming this one, instead of mixing its shards with ours (utils/run_lock.py).
    with RunLock(out, flag="--out"):
        return _convert(out, source, image_size, train_count, val_count, train_shards, validation_shards,
                        num_workers, resume, overwrite, progress)


def _convert(out, source, image_size, train_count, val_count, train_shards, validation_shards, num_workers, resume,
             overwrite, progress) -> dict:
    splits = {"train": load_split(source, "train", train_count, image_size),
              "validation": load_split(source, "validation", val_count, image_size)}
    for split in splits:  # refuse before writing anything
        existing = records.existing_split_files(out, split)
        if existing and not (resume or overwrite):
            raise UserError(f"{out} already holds {split} output ({existing[0]}); pass --resume to complete an "
                            "interrupted run or --overwrite to replace it")
    shards = {"train": train_shards, "validation": validation_shards}
    results = {}
    # Also a stop between two splits, and stdout's failure at one of the prints (`| head -1`): the shards are kept.
    with on_interrupt(records.INTERRUPTED_KEPT, closed_stdout=True):
        for split, items in splits.items():
            counts = np.bincount([item.label for item in items], minlength=len(CLASS_NAMES) + 1)[1:]
            num_shards = choose_shards(split, len(items), shards[split], imagenet=False)
            print(f"{split}: {len(items)} images {image_size}x{image_size} -> {num_shards} shard(s); "
                  f"per label 1..10: {' '.join(str(c) for c in counts)}")
            results[split] = records.write_split(shuffled(items), out, split, num_shards, num_workers=num_workers,
                                                 resume=resume, overwrite=overwrite, progress=progress,
                                                 num_classes=len(CLASS_NAMES))
        records.write_labels_file(out, CLASS_NAMES)
        samples = write_samples(splits["validation"], os.path.join(out, "samples"))
        print(f"labels.txt and {len(samples)} sample images (samples/) written to {out}")
        records.summarize(results)
    return results


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(prog="python -m dataprep.fashion_mnist", description=doc_part(__doc__),
                            epilog=doc_part(__doc__, 2, rest=True),
                            formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--out", required=True, help="output directory (TFRecords, labels.txt, samples/)")
    parser.add_argument("--source", default=SHIPPED_SOURCE,
                        help=f"directory with the four IDX(.gz) files (default: the shipped subset; full dataset: "
                             f"{DEBIAN_SOURCE})")
    parser.add_argument("--image_size", type=int, default=32, help="output height = width in pixels (default: 32)")
    parser.add_argument("--train_count", type=int, default=None,
                        help="use the first N training images (default: all in --source)")
    parser.add_argument("--val_count", type=int, default=None,
                        help="use the first M test images as validation (default: all in --source)")
    parser.add_argument("--train_shards", type=int, default=None, help="default: ~1024 images per shard, >= 2")
    parser.add_argument("--validation_shards", type=int, default=None, help="default: ~1024 images per shard, >= 2")
    parser.add_argument("--num_workers", type=int, default=1,
                        help="parallel writer processes (default: 1; encoding happens before, in this process)")
    parser.add_argument("--resume", action="store_true", help="complete an interrupted run")
    parser.add_argument("--overwrite", action="store_true", help="replace existing shards")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar (also off when not a TTY)")
    return parser.parse_args(argv)


@command
def main(argv=None):
    args = parse_args(argv)
    check_output_dir("--out", args.out)
    convert(args.out, args.source, args.image_size, args.train_count, args.val_count, args.train_shards,
            args.validation_shards, args.num_workers, args.resume, args.overwrite,
            records.progress_enabled(args.no_progress))


if __name__ == "__main__":
    sys.exit(main())
