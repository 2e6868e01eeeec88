"""Record parsing, JPEG decoding, training augmentation and evaluation preprocessing (docs/ORIGINAL.md#tfrecord-format,
docs/ORIGINAL.md#training-augmentation, docs/ORIGINAL.md#evaluation-preprocessing).

Every function here builds graph ops on tensors; none runs Python per image, so they can be used inside
`tf.data` map functions. Images leave this module as float32 in 0..255 (normalisation happens in the model).

Two flavours of training randomness:
- `seed=None`: the original's stateful ops (`sample_distorted_bounding_box`, `random_flip_left_right`).
- `seed=<int tensor of shape [2]>`: stateless ops, so that the same seed gives the same crop and flip. The data
  pipeline derives one such seed per element from the run seed and the element's position in the stream.

Optional AutoAugment / RandAugment (utils/augment.py, `--augmenter_name`) runs after the resize, with its own seed
folded from the element seed (`augment_seed`), so the crop and flip are the same with or without it.
"""
from __future__ import annotations

import tensorflow as tf

from utils import augment as augmentation
from utils import pixels

# Legacy TF1 `tf.image.resize_images` semantics (docs/ORIGINAL.md#training-augmentation): src = dst * in / out, no
# half-pixel offset.
_DCT_METHOD = "INTEGER_FAST"

# Training crop distribution of the original (`sample_distorted_bounding_box` arguments).
MIN_OBJECT_COVERED = 0.1
ASPECT_RATIO_RANGE = (0.75, 1.33)
AREA_RANGE = (0.05, 1.0)
MAX_ATTEMPTS = 100

# ImageNet RGB statistics in the 0..255 pixel range, in R, G, B order: the model's input normalisation
# (model/layers/normalization.py) and the DALI pipeline's (utils/dali_utils.py).
CHANNEL_MEANS = (123.68, 116.28, 103.53)
CHANNEL_STDS = (58.395, 57.120, 57.385)

# Folded into the element seed for the augmenter's randomness (any constant; changing it changes the stream).
AUGMENT_SEED_SALT = 0x617567

# The reference's evaluation resize: shorter side 256 for a 224 crop.
EVAL_RESIZE_MIN_AT_224 = 256
# Longest side of the evaluation resize computed in full; beyond it (an image over 64 times longer than wide at
# 224 px) only the central crop's window is computed (`central_window_of_resize`): a 16000x1 image would otherwise
# be resized to 4,096,000x256 floats (12.6 GB).
EVAL_RESIZE_MAX_SIDE = pixels.MAX_IMAGE_SIDE


def feature_map():
    """The keys the trainer parses (docs/ORIGINAL.md#tfrecord-format), with the original's defaults."""
    return {
        "image/encoded": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "image/class/text": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    }


def parse_example_proto(serialized):
    """Parses one serialized `tf.train.Example`.

    Returns (image_bytes string, label int32 as stored (1-based; -1 when absent), bbox float32 [1, N, 4] in
    (ymin, xmin, ymax, xmax) order, text string). Raises InvalidArgumentError on bytes that are not an Example.
    """
    features = tf.io.parse_single_example(serialized, feature_map())
    label = tf.cast(features["image/class/label"], tf.int32)
    coords = [tf.sparse.to_dense(features["image/object/bbox/" + key]) for key in ("ymin", "xmin", "ymax", "xmax")]
    # A record whose four lists differ in length is malformed; keep the common prefix instead of failing here.
    num_boxes = tf.reduce_min([tf.size(c) for c in coords])
    bbox = tf.stack([c[:num_boxes] for c in coords], axis=-1)
    bbox = tf.expand_dims(bbox, 0)
    return features["image/encoded"], label, bbox, features["image/class/text"]


