"""End-to-end CLI tests of every mode (docs/ORIGINAL.md#modes) on synthetic data and on tiny TFRecords: main.py's
`main` called in-process with its output captured (tests/_cli.py)."""

import glob
import json
import os

import numpy as np
import pytest

from model import resnet
from tests._cli import main_in_process, tool_in_process
from tests._data_helpers import write_tfrecord_shards
from utils.logger import read_log
from utils.run_lock import read_lock

pytestmark = pytest.mark.shallow

NUM_CLASSES = 11  # the helper writes labels 1..10
SMALL = ["--num_classes", str(NUM_CLASSES), "--image_size", "32", "--weight_init", "fan_in",
         "--lr_warmup_epochs", "0", "--display_every", "1", "--no_progress"]


def run_main(*args, check=True):
    return main_in_process(*args, check=check)


def logged(results_dir, key):
    return [r for r in read_log(os.path.join(results_dir, "log.json")) if r["type"] == "LOG" and key in r["data"]]


def checkpoint_steps(model_dir):
    return sorted(int(p.rsplit("-", 1)[1].split(".")[0]) for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.index")))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tfrecords")
    write_tfrecord_shards(str(directory), "train", 2, 24, 40, num_classes=NUM_CLASSES, with_bbox=True)
    write_tfrecord_shards(str(directory), "validation", 1, 20, 40, num_classes=NUM_CLASSES, seed=1)
    (directory / "labels.txt").write_text("\n".join("class_%d" % i for i in range(NUM_CLASSES)) + "\n")
    return str(directory)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_dir):
    """6 steps of training with a checkpoint every 3 steps, then a resume request that has nothing left to do."""
    results = str(tmp_path_factory.mktemp("trained"))
    run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 3, "--iter_unit", "batch",
             "--results_dir", results, "--checkpoint_interval", 3, "--seed", 7, *SMALL)
    first = checkpoint_steps(results)
    second = run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 6,
                      "--iter_unit", "batch", "--results_dir", results, "--checkpoint_interval", 3, "--seed", 7,
                      *SMALL)
    third = run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 6,
                     "--iter_unit", "batch", "--results_dir", results, "--checkpoint_interval", 3, "--seed", 7,
                     *SMALL)
    return {"dir": results, "first_ckpts": first, "second": second, "third": third, "data_dir": data_dir}


def test_training_benchmark_on_synthetic_data(tmp_path):
    results = str(tmp_path)
    out = run_main("--mode", "training_benchmark", "--batch_size", 4, "--num_iter", 8, "--iter_unit", "batch",
                   "--warmup_steps", 2, "--display_every", 2, "--synthetic_data_size", 32, "--num_classes", 11,
                   "--static_loss_scale", 128, "--max_skipped_steps", 5, "--results_dir", results,
                   "--no_progress").stdout
    assert "Using Synthetic Data ..." in out
    # float32: no loss scaling, so neither flag does anything (the original ignored the scale without a word)
    assert "Note: --static_loss_scale is not used: only --amp scales the loss, and this run computes in float32" \
        in out.splitlines()
    assert "Note: --max_skipped_steps is not used: only dynamic loss scaling (--amp in float16 without " \
           "--static_loss_scale) skips steps, and this run computes in float32 without loss scaling" in out.splitlines()
    assert "learning-rate warmup" not in out  # a benchmark's synthetic epoch is its whole run: no note
    ips = logged(results, "total_ips")
    assert [r["step"] for r in ips] == [[0, 4], [0, 6], [0, 8]]
    final = logged(results, "train_throughput")[-1]
    assert final["step"] == [] and final["data"]["train_throughput"] > 0
    assert final["data"]["train_throughput_total"] > 0
    parameters = logged(results, "arch")[0]
    assert parameters["step"] == "PARAMETER" and parameters["data"]["batch_size"] == 4
    # the additions that decide the run, and the precision --amp and its flags resolved to (not logged before
    # 2026-12-06: a log of --amp alone did not say bfloat16 or float16)
    assert {key: parameters["data"][key] for key in ("precision", "max_skipped_steps", "checkpoint_interval",
                                                     "amp_dtype", "labels_file")} == {
        "precision": "float32", "max_skipped_steps": 5, "checkpoint_interval": 1000, "amp_dtype": None,
        "labels_file": None}
    assert not glob.glob(os.path.join(results, "model.ckpt-*")), "benchmarks write no checkpoints"


def test_benchmark_with_fewer_steps_than_warmup_still_reports(tmp_path):
    results = str(tmp_path)
    run_main("--mode", "training_benchmark", "--batch_size", 2, "--num_iter", 2, "--iter_unit", "batch",
             "--warmup_steps", 50, "--synthetic_data_size", 32, "--num_classes", 5, "--results_dir", results,
             "--no_progress")
    assert logged(results, "train_throughput")[-1]["data"]["train_throughput"] > 0


