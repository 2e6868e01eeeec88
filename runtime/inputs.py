"""The input of each mode from the run configuration: TFRecord, DALI or synthetic data
(docs/ORIGINAL.md#input-pipeline), and the step counts that follow from the dataset's size
(docs/ORIGINAL.md#step-counting)."""

import dataclasses
import os

from runtime import runner_utils
from utils import data_utils
from utils.augment import AugmentSettings
from utils.errors import UserError
from utils.data_utils import SkippedRecords  # noqa: F401 - the counter eval_dataset(skipped=...) fills


@dataclasses.dataclass(frozen=True)
class TrainingLength:
    num_steps: int
    num_epochs: int
    num_decay_steps: int
    steps_per_epoch: float
    num_samples: int | None = None  # the train split's records (None: synthetic data)


def training_length(config, global_batch_size, log=print):
    """Step counts of training: --num_iter steps on synthetic data, else from the train split's record count."""
    if config.data_dir is None:
        return TrainingLength(config.num_iter, 1, config.num_iter, float(config.num_iter))
    filenames = runner_utils.list_filenames_in_dataset(config.data_dir, "train")
    num_samples = runner_utils.count_samples(filenames, "Training", log)
    try:
        num_steps, num_epochs, num_decay_steps = runner_utils.count_steps(
            config.iter_unit, num_samples, config.num_iter, global_batch_size)
    except UserError:  # the flags that make up the batch, and what to change
        raise runner_utils.too_few_for_a_batch(
            num_samples, config, global_batch_size // (config.batch_size * config.grad_accum_steps)) from None
    return TrainingLength(num_steps, num_epochs, num_decay_steps, num_steps / num_epochs, num_samples)


def _dali(config, filenames, batch_size, log, mode, **options):
    """The DALI input of `filenames` for `mode` ("train" / "evaluate"), once their index files are found and the
    shards checked (check_records_for_dali)."""
    from utils import dali_utils
    dali_utils.require_dali()
    indexes = runner_utils.list_index_files(config.data_idx_dir, filenames)
    check_records_for_dali(filenames, config.data_idx_dir, mode, log)
    log("Using DALI input... ")
    if not options.get("use_gpu"):
        log("DALI runs its CPU pipeline (no GPU: it decodes and preprocesses the images on the CPU)")
    return dali_utils.get_dali_input_fn(filenames, indexes, batch_size, config.input_size, config.input_size,
                                        num_classes=config.num_classes, training=mode == "train", **options)


def next_batch(iterator):
    """`next(iterator)` of any dataset of this module (plain, prefetched to a device or distributed), with a label
    outside 1..--num_classes and a repeated input that no longer yields turned into the UserError saying so
    (data_utils.input_error), and an image DALI cannot decode into one (dali_utils.decode_error); StopIteration at
    the end of a finite dataset passes through."""
    import tensorflow as tf
    from utils import dali_utils
    try:
        return next(iterator)
    except tf.errors.OpError as error:
        user_error = data_utils.input_error(error) or dali_utils.decode_error(error)
        if user_error is None:
            raise
        user_error.from_input = True  # the data or the flags that read it: the run's own steps were not at fault
        raise user_error from None


def next_training_batch(iterator, config, step):
    """next_batch of the training input, which repeats forever: its end means that a whole pass over the train
    files gave no record (each one dropped as unreadable or corrupt), a UserError at `step` instead of
    StopIteration."""
    try:
        return next_batch(iterator)
    except StopIteration:
        raise UserError(f"the training input ended at step {step}: a whole pass over the train-* files of "
                        f"--data_dir {config.data_dir} gave no record that could be read (each was skipped as "
                        "corrupt); re-create the dataset") from None


def augment_settings(config):
    return AugmentSettings(config.augmenter_name, config.raug_num_layers, config.raug_magnitude)


def train_dataset(config, platform, rank, num_shards, start_step=0, log=print):
    """This worker's training batches, one per optimizer step: --batch_size images, times --grad_accum_steps (the
    micro-batches of a step, one after the other). Synthetic without --data_dir (the benchmark), else its shard of
    the train split. `start_step` > 0 resumes a seeded stream where it stopped (docs/RELIABILITY.md)."""
    size = config.input_size
    batch_size = config.batch_size * config.grad_accum_steps
    seed = None if config.seed is None else config.seed * 2 + rank
    if config.data_dir is None:
        log("Using Synthetic Data ...")
        return data_utils.get_synth_input_fn(batch_size, size, size, config.num_classes, seed=seed)
    filenames = runner_utils.list_filenames_in_dataset(config.data_dir, "train")
    log(train_preprocessing(config, "DALI" if config.uses_dali else "tf.data"))
    # DALI's crop ignores the boxes.
    data_utils.check_tfrecord_files(filenames, log, boxes=not config.uses_dali, image_size=size)
    if config.uses_dali:
        if config.mode == "train_and_evaluate":  # its evaluation's shards, before the training rather than after it
            validation = runner_utils.list_filenames_in_dataset(config.data_dir, "validation")
            runner_utils.list_index_files(config.data_idx_dir, validation)
            check_records_for_dali(validation, config.data_idx_dir, "evaluate", log)
        return _dali(config, filenames, batch_size, log, "train", deterministic=config.seed is not None,
                     seed=seed, num_shards=num_shards, shard_index=rank, min_crop_area=config.min_crop_area,
                     use_gpu=platform.gpu)
    return data_utils.get_tfrecords_input_fn(
        filenames, batch_size, size, size, training=True, deterministic=config.seed is not None,
        seed=seed, num_shards=num_shards, shard_index=rank, num_classes=config.num_classes, start_step=start_step,
        min_crop_area=config.min_crop_area, augment=augment_settings(config))


def train_preprocessing(config, pipeline):
    """The line saying how training images become the model's input (utils/image_processing.py, DALI's equivalent),
    as eval_preprocessing does for evaluation."""
    from utils.image_processing import ASPECT_RATIO_RANGE, MIN_OBJECT_COVERED
    size = config.input_size
    where = ("the whole image (DALI's crop ignores the records' boxes)" if pipeline == "DALI" else
             "the image, covering at least {:.0%} of a bounding box where the record has one".format(
                 MIN_OBJECT_COVERED))
    line = ("Training preprocessing ({}): a random crop of {:.0%}-100% of the area of {}, aspect ratio {}-{}, "
            "resized to {}x{}, random horizontal flip".format(pipeline, config.min_crop_area, where,
                                                              *ASPECT_RATIO_RANGE, size, size))
    augment = augment_settings(config)
    if augment.enabled:
        line += ", then {}".format("AutoAugment (the ImageNet policy)" if augment.name == "autoaugment" else
                                   "RandAugment ({} layers, magnitude {:g})".format(augment.num_layers,
                                                                                   augment.magnitude))
    return line


def eval_preprocessing(size, pipeline):
    """The line saying how validation images become the model's input (utils/image_processing.py, DALI's
    equivalent), so a log says the preprocessing a figure was measured with."""
    from utils.image_processing import eval_resize_min
    line = "Evaluation preprocessing ({}): shorter side resized to {}, central {}x{} crop".format(
        pipeline, eval_resize_min(size, size), size, size)
    if pipeline == "DALI":  # measured in docs/DEVIATIONS.md, Data
        line += " (DALI's resize filter is not TensorFlow's: a top-1 may differ from tf.data's by about a point)"
    return line


def dali_damaged_record(mode):
    """Why a shard TensorFlow's reader cannot read to its end is refused for a DALI `mode` ("train" or "evaluate")
    run, and what to do."""
    return ("DALI reads records without checking their data checksums and would {} a damaged one as it is: delete "
            "the shard and run the same dataprep.build_tfrecords command with --resume to write it again, or {} "
            "without --dali (tf.data skips damaged records, with a warning)".format(
                {"train": "train on", "evaluate": "evaluate"}[mode], mode))


CHECKED_SHARDS = ".checked"  # in a DALI index dir: a record of each shard TensorFlow's reader read to its end


def _shard_identity(path):
    """What makes a checked shard the same file later: its place, inode, size and modification time (a copy or a
    rewrite, dataprep's --resume included, changes one of them)."""
    stat = os.stat(path)
    return {"path": os.path.realpath(path), "device": stat.st_dev, "inode": stat.st_ino, "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns}


def dali_unusable_record(path, index, reason, mode):
    """Why a shard holding a record DALI would stop on (data_utils.read_for_dali) is refused for a DALI
    `mode` run, and what to do."""
    return ("{}: record {} (counting from 0) {}: DALI cannot skip a record and would stop the run there; re-create "
            "the dataset with python -m dataprep.build_tfrecords, or {} without --dali (tf.data skips such records, "
            "with a warning)".format(path, index, reason, mode))


def _checked_identity(path):
    """What .checked records of a shard: its identity and what was checked (a record from before the example check
    was added lacks "examples", one from before the image signatures' check "image_signatures", so its shard is
    checked again)."""
    return dict(_shard_identity(path), examples=True, image_signatures=True)


def check_records_for_dali(filenames, idx_dir, mode, log):
    """Refuses a shard of `filenames` before DALI reads it for `mode` ("train" / "evaluate") when TensorFlow's reader
    cannot read it to its end (DALI checks no record's data checksum: a damaged record would be trained on or
    evaluated as it is, where tf.data skips it) or when it holds a record DALI would stop on mid-run (not an
    Example of the trainer's features, no image, bytes of no image format; tf.data skips those too). Each shard that passes is recorded in
    `idx_dir`/.checked (CHECKED_SHARDS), so later runs read only new, copied or rewritten shards; damage to a shard
    in place since it was checked is `dataprep.verify_records`' to find."""
    import concurrent.futures
    import json
    record_dir = os.path.join(idx_dir, CHECKED_SHARDS)

    def record_path(path):
        return os.path.join(record_dir, os.path.basename(path) + ".json")

    def recorded(path):
        try:
            with open(record_path(path), encoding="utf-8") as handle:
                return json.load(handle) == _checked_identity(path)
        except (OSError, ValueError):
            return False

    unchecked = [path for path in filenames if not recorded(path)]
    if not unchecked:
        return
    size = sum(os.path.getsize(path) for path in unchecked)
    log("Checking the data checksums and features of {} {} shard(s) ({:,.1f} MB) with TensorFlow's reader before "
        "DALI reads them (DALI checks no checksum and cannot skip a record); {} records each shard read, so later "
        "runs read only new or rewritten ones".format(
            len(unchecked), "train" if mode == "train" else "validation", size / 1e6, record_dir))
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(unchecked), os.cpu_count() or 1)) as pool:
        checks = list(pool.map(data_utils.read_for_dali, unchecked))  # the reader's C++ loop releases the GIL
    for path, (read, error, unusable) in zip(unchecked, checks):
        framed = runner_utils.count_records(path)
        if error is not None or read != framed:
            raise UserError("{} cannot be read to its end: its reader stops after {:,} of {:,} records ({}); {}".format(
                path, read, framed, error, dali_damaged_record(mode)))
        if unusable is not None:
            raise UserError(dali_unusable_record(path, *unusable, mode))
    try:
        os.makedirs(record_dir, exist_ok=True)
        for path in unchecked:
            temporary = "{}.tmp-{}".format(record_path(path), os.getpid())
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(_checked_identity(path), handle)
            os.replace(temporary, record_path(path))
    except OSError as error:
        log("Note: the checked shards cannot be recorded in {} ({}): later runs will read them again".format(
            record_dir, error.strerror or error))


