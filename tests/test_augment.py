"""utils/augment.py: every op against PIL on real photos, the level mappings, the ImageNet policy table,
determinism, settings validation, and the hook into the TFRecord training pipeline.

Tolerances against PIL:
- integer ops (AutoContrast, Equalize, Invert, Posterize, Solarize, SolarizeAdd): exact.
- enhance ops (Color, Contrast, Brightness, Sharpness): max abs difference 1. PIL blends in C `float` and
  truncates; a compiler's fused multiply-add can move a value sitting on an integer by one ulp, hence one grey
  level. (On this machine they are exact.)
- geometric ops (Rotate, Shear, Translate): >= 99 % of the pixels equal. PIL samples at pixel centres and floors
  (in double or 16.16 fixed point), TensorFlow's transform rounds float32 indices half away from zero: a sample
  point exactly on a pixel boundary (or within float error of it) can land on the neighbouring pixel or, at the
  top/left edge, on the grey fill. A wrong magnitude or sign leaves at most ~35 % of the pixels equal.
  Exact ties are systematic for some arguments (ShearX 0.12 = level 4 on 64 rows: 3 whole rows sit on pixel
  boundaries, 95 % equal; `test_geometric_differences_are_exact_ties`), so the level tests use levels 9 and 5.
"""
import dataclasses

import numpy as np
import pytest
import skimage.data
import tensorflow as tf
from PIL import Image, ImageEnhance, ImageOps

from tests._data_helpers import write_tfrecord_shards
from utils import augment, data_utils, image_processing
from utils.errors import UserError

GREY = (128, 128, 128)
EXACT_OPS = ("AutoContrast", "Equalize", "Invert", "Posterize", "Solarize", "SolarizeAdd")
ENHANCE_OPS = ("Color", "Contrast", "Brightness", "Sharpness")
GEOMETRIC_OPS = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY")
SIGNED_OPS = GEOMETRIC_OPS


def _photo(name, size):
    return np.asarray(Image.fromarray(getattr(skimage.data, name)()).resize(size, Image.BILINEAR))


_ASTRONAUT = _photo("astronaut", (64, 64))
PHOTOS = {
    "astronaut": _ASTRONAUT,
    "coffee": _photo("coffee", (72, 48)),  # not square: width 72, height 48
    # Low contrast, a different range per channel: AutoContrast has something to stretch.
    "dim": np.round(_ASTRONAUT * np.array([0.5, 0.6, 0.4]) + np.array([40, 60, 20])).astype(np.uint8),
}


@pytest.fixture(params=sorted(PHOTOS))
def photo(request):
    return PHOTOS[request.param]


# ---------------------------------------------------------------------- PIL reference of each op at a level
def pil_op(array, name, level, sign=1):
    """The op at `level` in PIL, with the level mappings of the reference code (a sign for the signed ops)."""
    image = Image.fromarray(array)
    width, height = image.size
    f = level / 10.0

    def affine(matrix):
        return image.transform(image.size, Image.AFFINE, matrix, Image.NEAREST, fillcolor=GREY)

    if name == "AutoContrast":
        out = ImageOps.autocontrast(image)
    elif name == "Equalize":
        out = ImageOps.equalize(image)
    elif name == "Invert":
        out = ImageOps.invert(image)
    elif name == "Posterize":
        out = ImageOps.posterize(image, max(1, int(f * 4)))
    elif name == "Solarize":
        out = ImageOps.solarize(image, int(f * 256))
    elif name == "SolarizeAdd":
        add = int(f * 110)
        out = image.point([min(255, i + add) if i < 128 else i for i in range(256)] * 3)
    elif name in ENHANCE_OPS:
        out = getattr(ImageEnhance, name)(image).enhance(f * 1.8 + 0.1)
    elif name == "Rotate":
        out = image.rotate(sign * f * 30, Image.NEAREST, fillcolor=GREY)
    elif name == "ShearX":
        out = affine((1, sign * f * 0.3, 0, 0, 1, 0))
    elif name == "ShearY":
        out = affine((1, 0, 0, sign * f * 0.3, 1, 0))
    elif name == "TranslateX":
        out = affine((1, 0, sign * f * 100 / 224 * width, 0, 1, 0))
    elif name == "TranslateY":
        out = affine((1, 0, 0, 0, 1, sign * f * 100 / 224 * height))
    else:
        raise ValueError(name)
    return np.asarray(out)


