"""tf.data input pipelines: TFRecords, synthetic data and predict inputs (docs/ORIGINAL.md#input-pipeline).

Corrupt data inside shards (design)
-----------------------------------
A multi-day run must survive a bad record, so every record carries its position in the stream (`enumerate`)
and, in a small ring buffer variable written by a cheap sequential map, its (file index, record index in file).
The expensive parallel map checks what can be checked without failing (missing `image/encoded`) with
`tf.debugging.Assert`, whose message names the file; undecodable JPEGs and bytes that are not an Example fail
inside their own ops. Failed elements are dropped by `ignore_errors(log_warning=True)` (TF logs the reason).
Right after it a sequential `scan` compares each surviving position with the expected one; a gap means records
were dropped: it adds their number to a `tf.Variable` counter (readable through `SkippedRecords`) and prints
`WARNING: skipped corrupt record(s) <n> of <file> ... - total skipped: <count>` to stderr (`WARNING: skipped <n>
record(s) of unreadable stream data ...` when no record of the gap can be named). A finite stream
(`num_epochs`) ends with one end marker added after `ignore_errors`, so records dropped at its very end are
counted and reported too; the marker is removed before batching. On valid records the cost is one scatter into
the ring buffer and one integer comparison: no Python, no py_function.
A shard whose framing is broken (truncated copy, wrong file) is not a "bad record": `check_tfrecord_files`
scans the framing of every file before training and raises UserError naming the file. It also reads each file's
first record: when none of them can be used (no data checksums, other feature keys, an image format the decoder
refuses, for the training crop boxes outside 0..1) every record would be dropped and the repeated stream would
never yield, so that is a UserError too. What that check cannot see (every image truncated after a valid header)
a repeated stream catches itself: when more than a pass of records in a row has been dropped, `remember` swaps
the next record for a stand-in that survives, and `check_gap` stops the stream at it with an error naming the
record it replaced; `no_usable_record_error` re-reads that record for the reason.

Labels (design)
---------------
A label outside 1..num_classes is not a corrupt record but a dataset that does not fit the model (more classes
than --num_classes, or labels that are not 1-based): skipping it would train on part of the data without saying
so. The raw label is carried through `ignore_errors` and checked by an Assert in a map after the `scan`, so the
error stops the stream instead of being swallowed. Its message holds `LABEL_CHECK_MARKER` and the fields of the
report; `label_range_error` turns the InvalidArgumentError that reaches `next(iterator)` (through prefetch and
tf.distribute's iterators) into one UserError line. DALI (utils/dali_utils.py) uses the same check.

Determinism and resume (design)
-------------------------------
With `deterministic=True` the file order, interleave and parallel map are deterministic, the shuffle seed is
fixed (13 * shard_index, as the original, plus 7919 * seed), and the random crop and flip use stateless ops
seeded with (seed, position of the element in this worker's stream), as does the optional AutoAugment /
RandAugment (`augment`; its seed is folded from the same element seed). The stream is therefore a pure function
of (files, seed, shard, augment settings); the element at position p is the same whether reached by iterating or
by `start_step` (keyword-only): `start_step=s` skips s * batch_size records *before* decoding (records are read,
not decoded) and continues with the same positions, so a resumed run sees exactly the batches it would have seen.
Exact as long as no corrupt record was dropped before the resume point; each dropped record shifts the later
batch boundaries by one element (the records and their augmentation stay the same). Alternatively checkpoint the
iterator itself with `tf.train.Checkpoint(data=iterator)` (exact, but it stores the 4096-record shuffle buffer).

No autotuning model (design)
----------------------------
Every pipeline here runs with tf.data's autotuning off (`without_autotuning`) and its parallelism set: the
interleave reads INTERLEAVE_CYCLE files at once, the decode map runs `num_threads` calls (the original's 10), and
`prefetch(AUTOTUNE)` keeps its own buffer sizing, which does not use the model. With autotuning on, deleting an
iterator waits for the model's optimization thread, which TF 2.21 does not always wake: its period grows to a
minute, and the end of a training run (its iterator dropped before the evaluation) then waited 7-65 s for nothing
(docs/PERFORMANCE.md, Deleting an iterator).
"""
from __future__ import annotations

import functools
import inspect
import os
import re
import sys

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

from utils import defaults, image_processing, pixels
from utils.errors import UserError

SHUFFLE_BUFFER = 4096
INTERLEAVE_CYCLE = 10
INTERLEAVE_BLOCK = 8
# Positions remembered for the corrupt-record report; must exceed the records in flight in the parallel map.
_POSITION_RING = 1 << 16

# What predict decodes: TensorFlow's DecodeJpeg (image_processing.decode_image) reads JPEG and PNG, not BMP.
SUPPORTED_IMAGE_FORMATS = ("JPEG", "PNG")
MAX_IMAGE_SIDE = pixels.MAX_IMAGE_SIDE  # and pixels.MAX_IMAGE_PIXELS: dataprep's limits too

