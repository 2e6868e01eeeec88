"""The benchmark scripts run end to end (tiny sizes; the numbers themselves are for docs/BENCHMARKS.md only)."""
import json
import os
import sys

import pytest

from bench import common

pytestmark = pytest.mark.shallow


@pytest.mark.slow
def test_step_data_source_times_main_py_on_synthetic_and_tfrecord_input(tmp_path):
    from bench import step_data_source
    out = tmp_path / "result.json"
    step_data_source.main(["--size", "32", "--batch", "4", "--steps", "2", "--warmup", "1", "--rounds", "1",
                           "--records", "24", "--json", str(out)])
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"synthetic", "tfrecord"}
    assert all(len(values) == 1 and values[0] > 0 for values in result["runs"].values())
    medians = result["median_img_per_s"]
    assert result["tfrecord_vs_synthetic"] == pytest.approx(medians["tfrecord"] / medians["synthetic"])


def test_read_throughput_takes_the_closing_summary(tmp_path):
    from bench.step_data_source import read_throughput
    log = tmp_path / "log.json"
    lines = [{"type": "LOG", "step": [0, 5], "data": {"total_ips": 3.0}},
             {"type": "LOG", "step": [], "data": {"train_throughput": 9.0, "train_throughput_total": 8.5}}]
    log.write_text("".join("DLLL " + json.dumps(line) + "\n" for line in lines))
    assert read_throughput(str(log)) == 8.5
    log.write_text("DLLL " + json.dumps(lines[0]) + "\n")
    with pytest.raises(RuntimeError, match="train_throughput_total"):
        read_throughput(str(log))


