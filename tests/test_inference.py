"""inference.py end to end (in-process, small): tf and onnxruntime backends, random inputs and TFRecords, errors."""
import json
import os

import pytest

from tests._cli import tool_in_process
from tests._data_helpers import tiny_onnx_classifier, write_tfrecord_shards

pytestmark = pytest.mark.shallow

SMALL = ["--image-size", "32", "--num-classes", "11", "--batch-size", "2", "--warmup-steps", "1"]


def run(*args):
    """`python inference.py args` called in-process (tests/_cli.py)."""
    return tool_in_process("inference", *args, check=False)


class RecordingLogger:
    """inference.benchmark's logger, keeping what it is given: (step, data) records and printed lines."""

    def __init__(self):
        self.logged = []

    def log(self, step, data):
        self.logged.append((step, data))

    def print(self, line):
        self.logged.append(line)


def final_record(log_path):
    records = [json.loads(line[5:]) for line in open(log_path, encoding="utf-8") if line.startswith("DLLL ")]
    finals = [r for r in records if r["type"] == "LOG" and r["step"] == []]
    assert len(finals) == 1
    return finals[0]["data"]


def parameter_record(log_path):
    records = [json.loads(line[5:]) for line in open(log_path, encoding="utf-8") if line.startswith("DLLL ")]
    return next(r["data"] for r in records if r.get("step") == "PARAMETER")


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A SavedModel written by model/export.save_saved_model (what main.py --export_dir writes)."""
    from model import export, resnet
    directory = str(tmp_path_factory.mktemp("export"))
    model = resnet.build_model("resnet50", num_classes=11, image_size=32, purpose="inference")
    return export.save_saved_model(model, 32, directory)


def test_a_model_exported_from_a_checkpoint_of_few_steps_is_warned_about_when_its_accuracy_is_measured(tmp_path):
    """The step its export records: at 3 steps its BN moving statistics hold 73% (0.9 ** 3) of their starting
    values, which an accuracy on --data-dir should not be read without; a benchmark on random inputs, or a model of
    1000 steps, says nothing."""
    from model import export, resnet
    model = resnet.build_model("resnet50", num_classes=11, image_size=32, purpose="inference")
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 4, 40, num_classes=11)
    warnings, saved_models = {}, {}
    for step in (3, 1000):
        source = {"arch": "resnet50", "num_classes": 11, "image_size": 32, "checkpoint": f"/x/model.ckpt-{step}",
                  "step": step, "weights": "raw"}
        saved = saved_models[step] = export.save_saved_model(model, 32, str(tmp_path / str(step)), source)
        for where in (["--data-dir", str(data)], ["--num-iter", "2"]):
            result = run("--model", saved, *where, "--log-path", str(tmp_path / "log.json"), *SMALL)
            assert result.returncode == 0, result.stderr
            warnings[step, where[0]] = [line for line in result.stdout.splitlines() if line.startswith("WARNING")]
    assert warnings.pop((3, "--data-dir")) == [
        f"WARNING: --model {saved_models[3]} was trained 3 step(s): its BN moving "
        "statistics still hold 73% of their starting values (mean 0, variance 1, where a training or a "
        "--finetune_checkpoint fine-tune starts them), so it normalises with statistics that are not its data's and "
        "its outputs are unreliable; train it to step 44 or beyond (under 1% left)"]
    assert warnings == {key: [] for key in warnings}


def test_data_whose_labels_name_other_classes_than_the_export_records_is_warned_about(tmp_path):
    """main.py evaluate's check, through an export: the class names it records against the data's labels.txt.
    Data without labels.txt, or naming the same classes, says nothing."""
    from model import export, resnet
    model = resnet.build_model("resnet50", num_classes=11, image_size=32, purpose="inference")
    names = [f"class_{i}" for i in range(11)]
    source = {"arch": "resnet50", "num_classes": 11, "image_size": 32, "checkpoint": "/x/model.ckpt-1000",
              "step": 1000, "weights": "raw", "class_names": names}
    saved = export.save_saved_model(model, 32, str(tmp_path / "export"), source)
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 4, 40, num_classes=11)

    def warnings():
        result = run("--model", saved, "--data-dir", str(data), "--log-path", str(tmp_path / "log.json"), *SMALL)
        assert result.returncode == 0, result.stderr
        return [line for line in result.stdout.splitlines() if line.startswith("WARNING")]
    assert warnings() == []
    (data / "labels.txt").write_text("".join(f"{name}\n" for name in names))
    assert warnings() == []
    (data / "labels.txt").write_text("".join(f"{name}\n" for name in reversed(names)))
    assert warnings() == [f"WARNING: {data / 'labels.txt'} names other classes than --model {saved} records (the same "
                          "names in another order): the accuracy compares output k with label k, which names another "
                          "class here"]


def test_tf_backend_on_tfrecords(saved_model, tmp_path):
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 6, 40, num_classes=11)
    log = tmp_path / "log.json"
    result = run("--model", saved_model, "--data-dir", str(data), "--log-path", str(log), *SMALL)
    assert result.returncode == 0, result.stderr
    final = final_record(log)
    assert 0.0 <= final["accuracy"] <= final["accuracy_top5"] <= 1.0
    assert final["throughput"] > 0 and final["latency_p99"] >= final["latency_avg"] * 0 > -1
    # The PARAMETER record says where it ran and with what, as main.py's does.
    environment = parameter_record(log)["environment"]
    assert environment["devices"] == ["CPU"]
    assert {"host", "tensorflow", "keras", "code_version"} <= set(environment)


def test_run_as_a_script_the_tf_backend_fixes_the_weights_and_scores_what_in_process_scores(saved_model, tmp_path):
    """inference.py run as a script with --backend tf serves one SavedModel whose weights never change, so it lets
    oneDNN keep each conv's reordered weights (utils/devices.assume_frozen_weights) and says so; its accuracy on
    the records is the one of an in-process run without the setting."""
    from tests._cli import run_script
    from utils import devices
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 6, 40, num_classes=11)
    script = run_script("inference.py", "--model", saved_model, "--data-dir", str(data), "--log-path",
                        str(tmp_path / "script.json"), *SMALL)
    assert devices.FROZEN_WEIGHTS_NOTE in script.stdout
    here = run("--model", saved_model, "--data-dir", str(data), "--log-path", str(tmp_path / "here.json"), *SMALL)
    assert here.returncode == 0 and devices.FROZEN_WEIGHTS_NOTE not in here.stdout
    assert final_record(tmp_path / "script.json")["accuracy"] == final_record(tmp_path / "here.json")["accuracy"]
    parameters = [parameter_record(tmp_path / name) for name in ("script.json", "here.json")]
    assert parameters[0]["onednn_frozen_weights"] is True and "onednn_frozen_weights" not in parameters[1]
    assert parameters[0]["environment"]["variables"][devices.POOLED_CPU_MEMORY_ENV] == "true"


def test_onnxruntime_backend_random_inputs_with_periodic_logs(saved_model, tmp_path):
    log = tmp_path / "log.json"
    result = run("--model", saved_model, "--backend", "onnxruntime", "--num-iter", "102", "--log-path", str(log),
                 *SMALL)
    assert result.returncode == 0, result.stderr
    assert (f"Converted --model {saved_model} to ONNX for --backend onnxruntime (tf2onnx, opset 17, in a temporary "
            "file; export_onnx.py writes one to keep)") in result.stdout.splitlines()
    records = [json.loads(line[5:]) for line in open(log, encoding="utf-8") if line.startswith("DLLL ")]
    assert [r["step"] for r in records if r["type"] == "LOG" and r["step"] not in ([], "PARAMETER")] == [[0, 100]]
    final = final_record(log)
    assert "accuracy" not in final and final["throughput"] > 0
    assert parameter_record(log)["environment"]["devices"] == ["CPU (CPUExecutionProvider)"]
    assert set(final) >= {"latency_avg", "latency_p90", "latency_p95", "latency_p99"}


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider' is not in available provider names")
def test_onnxruntime_says_which_provider_ran_and_why_cuda_did_not(saved_model, tmp_path, monkeypatch):
    """The CPU build runs on its CPU provider. onnxruntime-gpu (here: the CPU build told it has the CUDA provider)
    gets its pip CUDA libraries preloaded; with no GPU the CUDA runtime can use, the CUDA provider is not asked for
    (ONNX Runtime would print a page of errors first) and one line says so; a CUDA provider that fails to start
    falls back to the CPU with one line too."""
    import inference
    model = tmp_path / "model.onnx"

    def run_onnx(name):
        result = run("--model", str(model), "--backend", "onnxruntime", "--num-iter", "2", "--log-path",
                     str(tmp_path / (name + ".json")), *SMALL)
        assert result.returncode == 0, result.stderr
        assert "with backend onnxruntime on CPUExecutionProvider" in result.stdout
        return result.stdout

    from model import export
    export.to_onnx(saved_model, str(model))
    assert "CUDA provider" not in run_onnx("cpu")
    import onnxruntime
    preloaded = []
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(onnxruntime, "preload_dlls", lambda *a, **k: preloaded.append(True), raising=False)
    assert inference.cuda_device_count() == 0  # no CUDA 12 runtime that starts on this machine
    assert ("ONNX Runtime's CUDA provider is not used: the CUDA runtime sees no usable GPU (none, or no driver for "
            "CUDA 12): running on the CPU") in run_onnx("no_gpu")
    monkeypatch.setattr(inference, "cuda_device_count", lambda: 1)
    assert ("ONNX Runtime's CUDA provider did not start (its CUDA 12 / cuDNN 9 libraries did not load): running on "
            "the CPU") in run_onnx("failed_start")
    assert preloaded == [True, True]


def test_architecture_with_few_steps(tmp_path):
    """Fewer than 101 steps (the original divided by zero) from a freshly built model."""
    log = tmp_path / "log.json"
    result = run("--architecture", "resnet50", "--num-iter", "5", "--log-path", str(log), *SMALL)
    assert result.returncode == 0, result.stderr
    assert final_record(log)["throughput"] > 0
    assert "Model: --architecture resnet50 with freshly initialised weights, as the original (no checkpoint: an " \
           "accuracy on --data-dir is chance; serve a trained model with --model)" in result.stdout.splitlines()
    parameters = parameter_record(log)  # what was loaded, in the log too
    assert parameters["model_description"].startswith("Model: --architecture resnet50 with freshly initialised")
    assert parameters["model_path"] is None and parameters["model_source"] is None


def test_tf_trt_message(tmp_path):
    result = run("--architecture", "resnet50", "--tf-trt", "--log-path", str(tmp_path / "log.json"), *SMALL)
    assert result.returncode == 2
    assert not (tmp_path / "log.json").exists()  # a refused run leaves no log behind
    assert result.stderr.strip().splitlines()[-1] == ("ERROR: Tensorflow has not been built with TensorRT support (TF-TRT is absent "
                                     "from TF 2.18+ pip builds); use --backend onnxruntime, or --backend tensorrt "
                                     "(TensorRT engine from ONNX, needs a GPU)")


def test_tf_trt_help_says_pip_builds_lack_it():
    """The flag's help said only "convert the SavedModel with TF-TRT first", for a TensorFlow that cannot."""
    text = " ".join(run("--help").stdout.split())  # (wrapped at the terminal's width)
    assert ("--tf-trt convert the SavedModel with TF-TRT first; needs a TensorFlow built with TensorRT, which TF "
            "2.21's pip builds are not (the tool then stops: use --backend onnxruntime or --backend tensorrt)") in text