# The functions handed to tf.data branch on tensors only through graph ops (tf.cond, tf.where), so they are traced
# as written: AutoGraph's conversion of them would only add seconds to every run's start.
as_written = tf.autograph.experimental.do_not_convert


# ---------------------------------------------------------------------------------------------- TFRecords
# TensorFlow's C++ record reader without the deprecation notice of tf_record_iterator's wrapper (tf.data's reader
# would cost ~20 ms per file to build; this ~0.1 ms).
_read_records_in_cpp = inspect.unwrap(tf.compat.v1.io.tf_record_iterator)


def _first_record(filename, boxes):
    """(problem, shape) of the first record of `filename`: shape [height, width, channels] of its image; problem
    None when the record reads, parses and decodes as training needs, else (checksum, why): `checksum` True when
    TensorFlow's reader rejects the record itself, then stops there, so the file yields none of its records; False
    when the record reads but is not an Example with a decodable image/encoded, or (`boxes`: the tf.data training
    crop reads them) its bounding boxes are not fractions of the image's sides."""
    try:
        record = next(iter(_read_records_in_cpp(filename)))
    except tf.errors.OpError as error:
        return (True, op_error_text(error)), None
    try:
        example = tf.train.Example.FromString(record)
    except DecodeError:
        return (False, "it is not a tf.train.Example"), None
    feature = example.features.feature
    images = feature["image/encoded"].bytes_list.value
    if not images or not images[0]:
        return (False, "it has no image/encoded feature"), None
    try:
        # A JPEG's header is read, not the whole image: decoding an ImageNet photo would cost ~5 ms per file.
        if images[0].startswith(b"\xff\xd8"):
            shape = tf.image.extract_jpeg_shape(images[0]).numpy().tolist()
        else:
            shape = image_processing.decode_image(images[0]).shape.as_list()
    except tf.errors.OpError as error:
        return (False, "its image/encoded does not decode: " + op_error_text(error)), None
    if boxes:
        values = {key: list(feature["image/object/bbox/" + key].float_list.value)
                  for key in ("ymin", "xmin", "ymax", "xmax")}
        if any(not 0.0 <= value <= 1.0 for value in sum(values.values(), [])):
            box = ", ".join("{} {:g}".format(key, values[key][0]) for key in values if values[key])
            return (False, (f"its bounding box ({box}) is not in fractions of the image's height and width (0..1), "
                            "which the training crop needs: pixel coordinates?")), shape
    return None, shape


def check_tfrecord_files(filenames, log=print, *, boxes=False, image_size=None) -> list[int]:
    """Checks the framing (record lengths and their checksums) of every file and that each file's first record
    reads, parses and decodes (and, with `boxes`, for the tf.data training input, that its bounding boxes are in
    0..1); returns the record counts. With `image_size` (the side the input resizes to), logs a note when that is
    more than twice the longest side of every first image: the run enlarges small images, at a cost of
    `image_size` squared per image.

    Raises UserError naming the file for a missing, truncated or non-TFRecord file, for an empty list or a set of
    files without any record (an endless `repeat()` over nothing would hang), and when the first record of every
    file fails: a writer that does not compute TFRecord's data checksums, other feature keys, images in a format
    the decoder refuses. Skipping every record of such a dataset would make the training input repeat nothing
    but failures, for ever. Logs a WARNING for each file whose first record alone fails its data checksum: the
    reader stops there, so none of its records will be read (a failing first image is only skipped).
    """
    from utils.tfrecord_framing import count_records  # pure Python, reads headers only

    filenames = list(filenames)
    if not filenames:
        raise UserError("no TFRecord files given (is --data_dir right? files must be named train-* / validation-*)")
    counts = []
    for name in filenames:
        if not os.path.isfile(name):
            raise UserError(f"TFRecord file not found: {name}")
        try:
            counts.append(count_records(name))
        except OSError as e:
            raise UserError(f"cannot read TFRecord file {name}: {e}") from e
    if sum(counts) == 0:
        raise UserError(f"the {len(filenames)} TFRecord files hold no record (first: {filenames[0]})")
    firsts = [(name, count, *_first_record(name, boxes)) for name, count in zip(filenames, counts) if count]
    problems = [(name, count, problem) for name, count, problem, _ in firsts if problem]
    if problems and len(problems) == sum(1 for count in counts if count):
        name, _, (_, why) = problems[0]
        if all(problem[0] for _, _, problem in problems):
            raise UserError(f"no record of the {len(filenames)} TFRecord files can be read: the first record of each "
                            f"fails its data checksum (first: {name}: {why}); were they written by a tool that does "
                            "not compute TFRecord's checksums? Re-create them (python -m dataprep.build_tfrecords)")
        raise UserError(f"the first record of each of the {len(filenames)} TFRecord files cannot be used (first: "
                        f"{name}: {why}); are they ImageNet-style TFRecords (a tf.train.Example with a JPEG or PNG "
                        "image/encoded, image/class/label and, if any, bounding boxes in 0..1)? Make them with "
                        "python -m dataprep.build_tfrecords")
    for name, count, (checksum, why) in problems:
        if checksum:
            log(f"WARNING: the first record of {name} fails its data checksum ({why}): the reader stops there, so "
                f"none of its {count} records will be read; re-create that file")
    shapes = [shape[:2] for *_, shape in firsts if shape]
    side = max((max(shape) for shape in shapes), default=None)
    if image_size is not None and side is not None and image_size > 2 * side:
        files = "the file" if len(filenames) == 1 else f"each of the {len(filenames)} files"
        log(f"Note: the first image of {files} is at most {side} px a side, and "
            f"--image_size {image_size} enlarges such images {image_size / side:.1f} times; --image_size {side} "
            "would train at their size, at a fraction of the cost")
    return counts