def test_train_checkpoints_resume_and_already_trained(trained):
    results = trained["dir"]
    assert trained["first_ckpts"] == [0, 3]
    assert "Current step: 3" in trained["second"].stdout
    assert checkpoint_steps(results) == [0, 3, 6]
    assert "Current step: 6" in trained["third"].stdout
    assert "Model already trained required number of steps. Skipped" in trained["third"].stdout
    assert "Note:" not in trained["third"].stdout  # (e.g. this CPU's bfloat16: nothing is trained)
    assert "schedule is not the one" not in trained["second"].stdout  # 3 -> 6 steps: the same rate at steps 3-5
    steps = [r["step"][1] for r in logged(results, "total_loss") if len(r["step"]) == 2]
    assert steps == [1, 2, 3, 4, 5, 6]  # no step was done twice and the third run did none
    for record in logged(results, "total_loss"):
        assert np.isfinite(record["data"]["total_loss"])
        assert record["data"]["l2_loss"] > 0
    assert os.path.isfile(os.path.join(results, "labels.txt"))


def test_a_finished_run_continued_with_other_recipe_flags_says_nothing_of_a_training_it_skips(trained):
    """The lines on the training about to happen (mixup, the precision, ...) are for runs with a step to train; the
    original's lines of the run's length stay."""
    out = run_main("--mode", "train", "--data_dir", trained["data_dir"],
                   "--batch_size", 8, "--num_iter", 6, "--iter_unit", "batch", "--results_dir", trained["dir"],
                   "--checkpoint_interval", 3, "--seed", 7, "--mixup", 0.2, "--amp", *SMALL).stdout
    assert "Model already trained required number of steps. Skipped" in out
    assert "Total Steps 6" in out and "Current step: 6" in out
    for line in ("Using mixup training", "Mixed precision:", "Note:"):
        assert line not in out


def test_the_checkpoints_count_the_images_their_training_has_seen(trained):
    """Each run records the images its training had seen at its first step (0 for a new one): the first run's
    checkpoints 3 x 8 by step 3, the resume's 24 + 3 x 8 by step 6."""
    from model import checkpoint
    from runtime import settings
    infos = {step: checkpoint.inspect(os.path.join(trained["dir"], f"model.ckpt-{step}")) for step in (3, 6)}
    assert infos[3].recorded_settings()["images_seen"] == {"step": 0, "images": 0}
    assert infos[6].recorded_settings()["images_seen"] == {"step": 3, "images": 24}
    assert (settings.images_seen(infos[3]), settings.images_seen(infos[6])) == (24, 48)


def test_a_resume_on_data_with_other_class_names_says_predict_keeps_the_first_ones(tmp_path, data_dir, trained):
    import shutil
    results = str(tmp_path / "run")
    shutil.copytree(trained["dir"], results)
    renamed = tmp_path / "renamed"
    shutil.copytree(data_dir, renamed)
    (renamed / "labels.txt").write_text("\n".join("other_%d" % i for i in range(NUM_CLASSES)) + "\n")
    out = run_main("--mode", "train", "--data_dir", str(renamed), "--batch_size", 8, "--num_iter", 7, "--iter_unit",
                   "batch", "--results_dir", results, *SMALL).stdout
    assert (f"Note: {renamed / 'labels.txt'} names other classes than {os.path.join(results, 'labels.txt')} (label "
            "1: 'other_0' against 'class_0'), copied "
            "there when this training started; predict reads that one") in out
    assert "names other classes than" not in run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8,
                                                      "--num_iter", 8, "--iter_unit", "batch", "--results_dir",
                                                      results, *SMALL).stdout


def test_same_seed_gives_bit_identical_losses(tmp_path, data_dir):
    losses = []
    for run in ("a", "b"):
        results = str(tmp_path / run)
        run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 3, "--iter_unit",
                 "batch", "--results_dir", results, "--seed", 11, "--mixup", 0.2, "--label_smoothing", 0.1, *SMALL)
        losses.append([(r["data"]["cross_entropy"], r["data"]["l2_loss"], r["data"]["total_loss"])
                       for r in logged(results, "total_loss") if len(r["step"]) == 2])
    assert len(losses[0]) == 3
    assert losses[0] == losses[1]


def test_same_seed_gives_bit_identical_quantisation_aware_training(tmp_path, data_dir):
    """--quantize with --seed: the same losses (all three) and the same checkpoint, bit for bit. Until 2026-12-06
    the QAT step's conv kernels had three gradient terms (raw conv, folded conv, L2) that TF's AddN summed in a
    run-dependent order: about one kernel gradient in four differed in its last bit from run to run."""
    from model import checkpoint
    from tests._reliability_helpers import assert_checkpoints_identical
    runs = []
    for run in ("a", "b"):
        results = str(tmp_path / run)
        run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 3, "--iter_unit",
                 "batch", "--results_dir", results, "--seed", 1, "--quantize", "--quant_delay", 2, *SMALL)
        records = [r["data"] for r in logged(results, "total_loss") if len(r["step"]) == 2]
        runs.append([(r["cross_entropy"], r["l2_loss"], r["total_loss"]) for r in records])
    assert len(runs[0]) == 3
    assert runs[0] == runs[1]
    assert_checkpoints_identical(checkpoint.latest_checkpoint(str(tmp_path / "a")),
                                 checkpoint.latest_checkpoint(str(tmp_path / "b")))  # the metadata but its ids