def decode_image(image_bytes):
    """uint8 [H, W, 3]. JPEG (RGB, greyscale, CMYK) with the original's decoder settings.

    TF 2.21's DecodeJpeg also decodes PNG content (it dispatches on the magic bytes; the JPEG-only options
    are ignored then), as TF1's did, so predict inputs in PNG go through the same op. BMP content it refuses.
    """
    image = tf.io.decode_jpeg(image_bytes, channels=3, fancy_upscaling=False, dct_method=_DCT_METHOD)
    image.set_shape([None, None, 3])
    return image


def resize_bilinear_legacy(image, height, width):
    """TF1 `resize_images` bilinear (align_corners=False, half_pixel_centers=False) of one HWC image -> float32."""
    resized = tf.raw_ops.ResizeBilinear(images=tf.expand_dims(image, 0), size=tf.stack([height, width]),
                                        align_corners=False, half_pixel_centers=False)
    return resized[0]


def _split_seed(seed):
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=2)
    return seeds[0], seeds[1]


def distorted_crop_window(image_shape, bbox, seed=None, min_area=AREA_RANGE[0]):
    """(offset [y, x, 0], size [h, w, -1]) of the training crop for an image of `image_shape`
    (docs/ORIGINAL.md#training-augmentation).

    min_area: lower end of the crop's area range (the original's 0.05 unless `--min_crop_area` says otherwise).
    """
    kwargs = dict(bounding_boxes=bbox, min_object_covered=MIN_OBJECT_COVERED,
                  aspect_ratio_range=list(ASPECT_RATIO_RANGE), area_range=[min_area, AREA_RANGE[1]],
                  max_attempts=MAX_ATTEMPTS, use_image_if_no_bounding_boxes=True)
    if seed is None:
        begin, size, _ = tf.image.sample_distorted_bounding_box(image_shape, **kwargs)
    else:
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(image_shape, seed=seed, **kwargs)
    return begin, size


def augment_seed(seed):
    """int64 [2]: the augmenter's seed for element seed `seed`, independent of the crop and flip seeds."""
    return tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), AUGMENT_SEED_SALT)


def train_preprocess(image_bytes, bbox, height, width, seed=None, min_area=AREA_RANGE[0], augment=None):
    """Decode, bbox-aware random crop, random horizontal flip, legacy-bilinear resize -> float32 [H, W, 3].

    augment: an `augment.AugmentSettings`; when enabled, AutoAugment / RandAugment runs on the resized image
    (seeded by `augment_seed(seed)`, or by a fresh random seed when `seed` is None). None or "none": no change.
    """
    image = decode_image(image_bytes)
    crop_seed = flip_seed = None
    if seed is not None:
        crop_seed, flip_seed = _split_seed(seed)
    begin, size = distorted_crop_window(tf.shape(image), bbox, crop_seed, min_area)
    image = tf.slice(image, begin, size)
    if flip_seed is None:
        image = tf.image.random_flip_left_right(image)
    else:
        image = tf.image.stateless_random_flip_left_right(image, seed=flip_seed)
    image = resize_bilinear_legacy(image, height, width)
    image.set_shape([height, width, 3])
    if augment is not None and augment.enabled:
        if seed is None:
            seed_for_augment = tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64)
        else:
            seed_for_augment = augment_seed(seed)
        image = augmentation.augment(image, augment, seed_for_augment)
    return image


def eval_resize_min(height, width):
    """Shorter side before the central crop: 256 for 224 (the original); otherwise floor(max(H, W) * 256 / 224).

    The original hard-codes 256 (it only ran at 224); keeping the 224:256 ratio for other sizes preserves the
    fraction of the image the crop sees (87.5 %) and always leaves room for the crop.
    """
    return (max(height, width) * EVAL_RESIZE_MIN_AT_224) // 224


def aspect_preserving_size(image, resize_min):
    """(new_h, new_w) int32 with the shorter side resize_min, truncated as the original (`int32(h * scale)` in
    float32)."""
    shape = tf.shape(image)
    h = tf.cast(shape[0], tf.float32)
    w = tf.cast(shape[1], tf.float32)
    scale = tf.cast(resize_min, tf.float32) / tf.minimum(h, w)
    return tf.cast(h * scale, tf.int32), tf.cast(w * scale, tf.int32)


