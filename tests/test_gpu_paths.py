"""GPU code paths run on CPU as far as TensorFlow allows (docs/GPU.md): float16 AMP with dynamic and static loss
scaling (`--amp --amp_dtype float16`) from the CLI, the mirrored engine on two logical CPU devices. Marked `gpu_path`;
they run in CI. Their unit tests are in test_precision.py (the AMP dtype, loss scaling at the train step),
test_devices.py (GPU selection) and test_inputs.py (prefetch to the accelerator)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests._cli import main_in_process, run_command, run_script
from tests._data_helpers import write_tfrecord_shards
from utils.ema import EMA_SUFFIX
from utils.logger import read_log

pytestmark = [pytest.mark.gpu_path, pytest.mark.shallow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES = 5


def run_main(*args):
    return main_in_process(*args, check=False)


def train_args(data, results, *extra):
    return ["--mode", "train", "--batch_size", 4, "--iter_unit", "batch", "--data_dir", data, "--num_classes",
            NUM_CLASSES, "--image_size", 32, "--results_dir", results, "--display_every", 1, "--no_progress",
            "--amp", "--amp_dtype", "float16", *extra]


def logged_scales(results):
    """(step, loss_scale) of every per-step training record of results/log.json, in order."""
    return [(r["step"][1], r["data"]["loss_scale"]) for r in read_log(os.path.join(results, "log.json"))
            if r["type"] == "LOG" and isinstance(r["step"], list) and len(r["step"]) == 2
            and "loss_scale" in r["data"]]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("data"))
    write_tfrecord_shards(directory, "train", 1, 8, 40, num_classes=NUM_CLASSES)
    return directory


@pytest.mark.slow
def test_float16_training_logs_skips_and_resumes_its_dynamic_loss_scale(tmp_path, data_dir):
    results = str(tmp_path / "results")
    first = run_main(*train_args(data_dir, results, "--num_iter", 6, "--run_iter", 3))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Running 3 of the 6 steps left (--run_iter 3 batches)" in first.stdout.splitlines()
    assert "Mixed precision: mixed_float16, dynamic loss scaling" in first.stdout
    scales = logged_scales(results)
    assert [s for s, _ in scales] == [1, 2, 3] and scales[0][1] == 2.0 ** 15
    # each logged scale is the previous one or half of it (a skipped step); no growth within 2000 steps
    assert all(b in (a, a / 2) for (_, a), (_, b) in zip(scales, scales[1:]))
    records = read_log(os.path.join(results, "log.json"))
    skipped = [r["data"]["skipped_steps"] for r in records if "skipped_steps" in r.get("data", {})]
    assert sum(b == a / 2 for (_, a), (_, b) in zip(scales, scales[1:])) <= (skipped[0] if skipped else 0)
    # a run whose every step was skipped applied no update: said (an audit saw 2 of 2 skipped, 2026-12-08)
    assert ("WARNING: all 3 steps were skipped (non-finite float16 gradients under loss scaling): no update was "
            "applied" in first.stdout) == (bool(skipped) and skipped[0] == 3)
    saved = float(tf.train.load_checkpoint(os.path.join(results, "model.ckpt-3")).get_tensor(
        "loss_scale/current_loss_scale"))
    assert saved in (scales[-1][1], scales[-1][1] / 2)

    second = run_main(*train_args(data_dir, results, "--num_iter", 6))
    assert second.returncode == 0, second.stderr[-2000:]
    assert "Current step: 3" in second.stdout and "with the optimizer state" in second.stdout
    resumed = logged_scales(results)[len(scales):]
    assert [s for s, _ in resumed] == [4, 5, 6]
    assert resumed[0][1] == saved  # the resumed run starts from the saved scale, not 2**15


@pytest.mark.slow
def test_float16_with_a_static_loss_scale_never_skips_and_an_overflow_stops_the_run_by_name(tmp_path, data_dir):
    """Static scaling (the original's FixedLossScalerOptimizer) never skips: at scale 4 every step runs with it; at
    scale 65536 the float16 gradients of this CPU run overflow, and the run stops at once naming the flag to lower."""
    results = str(tmp_path / "results")
    # Seeded: unseeded float16 runs of this tiny model (batch 4, 32 px) sometimes go non-finite at any scale.
    result = run_main(*train_args(data_dir, results, "--num_iter", 3, "--static_loss_scale", 4, "--seed", 1))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Mixed precision: mixed_float16, static loss scale 4" in result.stdout
    assert [scale for _, scale in logged_scales(results)] == [4.0, 4.0, 4.0]
    assert not [r for r in read_log(os.path.join(results, "log.json")) if "skipped_steps" in r.get("data", {})]
    overflow = run_main(*train_args(data_dir, str(tmp_path / "overflow"), "--num_iter", 3, "--static_loss_scale",
                                    65536, "--seed", 1))
    assert overflow.returncode == 2
    assert "float16 gradients overflowed at the static loss scale: lower --static_loss_scale" in overflow.stderr


def test_gpu_check_script_prints_its_plan_and_refuses_to_run_without_a_gpu(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", WORKDIR=str(tmp_path / "work"), DRY_RUN="1", NUM_GPUS="0")
    plan = run_command(["bash", "scripts/gpu_check.sh"], check=False, env=env, timeout=120)
    assert plan.returncode == 0, plan.stderr
    for check in ("fp32", "amp_xla_static128", "amp_xla_nchw", "mirrored_2gpu", "launcher_2gpu", "horovod_2gpu",
                  "infer_amp_xla_b32", "qat_frozen_graph", "qat_onnx", "tensorrt_int8_b32"):
        assert any(line.startswith(check + " ") for line in plan.stdout.splitlines()), check
    assert "--data_format NCHW" in plan.stdout and "RN50_ENGINE=mirrored" in plan.stdout
    assert not os.path.exists(tmp_path / "work")  # a dry run writes nothing
    env["DRY_RUN"] = "0"
    real = run_command(["bash", "scripts/gpu_check.sh"], check=False, env=env, timeout=300)
    assert real.returncode == 1
    assert "No GPU: nothing to check here" in real.stdout
    assert "tensorflow 2.21" in open(tmp_path / "work" / "report.txt").read()
    # GPUs listed, but TensorFlow sees none (a CPU install, an old driver, a container without --gpus): every check
    # ran on the CPU and passed, until 2026-12-08 (an audit); now one FAIL line and no check runs
    env["NUM_GPUS"] = "2"
    listed = run_command(["bash", "scripts/gpu_check.sh"], check=False, env=env, timeout=300)
    assert listed.returncode == 1
    assert "FAIL: 2 GPU(s) to check (nvidia-smi -L, or NUM_GPUS), but TensorFlow sees none: the checks would run on " \
        "the CPU." in listed.stdout, listed.stdout
    assert not os.path.exists(tmp_path / "work" / "fp32.log")


@pytest.mark.slow
def test_mirrored_engine_on_two_logical_cpu_devices_trains_resumes_and_evaluates(tmp_path, data_dir):
    """The single-node multi-GPU path (RN50_ENGINE=mirrored, one process, one replica per device) on two logical
    CPU devices, with the extensions that run inside the replica step (gradient accumulation, the EMA, CutMix): the
    effective batch is 2 replicas x 2 micro-batches x --batch_size, the LR is scaled by it, a second run resumes and
    evaluates both weights."""
    results = str(tmp_path / "results")
    validation = str(tmp_path / "validation")
    write_tfrecord_shards(validation, "validation", 1, 4, 40, num_classes=NUM_CLASSES)
    os.symlink(os.path.join(data_dir, sorted(os.listdir(data_dir))[0]),
               os.path.join(validation, sorted(os.listdir(data_dir))[0]))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", RN50_ENGINE="mirrored", RN50_CPU_REPLICAS="2")
    args = ["main.py", "--batch_size", 2, "--num_iter", 3, "--iter_unit", "batch", "--data_dir", validation,
            "--num_classes", NUM_CLASSES, "--image_size", 32, "--results_dir", results, "--display_every", 1,
            "--no_progress", "--grad_accum_steps", 2, "--moving_average_decay", 0.9, "--cutmix", 1.0]

    def run(*extra):
        return run_script(*args, *extra, check=False, env=env)

    first = run("--mode", "train", "--run_iter", 2)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Num GPUs 2" in first.stdout and "Per-GPU Batch Size 2" in first.stdout
    assert "Global Batch Size 8 (1 process x 2 replicas, mirrored, 2 micro-batches each)" in first.stdout
    assert "effective batch 8" in first.stdout
    # 8 records, effective batch 8, 3 steps: 3 epochs of 1 step; warmup int(5 * 1) = 5 steps from 0 to
    # lr_init * 8 / 256, so step 2 runs at lr_init * 8 / 256 * 1 / 5 (the schedule is evaluated before the update).
    records = [r for r in read_log(os.path.join(results, "log.json")) if r["type"] == "LOG"
               and isinstance(r["step"], list) and len(r["step"]) == 2]
    assert [r["step"][1] for r in records] == [1, 2]
    assert records[1]["data"]["learning_rate"] == pytest.approx(0.1 * 8 / 256 / 5, rel=1e-5)
    second = run("--mode", "train_and_evaluate")
    assert second.returncode == 0, second.stderr[-2000:]
    assert "Current step: 2" in second.stdout and "with the optimizer state" in second.stdout
    assert "Evaluated 4 of 4 images" in second.stdout and "ema_top1_accuracy" in second.stdout
    reader = tf.train.load_checkpoint(os.path.join(results, "model.ckpt-3"))
    key = "resnet50/conv2d/conv2d/kernel"
    assert not np.allclose(reader.get_tensor(key), reader.get_tensor(key + EMA_SUFFIX))


def test_mirrored_train_step_applies_the_mean_of_the_replicas_gradients():
    result = run_script("tests/_mirrored_step_worker.py", check=False, timeout=300,
                        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert result.returncode == 0, result.stderr[-2000:]
    import json
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["replicas"] == 2 and out["devices"] == ["/cpu:0", "/cpu:1"] and out["step"] == 1
    per_replica = [[np.array(g) for g in grads] for grads in out["reference"]]
    assert all(np.abs(a - b).max() > 1e-3 for a, b in zip(*per_replica))  # the replicas' batches differ
    for before, after, a, b in zip(out["before"], out["after"], *per_replica):
        # first TF1-momentum step: w1 = w0 - lr * (mean of the two replicas' gradients), not their sum
        np.testing.assert_allclose(np.array(after), np.array(before) - 0.5 * (a + b) / 2, rtol=1e-5, atol=1e-6)


def test_sigterm_under_the_mirrored_engine_stops_after_the_step_with_a_checkpoint(tmp_path, data_dir):
    import signal
    import time
    results = tmp_path / "results"
    out_path = tmp_path / "out.txt"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", RN50_ENGINE="mirrored", RN50_CPU_REPLICAS="2")
    args = ["main.py", "--mode", "train", "--batch_size", 2, "--num_iter", 40, "--iter_unit", "batch", "--data_dir",
            data_dir, "--num_classes", NUM_CLASSES, "--image_size", 32, "--results_dir", results, "--display_every",
            1, "--no_progress"]
    with open(out_path, "w") as out:
        process = subprocess.Popen([sys.executable, *map(str, args)], cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while "- (0, 1) imgs_per_sec" not in out_path.read_text():
            assert process.poll() is None, out_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "no training step logged"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=600) == 0, out_path.read_text()[-3000:]
    text = out_path.read_text()
    assert "Received signal SIGTERM: stopping after the current step" in text and "Num GPUs 2" in text
    stopped = int(text.split("training stopped by a signal at step ")[1].split(";")[0])
    assert 1 <= stopped < 40
    assert os.path.exists(results / "model.ckpt-{}.index".format(stopped))


def test_float16_loss_scale_goes_to_tensorboard_every_100_steps(tmp_path, data_dir, monkeypatch):
    """The summaries' period is the original's 100 steps; the run here writes them every 3 steps (the same code)."""
    import glob
    from runtime import runner
    assert runner.SUMMARY_EVERY_STEPS == 100
    monkeypatch.setattr(runner, "SUMMARY_EVERY_STEPS", 3)
    results = str(tmp_path / "results")
    result = run_main(*train_args(data_dir, results, "--num_iter", 7, "--display_every", 50))
    assert result.returncode == 0, result.stderr[-2000:]
    scalars = {}
    for path in glob.glob(os.path.join(results, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalars[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
    assert {step for tag, step in scalars if tag == "loss_scale"} == {3, 6}
    assert ("total_loss", 3) in scalars and ("total_loss", 6) in scalars
    assert 0 < scalars[("loss_scale", 6)] <= 2.0 ** 15