def _read_records(filenames, training, deterministic, seed, num_shards, shard_index, num_epochs=None):
    """(serialized, file index, record index in file), interleaved and (training) shuffled, repeated
    `num_epochs` times (None: forever)."""
    files = tf.data.Dataset.from_tensor_slices((filenames, tf.range(len(filenames), dtype=tf.int64)))
    if training and num_shards > 1:
        files = files.shard(num_shards, shard_index)

    def records_of(filename, file_index):
        return tf.data.TFRecordDataset(filename).enumerate().map(
            as_written(lambda record_index, record: (record, file_index, record_index)))

    records = files.interleave(as_written(records_of), cycle_length=INTERLEAVE_CYCLE,
                               block_length=INTERLEAVE_BLOCK, num_parallel_calls=INTERLEAVE_CYCLE, deterministic=True)
    if training:
        shuffle_seed = 13 * shard_index + 7919 * (seed or 0) if deterministic else None
        records = records.shuffle(SHUFFLE_BUFFER, seed=shuffle_seed, reshuffle_each_iteration=True)
    return records.repeat(num_epochs)


def _preprocess_fn(filenames_t, height, width, training, seed, min_crop_area, augment):
    def preprocess(position, record, file_index, record_index):
        where = [filenames_t[file_index], "record", record_index]
        image_bytes, label, bbox, _ = image_processing.parse_example_proto(record)
        check = tf.debugging.Assert(tf.strings.length(image_bytes) > 0, ["missing image/encoded in"] + where)
        with tf.control_dependencies([check]):
            image_bytes = tf.identity(image_bytes)
        if training:
            element_seed = None if seed is None else tf.stack([tf.constant(seed, tf.int64), position])
            image = image_processing.train_preprocess(image_bytes, bbox, height, width, element_seed,
                                                         min_crop_area, augment=augment)
        else:
            image = image_processing.eval_preprocess(image_bytes, height, width)
        # The label as stored: checked after ignore_errors (`_corrupt_record_guard`), so that a label outside
        # 1..num_classes stops the run rather than being dropped as a corrupt record.
        return position, image, label, file_index, record_index
    return preprocess


# Marks the Assert of a label outside 1..num_classes; its message is
# `[LABEL_CHECK_MARKER] [label] [num_classes] [file] [record index] [LABEL_CHECK_END]` (file "" and record -1 when the
# pipeline cannot tell, as DALI's).
LABEL_CHECK_MARKER = "rn50-label-outside-classes"
LABEL_CHECK_END = "end-rn50-label-outside-classes"
_LABEL_CHECK_MESSAGE = re.compile(r"\[{}\] \[(-?\d+)\] \[(\d+)\] \[(.*?)\] \[(-?\d+)\] \[{}\]".format(
    re.escape(LABEL_CHECK_MARKER), re.escape(LABEL_CHECK_END)), re.DOTALL)


def class_index(label):
    """The classifier output of a stored label: labels are 1-based (the original's ImageNet records, label 0 was
    its background class), outputs 0-based; every input pipeline maps them here."""
    return tf.cast(label, tf.int32) - 1


def label_in_range_check(label, num_classes, filename="", record_index=-1):
    """The Assert that `label` (stored, 1-based; a scalar) is in 1..num_classes, with the report's fields."""
    label = tf.cast(label, tf.int64)
    return tf.debugging.Assert(
        tf.logical_and(label >= 1, label <= num_classes),
        [LABEL_CHECK_MARKER, label, tf.constant(num_classes, tf.int64), filename,
         tf.cast(record_index, tf.int64), LABEL_CHECK_END], summarize=-1)