def test_tensorrt_backend_message(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    result = run("--model", str(tmp_path / "m.onnx"), "--backend", "tensorrt", *SMALL)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("ERROR: --backend tensorrt needs")


def test_bad_inputs(tmp_path):
    neither = run(*SMALL)
    assert neither.returncode == 2 and "one of the arguments --model --architecture is required" in neither.stderr
    both = run("--model", "x", "--architecture", "resnet50", *SMALL)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    missing = run("--model", str(tmp_path / "nope"), *SMALL)
    assert missing.returncode == 2 and "ERROR: --model" in missing.stderr
    (tmp_path / "frozen.pb").write_bytes(b"")
    frozen = run("--model", str(tmp_path / "frozen.pb"), *SMALL)
    assert frozen.returncode == 2 and f"ERROR: --model {tmp_path / 'frozen.pb'} is a file, a frozen graph" in \
        frozen.stderr and "export_onnx.py --input" in frozen.stderr
    import tensorflow as tf
    module = tf.Module()
    module.f = tf.function(lambda x: x, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "nosig"), signatures={"other": module.f})
    no_signature = run("--model", str(tmp_path / "nosig"), *SMALL)
    assert no_signature.returncode == 2 and "has no serving_default signature" in no_signature.stderr
    assert [line for line in no_signature.stderr.splitlines() if "ERROR" in line or "Traceback" in line] == \
        [no_signature.stderr.strip().splitlines()[-1]]
    # A file that is not ONNX, and a cut-off copy of one: one line each, not ONNX Runtime's and protobuf's tracebacks.
    model = tiny_onnx_classifier(tmp_path / "good.onnx", batch=2)
    (tmp_path / "notes.onnx").write_text("hello\n")
    (tmp_path / "cut.onnx").write_bytes(open(model, "rb").read()[:60])
    for name in ("notes.onnx", "cut.onnx"):
        result = run("--model", str(tmp_path / name), "--backend", "onnxruntime", "--num-iter", "2", "--log-path",
                     str(tmp_path / "log.json"))
        assert (result.returncode, result.stderr.strip()) == (
            2, f"ERROR: --model {tmp_path / name} is not an ONNX model (it does not parse as one: a cut-off copy, or "
               "another format)")


