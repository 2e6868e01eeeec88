"""Faults (docs/RELIABILITY.md): kill -9 mid-run and mid-checkpoint, SIGTERM/SIGINT preemption (one and two
workers), exact resume, non-finite losses, a full disk, files created under a permissive umask, torn log lines.

Every end-to-end test runs main.py in a subprocess on tiny TFRecords (32 px, 11 classes, batch 4) and compares
the final checkpoint of interrupted-and-resumed runs tensor by tensor with one uninterrupted run (`reference`).
"""
import errno
import glob
import os
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest

from tests._cli import main_in_process
from tests._data_helpers import write_tfrecord_shards
from tests._reliability_helpers import (SMALL, NUM_CLASSES, Process, assert_checkpoints_identical,
                                        checkpoint_steps, latest_checkpoint, read_all_tensors, run)
from utils.errors import UserError
from utils.logger import DLLogger, read_log

pytestmark = pytest.mark.shallow

NUM_STEPS = 6


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tfrecords")
    write_tfrecord_shards(str(directory), "train", 2, 24, 40, num_classes=NUM_CLASSES, with_bbox=True)
    write_tfrecord_shards(str(directory), "validation", 1, 8, 40, num_classes=NUM_CLASSES, seed=1)
    return str(directory)


def train_args(data_dir, results_dir, *extra):
    """The run every resume is compared with: seeded, with mixup and label smoothing (stateless mixup RNG)."""
    return ["--mode", "train", "--data_dir", data_dir, "--batch_size", 4, "--num_iter", NUM_STEPS,
            "--iter_unit", "batch", "--results_dir", results_dir, "--seed", 5, "--mixup", 0.2,
            "--label_smoothing", 0.1, *SMALL, *extra]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir):
    """One uninterrupted 6-step run (train_and_evaluate + export) under umask 000."""
    results = tmp_path_factory.mktemp("reference")
    export = results / "export"
    args = train_args(data_dir, results, "--export_dir", export)
    args[args.index("train")] = "train_and_evaluate"
    run(args, umask=0)
    assert checkpoint_steps(results) == [0, NUM_STEPS]
    return {"dir": str(results), "export": str(export), "ckpt": latest_checkpoint(results)}


def step_logged(process, step):
    return lambda: "- (0, {}) imgs_per_sec".format(step) in process.stdout()


def logged_steps(results_dir):
    return [r["step"][1] for r in read_log(os.path.join(results_dir, "log.json"))
            if r["type"] == "LOG" and "total_loss" in r["data"] and len(r["step"]) == 2]


# ------------------------------------------------------------------------------------------ preemption
@pytest.mark.slow
def test_sigterm_checkpoints_exits_0_and_resume_is_bit_identical(tmp_path, data_dir, reference):
    results = tmp_path / "results"
    process = Process(train_args(data_dir, results), tmp_path, "first")
    process.wait_for(step_logged(process, 1), what="step 1")
    process.signal(signal.SIGTERM)
    assert process.finish() == 0, process.stderr()[-3000:]
    out = process.stdout()
    assert "Received signal SIGTERM: stopping after the current step" in out
    stopped = int(out.split("training stopped by a signal at step ")[1].split(";")[0])
    assert 1 <= stopped < NUM_STEPS
    assert checkpoint_steps(results)[-1] == stopped
    read_all_tensors(latest_checkpoint(results))

    resumed = main_in_process(*train_args(data_dir, results))
    assert "Current step: {}".format(stopped) in resumed.stdout
    assert logged_steps(results) == list(range(1, NUM_STEPS + 1))  # no step lost or done twice
    names = assert_checkpoints_identical(latest_checkpoint(results), reference["ckpt"])
    for kind in ("/kernel", "/moving_variance", "/Momentum"):  # weights, BN statistics, momentum slots
        assert any(name.endswith(kind) for name in names), kind
    assert "global_step" in names


