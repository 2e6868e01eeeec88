"""AutoAugment (Cubuk et al. 2018, ImageNet policy) and RandAugment (Cubuk et al. 2019) as TensorFlow graph ops.

Every op takes and returns uint8 [H, W, 3] and follows PIL's semantics (the AutoAugment paper's implementation
used PIL; tests/test_augment.py compares each op with PIL): ImageOps for AutoContrast, Equalize, Invert, Posterize,
Solarize; ImageEnhance for Color, Contrast, Brightness, Sharpness (blend with a degenerate image, truncated to
uint8); Image.transform / Image.rotate with NEAREST sampling and grey (128, 128, 128) fill for Rotate, ShearX,
ShearY, TranslateX, TranslateY. SolarizeAdd and Cutout have no PIL counterpart; they follow the reference TF code.

Levels are on the reference code's 0..10 scale (MAX_LEVEL) and map to op arguments as there (`_level_to_args`),
with translate and cutout sizes scaled from the reference's 224-pixel constants to the image's size.

Randomness is stateless: `augment(image, settings, seed)` is a pure function of (image, seed), so a seeded input
pipeline stays reproducible and resumable. Ops are selected with `tf.switch_case` / `tf.cond`, so the graph runs
inside a parallel `tf.data.Dataset.map` and only the chosen op's branch executes.
"""
from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from utils.errors import UserError

MAX_LEVEL = 10.0
FILL_VALUE = 128  # grey of the geometric ops' empty area and of the cutout patch, as the reference TF code
AUGMENTER_NAMES = ("none", "autoaugment", "randaugment")

# Reference constants at 224 x 224, scaled to the image: translate by up to 100 px, cutout half-side up to 40 px.
_TRANSLATE_AT_224 = 100.0
_CUTOUT_AT_224 = 40.0

RANDAUGMENT_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color", "Contrast",
                   "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY", "Cutout", "SolarizeAdd")
OP_NAMES = RANDAUGMENT_OPS  # every op of this module; AutoAugment's ImageNet policy uses 10 of them