def test_the_tf_backend_says_a_saved_models_precision_when_it_is_not_float32_or_amp_is_asked(saved_model, tmp_path):
    """A SavedModel runs in the precision it was exported in: the run says which when it is reduced, and when --amp
    was given (which a given SavedModel does not change); a float32 one without --amp says nothing."""
    from model import export, resnet
    model = resnet.build_model("resnet50", num_classes=11, image_size=32, dtype_policy="mixed_bfloat16",
                               purpose="inference")
    bfloat16 = export.save_saved_model(model, 32, str(tmp_path / "bf16"))
    args = ["--num-iter", "2", "--log-path", str(tmp_path / "log.json"), *SMALL]
    lines = {name: [line for line in run("--model", path, *extra, *args).stdout.splitlines()
                    if line.startswith("The SavedModel computes in")]
             for name, path, extra in (("bf16", bfloat16, []), ("f32_amp", saved_model, ["--amp"]),
                                       ("f32", saved_model, []))}
    assert lines == {"bf16": ["The SavedModel computes in bfloat16, the precision it was exported in"],
                     "f32_amp": ["The SavedModel computes in float32, the precision it was exported in (--amp does "
                                 "not change a given SavedModel)"],
                     "f32": []}
    # The same bfloat16 SavedModel for ONNX Runtime: refused from its graph, before a conversion that ends the same
    result = run("--model", bfloat16, "--backend", "onnxruntime", *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: ONNX Runtime cannot run {bfloat16}: it computes in bfloat16 (built or exported under --amp on a CPU), "
        "which ONNX Runtime has no kernels for; use a model exported without --amp, or --backend tf")
    assert "Converted" not in result.stdout


def test_onnxruntime_refuses_a_bfloat16_model_in_one_line():
    """--amp on a CPU builds the model in bfloat16, which ONNX Runtime has no kernels for: one line that says so
    and what to do, not ONNX Runtime's type error."""
    result = run("--architecture", "resnet50", "--amp", "--backend", "onnxruntime", "--num-iter", "2", *SMALL)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "ERROR: ONNX Runtime cannot run resnet50: it computes in bfloat16 (built or exported under --amp on a CPU), "
        "which ONNX Runtime has no kernels for; use a model exported without --amp, or --backend tf")


