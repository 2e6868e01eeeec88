"""utils/dali_utils.py: DALI CPU pipelines against the TF pipeline, the Python index maker, the install hint.

DALI is optional for users but required here: these tests fail when it is missing, unless ALLOW_NO_DALI=1.
"""
import builtins
import dataclasses
import io
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tests._data_helpers import label_of, random_image, write_tfrecord_shards
from utils import dali_utils, data_utils
from utils.errors import UserError

NUM_CLASSES = 11


def _dali_available():
    try:
        dali_utils.require_dali()
        return True
    except UserError:
        if os.environ.get("ALLOW_NO_DALI") == "1":
            return False
        raise


needs_dali = pytest.mark.skipif("not _dali_available()", reason="DALI not installed and ALLOW_NO_DALI=1")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("dali"))
    paths = write_tfrecord_shards(directory, "validation", 1, 8, None, NUM_CLASSES)
    idx = [p + ".idx" for p in paths]
    for path, index in zip(paths, idx):
        assert dali_utils.make_dali_index(path, index) == 8
    return paths, idx


def test_index_format(records):
    paths, idx = records
    lines = open(idx[0]).read().splitlines()
    assert len(lines) == 8
    offsets = [tuple(map(int, line.split())) for line in lines]
    assert offsets[0][0] == 0
    for (o1, s1), (o2, _) in zip(offsets, offsets[1:]):
        assert o1 + s1 == o2
    assert offsets[-1][0] + offsets[-1][1] == os.path.getsize(paths[0])


@needs_dali
def test_eval_matches_tf_pipeline(records):
    paths, idx = records
    dali = list(dali_utils.get_dali_input_fn(paths, idx, 4, 32, 32, training=False, num_classes=NUM_CLASSES)
                .take(2))
    ours = list(data_utils.get_tfrecords_input_fn(paths, 4, 32, 32, training=False,
                                                  num_classes=NUM_CLASSES).take(2))
    means = np.array(dali_utils.CHANNEL_MEANS, np.float32)
    stds = np.array(dali_utils.CHANNEL_STDS, np.float32)
    for (d_images, d_labels), (t_images, t_labels) in zip(dali, ours):
        assert d_images.shape == (4, 32, 32, 3) and d_images.dtype == tf.float32
        assert d_labels.shape == (4,) and d_labels.dtype == tf.int32
        np.testing.assert_array_equal(d_labels.numpy(), t_labels.numpy())
        values = d_images.numpy()
        assert -2.5 < values.min() and values.max() < 2.5  # normalised
        pixels = values * stds + means
        # Different resize filters (DALI antialiased linear vs legacy bilinear) and JPEG decoders.
        assert np.abs(pixels - t_images.numpy()).mean() < 15


@needs_dali
@pytest.mark.parametrize("training", [False, True])
def test_dali_ignores_exif_orientation_as_tensorflows_decoder_does(tmp_path, training):
    """A JPEG whose EXIF Orientation tag says "rotate 90 degrees" (6) keeps its pixels as stored in every door, as
    TF's DecodeJpeg (the original's tf.data and our predict) reads it: DALI's decoders rectify it by default, so
    --dali trained and evaluated on the photo turned upright. Left half black, right half white, 48x64: turned, the
    halves would be top and bottom. Training: the whole image as the crop (min_crop_area 1, aspect 4:3 within the
    crop's range), flips aside."""
    from PIL import Image
    from tests._data_helpers import encode_image, make_example
    array = np.zeros((48, 64, 3), np.uint8)
    array[:, 32:] = 255
    exif = Image.Exif()
    exif[0x0112] = 6
    encoded = encode_image(array, "JPEG", quality=95, exif=exif.tobytes())
    assert Image.open(io.BytesIO(encoded)).getexif()[0x0112] == 6
    path = str(tmp_path / "validation-00000-of-00001")
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(2):
            writer.write(make_example(encoded, 1, 48, 64))
    index = str(tmp_path / "validation-00000-of-00001.idx")
    dali_utils.make_dali_index(path, index)
    images, _ = next(iter(dali_utils.get_dali_input_fn([path], [index], 2, 32, 32, training=training,
                                                       num_classes=NUM_CLASSES, min_crop_area=1.0)))
    pixels = images.numpy() * np.array(dali_utils.CHANNEL_STDS) + np.array(dali_utils.CHANNEL_MEANS)
    for image in pixels:
        image = image[:, ::-1] if image[:, :8].mean() > image[:, -8:].mean() else image  # a flip (training)
        assert image[:, :12].mean() < 40 and image[:, -12:].mean() > 215  # dark left, bright right: as stored
        assert abs(image[:12].mean() - image[-12:].mean()) < 20  # not dark top, bright bottom