def test_a_warmup_longer_than_the_run_is_said_with_the_rate_it_reaches(tmp_path, data_dir, trained):
    """48 images in batches of 8: 6 steps per epoch, so the default 5 warmup epochs are 30 steps, and a 1-epoch run's
    last step (t = 5) trains at 5/30 of the peak rate (lr_init * 8 / 256)."""
    results = str(tmp_path)
    out = run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 1, "--results_dir",
                   results, "--lr_init", 0.256, "--num_classes", NUM_CLASSES, "--image_size", 32, "--display_every", 1,
                   "--no_progress").stdout
    assert ("Note: the learning-rate warmup (--lr_warmup_epochs 5 = 30 steps) lasts the whole run of 6 steps: the "
            "rate rises to 17% of its peak and never decays") in out
    rates = [r["data"]["learning_rate"] for r in logged(results, "learning_rate") if len(r["step"]) == 2]
    assert rates[-1] == pytest.approx(0.256 * 8 / 256 * 5 / 30, rel=1e-6)
    # "Init Learning Rate 0.256" is the flag, as the original's line; the peak the steps log is said beside it
    # (2026-12-07: a newcomer read 0.01 there and 0.000625 in every step's record)
    assert "Init Learning Rate 0.256" in out.splitlines() and "Note: --lr_init 0.256 is the rate of a batch of 256: " \
        "this run's global batch of 8 peaks at 0.008 (the original's linear scaling)" in out.splitlines()
    assert "learning-rate warmup" not in trained["second"].stdout  # --lr_warmup_epochs 0


def test_evaluate_logs_accuracy_and_latency(trained, data_dir):
    results = trained["dir"]
    out = run_main("--mode", "evaluate", "--data_dir", data_dir, "--batch_size", 5, "--results_dir", results,
                   "--warmup_steps", 1, *SMALL).stdout
    assert "Model evaluation finished" in out and "Evaluation Steps 4" in out
    assert "names other classes" not in out
    # 6 steps: 0.9 ** 6 = 53% of the BN moving statistics' starting values are left in them
    assert (f"WARNING: checkpoint {os.path.join(results, 'model.ckpt-6')} was trained 6 step(s): its BN moving "
            "statistics still hold 53% of their starting values") in out
    final = logged(results, "top1_accuracy")[-1]["data"]
    assert 0.0 <= final["top1_accuracy"] <= final["top5_accuracy"] <= 1.0
    for key in ("eval_throughput", "eval_throughput_total", "eval_latency_avg", "eval_latency_p90",
                "eval_latency_p95", "eval_latency_p99"):
        assert final[key] > 0, key


def test_evaluate_and_finetune_on_data_that_names_other_classes_say_so(trained, data_dir, tmp_path):
    """The same images with labels.txt naming the classes in another order: the checkpoint's output k no longer
    means label k, so evaluate's accuracy means nothing and says why, and a fine-tune that keeps the classifier
    says its outputs start as the checkpoint's classes."""
    import shutil
    permuted = tmp_path / "permuted"
    shutil.copytree(data_dir, permuted)
    (permuted / "labels.txt").write_text("\n".join("class_%d" % i for i in reversed(range(NUM_CLASSES))) + "\n")
    kept = os.path.join(trained["dir"], "labels.txt")
    out = run_main("--mode", "evaluate", "--data_dir", permuted, "--batch_size", 5, "--results_dir", trained["dir"],
                   *SMALL).stdout
    assert (f"WARNING: {permuted / 'labels.txt'} names other classes than {kept} (the same names in another order), "
            "the classes this checkpoint was trained on: the accuracy compares output k with label k, which names "
            "another class here") in out.splitlines()
    out = run_main("--mode", "train", "--data_dir", permuted, "--batch_size", 8, "--num_iter", 1, "--iter_unit",
                   "batch", "--results_dir", tmp_path / "tuned", "--finetune_checkpoint", trained["dir"],
                   *SMALL).stdout
    assert (f"Note: {permuted / 'labels.txt'} names other classes than {kept} (the same names in another order), "
            f"beside --finetune_checkpoint: its classifier is kept (the same {NUM_CLASSES} classes), so output k "
            "starts as that checkpoint's class k and is trained to this data's label k") in out.splitlines()


def test_inference_benchmark_runs_on_fresh_weights(tmp_path):
    results = str(tmp_path)
    out = run_main("--mode", "inference_benchmark", "--batch_size", 4, "--num_iter", 5, "--iter_unit", "batch",
                   "--warmup_steps", 1, "--display_every", 2, "--synthetic_data_size", 32, "--num_classes", 5,
                   "--results_dir", results, "--no_progress").stdout
    assert "freshly initialised weights" in out
    assert [r["step"] for r in logged(results, "total_ips")] == [[0, 3], [0, 5]]
    assert logged(results, "eval_throughput")[-1]["data"]["eval_latency_p99"] > 0


