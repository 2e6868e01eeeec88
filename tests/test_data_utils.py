"""utils/data_utils.py: TFRecord pipeline (labels, sharding, determinism, corrupt data), synthetic data."""
import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings, strategies as st

from tests._data_helpers import (encode_image, label_of, make_example, random_image, skipped_total, truncate_file,
                                 write_tfrecord_shards, zero_data_checksums)
from utils import data_utils
from utils.errors import UserError

NUM_CLASSES = 101


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("records")
    return write_tfrecord_shards(str(directory), "train", 4, 6, None, NUM_CLASSES, with_bbox=True)


def _labels(dataset, batches):
    return np.concatenate([labels.numpy() for _, labels in dataset.take(batches)])


def test_eval_batches_and_label_shift(shards):
    dataset = data_utils.get_tfrecords_input_fn(shards[:1], 3, 32, 32, training=False, num_classes=NUM_CLASSES)
    images, labels = next(iter(dataset))
    assert images.shape == (3, 32, 32, 3) and images.dtype == tf.float32
    assert labels.dtype == tf.int32
    assert 0 <= images.numpy().min() and images.numpy().max() <= 255
    # One file: stored order; labels 1-based in the records, 0-based out; repeats forever.
    expected = [label_of(i, NUM_CLASSES) - 1 for i in range(6)]
    assert list(_labels(dataset, 4)) == expected * 2


def test_training_batches(shards):
    dataset = data_utils.get_tfrecords_input_fn(shards, 4, 32, 40, training=True, num_classes=NUM_CLASSES)
    images, labels = next(iter(dataset))
    assert images.shape == (4, 32, 40, 3) and images.dtype == tf.float32 and labels.dtype == tf.int32


def test_every_pipeline_runs_without_the_autotuning_model(shards):
    # With it, deleting an iterator waits for its optimization thread, which TF 2.21 does not always wake: up to a
    # minute at the end of a training run. The pipelines set their parallelism themselves instead.
    for dataset in (data_utils.get_tfrecords_input_fn(shards, 4, 32, 32, training=True, num_classes=NUM_CLASSES),
                    data_utils.get_tfrecords_input_fn(shards, 4, 32, 32, training=False, num_classes=NUM_CLASSES,
                                                      num_epochs=1),
                    data_utils.get_synth_input_fn(4, 32, 32)):
        assert dataset.options().autotune.enabled is False
        assert next(iter(dataset))[0].shape == (4, 32, 32, 3)


def test_sharding_is_disjoint_and_complete(shards):
    seen = []
    for worker in range(2):
        dataset = data_utils.get_tfrecords_input_fn(shards, 1, 32, 32, training=True, deterministic=True, seed=1,
                                                    num_shards=2, shard_index=worker, num_classes=NUM_CLASSES)
        seen.append(set(_labels(dataset, 12)))  # one epoch of this worker's 2 files
        assert len(seen[-1]) == 12
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == {label_of(i, NUM_CLASSES) - 1 for i in range(24)}


def test_same_seed_same_batches_different_seed_differs(shards):
    def batches(seed, start_step=0, count=4):
        dataset = data_utils.get_tfrecords_input_fn(shards, 4, 32, 32, training=True, deterministic=True,
                                                    seed=seed, num_classes=NUM_CLASSES, start_step=start_step)
        return [(i.numpy(), l.numpy()) for i, l in dataset.take(count)]

    first, again, other = batches(5), batches(5), batches(6)
    for (i1, l1), (i2, l2) in zip(first, again):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(l1, l2)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(first, other))
    # Resume: starting at step 2 gives the batches 2, 3 of the full stream.
    resumed = batches(5, start_step=2, count=2)
    for (i1, l1), (i2, l2) in zip(first[2:], resumed):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(l1, l2)