def matches(name, ours, ref):
    """Equal within the tolerance of op `name` (module docstring)."""
    if name in EXACT_OPS:
        return np.array_equal(ours, ref)
    if name in ENHANCE_OPS:
        return int(np.abs(ours.astype(int) - ref.astype(int)).max()) <= 1
    return np.mean((ours == ref).all(axis=-1)) >= 0.99


def _ours(array, name, level, seed=0):
    return augment.apply_op(tf.constant(array), name, level, tf.constant([11, seed], tf.int64)).numpy()


PIL_OPS = EXACT_OPS + ENHANCE_OPS + GEOMETRIC_OPS


@pytest.mark.parametrize("level", [9.0, 5.0])
@pytest.mark.parametrize("name", PIL_OPS)
def test_op_at_level_matches_pil_and_a_wrong_level_does_not(photo, name, level):
    ours = _ours(photo, name, level)
    assert ours.dtype == np.uint8 and ours.shape == photo.shape
    signs = (1, -1) if name in SIGNED_OPS else (1,)
    assert any(matches(name, ours, pil_op(photo, name, level, sign)) for sign in signs)
    if name not in ("AutoContrast", "Equalize", "Invert"):  # these have no magnitude
        wrong = level - 2.5 if level >= 5 else level + 2.5
        for sign in signs:
            reference = pil_op(photo, name, wrong, sign)
            if not np.array_equal(reference, photo):  # e.g. Solarize at a threshold above the photo's maximum
                assert not matches(name, ours, reference)


def test_geometric_differences_are_exact_ties():
    """ShearX 0.12 on 64 rows: PIL samples x + 0.5 + 0.12 (y + 0.5), a pixel boundary exactly in rows 12, 37 and
    62; only there do PIL and TensorFlow (float error either way) pick different neighbours."""
    photo = PHOTOS["astronaut"]
    ours = augment.shear_x(tf.constant(photo), 0.12).numpy()
    reference = pil_op(photo, "ShearX", 4.0)
    tie_rows = {y for y in range(64) if abs((0.12 * (y + 0.5)) % 1.0 - 0.5) < 1e-9}
    assert tie_rows == {12, 37, 62}
    differing = set(np.nonzero((ours != reference).any(axis=-1).any(axis=1))[0])
    assert differing and differing <= tie_rows
    np.testing.assert_array_equal(ours[[y for y in range(64) if y not in tie_rows]],
                                  reference[[y for y in range(64) if y not in tie_rows]])


@pytest.mark.parametrize("name", SIGNED_OPS)
def test_signed_ops_take_both_signs_and_match_pil(name):
    photo = PHOTOS["coffee"]
    signs = []
    for seed in range(8):
        ours = _ours(photo, name, 9.0, seed)
        found = [sign for sign in (1, -1) if matches(name, ours, pil_op(photo, name, 9.0, sign))]
        assert len(found) == 1, (seed, found)
        signs += found
    assert set(signs) == {1, -1}


def test_every_op_changes_some_photo():
    """The comparisons above are not between unchanged images."""
    for name in PIL_OPS:
        assert any(not np.array_equal(_ours(photo, name, level), photo)
                   for photo in PHOTOS.values() for level in (4.0, 9.0)), name