@needs_dali
def test_training_pipeline(records):
    paths, idx = records
    dataset = dali_utils.get_dali_input_fn(paths, idx, 4, 32, 24, training=True, deterministic=True, seed=1,
                                           num_classes=NUM_CLASSES)
    assert dataset.options().autotune.enabled is False  # as the tf.data input (test_data_utils)
    labels = set()
    first = None
    for images, batch_labels in dataset.take(4):
        assert images.shape == (4, 32, 24, 3) and images.dtype == tf.float32
        assert np.abs(images.numpy()).max() < 2.5
        labels |= set(batch_labels.numpy().tolist())
        first = images.numpy() if first is None else first
    assert labels <= set(range(8))
    again = next(iter(dali_utils.get_dali_input_fn(paths, idx, 4, 32, 24, training=True, deterministic=True,
                                                   seed=1, num_classes=NUM_CLASSES)))
    np.testing.assert_array_equal(again[0].numpy(), first)


@needs_dali
def test_min_crop_area_reaches_the_dali_crop(tmp_path):
    """--min_crop_area 1 on square images: every training crop is the whole image, so two seeds differ only by the
    mirror."""
    paths = write_tfrecord_shards(str(tmp_path), "train", 1, 8, 40, NUM_CLASSES)
    idx = [path + ".idx" for path in paths]
    for path, index in zip(paths, idx):
        dali_utils.make_dali_index(path, index)

    def images_by_label(seed, min_crop_area):
        dataset = dali_utils.get_dali_input_fn(paths, idx, 4, 32, 32, training=True, deterministic=True, seed=seed,
                                               min_crop_area=min_crop_area, num_classes=NUM_CLASSES)
        found = {}
        for images, labels in dataset.take(4):
            for image, label in zip(images.numpy(), labels.numpy()):
                found.setdefault(int(label), []).append(image)
        return found

    def mismatch(first, second):
        """Largest difference between an image of one run and the closest image (or mirror) of the other."""
        worst = 0.0
        for label in set(first) & set(second):
            for image in first[label]:
                worst = max(worst, min(min(np.abs(image - other).max(), np.abs(image - other[:, ::-1]).max())
                                       for other in second[label]))
        return worst

    assert mismatch(images_by_label(1, 1.0), images_by_label(2, 1.0)) < 1e-5
    assert mismatch(images_by_label(1, 0.05), images_by_label(2, 0.05)) > 0.1


def test_missing_index_file_is_a_user_error(records):
    paths, _ = records
    if not _dali_available():
        pytest.skip("DALI not installed")
    with pytest.raises(UserError, match="index"):
        dali_utils.get_dali_input_fn(paths, [paths[0] + ".nope"], 4, 32, 32, training=False,
                                     num_classes=NUM_CLASSES)


def _indexed_shards(directory, num_records, corrupt=None):
    """(shards in directory/data, their DALI index files in directory/idx)."""
    paths = write_tfrecord_shards(str(directory / "data"), "validation", 1, num_records, 40, NUM_CLASSES,
                                  corrupt=corrupt)
    os.makedirs(directory / "idx")
    idx = [str(directory / "idx" / os.path.basename(path)) for path in paths]
    for path, index in zip(paths, idx):
        dali_utils.make_dali_index(path, index)
    return paths, idx


@needs_dali
@pytest.mark.parametrize("training", [False, True])
def test_a_label_above_num_classes_stops_the_dali_input_naming_it(tmp_path, training):
    """The tf.data pipeline's check and text; DALI does not tell which file and record the label came from."""
    from runtime import inputs
    paths, idx = _indexed_shards(tmp_path, 8, corrupt={(0, 5): "label_out_of_range"})  # label 11 + 5
    iterator = iter(dali_utils.get_dali_input_fn(paths, idx, 4, 32, 32, training=training, num_classes=NUM_CLASSES))
    with pytest.raises(UserError) as info:
        for _ in range(4):
            inputs.next_batch(iterator)
    assert str(info.value) == ("label 16 in the DALI input is outside 1..11: the dataset has more classes than "
                               "--num_classes 11 (pass the dataset's class count, at least 16)")