def aspect_preserving_resize(image, resize_min):
    """Shorter side -> resize_min (`aspect_preserving_size`), legacy bilinear."""
    new_h, new_w = aspect_preserving_size(image, resize_min)
    return resize_bilinear_legacy(image, new_h, new_w)


def _legacy_taps(in_size, out_size, start, count):
    """(lower, upper, lerp) of output indices start .. start + count - 1 of a legacy bilinear resize from in_size
    to out_size, computed as TensorFlow's ResizeBilinear kernel computes them: scale = float(in) / float(out),
    source = float(index) * scale, lower = max(floor, 0), upper = min(ceil, in - 1), lerp = source - floor."""
    scale = tf.cast(in_size, tf.float32) / tf.cast(out_size, tf.float32)
    source = tf.cast(tf.range(start, start + count), tf.float32) * scale
    floor = tf.floor(source)
    lower = tf.maximum(tf.cast(floor, tf.int32), 0)
    upper = tf.minimum(tf.cast(tf.math.ceil(source), tf.int32), in_size - 1)
    return lower, upper, source - floor


def central_window_of_resize(image, new_h, new_w, height, width):
    """float32 [height, width, C]: `central_crop(resize_bilinear_legacy(image, new_h, new_w), height, width)`
    computed for the crop's pixels only, from the source pixels their bilinear taps read, with the kernel's
    arithmetic (top = tl + (tr - tl) * x_lerp, bottom likewise, top + (bottom - top) * y_lerp), so memory is the
    crop's whatever new_h and new_w are. Equal to the full computation to float rounding."""
    shape = tf.shape(image)
    top = (new_h - height) // 2
    left = (new_w - width) // 2
    y_lower, y_upper, y_lerp = _legacy_taps(shape[0], new_h, top, height)
    x_lower, x_upper, x_lerp = _legacy_taps(shape[1], new_w, left, width)
    rows_lower = tf.gather(image, y_lower)  # [height, W, C], still the source's dtype
    rows_upper = tf.gather(image, y_upper)

    def columns(rows, index):
        return tf.cast(tf.gather(rows, index, axis=1), tf.float32)

    x_lerp = x_lerp[None, :, None]
    top_row = columns(rows_lower, x_lower) + (columns(rows_lower, x_upper) - columns(rows_lower, x_lower)) * x_lerp
    bottom = columns(rows_upper, x_lower) + (columns(rows_upper, x_upper) - columns(rows_upper, x_lower)) * x_lerp
    return top_row + (bottom - top_row) * y_lerp[:, None, None]


def central_crop(image, height, width):
    shape = tf.shape(image)
    top = (shape[0] - height) // 2
    left = (shape[1] - width) // 2
    return tf.slice(image, tf.stack([top, left, 0]), [height, width, -1])


def eval_preprocess(image_bytes, height, width):
    """Decode, aspect-preserving resize (shorter side `eval_resize_min`), central crop -> float32 [H, W, 3].

    When the resize's longer side would exceed EVAL_RESIZE_MAX_SIDE (an extremely elongated image), only the
    crop's window of it is computed (`central_window_of_resize`, the same pixels to float rounding); every other
    image goes through ResizeBilinear and the crop as the original."""
    image = decode_image(image_bytes)
    new_h, new_w = aspect_preserving_size(image, eval_resize_min(height, width))
    image = tf.cond(tf.maximum(new_h, new_w) > EVAL_RESIZE_MAX_SIDE,
                    lambda: central_window_of_resize(image, new_h, new_w, height, width),
                    lambda: central_crop(resize_bilinear_legacy(image, new_h, new_w), height, width))
    image.set_shape([height, width, 3])
    return image