def test_ops_with_explicit_arguments_match_pil(photo):
    image = Image.fromarray(photo)
    t = tf.constant(photo)
    for bits in range(1, 9):
        np.testing.assert_array_equal(augment.posterize(t, bits), ImageOps.posterize(image, bits))
    for threshold in (0, 1, 100, 128, 255, 256):
        np.testing.assert_array_equal(augment.solarize(t, threshold), ImageOps.solarize(image, threshold))
    for factor in (0.0, 0.3, 1.0, 1.5, 2.0, 3.0):  # > 1 extrapolates and clips
        for name in ENHANCE_OPS:
            ours = getattr(augment, name.lower())(t, factor).numpy()
            reference = np.asarray(getattr(ImageEnhance, name)(image).enhance(factor))
            assert matches(name, ours, reference), (name, factor)
    for degrees in (1.0, -13.0, 45.0, 90.0):
        ours = augment.rotate(t, degrees).numpy()
        assert matches("Rotate", ours, np.asarray(image.rotate(degrees, Image.NEAREST, fillcolor=GREY)))


def test_solarize_add_threshold_and_saturation():
    values = np.arange(256, dtype=np.uint8).reshape(16, 16, 1).repeat(3, axis=2)
    out = augment.solarize_add(tf.constant(values), 99).numpy().astype(int)
    v = values.astype(int)
    np.testing.assert_array_equal(out, np.where(v < 128, np.minimum(v + 99, 255), v))


def _numpy_cutout(array, pad, cy, cx):
    out = array.copy()
    out[max(0, cy - pad):max(0, cy + pad), max(0, cx - pad):max(0, cx + pad)] = 128
    return out


def test_cutout_at_matches_numpy():
    photo = PHOTOS["coffee"]
    for pad, cy, cx in [(5, 20, 30), (5, 0, 0), (8, 47, 71), (3, 2, 70), (0, 10, 10), (40, 24, 36)]:
        ours = augment.cutout_at(tf.constant(photo), pad, cy, cx).numpy()
        np.testing.assert_array_equal(ours, _numpy_cutout(photo, pad, cy, cx))


def test_cutout_at_level_is_one_grey_square_of_the_mapped_size():
    photo = PHOTOS["coffee"]
    height, width = photo.shape[:2]
    pad = int(0.9 * min(height, width) * 40 / 224)  # level 9 -> 7 at 48 pixels
    assert pad == 7
    centres = set()
    for seed in range(4):
        ours = _ours(photo, "Cutout", 9.0, seed)
        found = [(cy, cx) for cy in range(height) for cx in range(width)
                 if np.array_equal(ours, _numpy_cutout(photo, pad, cy, cx))]
        assert found, seed
        assert not any(np.array_equal(ours, _numpy_cutout(photo, pad - 1, cy, cx)) for cy, cx in found)
        centres.add(found[0])
    assert len(centres) == 4


# ---------------------------------------------------------------------- policy table and settings
def test_imagenet_policy_table():
    policy = augment.AUTOAUGMENT_IMAGENET_POLICY
    assert len(policy) == 25
    for sub_policy in policy:
        assert len(sub_policy) == 2
        for name, probability, magnitude in sub_policy:
            assert name in augment.OP_NAMES
            assert 0.0 <= probability <= 1.0
            assert 0 <= magnitude <= 10 and magnitude == int(magnitude)
    assert policy[0] == (("Posterize", 0.4, 8), ("Rotate", 0.6, 9))
    assert policy[18] == (("ShearX", 0.6, 5), ("Equalize", 1.0, 9))
    assert {name for sub in policy for name, _, _ in sub} == {
        "Posterize", "Rotate", "Solarize", "AutoContrast", "Equalize", "Color", "Contrast", "Invert", "Sharpness",
        "ShearX"}
    assert len(augment.RANDAUGMENT_OPS) == 16 and set(augment.RANDAUGMENT_OPS) == set(augment.OP_NAMES)


