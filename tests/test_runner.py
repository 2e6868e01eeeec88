"""runtime/runner.py: what an evaluation covers and says about itself, in process with a real checkpoint (the
records evaluated, skipped as corrupt, dropped in a partial batch), and the inference benchmark on real data from
main.py. Training through the Runner is tested in test_main.py, test_gpu_paths.py and
test_performance_contract.py."""

import glob
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from runtime.config import RunConfig
from tests._cli import main_in_process, tool_in_process
from tests._data_helpers import label_of, write_tfrecord_shards
from tests._dataprep_helpers import skimage_photo_dir
from utils.errors import UserError

pytestmark = pytest.mark.shallow

NUM_CLASSES = 101  # records 0..99 get labels 1..100: label - 1 is the record's index (shard-major)
RECORDS_PER_SHARD = 8
# The classifier of the checkpoint: kernel 0, so every image's logits are its bias, 5, 4, 3, 2, 1 at these outputs
# (0 elsewhere): output 10 is the top-1 class and these 5 the top 5, whatever the image.
TOP5 = (10, 9, 0, 19, 18)


def test_inference_benchmark_on_real_data_says_what_it_evaluated_and_that_warmup_is_included(tmp_path):
    data_dir = tmp_path / "data"
    write_tfrecord_shards(str(data_dir), "validation", 1, 20, 40, num_classes=11, seed=1)
    result = main_in_process("--mode", "inference_benchmark", "--data_dir", data_dir, "--batch_size", 8,
                             "--image_size", 32, "--num_classes", 11, "--results_dir", tmp_path / "results",
                             "--no_progress")
    assert "Evaluated 16 of 20 images (the last partial batch of 4 is dropped, as the original)" in result.stdout
    assert "WARNING: 2 step(s) ran, not more than --warmup_steps 50" in result.stdout


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """model_dir with one checkpoint (model.ckpt-1) of a 32 px resnet50 of NUM_CLASSES outputs whose logits are a
    fixed bias (TOP5, the first highest)."""
    from model import checkpoint, resnet
    directory = str(tmp_path_factory.mktemp("model"))
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    classifier = model.get_layer("output").dense
    classifier.kernel.assign(tf.zeros_like(classifier.kernel))
    bias = np.zeros(NUM_CLASSES, np.float32)
    bias[list(TOP5)] = [5.0, 4.0, 3.0, 2.0, 1.0]
    classifier.bias.assign(bias)
    entries = checkpoint.model_entries(model, "resnet50") | {checkpoint.GLOBAL_STEP_KEY: tf.constant(1, tf.int64)}
    checkpoint.write(os.path.join(directory, "model.ckpt-1"), entries,
                     checkpoint.metadata("resnet50", NUM_CLASSES, 32, False, False))
    checkpoint.write_state_file(directory, ["model.ckpt-1"])
    return directory


def _evaluate(tmp_path, model_dir, corrupt, records_per_shard=RECORDS_PER_SHARD):
    """Runner.evaluate("epoch", 1, batch 8) of model_dir's checkpoint on 3 validation shards with `corrupt`
    records: its results."""
    from runtime.runner import Runner
    from utils import distributed
    from utils.logger import DLLogger

    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 3, records_per_shard, 40, num_classes=NUM_CLASSES,
                          corrupt=corrupt)
    config = RunConfig(data_dir=str(data), num_classes=NUM_CLASSES, image_size=32, batch_size=8,
                       model_dir=model_dir, no_progress=True)
    runner = Runner(config, DLLogger(None), distributed.single_process())
    return runner.evaluate("epoch", 1, 8)


