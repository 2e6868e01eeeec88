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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_evaluation_line_counts_the_dropped_partial_batch():
    assert evaluated_images_line(9984, 10000, 1, "epoch", 32) == \
        "Evaluated 9,984 of 10,000 images (the last partial batch of 16 is dropped, as the original)"
    assert evaluated_images_line(64, 64, 1, "epoch", 32) == "Evaluated 64 of 64 images"
    assert evaluated_images_line(9984 * 2, 10000, 2, "epoch", 32) == \
        "Evaluated 19,968 of 20,000 images (2 epochs of 10,000 in whole batches of 32: 32 left out, as the original)"
    assert evaluated_images_line(96, 10000, 1, "batch", 32) == \
        "Evaluated 96 images (3 batches of 32) of the 10,000 in the validation set"


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


@pytest.mark.parametrize("names,num_classes", [(5, 5), (7, 5), (1000, 1001)])
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