def test_ctrl_c_checkpoints_and_exits_130_so_a_calling_script_stops(tmp_path, data_dir):
    """The same stop as a preemption's, but a user's Ctrl-C: status 130 (the shell's for SIGINT), so `set -e`
    scripts (scripts/quickstart.sh) and launchers stop instead of going on as after a finished run."""
    results = tmp_path / "results"
    process = Process(train_args(data_dir, results), tmp_path, "ctrl_c")
    process.wait_for(step_logged(process, 1), what="step 1")
    process.signal(signal.SIGINT)
    assert process.finish() == 130, process.stderr()[-3000:]
    stopped = int(process.stdout().split("training stopped by a signal at step ")[1].split(";")[0])
    assert checkpoint_steps(results)[-1] == stopped
    assert process.stderr().strip().splitlines()[-1] == (
        f"INTERRUPTED: main.py stopped by SIGINT; checkpoint written at step {stopped}; run the same command again "
        "to resume")


def test_ctrl_c_in_a_training_benchmark_says_it_wrote_no_checkpoint(tmp_path):
    """A benchmark neither restores nor writes checkpoints: its interrupt line must not promise one to resume."""
    results = tmp_path / "results"
    process = Process(["--mode", "training_benchmark", "--batch_size", 2, "--num_iter", 100000, "--iter_unit",
                       "batch", "--warmup_steps", 1, "--results_dir", results, *SMALL],
                      tmp_path, "benchmark")
    process.wait_for(lambda: "- (0, 2) total_ips" in process.stdout(), what="benchmark step 2")
    process.signal(signal.SIGINT)
    assert process.finish() == 130, process.stderr()[-3000:]
    stopped = int(process.stdout().split("training stopped by a signal at step ")[1].split(";")[0])
    assert "a benchmark writes no checkpoint" in process.stdout()
    assert "train_throughput" in process.stdout()
    assert process.stderr().strip().splitlines()[-1] == (
        f"INTERRUPTED: main.py stopped by SIGINT; benchmark stopped at step {stopped}; its throughput line covers "
        "the steps it ran")
    assert checkpoint_steps(results) == [] and not glob.glob(str(results / "model.ckpt-*"))


def test_ctrl_c_in_an_inference_benchmark_logs_the_figures_of_the_steps_it_ran_and_exports_nothing(tmp_path):
    """As a training benchmark: Ctrl-C stops it after the current step with its throughput and latency logged over
    the steps it ran (before, it logged nothing), status 130; the SavedModel asked for is not written."""
    results, export_dir = tmp_path / "results", tmp_path / "export"
    process = Process(["--mode", "inference_benchmark", "--batch_size", 2, "--num_iter", 100000, "--iter_unit",
                       "batch", "--warmup_steps", 1, "--results_dir", results, "--export_dir",
                       export_dir, *SMALL], tmp_path, "inference_benchmark")
    process.wait_for(lambda: "- (0, 3) total_ips" in process.stdout(), what="benchmark step 3")
    process.signal(signal.SIGINT)
    assert process.finish() == 130, process.stderr()[-3000:]
    stopped = int(process.stdout().split("inference benchmark stopped by a signal at step ")[1].split(";")[0])
    assert stopped >= 3
    final = [record["data"] for record in read_log(str(results / "log.json"))
             if record["type"] == "LOG" and record["step"] == [] and "eval_throughput" in record["data"]]
    assert len(final) == 1 and final[0]["eval_throughput"] > 0 and final[0]["eval_latency_avg"] > 0
    assert process.stderr().strip().splitlines()[-1] == (
        f"INTERRUPTED: main.py stopped by SIGINT; benchmark stopped at step {stopped}; its throughput line covers "
        "the steps it ran")
    assert "nothing exported to --export_dir" in process.stdout() and not export_dir.exists()