def test_an_evaluation_reads_each_record_once_and_says_how_many_were_skipped(tmp_path, model_dir, capsys):
    """Four corrupt records among 24: the 20 good ones make 2 whole batches of 8, the first 16 in file order, each
    read once, and the line and the accuracies count exactly those 16. The checkpoint's classifier ranks the outputs
    of records 10, 9 (corrupt), 0, 19 (in the dropped partial batch) and 18 first, for every image, so the
    accuracies count how often those records were evaluated (and a top-4 or top-6 would count differently)."""
    corrupt = {(0, 2): "bad_jpeg", (1, 1): "missing_image", (1, 5): "not_example", (2, 7): "bad_jpeg"}
    results = _evaluate(tmp_path, model_dir, corrupt)
    out = capsys.readouterr().out
    assert ("Evaluated 16 of 24 images (4 skipped as corrupt, see the warnings above; the last partial batch of 4 "
            "is dropped, as the original)") in out
    # 2 steps, not more than --warmup_steps 50: the throughput and latency count the warm-up, and it is said (until
    # 2026-12-06 only in the benchmark modes: an 8-step evaluation printed a p99 latency 35 times the steady one)
    assert "WARNING: 2 step(s) ran, not more than --warmup_steps 50: the throughput and latency figures count all " \
           "of them, warm-up included (run more than 50 steps for a steady-state figure)" in out
    good = [index for index in range(3 * RECORDS_PER_SHARD)
            if (index // RECORDS_PER_SHARD, index % RECORDS_PER_SHARD) not in corrupt]
    outputs = [label_of(index, NUM_CLASSES) - 1 for index in good[:16]]  # the 0-based label of each
    assert len(set(outputs)) == 16
    assert results["top1_accuracy"] == sum(output == TOP5[0] for output in outputs) / 16 == 1 / 16
    assert results["top5_accuracy"] == sum(output in TOP5 for output in outputs) / 16 == 3 / 16  # 10, 0 and 18


def test_an_evaluation_logs_its_step_throughput_every_display_every_steps_after_the_warmup(tmp_path, model_dir):
    """The original's evaluation ran its BenchmarkLoggingHook: `total_ips` at step (0, i) every --display_every steps
    after --warmup_steps, as the benchmarks do. Until 2026-12-06 only the benchmark modes logged them, and
    --display_every was silently unused in an evaluation. (The EMA pass, which the original did not have, logs
    none.)"""
    from utils.logger import read_log
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 12, 40, num_classes=NUM_CLASSES)
    results = tmp_path / "results"
    out = main_in_process("--mode", "evaluate", "--data_dir", data, "--model_dir", model_dir, "--num_classes",
                          NUM_CLASSES, "--image_size", 32, "--batch_size", 2, "--warmup_steps", 1, "--display_every",
                          2, "--results_dir", results, "--no_progress").stdout
    steps = [r["step"] for r in read_log(str(results / "log.json")) if "total_ips" in r.get("data", {})]
    assert steps == [[0, 3], [0, 5]]  # 6 steps: the first is warm-up, then every second
    assert sum(" - (0, " in line and "total_ips" in line for line in out.splitlines()) == 2


def test_an_evaluation_without_one_whole_batch_of_good_records_is_an_error(tmp_path, model_dir):
    corrupt = {(shard, i): "bad_jpeg" for shard in range(3) for i in range(4) if (shard, i) != (0, 0)}
    with pytest.raises(UserError, match=r"^no whole batch of 8 validation images could be read: 11 of the 12 "
                                        r"records were skipped as corrupt \(see the warnings above\)$"):
        _evaluate(tmp_path, model_dir, corrupt, records_per_shard=4)


def test_an_evaluation_stopped_by_an_exception_lets_go_of_its_input_at_once(tmp_path):
    # A caught traceback keeps the frames it passed through, and one caught by a context manager can sit in a
    # reference cycle until the process ends: the input's threads must not live on with it (they would still run
    # while the process tears down, as after a SIGTERM during an evaluation).
    import weakref
    from runtime.metrics import ThroughputMeter
    from runtime.runner import Runner
    from utils import data_utils, distributed
    from utils.logger import DLLogger

    files = write_tfrecord_shards(str(tmp_path / "data"), "validation", 1, 8, 40, num_classes=NUM_CLASSES)
    dataset = data_utils.get_tfrecords_input_fn(files, 4, 32, 32, training=False, num_classes=NUM_CLASSES)
    runner = Runner(RunConfig(num_classes=NUM_CLASSES, image_size=32, no_progress=True), DLLogger(None),
                    distributed.single_process())

    def interrupted_step(images, labels):
        raise KeyboardInterrupt

    held = [iter(dataset)]
    iterator = weakref.ref(held[0])
    with pytest.raises(KeyboardInterrupt) as caught:
        runner._evaluation_pass(interrupted_step, held.pop(), 5, ThroughputMeter(4, 0), is_benchmark=False)
    assert caught.value.__traceback__ is not None  # the frames are still held here...
    assert iterator() is None  # ...but not the iterator


def test_the_training_loop_leaves_a_signal_its_parent_ignored_ignored(capsys):
    """A job started with & from a script inherits SIGINT ignored: before, the loop's handler took it anyway, so
    a SIGINT before the first step was lost and one during training stopped it. The others get the handler, and
    everything is restored after."""
    import signal
    from runtime.runner import StopRequest
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with StopRequest("kept") as stop:
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == (signal.SIG_IGN, signal.SIG_DFL)
        assert capsys.readouterr().out.splitlines() == [
            "Note: SIGINT is ignored in this process (its parent set it so, as a shell script does for a job it starts "
            "with &): Ctrl-C and kill -INT do not stop it; SIGTERM does"]
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@pytest.mark.parametrize("mode,signame,status", [("train", "SIGINT", 130), ("train_and_evaluate", "SIGTERM", 0)])
def test_a_first_signal_during_the_final_save_lets_it_finish_and_then_stops(tmp_path, monkeypatch, mode, signame,
                                                                            status):
    """A signal that lands while the final checkpoint is written (a preemption's SIGTERM, a Ctrl-C just after the
    last step) lets the save finish and then stops the run as a signal in the loop does: until 2026-12-06 the loop
    had handed the signals back by then, so the first one cut the save short and the steps since the last periodic
    checkpoint (up to --checkpoint_interval - 1 of them) were lost. A train_and_evaluate so stopped by SIGTERM
    exits 0 (a preemption is no failure) and says its evaluation did not run."""
    import signal
    from model import checkpoint
    data = str(tmp_path / "data")
    write_tfrecord_shards(data, "train", 2, 8, 40, num_classes=11)
    write_tfrecord_shards(data, "validation", 1, 4, 40, num_classes=11)
    real_save = checkpoint.CheckpointWriter.save

    def save(self, step):
        if step == 3:
            os.kill(os.getpid(), getattr(signal, signame))  # handled before the save's first Python line
        return real_save(self, step)

    monkeypatch.setattr(checkpoint.CheckpointWriter, "save", save)
    model_dir = tmp_path / "model"
    result = main_in_process("--mode", mode, "--data_dir", data, "--num_classes", 10, "--image_size", 32,
                             "--batch_size", 4, "--num_iter", 3, "--iter_unit", "batch", "--checkpoint_interval", 2,
                             "--model_dir", model_dir, "--results_dir", tmp_path / "results", "--no_progress",
                             check=False)
    assert result.returncode == status, result.stderr[-2000:]
    assert (f"Received signal {signame}: stopping once the checkpoint of step 3 is written (send it again to exit "
            "at once)") in result.stdout
    assert "training stopped by a signal at step 3; checkpoint written" in result.stdout
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-3")
    # the log says so too (until 2026-12-08 only stdout and stderr did: the log read as a run that ended at step 3)
    from utils.logger import read_log
    assert list(read_log(str(tmp_path / "results" / "log.json")))[-1]["data"] == {
        "interrupted": signame, "global_step": 3, "checkpoint_written": True}
    if signame == "SIGINT":
        assert result.stderr.strip().splitlines()[-1].endswith(
            "stopped by SIGINT; checkpoint written at step 3; run the same command again to resume")
    else:
        assert result.stdout.strip().splitlines()[-1] == (
            "Note: the evaluation of --mode train_and_evaluate did not run: run the same command again to resume and "
            "evaluate")
        assert "top1_accuracy" not in result.stdout


def test_a_second_signal_during_the_final_save_names_the_checkpoint_a_resume_takes(tmp_path, monkeypatch, capfd):
    """The second signal exits at once, from the handler: its line names the checkpoint the state file still names
    (the save of the last step was cut short), read when the signal comes."""
    import signal
    from runtime.runner import Runner, StopRequest
    from model import checkpoint
    runner = Runner.__new__(Runner)
    runner.config = RunConfig(model_dir=str(tmp_path))
    checkpoint.write(str(tmp_path / "model.ckpt-2"), {checkpoint.GLOBAL_STEP_KEY: np.int64(2)},
                     dict(checkpoint.metadata("resnet50", 10, 32, False, False), step=2))
    checkpoint.write_state_file(str(tmp_path), ["model.ckpt-2"])
    stop = StopRequest("generic")
    stop.requested = True
    stop.kept = lambda: runner._kept_after_interrupted_save(3)

    def exit_now(status):
        raise SystemExit(status)

    monkeypatch.setattr(os, "_exit", exit_now)
    with pytest.raises(SystemExit) as exited:
        stop._handle(signal.SIGTERM, None)
    assert exited.value.code == 128 + signal.SIGTERM
    assert capfd.readouterr().err == (
        f"INTERRUPTED: main.py stopped by a second SIGTERM, at once; the last complete checkpoint, {tmp_path}/"
        "model.ckpt-2, is kept (the save of step 3 was cut short): run the same command again to resume from it\n")


def test_a_diverged_training_is_recorded_in_its_checkpoints_and_every_tool_that_loads_them_says_so(tmp_path):
    """--lr_init 50 drives the cross-entropy of a 10-class model far above ln(10) within a few steps while the loss
    stays finite: the run warns, its later checkpoints record the divergence, and predict, a resume, the frozen graph
    export and the graph it writes, and postprocess_ckpt.py and its checkpoint each say so (before, nothing did)."""
    from model import checkpoint, export
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 16, 40, num_classes=11, seed=2)
    model_dir = tmp_path / "model"
    train = ("--mode", "train", "--data_dir", data, "--num_classes", 10, "--image_size", 32, "--batch_size", 4,
             "--iter_unit", "batch", "--lr_init", 50, "--lr_warmup_epochs", 0, "--seed", 1, "--model_dir", model_dir,
             "--results_dir", tmp_path / "results", "--no_progress")
    result = main_in_process(*train, "--num_iter", 8)
    warned = [line for line in result.stdout.splitlines() if "the training is diverging" in line]
    assert len(warned) == 1, result.stdout[-3000:]
    info = checkpoint.inspect(tf.train.latest_checkpoint(str(model_dir)))
    assert info.step == 8 and 1 <= info.diverged["step"] <= 8 and info.diverged["sign"] in warned[0]
    said = f"comes from a training that diverged at step {info.diverged['step']} ({info.diverged['sign']})"

    predicted = main_in_process("--mode", "predict", "--model_dir", model_dir, "--to_predict",
                                os.path.join(skimage_photo_dir(), "chelsea.png"), "--batch_size", 1, "--results_dir",
                                tmp_path / "results")
    assert f"WARNING: checkpoint {info.path} {said}" in predicted.stdout
    resumed = main_in_process(*train, "--num_iter", 9)
    assert f"WARNING: checkpoint {info.path} {said}" in resumed.stdout
    assert checkpoint.inspect(tf.train.latest_checkpoint(str(model_dir))).diverged == info.diverged  # carried on

    graph = tmp_path / "model.pb"
    exported = tool_in_process("export_frozen_graph", "--checkpoint", model_dir, "--output_file", graph)
    latest = tf.train.latest_checkpoint(str(model_dir))
    assert f"WARNING: checkpoint {latest} {said}" in exported.stdout
    graph_def = tf.compat.v1.GraphDef.FromString(graph.read_bytes())
    assert export.graph_source(graph_def)["diverged"] == info.diverged  # and so its ONNX conversion
    converted = tool_in_process("postprocess_ckpt", "--input", model_dir, "--output", tmp_path / "converted")
    assert f"WARNING: checkpoint {latest} {said}" in converted.stdout
    assert checkpoint.inspect(tf.train.latest_checkpoint(str(tmp_path / "converted"))).diverged == info.diverged


