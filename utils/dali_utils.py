"""NVIDIA DALI input pipelines (docs/ORIGINAL.md#dali-pipeline), an optional dependency:
`pip install -r requirements-dali.txt`.

Same element contract as `data_utils.get_tfrecords_input_fn`, except that images come out normalised with
CHANNEL_MEANS / CHANNEL_STDS (the model then skips its own normalisation). With a GPU the decode is "mixed"
(nvJPEG) and resize/normalise run on the GPU as in the original; without one the whole pipeline runs on the CPU.
"""
from __future__ import annotations

import os
import re

from utils import defaults
from utils.data_utils import as_written, class_index, label_in_range_check, without_autotuning
from utils.errors import UserError
from utils.image_processing import (AREA_RANGE, ASPECT_RATIO_RANGE, CHANNEL_MEANS, CHANNEL_STDS,
                                    EVAL_RESIZE_MAX_SIDE, MAX_ATTEMPTS, eval_resize_min)

INSTALL_HINT = ("DALI is not installed: run `INSTALL_DALI=1 bash scripts/install.sh` "
                "(or `pip install -r requirements-dali.txt`, see the comment in that file)")

INITIAL_FILL = 10000


def require_dali():
    """Imports DALI and its TF plugin, or raises UserError with a one-line install hint."""
    try:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.plugin.tf  # noqa: F401
    except ImportError as e:
        raise UserError(f"{INSTALL_HINT} ({e})") from e


def make_dali_index(tfrecord_path, idx_path) -> int:
    """Writes DALI's index of one TFRecord file (`<offset> <size>` per record, like `tfrecord2idx`) in pure
    Python; returns the number of records. Raises UserError on a truncated or non-TFRecord file."""
    from utils.tfrecord_framing import write_dali_index

    return write_dali_index(os.fspath(tfrecord_path), os.fspath(idx_path))


_DECODE_FAILURE = re.compile(r"Error in \w+ operator `nvidia\.dali\.fn\.decoders\.[\w.]+`.*?encountered:\s*(.*?)\n",
                             re.DOTALL)


def decode_error(error):
    """The UserError of DALI's failure to decode an image (DALI stops there; it cannot skip a record), or None for
    any other error."""
    match = _DECODE_FAILURE.search(str(getattr(error, "message", error)))
    if match is None:
        return None
    return UserError("DALI cannot decode an image of the input ({}); unlike the tf.data pipeline it cannot skip a "
                     "corrupt record: leave out --dali, or find it with python -m dataprep.verify_records --decode "
                     "<data_dir> and write its shard again with python -m dataprep.build_tfrecords".format(
                         match.group(1).strip() or "no reason given"))


def _eval_resize_window(image_shape, resize_min, height, width):
    """(elongated, roi_start, roi_end) DALI nodes for one evaluation image of `image_shape` ([H, W, C]).

    elongated: the `fn.resize(resize_shorter=resize_min)` output's longer side would exceed EVAL_RESIZE_MAX_SIDE (a
    16000x1 image at 224 px would be resized to 4,096,000x256, 3.1 GB of uint8). roi_start / roi_end: the source
    region (float, [y, x]) that the central (height, width) crop of that resize shows, so that
    `fn.resize(roi_start, roi_end, size=(height, width))` computes those output pixels only. DALI's own geometry,
    found by comparing with the full resize and crop (tests/test_dali.py): the resize keeps the scale
    s = resize_min / shorter side on both axes (subpixel_scale) with an output side n = round(side * s) and a source
    region of n / s centred on the image; crop_mirror_normalize's central crop starts at round((n - crop) / 2)."""
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, types

    shape = fn.cast(image_shape, dtype=types.FLOAT)
    sides = (shape[0], shape[1])
    scale = resize_min / dmath.min(sides[0], sides[1])
    starts, ends, longest = [], [], None
    for side, crop in zip(sides, (height, width)):
        resized = dmath.floor(side * scale + 0.5)
        longest = resized if longest is None else dmath.max(longest, resized)
        start = (side - resized / scale) * 0.5 + dmath.floor((resized - crop) * 0.5 + 0.5) / scale
        starts.append(start)
        ends.append(start + crop / scale)
    return longest > EVAL_RESIZE_MAX_SIDE, fn.stack(*starts), fn.stack(*ends)