def test_settings_defaults_and_validation():
    default = augment.AugmentSettings()
    assert (default.name, default.num_layers, default.magnitude, default.enabled) == ("none", 2, 9.0, False)
    assert augment.AugmentSettings("randaugment", 3, 0).enabled
    assert augment.AugmentSettings("autoaugment", magnitude=10.0).enabled
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.name = "randaugment"
    for kwargs, flag in [(dict(name="randaug"), "--augmenter_name"), (dict(name=None), "--augmenter_name"),
                         (dict(num_layers=0), "--raug_num_layers"), (dict(num_layers=1.5), "--raug_num_layers"),
                         (dict(magnitude=-0.1), "--raug_magnitude"), (dict(magnitude=10.5), "--raug_magnitude"),
                         (dict(magnitude=float("nan")), "--raug_magnitude")]:
        with pytest.raises(UserError, match=flag) as info:
            augment.AugmentSettings(**kwargs)
        assert "\n" not in str(info.value)


# ---------------------------------------------------------------------- augment(): determinism and outcomes
def _graph_augment(settings, shape):
    return tf.function(lambda image, seed: augment.augment(image, settings, seed),
                       input_signature=[tf.TensorSpec(shape, tf.float32), tf.TensorSpec([2], tf.int64)])


@pytest.mark.parametrize("settings", [augment.AugmentSettings("autoaugment"),
                                      augment.AugmentSettings("randaugment", 2, 9.0)], ids=lambda s: s.name)
def test_augment_is_a_deterministic_function_of_the_seed(settings):
    photo = PHOTOS["coffee"]
    image = photo.astype(np.float32) + 0.3  # not integral: augment rounds
    run = _graph_augment(settings, photo.shape)
    outputs = [run(image, tf.constant([3, i], tf.int64)).numpy() for i in range(12)]
    for i, out in enumerate(outputs):
        assert out.dtype == np.float32 and out.shape == photo.shape
        assert out.min() >= 0 and out.max() <= 255 and np.array_equal(out, np.round(out))
        np.testing.assert_array_equal(out, run(image, tf.constant([3, i], tf.int64)).numpy())
    assert len({out.tobytes() for out in outputs}) >= 6
    eager = augment.augment(tf.constant(image), settings, tf.constant([3, 5], tf.int64))
    np.testing.assert_array_equal(eager.numpy(), outputs[5])
    np.testing.assert_array_equal(augment.augment(tf.constant(image), augment.AugmentSettings(), [3, 5]), image)


def _outcome_matches(out, candidates):
    """Within the loosest tolerance above (99 % of the pixels within one grey level) of one of `candidates`."""
    return any(np.mean((np.abs(out.astype(int) - c.astype(int)) <= 1).all(axis=-1)) >= 0.99 for c in candidates)


def _pil_outcomes(photo, name, level):
    signs = (1, -1) if name in SIGNED_OPS else (1,)
    return [pil_op(photo, name, level, sign) for sign in signs]


def test_autoaugment_outputs_are_outcomes_of_the_policy():
    """Each output is the photo after some sub-policy with some of its ops applied (PIL computes the outcomes)."""
    photo = PHOTOS["astronaut"]
    outcomes = [photo]
    for (name1, p1, level1), (name2, p2, level2) in augment.AUTOAUGMENT_IMAGENET_POLICY:
        firsts = _pil_outcomes(photo, name1, level1) if p1 > 0 else []
        outcomes += firsts
        if p2 > 0:
            for start in ([photo] if p1 < 1 else []) + firsts:
                outcomes += _pil_outcomes(start, name2, level2)
    run = _graph_augment(augment.AugmentSettings("autoaugment"), photo.shape)
    unchanged = 0
    for i in range(24):
        out = run(photo.astype(np.float32), tf.constant([8, i], tf.int64)).numpy().astype(np.uint8)
        assert _outcome_matches(out, outcomes), i
        unchanged += np.array_equal(out, photo)
    assert unchanged < 12