@pytest.mark.parametrize("done, run_iter, said", [(0, 10, True), (90, 10, True), (90, 11, False), (0, 10, None)])
def test_a_qat_run_that_ends_within_its_quant_delay_says_it_trains_the_float_model(done, run_iter, said):
    """--quantize --quant_delay 100 for 10 steps exported a graph of untrained ranges with no word (2026-12-07).
    The delay counts the model's QAT steps (its quant_step counter); said=None: a run without a delay."""
    from types import SimpleNamespace
    from runtime.runner import Runner
    runner = Runner.__new__(Runner)
    runner.config = RunConfig(mode="train", quantize=True, quant_delay=0 if said is None else 100, batch_size=2)
    counter = SimpleNamespace(path="conv2d/quant_step", numpy=lambda: done)
    runner.state = SimpleNamespace(model=SimpleNamespace(variables=[counter]))
    lines = []
    runner.logger = SimpleNamespace(print=lines.append)
    runner._note_quant_delay_not_reached(run_iter)
    assert lines == ([f"Note: --quant_delay 100 is not reached in this run: quantisation starts after 100 QAT steps "
                      f"and this run ends after {done + run_iter}, so it trains the float model throughout (the "
                      "activation ranges are still tracked)"] if said else [])


def test_a_blow_up_in_the_last_step_is_warned_about_and_recorded_in_the_checkpoint(tmp_path):
    """32 px, batch 2: the last stage's batch norm normalises over 2 values, which the run warns of before its first
    step. A 2-step run at the default rate (full depth) blew the weights up in its last update, which no step's
    check saw (each sees the weights it starts from), and its checkpoint evaluated every image as non-finite with
    no word on why (2026-12-07); here one step at a huge rate does the same to the shallow model."""
    from model import checkpoint
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 8, 40, num_classes=11, seed=2)
    model_dir = tmp_path / "model"
    result = main_in_process("--mode", "train", "--data_dir", data, "--num_classes", 10, "--image_size", 32,
                             "--batch_size", 2, "--num_iter", 1, "--iter_unit", "batch", "--lr_warmup_epochs", 0,
                             "--lr_init", 1000, "--seed", 1, "--model_dir", model_dir,
                             "--results_dir", tmp_path / "results", "--no_progress")
    lines = result.stdout.splitlines()
    assert "WARNING: at 32x32 the last stage's feature maps are 1x1, so its batch norm normalises each channel " \
           "over 2 values (2 images a replica x 1x1); below 16 its gradients are unstable and the training tends " \
           "to diverge: use a --batch_size of at least 16 a replica, or larger images" in lines
    assert lines.index("Current step: 0") > [i for i, line in enumerate(lines) if "last stage's" in line][0]
    warned = [line for line in lines if "the training is diverging" in line]
    assert len(warned) == 1 and warned[0].startswith("WARNING: at step 1 the weights' L2 term jumped"), lines
    info = checkpoint.inspect(tf.train.latest_checkpoint(str(model_dir)))
    assert info.step == 1 and info.diverged["step"] == 1 and info.diverged["sign"] in warned[0]