def test_corrupt_records_are_skipped_and_counted(tmp_path, capfd):
    corrupt = {(0, 1): "bad_jpeg", (0, 3): "missing_image", (1, 0): "not_example"}
    paths = write_tfrecord_shards(str(tmp_path), "validation", 2, 4, 40, NUM_CLASSES, corrupt=corrupt)
    dataset = data_utils.get_tfrecords_input_fn(paths, 2, 32, 32, training=False, num_classes=NUM_CLASSES)
    labels = _labels(dataset, 2)  # the first 4 of the 5 valid records
    good = [s * 4 + i for s in range(2) for i in range(4) if (s, i) not in corrupt]
    assert list(labels) == [label_of(i, NUM_CLASSES) - 1 for i in good[:4]]
    log = capfd.readouterr().err
    assert skipped_total(log) >= 2  # the 3rd may still be ahead in the pipeline
    assert "skipped corrupt record" in log and paths[0] in log
    # what such a record can be: TensorFlow's own log line of the reason is hidden by default (utils/quiet.py)
    assert "(an image that does not decode, no image, or not a tf.train.Example)" in log


def test_a_finite_evaluation_reads_each_record_once_and_counts_what_it_skipped(tmp_path, capfd):
    """num_epochs=1: every good record exactly once, whole batches only, and the skipped count includes records
    dropped at the very end of the stream (no later record shows their gap)."""
    corrupt = {(0, 2): "bad_jpeg", (1, 0): "missing_image", (2, 7): "not_example"}
    paths = write_tfrecord_shards(str(tmp_path), "validation", 3, 8, 40, NUM_CLASSES, corrupt=corrupt)
    skipped = data_utils.SkippedRecords()
    dataset = data_utils.get_tfrecords_input_fn(paths, 4, 32, 32, training=False, num_classes=NUM_CLASSES,
                                                num_epochs=1, skipped=skipped)
    labels = [int(label) for _, batch in dataset for label in batch.numpy()]
    good = [s * 8 + i for s in range(3) for i in range(8) if (s, i) not in corrupt]
    assert len(labels) == 20  # 21 good records, batches of 4
    assert labels == [label_of(i, NUM_CLASSES) - 1 for i in good[:20]]  # file order, none twice
    assert skipped.count == 3
    assert skipped_total(capfd.readouterr().err) == 3
    two = data_utils.get_tfrecords_input_fn(paths, 4, 32, 32, training=False, num_classes=NUM_CLASSES,
                                            num_epochs=2)
    assert sum(int(batch.shape[0]) for _, batch in two) == 40  # 42 good reads, then the end


def _labelled_shards(directory, labels):
    """One shard `validation-00000-of-00001` with one 40 px record per stored label."""
    rng = np.random.default_rng(0)
    path = str(directory / "validation-00000-of-00001")
    with tf.io.TFRecordWriter(path) as writer:
        for index, label in enumerate(labels):
            writer.write(make_example(encode_image(random_image(rng, 40, 40)), label, 40, 40, "i%d.JPEG" % index))
    return path


def _first_error(dataset, wrap=lambda d: d):
    from runtime import inputs
    iterator = iter(wrap(dataset))
    with pytest.raises(UserError) as info:
        for _ in range(20):
            inputs.next_batch(iterator)
    return str(info.value)


@pytest.mark.parametrize("training", [False, True])
def test_a_label_above_num_classes_stops_the_run_naming_it(tmp_path, training):
    path = _labelled_shards(tmp_path, [1, 2, 3, 12, 4, 5, 6, 7])
    dataset = data_utils.get_tfrecords_input_fn([path], 2, 32, 32, training=training, num_classes=10)
    assert _first_error(dataset) == (
        "label 12 of {} record 3 is outside 1..10: the dataset has more classes than --num_classes 10 (pass the "
        "dataset's class count, at least 12)".format(path))