def test_randaugment_one_layer_always_applies_one_op():
    photo = PHOTOS["astronaut"]
    outcomes = [photo] + [c for name in PIL_OPS for c in _pil_outcomes(photo, name, 9.0)]
    pad = int(0.9 * 64 * 40 / 224)
    run = _graph_augment(augment.AugmentSettings("randaugment", 1, 9.0), photo.shape)
    unchanged, draws = 0, 200
    for i in range(draws):
        out = run(photo.astype(np.float32), tf.constant([9, i], tf.int64)).numpy().astype(np.uint8)
        changed = (out != photo).any(axis=-1)
        if changed.any() and (out[changed] == 128).all():  # Cutout: a grey box of at most 2 pad a side
            rows, cols = np.nonzero(changed)
            assert rows.max() - rows.min() < 2 * pad and cols.max() - cols.min() < 2 * pad
        elif i < 40:  # the PIL comparison for a subset (it costs a few ms per candidate)
            assert _outcome_matches(out, outcomes), i
        unchanged += not changed.any()
    assert unchanged == 0  # every draw applied an op, and each of the 16 at level 9 changes this photo


# ---------------------------------------------------------------------- the training pipeline hook
NUM_CLASSES = 11
RANDAUGMENT = augment.AugmentSettings("randaugment", 2, 9.0)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_tfrecord_shards(str(tmp_path_factory.mktemp("augment_records")), "train", 2, 6, 40, NUM_CLASSES,
                                 with_bbox=True)


def _batches(shards, count=4, training=True, **kwargs):
    dataset = data_utils.get_tfrecords_input_fn(shards, 4, 32, 32, training=training, deterministic=True, seed=5,
                                                num_classes=NUM_CLASSES, **kwargs)
    return [(images.numpy(), labels.numpy()) for images, labels in dataset.take(count)]


def _assert_same(first, second):
    assert len(first) == len(second)
    for (i1, l1), (i2, l2) in zip(first, second):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(l1, l2)


def test_pipeline_without_augmenter_is_unchanged(shards):
    plain = _batches(shards)
    _assert_same(plain, _batches(shards, augment=None))
    _assert_same(plain, _batches(shards, augment=augment.AugmentSettings("none", 5, 3.0)))


def test_pipeline_randaugment_is_reproducible_resumable_and_only_adds_the_augmentation(shards):
    plain = _batches(shards)
    augmented = _batches(shards, augment=RANDAUGMENT)
    _assert_same(augmented, _batches(shards, augment=RANDAUGMENT))
    _assert_same(augmented[2:], _batches(shards, count=2, start_step=2, augment=RANDAUGMENT))
    assert sum(not np.array_equal(a[0], p[0]) for a, p in zip(augmented, plain)) >= 3
    # Same records, crops and flips: element p is augment(the non-augmented element p, its folded seed).
    for step, ((images, labels), (plain_images, plain_labels)) in enumerate(zip(augmented, plain)):
        np.testing.assert_array_equal(labels, plain_labels)
        for k in range(4):
            seed = image_processing.augment_seed(tf.constant([5, step * 4 + k], tf.int64))
            expected = augment.augment(tf.constant(plain_images[k]), RANDAUGMENT, seed).numpy()
            np.testing.assert_array_equal(images[k], expected)


def test_pipeline_autoaugment_and_unseeded_streams(shards):
    plain = _batches(shards, count=3)
    augmented = _batches(shards, count=3, augment=augment.AugmentSettings("autoaugment"))
    assert any(not np.array_equal(a[0], p[0]) for a, p in zip(augmented, plain))
    dataset = data_utils.get_tfrecords_input_fn(shards, 4, 32, 32, training=True, num_classes=NUM_CLASSES,
                                                augment=RANDAUGMENT)  # not deterministic: a random seed
    images, _ = next(iter(dataset))
    values = images.numpy()
    assert values.shape == (4, 32, 32, 3) and values.min() >= 0 and values.max() <= 255
    assert np.array_equal(values, np.round(values))


def test_evaluation_is_never_augmented(shards):
    _assert_same(_batches(shards, count=2, training=False),
                 _batches(shards, count=2, training=False, augment=RANDAUGMENT))