def test_an_evaluation_whose_model_dir_cannot_take_its_tensorboard_scalars_still_reports_and_exports(
        tmp_path, model_dir, monkeypatch):
    """A checkpoint shared read-only (or on a full disk): the evaluation ran, then ended in TensorFlow's
    PermissionDeniedError traceback from the events writer, and --export_dir was never written (audit H1)."""
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 4, 40, num_classes=NUM_CLASSES)

    def read_only(logdir, *args, **kwargs):
        raise tf.errors.PermissionDeniedError(None, None, f"{logdir}/events.out.tfevents.1; Read-only file system")

    monkeypatch.setattr(tf.summary, "create_file_writer", read_only)
    result = main_in_process("--mode", "evaluate", "--data_dir", data, "--model_dir", model_dir, "--num_classes",
                             NUM_CLASSES, "--image_size", 32, "--batch_size", 4, "--export_dir", tmp_path / "export",
                             "--results_dir", tmp_path / "results", "--no_progress")
    assert "top1_accuracy" in result.stdout
    assert (f"Note: the evaluation's TensorBoard scalars are not written: {model_dir}/eval cannot be written "
            f"({model_dir}/eval/events.out.tfevents.1; Read-only file system)") in result.stdout.splitlines()
    assert len(glob.glob(str(tmp_path / "export" / "*" / "saved_model.pb"))) == 1  # in its timestamped directory