@needs_dali
def test_runtime_inputs_give_dali_the_class_count(tmp_path):
    from runtime import inputs
    from runtime.config import RunConfig
    from utils.devices import Platform
    _indexed_shards(tmp_path, 6)  # labels 1..6
    config = RunConfig(data_dir=str(tmp_path / "data"), data_idx_dir=str(tmp_path / "idx"), dali=True, num_classes=5,
                       image_size=32, model_dir=str(tmp_path))
    iterator = iter(inputs.eval_dataset(config, Platform(), 2, log=lambda *_: None))
    assert inputs.next_batch(iterator)[1].numpy().tolist() == [0, 1]  # labels 1 and 2 fit 1..5
    with pytest.raises(UserError, match=r"^label 6 in the DALI input is outside 1\.\.5: .*--num_classes 5"):
        for _ in range(3):
            inputs.next_batch(iterator)


@needs_dali
def test_an_image_dali_cannot_decode_is_one_error_line(tmp_path):
    from runtime import inputs
    paths, idx = _indexed_shards(tmp_path, 8, corrupt={(0, 1): "bad_jpeg"})
    iterator = iter(dali_utils.get_dali_input_fn(paths, idx, 4, 32, 32, training=False, num_classes=NUM_CLASSES))
    with pytest.raises(UserError) as info:
        for _ in range(2):
            inputs.next_batch(iterator)
    assert str(info.value).startswith("DALI cannot decode an image of the input (")
    assert "\n" not in str(info.value) and "leave out --dali" in str(info.value)
    assert "python -m dataprep.verify_records --decode <data_dir>" in str(info.value)


@needs_dali
def test_a_dali_evaluation_refuses_a_record_whose_data_no_longer_matches_its_checksum(tmp_path):
    """A payload byte flipped after the index was made: DALI, which checks no data checksum, would evaluate the
    damaged record (and tf.data skip it, another accuracy); the evaluation input refuses it, naming the shard."""
    from runtime import inputs
    from runtime.config import RunConfig
    from tests._data_helpers import corrupt_payload
    from utils.devices import Platform
    paths, _ = _indexed_shards(tmp_path, 6)
    config = RunConfig(data_dir=str(tmp_path / "data"), data_idx_dir=str(tmp_path / "idx"), dali=True,
                       num_classes=NUM_CLASSES, image_size=32, model_dir=str(tmp_path))
    assert inputs.next_batch(iter(inputs.eval_dataset(config, Platform(), 2, log=lambda *_: None)))[0].shape[0] == 2
    corrupt_payload(paths[0], 3)  # its framing and index stay right; the write makes it another file to check
    with pytest.raises(UserError) as info:
        inputs.eval_dataset(config, Platform(), 2, log=lambda *_: None)
    assert str(info.value).startswith(f"{paths[0]} cannot be read to its end: its reader stops after 3 of 6 records "
                                      "(corrupted record at ")
    assert str(info.value).endswith("; " + inputs.dali_damaged_record("evaluate"))


@needs_dali
@pytest.mark.parametrize("kind, reason", [
    ("missing_image", "has no image (image/encoded missing or empty)"),
    ("not_example", "is not a tf.train.Example (protobuf cannot parse it)"),
    # DALI stopped after steps with a 20-line dump and an ERROR line naming no record (an audit, 2026-12-08)
    ("not_image", "holds no image its decoders read (image/encoded begins b'this is ': no JPEG, PNG, BMP, GIF, "
                  "TIFF, WebP or JPEG 2000 signature)")])