def test_predict_on_directory_prints_top5_with_class_names(trained, tmp_path):
    from PIL import Image
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for name in ("a.jpg", "b.png"):
        Image.fromarray(rng.integers(0, 255, (48, 40, 3), dtype=np.uint8)).save(images / name)
    out = run_main("--mode", "predict", "--to_predict", images, "--batch_size", 1, "--results_dir",
                   trained["dir"], *SMALL).stdout
    lines = [line for line in out.splitlines() if line.startswith(str(images))]
    assert len(lines) == 2
    for line in lines:
        entries = line.split(": ", 1)[1].split(", ")
        assert len(entries) == 5
        probabilities = [float(entry.rsplit(" ", 1)[1]) for entry in entries]
        assert probabilities == sorted(probabilities, reverse=True)
        assert "(class_" in entries[0]
    assert "Ending Inference ..." in out


def test_predict_with_amp_says_the_model_computes_in_bfloat16(trained, tmp_path):
    """The inference modes under --amp run the model in mixed precision; the log says so, as a training does (it
    said nothing until 2026-12-06, and the probabilities move by bfloat16's rounding)."""
    from PIL import Image
    image = tmp_path / "a.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(image)
    line = ("Mixed precision: mixed_bfloat16: the model computes in bfloat16 from float32 weights, so its outputs "
            "differ from a float32 run's by that rounding")
    common = ("--mode", "predict", "--to_predict", image, "--batch_size", 1, "--results_dir", trained["dir"], *SMALL)
    assert line in run_main(*common, "--amp").stdout.splitlines()
    assert "Mixed precision" not in run_main(*common).stdout


def test_predict_on_a_directory_skips_each_bad_file_and_exits_1(trained, tmp_path):
    from tests._data_helpers import encode_image, random_image
    rng = np.random.default_rng(3)
    jpeg = encode_image(random_image(rng, 48, 40))
    png = encode_image(random_image(rng, 40, 52), "PNG")
    broken_png = bytearray(png)
    broken_png[60:80] = bytes(20)  # pixel data damaged, structure intact: only TensorFlow's decoder sees it
    images = tmp_path / "images"
    images.mkdir()
    content = {"a_photo.jpg": jpeg, "b_empty.jpg": b"", "c_photo.png": png, "d_truncated.jpg": jpeg[:len(jpeg) // 2],
               "e_text.jpg": b"this is not an image\n", "f_grey.jpg": encode_image(random_image(rng, 36, 36), mode="L"),
               "g_broken.png": bytes(broken_png)}
    for name, data in content.items():
        (images / name).write_bytes(data)
    result = run_main("--mode", "predict", "--to_predict", images, "--batch_size", 2, "--results_dir",
                      trained["dir"], *SMALL, check=False)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "ERROR:" not in result.stderr
    bad = {"b_empty.jpg": "image file is empty", "d_truncated.jpg": "truncated JPEG image",
           "e_text.jpg": "not an image file", "g_broken.png": "cannot decode image"}
    for name, reason in bad.items():
        mentions = [line for line in result.stderr.splitlines() if name in line]
        assert len(mentions) == 1 and mentions[0].startswith("SKIPPED {}: {}".format(images / name, reason)), mentions
        assert name not in result.stdout
    predicted = [line.split(": ", 1)[0] for line in result.stdout.splitlines() if line.startswith(str(images))]
    assert predicted == [str(images / name) for name in ("a_photo.jpg", "c_photo.png", "f_grey.jpg")]
    lines = result.stdout.strip().splitlines()
    assert lines[-2:] == ["Ending Inference ...", "predicted 3, failed 4"]
    # the log ends with the same counts, as inference.py --to-predict's does (until 2026-12-07 it had none)
    records = read_log(os.path.join(trained["dir"], "log.json"))
    assert records[-1]["step"] == [] and records[-1]["data"] == {"predicted": 3, "failed": 4}
    assert {"predicted": {"unit": "files"}, "failed": {"unit": "files"}}.items() <= {
        r["metric"]: r["metadata"] for r in records if r["type"] == "METADATA"}.items()


def test_export_round_trip_matches_in_memory_model(trained, data_dir, tmp_path):
    export_dir = str(tmp_path / "export")
    run_main("--mode", "evaluate", "--data_dir", data_dir, "--batch_size", 5, "--results_dir", trained["dir"],
             "--export_dir", export_dir, *SMALL)
    (exported,) = glob.glob(os.path.join(export_dir, "*"))
    assert not os.path.basename(exported).startswith(".tmp")
    import tensorflow as tf
    from model import checkpoint, resnet
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=32)
    info = checkpoint.inspect(checkpoint.latest_checkpoint(trained["dir"]))
    report = checkpoint.restore_model(model, info, "resnet50", "the test model")
    assert report.restored == report.total == len(model.variables), report.describe()
    images = np.random.default_rng(0).uniform(0, 255, (3, 32, 32, 3)).astype(np.float32)
    loaded = tf.saved_model.load(exported)
    out = loaded.signatures["serving_default"](input=tf.constant(images))
    predicted = loaded.signatures["predict"](input=tf.constant(images))
    expected = tf.nn.softmax(model(images, training=False)).numpy()
    assert np.abs(out["probabilities"].numpy() - expected).max() < 1e-5
    assert [out["classes"].dtype.name, out["probabilities"].dtype.name] == ["int32", "float32"]
    assert np.array_equal(out["classes"].numpy(), predicted["classes"].numpy())
    assert np.array_equal(out["classes"].numpy(), expected.argmax(1))
    # The export says what it is, for the tools that serve it (inference.py, export_onnx.py).
    from model import export
    assert export.read_source(exported) == {"arch": "resnet50", "num_classes": NUM_CLASSES, "image_size": 32,
                                            "checkpoint": info.path, "step": info.step, "weights": "raw",
                                            "class_names": ["class_%d" % i for i in range(NUM_CLASSES)]}