def test_a_training_whose_log_cannot_be_written_checkpoints_its_steps_before_it_stops(tmp_path, monkeypatch):
    """--results_dir on a full disk, model_dir with room: the run stopped at the failed log line and lost the steps
    since its last checkpoint (audit H1: steps 21-27 of a run checkpointing every 20)."""
    from utils import logger as logger_module
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 8, 40, num_classes=11)
    real_log = logger_module.DLLogger.log

    def log(self, step, data):
        if isinstance(step, tuple) and len(step) == 2 and step[1] == 3:
            raise logger_module.LogWriteError("cannot write the log results/log.json: No space left on device")
        return real_log(self, step, data)

    monkeypatch.setattr(logger_module.DLLogger, "log", log)
    model_dir = tmp_path / "model"
    result = main_in_process("--mode", "train", "--data_dir", data, "--num_classes", 10, "--image_size", 32,
                             "--batch_size", 4, "--num_iter", 5, "--iter_unit", "batch", "--display_every", 1,
                             "--model_dir", model_dir, "--results_dir", tmp_path / "results", "--no_progress",
                             check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "ERROR: cannot write the log results/log.json: No space left on device; the training stopped at step 3, "
        "checkpointed: give the log room and run the same command again to resume")
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-3")


def test_a_training_whose_stdout_fails_says_only_stdouts_remedy():
    """stdout's error says what to do about it (a closed pipe, a full disk behind `>`): the training's line adds
    that it checkpointed, not "give the log room", which is the log file's remedy."""
    import errno
    from runtime.runner import Runner
    from utils.errors import StdoutWriteError

    class Saver:
        latest_checkpoint, saved = "m/model.ckpt-2", []

        def save(self, step):
            self.saved.append(step)

    saver = Saver()
    error = Runner._checkpointed_after_log_failure(StdoutWriteError(BrokenPipeError(errno.EPIPE, "Broken pipe"),
                                                                    None), saver, 3)
    assert str(error) == ("stdout was closed by the program reading it (a broken pipe): the rest of the output is "
                          "lost; the training stopped at step 3, checkpointed: run the same command again to resume")
    assert saver.saved == [3]