@pytest.mark.slow
def test_kill_9_mid_checkpoint_then_double_sigint_then_resume_is_bit_identical(tmp_path, data_dir, reference):
    """kill -9 while checkpoint 2 is being written; then a resumed run gets SIGINT twice (the second one exits at
    once, maybe in the middle of its checkpoint); a third run finishes. Never a half checkpoint in use."""
    results = tmp_path / "results"
    process = Process(train_args(data_dir, results, "--checkpoint_interval", 1), tmp_path, "killed")
    in_flight = [results / "model.ckpt-2_temp", results / "model.ckpt-2.index"]
    process.wait_for(lambda: any(p.exists() for p in in_flight), poll=0.002, what="checkpoint 2 being written")
    process.kill()
    with open(results / "checkpoint") as state:
        assert 'model_checkpoint_path: "model.ckpt-' in state.read()
    survivor = latest_checkpoint(results)
    assert survivor.endswith(("-1", "-2"))
    read_all_tensors(survivor)  # complete and checksummed

    process = Process(train_args(data_dir, results, "--checkpoint_interval", 1), tmp_path, "interrupted")
    restored = int(survivor.rsplit("-", 1)[1])
    process.wait_for(step_logged(process, restored + 1), what="a step after the restored one")
    process.signal(signal.SIGINT)
    process.wait_for(lambda: "Received signal SIGINT" in process.stdout(), poll=0.005, what="first SIGINT")
    process.signal(signal.SIGINT)
    returncode = process.finish(timeout=120)
    assert returncode == 130, "the second signal must exit at once, with the shell's status for SIGINT"
    # one line says so and what is kept (the training loop's handler writes it: no traceback, no other line)
    assert process.stderr().strip().splitlines()[-1] == (
        "INTERRUPTED: main.py stopped by a second SIGINT, at once; the last complete checkpoint is kept: run the "
        "same command again to resume from it")
    assert "Traceback" not in process.stderr()
    read_all_tensors(latest_checkpoint(results))

    final = main_in_process(*train_args(data_dir, results))
    assert "Current step: " in final.stdout
    assert checkpoint_steps(results)[-1] == NUM_STEPS
    assert_checkpoints_identical(latest_checkpoint(results), reference["ckpt"])
    # The killed save's model.ckpt-N_temp/ debris is cleared when training starts again.
    assert "_temp" not in (results / "checkpoint").read_text()
    assert not list(results.glob("model.ckpt-*_temp"))
    with open(results / "log.json") as handle:  # every line one record: a resumed run never glues two
        for line in handle:
            assert line.count("DLLL ") <= 1
    assert set(logged_steps(results)) == set(range(1, NUM_STEPS + 1))


@pytest.mark.slow
def test_two_workers_sigterm_to_launcher_all_agree_checkpoint_and_exit_0(tmp_path, data_dir):
    results = tmp_path / "results"
    args = ["--nproc", 2, "main.py", "--mode", "train", "--data_dir", data_dir, "--batch_size", 2, "--num_iter",
            100, "--iter_unit", "batch", "--results_dir", results, *SMALL]
    process = Process(args, tmp_path, "launch", command=[sys.executable, "-m", "runtime.launch"])
    process.wait_for(step_logged(process, 1), timeout=900, what="step 1 on rank 0")
    process.signal(signal.SIGTERM)
    assert process.finish(timeout=900) == 0, process.stderr()[-3000:]
    out = process.stdout()
    # Workers agree every 10 steps (docs/ORIGINAL.md#preemption): both stop at the same multiple of 10.
    # rank 0 says what it kept; worker 1 says only that it stopped with the others (rank 0 alone checkpoints)
    assert out.count("training stopped by a signal at step 10; checkpoint written") == 1, out[-3000:]
    assert "[worker 1] worker 1 stopped with the others at step 10; rank 0 wrote the checkpoint" in out.splitlines()
    # Each says when it stops: the workers agree every 10 steps, not after every one.
    assert out.count("Received signal SIGTERM: stopping at the next step the workers agree on (they do every 10 "
                     "steps) (send it again to exit at once)") == 2, out[-3000:]
    assert checkpoint_steps(results) == [0, 10]
    read_all_tensors(latest_checkpoint(results))