def test_a_run_that_fails_before_its_first_step_leaves_no_checkpoint_to_bind_the_next(data_dir, tmp_path):
    """The shards have no manifest, so a label above --num_classes is found at the first batch: the start
    checkpoint the run wrote is removed, and the corrected command starts afresh instead of being refused as a
    resume that contradicts it."""
    flags = ["--mode", "train", "--data_dir", data_dir, "--batch_size", 4, "--num_iter", 1, "--iter_unit", "batch",
             "--results_dir", tmp_path, "--image_size", "32", "--no_progress", "--seed", 3]
    # Labels 1..10 against 2 classes: only label 1 is in range, and the seeded first batch holds others (with 5
    # classes an unseeded batch of four labels 1-4 passed ~3% of the time).
    failed = run_main(*flags, "--num_classes", 2, check=False)
    assert failed.returncode == 2 and "is outside 1..2" in failed.stderr.strip().splitlines()[-1]
    assert f"Removed {tmp_path / 'model.ckpt-0'}: this run stopped before its first step, so the next starts " \
           "afresh" in failed.stdout.splitlines()
    assert checkpoint_steps(tmp_path) == [] and not (tmp_path / "checkpoint").exists()
    run_main(*flags, "--num_classes", NUM_CLASSES)
    assert checkpoint_steps(tmp_path) == [0, 1]


def test_an_inference_benchmark_export_without_a_checkpoint_says_its_weights_are_fresh(tmp_path):
    result = run_main("--mode", "inference_benchmark", "--batch_size", 2, "--num_iter", 1, "--iter_unit", "batch",
                      "--warmup_steps", 0, "--results_dir", tmp_path / "run", "--export_dir", tmp_path / "export",
                      *SMALL)
    (exported,) = glob.glob(str(tmp_path / "export" / "*"))
    assert f"Note: SavedModel {exported} holds freshly initialised weights: model_dir {tmp_path / 'run'} has no " \
           "checkpoint" in result.stdout.splitlines()
    from model import export
    assert export.read_source(exported)["weights"] == "fresh"


@pytest.mark.parametrize("args,message", [
    (["--mode", "train", "--batch_size", "4"], "`data_dir` must be specified for training!"),
    (["--mode", "evaluate", "--batch_size", "4"], "`data_dir` must be specified for evaluation!"),
    (["--mode", "predict", "--batch_size", "1"], "No data to predict on."),
    (["--mode", "predict", "--batch_size", "1", "--to_predict", "/nonexistent/x.jpg"], "does not exist"),
    (["--mode", "train", "--batch_size", "4", "--data_dir", "/nonexistent"], "does not exist"),
    (["--batch_size", "4", "--bogus"], "Unknown command line arg: --bogus"),
    (["--batch_size", "0"], "--batch_size must be a positive integer"),
])
def test_bad_input_is_one_clear_line_and_writes_nothing(tmp_path, args, message):
    model_dir = tmp_path / "model"
    result = run_main(*args, "--results_dir", tmp_path / "results", "--model_dir", model_dir, check=False)
    assert result.returncode == 2
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert error_lines and message in error_lines[-1]
    assert "Traceback" not in result.stderr
    assert not model_dir.exists() and not (tmp_path / "results").exists()


def test_bad_choice_exits_nonzero(tmp_path):
    result = run_main("--batch_size", "4", "--arch", "resnet18", check=False)
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_predict_and_evaluate_without_checkpoint_fail_clearly(tmp_path, data_dir):
    image = tmp_path / "x.png"
    from PIL import Image
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(image)
    result = run_main("--mode", "predict", "--to_predict", image, "--batch_size", 1, "--results_dir",
                      tmp_path / "empty", *SMALL, check=False)
    assert result.returncode == 2 and "no checkpoint in model_dir" in result.stderr
    result = run_main("--mode", "evaluate", "--data_dir", data_dir, "--batch_size", 4, "--results_dir",
                      tmp_path / "empty2", *SMALL, check=False)
    assert result.returncode == 2 and "no checkpoint in model_dir" in result.stderr
    assert "Dataset" not in result.stdout and "preprocessing" not in result.stdout  # said first, nothing else


