"""runtime/inputs.py: the step counts of training (docs/ORIGINAL.md#step-counting, worked by hand here), next_batch
turning a label outside 1..--num_classes into one UserError and passing everything else through, the augmentation
settings of the flags, and the staging of batches on the accelerator. The pipelines themselves are tested in
test_data_utils.py and test_dali.py."""

import dataclasses
import math
import re

import pytest
import tensorflow as tf

from runtime import inputs
from runtime.config import RunConfig
from tests._data_helpers import label_of, write_tfrecord_shards
from utils.augment import AugmentSettings
from utils.devices import CPU, Platform
from utils.errors import UserError


@pytest.mark.parametrize("iter_unit", ["epoch", "batch"])
def test_training_on_synthetic_data_is_num_iter_steps_in_one_epoch(iter_unit):
    logged = []
    length = inputs.training_length(RunConfig(num_iter=7, iter_unit=iter_unit), 256, logged.append)
    assert length == inputs.TrainingLength(num_steps=7, num_epochs=1, num_decay_steps=7, steps_per_epoch=7.0)
    assert logged == []  # no dataset to count


def test_training_length_counts_the_train_records_in_whole_global_batches(tmp_path):
    """2 train shards of 9 records (the validation shard does not count), global batch 4: 18 // 4 = 4 steps per
    epoch."""
    data = str(tmp_path / "data")
    write_tfrecord_shards(data, "train", 2, 9, 32, num_classes=5)
    write_tfrecord_shards(data, "validation", 1, 5, 32, num_classes=5)
    logged = []
    epochs = inputs.training_length(RunConfig(data_dir=data, num_iter=3, iter_unit="epoch"), 4, logged.append)
    assert epochs == inputs.TrainingLength(num_steps=3 * 4, num_epochs=3, num_decay_steps=3 * 4, steps_per_epoch=4.0,
                                           num_samples=18)
    assert logged == ["Training samples: 18 (from 2 files)"]
    # --iter_unit batch: 10 steps are ceil(10 / 4) = 3 epochs; the step schedule decays over 90 epochs of records.
    batches = inputs.training_length(RunConfig(data_dir=data, num_iter=10, iter_unit="batch"), 4, logged.append)
    assert batches == inputs.TrainingLength(num_steps=10, num_epochs=math.ceil(10 / 4), num_decay_steps=90 * 18 // 4,
                                            steps_per_epoch=10 / 3, num_samples=18)
    with pytest.raises(UserError) as error:
        inputs.training_length(RunConfig(data_dir=data, num_iter=1, batch_size=32), 32, logged.append)
    assert str(error.value) == "the dataset has 18 samples, fewer than one global batch of 32 (--batch_size 32): use " \
        "a smaller --batch_size"
    # the refusal named neither flag that made up the batch (2026-12-07)
    with pytest.raises(UserError) as error:
        inputs.training_length(RunConfig(data_dir=data, num_iter=1, batch_size=4, grad_accum_steps=3), 24)
    assert str(error.value) == "the dataset has 18 samples, fewer than one global batch of 24 (--batch_size 4 x 2 " \
        "replicas x --grad_accum_steps 3): use a smaller --batch_size or --grad_accum_steps"


def test_next_batch_turns_a_label_above_num_classes_into_the_user_error_naming_it(tmp_path):
    """Record 3 of the shard has label --num_classes + 5 = 10: the batches before it come out, then one UserError
    naming the label, the file, the record and the flag, with no TensorFlow error chained to it."""
    data = tmp_path / "data"
    [validation] = write_tfrecord_shards(str(data), "validation", 1, 6, 32, num_classes=5,
                                         corrupt={(0, 3): "label_out_of_range"})
    [train] = write_tfrecord_shards(str(data), "train", 1, 6, 32, num_classes=5,
                                    corrupt={(0, 3): "label_out_of_range"})
    config = RunConfig(data_dir=str(data), num_classes=5, image_size=32, batch_size=2, no_progress=True)
    iterator = iter(inputs.eval_dataset(config, CPU, 2, log=lambda *_: None))
    _, labels = inputs.next_batch(iterator)
    assert labels.numpy().tolist() == [label_of(0, 5) - 1, label_of(1, 5) - 1]
    with pytest.raises(UserError) as error:
        inputs.next_batch(iterator)
    assert str(error.value) == ("label 10 of {} record 3 is outside 1..5: the dataset has more classes than "
                                "--num_classes 5 (pass the dataset's class count, at least 10)".format(validation))
    assert error.value.__cause__ is None and error.value.__suppress_context__
    # Training: shuffled, so at some batch of the first epoch.
    iterator = iter(inputs.train_dataset(config, CPU, rank=0, num_shards=1, log=lambda *_: None))
    with pytest.raises(UserError, match="^" + re.escape("label 10 of {} record 3 is outside 1..5: ".format(train))):
        for _ in range(6):
            inputs.next_batch(iterator)


def test_the_training_input_notes_images_it_enlarges_more_than_twice(tmp_path):
    """The note is the training input's: there the user picks --image_size (an evaluation takes the model's)."""
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 2, 32, num_classes=5)
    write_tfrecord_shards(str(data), "validation", 1, 2, 32, num_classes=5)
    config = RunConfig(data_dir=str(data), num_classes=5, image_size=224, batch_size=2, no_progress=True)
    logged = []
    inputs.train_dataset(config, CPU, rank=0, num_shards=1, log=logged.append)
    assert [line for line in logged if line.startswith("Note: the first image of the file is at most 32 px a side, "
                                                       "and --image_size 224 enlarges")]
    logged = []
    inputs.eval_dataset(config, CPU, 2, log=logged.append)
    assert not [line for line in logged if line.startswith("Note: the first image")]