def eval_dataset(config, platform, batch_size, log=print, *, num_epochs=None, skipped=None):
    """Evaluation batches: synthetic without --data_dir (the benchmark), else the validation split in order.

    num_epochs: None repeats the validation split forever (benchmarks, --iter_unit batch); N makes the tf.data
      input end after N passes, each record read once per pass. DALI's input always repeats (the caller takes at
      most one pass's whole batches per epoch from it).
    skipped: a `data_utils.SkippedRecords` counting the records the tf.data input dropped as corrupt (DALI stops
      on an undecodable image instead, so it stays 0 there).
    """
    size = config.input_size
    if config.data_dir is None:
        log("Using Synthetic Data ...")
        return data_utils.get_synth_input_fn(batch_size, size, size, config.num_classes, seed=config.seed)
    filenames = runner_utils.list_filenames_in_dataset(config.data_dir, "validation")
    data_utils.check_tfrecord_files(filenames, log)
    log(eval_preprocessing(size, "DALI" if config.uses_dali else "tf.data"))
    if config.uses_dali:
        return _dali(config, filenames, batch_size, log, "evaluate", use_gpu=platform.gpu)
    return data_utils.get_tfrecords_input_fn(filenames, batch_size, size, size, training=False,
                                             num_classes=config.num_classes, num_epochs=num_epochs,
                                             skipped=skipped)


def prefetch_to_accelerator(dataset, platform, uses_dali):
    """GPU, one replica in this process, tf.data input: keep the next 2 batches already on the GPU (the
    original's host + device StagingAreas, docs/ORIGINAL.md#input-pipeline), so the step never waits for a
    host-to-device copy. No-op on CPU, for DALI (its batches are produced on the GPU) and for distributed datasets
    (MirroredStrategy prefetches to each replica's device itself)."""
    import tensorflow as tf
    if uses_dali or platform.prefetch_device is None or not isinstance(dataset, tf.data.Dataset):
        return dataset
    return dataset.apply(tf.data.experimental.prefetch_to_device(platform.prefetch_device, buffer_size=2))