def test_a_label_below_1_stops_the_run_naming_it(tmp_path):
    path = _labelled_shards(tmp_path, [1, 2, -1, 3])
    dataset = data_utils.get_tfrecords_input_fn([path], 2, 32, 32, training=False, num_classes=10)
    assert _first_error(dataset) == (
        "label -1 of {} record 2 is outside 1..10: labels must be 1-based (1..K, as dataprep writes them) (-1: "
        "the record has no image/class/label); re-create the dataset with python -m dataprep.build_tfrecords"
        .format(path))
    path = _labelled_shards(tmp_path, [0, 1])
    dataset = data_utils.get_tfrecords_input_fn([path], 1, 32, 32, training=False, num_classes=10)
    assert _first_error(dataset).startswith("label 0 of {} record 0 is outside 1..10: labels must be 1-based"
                                            .format(path))


def test_the_label_error_is_the_same_through_device_prefetch_and_tf_distribute(tmp_path):
    path = _labelled_shards(tmp_path, [1, 2, 3, 12])
    dataset = data_utils.get_tfrecords_input_fn([path], 2, 32, 32, training=True, num_classes=10)
    expected = _first_error(dataset)
    assert expected.startswith("label 12 of {} record 3".format(path))
    assert _first_error(dataset, lambda d: d.apply(tf.data.experimental.prefetch_to_device("/cpu:0", 2))) == expected
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    assert _first_error(dataset, lambda d: strategy.distribute_datasets_from_function(lambda _: d)) == expected


def test_other_pipeline_errors_are_not_taken_for_label_errors():
    assert data_utils.label_range_error(tf.errors.InvalidArgumentError(None, None, "assertion failed: [x]")) is None


def test_training_survives_corrupt_records(tmp_path, capfd):
    corrupt = {(0, 0): "bad_jpeg", (0, 2): "not_example"}
    paths = write_tfrecord_shards(str(tmp_path), "train", 1, 6, 40, NUM_CLASSES, corrupt=corrupt)
    dataset = data_utils.get_tfrecords_input_fn(paths, 2, 32, 32, training=True, deterministic=True, seed=0,
                                                num_classes=NUM_CLASSES)
    assert len(_labels(dataset, 6)) == 12
    assert skipped_total(capfd.readouterr().err) >= 4


def test_file_checks(tmp_path):
    paths = write_tfrecord_shards(str(tmp_path), "train", 2, 3, 32, NUM_CLASSES)
    assert data_utils.check_tfrecord_files(paths) == [3, 3]
    truncate_file(paths[1], 7)
    with pytest.raises(UserError, match="truncated") as info:
        data_utils.check_tfrecord_files(paths)
    assert paths[1] in str(info.value)
    with pytest.raises(UserError, match="no TFRecord"):
        data_utils.check_tfrecord_files([])
    with pytest.raises(UserError, match="no TFRecord"):
        data_utils.get_tfrecords_input_fn([], 2, 32, 32, training=True)
    with pytest.raises(UserError, match="not found"):
        data_utils.check_tfrecord_files([str(tmp_path / "missing")])
    (tmp_path / "text").write_bytes(b"this is not a tfrecord file at all")
    with pytest.raises(UserError, match=str(tmp_path / "text")):
        data_utils.check_tfrecord_files([str(tmp_path / "text")])
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(UserError, match="no record"):
        data_utils.check_tfrecord_files([str(tmp_path / "empty")])


@pytest.mark.parametrize("kind, reason", [
    ("not_example", "it is not a tf.train.Example"), ("missing_image", "it has no image/encoded feature"),
    ("bad_jpeg", "its image/encoded does not decode: ")])