def test_no_train_files_is_a_clear_error(tmp_path):
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 4, 32, num_classes=NUM_CLASSES)
    result = run_main("--mode", "train", "--data_dir", data, "--batch_size", 2, "--results_dir", tmp_path / "r",
                      *SMALL, check=False)
    assert result.returncode == 2
    assert "no train-* files" in result.stderr.splitlines()[-1]
    assert not glob.glob(str(tmp_path / "r" / "model.ckpt-*"))


def test_log_records_are_valid_json_lines(trained):
    with open(os.path.join(trained["dir"], "log.json")) as handle:
        for line in handle:
            assert line.startswith("DLLL ")
            json.loads(line[5:])


@pytest.mark.slow
def test_qat_workflow_end_to_end(trained, data_dir, tmp_path):
    """The original's QAT workflow through the CLIs: QAT fine-tune of an FP32 checkpoint -> postprocess_ckpt.py ->
    export_frozen_graph.py --quantize -> a runnable Q/DQ graph. The export takes --symmetric and --use_qdq from the
    checkpoint (the recipe also passes them): FakeQuant ops would round to another grid than the one trained."""
    import tensorflow as tf
    qat = str(tmp_path / "qat")
    run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 2, "--iter_unit", "batch",
             "--results_dir", qat, "--seed", 7, "--quantize", "--symmetric", "--use_qdq", "--lr_init", "0.00005",
             "--finetune_checkpoint", trained["dir"], *SMALL)
    parameters = {key for record in read_log(os.path.join(qat, "log.json")) if record.get("step") == "PARAMETER"
                  for key in record["data"]}
    assert {"Restoring variables from checkpoint", "QUANTIZATION AWARE TRAINING ENABLED"} <= parameters
    # Activation ranges are contrib's zero-debiased EMAs of batch ranges that always hold 0: after two steps every
    # ReLU output's range starts exactly at 0 (a plain EMA from the initial [-6, 6] would be at -5.99).
    reader = tf.train.load_checkpoint(qat)
    ranges = {name: float(reader.get_tensor(name)) for name in reader.get_variable_to_shape_map()
              if name.endswith(("act_quant/min", "act_quant/max"))}
    minima = [value for name, value in ranges.items() if name.endswith("/min")]
    maxima = [value for name, value in ranges.items() if name.endswith("/max")]
    relus = 1 + 3 * sum(resnet.ARCHITECTURES["resnet50"].layers)  # the stem's, and per block 2 convs' and the add's
    assert len(minima) == len(maxima) >= relus
    assert all(value <= 0.0 for value in minima) and all(value >= 0.0 for value in maxima)
    assert sum(value == 0.0 for value in minima) >= relus
    final_conv = str(tmp_path / "final_conv")
    graph_path = str(tmp_path / "qat.pb")
    tool_in_process("postprocess_ckpt", "--input", qat, "--output", final_conv)
    export = tool_in_process("export_frozen_graph", "--model_name", "resnet50", "--num_classes", NUM_CLASSES,
                             "--image_size", 32, "--input_format", "NHWC", "--compute_format", "NHWC", "--checkpoint",
                             final_conv, "--output_file", graph_path, "--quantize", "--use_final_conv")
    checkpoint_path = tf.train.latest_checkpoint(final_conv)
    for flag in ("--symmetric", "--use_qdq"):
        assert f"Using {flag} from checkpoint {checkpoint_path}" in export.stdout.splitlines()
    graph_def = tf.compat.v1.GraphDef()
    with open(graph_path, "rb") as handle:
        graph_def.ParseFromString(handle.read())
    assert sum(node.op == "QuantizeAndDequantizeV4" for node in graph_def.node) > relus
    assert not any(node.op.startswith("Variable") for node in graph_def.node)
    from model import export as model_export
    recorded = model_export.graph_source(graph_def)
    assert (recorded["quantized"], recorded["symmetric"], recorded["use_qdq"]) == (True, True, True)
    assert model_export.describe_source(recorded).endswith(
        "quantisation-aware (fake-quantised, symmetric, QuantizeAndDequantize)")
    # evaluate's SavedModel of the QAT checkpoint is its float model, as the original's: its record says so
    run_main("--mode", "evaluate", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 1, "--iter_unit",
             "batch", "--model_dir", qat, "--results_dir", str(tmp_path / "eval"), "--export_dir",
             str(tmp_path / "sm"), *SMALL)
    (saved,) = [os.path.join(tmp_path, "sm", name) for name in os.listdir(tmp_path / "sm")]
    record = model_export.read_source(saved)
    assert record["unused_quantization_ranges"] is True and not record.get("quantized")
    assert not model_export.graph_quantized(model_export.saved_model_graph(saved))
    assert model_export.describe_source(record).endswith(
        "the float model of a quantisation-aware checkpoint (its ranges unused)")
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    probabilities = tf.compat.v1.wrap_function(
        lambda x: tf.graph_util.import_graph_def(graph_def, input_map={"input:0": x},
                                                 return_elements=["resnet50/output/softmax:0"])[0],
        [tf.TensorSpec([None, 32, 32, 3], tf.float32)])(tf.constant(images)).numpy()
    assert probabilities.shape == (2, NUM_CLASSES)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_in_a_multi_worker_run_only_rank_0_says_the_settings_notes(tmp_path, monkeypatch, capsys):
    """Every worker resolves the same settings: the 8 workers of a recipe printed `Note: --data_idx_dir is not
    used ...` 8 times. Rank 0 says them; the others resolve the same settings in silence."""
    import main
    from utils import distributed

    class Worker:
        def __init__(self, rank):
            self.rank, self.is_chief, self.size, self.num_replicas = rank, rank == 0, 2, 2

        def start_together(self, error=None):
            if error is not None:
                raise error

    monkeypatch.setattr(main, "run_mode", lambda *args, **kwargs: 0)  # the settings are what this test is about
    printed = []
    for rank in (0, 1):
        monkeypatch.setattr(distributed, "create", lambda *args, rank=rank: Worker(rank))
        assert main.run(["--mode", "training_benchmark", "--synthetic_data_size", "32", "--num_classes", "11",
                         "--batch_size", "2", "--cpu", "--gpu_id", "1", "--results_dir", str(tmp_path / str(rank))]) == 0
        printed.append(capsys.readouterr().out)
    assert "Note: --gpu_id is not used: --cpu runs on no GPU" in printed[0]
    assert "Note:" not in printed[1]


