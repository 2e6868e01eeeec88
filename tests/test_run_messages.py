"""What a run says about itself: how much of the validation set was evaluated, a labels file shorter than the
classifier, benchmark figures that include the warm-up (runtime/metrics.py, runtime/predict.py). Unit tests, then
one CLI run."""

import os
import subprocess
import sys

import pytest

from runtime.config import RunConfig
from runtime.metrics import ThroughputMeter, evaluated_images_line
from runtime.predict import load_class_names
from tests._data_helpers import write_tfrecord_shards
from utils.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_evaluation_line_counts_the_dropped_partial_batch():
    assert evaluated_images_line(9984, 10000, 1, "epoch", 32) == \
        "Evaluated 9,984 of 10,000 images (the last partial batch of 16 is dropped, as the original)"
    assert evaluated_images_line(64, 64, 1, "epoch", 32) == "Evaluated 64 of 64 images"
    assert evaluated_images_line(9984 * 2, 10000, 2, "epoch", 32) == \
        "Evaluated 19,968 of 20,000 images (2 epochs of 10,000 in whole batches of 32: 32 left out, as the original)"
    assert evaluated_images_line(96, 10000, 1, "batch", 32) == \
        "Evaluated 96 images (3 batches of 32) of the 10,000 in the validation set"


def test_evaluation_line_counts_the_records_skipped_as_corrupt():
    assert evaluated_images_line(16, 24, 1, "epoch", 8, skipped=8) == \
        "Evaluated 16 of 24 images (8 skipped as corrupt, see the warnings above)"
    assert evaluated_images_line(96, 10000, 1, "batch", 32, skipped=2) == \
        "Evaluated 96 images (3 batches of 32) of the 10,000 in the validation set (2 skipped as corrupt, see the " \
        "warnings above)"
    # More missing than a partial batch: not blamed on the partial batch.
    assert evaluated_images_line(8, 24, 1, "epoch", 8, skipped=1) == \
        "Evaluated 8 of 24 images (1 skipped as corrupt, see the warnings above; 15 more not delivered by the " \
        "input, perhaps unreadable stream data)"


def _labels(tmp_path, count):
    path = tmp_path / "labels.txt"
    path.write_text("".join("class_{}\n".format(i) for i in range(count)))
    return str(path)


def test_a_labels_file_shorter_than_the_classifier_is_warned_about_once(tmp_path):
    path = _labels(tmp_path, 3)
    warnings = []
    names = load_class_names(path, RunConfig(model_dir=str(tmp_path), num_classes=5), warn=warnings.append)
    assert names == ["class_0", "class_1", "class_2"]
    assert warnings == ["WARNING: labels file {} names 3 classes but the model has 5 outputs; outputs 3..4 are "
                        "shown by number only".format(path)]


def test_a_labels_file_of_more_classes_than_the_classifier_is_refused(tmp_path):
    path = _labels(tmp_path, 7)
    with pytest.raises(UserError) as error:
        load_class_names(path, RunConfig(model_dir=str(tmp_path), num_classes=5))
    assert str(error.value) == ("labels file {} names 7 classes but the model has 5 outputs: it is the labels file "
                                "of another dataset (pass the right --labels_file)".format(path))


@pytest.mark.parametrize("names,num_classes", [(5, 5), (1000, 1001)])
def test_a_labels_file_that_covers_the_classifier_is_not_warned_about(tmp_path, names, num_classes):
    """1000 names for 1001 outputs is the ImageNet layout: labels 1..1000 use outputs 0..999."""
    warnings = []
    load_class_names(None, RunConfig(model_dir=str(tmp_path), num_classes=num_classes), warn=warnings.append)
    assert warnings == []  # no labels file at all
    load_class_names(_labels(tmp_path, names), RunConfig(model_dir=str(tmp_path), num_classes=num_classes),
                     warn=warnings.append)
    assert warnings == []