def label_error_text(label, num_classes, where, classes_from="--num_classes"):
    """The one line of a label outside 1..num_classes; `where` says where it was read ("of <file> record 3");
    `classes_from`: what set the class count, a flag (then named with the remedy) or a description."""
    text = "label {} {} is outside 1..{}: ".format(label, where, num_classes)
    if label > num_classes and not classes_from.startswith("--"):
        return text + "the dataset has more classes than {} ({})".format(classes_from, num_classes)
    if label > num_classes:
        return text + ("the dataset has more classes than {} {} (pass the dataset's class count, at "
                       "least {})".format(classes_from, num_classes, label))
    missing = " (-1: the record has no image/class/label)" if label == -1 else ""
    return text + ("labels must be 1-based (1..K, as dataprep writes them){}; re-create the dataset with "
                   "python -m dataprep.build_tfrecords".format(missing))


def label_range_error(error, classes_from="--num_classes"):
    """The UserError of an InvalidArgumentError raised by `label_in_range_check` (wherever the iterator that
    reported it sits: prefetch, tf.distribute), or None for any other error; `classes_from` as label_error_text."""
    match = _LABEL_CHECK_MESSAGE.search(str(getattr(error, "message", error)))
    if match is None:
        return None
    label, num_classes, filename, record_index = match.groups()
    where = "of {} record {}".format(filename, record_index) if filename else "in the DALI input"
    return UserError(label_error_text(int(label), int(num_classes), where, classes_from))


# Marks the Assert of a repeated input that read more than a pass of records without one it could use; its message
# is `[NO_USABLE_RECORD_MARKER] [records skipped in a row] [records of a pass] [file] [record index] [training 0/1]
# [NO_USABLE_RECORD_END]`, the file and record being the one the stand-in replaced.
NO_USABLE_RECORD_MARKER = "rn50-no-usable-record"
NO_USABLE_RECORD_END = "end-rn50-no-usable-record"
_NO_USABLE_RECORD_MESSAGE = re.compile(r"\[{}\] \[(\d+)\] \[(\d+)\] \[(.*?)\] \[(-?\d+)\] \[([01])\] \[{}\]".format(
    re.escape(NO_USABLE_RECORD_MARKER), re.escape(NO_USABLE_RECORD_END)), re.DOTALL)


def no_usable_record_error(error):
    """The UserError of an InvalidArgumentError raised by a repeated TFRecord input that read more than a pass of
    records without one it could use (`_corrupt_record_guard`), with the reason one of them fails; None for any
    other error."""
    match = _NO_USABLE_RECORD_MESSAGE.search(str(getattr(error, "message", error)))
    if match is None:
        return None
    in_a_row, per_pass, filename, record_index, training = match.groups()
    why = _record_failure(filename, int(record_index), training == "1") or "it does not fail when read again"
    return UserError(f"none of the last {int(in_a_row) - 1:,} records read could be used (each was skipped as "
                     f"corrupt), more than a whole pass over the files ({int(per_pass):,} records), so the input "
                     f"would never yield a batch; record {record_index} of {filename}: {why.rstrip('.')}. "
                     "Re-create the dataset (python -m dataprep.build_tfrecords)")


def _record_failure(filename, record_index, training):
    """Why record `record_index` of `filename` fails the input's parse, decode and (`training`) crop, or None."""
    try:
        for index, record in enumerate(_read_records_in_cpp(filename)):
            if index == record_index:
                image_bytes, _, bbox, _ = image_processing.parse_example_proto(record)
                image = image_processing.decode_image(image_bytes)
                if training:  # (seeded: a seeded run's op determinism refuses the unseeded op; the crop's
                    # failure does not depend on where it falls)
                    image_processing.distorted_crop_window(tf.shape(image), bbox, seed=tf.constant([0, 0], tf.int64))
                return None
    except tf.errors.OpError as error:
        return op_error_text(error)
    return None


def input_error(error, classes_from="--num_classes"):
    """label_range_error or no_usable_record_error of an error that reached `next(iterator)`, or None."""
    return label_range_error(error, classes_from) or no_usable_record_error(error)


class SkippedRecords:
    """How many records a TFRecord pipeline dropped as corrupt: pass one to `get_tfrecords_input_fn(skipped=...)`
    and read `count` after iterating (a running total over every iterator of that dataset)."""

    def __init__(self):
        self._variable = None
        self._read = None

    def attach(self, variable, read=None):
        self._variable, self._read = variable, read

    @property
    def count(self) -> int:
        return 0 if self._variable is None else int(self._variable.numpy())

    @property
    def read(self):
        """Records the reader took from the files so far (those dropped after it included), or None when not known.
        Below the records the files hold once the stream has ended when a read error cut a file short."""
        return None if self._read is None else int(self._read.numpy())