def test_a_labels_file_that_cannot_be_copied_is_one_line_and_leaves_neither_it_nor_the_start_checkpoint(
        tmp_path, monkeypatch):
    """A full disk while the new run copies the data's labels.txt beside its start checkpoint: one line naming the
    file, no empty labels.txt (which later runs would read as 0 classes), and the start checkpoint removed as after
    any failure before the first step. The next run copies the file."""
    from tests._reliability_helpers import full_disk_for
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 8, 40, num_classes=11, seed=2)
    names = "".join(f"class {k}\n" for k in range(1, 11))
    (data / "labels.txt").write_text(names)
    model_dir = tmp_path / "model"
    train = ("--mode", "train", "--data_dir", data, "--num_classes", 11, "--image_size", 32, "--batch_size", 4,
             "--num_iter", 1, "--iter_unit", "batch", "--model_dir", model_dir, "--results_dir", tmp_path / "results",
             "--no_progress")
    full_disk_for(monkeypatch, lambda path: os.path.dirname(path) == str(model_dir) and "labels.txt" in path)
    failed = main_in_process(*train, check=False)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert failed.stderr.strip().splitlines()[-1] == (
        f"ERROR: cannot write {model_dir}/labels.txt: No space left on device")
    assert f"Removed {model_dir}/model.ckpt-0: this run stopped before its first step, so the next starts afresh" in \
        failed.stdout.splitlines()
    assert not model_dir.exists()  # nothing left in it, so the model_dir this run created is removed too
    monkeypatch.undo()
    main_in_process(*train)
    assert (model_dir / "labels.txt").read_text() == names