def test_throughput_of_a_run_not_longer_than_the_warmup_is_flagged():
    meter = ThroughputMeter(batch_size=8, warmup=5)
    for _ in range(5):
        meter.add(0.1)
    assert meter.warmup_warning() == (
        "WARNING: 5 step(s) ran, not more than --warmup_steps 5: the throughput and latency figures count all "
        "of them, warm-up included (run more than 5 steps for a steady-state figure)")
    meter.add(0.1)
    assert meter.warmup_warning() is None
    no_warmup = ThroughputMeter(batch_size=8, warmup=0)
    no_warmup.add(0.1)
    assert no_warmup.warmup_warning() is None


def test_inference_benchmark_on_real_data_says_what_it_evaluated_and_that_warmup_is_included(tmp_path):
    data_dir = tmp_path / "data"
    write_tfrecord_shards(str(data_dir), "validation", 1, 20, 40, num_classes=11, seed=1)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(
        [sys.executable, "main.py", "--mode", "inference_benchmark", "--data_dir", str(data_dir), "--batch_size", "8",
         "--image_size", "32", "--num_classes", "11", "--results_dir", str(tmp_path / "results"), "--no_progress"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Evaluated 16 of 20 images (the last partial batch of 4 is dropped, as the original)" in result.stdout
    assert "WARNING: 2 step(s) ran, not more than --warmup_steps 50" in result.stdout


def _evaluate_in_process(tmp_path, monkeypatch, corrupt, records_per_shard=8):
    """Runner.evaluate("epoch", 1, batch 8) on 3 validation shards with `corrupt` records, random weights and a
    stub eval step: (results, printed text, labels evaluated). Labels 1..24 identify the records."""
    import tensorflow as tf

    from runtime import runner as runner_module, train_step
    from utils import distributed
    from utils.logger import DLLogger

    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 3, records_per_shard, 40, num_classes=101, corrupt=corrupt)
    evaluated = []

    def make_eval_step(model, num_classes, jit_compile):
        def eval_step(images, labels):
            evaluated.extend(labels.numpy().tolist())
            hits1 = tf.reduce_sum(tf.cast(labels < 3, tf.int32))  # "top-1" hits: labels 0..2
            return hits1, tf.size(labels), None, tf.constant(0)
        return eval_step

    monkeypatch.setattr(train_step, "make_eval_step", make_eval_step)
    config = RunConfig(data_dir=str(data), num_classes=101, image_size=32, batch_size=8, model_dir=str(tmp_path / "m"),
                       no_progress=True)
    runner = runner_module.Runner(config, DLLogger(None), distributed.single_process())
    monkeypatch.setattr(runner, "restore_for_inference", lambda required, ema=False: None)
    return runner.evaluate("epoch", 1, 8), evaluated


def test_an_evaluation_reads_each_record_once_and_says_how_many_were_skipped(tmp_path, capsys, monkeypatch):
    """Four corrupt records among 24: the 20 good ones make 2 whole batches of 8, each record at most once, and
    the line and the accuracies count exactly those 16."""
    corrupt = {(0, 2): "bad_jpeg", (1, 1): "missing_image", (1, 5): "not_example", (2, 7): "bad_jpeg"}
    results, evaluated = _evaluate_in_process(tmp_path, monkeypatch, corrupt)
    out = capsys.readouterr().out
    assert ("Evaluated 16 of 24 images (4 skipped as corrupt, see the warnings above; the last partial batch of 4 "
            "is dropped, as the original)") in out
    assert len(evaluated) == 16 and len(set(evaluated)) == 16  # one label per record: none read twice
    assert results["top1_accuracy"] == sum(label < 3 for label in evaluated) / 16
    assert results["top5_accuracy"] == 1.0


def test_an_evaluation_without_one_whole_batch_of_good_records_is_an_error(tmp_path, monkeypatch):
    corrupt = {(shard, i): "bad_jpeg" for shard in range(3) for i in range(4) if (shard, i) != (0, 0)}
    with pytest.raises(UserError, match=r"^no whole batch of 8 validation images could be read: 11 of the 12 "
                                        r"records were skipped as corrupt \(see the warnings above\)$"):
        _evaluate_in_process(tmp_path, monkeypatch, corrupt, records_per_shard=4)