class _Failing:
    def __init__(self, error):
        self.error = error

    def __iter__(self):
        return self

    def __next__(self):
        raise self.error


def test_next_batch_passes_other_errors_and_the_end_of_the_data_through():
    batch = (tf.zeros([2, 4]), tf.constant([0, 1]))
    assert inputs.next_batch(iter([batch])) is batch
    with pytest.raises(StopIteration):
        inputs.next_batch(iter([]))
    for error in (tf.errors.DataLossError(None, None, "corrupted record at 12"),
                  tf.errors.InvalidArgumentError(None, None, "assertion failed: [x > 0]")):
        with pytest.raises(type(error)) as raised:
            inputs.next_batch(_Failing(error))
        assert raised.value is error


def test_the_end_of_the_training_input_is_a_user_error_naming_the_step_and_data():
    """The training input repeats for ever: if it ends, a whole pass gave no record (TF's repeat stops on an empty
    epoch), which must be one error line, not a StopIteration traceback."""
    config = RunConfig(data_dir="/data/imagenet")
    batch = (tf.zeros([2, 4]), tf.constant([0, 1]))
    assert inputs.next_training_batch(iter([batch]), config, 0) is batch
    empty = iter(tf.data.Dataset.range(4).filter(lambda x: x > 9).repeat())
    with pytest.raises(UserError, match=re.escape("the training input ended at step 7: a whole pass over the "
                                                  "train-* files of --data_dir /data/imagenet gave no record")):
        inputs.next_training_batch(empty, config, 7)


def test_augment_settings_are_the_augmenter_flags():
    assert inputs.augment_settings(RunConfig()) == AugmentSettings("none", 2, 9.0)
    assert not inputs.augment_settings(RunConfig()).enabled
    auto = inputs.augment_settings(RunConfig(augmenter_name="autoaugment"))
    assert (auto.name, auto.enabled) == ("autoaugment", True)
    rand = inputs.augment_settings(RunConfig(augmenter_name="randaugment", raug_num_layers=3, raug_magnitude=5.0))
    assert (rand.name, rand.num_layers, rand.magnitude, rand.enabled) == ("randaugment", 3, 5.0, True)


@pytest.mark.gpu_path
def test_prefetch_to_the_accelerator_stages_batches_on_the_platforms_device():
    """Platform.prefetch_device is the GPU with one; a logical CPU device stands in for it here: the batches come
    out unchanged from that device. No-op without such a device and for DALI (its batches are made on the GPU)."""
    import types
    from runtime.inputs import prefetch_to_accelerator
    dataset = tf.data.Dataset.range(6).map(lambda i: (tf.fill([2, 2], tf.cast(i, tf.float32)), i)).batch(2)
    assert prefetch_to_accelerator(dataset, CPU, uses_dali=False) is dataset
    assert Platform(gpu=True).prefetch_device == "/device:GPU:0"
    stand_in = types.SimpleNamespace(prefetch_device="/device:CPU:0")
    assert prefetch_to_accelerator(dataset, stand_in, uses_dali=True) is dataset
    staged = prefetch_to_accelerator(dataset, stand_in, uses_dali=False)
    assert staged is not dataset
    batches = list(staged)
    assert [b[1].numpy().tolist() for b in batches] == [[0, 1], [2, 3], [4, 5]]
    assert all(b[0].device.endswith("CPU:0") for b in batches)


def test_the_evaluation_preprocessing_line_gives_the_originals_256_for_224_and_its_ratio_elsewhere():
    from runtime.inputs import eval_preprocessing
    assert eval_preprocessing(224, "DALI") == "Evaluation preprocessing (DALI): shorter side resized to 256, central " \
                                              "224x224 crop (DALI's resize filter is not TensorFlow's: a top-1 may " \
                                              "differ from tf.data's by about a point)"
    assert eval_preprocessing(40, "tf.data").endswith("resized to 45, central 40x40 crop")  # floor(40 * 256 / 224)


def test_a_training_says_its_preprocessing_as_an_evaluation_does():
    """The crop and flip of docs/ORIGINAL.md#training-augmentation, by pipeline, with --min_crop_area and the
    augmenter, as the line a training prints (an audit found only `dali : False` in the PARAMETER record)."""
    config = RunConfig(data_dir="/d", image_size=40, min_crop_area=0.75)
    assert inputs.train_preprocessing(config, "tf.data") == (
        "Training preprocessing (tf.data): a random crop of 75%-100% of the area of the image, covering at least 10% "
        "of a bounding box where the record has one, aspect ratio 0.75-1.33, resized to 40x40, random horizontal flip")
    assert inputs.train_preprocessing(dataclasses.replace(config, min_crop_area=0.05), "DALI") == (
        "Training preprocessing (DALI): a random crop of 5%-100% of the area of the whole image (DALI's crop ignores "
        "the records' boxes), aspect ratio 0.75-1.33, resized to 40x40, random horizontal flip")
    assert inputs.train_preprocessing(dataclasses.replace(config, augmenter_name="randaugment", raug_num_layers=3,
                                                          raug_magnitude=5), "tf.data").endswith(
        ", random horizontal flip, then RandAugment (3 layers, magnitude 5)")