def test_an_empty_labels_file_beside_the_checkpoints_is_replaced_and_names_no_classes(tmp_path):
    """An empty model_dir/labels.txt (a copy cut short by a full disk, written in place) is no list of 0 classes:
    a new run replaces it and no run warns that the data names other classes than it."""
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 8, 40, num_classes=11, seed=2)
    names = "".join(f"class {k}\n" for k in range(1, 11))
    (data / "labels.txt").write_text(names)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "labels.txt").write_text("")
    train = ("--mode", "train", "--data_dir", data, "--num_classes", 11, "--image_size", 32, "--batch_size", 4,
             "--iter_unit", "batch", "--model_dir", model_dir, "--results_dir", tmp_path / "results", "--no_progress")
    result = main_in_process(*train, "--num_iter", 1)
    assert (model_dir / "labels.txt").read_text() == names
    (model_dir / "labels.txt").write_text("")
    resumed = main_in_process(*train, "--num_iter", 2)
    assert "names other classes" not in result.stdout + resumed.stdout + resumed.stderr


def test_a_training_that_cannot_write_its_tensorboard_events_is_one_line_and_leaves_no_start_checkpoint(
        tmp_path, monkeypatch):
    """model_dir's disk full after the start checkpoint: TensorFlow's ResourceExhaustedError traceback from the
    events writer, and a 0-step checkpoint left to bind the next run (audit H1)."""
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 8, 40, num_classes=11)

    def full(logdir, *args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, f"{logdir}/events.out.tfevents.1; No space left on device")

    monkeypatch.setattr(tf.summary, "create_file_writer", full)
    model_dir = tmp_path / "model"
    result = main_in_process("--mode", "train", "--data_dir", data, "--num_classes", 10, "--image_size", 32,
                             "--batch_size", 4, "--num_iter", 2, "--iter_unit", "batch", "--model_dir", model_dir,
                             "--results_dir", tmp_path / "results", "--no_progress", check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: cannot write TensorBoard's events in --model_dir {model_dir} ({model_dir}/events.out.tfevents.1; "
        "No space left on device)")
    assert f"Removed {model_dir}/model.ckpt-0: this run stopped before its first step" in result.stdout
    assert tf.train.latest_checkpoint(str(model_dir)) is None


def test_the_end_of_epoch_record_logs_the_step_that_ended_the_epoch(tmp_path):
    """The (epoch,) record carries the global step that ended the epoch (at 2.5 steps an epoch: steps 3 and 5), which
    the step records, logged every --display_every steps, only bound: utils/plot_log draws the boundary there."""
    from types import SimpleNamespace
    from runtime.runner import Runner
    from utils.logger import DLLogger, read_log
    logger = DLLogger(str(tmp_path / "log.json"), stdout=False)
    runner = SimpleNamespace(config=SimpleNamespace(display_every=10), logger=logger,
                             precision=SimpleNamespace(loss_scaling=False))
    values = {"cross_entropy": 1.0, "l2_loss": 0.5, "total_loss": 1.5, "learning_rate": 0.1}
    for step in range(1, 7):
        Runner._log_train_step(runner, values, step, step - 1, SimpleNamespace(last_ips=10.0), 2.5, False)
    logger.close()
    ends = [(r["step"], r["data"].get("global_step")) for r in read_log(str(tmp_path / "log.json"))
            if r.get("type") == "LOG" and len(r["step"]) == 1]
    assert ends == [([0], 3), ([1], 5)]


