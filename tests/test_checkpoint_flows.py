"""The checkpoint flows a user runs, from the CLI: the original's TF1 checkpoints in predict / evaluate /
inference_benchmark, a checkpoint missing a variable, settings read from the checkpoint, transfer learning from a
1001-class model to the embedded 10-class data."""
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from model import resnet
from model.checkpoint_names import tf1_variable_map
from tests._cli import main_in_process, run_script, tool_in_process
from tests._data_helpers import write_tfrecord_shards
from tests.conftest import copy_run
from tests._checkpoint_helpers import randomise, save_named
from tests.test_checkpoint_names import write_tf1_checkpoint
from utils import data_utils, devices
from utils.logger import read_log

pytestmark = pytest.mark.shallow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES = 5
SIZE = 32


def run_main(*args):
    return main_in_process(*args, check=False)


def model_with_real_logits(num_classes=NUM_CLASSES, seed=3):
    """He-initialised weights with non-trivial BN statistics: distinct, non-saturated probabilities per image."""
    model = resnet.build_model("resnet50", num_classes=num_classes, image_size=SIZE, seed=seed, weight_init="fan_in")
    rng = np.random.default_rng(seed)
    for variable in model.variables:
        if "moving_variance" in variable.path:
            variable.assign(rng.uniform(0.5, 2.0, variable.shape).astype("float32"))
        elif "moving_mean" in variable.path:
            variable.assign(rng.normal(0, 0.2, variable.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    directory = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for index in range(3):
        pixels = rng.integers(0, 256, (48, 40, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(directory / f"photo_{index}.png")
    return directory


@pytest.fixture(scope="module")
def tf1_model_dir(tmp_path_factory):
    """An NGC-layout directory: `checkpoint` + model.ckpt-N.index/.data-* with the original's names only."""
    model = model_with_real_logits()
    values = {name: variable.numpy() for name, variable in tf1_variable_map(model, "resnet50").items()}
    values["global_step"] = np.array(100, np.int64)
    directory = tmp_path_factory.mktemp("ngc")
    write_tf1_checkpoint(str(directory), values)
    with open(directory / "checkpoint", "w") as handle:  # recorded on the machine that trained it
        handle.write('model_checkpoint_path: "/results/model.ckpt-100"\n'
                     'all_model_checkpoint_paths: "/results/model.ckpt-100"\n')
    return directory, model, values


def predicted_top1(stdout):
    """{file name: (top-1 index, its probability)} from predict's lines `path: i p, ...`."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("/") and ": " in line:
            path, entries = line.split(": ", 1)
            first = entries.split(", ")[0].split()
            found[os.path.basename(path)] = (int(first[0]), float(first[-1]))
    return found


def assert_predicts_what_the_model_computes(stdout, model, photos):
    """predict's top-1 class and probability of each photo are the ones `model` computes in this process."""
    got = predicted_top1(stdout)
    assert len(got) == 3
    for name, (index, probability) in got.items():
        image = data_utils.load_inference_image(str(photos / name), SIZE, SIZE)
        expected = tf.nn.softmax(model(image[None], training=False))[0].numpy()
        assert index == int(np.argmax(expected)), name
        assert abs(probability - float(expected.max())) < 1e-3, name


def test_predict_on_an_original_tf1_checkpoint_directory_uses_its_weights(tf1_model_dir, photos, tmp_path):
    directory, model, _ = tf1_model_dir
    result = run_main("--mode", "predict", "--model_dir", directory, "--results_dir", tmp_path, "--to_predict",
                      photos, "--num_classes", NUM_CLASSES, "--image_size", SIZE, "--batch_size", 2, "--cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    total = len(model.variables)
    assert f"Restored {total} of {total} variables from {directory}/model.ckpt-100 (tf1 format, step 100, resnet50, " \
           f"{NUM_CLASSES} classes)" in result.stdout
    assert "incomplete" not in result.stdout  # the state file's /results/... path is found by its basename
    assert_predicts_what_the_model_computes(result.stdout, model, photos)


def test_predict_run_as_a_script_fixes_the_weights_and_still_predicts_what_the_model_computes(tf1_model_dir, photos,
                                                                                            tmp_path):
    """main.py run as a script for predict tells oneDNN its weights are fixed (a kernel then keeps its first weights,
    utils/devices.assume_frozen_weights); the checkpoint's weights, restored after the model was built, must still
    be the ones used: the probabilities are the model's own, computed here in a process without the setting."""
    directory, model, _ = tf1_model_dir
    result = run_script("main.py", "--mode", "predict", "--model_dir", directory, "--results_dir", tmp_path,
                        "--to_predict", photos, "--num_classes", NUM_CLASSES, "--image_size", SIZE, "--batch_size", 1,
                        "--cpu")
    assert devices.FROZEN_WEIGHTS_NOTE in result.stdout
    parameters = next(r["data"] for r in read_log(str(tmp_path / "log.json")) if r.get("step") == "PARAMETER")
    assert parameters["onednn_frozen_weights"] is True  # the log records the setting the run used
    # ... and that the process pooled its CPU memory (utils/devices.pool_cpu_memory)
    assert parameters["environment"]["variables"][devices.POOLED_CPU_MEMORY_ENV] == "true"
    assert_predicts_what_the_model_computes(result.stdout, model, photos)


def test_evaluate_and_inference_benchmark_on_the_original_checkpoint(tf1_model_dir, tmp_path):
    directory, _, _ = tf1_model_dir
    data = tmp_path / "data"
    data.mkdir()
    write_tfrecord_shards(str(data), "validation", 1, 8, SIZE, num_classes=NUM_CLASSES)
    common = ["--model_dir", directory, "--num_classes", NUM_CLASSES, "--image_size", SIZE, "--batch_size", 4,
              "--cpu", "--no_progress", "--warmup_steps", 0]
    evaluate = run_main("--mode", "evaluate", "--data_dir", data, "--results_dir", tmp_path / "e", *common)
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    assert "(tf1 format, step 100, resnet50" in evaluate.stdout and "top1_accuracy" in evaluate.stdout
    benchmark = run_main("--mode", "inference_benchmark", "--data_dir", data, "--results_dir", tmp_path / "b",
                         "--num_iter", 2, "--iter_unit", "batch", *common)
    assert benchmark.returncode == 0, benchmark.stderr[-3000:]
    assert "(tf1 format, step 100, resnet50" in benchmark.stdout
    assert devices.FROZEN_WEIGHTS_NOTE not in benchmark.stdout  # in-process: the test process is not fixed


def test_a_checkpoint_missing_one_variable_is_one_line_and_exit_2(tf1_model_dir, photos, tmp_path):
    _, _, values = tf1_model_dir
    broken = dict(values)
    del broken["resnet50/btlnck_block_2_0/bottleneck_2/BatchNorm/moving_variance"]
    directory = tmp_path / "broken"
    directory.mkdir()
    write_tf1_checkpoint(str(directory), broken)
    # In a child process: the stderr that TensorFlow's restore warnings would flood is the process's own.
    result = run_script("main.py", "--mode", "predict", "--model_dir", directory, "--results_dir", tmp_path,
                        "--to_predict", photos, "--num_classes", NUM_CLASSES, "--image_size", SIZE, "--batch_size", 2,
                        "--cpu", check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert errors == [result.stderr.strip().splitlines()[-1]]
    assert "1 missing: resnet50/btlnck_block_2_0/bottleneck_2/BatchNorm/moving_variance" in errors[0]
    assert "Restored" not in result.stdout and "Traceback" not in result.stderr
    assert "could not be found" not in result.stderr  # no flood of TF's restore warnings


def test_predict_takes_settings_from_the_checkpoint_and_refuses_contradictions(photos, tmp_path):
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=1)
    randomise(model, 2)
    save_named(tmp_path / "run", model, image_size=SIZE)
    quiet = run_main("--mode", "predict", "--model_dir", tmp_path / "run", "--results_dir", tmp_path, "--to_predict",
                     photos, "--batch_size", 3, "--cpu")  # neither --num_classes nor --image_size
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert f"Using --num_classes {NUM_CLASSES} from checkpoint" in quiet.stdout
    assert f"Using --image_size {SIZE} from checkpoint" in quiet.stdout
    assert len(predicted_top1(quiet.stdout)) == 3
    contradiction = run_main("--mode", "predict", "--model_dir", tmp_path / "run", "--results_dir", tmp_path,
                             "--to_predict", photos, "--batch_size", 3, "--cpu", "--image_size", 224)
    assert contradiction.returncode == 2
    assert contradiction.stderr.strip().splitlines()[-1].startswith(
        "ERROR: --image_size 224 contradicts checkpoint ")


@pytest.mark.slow
def test_finetune_from_1001_classes_onto_the_embedded_10_class_data(tmp_path):
    source = model_with_real_logits(num_classes=1001, seed=4)
    from model import checkpoint
    entries = dict(checkpoint.model_entries(source, "resnet50"), global_step=tf.constant(500, tf.int64))
    (tmp_path / "imagenet").mkdir()
    checkpoint.write(str(tmp_path / "imagenet" / "model.ckpt-500"), entries,
                     checkpoint.metadata("resnet50", 1001, SIZE, False, False))
    data = tmp_path / "data"
    tool_in_process("dataprep.fashion_mnist", "--out", data, "--image_size", SIZE, "--train_count", 64,
                    "--val_count", 16, "--no_progress")
    result = run_main("--mode", "train", "--data_dir", data, "--results_dir", tmp_path / "tuned", "--num_classes", 10,
                      "--image_size", SIZE, "--batch_size", 8, "--num_iter", 1, "--iter_unit", "batch", "--cpu",
                      "--finetune_checkpoint", tmp_path / "imagenet", "--no_progress", "--lr_warmup_epochs", 0)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Fine-tuning from 1001 to 10 classes: the classifier is initialised fresh" in result.stdout
    trainable = len(source.trainable_variables)
    assert f"Restored {trainable - 2} of {len(source.variables)} variables" in result.stdout
    # Checkpoint 0 is written right after the restore, before the first step.
    restored = tf.train.load_checkpoint(str(tmp_path / "tuned" / "model.ckpt-0"))
    for name, variable in tf1_variable_map(source, "resnet50").items():
        value = restored.get_tensor(name)
        if name.startswith("resnet50/output/"):
            assert value.shape[-1] == 10, name
        elif variable.trainable:
            np.testing.assert_array_equal(value, variable.numpy(), err_msg=name)
        else:  # BN moving statistics start fresh, as the original's --finetune_checkpoint
            np.testing.assert_array_equal(value, 1.0 if "variance" in name else 0.0, err_msg=name)
    resumed = run_main("--mode", "train", "--data_dir", data, "--results_dir", tmp_path / "tuned", "--num_classes", 10,
                       "--image_size", SIZE, "--batch_size", 8, "--num_iter", 2, "--iter_unit", "batch", "--cpu",
                       "--finetune_checkpoint", tmp_path / "imagenet", "--no_progress", "--lr_warmup_epochs", 0)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # The same command again continues the fine-tune its checkpoint records (the recipes' resume after a Ctrl-C).
    assert f"Continuing the fine-tune of {tmp_path / 'imagenet'} from checkpoint {tmp_path / 'tuned'}" in resumed.stdout
    assert "WARNING: --finetune_checkpoint" not in resumed.stdout
    assert "Current step: 1" in resumed.stdout
    other_arch = run_main("--mode", "train", "--data_dir", data, "--results_dir", tmp_path / "x", "--arch",
                          "se-resnext101-32x4d", "--num_classes", 10, "--image_size", SIZE, "--batch_size", 8,
                          "--num_iter", 1, "--iter_unit", "batch", "--cpu", "--finetune_checkpoint",
                          tmp_path / "imagenet")
    assert other_arch.returncode == 2
    assert "is a resnet50 checkpoint; this run builds se-resnext101-32x4d (pass --arch resnet50)" in \
        other_arch.stderr.strip().splitlines()[-1]
    # refused with the settings, before the run logs or creates anything (until 2026-12-07 when its weights were
    # restored: a log.json with its PARAMETER record was left behind, and a "new training" line printed)
    assert not (tmp_path / "x").exists() and "new training" not in other_arch.stdout


# ---------------------------------------------------------------- one checkpoint through every tool
def _in_process_main(*args):
    """main.py's exit status, its output left to capsys."""
    import main
    return main.main([str(arg) for arg in args])


def test_every_tool_reads_a_32px_10_class_checkpoint_as_trained(tmp_path, capsys):
    """No size or class flag anywhere: evaluate, the synthetic inference benchmark, the frozen-graph export and the
    ONNX Runtime benchmark of that export all take 32 px and 10 classes from the checkpoint, and the ONNX model
    scores on the validation images exactly what evaluate scores."""
    import export_frozen_graph
    import inference
    from model import checkpoint as checkpoint_files, export
    from utils.logger import read_log
    model = model_with_real_logits(num_classes=10, seed=5)
    checkpoint = tmp_path / "run"
    checkpoint.mkdir()
    entries = dict(checkpoint_files.model_entries(model, "resnet50"), global_step=tf.constant(9, tf.int64))
    prefix = checkpoint_files.write(str(checkpoint / "model.ckpt-9"), entries,
                                    dict(checkpoint_files.metadata("resnet50", 10, SIZE, False, False), step=9))
    checkpoint_files.write_state_file(str(checkpoint), ["model.ckpt-9"])
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 16, 40, num_classes=11, seed=2)  # labels 1..10

    assert _in_process_main("--mode", "evaluate", "--model_dir", checkpoint, "--data_dir", data, "--batch_size", 4,
                            "--results_dir", tmp_path / "eval", "--no_progress") == 0
    out = capsys.readouterr().out
    assert f"Using --num_classes 10 from checkpoint {prefix}" in out
    assert f"Using --image_size {SIZE} from checkpoint {prefix}" in out
    log = read_log(str(tmp_path / "eval" / "log.json"))
    parameters = next(r["data"] for r in log if r.get("step") == "PARAMETER")
    assert (parameters["num_classes"], parameters["image_size"], parameters["checkpoint"]) == (10, SIZE, prefix)
    top1 = [r["data"]["top1_accuracy"] for r in log if "top1_accuracy" in r.get("data", {})][-1]

    assert _in_process_main("--mode", "inference_benchmark", "--model_dir", checkpoint, "--batch_size", 2,
                            "--num_iter", 2, "--warmup_steps", 0, "--results_dir", tmp_path / "bench",
                            "--no_progress") == 0
    out = capsys.readouterr().out
    assert f"Using --synthetic_data_size {SIZE} from checkpoint {prefix}" in out
    assert "top1_accuracy" not in out  # random labels: no accuracy
    bench = next(r["data"] for r in read_log(str(tmp_path / "bench" / "log.json")) if r.get("step") == "PARAMETER")
    assert bench["synthetic_data_size"] == SIZE

    frozen = tmp_path / "frozen.pb"
    lines = []
    graph_def = export_frozen_graph.export(export_frozen_graph.parse_args(
        ["--checkpoint", str(checkpoint), "--output_file", str(frozen), "--input_format", "NHWC",
         "--compute_format", "NHWC"]), log=lines.append)
    placeholder = next(node for node in graph_def.node if node.name == "input")
    assert [d.size for d in placeholder.attr["shape"].shape.dim] == [-1, SIZE, SIZE, 3]
    assert f"Using --num_classes 10 from checkpoint {prefix}" in lines
    assert lines[-2].endswith(f"input 'input' NHWC [-1, {SIZE}, {SIZE}, 3], output 'resnet50/output/softmax' "
                              "[-1, 10] (resnet50); it takes raw 0..255 RGB pixels (normalised in the model)")
    assert lines[-1].startswith("It records no class names (no labels.txt beside the checkpoint (")
    onnx_path = tmp_path / "frozen.onnx"
    export.to_onnx(str(frozen), str(onnx_path))
    results = inference.run(inference.parse_args(["--model", str(onnx_path), "--backend", "onnxruntime",
                                                  "--data-dir", str(data), "--batch-size", "4", "--warmup-steps",
                                                  "0", "--log-path", str(tmp_path / "onnx.json")]))
    assert results["accuracy"] == top1
    # The exporter's default layout (NCHW, TensorRT's) through ONNX: inference.py reads the size from dims 2-3 and
    # feeds its NHWC batches transposed.
    nchw, nchw_onnx = tmp_path / "nchw.pb", tmp_path / "nchw.onnx"
    export_frozen_graph.export(export_frozen_graph.parse_args(["--checkpoint", str(checkpoint), "--output_file",
                                                               str(nchw)]), log=lambda *_: None)
    export.to_onnx(str(nchw), str(nchw_onnx))
    results = inference.run(inference.parse_args(["--model", str(nchw_onnx), "--backend", "onnxruntime",
                                                  "--data-dir", str(data), "--batch-size", "4", "--warmup-steps",
                                                  "0", "--log-path", str(tmp_path / "nchw.json")]))
    assert results["accuracy"] == top1
    assert inference.onnx_input_layout(["n", 3, SIZE, SIZE]) == ("NCHW", SIZE)
    assert inference.onnx_input_layout(["n", SIZE, SIZE, 3]) == ("NHWC", SIZE)
    assert inference.onnx_input_layout(["n", 3, "h", "w"]) == ("NCHW", None)
    assert inference.onnx_input_layout(["n", 5, SIZE, SIZE]) == (None, None)


@pytest.mark.slow
def test_a_qat_run_resumed_without_quantize_keeps_its_ranges_and_a_float_one_may_start_qat(tmp_path, capsys,
                                                                                           trained_run):
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 16, 40, num_classes=NUM_CLASSES + 1)
    common = ["--mode", "train", "--data_dir", data, "--batch_size", 4, "--iter_unit", "batch", "--no_progress",
              "--lr_warmup_epochs", 0]
    qat, plain = tmp_path / "qat", tmp_path / "float"
    assert _in_process_main(*common, "--results_dir", qat, "--num_iter", 1, "--quantize", "--num_classes",
                            NUM_CLASSES, "--image_size", SIZE) == 0
    capsys.readouterr()
    assert _in_process_main(*common, "--results_dir", qat, "--num_iter", 2) == 0  # no --quantize, no sizes
    out = capsys.readouterr().out
    assert f"Using --quantize from checkpoint {qat}/model.ckpt-1: it holds quantisation ranges, which this run " \
           "keeps training" in out
    restored = [line for line in out.splitlines() if line.startswith("Restored ")]
    total = int(restored[0].split(" of ")[1].split()[0])
    floats = [name for name, _ in tf.train.list_variables(str(trained_run["model_dir"] / "model.ckpt-1"))
              if "Momentum" not in name and name != "checkpoint_metadata"]  # a float run's, without the slots
    assert restored[0].startswith(f"Restored {total} of {total} variables") and total > len(floats)  # + the ranges
    assert any("quant" in name for name in tf.train.list_variables(str(qat / "model.ckpt-2")) for name in name[:1])

    copy_run(trained_run, plain)  # a float run of one step, NUM_CLASSES classes at SIZE
    assert _in_process_main(*common, "--results_dir", plain, "--num_iter", 2, "--quantize") == 0
    out = capsys.readouterr().out
    assert f"Checkpoint {plain}/model.ckpt-1 has no quantisation ranges: quantisation-aware training starts at its " \
           "step 1 with fresh ranges" in out