@functools.lru_cache(maxsize=None)
def _stand_in_record():
    """A serialized Example that parses, decodes and crops (an 8x8 JPEG): it passes `ignore_errors`."""
    with tf.init_scope():  # eager, also while a dataset function is traced
        jpeg = tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)).numpy()
    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg]))})).SerializeToString()


def _done(operation):
    """True once `operation` (a tf.print) has run: tf.cond's branches must return tensors."""
    with tf.control_dependencies([operation]):
        return tf.constant(True)


def _corrupt_record_guard(filenames_t, num_classes, first_position, training, stop_after=None):
    """(remember, check_gap, check_label, end_marker, counter, end): the cheap sequential stages around `ignore_errors`
    (see the module docstring). The warning they print carries the running total of skipped records (`counter`);
    `end_marker(shape)` is the element that closes a finite stream (file index -1, filtered out after the scan);
    check_label checks each label and makes it 0-based.

    stop_after: (records of a pass, slack) of a repeated stream, or None. When more than a pass plus the slack
    (the records in flight in the parallel map, which `remember` cannot know the fate of) have been read since the
    last one that survived, a pass's worth in a row failed: no dataset to train on, and with none usable the
    stream would never yield. `remember` then swaps the record for `_stand_in_record()`, which survives, with its
    record index stored as -2 - index, and `check_gap` stops the stream at it with an error naming the record it
    replaced (`no_usable_record_error`)."""
    counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_records")
    last_kept = tf.Variable(first_position - 1, dtype=tf.int64, trainable=False, name="last_kept_position")
    # Row p % size: (p, file index, record index). A row not holding p means the element failed upstream of
    # `remember` (a read error of the TFRecord stream itself), so there is no file to name.
    ring = tf.Variable(tf.fill([_POSITION_RING, 3], tf.constant(-1, tf.int64)), trainable=False,
                       name="record_positions")
    # One past the last position read: the end marker's position, so a gap before it counts trailing drops.
    end = tf.Variable(0, dtype=tf.int64, trainable=False, name="end_position")

    def remember(position, element):
        record, file_index, record_index = element
        slot = tf.reshape(position % _POSITION_RING, [1, 1])
        updates = [ring.scatter_nd_update(slot, [[position, file_index, record_index]]), end.assign(position + 1)]
        if stop_after is not None:
            starved = position - last_kept.read_value() > sum(stop_after)
            record = tf.where(starved, _stand_in_record(), record)
            record_index = tf.where(starved, -2 - record_index, record_index)
        with tf.control_dependencies(updates):
            return tf.identity(position), record, file_index, record_index

    def report(expected, position):
        missing = tf.range(expected, position)
        rows = tf.gather(ring, missing % _POSITION_RING)
        known = tf.equal(rows[:, 0], missing)
        rows = tf.boolean_mask(rows, known)
        names = tf.gather(filenames_t, rows[:, 1])
        total = counter.assign_add(position - expected)
        unattributed = tf.reduce_sum(1 - tf.cast(known, tf.int32))

        def named():
            return tf.print("WARNING: skipped corrupt record(s)", rows[:, 2], "of", names, "(an image that does not "
                            "decode, no image, or not a tf.train.Example) - unreadable stream data:",
                            unattributed, "- total skipped:", total, output_stream=sys.stderr, summarize=-1)

        def unnamed():  # only read errors of the stream itself: no record index or file to list
            return tf.print("WARNING: skipped", unattributed, "record(s) of unreadable stream data (a TFRecord read "
                            "error; the rest of that file is lost: `python -m dataprep.verify_records <data_dir>` "
                            "names the file) - total skipped:", total, output_stream=sys.stderr)

        return tf.cond(tf.size(names) > 0, lambda: _done(named()), lambda: _done(unnamed()))

    def check_gap(expected, element):
        position, image, label, file_index, record_index = element
        usable = []
        if stop_after is not None:  # a repeated stream (no end marker): only the stand-in has a negative index
            # Before the report: a pass's worth of skipped records is not worth listing.
            usable.append(tf.debugging.Assert(record_index >= 0, [
                NO_USABLE_RECORD_MARKER, position - last_kept, tf.constant(stop_after[0], tf.int64),
                tf.gather(filenames_t, file_index), -2 - record_index, tf.constant(int(training), tf.int64),
                NO_USABLE_RECORD_END], summarize=-1))
        with tf.control_dependencies(usable):
            done = [tf.cond(position > expected, lambda: report(expected, position), lambda: tf.constant(False))]
            if stop_after is not None:
                done.append(last_kept.assign(position))
        with tf.control_dependencies(done):
            return position + 1, (tf.identity(image), label, file_index, record_index)

    def check_label(image, label, file_index, record_index):
        # A map of its own after the scan: a failure inside the scan would leave its position behind, and the
        # prefetch thread's next element would then be reported as a gap.
        check = label_in_range_check(label, num_classes, tf.gather(filenames_t, file_index), record_index)
        with tf.control_dependencies([check]):
            return image, class_index(label)

    def end_marker(image_shape):
        return tf.data.Dataset.range(1).map(as_written(lambda _: (
            end.read_value(), tf.zeros(image_shape, tf.float32), tf.constant(-1, tf.int32),
            tf.constant(-1, tf.int64), tf.constant(-1, tf.int64))))

    return remember, check_gap, check_label, end_marker, counter, end


