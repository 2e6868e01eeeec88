"""Training flags at their edges, run from the CLI: --xla with --mixup (the Beta sampler has no XLA kernel, so it
runs outside the compiled step), and a small --num_classes at the default --weight_init fan_out (the classifier
init keeps the first loss near ln K)."""

import math
import os

import numpy as np
import pytest

from tests._cli import main_in_process
from tests._data_helpers import write_tfrecord_shards
from utils.logger import read_log

pytestmark = pytest.mark.shallow



def run_main(*args):
    return main_in_process(*args)


@pytest.mark.slow
def test_xla_compiled_train_step_with_mixup_and_a_seed_runs(tmp_path):
    """--seed turns op determinism on, under which TF's XLA refuses the max-pool gradient (until 2026-12-06 every
    `--xla --seed` training failed with a traceback naming a GPU): with --xla it stays off and the log says so."""
    from runtime import startup
    result = run_main("--mode", "training_benchmark", "--xla", "--mixup", 0.2, "--batch_size", 2, "--num_iter", 2,
                      "--warmup_steps", 0, "--synthetic_data_size", 32, "--num_classes", 10, "--cpu", "--seed", 1,
                      "--results_dir", tmp_path, "--no_progress")
    assert "Using mixup training with beta= 0.2" in result.stdout
    assert "train_throughput" in result.stdout
    assert result.stdout.count(startup.XLA_NOT_DETERMINISTIC) == 1


@pytest.mark.slow
def test_ten_classes_at_default_flags_start_near_ln_10(tmp_path):
    """The default fan_out init once started K = 10 at a cross-entropy of ~30 with a growing L2 term."""
    data_dir = str(tmp_path / "data")
    write_tfrecord_shards(data_dir, "train", 2, 24, 40, num_classes=11, with_bbox=True)  # labels 1..10
    results = str(tmp_path / "results")
    run_main("--mode", "train", "--data_dir", data_dir, "--num_classes", 10, "--image_size", 32, "--batch_size", 8,
             "--num_iter", 4, "--iter_unit", "batch", "--display_every", 1, "--seed", 2, "--results_dir", results,
             "--no_progress")
    steps = [r["data"] for r in read_log(os.path.join(results, "log.json"))
             if r["type"] == "LOG" and len(r.get("step") or ()) == 2 and "cross_entropy" in r["data"]]
    assert len(steps) == 4
    cross_entropy = [s["cross_entropy"] for s in steps]
    assert np.mean(cross_entropy) < 5, cross_entropy  # ln(10) = 2.30 plus the original's initial logit scale
    assert max(cross_entropy) < 2 * math.log(10) + 5, cross_entropy
    assert steps[-1]["l2_loss"] / steps[0]["l2_loss"] < 1.01