@pytest.mark.parametrize("mode", ["train", "evaluate"])
def test_a_record_dali_would_stop_on_is_refused_before_dali_reads_naming_shard_and_record(tmp_path, kind, reason,
                                                                                          mode):
    """DALI's reader fails mid-run on a record that is not an Example (and on one without image/encoded, with a
    C++ assertion about sample dimensions), where tf.data skips both: the check before DALI reads names the shard
    and the record, and records nothing in .checked, so the next run checks the shard again."""
    from runtime import inputs
    from runtime.config import RunConfig
    from utils.devices import Platform
    split = "train" if mode == "train" else "validation"
    paths = write_tfrecord_shards(str(tmp_path / "data"), split, 2, 8, 40, NUM_CLASSES, corrupt={(1, 2): kind})
    os.makedirs(tmp_path / "idx")
    for path in paths:
        dali_utils.make_dali_index(path, str(tmp_path / "idx" / os.path.basename(path)))
    config = RunConfig(data_dir=str(tmp_path / "data"), data_idx_dir=str(tmp_path / "idx"), dali=True,
                       num_classes=NUM_CLASSES, image_size=32, model_dir=str(tmp_path),
                       mode="train" if mode == "train" else "evaluate")
    build = (lambda: inputs.train_dataset(config, Platform(), 0, 1, log=lambda *_: None)) if mode == "train" else (
        lambda: inputs.eval_dataset(config, Platform(), 2, log=lambda *_: None))
    for _ in range(2):
        with pytest.raises(UserError) as info:
            build()
        message = str(info.value)
        assert message.startswith(f"{paths[1]}: record 2 (counting from 0) {reason}")
        assert message.endswith(f": DALI cannot skip a record and would stop the run there; re-create the dataset "
                                f"with python -m dataprep.build_tfrecords, or {mode} without --dali (tf.data skips "
                                "such records, with a warning)")
        assert "\n" not in message


@needs_dali
def test_dali_training_checks_each_shard_once_and_again_when_it_is_rewritten(tmp_path):
    """DALI training reads the train split as its index says: a damaged record would be trained on. Each shard is
    read once with TensorFlow's reader and recorded in the index dir's .checked; a later run reads only a shard
    written again since (here: a payload byte flipped in place, which changes its modification time)."""
    from runtime import inputs
    from runtime.config import RunConfig
    from tests._data_helpers import corrupt_payload
    from utils.devices import Platform
    paths = write_tfrecord_shards(str(tmp_path / "data"), "train", 2, 4, 40, NUM_CLASSES)
    os.makedirs(tmp_path / "idx")
    for path in paths:
        dali_utils.make_dali_index(path, str(tmp_path / "idx" / os.path.basename(path)))
    config = RunConfig(mode="train", data_dir=str(tmp_path / "data"), data_idx_dir=str(tmp_path / "idx"), dali=True,
                       num_classes=NUM_CLASSES, image_size=32, model_dir=str(tmp_path), batch_size=2)

    def train_input_lines():
        lines = []
        inputs.train_dataset(config, Platform(), 0, 1, log=lines.append)
        return [line for line in lines if "checksums" in line]

    first = train_input_lines()
    assert len(first) == 1 and first[0].startswith("Checking the data checksums and features of 2 train shard(s) (")
    assert sorted(os.listdir(tmp_path / "idx" / inputs.CHECKED_SHARDS)) == [
        os.path.basename(path) + ".json" for path in paths]
    assert train_input_lines() == []  # checked before, unchanged
    corrupt_payload(paths[1], 2)
    with pytest.raises(UserError) as info:
        train_input_lines()
    assert str(info.value).startswith(f"{paths[1]} cannot be read to its end: its reader stops after 2 of 4 records")
    assert str(info.value).endswith("; " + inputs.dali_damaged_record("train"))
    assert "would train on a damaged one" in str(info.value) and "or train without --dali" in str(info.value)


@needs_dali
def test_a_dali_train_and_evaluate_refuses_a_damaged_validation_shard_before_it_trains(tmp_path):
    """The evaluation comes after the training: its shards are checked with the train split's, so a damaged one is
    refused at the start, not after hours of training."""
    from runtime import inputs
    from runtime.config import RunConfig
    from tests._data_helpers import corrupt_payload
    from utils.devices import Platform
    train = write_tfrecord_shards(str(tmp_path / "data"), "train", 1, 4, 40, NUM_CLASSES)
    validation = write_tfrecord_shards(str(tmp_path / "data"), "validation", 1, 4, 40, NUM_CLASSES)
    os.makedirs(tmp_path / "idx")
    for path in train + validation:
        dali_utils.make_dali_index(path, str(tmp_path / "idx" / os.path.basename(path)))
    corrupt_payload(validation[0], 1)
    config = RunConfig(mode="train_and_evaluate", data_dir=str(tmp_path / "data"), data_idx_dir=str(tmp_path / "idx"),
                       dali=True, num_classes=NUM_CLASSES, image_size=32, model_dir=str(tmp_path), batch_size=2)
    with pytest.raises(UserError, match="^{} cannot be read to its end: .*or evaluate without --dali".format(
            validation[0])):
        inputs.train_dataset(config, Platform(), 0, 1, log=lambda *_: None)
    inputs.train_dataset(dataclasses.replace(config, mode="train"), Platform(), 0, 1, log=lambda *_: None)