def test_first_records_that_cannot_be_used_in_every_file_are_an_error(tmp_path, kind, reason):
    """Every record dropped would leave the repeated training stream nothing to yield, for ever."""
    paths = write_tfrecord_shards(str(tmp_path), "train", 2, 3, 32, NUM_CLASSES,
                                  corrupt={(0, 0): kind, (1, 0): kind})
    with pytest.raises(UserError, match="the first record of each of the 2 TFRecord files cannot be used") as info:
        data_utils.check_tfrecord_files(paths)
    assert f"(first: {paths[0]}: {reason}" in str(info.value)
    assert "function_node" not in str(info.value) and "[Op:" not in str(info.value)
    # One file with a usable first record is enough: the bad ones are skipped as corrupt records, silently here.
    paths = write_tfrecord_shards(str(tmp_path / "one_good"), "train", 2, 3, 32, NUM_CLASSES, corrupt={(0, 0): kind})
    logged = []
    assert data_utils.check_tfrecord_files(paths, logged.append) == [3, 3] and logged == []


def test_boxes_in_pixels_are_an_error_for_the_training_crop_only(tmp_path):
    """TF's crop refuses boxes outside 0..1, so every training record would be dropped; evaluation (and DALI's
    crop) do not read the boxes."""
    paths = write_tfrecord_shards(str(tmp_path), "train", 2, 3, 32, NUM_CLASSES,
                                  corrupt={(s, i): "pixel_bbox" for s in range(2) for i in range(3)})
    with pytest.raises(UserError, match=re.escape(
            f"(first: {paths[0]}: its bounding box (ymin 2, xmin 3, ymax 30, xmax 29) is not in fractions of the "
            "image's height and width (0..1), which the training crop needs: pixel coordinates?)")):
        data_utils.check_tfrecord_files(paths, boxes=True)
    assert data_utils.check_tfrecord_files(paths) == [3, 3]
    boxed = write_tfrecord_shards(str(tmp_path / "fractions"), "train", 1, 2, 32, NUM_CLASSES, with_bbox=True)
    assert data_utils.check_tfrecord_files(boxed, boxes=True) == [2]


@pytest.mark.parametrize("training, kind, reason", [
    (True, "pixel_bbox", "All bounding box coordinates must be in [0.0, 1.0]: 2"),
    (False, "truncated_jpeg", "jpeg::Uncompress failed. Invalid JPEG data or crop window")])
def test_a_repeated_input_that_can_use_no_record_stops_with_the_reason(tmp_path, training, kind, reason):
    """Without the stand-in record, the repeated stream would read failures for ever and never yield a batch."""
    records, num_threads = 7, 2
    paths = write_tfrecord_shards(str(tmp_path), "train", 2, records, 32, NUM_CLASSES,
                                  corrupt={(s, i): kind for s in range(2) for i in range(records)})
    dataset = data_utils.get_tfrecords_input_fn(paths, 2, 32, 32, training=training, num_threads=num_threads,
                                                deterministic=True, seed=0, num_classes=NUM_CLASSES)
    message = _first_error(dataset)
    in_a_row = 2 * records + 4 * num_threads + 64  # a pass, and the records the parallel map may hold
    assert message.startswith(f"none of the last {in_a_row} records read could be used (each was skipped as "
                              f"corrupt), more than a whole pass over the files ({2 * records} records), so the input "
                              "would never yield a batch; record "), message
    match = re.search(r"; record (\d+) of (\S+): (.*)\. Re-create the dataset", message)
    assert match and match.group(2) in paths and 0 <= int(match.group(1)) < records, message
    assert match.group(3) == reason


def test_the_reason_a_record_fails_is_found_under_a_seeded_runs_op_determinism(tmp_path):
    """The training crop's failure was re-run unseeded, which op determinism (on in a --seed run) refuses: a dataset
    rewritten under a seeded training ended it in a traceback instead of the one-line reason."""
    from tensorflow.python.framework import config as tf_config
    paths = write_tfrecord_shards(str(tmp_path), "train", 1, 2, 32, NUM_CLASSES, corrupt={(0, 1): "pixel_bbox"})
    before = tf_config.is_op_determinism_enabled()
    tf_config.enable_op_determinism()
    try:
        assert data_utils._record_failure(paths[0], 1, training=True) == \
            "All bounding box coordinates must be in [0.0, 1.0]: 2"
        assert data_utils._record_failure(paths[0], 0, training=True) is None
    finally:
        (tf_config.enable_op_determinism if before else tf_config.disable_op_determinism)()