def read_to_end(path: str) -> tuple[int, str | None]:
    """(records TensorFlow's reader returns from `path`, its error or None when it reads to the end). The reader
    checks every record's data checksum, which the framing walk (count_records) and DALI's reader do not."""
    dataset = tf.data.TFRecordDataset(path, buffer_size=8 << 20)
    try:
        return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)), None
    except tf.errors.OpError as error:
        read = 0  # a bad shard is rare: count what came before the error record by record
        try:
            for _ in dataset:
                read += 1
        except tf.errors.OpError:
            pass
        return read, op_error_text(error)


# The first bytes of the image formats DALI's decoders read (JPEG, PNG, BMP, GIF, TIFF both ways, WebP's RIFF,
# JPEG 2000's codestream and box): bytes that begin otherwise are no image it can decode, and it stops the run there.
IMAGE_SIGNATURES = (b"\xff\xd8", b"\x89PNG", b"BM", b"GIF8", b"II*\x00", b"MM\x00*", b"RIFF", b"\xffO\xffQ",
                    b"\x00\x00\x00\x0cjP")


def _image_signature_known(encoded):
    """Whether each of the strings `encoded` begins with one of IMAGE_SIGNATURES (a bool tensor of its shape)."""
    known = tf.zeros_like(encoded, dtype=tf.bool)
    for signature in IMAGE_SIGNATURES:
        known = tf.logical_or(known, tf.equal(tf.strings.substr(encoded, 0, len(signature)), signature))
    return known


def _unusable_record(record):
    """Why `record` (a scalar string tensor) is no Example the input can use, in words ("is not a tf.train.Example
    ...", "does not hold the trainer's features ...", "has no image ..."), or None. protobuf's parser first:
    TensorFlow's reads some bytes that are not an Example as one without features."""
    try:
        tf.train.Example.FromString(record.numpy())
    except DecodeError:
        return "is not a tf.train.Example (protobuf cannot parse it)"
    try:
        encoded = tf.io.parse_single_example(record, image_processing.feature_map())["image/encoded"]
    except tf.errors.OpError as error:
        return "does not hold the trainer's features as they should be ({})".format(op_error_text(error))
    if int(tf.strings.length(encoded)) == 0:
        return "has no image (image/encoded missing or empty)"
    if not bool(_image_signature_known(encoded)):
        return "holds no image its decoders read (image/encoded begins {!r}: no JPEG, PNG, BMP, GIF, TIFF, WebP or " \
               "JPEG 2000 signature)".format(encoded.numpy()[:8])
    return None


