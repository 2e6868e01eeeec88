"""GPU code paths run on CPU as far as TensorFlow allows (docs/GPU.md): float16 AMP with dynamic and static loss
scaling (`--amp --amp_dtype float16`), from the CLI and at the train step. Marked `gpu_path`; they run in CI."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from runtime import train_step
from runtime.config import RunConfig
from tests._data_helpers import write_tfrecord_shards
from utils.devices import CPU, Platform
from utils.errors import UserError
from utils.logger import read_log
from utils.optimizers import TF1Momentum
from utils.precision import LossScaler, Precision

pytestmark = pytest.mark.gpu_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES = 5


def run_main(*args):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "main.py", *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


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


def test_amp_dtype_is_resolved_once_and_checked():
    assert Precision.resolve(True, -1, CPU) == Precision("mixed_bfloat16", None)
    assert Precision.resolve(True, -1, Platform(gpu=True)) == Precision("mixed_float16", "dynamic")
    assert Precision.resolve(True, -1, CPU, "float16") == Precision("mixed_float16", "dynamic")
    assert Precision.resolve(True, 128, CPU, "float16") == Precision("mixed_float16", "static", 128.0)
    assert Precision.resolve(True, -1, Platform(gpu=True), "bfloat16") == Precision("mixed_bfloat16", None)
    assert Precision.resolve(False, -1, CPU, None) == Precision()
    with pytest.raises(UserError, match="--amp_dtype only takes effect with --amp"):
        RunConfig(amp_dtype="float16")
    with pytest.raises(UserError, match="--amp_dtype must be one of float16, bfloat16"):
        RunConfig(amp=True, amp_dtype="float8")


def test_dynamic_loss_scale_skips_a_non_finite_step_and_grows_after_its_interval():
    """The train step of main.py with a float16 model: a step with non-finite gradients leaves the weights alone,
    says it was skipped and halves the scale; `dynamic_growth_steps` good steps in a row double it."""
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(NUM_CLASSES, dtype="mixed_float16")])
    optimizer = keras.optimizers.LossScaleOptimizer(TF1Momentum(0.1, 0.9), initial_scale=1024.0,
                                                    dynamic_growth_steps=2)
    optimizer.build(model.trainable_variables)
    global_step = tf.Variable(0, dtype=tf.int64)
    step = train_step.make_train_step(
        model, optimizer, lambda: tf.constant(0.1), global_step, loss=train_step.LossSettings(NUM_CLASSES),
        regularized=model.trainable_variables, scaler=LossScaler(Precision("mixed_float16", "dynamic"), optimizer),
        reduce_gradients=lambda grads: grads, strategy=tf.distribute.get_strategy(),
        mixup_seed=tf.constant(0, tf.int64))
    images = tf.constant(np.random.default_rng(0).normal(0, 1, (4, 6)), tf.float32)
    labels = tf.constant([0, 1, 2, 3], tf.int32)

    outputs = [step(images, labels) for _ in range(3)]
    assert [float(o["loss_scale"]) for o in outputs] == [1024.0, 1024.0, 2048.0]  # doubled after 2 good steps
    assert not any(bool(o["skipped"]) for o in outputs)
    before = [v.numpy().copy() for v in model.trainable_variables]
    bad = step(tf.fill([4, 6], np.float32("inf")), labels)
    assert bool(bad["skipped"]) and float(bad["loss_scale"]) == 2048.0
    assert float(optimizer.dynamic_scale.numpy()) == 1024.0
    for old, new in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(old, new.numpy())
    assert int(global_step.numpy()) == 4  # a skipped step still counts, as the original's global step


@pytest.mark.slow
def test_float16_training_logs_skips_and_resumes_its_dynamic_loss_scale(tmp_path, data_dir):
    results = str(tmp_path / "results")
    first = run_main(*train_args(data_dir, results, "--num_iter", 6, "--run_iter", 3))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Mixed precision: mixed_float16, dynamic loss scaling" in first.stdout
    assert "oneDNN" not in first.stderr
    scales = logged_scales(results)
    assert [s for s, _ in scales] == [1, 2, 3] and scales[0][1] == 2.0 ** 15
    # each logged scale is the previous one or half of it (a skipped step); no growth within 2000 steps
    assert all(b in (a, a / 2) for (_, a), (_, b) in zip(scales, scales[1:]))
    records = read_log(os.path.join(results, "log.json"))
    skipped = [r["data"]["skipped_steps"] for r in records if "skipped_steps" in r.get("data", {})]
    assert sum(b == a / 2 for (_, a), (_, b) in zip(scales, scales[1:])) <= (skipped[0] if skipped else 0)
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
    scale 1024 the float16 gradients of this CPU run overflow, and the run stops at once naming the flag to lower."""
    results = str(tmp_path / "results")
    # Seeded: unseeded float16 runs of this tiny model (batch 4, 32 px) sometimes go non-finite at any scale.
    result = run_main(*train_args(data_dir, results, "--num_iter", 3, "--static_loss_scale", 4, "--seed", 1))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Mixed precision: mixed_float16, static loss scale 4" in result.stdout
    assert [scale for _, scale in logged_scales(results)] == [4.0, 4.0, 4.0]
    assert not [r for r in read_log(os.path.join(results, "log.json")) if "skipped_steps" in r.get("data", {})]
    overflow = run_main(*train_args(data_dir, str(tmp_path / "overflow"), "--num_iter", 3, "--static_loss_scale",
                                    1024, "--seed", 1))
    assert overflow.returncode == 2
    assert "float16 gradients overflowed at the static loss scale: lower --static_loss_scale" in overflow.stderr