def test_a_few_usable_records_among_failures_keep_a_repeated_input_going(tmp_path, capfd):
    """One usable record per file is enough: no pass is all failures, so the stream never stops (the stand-in
    record is never used); the failures are skipped and counted."""
    records = 30
    corrupt = {(s, i): "truncated_jpeg" for s in range(2) for i in range(records) if i != 17}
    paths = write_tfrecord_shards(str(tmp_path), "train", 2, records, 32, NUM_CLASSES, corrupt=corrupt)
    dataset = data_utils.get_tfrecords_input_fn(paths, 2, 32, 32, training=True, num_threads=1,
                                                deterministic=True, seed=0, num_classes=NUM_CLASSES)
    labels = _labels(dataset, 12)  # 24 images: twelve passes over the 60 records
    assert sorted(set(labels.tolist())) == sorted({label_of(17, NUM_CLASSES) - 1,
                                                   label_of(records + 17, NUM_CLASSES) - 1})
    assert skipped_total(capfd.readouterr().err) >= 11 * 58


def test_an_image_size_more_than_twice_the_first_images_side_is_noted(tmp_path):
    paths = write_tfrecord_shards(str(tmp_path), "train", 2, 2, (24, 30), NUM_CLASSES)
    logged = []
    data_utils.check_tfrecord_files(paths, logged.append, image_size=61)
    assert logged == ["Note: the first image of each of the 2 files is at most 30 px a side, and --image_size 61 "
                      "enlarges such images 2.0 times; --image_size 30 would train at their size, at a fraction of "
                      "the cost"]
    for image_size in (60, 32, None):  # up to twice their side: nothing to say
        logged = []
        data_utils.check_tfrecord_files(paths, logged.append, image_size=image_size)
        assert logged == []


def test_a_first_record_failing_its_data_checksum_is_named_and_all_of_them_are_an_error(tmp_path):
    paths = write_tfrecord_shards(str(tmp_path), "train", 3, 2, 32, NUM_CLASSES)
    zero_data_checksums(paths[1])
    logged = []
    assert data_utils.check_tfrecord_files(paths, logged.append) == [2, 2, 2]
    assert len(logged) == 1 and logged[0].startswith(f"WARNING: the first record of {paths[1]} fails its data "
                                                     "checksum (corrupted record at 12)")
    assert "none of its 2 records will be read" in logged[0]
    # ... which is what TensorFlow's reader does: nothing of that file
    assert list(tf.data.TFRecordDataset(paths[1]).ignore_errors()) == []
    for path in paths:
        zero_data_checksums(path)
    with pytest.raises(UserError, match="no record of the 3 TFRecord files can be read: the first record of each "
                                        "fails its data checksum"):
        data_utils.check_tfrecord_files(paths)


def test_synthetic_data():
    dataset = data_utils.get_synth_input_fn(8, 32, 32, num_classes=11, seed=3)
    (i1, l1), (i2, l2) = list(dataset.take(2))
    assert i1.shape == (8, 32, 32, 3) and i1.dtype == tf.float32 and l1.shape == (8,) and l1.dtype == tf.int32
    np.testing.assert_array_equal(i1, i2)  # one batch, repeated
    np.testing.assert_array_equal(l1, l2)
    values = i1.numpy()
    assert abs(values.mean() - 127) < 2 and 45 < values.std() < 60  # truncated at 2 sigma: std ~ 0.88 * 60
    assert values.min() >= 127 - 120 - 1e-3 and values.max() <= 127 + 120 + 1e-3
    assert l1.numpy().min() >= 0 and l1.numpy().max() <= 9
    again = data_utils.get_synth_input_fn(8, 32, 32, num_classes=11, seed=3)
    np.testing.assert_array_equal(next(iter(again))[0], i1)
    assert next(iter(data_utils.get_synth_input_fn(2, 16, 16)))[0].shape == (2, 16, 16, 3)