# The ImageNet policy of the AutoAugment paper (appendix, Table 9): 25 sub-policies of two (op, probability,
# magnitude 0..10) each. AutoContrast, Equalize and Invert ignore their magnitude.
AUTOAUGMENT_IMAGENET_POLICY = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
    (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, 4), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, 7)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, 2)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, 8), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, 2)),
    (("Equalize", 0.0, 7), ("Equalize", 0.8, 8)),
    (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, 8)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, 9)),
    (("Color", 0.4, 0), ("Equalize", 0.6, 3)),
    (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
    (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
)


@dataclasses.dataclass(frozen=True)
class AugmentSettings:
    """Which augmenter runs after the training crop (`--augmenter_name`), and RandAugment's N and M."""
    name: str = "none"
    num_layers: int = 2
    magnitude: float = 9.0

    def __post_init__(self):
        if self.name not in AUGMENTER_NAMES:
            raise UserError(f"--augmenter_name must be one of {', '.join(AUGMENTER_NAMES)} (got {self.name!r})")
        if isinstance(self.num_layers, bool) or not isinstance(self.num_layers, int) or self.num_layers < 1:
            raise UserError(f"--raug_num_layers must be an integer >= 1 (got {self.num_layers!r})")
        if isinstance(self.magnitude, bool) or not isinstance(self.magnitude, (int, float)) \
                or not 0 <= self.magnitude <= MAX_LEVEL:
            raise UserError(f"--raug_magnitude must be in 0..{MAX_LEVEL:g} (got {self.magnitude!r})")

    @property
    def enabled(self) -> bool:
        return self.name != "none"


# ---------------------------------------------------------------------------------------------- helpers
def _histograms(image):
    """int64 [3, 256]: the per-channel histograms of a uint8 [H, W, 3] image (PIL's `Image.histogram`)."""
    index = tf.reshape(tf.cast(image, tf.int32) + tf.range(3) * 256, [-1])
    return tf.reshape(tf.math.bincount(index, minlength=768, maxlength=768, dtype=tf.int64), [3, 256])


def _apply_lut(image, lut):
    """Maps each channel of a uint8 image through its row of `lut` (int [3, 256], clipped to 0..255)."""
    table = tf.cast(tf.clip_by_value(tf.cast(lut, tf.int64), 0, 255), tf.uint8)
    return tf.gather(tf.reshape(table, [-1]), tf.cast(image, tf.int32) + tf.range(3) * 256)


def _luma(image):
    """int32 [H, W]: PIL's RGB -> L conversion (ITU-R 601-2 in 16-bit fixed point, rounded)."""
    x = tf.cast(image, tf.int32)
    return (x[..., 0] * 19595 + x[..., 1] * 38470 + x[..., 2] * 7471 + 0x8000) // 65536


def _blend(degenerate, image, factor):
    """PIL's Image.blend(degenerate, image, factor): degenerate + factor * (image - degenerate), computed in
    float32, clipped to 0..255 and truncated. `factor` may exceed 1 (extrapolation)."""
    degenerate = tf.cast(degenerate, tf.float32)
    factor = tf.cast(factor, tf.float32)
    out = degenerate + factor * (tf.cast(image, tf.float32) - degenerate)
    return tf.cast(tf.floor(tf.clip_by_value(out, 0.0, 255.0)), tf.uint8)


def _affine(image, matrix):
    """PIL's Image.transform(size, AFFINE, matrix, NEAREST, fillcolor=grey): output pixel centre (x, y) samples
    the input at (a x + b y + c, d x + e y + f), pixel centres at +0.5 as in PIL. TensorFlow's transform works on
    integer pixel indices and rounds, so the offsets are shifted by half a pixel."""
    a, b, c, d, e, f = (tf.cast(m, tf.float64) for m in matrix)
    transform = tf.stack([a, b, c + 0.5 * (a + b) - 0.5, d, e, f + 0.5 * (d + e) - 0.5,
                          tf.constant(0.0, tf.float64), tf.constant(0.0, tf.float64)])
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[tf.newaxis], transforms=tf.cast(transform, tf.float32)[tf.newaxis],
        output_shape=tf.shape(image)[:2], fill_value=tf.constant(FILL_VALUE, tf.float32),
        interpolation="NEAREST", fill_mode="CONSTANT")
    return out[0]


# ---------------------------------------------------------------------------------------------- image ops
def autocontrast(image):
    """ImageOps.autocontrast (cutoff 0): each channel's [lowest, highest] value stretched to [0, 255]."""
    hist = _histograms(image)
    present = tf.cast(hist > 0, tf.int32)
    lo = tf.cast(tf.argmax(present, axis=1), tf.float64)[:, tf.newaxis]
    hi = tf.cast(255 - tf.argmax(present[:, ::-1], axis=1), tf.float64)[:, tf.newaxis]
    scale = 255.0 / tf.maximum(hi - lo, 1.0)
    values = tf.range(256, dtype=tf.float64)[tf.newaxis]
    lut = tf.clip_by_value(tf.cast(values * scale + (-lo * scale), tf.int64), 0, 255)  # int() truncates
    return _apply_lut(image, tf.where(hi > lo, lut, tf.cast(values, tf.int64)))