# ------------------------------------------------------------------------------------------ non-finite loss
@pytest.mark.slow
def test_non_finite_loss_in_fp32_stops_naming_the_step_and_keeps_the_checkpoint(tmp_path, data_dir):
    results = tmp_path / "results"
    result = main_in_process("--mode", "train", "--data_dir", data_dir, "--batch_size", 4, "--num_iter", NUM_STEPS,
                             "--iter_unit", "batch", "--results_dir", results, "--lr_init", "1e30", *SMALL,
                             check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "the loss became" in errors[0] and "at step 2" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert checkpoint_steps(results) == [0]
    tensors = read_all_tensors(latest_checkpoint(results))
    assert all(np.isfinite(value).all() for value in tensors.values() if np.asarray(value).dtype.kind == "f")


def test_train_stats_counts_skipped_steps_and_stops_after_too_many_in_a_row():
    from runtime.metrics import TrainStats
    stats = TrainStats(dynamic_loss_scaling=True, max_skipped=3)
    pattern = [True, True, False, True, True, True]
    for step, skipped in enumerate(pattern[:-1], start=1):
        stats.check({"skipped": np.bool_(skipped), "total_loss": np.float32("nan")}, step)
    assert stats.skipped_total == 4 and stats.skipped_in_a_row == 2
    with pytest.raises(UserError, match="3 training steps in a row had non-finite gradients .last at step 6"):
        stats.check({"skipped": np.bool_(True), "total_loss": np.float32(1.0)}, 6)
    for loss in ("inf", "-inf", "nan"):
        with pytest.raises(UserError, match="the loss became .* at step 7"):
            TrainStats(dynamic_loss_scaling=False, max_skipped=3).check(
                {"skipped": np.bool_(False), "total_loss": np.float32(loss)}, 7)
    TrainStats(dynamic_loss_scaling=False, max_skipped=3).check(
        {"skipped": np.bool_(False), "total_loss": np.float32(2.5)}, 8)


# ------------------------------------------------------------------------------------------ full disk
def _mount_tmpfs(path, size):
    try:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size={}".format(size), "tmpfs", str(path)],
                                capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def test_full_disk_while_checkpointing_is_one_error_line_and_keeps_the_previous_checkpoint(tmp_path, data_dir,
                                                                                           reference):
    """model_dir on a tmpfs of 1.5 checkpoints (the reference run's): checkpoint 0 fits, checkpoint 1 does not."""
    model_dir = tmp_path / "small_disk"
    model_dir.mkdir()
    size = sum(os.path.getsize(path) for path in glob.glob(reference["ckpt"] + ".*"))
    if not _mount_tmpfs(model_dir, str(size * 3 // 2)):
        pytest.skip("cannot mount a tmpfs here (not root / no CAP_SYS_ADMIN); the in-process test covers it")
    try:
        result = run(["--mode", "train", "--data_dir", data_dir, "--batch_size", 4, "--num_iter", 3,
                      "--iter_unit", "batch", "--results_dir", tmp_path / "results", "--model_dir", model_dir,
                      "--checkpoint_interval", 1, *SMALL], check=False)
        assert result.returncode == 2, result.stderr[-2000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
        assert len(errors) == 1 and "cannot write checkpoint {}".format(model_dir / "model.ckpt-1") in errors[0]
        assert "Traceback" not in result.stderr
        assert checkpoint_steps(model_dir) == [0]
        assert not list(model_dir.glob("model.ckpt-1*")), "the failed save's debris is removed"
        read_all_tensors(latest_checkpoint(model_dir))
    finally:
        subprocess.run(["umount", str(model_dir)], capture_output=True, timeout=60)


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   "resource_exhausted", PermissionError(errno.EACCES, "Permission denied")])
def test_checkpoint_write_errors_become_user_errors_and_clean_up(tmp_path, error, monkeypatch):
    import importlib
    import tensorflow as tf
    from model import checkpoint
    if error == "resource_exhausted":
        error = tf.errors.ResourceExhaustedError(None, None, "model.ckpt-5_temp; No space left on device")
    (tmp_path / "model.ckpt-5_temp").mkdir()
    (tmp_path / "model.ckpt-5.data-00000-of-00001").write_bytes(b"half")
    (tmp_path / "model.ckpt-4.index").write_bytes(b"previous")
    checkpoint.write_state_file(str(tmp_path), ["model.ckpt-4"])

    def failing_write(*_, **__):
        raise error

    # CheckpointWriter.save calls the write() of its own module (the package's `write` is that function).
    monkeypatch.setattr(importlib.import_module("model.checkpoint.write"), "write", failing_write)
    writer = checkpoint.CheckpointWriter(str(tmp_path), {}, {})
    with pytest.raises(UserError, match="cannot write checkpoint .*model.ckpt-5 .*kept: .*model.ckpt-4"):
        writer.save(5)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model.ckpt-4.index"]


def test_results_or_model_dir_that_is_a_file_is_a_clear_error(tmp_path, data_dir):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for flag in ("--results_dir", "--model_dir"):
        result = run(["--mode", "train", "--data_dir", data_dir, "--batch_size", 4, flag, blocker, *SMALL],
                     check=False)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines()[-1] == "ERROR: {} {} exists and is not a directory".format(
            flag, blocker)
        assert blocker.read_text() == "x"


# ------------------------------------------------------------------------------------------ logs and modes
def test_resumed_log_starts_on_a_new_line_after_a_torn_one(tmp_path):
    path = tmp_path / "log.json"
    logger = DLLogger(str(path), stdout=False)
    logger.log(step=(0, 1), data={"total_loss": 1.0})
    logger.close()
    with open(path, "a") as handle:
        handle.write('DLLL {"type": "LOG", "step": [0, 2], "da')  # killed mid-line
    logger = DLLogger(str(path), stdout=False)
    logger.log(step=(0, 3), data={"total_loss": 3.0})
    logger.close()
    steps = [r["step"] for r in read_log(str(path)) if r["type"] == "LOG"]
    assert steps == [[0, 1], [0, 3]]
    assert path.read_text().endswith("\n")


def test_log_write_error_is_a_user_error(tmp_path):
    logger = DLLogger("/dev/full", stdout=False)
    with pytest.raises(UserError, match="^cannot write the log /dev/full: No space left on device$"):
        logger.log(step=(), data={"x": 1})
    logger.close()


def _group_or_world_writable(root):
    found = []
    for directory, dirs, files in os.walk(root):
        for name in [directory] + [os.path.join(directory, n) for n in dirs + files]:
            if os.stat(name).st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                found.append(name)
    return found


def test_files_created_under_umask_000_are_not_world_writable(reference):
    assert os.path.isdir(reference["export"]) and os.listdir(reference["export"])
    files = sum(len(f) for _, _, f in os.walk(reference["dir"]))
    assert files > 8  # checkpoints, state file, log, events, SavedModel
    assert _group_or_world_writable(reference["dir"]) == []


def test_dataprep_shards_under_umask_000_are_not_world_writable(tmp_path):
    from tests._dataprep_helpers import make_folder_tree
    make_folder_tree(str(tmp_path / "jpegs"))
    out = tmp_path / "tfrecords"
    result = run(["--train_directory", tmp_path / "jpegs" / "train", "--validation_directory", tmp_path / "jpegs" /
                  "val", "--output_directory", out, "--train_shards", 2, "--validation_shards", 1, "--num_workers", 1,
                  "--no_progress"], umask=0, script="-m dataprep.build_tfrecords", check=False)
    assert result.returncode == 1, result.stderr[-2000:]  # the tree's two files that are not images are skipped
    run([out, tmp_path / "idx", "--no_progress"], umask=0, script="-m dataprep.make_dali_index")
    assert len(os.listdir(out)) >= 3 and len(os.listdir(tmp_path / "idx")) >= 3
    assert _group_or_world_writable(out) == [] and _group_or_world_writable(tmp_path / "idx") == []