def test_conv_gradients_alternatives_agree_with_tf_at_model_shapes(tmp_path):
    from bench import conv_gradients
    out = tmp_path / "conv.json"
    conv_gradients.main(["--batch", "1", "--repeats", "1", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [row["shape"] for row in rows] == [shape[0] for shape in conv_gradients.SHAPES]
    for row in rows:
        assert row["kernel_grad_patches_max_rel_diff"] < 1e-5
        assert ("input_grad_rotated_conv_max_rel_diff" in row) == row["shape"].endswith("s1")
        assert row.get("input_grad_rotated_conv_max_rel_diff", 0.0) < 1e-5
        assert all(row[key] > 0 for key in row if key.endswith("_ms"))


def test_small_map_ops_alternatives_agree_with_the_model_formulations(tmp_path):
    from bench import small_map_ops
    out = tmp_path / "ops.json"
    small_map_ops.main(["--batch", "1", "--repeats", "1", "--json", str(out)])
    tables = json.loads(out.read_text())
    assert [row["shape"] for row in tables["matmul"]] == [shape[0] for shape in small_map_ops.MATMULS]
    assert len(tables["input_grad"]) == len(small_map_ops.INPUT_GRADS)
    # the model's choice: from 128 x 128 channels (every such shape at 40 px is a patches conv) the patch gradients
    # folded back, but the rotated conv at 5x5 stride 1; Conv2DBackpropInput below
    assert [row["model"] for row in tables["input_grad"]] == [
        "backprop_input" if ci * co < 128 * 128 else "rotated_conv" if (size, stride) == (5, 1) else "segment_fold"
        for size, ci, co, stride in small_map_ops.INPUT_GRADS]
    # at batch 1 every 1x1 product has at most 256 rows: its input gradient computed the other way round
    assert [row["model"] for row in tables["matmul"]] == ["conv" if "patches" in row["shape"] else "other_way"
                                                          for row in tables["matmul"]]
    assert len(tables["strided_sample"]) == len(small_map_ops.STRIDED_SAMPLES)
    for row in tables["input_grad"] + tables["strided_sample"]:
        diffs = [row[key] for key in row if key.endswith("_max_rel_diff")]
        assert diffs and max(diffs) < 1e-5
    for row in tables["strided_sample"]:
        assert row["avg_pool_1x1_max_rel_diff"] == 0.0  # the same elements, not an approximation
    tail = tables["update_tail"][0]  # (the test session builds shallow models: fewer than 161 variables)
    assert 0 < tail["decayed"] < tail["variables"] and tail["graph_ms"] > 0 and tail["xla_ms"] > 0
    for row in tables["matmul"]:
        # the rate is printed to 0.1 GFLOP/s: at batch 1 (a few GFLOP/s) that rounding alone is over 1%
        assert row["forward_gflop_s"] == pytest.approx(2 * row["m"] * row["k"] * row["n"] / row["forward_ms"] / 1e6,
                                                       rel=0.01, abs=0.051)


def test_small_map_ops_at_224_times_the_matmuls_and_the_patches_input_gradients_at_the_224_shapes(tmp_path):
    from bench import small_map_ops
    out = tmp_path / "ops224.json"
    small_map_ops.main(["--size", "224", "--batch", "1", "--repeats", "1", "--json", str(out)])
    tables = json.loads(out.read_text())
    assert tables["size"] == 224 and set(tables) & {"strided_sample", "update_tail"} == set()
    # the 224 px step's patches convs: 14x14 -> 7x7 stride 2 the patch gradients folded back, 7x7 the rotated conv;
    # its stride-1 native convs: the rotated conv from 128 x 128 channels (14x14, 28x28), not at 56x56 (64)
    assert [row["model"] for row in tables["input_grad"]] == ["segment_fold", "rotated_conv", "rotated_conv",
                                                             "rotated_conv", "backprop_input"]
    assert max(row["rotated_conv_max_rel_diff"] for row in tables["input_grad"]) < 1e-5
    assert max(row[f"segment_fold{way}_max_rel_diff"] for row in tables["input_grad"][:2]
               for way in ("", "_flipped")) < 1e-5
    assert [(row["m"], row["k"], row["n"]) for row in tables["matmul"]] == [
        (positions, k, n) for _, positions, k, n in small_map_ops.MATMULS_224]
    # rows per image are the map's positions at 224 px: 56x56 down to 7x7
    assert {row["m"] for row in tables["matmul"]} == {56 * 56, 28 * 28, 14 * 14, 7 * 7}

@pytest.mark.slow
def test_inference_benchmark_times_every_serving_form(tmp_path):
    """Each form is built from the same export (the tflite one checks its probabilities against the SavedModel's
    and stops if they differ) and timed at each batch size."""
    from bench import inference
    out = tmp_path / "inference.json"
    variants = ["ours", "savedmodel", "frozen", "onnx", "tflite"]
    assert inference.main(["--variants", ",".join(variants), "--batches", "1,2", "--size", "32", "--warmup", "0",
                           "--rounds", "1", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert set(results) == {f"{name}_b{batch}" for name in variants for batch in (1, 2)}
    assert all(row["ms_per_batch"] > 0 and row["batch"] in (1, 2) and row["page_faults_per_batch"] >= 0
               for row in results.values())
    # the model's rate at any size: its multiply-adds at 32 px over the time (before, only at 224 px)
    assert all(row["model_gflop_per_s"] == pytest.approx(common.forward_gflop("resnet50", 32) * row["img_per_s"],
                                                         rel=0.01, abs=0.1)
               for row in results.values())


def test_train_step_reports_the_rate_of_the_models_training_flops(tmp_path):
    from bench import train_step
    out = tmp_path / "train_step.json"
    assert train_step.main(["--variants", "ours", "--size", "32", "--batch", "2", "--warmup", "0", "--rounds", "1",
                            "--no_ceiling", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["results"]["ours"]
    assert row["s_per_step"] > 0 and row["img_per_s"] == pytest.approx(2 / row["s_per_step"], rel=0.05)
    assert row["model_gflop_per_s"] == pytest.approx(3 * common.forward_gflop("resnet50", 32) * row["img_per_s"],
                                                     rel=0.01, abs=0.1)


def test_model_build_times_each_architecture_and_purpose(tmp_path):
    from bench import model_build
    out = tmp_path / "build.json"
    assert model_build.main(["--archs", "resnet50", "--purposes", "train,inference", "--size", "32", "--repeats", "1",
                             "--json", str(out)]) == 0
    from model.resnet import build_model
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"resnet50_train", "resnet50_inference"}
    variables = len(build_model("resnet50", image_size=32).variables)  # (the suite's ResNet-50: tests/_shallow.py)
    assert all(row["seconds"] > 0 and row["variables"] == variables for row in results.values()), results


def test_interleaved_counts_each_runs_page_faults():
    """bench/common.interleaved's fault counts: a run that maps 64 MB afresh and writes it faults once per page (or
    per 2 MB huge page); a run that touches nothing new, ~never."""
    import mmap

    import numpy as np
    from bench import common

    def fresh():
        mapped = mmap.mmap(-1, 64 * 1024 * 1024)
        np.frombuffer(mapped, np.uint8)[:] = 1
        mapped.close()

    faults = {}
    times = common.interleaved({"fresh": fresh, "none": lambda: None}, rounds=3, warmup=1, log=lambda text: None,
                               faults=faults)
    assert {name: len(values) for name, values in times.items()} == {"fresh": 3, "none": 3}
    assert min(faults["fresh"]) >= 32 and max(faults["none"]) < 16, faults


def test_a_benchmark_process_is_told_from_an_importer_by_its_command_line():
    import bench
    assert bench.started_as_a_benchmark([".venv/bin/python", "-m", "bench.matmul_ceiling", "--sizes", "64"])
    assert bench.started_as_a_benchmark(["python3", "-X", "importtime", "-m", "bench.train_step"])
    assert not bench.started_as_a_benchmark(["python", "-m", "pytest", "tests/test_bench_scripts.py"])
    assert not bench.started_as_a_benchmark(["python", "-c", "import bench.common"])
    assert not bench.started_as_a_benchmark(["python", "main.py", "-m", "x"])
    assert not bench.started_as_a_benchmark(sys.orig_argv)  # this test's own process imported bench


def test_a_benchmark_run_as_a_module_pools_its_memory_and_drops_tensorflows_start_up_lines():
    """Every bench/ module, also one that never imports bench/common.py at its top (matmul_ceiling), starts as
    main.py does: the pool on, and no `absl::InitializeLog` or CUDA-probe lines on stderr (this machine has no GPU);
    its result on stdout as before."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environ = {name: value for name, value in os.environ.items()
               if name not in ("TF_CPP_MIN_LOG_LEVEL", "RN50_VERBOSE", "TF_CPU_ALLOCATOR_USE_BFC")}
    done = subprocess.run([sys.executable, "-m", "bench.matmul_ceiling", "--sizes", "64", "--repeats", "1"],
                          cwd=root, env=environ, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "64" in result["float32"] and result["machine"]["cpu_allocator"] == "pooled (BFC)"
    assert "absl::InitializeLog" not in done.stderr and "cuda" not in done.stderr.lower(), done.stderr


def test_machine_record_names_the_variables_set_and_the_code(monkeypatch):
    """A result's `machine` lists the set variables a run's PARAMETER record lists (a benchmark run under
    TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 or TF_NUM_INTEROP_THREADS=1 says so), none of another program's TF_* ones, and
    the code's commit."""
    from bench import common
    from runtime import startup
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "1")
    monkeypatch.setenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "1")
    monkeypatch.setenv("TF_TOKEN_app_example_com", "not for a log")
    machine = common.machine_info()
    assert machine["variables"]["TF_NUM_INTEROP_THREADS"] == "1"
    assert machine["variables"]["TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"] == "1"
    assert not any(name.startswith("TF_TOKEN") for name in machine["variables"])
    assert machine["code_version"] == startup.code_version()


@pytest.mark.slow
def test_extensions_benchmark_times_the_pipeline_and_every_variant(tmp_path):
    from bench import extensions
    out = tmp_path / "result.json"
    extensions.main(["--size", "32", "--batch", "4", "--steps", "1", "--warmup", "1", "--rounds", "1",
                     "--records", "24", "--pipeline_images", "16", "--step_variants", "original,ema",
                     "--json", str(out)])
    result = json.loads(out.read_text())
    assert set(result["pipeline_median"]) == set(extensions.PIPELINE_VARIANTS)
    assert set(result["step_median"]) == {"original", "ema"}
    assert all(value > 0 for value in list(result["pipeline_median"].values()) + list(result["step_median"].values()))
    assert result["step_vs_original"]["original"] == pytest.approx(1.0)


def test_results_live_under_bench():
    """bench/run_all.sh writes into bench/results/, which holds the raw results docs/BENCHMARKS.md cites; nothing
    refers to their old place under docs/ any more."""
    import os
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results = os.path.join(root, "bench", "results")
    assert os.path.isdir(results) and os.listdir(results)
    assert not os.path.exists(os.path.join(root, "docs", "bench_results"))
    with open(os.path.join(root, "bench", "run_all.sh"), encoding="utf-8") as handle:
        run_all = handle.read()
    assert re.search(r"^OUT=bench/results$", run_all, re.MULTILINE)
    old = "docs/" + "bench_results"  # built from pieces so that this file does not match itself
    stale = []
    for directory in ("bench", "scripts", "tests", "docs"):
        for folder, subdirs, names in os.walk(os.path.join(root, directory)):
            subdirs[:] = [name for name in subdirs if name != "__pycache__"]
            for name in names:
                path = os.path.join(folder, name)
                with open(path, "rb") as handle:
                    if old.encode() in handle.read():
                        stale.append(os.path.relpath(path, root))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as handle:
        if old in handle.read():
            stale.append("README.md")
    assert not stale, "still naming {}: {}".format(old, ", ".join(stale))


def test_fp16_overflow_finds_the_float16_range_of_a_known_gradient():
    """d(scale x CE)/d kernel of a zero-initialised Dense on x = 1000 is scale x 1000 x 0.5: finite in float16
    (max 65504) up to scale 128, infinite from 256."""
    import keras
    import tensorflow as tf
    from bench.fp16_overflow import first_overflow
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((2,)),
                                  keras.layers.Dense(2, use_bias=False, kernel_initializer="zeros")])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    overflow, finite = first_overflow(model, tf.constant([[1000.0, 1000.0]]), tf.constant([0]),
                                      [2 ** power for power in range(12)])
    assert overflow == 256
    assert finite == {1: True, 2: True, 4: True, 8: True, 16: True, 32: True, 64: True, 128: True, 256: False}


def test_fp16_overflow_compares_both_models_end_to_end(tmp_path):
    from bench import fp16_overflow
    out = tmp_path / "fp16.json"
    fp16_overflow.main(["--cases", "32x2", "--max_scale_power", "1", "--output", str(out)])
    result = json.loads(out.read_text())
    assert result["scales"] == [1, 2]
    (row,) = result["results"]
    assert (row["image_size"], row["batch_size"], row["seed"]) == (32, 2, 0)
    for name in ("ours", "keras_applications"):
        assert row[name]["first_nonfinite_scale"] in (None, 1, 2)
        assert "mixed_float16" in row[name]["policies_of_weighted_layers"]


def test_iterator_delete_times_each_variant(tmp_path):
    from bench import iterator_delete
    out = tmp_path / "delete.json"
    iterator_delete.main(["--seconds", "0.3", "--repeats", "1", "--json", str(out)])
    result = json.loads(out.read_text())
    assert set(result["delete_seconds"]) == set(iterator_delete.VARIANTS)
    assert all(len(values) == 1 and values[0] >= 0 for values in result["delete_seconds"].values())
    assert result["over_one_second"] == {name: int(result["max_seconds"][name] > 1.0)
                                         for name in iterator_delete.VARIANTS}


@pytest.mark.parametrize("scenario", ["trace", "load"])
def test_interrupt_tracing_counts_where_the_wrappers_handler_raised(tmp_path, scenario):
    from bench import interrupt_tracing
    out = tmp_path / "interrupts.json"
    interrupt_tracing.main(["--scenario", scenario, "--trials", "2", "--variant", "ours", "--json", str(out)])
    assert json.loads(out.read_text())["outcomes"] == {"ours": {interrupt_tracing.OUTSIDE: 2}}


def test_interrupt_tracing_runs_each_variant_in_its_own_process(tmp_path, monkeypatch):
    import subprocess
    from bench import interrupt_tracing
    runs = []

    def fake_run(command, check, cwd):
        variant, path = command[command.index("--variant") + 1], command[command.index("--json") + 1]
        runs.append(variant)
        with open(path, "w") as handle:
            json.dump({"scenario": "load", "outcomes": {variant: {variant + " outcome": 3}}}, handle)

    monkeypatch.setattr(subprocess, "run", fake_run)
    out = tmp_path / "interrupts.json"
    interrupt_tracing.main(["--scenario", "load", "--trials", "3", "--json", str(out)])
    assert runs == list(interrupt_tracing.VARIANTS)
    assert json.loads(out.read_text())["outcomes"] == {variant: {variant + " outcome": 3}
                                                       for variant in interrupt_tracing.VARIANTS}


def test_revisions_alternates_the_two_checkouts_and_reports_the_pair_ratios(monkeypatch, capsys):
    """bench.revisions checks both revisions out, runs base/head then head/base ..., and reports base/head per pair;
    the worktrees are gone afterwards. The benchmark processes are replaced by fixed times here."""
    import subprocess
    from bench import revisions
    calls = []
    times = {"base": iter([0.40, 0.44, 0.50]), "head": iter([0.20, 0.22, 0.50])}

    def fake_run(tree, module_args, env=None):
        label = os.path.basename(tree)
        assert os.path.isfile(os.path.join(tree, "main.py")) and module_args == ["bench.train_step", "--size", "8"]
        assert env is None
        calls.append(label)
        return {"ours": next(times[label])}

    monkeypatch.setattr(revisions, "_run", fake_run)
    before = subprocess.run(["git", "-C", revisions.ROOT, "worktree", "list"], capture_output=True, text=True).stdout
    assert revisions.main(["--base", "HEAD", "--pairs", "3", "--", "bench.train_step", "--size", "8"]) == 0
    assert calls == ["base", "head", "head", "base", "base", "head"]
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]["ours"]
    assert result["speedup_median_of_pairs"] == 2.0 and result["base_median"] == 0.44
    after = subprocess.run(["git", "-C", revisions.ROOT, "worktree", "list"], capture_output=True, text=True).stdout
    assert after == before