def _resolve_then(monkeypatch, after):
    """runtime/settings.resolve, then `after()`: what a training in the model_dir does between the settings'
    resolution and the restore (the model build takes seconds)."""
    from runtime import settings
    real = settings.resolve

    def resolve(*args, **kwargs):
        resolved = real(*args, **kwargs)
        after()
        return resolved
    monkeypatch.setattr(settings, "resolve", resolve)


def _copied_model_dir(tmp_path, model_dir):
    import shutil
    copy = str(tmp_path / "model")
    shutil.copytree(model_dir, copy)
    return copy


def _save_newer(directory, drop_first=False):
    """A training's next save: model.ckpt-2 (a copy of model.ckpt-1), and with `drop_first` its rotation of
    model.ckpt-1."""
    import shutil
    from model import checkpoint
    for path in glob.glob(os.path.join(directory, "model.ckpt-1.*")):
        shutil.copy(path, path.replace("model.ckpt-1.", "model.ckpt-2."))
    if drop_first:
        for path in glob.glob(os.path.join(directory, "model.ckpt-1.*")):
            os.remove(path)
    checkpoint.write_state_file(directory, ["model.ckpt-2"] if drop_first else ["model.ckpt-1", "model.ckpt-2"])


def _evaluate_main(tmp_path, directory, check=True):
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 8, 40, num_classes=NUM_CLASSES)
    return main_in_process("--mode", "evaluate", "--data_dir", data, "--model_dir", directory, "--num_classes",
                           NUM_CLASSES, "--image_size", 32, "--batch_size", 8, "--num_iter", 1, "--iter_unit",
                           "batch", "--results_dir", tmp_path / "results", "--no_progress", check=check)


def test_an_evaluation_restores_the_checkpoint_its_record_names_when_a_training_saves_in_between(
        tmp_path, model_dir, monkeypatch):
    """Until 2026-12-06 the settings (and the PARAMETER record) took the newest checkpoint, and the restore took the
    newest again seconds later: a training saving in between made the record name one checkpoint and the
    accuracies come from another."""
    from utils.logger import read_log
    directory = _copied_model_dir(tmp_path, model_dir)
    _resolve_then(monkeypatch, lambda: _save_newer(directory))
    out = _evaluate_main(tmp_path, directory).stdout
    first = os.path.join(directory, "model.ckpt-1")
    recorded = [r["data"]["checkpoint"] for r in read_log(str(tmp_path / "results" / "log.json"))
                if r.get("step") == "PARAMETER" and "checkpoint" in r.get("data", {})]
    assert recorded == [first]
    assert re.search(r"^Restored (\d+) of \1 variables from {} ".format(re.escape(first)), out, re.M)
    assert "model.ckpt-2" not in out


def test_an_evaluation_whose_checkpoint_a_training_deleted_in_between_still_restores_it(tmp_path, model_dir,
                                                                                       monkeypatch):
    """The settings' reader holds the checkpoint's files open: the training's rotation (max-to-keep) deleting it
    after the settings chose it leaves the restore that very checkpoint, not a failure or another one."""
    from utils.logger import read_log
    directory = _copied_model_dir(tmp_path, model_dir)
    _resolve_then(monkeypatch, lambda: _save_newer(directory, drop_first=True))
    out = _evaluate_main(tmp_path, directory).stdout
    first = os.path.join(directory, "model.ckpt-1")
    assert not os.path.exists(first + ".index")
    assert re.search(r"^Restored (\d+) of \1 variables from {} ".format(re.escape(first)), out, re.M)
    assert [r["data"]["checkpoint"] for r in read_log(str(tmp_path / "results" / "log.json"))
            if r.get("step") == "PARAMETER" and "checkpoint" in r.get("data", {})] == [first]
