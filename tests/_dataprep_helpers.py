"""Helpers for tests/test_dataprep.py: synthetic image trees and an independent TFRecord reader.

Nothing here uses dataprep's own reading code (dali_index framing parser) or utils/data_utils.py, so the tests
check the writer against TensorFlow's reader and a separate framing parser.
"""
from __future__ import annotations

import glob
import io
import os
import struct

import numpy as np
from PIL import Image



def feature_spec():
    import tensorflow as tf

    fixed = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/colorspace": tf.io.FixedLenFeature([], tf.string),
        "image/channels": tf.io.FixedLenFeature([], tf.int64),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/synset": tf.io.FixedLenFeature([], tf.string),
        "image/class/text": tf.io.FixedLenFeature([], tf.string),
    }
    var = {f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in ("xmin", "ymin", "xmax", "ymax")}
    var["image/object/bbox/label"] = tf.io.VarLenFeature(tf.int64)
    return {**fixed, **var}


def shard_paths(directory: str, split: str) -> list[str]:
    return sorted(glob.glob(os.path.join(directory, f"{split}-*")))


def read_records(paths) -> list[dict]:
    """Parses every record of `paths` (in order) with tf.data + tf.io.parse_single_example into python values."""
    import tensorflow as tf

    spec = feature_spec()
    out = []
    for serialized in tf.data.TFRecordDataset(list(paths)):
        parsed = tf.io.parse_single_example(serialized, spec)
        record = {}
        for key, value in parsed.items():
            if isinstance(value, tf.SparseTensor):
                record[key] = tf.sparse.to_dense(value).numpy().tolist()
            else:
                value = value.numpy()
                record[key] = value.decode("utf-8") if isinstance(value, bytes) and key != "image/encoded" else value
        out.append(record)
    return out


def read_split(directory: str, split: str) -> list[dict]:
    return read_records(shard_paths(directory, split))


def decode(jpeg: bytes, channels: int = 0) -> np.ndarray:
    """TF's own decoder, as the trainer uses it; channels=0 keeps the channel count stored in the file."""
    import tensorflow as tf

    return tf.io.decode_jpeg(jpeg, channels=channels).numpy()


def parse_framing(path: str) -> list[tuple[int, int]]:
    """(offset, frame size) of each record: uint64 length | uint32 crc | data | uint32 crc."""
    frames = []
    with open(path, "rb") as f:
        blob = f.read()
    offset = 0
    while offset < len(blob):
        (length,) = struct.unpack_from("<Q", blob, offset)
        size = 8 + 4 + length + 4
        assert offset + size <= len(blob), "truncated"
        frames.append((offset, size))
        offset += size
    return frames


def noise_image(mode: str, size=(40, 30), seed=0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "L": 1, "CMYK": 4, "RGBA": 4}[mode]
    # Smooth gradients + a little noise: JPEG-friendly, so re-encoding error stays small and measurable.
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    planes = [((xx * (3 + c) + yy * (5 - c)) % 256) for c in range(channels)]
    array = np.stack(planes, -1).astype(np.int16) + rng.integers(-3, 4, (h, w, channels))
    array = np.clip(array, 0, 255).astype(np.uint8)
    if channels == 1:
        array = array[..., 0]
    return Image.fromarray(array) if mode != "CMYK" else Image.frombytes("CMYK", size, array.tobytes())


def save(image: Image.Image, path: str, fmt: str, **kwargs) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **kwargs)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
    return path


def make_folder_tree(root: str) -> dict:
    """train/{zebra,apple,mango} and val/{apple,mango,zebra} with the real-world cases of the brief.

    Returns {"train": {filename: (class, kind)}, "validation": {...}}; kind in rgb/grey/cmyk/png/empty/text.
    """
    train, val = os.path.join(root, "train"), os.path.join(root, "val")
    layout = {
        "train": {
            "rgb_a.JPEG": ("apple", "rgb"), "grey_a.JPEG": ("apple", "grey"),
            "cmyk_m.JPEG": ("mango", "cmyk"), "png_m.JPEG": ("mango", "png"), "rgb_m.jpg": ("mango", "rgb"),
            "empty_z.JPEG": ("zebra", "empty"), "notes_z.jpg": ("zebra", "text"), "rgb_z.JPEG": ("zebra", "rgb"),
            "rgb_z2.JPEG": ("zebra", "rgb"),
        },
        "validation": {"v_a.JPEG": ("apple", "rgb"), "v_m.JPEG": ("mango", "grey"), "v_z.JPEG": ("zebra", "rgb")},
    }
    for split, base in (("train", train), ("validation", val)):
        for seed, (name, (cls, kind)) in enumerate(sorted(layout[split].items())):
            write_kind(os.path.join(base, cls, name), kind, seed)
    return layout


def write_kind(path: str, kind: str, seed: int = 0) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "rgb":
        save(noise_image("RGB", seed=seed), path, "JPEG", quality=90)
    elif kind == "grey":
        save(noise_image("L", size=(24, 36), seed=seed), path, "JPEG", quality=90)
    elif kind == "cmyk":
        save(noise_image("CMYK", size=(33, 21), seed=seed), path, "JPEG", quality=90)
    elif kind == "png":
        save(noise_image("RGB", size=(20, 50), seed=seed), path, "PNG")
    elif kind == "empty":
        open(path, "wb").close()
    elif kind == "text":
        with open(path, "w") as f:
            f.write("this is not an image\n")
    else:
        raise ValueError(kind)


# Colour photographs shipped inside scikit-image's wheel (skimage/data); read as files, skimage is not imported.
SKIMAGE_PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "rocket.jpg",
                  "hubble_deep_field.jpg", "retina.jpg", "color.png", "ihc.png")
# Three Imagenette classes: tench, English springer, cassette player.
IMAGENETTE_WNIDS = ("n01440764", "n02102040", "n02979186")


def skimage_photo_dir() -> str:
    """Directory of scikit-image's shipped sample photos (found via the installed distribution's files)."""
    import importlib.util

    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("scikit-image is not installed (requirements-dev.txt)")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def make_imagenet_subset(root: str, train_per_class: int, val_per_class: int, side: int = 64,
                         wnids=IMAGENETTE_WNIDS) -> dict[str, int]:
    """`train/<wnid>/*.JPEG` and `validation/<wnid>/*.JPEG` of real photos: random square crops of the shipped
    photos (class i uses photos i, i+3, ...), resized to side x side. Returns the image count of each split."""
    rng = np.random.default_rng(0)
    photos = [Image.open(os.path.join(skimage_photo_dir(), name)).convert("RGB") for name in SKIMAGE_PHOTOS]
    counts = {}
    for split, per_class in (("train", train_per_class), ("validation", val_per_class)):
        for class_index, wnid in enumerate(wnids):
            sources = photos[class_index::len(wnids)]
            for i in range(per_class):
                photo = sources[i % len(sources)]
                crop = int(min(photo.size) * rng.uniform(0.4, 0.9))
                x = int(rng.integers(0, photo.size[0] - crop + 1))
                y = int(rng.integers(0, photo.size[1] - crop + 1))
                image = photo.crop((x, y, x + crop, y + crop)).resize((side, side), Image.BILINEAR)
                save(image, os.path.join(root, split, wnid, f"{wnid}_{split}_{i:03d}.JPEG"), "JPEG", quality=90)
        counts[split] = per_class * len(wnids)
    return counts