def undecodable_records(path: str, limit: int = 5,
                        records: int | None = None) -> tuple[int, int, list[tuple[int, str]]]:
    """(records of `path`, how many of them fail, [(index from 0, why in words: "does not decode (...)", "has no
    image ...", "is not a tf.train.Example ...")] of the first `limit` that fail) the input's parse and decode
    (image_processing.parse_example_proto, decode_image): what the tf.data pipeline skips and DALI's decoder may
    stop on. All are decoded in parallel; the failures are the indices missing after `ignore_errors`, then read
    again one by one for their reason. Call it on a shard that reads to its end; `records`: its record count when
    known (read_to_end's), else it is counted."""
    def decoded(index, record):
        return index, tf.shape(image_processing.decode_image(image_processing.parse_example_proto(record)[0]))[0]

    dataset = tf.data.TFRecordDataset(path, buffer_size=8 << 20).enumerate()
    kept = dataset.map(decoded, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()
    survived = set()
    for indices in kept.map(lambda index, _: index).batch(4096).as_numpy_iterator():
        survived.update(indices.tolist())
    total = records if records is not None else int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
    missing = sorted(set(range(total)) - survived)
    shown, failed = missing[:limit], []
    for index, record in dataset.take(shown[-1] + 1 if shown else 0):
        if int(index) in shown:
            reason = _unusable_record(record)
            if reason is None:
                try:
                    decoded(index, record)
                    reason = "decodes when read again"
                except tf.errors.OpError as error:
                    reason = "does not decode ({})".format(op_error_text(error).rstrip("."))
            failed.append((int(index), reason))
    return total, len(missing), failed


def read_for_dali(path: str) -> tuple[int, str | None, tuple[int, str] | None]:
    """read_to_end for a shard DALI will read, in one pass that also parses every record: (records read, the
    reader's error or None, (index from 0, reason) of the first record DALI's input would stop on rather than skip,
    as tf.data does, or None). Such a record is not a tf.train.Example, or its features do not parse as
    image_processing.feature_map gives them (the keys and types DALI's reader reads; its reader fails on it), or its
    image/encoded is missing or empty (DALI's reader or decoder fails), or begins with no image format's signature
    (IMAGE_SIGNATURES: DALI's decoder fails). Whether the images decode to the end is not checked.
    TensorFlow's parser reads some bytes that are not an Example as one without features: those count as imageless
    in the fast pass, and protobuf's parser (DALI's) tells them apart in the record-by-record pass."""
    spec = image_processing.feature_map()
    dataset = tf.data.TFRecordDataset(path, buffer_size=8 << 20)

    def counts(records):
        encoded = tf.io.parse_example(records, spec)["image/encoded"]
        unusable = tf.logical_or(tf.equal(tf.strings.length(encoded), 0),
                                 tf.logical_not(_image_signature_known(encoded)))
        return tf.size(records, tf.int64), tf.reduce_sum(tf.cast(unusable, tf.int64))

    zero = tf.constant(0, tf.int64)
    try:
        read, imageless = dataset.batch(256).map(counts).reduce((zero, zero), lambda a, b: (a[0] + b[0], a[1] + b[1]))
        if int(imageless) == 0:
            return int(read), None, None
    except tf.errors.OpError:
        pass  # a damaged record or one that does not parse: found one by one below (a bad shard is rare)

    read, first = 0, None
    iterator = iter(dataset)
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return read, None, first
        except tf.errors.OpError as error:
            return read, op_error_text(error), first
        if first is None:
            reason = _unusable_record(record)
            first = None if reason is None else (read, reason)
        read += 1


def get_tfrecords_input_fn(filenames, batch_size, height, width, training, num_threads=10, deterministic=False,
                           seed=None, num_shards=1, shard_index=0, *, num_classes=defaults.NUM_CLASSES, start_step=0,
                           min_crop_area=image_processing.AREA_RANGE[0], augment=None, num_epochs=None,
                           skipped=None):
    """Batches of (images float32 [B, H, W, 3] in 0..255, labels int32 [B] 0-based), forever or for `num_epochs`
    passes over the files (docs/ORIGINAL.md#input-pipeline); whole batches only (the remainder is dropped).

    num_classes: a record with a label outside 1..num_classes stops the iteration with an InvalidArgumentError that
      `label_range_error` turns into a UserError naming the label, file and record (not a corrupt record).
    start_step: batches already consumed (resume); reproduces the same stream when `deterministic`.
    min_crop_area: smallest area fraction of a training crop (`--min_crop_area`; the original's 0.05).
    augment: `augment.AugmentSettings` of the AutoAugment / RandAugment run after the training crop
      (`--augmenter_name`); None or "none" leaves the stream as without it. Evaluation is never augmented.
    num_epochs: None repeats forever; N reads every record N times, then the dataset ends.
    skipped: a `SkippedRecords` that then counts the records dropped as corrupt.
    """
    filenames = [os.fspath(f) for f in filenames]
    if not filenames:
        raise UserError("no TFRecord files given (is --data_dir right? files must be named train-* / validation-*)")
    if deterministic and seed is None:
        seed = 0
    if not deterministic:
        seed = None
    filenames_t = tf.constant(filenames)
    records = _read_records(filenames, training, deterministic, seed, num_shards, shard_index, num_epochs)
    first_position = start_step * batch_size
    if first_position:
        records = records.skip(first_position)
    records = records.enumerate(start=first_position)

    stop_after = None
    if num_epochs is None:  # a repeated stream: the records of this worker's pass, and those in flight
        from utils.tfrecord_framing import count_records
        shard = filenames[shard_index::num_shards] if training and num_shards > 1 else filenames
        stop_after = (sum(count_records(name) for name in shard), 4 * num_threads + 64)
    remember, check_gap, check_label, end_marker, counter, end = _corrupt_record_guard(
        filenames_t, num_classes, first_position, training, stop_after)
    if skipped is not None:
        skipped.attach(counter, end if not first_position else None)
    dataset = records.map(as_written(remember))
    preprocess = _preprocess_fn(filenames_t, height, width, training, seed, min_crop_area, augment)
    dataset = dataset.map(as_written(preprocess), num_parallel_calls=num_threads, deterministic=True)
    dataset = dataset.ignore_errors(log_warning=True)
    if num_epochs is not None:
        dataset = dataset.concatenate(end_marker([height, width, 3]))
    dataset = dataset.scan(tf.constant(first_position, tf.int64), as_written(check_gap))
    if num_epochs is not None:
        dataset = dataset.filter(as_written(lambda image, label, file_index, record_index: file_index >= 0))  # end marker
    dataset = dataset.map(as_written(check_label))
    return without_autotuning(dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


# ---------------------------------------------------------------------------------------------- synthetic
def get_synth_input_fn(batch_size, height, width, num_classes=defaults.NUM_CLASSES, seed=None):
    """One random batch (truncated normal, mean 127, std 60; labels uniform in 0..num_classes-2), repeated."""
    shape = [batch_size, height, width, 3]
    if seed is None:
        images = tf.random.truncated_normal(shape, mean=127.0, stddev=60.0, dtype=tf.float32)
        labels = tf.random.uniform([batch_size], 0, num_classes - 1, dtype=tf.int32)
    else:
        images = tf.random.stateless_truncated_normal(shape, seed=[seed, 0], mean=127.0, stddev=60.0)
        labels = tf.random.stateless_uniform([batch_size], seed=[seed, 1], minval=0, maxval=num_classes - 1,
                                             dtype=tf.int32)
    return without_autotuning(tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(tf.data.AUTOTUNE))


def without_autotuning(dataset):
    """`dataset` without tf.data's autotuning model (module docstring: No autotuning model)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


# ---------------------------------------------------------------------------------------------- predict
class ImageFileError(UserError):
    """A predict input that cannot be used; `reason` says why in a few words, without the path."""

    def __init__(self, path, reason):
        super().__init__(f"{reason}: {path}")
        self.path = path
        self.reason = reason


def read_image_file(path) -> bytes:
    """The bytes of one predict input, after checks that need no decode: readable, not empty, a JPEG or PNG
    by content (PIL reads the header only), and not refused by utils/pixels.refused, dataprep's check too (too
    large, several frames, cut off, a CMYK JPEG without an Adobe marker). Raises ImageFileError otherwise."""
    if not os.path.isfile(path):
        raise ImageFileError(path, "image file not found")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ImageFileError(path, f"cannot read image file ({error.strerror or error})") from None
    if not data:
        raise ImageFileError(path, pixels.EMPTY_FILE)
    _image_format(path, data)
    return data


def _image_format(path, data) -> str:
    """The format of `data`, "JPEG" or "PNG", as PIL identifies its header; raises ImageFileError for anything
    else, for a header cut off, and for an image utils/pixels.refused refuses (with dataprep's reasons)."""
    from PIL import UnidentifiedImageError

    try:
        with pixels.opened(data) as img:  # the size is checked by pixels.refused, as dataprep checks it
            image_format = _PIL_FORMATS.get(img.format, img.format)
            if image_format not in SUPPORTED_IMAGE_FORMATS:
                raise ImageFileError(path, f"unsupported image format {image_format} (JPEG or PNG expected)")
            reason = pixels.refused(data, img)
    except UnidentifiedImageError:
        raise ImageFileError(path, pixels.NOT_AN_IMAGE) from None
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageFileError(path, pixels.truncated(data) or f"cannot decode image ({error})") from None
    if reason:
        raise ImageFileError(path, reason)
    return image_format


# PIL names multi-picture camera JPEGs (MPO) apart; they are JPEG files for every decoder used here.
_PIL_FORMATS = {"MPO": "JPEG"}


def load_inference_image(path, height, width):
    """float32 [H, W, 3] in 0..255 of one predict input with the eval preprocessing; raises ImageFileError naming
    the file when it cannot be read, is not a complete JPEG or PNG, or TensorFlow cannot decode it."""
    data = read_image_file(path)
    if data.startswith(b"\x89PNG"):  # transparency and 16-bit greyscale as dataprep converts them (utils/pixels.py)
        data = pixels.png_for_model(data)
    try:
        return image_processing.eval_preprocess(tf.constant(data), height, width).numpy()
    except tf.errors.OpError as error:
        raise ImageFileError(path, f"cannot decode image ({op_error_text(error)})") from None


def op_error_text(error):
    """The one-line core of a TensorFlow op error, without the `{{function_node ...}}` and `[Op:...]` wrapping."""
    text = " ".join(str(error.message).split())
    text = re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:[^\]]*\]", "", text)
    text = re.sub(r"\s+name:\s*$", "", text)  # eager errors end with the op's (empty) name
    return text[:200] or type(error).__name__


def iter_inference_batches(paths, height, width, batch_size, on_skip):
    """Yields (images float32 [n, H, W, 3], paths [n]) of the usable files in the order of `paths`, n ==
    batch_size except for the last batch. A file that fails goes to `on_skip(path, reason)` and the rest go on.

    One file is read and decoded at a time, so memory is bounded by one batch whatever the number of files.
    """
    images, names = [], []
    for path in paths:
        try:
            images.append(load_inference_image(path, height, width))
        except ImageFileError as error:
            on_skip(error.path, error.reason)
            continue
        names.append(path)
        if len(names) == batch_size:
            yield np.stack(images), names
            images, names = [], []
    if names:
        yield np.stack(images), names