def test_a_log_that_cannot_be_opened_is_named_with_the_reason(tmp_path, monkeypatch):
    """The log's file or directory found unwritable after the start's checks (a race, a mount turned read-only):
    the line names the log's path and the operating system's reason, not --results_dir."""
    import errno
    from utils import logger

    def read_only(path, **_):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.path.dirname(path))

    monkeypatch.setattr(logger, "DLLogger", read_only)
    log = tmp_path / "elsewhere" / "x.json"
    result = run_main("--mode", "training_benchmark", "--batch_size", 2, "--num_iter", 1, "--iter_unit", "batch",
                      "--results_dir", tmp_path / "results", "--log_filename", log, *SMALL, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: cannot write the log {log}: Read-only file system (in {log.parent})")


def test_an_export_of_a_model_dir_without_labels_says_it_records_no_class_names(trained, data_dir, tmp_path):
    """A checkpoint copied without the labels.txt training kept beside it: its SavedModel records no class names,
    and the export says so, as it says the file whose names it records."""
    import shutil
    copy = shutil.copytree(trained["dir"], str(tmp_path / "copy"), ignore=shutil.ignore_patterns("labels.txt"))
    result = run_main("--mode", "evaluate", "--data_dir", data_dir, "--batch_size", 5, "--results_dir", copy,
                      "--export_dir", str(tmp_path / "export"), *SMALL)
    lines = result.stdout.splitlines()
    exported = next(line for line in lines if line.startswith("Exported the SavedModel to "))
    path = exported.split(" to ", 1)[1].split(" (")[0]
    assert exported.endswith(" (signatures serving_default and predict)") and os.path.isabs(path)
    assert os.path.dirname(path) == str(tmp_path / "export") and os.path.isfile(os.path.join(path, "saved_model.pb"))
    assert lines[lines.index(exported) + 1] == (
        f"It records no class names (no labels.txt beside the checkpoint ({copy}/labels.txt does not exist)): its "
        "outputs are known by their index only")


def test_a_log_filename_outside_results_dir_is_locked_where_it_is_written(tmp_path, data_dir):
    """The run locks the directory of the log file it writes. Until 2026-12-06 it locked --results_dir only, so two
    runs with other results_dirs and one absolute --log_filename interleaved their records in one file (plot_log then
    plotted one of them)."""
    import socket
    from utils.run_lock import RunLock
    shared = tmp_path / "shared"
    with RunLock(str(shared), argv=["main.py", "--mode", "train"]):  # another run writing shared/log.json
        result = run_main("--mode", "training_benchmark", "--batch_size", 2, "--num_iter", 2, "--iter_unit", "batch",
                          "--synthetic_data_size", 32, "--num_classes", 5, "--results_dir", tmp_path / "mine",
                          "--log_filename", shared / "log.json", "--no_progress", check=False)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            f"ERROR: log_filename {shared} is in use by another run (pid {os.getpid()} on host {socket.gethostname()}, "
            f"started {read_lock(str(shared))['started']}); wait for it to end or use another --log_filename"]
        assert not (shared / "log.json").exists()
    # A training whose log goes into its own model_dir (held already) does not wait on its own lock.
    model = tmp_path / "model"
    run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 4, "--num_iter", 1, "--iter_unit", "batch",
             "--model_dir", model, "--results_dir", tmp_path / "results", "--log_filename", model / "log.json",
             "--no_progress", *SMALL)
    assert any(r.get("step") == "PARAMETER" for r in read_log(str(model / "log.json")))
    assert not (model / ".run.lock").exists()