def _build_pipeline(filenames, idx_filenames, batch_size, height, width, training, num_threads, seed,
                    num_shards, shard_index, use_gpu, min_crop_area):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali import tfrecord as tfrec

    decode_device = "mixed" if use_gpu else "cpu"

    # enable_conditionals: the evaluation branch below takes a per-image `if` on an elongated image's shape.
    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=0 if use_gpu else None, seed=seed,
                  enable_conditionals=True)
    def pipeline():
        inputs = fn.readers.tfrecord(
            path=list(filenames), index_path=list(idx_filenames),
            features={
                "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                "image/class/text": tfrec.FixedLenFeature([], tfrec.string, ""),
                "image/object/bbox/xmin": tfrec.VarLenFeature(tfrec.float32, 0.0),
                "image/object/bbox/ymin": tfrec.VarLenFeature(tfrec.float32, 0.0),
                "image/object/bbox/xmax": tfrec.VarLenFeature(tfrec.float32, 0.0),
                "image/object/bbox/ymax": tfrec.VarLenFeature(tfrec.float32, 0.0),
            },
            random_shuffle=training, initial_fill=INITIAL_FILL, shard_id=shard_index, num_shards=num_shards,
            name="Reader")
        # adjust_orientation=False: pixels as stored, as TensorFlow's DecodeJpeg reads them in the tf.data input and
        # in predict (DALI's default turns a JPEG by its EXIF Orientation tag).
        if training:
            # As the original: the random crop ignores the bounding boxes (docs/ORIGINAL.md#dali-pipeline).
            images = fn.decoders.image_random_crop(
                inputs["image/encoded"], device=decode_device, output_type=types.RGB, adjust_orientation=False,
                random_aspect_ratio=list(ASPECT_RATIO_RANGE), random_area=[min_crop_area, AREA_RANGE[1]],
                num_attempts=MAX_ATTEMPTS)
            images = fn.resize(images, resize_x=width, resize_y=height)
            mirror = fn.random.coin_flip()
        else:
            images = fn.decoders.image(inputs["image/encoded"], device=decode_device, output_type=types.RGB,
                                       adjust_orientation=False)
            resize_min = eval_resize_min(height, width)
            # The header's shape, on the CPU whatever the decoder's device, turned as the decoder turns it (not).
            elongated, roi_start, roi_end = _eval_resize_window(
                fn.peek_image_shape(inputs["image/encoded"], adjust_orientation=False), resize_min, height, width)
            if elongated:
                # Only the central crop's pixels of the resize (the crop below then takes all of them), so an
                # extremely elongated image costs the memory of any photo, as in the tf.data evaluation.
                images = fn.resize(images, roi_start=roi_start, roi_end=roi_end, size=[height, width])
            else:
                # Every other image: the original's resize of the shorter side, then the central crop.
                images = fn.resize(images, resize_shorter=resize_min)
            mirror = 0
        images = fn.crop_mirror_normalize(
            images, crop=(height, width), mean=list(CHANNEL_MEANS), std=list(CHANNEL_STDS),
            dtype=types.FLOAT, output_layout="HWC", mirror=mirror)
        labels = inputs["image/class/label"]
        return images, labels

    return pipeline()


def get_dali_input_fn(filenames, idx_filenames, batch_size, height, width, training, num_threads=4,
                      deterministic=False, seed=None, num_shards=1, shard_index=0, min_crop_area=AREA_RANGE[0],
                      use_gpu=False, *, num_classes=defaults.NUM_CLASSES):
    """Batches of (normalised images float32 [B, H, W, 3], labels int32 [B] 0-based), forever.

    num_classes: a label outside 1..num_classes stops the iteration with the InvalidArgumentError of
    `data_utils.label_in_range_check` (the tf.data pipeline's check and default; DALI does not tell the file and
    record), which `data_utils.label_range_error` turns into a UserError.

    Sharded by worker for training only (the original also sharded evaluation, which only rank 0 runs).
    Deterministic seed: 7 * (1 + shard_index) as the original, plus 100003 * seed when a seed is given.
    min_crop_area: smallest area fraction of a training crop (`--min_crop_area`; default the original's 0.05).
    use_gpu: decode with nvJPEG and resize/normalise on GPU 0 (the platform's choice, utils/devices.Platform).
    """
    require_dali()
    import tensorflow as tf
    from nvidia.dali.plugin import tf as dali_tf

    filenames = [os.fspath(f) for f in filenames]
    idx_filenames = [os.fspath(f) for f in idx_filenames]
    if not filenames:
        raise UserError("no TFRecord files given for DALI")
    if len(idx_filenames) != len(filenames):
        raise UserError(f"{len(filenames)} TFRecord files but {len(idx_filenames)} DALI index files "
                        "(create them with dataprep, one per TFRecord, same basename)")
    for idx in idx_filenames:
        if not os.path.isfile(idx):
            raise UserError(f"DALI index file not found: {idx} (create it with dataprep's DALI index tool)")
    if not training:
        num_shards, shard_index = 1, 0
    dali_seed = None
    if deterministic:
        dali_seed = (7 * (1 + shard_index) + 100003 * (seed or 0)) % (2 ** 31)
    pipeline = _build_pipeline(filenames, idx_filenames, batch_size, height, width, training, num_threads,
                               dali_seed, num_shards, shard_index, use_gpu, min_crop_area)
    device = "/gpu:0" if use_gpu else "/cpu:0"
    with tf.device(device):
        dataset = dali_tf.DALIDataset(
            pipeline=pipeline, batch_size=batch_size, num_threads=num_threads,
            device_id=0 if use_gpu else None,
            output_shapes=((batch_size, height, width, 3), (batch_size, 1)),
            output_dtypes=(tf.float32, tf.int64))

    def to_contract(images, labels):
        labels = tf.squeeze(labels, -1)
        outside = tf.logical_or(labels < 1, labels > num_classes)
        first_outside = labels[tf.argmax(tf.cast(outside, tf.int32))]  # labels[0] when none is outside
        with tf.control_dependencies([label_in_range_check(first_outside, num_classes)]):
            return images, class_index(labels)

    with tf.device(device):
        return without_autotuning(dataset.map(as_written(to_contract)))