@pytest.mark.parametrize("backend", ["tf", "onnxruntime"])
def test_input_size_is_read_from_the_model(saved_model, backend, tmp_path):
    """A 32 px SavedModel without --image-size runs at 32, and its PARAMETER record gives the size and the class
    count the model was run with, not the flags' defaults; a contradicting --image-size is one clear line."""
    args = ["--model", saved_model, "--backend", backend, "--num-iter", "2", "--batch-size", "2", "--warmup-steps",
            "0", "--log-path", str(tmp_path / "log.json")]
    result = run(*args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Input size 32x32, read from the model" in result.stdout
    parameters = parameter_record(tmp_path / "log.json")
    assert (parameters["image_size"], parameters["num_classes"]) == (32, 11)
    wrong = run(*args, "--image-size", "224")
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines()[-1] == (
        "ERROR: --image-size 224 but the model takes 32x32 inputs (omit --image-size to use the model's)")
    other_classes = run(*args, "--num-classes", "5")
    assert (other_classes.returncode, other_classes.stderr.strip().splitlines()[-1]) == (
        2, f"ERROR: --num-classes 5 but --model {saved_model} has 11 outputs (omit --num-classes: it sizes the model "
           "of --architecture)")


def test_a_log_path_that_cannot_be_written_is_one_line_before_any_work(tmp_path):
    (tmp_path / "a_file").write_text("x")
    for path, expected in ((tmp_path, f"ERROR: --log-path {tmp_path} is a directory (give the name of the file to "
                                      "write)"),
                           (tmp_path / "a_file" / "log.json", f"ERROR: --log-path {tmp_path / 'a_file' / 'log.json'} "
                                                              f"cannot be created: {tmp_path / 'a_file'} is not a "
                                                              "directory")):
        result = run("--architecture", "resnet50", "--log-path", str(path), *SMALL)
        assert (result.returncode, result.stderr.strip()) == (2, expected)


def test_amp_with_a_given_model_on_onnxruntime_is_said_unused(saved_model, tmp_path):
    result = run("--model", saved_model, "--backend", "onnxruntime", "--amp", "--num-iter", "2", "--log-path",
                 str(tmp_path / "log.json"), *SMALL)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"Note: --amp is not used: --backend onnxruntime runs --model {saved_model} in the precision it was " \
           "exported in" in result.stdout.splitlines()
    assert parameter_record(tmp_path / "log.json")["amp"] is False  # the record said True (2026-12-07)


@pytest.mark.parametrize("flag,value", [("--image-size", "16"), ("--num-classes", "1")])
def test_a_too_small_model_is_refused_by_inference_flag_name(flag, value, capsys):
    import inference
    with pytest.raises(SystemExit) as exit_info:
        inference.parse_args(["--architecture", "resnet50", flag, value])
    assert exit_info.value.code == 2
    assert "{} must be at least".format(flag) in capsys.readouterr().err


def _twelve_class_validation(directory, manifest):
    """Validation records labelled 1..12, with or without the manifest dataprep writes."""
    write_tfrecord_shards(str(directory), "validation", 1, 13, 40, num_classes=13)  # labels 1..12
    if manifest:
        (directory / ".dataprep-validation.json").write_text(json.dumps({
            "version": 2, "split": "validation", "num_shards": 1, "num_images": 13, "fingerprint": "",
            "num_classes": 12, "label_range": [1, 12], "complete": True, "shards": {"0": {"written": 13,
                                                                                       "skipped": []}}}))


def test_a_model_with_fewer_outputs_than_the_datasets_labels_is_refused(saved_model, tmp_path, capsys):
    """In process: the 11-output SavedModel on a 12-class dataset, refused from the manifest before anything runs,
    and without a manifest at the first record whose label it cannot hold."""
    import inference
    with_manifest, without = tmp_path / "with", tmp_path / "without"
    _twelve_class_validation(with_manifest, manifest=True)
    _twelve_class_validation(without, manifest=False)
    for data, expected in ((with_manifest, f"ERROR: --model {saved_model} has 11 outputs, too few for dataset "
                                           f"{with_manifest}'s labels 1..12 (12 classes, recorded in "
                                           ".dataprep-validation.json): it is not a model of this dataset"),
                           (without, "is outside 1..11: the dataset has more classes than the outputs of --model "
                                     "(11)")):
        assert inference.main(["--model", saved_model, "--data-dir", str(data), "--batch-size", "4",
                               "--log-path", str(tmp_path / "log.json")]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("ERROR:") and expected in error[0], error
    assert inference.main(["--architecture", "resnet50", "--num-classes", "10", "--data-dir", str(with_manifest),
                           "--log-path", str(tmp_path / "log.json")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ERROR: --num-classes 10 cannot hold dataset {with_manifest}'s labels 1..12 (12 classes, recorded in "
        ".dataprep-validation.json); pass --num-classes 12 or more")


def test_a_fixed_batch_model_refuses_another_batch_size_in_one_line(tmp_path):
    model = tiny_onnx_classifier(tmp_path / "b1.onnx", batch=1)
    log = str(tmp_path / "log.json")
    result = run("--model", model, "--backend", "onnxruntime", "--batch-size", "4", "--num-iter", "2", "--log-path",
                 log)
    assert (result.returncode, result.stderr.strip()) == (
        2, f"ERROR: --batch-size 4 but --model {model} takes batches of 1 only (exported with a fixed batch size): "
           "pass --batch-size 1, or export with a dynamic batch")
    assert run("--model", model, "--backend", "onnxruntime", "--batch-size", "1", "--num-iter", "30", "--log-path",
               log).returncode == 0


def test_a_run_within_its_warmup_and_an_unused_num_iter_are_said(tmp_path):
    model = tiny_onnx_classifier(tmp_path / "b2.onnx", batch=2)
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 6, 32)
    result = run("--model", model, "--backend", "onnxruntime", "--batch-size", "2", "--num-iter", "5",
                 "--warmup-steps", "20", "--log-path", str(tmp_path / "log.json"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "WARNING: 5 step(s) ran, not more than --warmup-steps 20: the throughput and latency figures count all " \
           "of them, warm-up included (run more than 20 steps for a steady-state figure)" in result.stdout
    assert (parameter_record(str(tmp_path / "log.json"))["num_iter"],
            parameter_record(str(tmp_path / "log.json"))["steps"]) == (5, 5)
    result = run("--model", model, "--backend", "onnxruntime", "--batch-size", "2", "--num-iter", "5",
                 "--warmup-steps", "0", "--data-dir", str(data), "--log-path", str(tmp_path / "pass.json"))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert "Note: --num-iter 5 is not used: with --data-dir the run is one pass over the validation images" in lines
    assert "Running 3 steps of batch 2 with backend onnxruntime on CPUExecutionProvider" in lines
    assert not any(line.startswith("WARNING: ") for line in lines)
    # the record says what ran (until 2026-12-07 it kept num_iter 5)
    record = parameter_record(str(tmp_path / "pass.json"))
    assert (record["num_iter"], record["steps"]) == (None, 3)


def _with_input_pixels(path, value):
    import onnx
    model = onnx.load(path)
    if value is not None:
        model.metadata_props.add(key="input_pixels", value=value)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("recorded, flag, fed", [("normalized", False, "normalized"), (None, False, "raw"),
                                                 (None, True, "normalized"), ("raw", False, "raw")])
def test_a_model_gets_the_pixels_it_records_or_normalized_input_asks_for(recorded, flag, fed, tmp_path, monkeypatch):
    """An ONNX model of a frozen graph exported with --no_normalization records that it takes normalised pixels
    (model/export.py): inference.py normalises the batches for it, and says so; one that records nothing and holds no
    normalisation is fed raw pixels with a note naming --normalized-input; a flag contradicting the record is
    refused."""
    import numpy as np
    import inference
    model = _with_input_pixels(tiny_onnx_classifier(tmp_path / "m.onnx", batch=2), recorded)
    seen = []
    original = inference.ONNXRuntimeRunner.__call__
    monkeypatch.setattr(inference.ONNXRuntimeRunner, "__call__",
                        lambda self, images: seen.append(images) or original(self, images))
    log = str(tmp_path / "log.json")
    result = run("--model", model, "--backend", "onnxruntime", "--batch-size", "2", "--num-iter", "2",
                 "--warmup-steps", "0", "--log-path", log, *(["--normalized-input"] if flag else []))
    assert result.returncode == 0, result.stderr[-2000:]
    raw = np.random.RandomState(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)  # the documented random input
    means, stds = np.float32([123.68, 116.28, 103.53]), np.float32([58.395, 57.120, 57.385])
    np.testing.assert_allclose(seen[0], (raw - means) / stds if fed == "normalized" else raw, rtol=1e-6)
    assert parameter_record(log)["input_pixels"] == fed
    lines = result.stdout.splitlines()
    said = [line for line in lines if line.startswith(("Input:", "Note: --model"))]
    if recorded == "normalized":
        assert said == [f"Input: --model {model} takes normalised pixels, (pixels - mean) / std per RGB channel, "
                        "according to its metadata: inference.py normalises each batch before it is timed"]
    elif recorded is None and not flag:
        assert said == [f"Note: --model {model} does not record what input it takes and holds no input normalisation: "
                        "it is fed raw 0..255 pixels; if it expects normalised ones (the original's frozen graph), "
                        "pass --normalized-input"]
    elif recorded is None:
        assert said == [f"Input: --model {model} records nothing about its input; --normalized-input: fed normalised "
                        "pixels, (pixels - mean) / std per RGB channel"]
    else:
        assert said == []
        result = run("--model", model, "--backend", "onnxruntime", "--batch-size", "2", "--num-iter", "2",
                     "--log-path", log, "--normalized-input")
        assert (result.returncode, result.stderr.strip()) == (
            2, f"ERROR: --normalized-input but --model {model} takes raw 0..255 RGB pixels (normalised in the model), "
               "according to its metadata: omit --normalized-input")


def test_normalized_input_applies_to_an_onnx_model_only(saved_model, capsys):
    import inference
    with pytest.raises(SystemExit):
        inference.parse_args(["--model", saved_model, "--normalized-input"])
    assert "--normalized-input applies to an ONNX --model only" in capsys.readouterr().err


def test_a_pass_over_records_with_a_corrupt_one_scores_each_image_once_and_says_how_many(tmp_path):
    """inference.py --data-dir reads the validation records once, as main.py's evaluation: a corrupt record leaves its
    batch short instead of the stream wrapping around to score images twice; the line says what was scored, and the
    last partial batch dropped."""
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 6, 32, corrupt={(0, 2): "bad_jpeg"})
    log = tmp_path / "log.json"
    result = run("--model", tiny_onnx_classifier(tmp_path / "m.onnx", batch=2), "--backend", "onnxruntime",
                 "--batch-size", "2", "--warmup-steps", "0", "--data-dir", str(data), "--log-path", str(log))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Evaluated 4 of 6 images (1 skipped as corrupt, see the warnings above; the last partial batch of 1 is " \
           "dropped, as the original)" in result.stdout.splitlines()
    assert "Evaluation preprocessing (tf.data): shorter side resized to 36, central 32x32 crop" in \
        result.stdout.splitlines()
    clean = tmp_path / "clean"
    write_tfrecord_shards(str(clean), "validation", 1, 7, 32)
    result = run("--model", tiny_onnx_classifier(tmp_path / "m.onnx", batch=2), "--backend", "onnxruntime",
                 "--batch-size", "2", "--warmup-steps", "0", "--data-dir", str(clean), "--log-path", str(log))
    assert "Evaluated 6 of 7 images (the last partial batch of 1 is dropped, as the original)" in \
        result.stdout.splitlines()


def test_the_periodic_and_final_throughput_count_the_same_time_the_models(monkeypatch):
    """Both figures are images / the model's time: an input that takes 100x as long as the model (a fake clock) does
    not enter either, so the per-100-step line and the final one agree."""
    import numpy as np
    import inference
    clock = [0.0]
    monkeypatch.setattr(inference.time, "perf_counter", lambda: clock[0])

    def data():
        for _ in range(201):
            clock[0] += 1.0  # the input's time
            yield np.zeros((4, 32, 32, 3), np.float32), None

    def model(images):
        clock[0] += 0.01  # the model's time
        return np.zeros((4, 11), np.float32)

    logger = RecordingLogger()
    results = inference.benchmark(model, data(), 201, 4, 1, logger)
    periodic = [data["throughput"] for step, data in (entry for entry in logger.logged if isinstance(entry, tuple))
                if step != ()]
    assert periodic == pytest.approx([400.0, 400.0]) and results["throughput"] == pytest.approx(400.0)


def test_non_finite_outputs_are_said_and_count_as_misses():
    """A diverged model's NaN outputs: the accuracy counts them as misses and a line says so, as main.py's
    evaluation does (until 2026-12-05 inference.py reported `accuracy : 0.0` and nothing else)."""
    import numpy as np

    import inference

    def model(images):
        outputs = np.eye(4, 5, dtype=np.float32)  # image i -> class i
        outputs[3, 0] = np.nan
        outputs[0, 0] = np.nan  # argmax takes the NaN, which is its label's index: a miss all the same
        return outputs

    labels = np.arange(4)
    logger = RecordingLogger()
    results = inference.benchmark(model, [(np.zeros((4, 8, 8, 3), np.float32), labels)] * 2, 2, 4, 0, logger)
    assert results["accuracy"] == pytest.approx(4 / 8)
    assert results["accuracy_top5"] == pytest.approx(4 / 8)  # 5 classes: every finite row's label is in its top 5
    assert ("Note: accuracy_top5 is 1.0 whatever the model predicts: it has 5 outputs, all of them in its top 5; top-1 "
            "is the figure that tells") in logger.logged
    assert "WARNING: 4 of 8 evaluated images got non-finite outputs and count as misses: the model is not usable as " \
           "it stands (trained for only a few steps, its BN moving statistics not settled, or its training " \
           "diverged)" in logger.logged


def test_a_given_model_is_described_by_what_its_export_recorded(tmp_path):
    """A SavedModel records its architecture, classes, size, the checkpoint and weights it came from and the
    divergence its training was seen in (model/export.save_saved_model); inference.py says it for the SavedModel and
    for its ONNX conversion, which carries the record as metadata."""
    from model import export, resnet
    model = resnet.build_model("resnet50", num_classes=11, image_size=32, purpose="inference")
    saved = export.save_saved_model(model, 32, str(tmp_path / "export"), {
        "arch": "resnet50", "num_classes": 11, "checkpoint": "/runs/a/model.ckpt-7", "step": 7, "weights": "ema",
        "diverged": {"step": 5, "sign": "the weights' L2 term jumped from 2.25 to 900 in one step"}})
    onnx_path = str(tmp_path / "m.onnx")
    assert tool_in_process("export_onnx", "--input", saved, "--output", onnx_path, check=False).returncode == 0
    for model_path, backend in ((saved, "tf"), (onnx_path, "onnxruntime")):
        result = run("--model", model_path, "--backend", backend, "--num-iter", "2", "--log-path",
                     str(tmp_path / "log.json"), *SMALL)
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"Model: {model_path}: resnet50, 11 classes, 32x32, the EMA weights of checkpoint /runs/a/model.ckpt-7 " \
               "(step 7)" in result.stdout.splitlines()
        assert f"WARNING: --model {model_path} comes from a training that diverged at step 5 (the weights' L2 term " \
               "jumped from 2.25 to 900 in one step) and had not recovered: its outputs are not to be trusted, " \
               "however confident they look; train it again with a lower --lr_init or a larger --batch_size" \
            in result.stdout.splitlines()
    # A SavedModel without the record (an earlier export, or not ours) is said to have none, not passed over.
    os.remove(os.path.join(saved, export.SOURCE_FILE))
    result = run("--model", saved, "--num-iter", "2", "--log-path", str(tmp_path / "log.json"), *SMALL)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [line for line in result.stdout.splitlines() if line.startswith("Model:")] == [
        f"Model: {saved}: it records no architecture or checkpoint (an export, or a frozen graph's conversion, of a "
        "version before 2026-12-05, or not ours); its input size and classes are read from its graph (32x32 input, "
        "11 classes)"]


def test_a_record_that_contradicts_its_models_graph_is_refused_by_inference_and_its_onnx_conversion(tmp_path):
    """Another model's source.json beside a SavedModel (40 px, 1001 classes, 4 steps, for a 32 px 11-class graph):
    its checkpoint, step and class names are not this model's. inference.py says so in one WARNING naming the file
    and the fields, describes the model from its graph (no false few-steps warning) and logs no record;
    export_onnx.py does not carry it into the ONNX metadata."""
    from model import export, resnet
    model = resnet.build_model("resnet50", num_classes=11, image_size=32, purpose="inference")
    saved = export.save_saved_model(model, 32, str(tmp_path / "export"))
    record = os.path.join(saved, export.SOURCE_FILE)
    os.makedirs(os.path.dirname(record))
    with open(record, "w", encoding="utf-8") as handle:
        json.dump({"arch": "resnext101-32x4d", "num_classes": 1001, "image_size": 40, "checkpoint": "/o/model.ckpt-4",
                   "step": 4, "weights": "raw", "class_names": list("abcdefghijklm")}, handle)
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "validation", 1, 4, num_classes=11, image_size=32)
    log_path = str(tmp_path / "log.json")
    result = run("--model", saved, "--data-dir", str(data), "--batch-size", "2", "--warmup-steps", "0",
                 "--log-path", log_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert f"WARNING: {record} is not this model's record: its arch 'resnext101-32x4d' (the graph's: resnet50), " \
           "image_size 40 (the graph's: 32), num_classes 1001 (the graph's: 11), class_names (13 names for 11 " \
           "outputs) contradict the model's graph; it is ignored (another model's, copied beside it?): the model is " \
           "described from its graph alone" in lines
    assert [line for line in lines if line.startswith("Model:")] == [
        f"Model: {saved}: its record is refused (above): its architecture and checkpoint are unknown; its input size "
        "and classes are read from its graph (32x32 input, 11 classes)"]
    assert "model.ckpt-4" not in result.stdout and "trained 4 step" not in result.stdout
    parameters = parameter_record(log_path)
    assert parameters["model_source"] is None and parameters["model_path"] == os.path.abspath(saved)
    onnx_path = str(tmp_path / "m.onnx")
    converted = tool_in_process("export_onnx", "--input", saved, "--output", onnx_path, check=False)
    assert converted.returncode == 0, converted.stderr[-2000:]
    assert converted.stdout.splitlines()[0] == (
        f"WARNING: {record} is not this model's record: its arch 'resnext101-32x4d' (the graph's: resnet50), "
        "image_size 40 (the graph's: 32), num_classes 1001 (the graph's: 11), class_names (13 names for 11 outputs) "
        "contradict the model's graph; it is ignored (another model's, copied beside it?): it is not carried into "
        "the ONNX model's metadata, which records no architecture or checkpoint")
    import onnx
    assert export.onnx_source(onnx.load(onnx_path)) is None


def test_the_parameter_record_says_what_model_was_loaded_from_where(saved_model, tmp_path, monkeypatch):
    """The PARAMETER record holds the model's absolute path, the working directory --model was relative to, the
    Model line and the fields of the export's record (its class names as their count)."""
    import shutil
    from model import export
    saved_model = shutil.copytree(saved_model, str(tmp_path / "models" / "sm"))
    os.makedirs(os.path.join(saved_model, os.path.dirname(export.SOURCE_FILE)), exist_ok=True)
    with open(os.path.join(saved_model, export.SOURCE_FILE), "w", encoding="utf-8") as handle:
        json.dump({"arch": "resnet50", "num_classes": 11, "image_size": 32, "checkpoint": "/r/model.ckpt-900",
                   "step": 900, "weights": "ema", "class_names": [str(i) for i in range(11)]}, handle)
    monkeypatch.chdir(os.path.dirname(saved_model))
    log_path = str(tmp_path / "log.json")
    result = run("--model", os.path.basename(saved_model), "--num-iter", "1", "--log-path", log_path, *SMALL[4:])
    assert result.returncode == 0, result.stderr[-2000:]
    parameters = parameter_record(log_path)
    assert parameters["model"] == os.path.basename(saved_model)
    assert parameters["model_path"] == saved_model and parameters["working_directory"] == os.getcwd()
    assert parameters["model_description"].startswith(f"Model: {os.path.basename(saved_model)}: resnet50, 11 classes")
    assert parameters["model_source"] == {"arch": "resnet50", "num_classes": 11, "image_size": 32,
                                          "checkpoint": "/r/model.ckpt-900", "step": 900, "weights": "ema",
                                          "class_names": 11}



def test_the_devices_of_each_backend_are_named_for_the_log():
    """inference.run_devices: ONNX Runtime's first provider (the CUDA one is GPU:0), TensorRT's GPU, TensorFlow's
    first visible GPU or the CPU."""
    import types
    import inference
    args = types.SimpleNamespace(backend="onnxruntime")
    assert inference.run_devices(args, types.SimpleNamespace(providers=["CUDAExecutionProvider",
                                                                        "CPUExecutionProvider"])) == [
        "GPU:0 (CUDAExecutionProvider)"]
    assert inference.run_devices(types.SimpleNamespace(backend="tensorrt"), object()) == ["GPU:0 (TensorRT)"]
    assert inference.run_devices(types.SimpleNamespace(backend="tf"), object()) == ["CPU"]  # no GPU here


def test_a_log_path_in_a_directory_a_training_holds_is_refused_and_its_log_left_alone(tmp_path):
    """Until 2026-12-06 inference.py took no lock: its records went between a training's steps in that training's
    log.json, and plot_log then dropped the training's later steps without a word."""
    import socket
    from utils.run_lock import RunLock
    log = tmp_path / "model" / "log.json"
    with RunLock(str(tmp_path / "model"), argv=["main.py", "--mode", "train"]):  # a training's model_dir and log
        log.write_text("DLLL {}\n")
        result = run("--architecture", "resnet50", "--num-iter", "2", *SMALL, "--log-path", str(log))
        assert result.returncode == 2
        assert result.stderr.strip().startswith(
            f"ERROR: the directory of --log-path {tmp_path / 'model'} is in use by another run (pid {os.getpid()} "
            f"on host {socket.gethostname()}, started ")
        # (what is locked is the directory, whatever the log file's name: said, with how to go on; 2026-12-07)
        assert result.stderr.strip().endswith("; wait for it to end or give --log-path a file in another directory "
                                              "(one run at a time logs into a directory, as into main.py's "
                                              "--results_dir)")
        assert log.read_text() == "DLLL {}\n"


def test_to_predict_refuses_a_second_input_and_random_weights_in_one_line(saved_model, tmp_path, capsys):
    import inference
    for extra, message in ((["--model", saved_model, "--data-dir", str(tmp_path)],
                            "--to-predict and --data-dir are two inputs: give one"),
                           (["--architecture", "resnet50"], "--to-predict needs a trained --model")):
        with pytest.raises(SystemExit) as exit_:
            inference.parse_args(["--to-predict", str(tmp_path), *extra])
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err
    result = run("--model", saved_model, "--to-predict", str(tmp_path / "absent"), "--log-path",
                 str(tmp_path / "log.json"))
    assert (result.returncode, result.stderr.strip()) == (2, f"ERROR: --to-predict {tmp_path / 'absent'} does not "
                                                             "exist")


def test_to_predict_through_a_fixed_batch_model_pads_the_last_batch_and_logs_the_counts(tmp_path):
    """Three photos through an ONNX model of batch 2 only: the third goes in padded with a zero image, and gets the
    probabilities it gets alone (the model: softmax of the mean colour times its weights, computed here by NumPy);
    unused benchmark flags are said; the log ends with the counts; every file was used: exit status 0."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from PIL import Image
    from utils import data_utils
    model = tiny_onnx_classifier(tmp_path / "b2.onnx", batch=2)
    weights = numpy_helper.to_array(onnx.load(model).graph.initializer[0])
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(5)
    for name in ("a.jpg", "b.png", "c.png"):
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(photos / name)
    log = str(tmp_path / "log.json")
    # --batch-size not given: the model's fixed batch is taken, and said
    result = run("--model", model, "--backend", "onnxruntime", "--to-predict", str(photos), "--num-iter", "5",
                 "--log-path", log)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Batch size 2, read from the model (it takes batches of 2 only)" in result.stdout.splitlines()
    assert result.stdout.strip().splitlines()[-1] == "predicted 3, failed 0"  # the log's record is not echoed
    assert "Note: --num-iter is not used: --to-predict predicts each file once, untimed" in result.stdout
    assert "Class names: none (--model {} records none): the classes are shown by their output index".format(
        model) in result.stdout.splitlines()
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in result.stdout.splitlines()
             if line.startswith(str(photos))}
    assert sorted(lines) == [str(photos / name) for name in ("a.jpg", "b.png", "c.png")]
    for path, line in lines.items():
        logits = data_utils.load_inference_image(path, 32, 32).mean(axis=(0, 1)) @ weights
        expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        top = np.argsort(-expected, kind="stable")[:5]
        assert line == ", ".join("{} {:.4f}".format(index, expected[index]) for index in top)
    assert final_record(log) == {"predicted": 3, "failed": 0}
    record = parameter_record(log)
    assert (record["files"], record["to_predict_path"], record["num_iter"], record["batch_size"]) == (
        3, str(photos), None, 2)


def test_top_k_hits_count_as_main_pys_evaluation_counts_ties_included():
    """inference.py's top-1 and top-5 against tf.math.in_top_k, which main.py's evaluation uses, on rows with ties
    at the k-th value (a tied class is in) and on random rows."""
    import numpy as np
    import tensorflow as tf

    import inference
    rng = np.random.default_rng(0)
    rows = np.round(rng.uniform(size=(200, 11)), 1).astype(np.float32)  # many ties
    rows[0] = [0.5] * 11  # all tied: in the top 1 and the top 5
    labels = rng.integers(0, 11, 200)
    for k in (1, 5):
        expected = tf.math.in_top_k(tf.constant(labels, tf.int32), tf.constant(rows), k).numpy()
        assert inference.top_k_hits(rows, labels, k).tolist() == expected.tolist()
    assert inference.top_k_hits(rows[:1], labels[:1], 1).tolist() == [True]