def test_revisions_times_main_py_itself_at_each_revision(monkeypatch, capsys):
    """`-- main.py ARGS`: each process is that checkout's main.py with a fresh --results_dir, timed by its log's
    train_throughput_total (so a revision without today's bench/ modules can be measured too)."""
    import subprocess
    from bench import revisions
    throughputs = {"base": iter([50.0, 40.0]), "head": iter([100.0, 60.0])}
    seen_dirs = []

    real_run = subprocess.run

    def fake_subprocess_run(command, **kwargs):
        if command[:2] != [sys.executable, "main.py"]:
            return real_run(command, **kwargs)  # git
        label = os.path.basename(kwargs["cwd"])
        assert os.path.isfile(os.path.join(kwargs["cwd"], "main.py"))
        assert command[:4] == [sys.executable, "main.py", "--mode", "training_benchmark"]
        assert command[-2] == "--results_dir" and command[-1] not in seen_dirs and os.path.isdir(command[-1])
        seen_dirs.append(command[-1])
        record = {"type": "LOG", "step": [], "data": {"train_throughput_total": next(throughputs[label])}}
        with open(os.path.join(command[-1], "log.json"), "w") as handle:
            handle.write("DLLL " + json.dumps(record) + "\n")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(revisions.subprocess, "run", fake_subprocess_run)
    assert revisions.main(["--base", "HEAD", "--pairs", "2", "--", "main.py", "--mode", "training_benchmark"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]["main.py"]
    assert result["base"] == [1 / 50.0, 1 / 40.0] and result["head"] == [1 / 100.0, 1 / 60.0]
    assert result["pair_speedups"] == [2.0, 1.5] and result["speedup_median_of_pairs"] == 1.75
    assert not any(os.path.exists(path) for path in seen_dirs)  # each run's directory is removed


def test_revisions_sets_the_head_env_in_head_processes_only_and_divides_by_the_control(monkeypatch, capsys):
    """--head_env reaches only the head's processes; with --control every time is divided by the control variant's
    time in its own process first, so a process that ran 2x slower throughout gives a ratio of 1."""
    from bench import revisions
    seen = []
    # base processes: ours 0.6/0.3 of onnx; head processes (the second one 2x slower throughout): ours 0.5 of onnx
    times = {"base": iter([{"ours": 0.60, "onnx": 1.0}, {"ours": 0.30, "onnx": 0.5}]),
             "head": iter([{"ours": 0.50, "onnx": 1.0}, {"ours": 1.00, "onnx": 2.0}])}

    def fake_run(tree, module_args, env=None):
        label = os.path.basename(tree)
        seen.append((label, env))
        return next(times[label])

    monkeypatch.setattr(revisions, "_run", fake_run)
    assert revisions.main(["--base", "HEAD", "--pairs", "2", "--head_env", "FLAG=1", "--head_env", "OTHER=a=b",
                           "--control", "onnx", "--", "bench.inference"]) == 0
    assert seen == [("base", None), ("head", {"FLAG": "1", "OTHER": "a=b"}),
                    ("head", {"FLAG": "1", "OTHER": "a=b"}), ("base", None)]
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["results"]["ours"]["pair_speedups"] == [1.2, 1.2]
    assert report["results"]["ours"]["speedup_median_of_pairs"] == 1.2
    assert report["results"]["onnx"]["speedup_median_of_pairs"] == 1.0
    assert report["results"]["ours"]["head"] == [0.5, 1.0]  # the raw times are kept
    with pytest.raises(SystemExit, match="no such variant"):
        revisions._relative({"ours": 1.0}, "onnx")
    with pytest.raises(SystemExit):
        revisions.main(["--base", "HEAD", "--head_env", "NOEQUALS", "--", "bench.inference"])


@pytest.mark.slow
def test_qat_backends_compares_tensorflow_with_onnx_runtime_both_ways(tmp_path):
    """A random-weight quantised graph at 32 px on 6 images: each comparison's keys and ranges (the figures are
    docs/DEVIATIONS.md's, measured on a trained QAT checkpoint)."""
    import export_frozen_graph
    from bench import qat_backends
    from tests._data_helpers import write_tfrecord_shards
    graph = tmp_path / "qat.pb"
    export_frozen_graph.export(export_frozen_graph.parse_args([
        "--model_name", "resnet50", "--num_classes", "10", "--image_size", "32", "--input_format", "NHWC",
        "--compute_format", "NHWC", "--quantize", "--output_file", str(graph)]), log=lambda *_: None)
    write_tfrecord_shards(str(tmp_path / "data"), "validation", 1, 6, 40, num_classes=10)
    out = tmp_path / "qat.json"
    assert qat_backends.main(["--graph", str(graph), "--data_dir", str(tmp_path / "data"), "--batch_size", "3",
                              "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["images"] == 6 and set(results["top1"]) == {"tf", "tf_scaled", "ort", "ort_unoptimised"}
    for name in ("tf_vs_ort", "tf_vs_ort_unoptimised", "tf_vs_tf_input_scaled_1e-6"):
        row = results[name]
        assert 0 <= row["median_abs_diff"] <= row["p99_abs_diff"] <= row["max_abs_diff"] <= 1
        assert 0 <= row["top1_agreement"] <= 1


def _narrow_graph(tmp_path, monkeypatch, *flags):
    """A random-weight, narrow ResNet-50 (7 classes, 32 px) frozen as export_frozen_graph.py writes it; with
    `flags`, e.g. --input_format NCHW --no_normalization."""
    import export_frozen_graph
    from model import resnet
    monkeypatch.setitem(resnet.ARCHITECTURES, "resnet50", resnet.ArchSpec(
        layers=(1, 1, 1, 1), widths=(8, 16, 32, 64), expansions=4, cardinality=1, use_se=False))
    graph = tmp_path / "graph.pb"
    export_frozen_graph.export(export_frozen_graph.parse_args([
        "--model_name", "resnet50", "--num_classes", "7", "--image_size", "32", "--compute_format", "NHWC",
        "--output_file", str(graph), *flags]), log=lambda *_: None)
    return graph


def _validation_images(data_dir, num_classes):
    """The validation images (raw 0..255 NHWC, the eval pipeline's) and labels of `data_dir`, at 32 px."""
    import numpy as np
    from runtime import runner_utils
    from utils import data_utils
    filenames = runner_utils.list_filenames_in_dataset(str(data_dir), "validation")
    batches = list(data_utils.get_tfrecords_input_fn(filenames, 3, 32, 32, training=False, num_threads=1,
                                                     deterministic=True, num_classes=num_classes, num_epochs=1))
    return (np.concatenate([images.numpy() for images, _ in batches]),
            np.concatenate([labels.numpy() for _, labels in batches]))


def _run_nchw_graph(graph_def, images):
    """The graph's probabilities on NCHW `images`, imported here directly."""
    import tensorflow as tf
    function = tf.compat.v1.wrap_function(
        lambda x: tf.graph_util.import_graph_def(graph_def, input_map={"input:0": x},
                                                 return_elements=["resnet50/output/softmax:0"])[0],
        [tf.TensorSpec([None, 3, 32, 32], tf.float32)])
    return function(tf.constant(images)).numpy()


def test_qat_backends_and_qat_accuracy_feed_a_graph_what_it_records_it_takes(tmp_path, monkeypatch):
    """export_frozen_graph.py's default NCHW input with --no_normalization: both benches feed the graph normalised
    pixels in NCHW and read its 7 classes, as a direct run of the graph on input prepared by hand."""
    import numpy as np
    from bench import qat_accuracy, qat_backends
    from model import export
    from tests._data_helpers import write_tfrecord_shards
    graph = _narrow_graph(tmp_path, monkeypatch, "--input_format", "NCHW", "--no_normalization")
    write_tfrecord_shards(str(tmp_path / "data"), "validation", 1, 6, 40, num_classes=7)
    images, labels = _validation_images(tmp_path / "data", 7)
    normalised = (images - np.float32([123.68, 116.28, 103.53])) / np.float32([58.395, 57.120, 57.385])
    graph_def = export.load_graph_def(str(graph))
    expected = _run_nchw_graph(graph_def, normalised.transpose(0, 3, 1, 2))
    # Raw pixels would give other probabilities: the comparison below can tell the two feeds apart.
    assert np.abs(_run_nchw_graph(graph_def, images.transpose(0, 3, 1, 2)) - expected).max() > 1e-3
    frozen, outputs, read_labels = qat_backends.probabilities(str(graph), str(tmp_path / "data"), 3)
    assert (frozen.layout, frozen.input_pixels, frozen.image_size, frozen.num_classes) == (
        "NCHW", "normalized", 32, 7)
    np.testing.assert_array_equal(read_labels, labels)
    for name in ("tf", "ort", "ort_unoptimised"):
        np.testing.assert_allclose(outputs[name], expected, atol=1e-5, err_msg=name)
    # A batch that does not divide the 6 images, or holds more than all of them: every image once (a split smaller
    # than --batch_size compared nothing and ended in a traceback).
    for batch_size in (4, 8):
        _, outputs, read_labels = qat_backends.probabilities(str(graph), str(tmp_path / "data"), batch_size)
        np.testing.assert_array_equal(read_labels, labels)
        np.testing.assert_allclose(outputs["tf"], expected, atol=1e-5)
    assert qat_accuracy.frozen_graph_accuracy(str(graph), str(tmp_path / "data"), batch_size=4) == \
        pytest.approx(np.mean(expected.argmax(1) == labels))


def test_qat_backends_refuses_a_graph_that_does_not_say_what_pixels_it_takes(tmp_path, monkeypatch, capsys):
    """Without its input_pixels marker (the original's graph, an earlier export's) a graph may take raw or
    normalised pixels: one line, no guess."""
    from bench import qat_backends
    from model import export
    from tests._data_helpers import write_tfrecord_shards
    graph = _narrow_graph(tmp_path, monkeypatch, "--input_format", "NHWC")
    graph_def = export.load_graph_def(str(graph))
    kept = [node for node in graph_def.node if node.name != export.INPUT_PIXELS]
    del graph_def.node[:]
    graph_def.node.extend(kept)
    export.write_graph_def(graph_def, str(graph), as_text=False)
    write_tfrecord_shards(str(tmp_path / "data"), "validation", 1, 3, 40, num_classes=7)
    assert qat_backends.main(["--graph", str(graph), "--data_dir", str(tmp_path / "data"),
                              "--batch_size", "3"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (f"ERROR: {graph} does not record whether it takes raw or normalised pixels (the original's "
                     "graph, or an earlier export's): export it again with export_frozen_graph.py")


def test_the_frozen_graph_runner_refuses_a_record_that_contradicts_its_graph(tmp_path, capsys):
    """bench/common.FrozenGraph takes its input size and classes from the graph: an export_source record of
    another model (40 px, 1001 classes for an 8 px 3-class graph) is refused in one WARNING, not believed."""
    import json
    import tensorflow as tf
    from bench.common import FrozenGraph
    from model import export
    graph = tf.Graph()
    with graph.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="input")
        tf.nn.softmax(tf.reduce_mean(images, axis=[1, 2]), name="probabilities")
    graph_def = graph.as_graph_def()
    export._add_marker(graph_def, export.INPUT_PIXELS, export.RAW)
    export._add_marker(graph_def, export.SOURCE_NODE, json.dumps({"arch": "resnet50", "num_classes": 1001,
                                                                  "image_size": 40, "step": 4}))
    path = tmp_path / "g.pb"
    path.write_bytes(graph_def.SerializeToString())
    frozen = FrozenGraph(str(path))
    assert (frozen.image_size, frozen.num_classes, frozen.source) == (8, 3, {})
    assert capsys.readouterr().out.splitlines() == [
        f"WARNING: {path}'s node export_source is not this model's record: its image_size 40 (the graph's: 8) "
        "contradicts the model's graph; it is ignored (another model's, copied beside it?): the model is described "
        "from its graph alone"]