def _top5(stdout, prefix):
    """{file: [(output index, probability), ...]} of predict's lines `<file>: <index> (<name>) <p>, ...`."""
    tops = {}
    for line in stdout.splitlines():
        if line.startswith(prefix):
            name, entries = line.split(": ", 1)
            tops[name] = [(int(entry.split(" ", 1)[0]), float(entry.rsplit(" ", 1)[1])) for entry in entries.split(", ")]
    return tops


def test_photos_get_the_same_top5_from_the_checkpoint_and_from_its_export_on_every_backend(trained, data_dir,
                                                                                            tmp_path):
    """One door per way of serving a trained model: main.py --mode predict reads the checkpoint, inference.py
    --to-predict its SavedModel (tf) and the SavedModel's ONNX conversion (onnxruntime). On real photos (and a file
    that is no image) every door prints the same classes with the same probabilities, named alike, and skips the
    same file with exit status 1."""
    import shutil
    from tests._dataprep_helpers import skimage_photo_dir
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("astronaut.png", "coffee.png", "rocket.jpg"):
        shutil.copy(os.path.join(skimage_photo_dir(), name), photos / name)
    (photos / "notes.jpg").write_bytes(b"not an image\n")
    export_dir = tmp_path / "export"
    run_main("--mode", "evaluate", "--data_dir", data_dir, "--batch_size", 5, "--results_dir", tmp_path / "eval",
             "--model_dir", trained["dir"], "--export_dir", export_dir, *SMALL)
    (exported,) = glob.glob(os.path.join(export_dir, "*"))
    onnx_path = str(tmp_path / "model.onnx")
    assert tool_in_process("export_onnx", "--input", exported, "--output", onnx_path, check=False).returncode == 0
    doors = {"checkpoint": run_main("--mode", "predict", "--to_predict", photos, "--batch_size", 2, "--results_dir",
                                    trained["dir"], *SMALL, check=False)}
    for name, model, backend in (("savedmodel", exported, "tf"), ("onnx", onnx_path, "onnxruntime")):
        doors[name] = tool_in_process("inference", "--model", model, "--backend", backend, "--to-predict", photos,
                                      "--batch-size", 2, "--log-path", tmp_path / f"{name}.json", check=False)
    for name, result in doors.items():
        assert result.returncode == 1, (name, result.stderr[-2000:])
        skipped = [line for line in result.stderr.splitlines() if line.startswith("SKIPPED")]
        assert len(skipped) == 1 and skipped[0].startswith(f"SKIPPED {photos / 'notes.jpg'}: not an image file"), \
            (name, skipped)
        assert result.stdout.strip().splitlines()[-2:] == ["Ending Inference ...", "predicted 3, failed 1"], name
    reference = _top5(doors["checkpoint"].stdout, str(photos))
    assert sorted(reference) == [str(photos / name) for name in ("astronaut.png", "coffee.png", "rocket.jpg")]
    assert "(class_" in doors["checkpoint"].stdout
    for name in ("savedmodel", "onnx"):
        top = _top5(doors[name].stdout, str(photos))
        assert sorted(top) == sorted(reference), name
        for path, entries in reference.items():
            # the same classes and probabilities (printed to 4 places); ONNX Runtime sums in another order, so
            # two classes within its rounding of each other may trade places
            assert [p for _, p in top[path]] == pytest.approx([p for _, p in entries], abs=2e-4), (name, path)
            for (index, p), (other, q) in zip(entries, top[path]):
                assert index == other or abs(p - q) <= 2e-4, (name, path, entries, top[path])
        names = {line.split(": ", 1)[0]: line for line in doors[name].stdout.splitlines() if line.startswith(
            str(photos))}
        for path, line in names.items():
            assert line.split(", ")[0].split(" ")[2].startswith("(class_"), line
    assert f"Class names: {NUM_CLASSES}, recorded in --model {exported}" in doors["savedmodel"].stdout.splitlines()


def test_a_resumed_training_logs_the_steps_an_uninterrupted_one_logs(tmp_path, data_dir):
    """--display_every counts from the training's first step: 6 steps at 4 log steps 1 and 5 whether they run in
    one invocation or in two of 3 (the second logged its own first step, 4, until 2026-12-07)."""
    steps = {}
    for name, runs in (("whole", [6]), ("resumed", [3, 6])):
        for run_iter in runs:
            run_main("--mode", "train", "--data_dir", data_dir, "--batch_size", 8, "--num_iter", 6, "--run_iter",
                     run_iter if name == "resumed" else -1, "--iter_unit", "batch", "--results_dir", tmp_path / name,
                     "--seed", 3, *SMALL, "--display_every", 4)
        steps[name] = [record["step"][1] for record in logged(tmp_path / name, "imgs_per_sec")]
    assert steps == {"whole": [1, 5], "resumed": [1, 5]}