def equalize(image):
    """ImageOps.equalize: per channel, cumulative-histogram remapping with PIL's integer step."""
    hist = _histograms(image)
    last_bin = 255 - tf.argmax(tf.cast(hist[:, ::-1] > 0, tf.int32), axis=1)
    last_count = tf.gather(hist, last_bin, batch_dims=1)
    step = ((tf.reduce_sum(hist, axis=1) - last_count) // 255)[:, tf.newaxis]
    cumulative = tf.cumsum(hist, axis=1, exclusive=True)
    lut = (step // 2 + cumulative) // tf.maximum(step, 1)
    identity = tf.range(256, dtype=tf.int64)[tf.newaxis]
    # step == 0 also covers a channel with a single value (PIL checks both).
    return _apply_lut(image, tf.where(step > 0, lut, identity))


def invert(image):
    """ImageOps.invert: 255 - value."""
    return 255 - image


def posterize(image, bits):
    """ImageOps.posterize: keep the `bits` (1..8) high bits of each value."""
    mask = tf.bitwise.bitwise_and(tf.bitwise.left_shift(255, 8 - tf.cast(bits, tf.int32)), 255)
    return tf.cast(tf.bitwise.bitwise_and(tf.cast(image, tf.int32), mask), tf.uint8)


def solarize(image, threshold):
    """ImageOps.solarize: invert the values >= threshold (threshold 256 leaves the image unchanged)."""
    x = tf.cast(image, tf.int32)
    return tf.cast(tf.where(x < tf.cast(threshold, tf.int32), x, 255 - x), tf.uint8)


def solarize_add(image, addition, threshold=128):
    """The reference's SolarizeAdd: add `addition` (saturating at 255) to the values below threshold."""
    x = tf.cast(image, tf.int32)
    added = tf.clip_by_value(x + tf.cast(addition, tf.int32), 0, 255)
    return tf.cast(tf.where(x < threshold, added, x), tf.uint8)


def color(image, factor):
    """ImageEnhance.Color: blend with the greyscale (PIL L) image; 0 = grey, 1 = unchanged."""
    grey = tf.tile(_luma(image)[..., tf.newaxis], [1, 1, 3])
    return _blend(grey, image, factor)


def contrast(image, factor):
    """ImageEnhance.Contrast: blend with a constant image of the rounded mean luma; 0 = flat grey."""
    luma = tf.cast(_luma(image), tf.int64)
    count = tf.size(luma, out_type=tf.int64)
    mean = (2 * tf.reduce_sum(luma) + count) // (2 * count)  # int(mean + 0.5)
    return _blend(tf.fill(tf.shape(image), tf.cast(mean, tf.float32)), image, factor)


def brightness(image, factor):
    """ImageEnhance.Brightness: blend with black; 0 = black, 1 = unchanged."""
    return _blend(tf.zeros_like(image), image, factor)


def sharpness(image, factor):
    """ImageEnhance.Sharpness: blend with ImageFilter.SMOOTH (3x3 kernel 1 1 1 / 1 5 1 / 1 1 1, / 13, rounded;
    border pixels unchanged, as PIL's filter copies them)."""
    x = tf.cast(image, tf.int32)[tf.newaxis]
    kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32)[:, :, tf.newaxis, tf.newaxis]
    total = tf.nn.depthwise_conv2d(tf.cast(x, tf.float32), tf.tile(kernel, [1, 1, 3, 1]), [1, 1, 1, 1], "SAME")
    smooth = (tf.cast(total[0], tf.int32) + 6) // 13  # integer sums are exact in float32; round to nearest
    shape = tf.shape(image)
    rows, cols = tf.range(shape[0]), tf.range(shape[1])
    inner_rows = tf.logical_and(rows > 0, rows < shape[0] - 1)
    inner_cols = tf.logical_and(cols > 0, cols < shape[1] - 1)
    inner = inner_rows[:, tf.newaxis, tf.newaxis] & inner_cols[tf.newaxis, :, tf.newaxis]
    degenerate = tf.where(inner, smooth, x[0])
    return _blend(degenerate, image, factor)


def rotate(image, degrees):
    """Image.rotate(degrees, NEAREST, fillcolor=grey): counter-clockwise about the image centre, same size."""
    shape = tf.cast(tf.shape(image), tf.float64)
    cx, cy = shape[1] / 2.0, shape[0] / 2.0
    angle = -tf.cast(degrees, tf.float64) * (math.pi / 180.0)
    cos, sin = tf.cos(angle), tf.sin(angle)
    return _affine(image, (cos, sin, cx - cos * cx - sin * cy, -sin, cos, cy + sin * cx - cos * cy))


def shear_x(image, factor):
    """Image.transform AFFINE (1, factor, 0, 0, 1, 0): rows shift by factor * y (origin at the top-left)."""
    return _affine(image, (1.0, factor, 0.0, 0.0, 1.0, 0.0))


def shear_y(image, factor):
    """Image.transform AFFINE (1, 0, 0, factor, 1, 0): columns shift by factor * x."""
    return _affine(image, (1.0, 0.0, 0.0, factor, 1.0, 0.0))


def translate_x(image, pixels):
    """Image.transform AFFINE (1, 0, pixels, 0, 1, 0): content moves left by `pixels` (may be fractional)."""
    return _affine(image, (1.0, 0.0, pixels, 0.0, 1.0, 0.0))


def translate_y(image, pixels):
    """Image.transform AFFINE (1, 0, 0, 0, 1, pixels): content moves up by `pixels`."""
    return _affine(image, (1.0, 0.0, 0.0, 0.0, 1.0, pixels))


def cutout_at(image, pad_size, center_y, center_x):
    """Grey square of rows [cy - pad, cy + pad) and columns [cx - pad, cx + pad), clipped to the image."""
    shape = tf.shape(image)
    rows, cols = tf.range(shape[0]), tf.range(shape[1])
    inside_rows = tf.logical_and(rows >= center_y - pad_size, rows < center_y + pad_size)
    inside_cols = tf.logical_and(cols >= center_x - pad_size, cols < center_x + pad_size)
    inside = inside_rows[:, tf.newaxis, tf.newaxis] & inside_cols[tf.newaxis, :, tf.newaxis]
    return tf.where(inside, tf.constant(FILL_VALUE, tf.uint8), image)


def cutout(image, pad_size, seed):
    """The reference's Cutout: a grey square of side 2 * pad_size at a centre uniform over the image."""
    shape = tf.shape(image)
    seed_y, seed_x = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    center_y = tf.random.stateless_uniform([], seed_y, 0, shape[0], dtype=tf.int32)
    center_x = tf.random.stateless_uniform([], seed_x, 0, shape[1], dtype=tf.int32)
    return cutout_at(image, tf.cast(pad_size, tf.int32), center_y, center_x)


# ---------------------------------------------------------------------------------------------- levels
def _random_sign(value, seed):
    return tf.where(tf.random.stateless_uniform([], seed) < 0.5, -value, value)


def _level_to_args(name, level, seed, height, width):
    """Arguments of op `name` at `level` (float64 scalar, 0..MAX_LEVEL), as the reference code maps them."""
    fraction = level / MAX_LEVEL
    if name in ("AutoContrast", "Equalize", "Invert"):
        return ()
    if name == "Rotate":
        return (_random_sign(fraction * 30.0, seed),)
    if name == "Posterize":  # 0 bits would be black in PIL (which refuses it); the reference's shift keeps 1
        return (tf.maximum(tf.cast(fraction * 4.0, tf.int32), 1),)
    if name == "Solarize":
        return (tf.cast(fraction * 256.0, tf.int32),)
    if name == "SolarizeAdd":
        return (tf.cast(fraction * 110.0, tf.int32),)
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return (fraction * 1.8 + 0.1,)
    if name in ("ShearX", "ShearY"):
        return (_random_sign(fraction * 0.3, seed),)
    if name == "TranslateX":
        return (_random_sign(fraction * (_TRANSLATE_AT_224 / 224.0) * width, seed),)
    if name == "TranslateY":
        return (_random_sign(fraction * (_TRANSLATE_AT_224 / 224.0) * height, seed),)
    if name == "Cutout":
        return (tf.cast(fraction * (_CUTOUT_AT_224 / 224.0) * tf.minimum(height, width), tf.int32), seed)
    raise ValueError(f"unknown augmentation op {name!r}")


_OP_FUNCTIONS = {
    "AutoContrast": autocontrast, "Equalize": equalize, "Invert": invert, "Rotate": rotate, "Posterize": posterize,
    "Solarize": solarize, "SolarizeAdd": solarize_add, "Color": color, "Contrast": contrast,
    "Brightness": brightness, "Sharpness": sharpness, "ShearX": shear_x, "ShearY": shear_y,
    "TranslateX": translate_x, "TranslateY": translate_y, "Cutout": cutout,
}


def apply_op(image: tf.Tensor, name: str, level, seed) -> tf.Tensor:
    """Op `name` at `level` (0..10) on uint8 [H, W, 3]; `seed` (int [2]) draws random signs and cutout centres."""
    shape = tf.cast(tf.shape(image), tf.float64)
    args = _level_to_args(name, tf.cast(level, tf.float64), tf.cast(seed, tf.int64), shape[0], shape[1])
    out = _OP_FUNCTIONS[name](image, *args)
    out.set_shape(image.shape)
    return out


def _apply_op_by_index(image, index, level, seed):
    """`apply_op` with the op chosen by a scalar int32 tensor indexing OP_NAMES (only that branch runs)."""
    branches = [lambda name=name: apply_op(image, name, level, seed) for name in OP_NAMES]
    return tf.switch_case(index, branches)


def _maybe(image, probability, seed, fn):
    """fn(image) with probability `probability`, else image."""
    return tf.cond(tf.random.stateless_uniform([], seed) < probability, fn, lambda: image)


_POLICY_OPS = [[OP_NAMES.index(name) for name, _, _ in sub] for sub in AUTOAUGMENT_IMAGENET_POLICY]
_POLICY_PROBS = [[prob for _, prob, _ in sub] for sub in AUTOAUGMENT_IMAGENET_POLICY]
_POLICY_LEVELS = [[level for _, _, level in sub] for sub in AUTOAUGMENT_IMAGENET_POLICY]


def autoaugment(image: tf.Tensor, seed) -> tf.Tensor:
    """One sub-policy of AUTOAUGMENT_IMAGENET_POLICY chosen uniformly; each of its ops applied with its
    probability. uint8 [H, W, 3] -> uint8."""
    seeds = tf.random.experimental.stateless_split(seed, 5)
    index = tf.random.stateless_uniform([], seeds[0], 0, len(AUTOAUGMENT_IMAGENET_POLICY), dtype=tf.int32)
    for slot in range(2):
        op = tf.gather(tf.constant(_POLICY_OPS, tf.int32)[:, slot], index)
        prob = tf.gather(tf.constant(_POLICY_PROBS, tf.float32)[:, slot], index)
        level = tf.gather(tf.constant(_POLICY_LEVELS, tf.float64)[:, slot], index)
        image = _maybe(image, prob, seeds[1 + 2 * slot],
                       lambda image=image, op=op, level=level, s=seeds[2 + 2 * slot]:
                       _apply_op_by_index(image, op, level, s))
    return image


def randaugment(image: tf.Tensor, num_layers: int, magnitude: float, seed) -> tf.Tensor:
    """`num_layers` times: one op of RANDAUGMENT_OPS chosen uniformly, applied at `magnitude`. uint8 [H, W, 3] ->
    uint8. Every chosen op is applied, as in the reference TF code (which draws a probability per op but never uses
    it); timm applies each with probability 0.5 instead."""
    for layer in range(num_layers):
        choice_seed, op_seed = tf.unstack(tf.random.experimental.stateless_split(
            tf.random.experimental.stateless_fold_in(seed, layer), 2))
        index = tf.random.stateless_uniform([], choice_seed, 0, len(RANDAUGMENT_OPS), dtype=tf.int32)
        image = _apply_op_by_index(image, index, float(magnitude), op_seed)
    return image


def augment(image: tf.Tensor, settings: AugmentSettings, seed) -> tf.Tensor:
    """float32 [H, W, 3] in 0..255 -> float32 [H, W, 3] in 0..255 (integral values), same static shape.

    The image is rounded and clipped to uint8, augmented as `settings` say, and cast back; `settings.name ==
    "none"` returns it unchanged. seed: int [2]; the result is a pure function of (image, seed).
    """
    if not settings.enabled:
        return image
    seed = tf.cast(seed, tf.int64)
    pixels = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
    if settings.name == "autoaugment":
        pixels = autoaugment(pixels, seed)
    else:
        pixels = randaugment(pixels, settings.num_layers, settings.magnitude, seed)
    out = tf.cast(pixels, tf.float32)
    out.set_shape(image.shape)
    return out