# ------------------------------------------------------------------ fuzzing the parse/decode/filter path
_VALID = make_example(encode_image(random_image(np.random.default_rng(0), 32, 32)), 3, 32, 32)
_floats = st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=3)
_fuzzed_example = st.builds(
    lambda image, label, ymin, xmin, ymax, xmax: tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=image)),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=label)),
        "image/object/bbox/ymin": tf.train.Feature(float_list=tf.train.FloatList(value=ymin)),
        "image/object/bbox/xmin": tf.train.Feature(float_list=tf.train.FloatList(value=xmin)),
        "image/object/bbox/ymax": tf.train.Feature(float_list=tf.train.FloatList(value=ymax)),
        "image/object/bbox/xmax": tf.train.Feature(float_list=tf.train.FloatList(value=xmax)),
    })).SerializeToString(),
    st.lists(st.one_of(st.binary(max_size=64), st.just(_VALID[:0]),
                       st.sampled_from([encode_image(random_image(np.random.default_rng(1), 8, 8))])), max_size=2),
    st.lists(st.integers(-2 ** 63, 2 ** 63 - 1), max_size=2), _floats, _floats, _floats, _floats)
_record = st.one_of(st.binary(max_size=200), _fuzzed_example,
                    st.binary(max_size=40).map(lambda tail: _VALID[:len(_VALID) // 2] + tail))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_record, min_size=1, max_size=4), training=st.booleans())
def test_fuzzed_records_never_crash(tmp_path, records, training):
    path = str(tmp_path / "fuzz.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(_VALID)  # at least one good record, or the endless repeat would never yield
        for record in records:
            writer.write(record)
    dataset = data_utils.get_tfrecords_input_fn([path], 1, 16, 16, training=training, deterministic=True,
                                                num_classes=NUM_CLASSES)
    from runtime.inputs import next_batch
    iterator = iter(dataset)
    for _ in range(len(records) + 1):
        try:
            images, labels = next_batch(iterator)
        except UserError as error:  # a readable record whose label does not fit: the one clean stop
            assert re.fullmatch(r"label -?\d+ of \S+ record \d+ is outside 1\.\.%d: .*" % NUM_CLASSES, str(error))
            return
        assert images.shape == (1, 16, 16, 3)
        assert np.isfinite(images.numpy()).all()
        assert 0 <= labels.numpy()[0] < NUM_CLASSES


def test_read_for_dali_counts_like_the_reader_and_finds_the_first_record_dali_would_stop_on(tmp_path):
    """A clean shard: its record count, no error, no record. A record without an image, one that is not an Example
    and a damaged record after them: the count and error of read_to_end, and the first of the two records."""
    from tests._data_helpers import corrupt_payload
    clean, = write_tfrecord_shards(str(tmp_path / "clean"), "train", 1, 7, 40, NUM_CLASSES)
    assert data_utils.read_for_dali(clean) == (7, None, None) and data_utils.read_to_end(clean) == (7, None)
    for first, kind, reason in ((1, "missing_image", "has no image (image/encoded missing or empty)"),
                                (2, "not_example", "is not a tf.train.Example (protobuf cannot parse it)")):
        path, = write_tfrecord_shards(str(tmp_path / kind), "train", 1, 7, 40, NUM_CLASSES,
                                      corrupt={(0, first): kind, (0, 4): kind})
        assert data_utils.read_for_dali(path) == (7, None, (first, reason))
        corrupt_payload(path, 5)
        read, error = data_utils.read_to_end(path)
        assert (read, error is not None) == (5, True)
        assert data_utils.read_for_dali(path) == (5, error, (first, reason))