@needs_dali
def test_dali_input_goes_on_when_the_checked_shards_cannot_be_recorded(tmp_path):
    """An index dir where .checked cannot be made (here a file of that name; a read-only dir alike): the shards are
    checked, the run goes on, and says later runs will read them again."""
    from runtime import inputs
    from runtime.config import RunConfig
    from utils.devices import Platform
    _indexed_shards(tmp_path, 4)
    (tmp_path / "idx" / inputs.CHECKED_SHARDS).write_text("")
    config = RunConfig(data_dir=str(tmp_path / "data"), data_idx_dir=str(tmp_path / "idx"), dali=True,
                       num_classes=NUM_CLASSES, image_size=32, model_dir=str(tmp_path))
    for _ in range(2):
        lines = []
        inputs.eval_dataset(config, Platform(), 2, log=lines.append)
        assert [line for line in lines if "checksums" in line][0].startswith("Checking the data checksums and features of 1 "
                                                                              "validation shard(s)")
        assert [line for line in lines if line.startswith("Note: the checked shards cannot be recorded in ")]


@needs_dali
def test_dali_evaluation_reads_no_record_twice_within_an_epoch(tmp_path):
    """num_steps = 8 // 3 = 2 batches of an epoch: 6 distinct records in file order (the original's whole
    batches); the 2 left over start the next epoch."""
    paths, idx = _indexed_shards(tmp_path, 8)
    dataset = dali_utils.get_dali_input_fn(paths, idx, 3, 32, 32, training=False, num_classes=NUM_CLASSES)
    labels = [int(label) for _, batch in dataset.take(8 // 3) for label in batch.numpy()]
    assert labels == [label_of(i, NUM_CLASSES) - 1 for i in range(6)]


def _records_of(directory, arrays):
    """One validation shard holding `arrays` as quality-95 JPEGs (labels 1, 2, ...) and its DALI index."""
    from tests._data_helpers import encode_image, make_example
    path = str(directory / "validation-00000-of-00001")
    with tf.io.TFRecordWriter(path) as writer:
        for label, array in enumerate(arrays, 1):
            writer.write(make_example(encode_image(array, "JPEG", quality=95), label, *array.shape[:2]))
    dali_utils.make_dali_index(path, path + ".idx")
    return [path], [path + ".idx"]


def _dali_pixels(paths, idx, batch_size, height, width):
    images, _ = next(iter(dali_utils.get_dali_input_fn(paths, idx, batch_size, height, width, training=False,
                                                       num_threads=1, num_classes=NUM_CLASSES)))
    return images.numpy() * np.array(dali_utils.CHANNEL_STDS) + np.array(dali_utils.CHANNEL_MEANS)


def _window_of(shapes, height, width):
    """([elongated], [roi_start], [roi_end]) of `dali_utils._eval_resize_window` for images of these (H, W)."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=len(shapes), num_threads=1, device_id=None)
    def pipeline():
        shape = fn.external_source(source=lambda: [np.array([h, w, 3], np.int64) for h, w in shapes], batch=True)
        elongated, start, end = dali_utils._eval_resize_window(
            shape, dali_utils.eval_resize_min(height, width), height, width)
        return fn.cast(elongated, dtype=types.INT32), start, end

    built = pipeline()
    built.build()
    outputs = built.run()
    return ([bool(np.array(outputs[0][i])) for i in range(len(shapes))],
            *([np.array(output[i]) for i in range(len(shapes))] for output in outputs[1:]))


@needs_dali
def test_the_crop_windows_source_region_is_the_central_crops_by_formula():
    """Shorter side to s = 36 (32 px): scale 36 / shorter, resized side n = round(side * scale), source region of n
    / scale centred on the image, crop from round((n - crop) / 2) for crop / scale source pixels. 2x800 at a 32x32
    crop: rows n = 36, start (2 - 2) / 2 + 2 / 18; columns n = 14400, start (800 - 800) / 2 + 7184 / 18. 7x300 (and
    its transpose): scale 36 / 7, n = round(1542.86) = 1543, start (300 - 1543 * 7 / 36) / 2 + 756 * 7 / 36."""
    elongated, starts, ends = _window_of([(2, 800), (300, 7), (7, 300)], 32, 32)
    assert elongated == [False] * 3  # under the real bound (16384)
    scale = 36 / 7
    expected = [([2 / 18, 7184 / 18], 32 / 18),  # (start [y, x], extent on both axes)
                ([(300 - 1543 / scale) / 2 + 756 / scale, 2 / scale], 32 / scale),
                ([2 / scale, (300 - 1543 / scale) / 2 + 756 / scale], 32 / scale)]
    for (start, extent), got_start, got_end in zip(expected, starts, ends):
        np.testing.assert_allclose(got_start, start, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_end - got_start, [extent, extent], rtol=1e-5)


@needs_dali
def test_dali_evaluates_an_elongated_image_from_its_crop_window_with_the_full_resizes_pixels(tmp_path,
                                                                                           monkeypatch):
    """With the bound lowered to 1000 px, 2x800 and 801x3 images (aspect about 1:400 and 1:270; resized 36x14400
    and 9612x36 at a 32x24 crop) take the crop-window resize, the 48x64 photo beside them in the batch the
    original's resize: each must give the pixels of the full resize and crop (the unbounded run), the photo exactly,
    the windows to one level (DALI rounds its uint8 resize output; the window's source region is computed in
    float32)."""
    rng = np.random.default_rng(3)
    paths, idx = _records_of(tmp_path, [random_image(rng, 48, 64), random_image(rng, 2, 800),
                                        random_image(rng, 801, 3)])
    full = _dali_pixels(paths, idx, 3, 32, 24)
    monkeypatch.setattr(dali_utils, "EVAL_RESIZE_MAX_SIDE", 1000)
    assert _window_of([(48, 64), (2, 800), (801, 3)], 32, 24)[0] == [False, True, True]  # the branch taken
    windowed = _dali_pixels(paths, idx, 3, 32, 24)
    assert windowed.shape == (3, 32, 24, 3)
    np.testing.assert_allclose(windowed[0], full[0], atol=1e-3)  # float32 normalisation round trip
    for window, reference in zip(windowed[1:], full[1:]):
        assert np.abs(window - reference).max() < 1 + 1e-3 and np.abs(window - reference).mean() < 0.1
        assert 0 - 1e-3 < window.min() and window.max() < 255 + 1e-3 and window.std() > 5  # an image, not a fill


@needs_dali
def test_dali_evaluation_of_a_1x16000_image_stays_in_a_photos_memory(tmp_path):
    """The original's resize of a 1x16000 JPEG at 128 px would be 146x2,336,000 uint8 RGB (1.0 GB); the crop-window
    resize keeps the process's peak RSS within 300 MB of where it was. (ru_maxrss is the process's lifetime peak: a
    regression would go unseen only if the process had already peaked 700 MB above its size at this test.) Its
    pixels are tf.data's to the two pipelines' usual distance (decoders, resize filters, pixel centres)."""
    import resource
    rng = np.random.default_rng(5)
    paths, idx = _records_of(tmp_path, [random_image(rng, 1, 16000)])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    pixels = _dali_pixels(paths, idx, 1, 128, 128)[0]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 300, f"peak RSS grew {grown_mb:.0f} MB"
    assert pixels.shape == (128, 128, 3)
    ours = next(iter(data_utils.get_tfrecords_input_fn(paths, 1, 128, 128, training=False,
                                                       num_classes=NUM_CLASSES)))[0].numpy()[0]
    # a 1-pixel-high noisy strip magnified 146 times: DALI samples at pixel centres, TF's legacy resize half a source
    # pixel earlier, so the difference is larger than for a photo (about 8 levels) but of its order
    assert np.abs(pixels - ours).mean() < 25


def test_require_dali_message_when_missing(monkeypatch):
    real_import = builtins.__import__

    def no_dali(name, *args, **kwargs):
        if name.startswith("nvidia.dali") or name == "nvidia":
            raise ImportError("No module named 'nvidia.dali'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dali)
    with pytest.raises(UserError, match="requirements-dali.txt") as info:
        dali_utils.require_dali()
    assert "\n" not in str(info.value)


def _pipeline_ops(use_gpu, training):
    """(operator, device, arguments) of each operator of the pipeline dali_utils builds, from DALI's own graph
    (built, not run: a GPU pipeline cannot run without CUDA)."""
    pipeline = dali_utils._build_pipeline(["train.tfrecord"], ["train.idx"], 4, 64, 48, training, 2, 7, 1, 0,
                                          use_gpu, 0.25)
    pipeline._build_graph()  # DALI's graph construction: every operator with its arguments, no device touched
    ops = []
    for op in pipeline._ops:
        lines = str(op.spec).splitlines()
        arguments = {}
        for line in lines[lines.index("  Arguments:") + 1:] if "  Arguments:" in lines else []:
            key, _, value = line.strip().partition(": ")
            if not key.startswith("_") and key not in ("device", "preserve_name"):
                arguments[key] = value
        device = next((line.split(": ", 1)[1] for line in lines if line.strip().startswith("device: ")), "cpu")
        ops.append((lines[0].replace("OpSpec for ", ""), device, arguments))
    return ops


@needs_dali
@pytest.mark.gpu_path
@pytest.mark.parametrize("training", [True, False])
def test_gpu_pipeline_has_the_cpu_pipelines_operators_and_parameters(training):
    """The GPU pipeline (nvJPEG "mixed" decode, GPU resize / crop / normalise) is the CPU pipeline, whose output
    test_dali_matches_tf_eval_pipeline checks, with other devices: same operators, same order, same arguments."""
    cpu, gpu = _pipeline_ops(False, training), _pipeline_ops(True, training)
    assert [(name, arguments) for name, _, arguments in gpu] == [(name, arguments) for name, _, arguments in cpu]
    decoder = next(op for op in gpu if "decoders" in op[0])
    assert decoder[1] == "mixed" and next(op for op in cpu if "decoders" in op[0])[1] == "cpu"
    after_decode = [(name.rstrip(":"), device) for name, device, _ in gpu if name.rstrip(":") in ("Resize",
                                                                                               "CropMirrorNormalize")]
    # evaluation: the crop-window resize of an elongated image, then the original's resize of the shorter side
    resizes = [("Resize", "gpu")] * (1 if training else 2)
    assert after_decode == resizes + [("CropMirrorNormalize", "gpu")]
    normalize = next(arguments for name, _, arguments in cpu if "CropMirrorNormalize" in name)
    assert normalize["crop"].startswith("[64.0") and "123.68" in normalize["mean"] and "58.395" in normalize["std"]
    if training:
        crop = next(arguments for name, _, arguments in cpu if "RandomCrop" in name)
        assert crop["random_area"].startswith("[0.25") and crop["num_attempts"] == "100"


@needs_dali
def test_a_dali_training_stopped_by_a_label_after_its_first_step_leaves_no_start_checkpoint(tmp_path):
    """DALI checks a batch's labels as it delivers it: a label above --num_classes in the second batch stopped the
    run after one step with its start checkpoint kept, and the corrected command was refused as contradicting that
    checkpoint's --num_classes (an audit, 2026-12-08). The start checkpoint now goes, as when the tf.data pipeline
    stops on such a label before the first step, and the corrected command trains."""
    from tests._cli import main_in_process
    paths = write_tfrecord_shards(str(tmp_path / "data"), "train", 1, 16, 40, NUM_CLASSES,
                                  corrupt={(0, 11): "label_out_of_range"})  # label 16, delivered after the first batch
    os.makedirs(tmp_path / "idx")
    dali_utils.make_dali_index(paths[0], str(tmp_path / "idx" / os.path.basename(paths[0])))
    model_dir = tmp_path / "model"
    train = ("--mode", "train", "--data_dir", tmp_path / "data", "--dali", "--data_idx_dir", tmp_path / "idx",
             "--image_size", 32, "--batch_size", 4, "--num_iter", 8, "--iter_unit", "batch", "--seed", 1,
             "--model_dir", model_dir, "--results_dir", tmp_path / "results", "--no_progress", "--cpu")
    failed = main_in_process(*train, "--num_classes", 11, check=False)
    assert failed.returncode == 2, failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith("ERROR: label 16 in the DALI input is outside 1..11")
    assert re.search(r"^Removed {}: this run stopped on its input before its first checkpoint after the start \(the "
                     r"[1-8] steps? it trained (is|are) lost either way\), so the next starts afresh$".format(
                         re.escape(str(model_dir / "model.ckpt-0"))), failed.stdout, re.M), failed.stdout[-2000:]
    assert tf.train.latest_checkpoint(str(model_dir)) is None
    main_in_process(*train, "--num_classes", 16)
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-8")