def test_gpu_check_script_prints_its_plan_and_refuses_to_run_without_a_gpu(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", WORKDIR=str(tmp_path / "work"), DRY_RUN="1", NUM_GPUS="0")
    plan = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert plan.returncode == 0, plan.stderr
    for check in ("fp32", "amp_xla_static128", "amp_xla_nchw", "mirrored_2gpu", "launcher_2gpu", "horovod_2gpu",
                  "infer_amp_xla_b32", "qat_frozen_graph", "qat_onnx", "tensorrt_int8_b32"):
        assert any(line.startswith(check + " ") for line in plan.stdout.splitlines()), check
    assert "--data_format NCHW" in plan.stdout and "RN50_ENGINE=mirrored" in plan.stdout
    assert not os.path.exists(tmp_path / "work")  # a dry run writes nothing
    env["DRY_RUN"] = "0"
    real = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert real.returncode == 1
    assert "No GPU: nothing to check here" in real.stdout
    assert "tensorflow 2.21" in open(tmp_path / "work" / "report.txt").read()


@pytest.mark.slow
def test_mirrored_engine_on_two_logical_cpu_devices_trains_resumes_and_evaluates(tmp_path, data_dir):
    """The single-node multi-GPU path (RN50_ENGINE=mirrored, one process, one replica per device) on two logical
    CPU devices: the global batch is 2 x --batch_size, the LR is scaled by it, a second run resumes and evaluates."""
    results = str(tmp_path / "results")
    validation = str(tmp_path / "validation")
    write_tfrecord_shards(validation, "validation", 1, 4, 40, num_classes=NUM_CLASSES)
    os.symlink(os.path.join(data_dir, sorted(os.listdir(data_dir))[0]),
               os.path.join(validation, sorted(os.listdir(data_dir))[0]))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", RN50_ENGINE="mirrored", RN50_CPU_REPLICAS="2")
    args = ["main.py", "--batch_size", 2, "--num_iter", 3, "--iter_unit", "batch", "--data_dir", validation,
            "--num_classes", NUM_CLASSES, "--image_size", 32, "--results_dir", results, "--display_every", 1,
            "--no_progress"]

    def run(*extra):
        return subprocess.run([sys.executable, *map(str, args), *map(str, extra)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=900)

    first = run("--mode", "train", "--run_iter", 2)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Num GPUs 2" in first.stdout and "Per-GPU Batch Size 2" in first.stdout
    # 8 records, global batch 4, 3 steps: 2 epochs of 1.5 steps; warmup int(5 * 1.5) = 7 steps from 0 to
    # lr_init * 4 / 256, so step 2 runs at lr_init * 4 / 256 * 1 / 7 (the schedule is evaluated before the update).
    records = [r for r in read_log(os.path.join(results, "log.json")) if r["type"] == "LOG"
               and isinstance(r["step"], list) and len(r["step"]) == 2]
    assert [r["step"][1] for r in records] == [1, 2]
    assert records[1]["data"]["learning_rate"] == pytest.approx(0.1 * 4 / 256 / 7, rel=1e-5)
    second = run("--mode", "train_and_evaluate")
    assert second.returncode == 0, second.stderr[-2000:]
    assert "Current step: 2" in second.stdout and "with the optimizer state" in second.stdout
    assert "Evaluated 4 of 4 images" in second.stdout
    assert os.path.exists(os.path.join(results, "model.ckpt-3.index"))


def test_mirrored_train_step_applies_the_mean_of_the_replicas_gradients():
    result = subprocess.run([sys.executable, "tests/_mirrored_step_worker.py"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert result.returncode == 0, result.stderr[-2000:]
    import json
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["replicas"] == 2 and out["devices"] == ["/cpu:0", "/cpu:1"] and out["step"] == 1
    per_replica = [[np.array(g) for g in grads] for grads in out["reference"]]
    assert all(np.abs(a - b).max() > 1e-3 for a, b in zip(*per_replica))  # the replicas' batches differ
    for before, after, a, b in zip(out["before"], out["after"], *per_replica):
        # first TF1-momentum step: w1 = w0 - lr * (mean of the two replicas' gradients), not their sum
        np.testing.assert_allclose(np.array(after), np.array(before) - 0.5 * (a + b) / 2, rtol=1e-5, atol=1e-6)


@pytest.fixture
def four_fake_gpus(monkeypatch):
    """tf.config as it looks with four GPUs: what utils/devices.setup_devices asks for and sets is recorded."""
    import types
    from utils import devices
    gpus = [types.SimpleNamespace(name="/physical_device:GPU:{}".format(i), device_type="GPU") for i in range(4)]
    calls = {"visible": [], "growth": [], "logical": []}
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: gpus if kind == "GPU" else [])
    monkeypatch.setattr(tf.config, "set_visible_devices",
                        lambda chosen, kind=None: calls["visible"].append([d.name[-1] for d in chosen]))
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth",
                        lambda device, on: calls["growth"].append(device.name[-1]))
    monkeypatch.setattr(tf.config, "set_logical_device_configuration",
                        lambda device, configs: calls["logical"].append((device.name[-1], configs[0].memory_limit)))
    monkeypatch.setattr(devices, "gpu_total_memory_mb", lambda index: 16000)
    return calls


def test_device_selection_gives_each_process_the_gpus_its_engine_asks_for(four_fake_gpus):
    from utils.devices import setup_devices
    from utils.distributed import Engine
    calls = four_fake_gpus
    assert setup_devices(gpu_id=2) == Platform(gpu=True)  # --gpu_id alone
    assert calls["visible"][-1] == ["2"] and calls["growth"] == ["2"]
    setup_devices(engine=Engine("multi_worker", rank=5, size=8, local_rank=5))  # local rank 5 of 4 GPUs
    assert calls["visible"][-1] == ["1"]
    setup_devices(engine=Engine("mirrored"))  # one process drives them all
    assert calls["visible"][-1] == ["0", "1", "2", "3"]
    setup_devices(gpu_id=0, dali_memory_fraction=0.7)  # DALI: --gpu_memory_fraction of the GPU, not growth
    assert calls["logical"] == [("0", int(16000 * 0.7))]
    assert setup_devices(cpu=True) == CPU and calls["visible"][-1] == []  # --cpu hides every GPU
    with pytest.raises(UserError, match="--gpu_id 4 but only 4 GPU"):
        setup_devices(gpu_id=4)


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


@pytest.mark.slow
def test_float16_loss_scale_goes_to_tensorboard_every_100_steps(tmp_path, data_dir):
    import glob
    results = str(tmp_path / "results")
    result = run_main(*train_args(data_dir, results, "--num_iter", 100, "--display_every", 50))
    assert result.returncode == 0, result.stderr[-2000:]
    scalars = {}
    for path in glob.glob(os.path.join(results, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalars[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
    assert ("loss_scale", 100) in scalars and ("total_loss", 100) in scalars
    assert 0 < scalars[("loss_scale", 100)] <= 2.0 ** 15
