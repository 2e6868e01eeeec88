"""utils/quiet.py: TensorFlow's start-up noise is dropped from stderr, everything else passes unchanged and in
order; `--verbose` / RN50_VERBOSE=1 bring TF's lines back. Unit tests of the filter, then CLI runs of main.py."""

import os
import threading
import time

import pytest

from tests._cli import run_script
from utils import quiet

pytestmark = pytest.mark.shallow


# Seen on every CPU run of TF 2.21 (the NodeDef line on multi-worker runs).
NOISE = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    b"I0000 00:00:1796118512.495390    5795 port.cc:153] oneDNN custom operations are on. You may see slightly "
    b"different numerical results due to floating-point round-off errors.\n",
    b"I0000 00:00:1796118512.495695    5795 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
    b"will not be used.\n",
    b"E0000 00:00:1796118514.763516    5795 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    b"Failed call to cuInit: UNKNOWN ERROR (303)\n",
    b"E0000 00:00:1796119011.831781    9109 node_def_util.cc:682] NodeDef mentions attribute "
    b"use_unbounded_threadpool which is not in the op definition: Op<name=MapDataset; ...>\n",
]
GPU_LINES = NOISE[2:4]
# What must always come through: our warnings and errors, TF's Python warnings, tracebacks, real C++ errors.
KEPT = [
    b"WARNING: skipped corrupt record(s) [3] of [b'train-00000-of-00001'] - unreadable stream data\n",
    b"WARNING:tensorflow:Value in checkpoint could not be found in the restored object\n",
    b"ERROR: --batch_size must be a positive integer (got 0)\n",
    b"Traceback (most recent call last):\n",
    b'  File "main.py", line 1, in <module>\n',
    b"RuntimeError: boom\n",
    b"E0000 00:00:1796118514.763516    5795 cuda_executor.cc:100] a real CUDA error\n",
    b"F0000 00:00:1796118514.763516    5795 some_op.cc:12] Check failed: x == y\n",
]


def test_known_noise_is_dropped_and_real_lines_are_not():
    patterns = quiet.noise_patterns(no_gpu=True)
    for line in NOISE:
        assert quiet.is_noise(line, patterns, 2), line
    for line in KEPT:
        assert not quiet.is_noise(line, patterns, 2), line
        assert not quiet.is_noise(line, patterns, 3), line  # E/F lines are never dropped by level alone


def test_gpu_probe_lines_are_kept_on_a_machine_with_a_gpu():
    patterns = quiet.noise_patterns(no_gpu=False)
    for line in GPU_LINES:
        assert not quiet.is_noise(line, patterns, 0), line
    assert not quiet.is_noise(GPU_LINES[1], patterns, 2)  # the cuInit ERROR; cudart_stub's is an INFO line
    assert quiet.gpu_absent({"CUDA_VISIBLE_DEVICES": ""}) and quiet.gpu_absent({"CUDA_VISIBLE_DEVICES": "-1"})


def test_cpp_info_and_warning_lines_follow_tf_cpp_min_log_level():
    patterns = quiet.noise_patterns(no_gpu=True)
    info = b"I0000 00:00:1796118754.879902    8045 devices.cc:67] Number of eligible GPUs: 0\n"
    warning = b"W0000 00:00:1796118754.879902    8045 some_kernel.cc:67] a C++ warning\n"
    assert quiet.is_noise(info, patterns, 1) and quiet.is_noise(warning, patterns, 2)
    assert not quiet.is_noise(info, patterns, 0) and not quiet.is_noise(warning, patterns, 1)


def _run_filter(chunks, pause=0.0):
    source_read, source_write = os.pipe()
    sink_read, sink_write = os.pipe()
    worker = threading.Thread(target=quiet.filter_stream,
                              args=(source_read, sink_write, quiet.noise_patterns(True), 2))
    worker.start()
    for chunk in chunks:
        os.write(source_write, chunk)
        time.sleep(pause)
    os.close(source_write)
    worker.join(timeout=10)
    os.close(sink_write)
    output = b""
    while True:
        data = os.read(sink_read, 65536)
        if not data:
            break
        output += data
    os.close(source_read)
    os.close(sink_read)
    return output


def test_filter_passes_everything_else_unchanged_and_in_order():
    lines = [line for pair in zip(NOISE, KEPT) for line in pair] + KEPT[len(NOISE):]
    stream = b"".join(lines) + b"last line without a newline"
    chunks = [stream[i:i + 37] for i in range(0, len(stream), 37)]  # lines split across reads
    assert _run_filter(chunks, pause=0.001) == b"".join(KEPT) + b"last line without a newline"


def test_a_partial_line_such_as_a_progress_bar_is_not_held_back():
    source_read, source_write = os.pipe()
    sink_read, sink_write = os.pipe()
    worker = threading.Thread(target=quiet.filter_stream,
                              args=(source_read, sink_write, quiet.noise_patterns(True), 2), daemon=True)
    worker.start()
    bar = b"\rtrain:  50%|#####     | 5/10"
    os.write(source_write, bar)
    try:
        received = b""
        deadline = time.monotonic() + 5
        while received != bar and time.monotonic() < deadline:  # before any newline or EOF
            received += os.read(sink_read, 65536)
        assert received == bar
    finally:
        os.close(source_write)
        worker.join(timeout=10)
        for fd in (source_read, sink_read, sink_write):
            os.close(fd)


def test_python_stderr_lines_keep_their_order_with_stdout_on_one_terminal():
    """A tool's own stderr lines (SKIPPED, WARNING) bypass the filter process: through it, they reached a terminal
    shared with stdout late (predict's last SKIPPED line came after its `predicted 6, failed 2`). C++ lines written
    to fd 2 are still filtered."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = ("import os, sys\n"
              "from utils import quiet\n"
              "assert quiet.setup([])\n"
              "for i in range(200):\n"
              "    print('err', i, file=sys.stderr, flush=True)\n"
              "    print('out', i, flush=True)\n"
              "os.write(2, b'I0000 00:00:1796118512.495390    5795 port.cc:153] oneDNN custom operations are on.\\n')\n"
              "os.write(2, b'E0000 00:00:1796118514.763516    5795 cuda_executor.cc:100] a real CUDA error\\n')\n")
    env = {key: value for key, value in os.environ.items() if key not in (quiet.VERBOSE_ENV, "TF_CPP_MIN_LOG_LEVEL")}
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60)
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0, lines[-5:]
    assert lines[:400] == [line for i in range(200) for line in ("err {}".format(i), "out {}".format(i))]
    assert lines[400:] == ["E0000 00:00:1796118514.763516    5795 cuda_executor.cc:100] a real CUDA error"]


def test_verbose_is_the_flag_an_abbreviation_of_it_or_the_environment():
    assert quiet.verbose_requested(["--batch_size", "2", "--verbose"], environ={})
    assert quiet.verbose_requested(["--verb"], environ={})
    assert quiet.verbose_requested([], environ={"RN50_VERBOSE": "1"})
    assert not quiet.verbose_requested(["--batch_size", "2"], environ={"RN50_VERBOSE": "0"})
    assert not quiet.verbose_requested(["--v"], environ={})


@pytest.mark.parametrize("module,argv", [
    ("inference", ["--architecture", "resnet50"]),
    ("export_frozen_graph", ["--output_file", "x.pb"]),
    ("postprocess_ckpt", ["--input", "x"]),
])
def test_every_tool_accepts_verbose(module, argv):
    tool = __import__(module)
    assert tool.parse_args(argv + ["--verbose"]).verbose is True


def test_export_onnx_accepts_verbose(tmp_path, capsys):
    import export_onnx
    assert export_onnx.main(["--input", str(tmp_path / "absent"), "--output", "y.onnx", "--verbose"]) == 2
    assert "does not exist" in capsys.readouterr().err  # reached the input check: --verbose was accepted


# ------------------------------------------------------------------------------------------ the CLI
FORBIDDEN = ("cuInit", "E0000", "cudart", "absl::InitializeLog", "oneDNN custom operations", "NodeDef mentions")


def _main(*args, **extra_env):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", **extra_env)
    for key in ("TF_CPP_MIN_LOG_LEVEL", "RN50_VERBOSE"):  # what a user's shell has: neither set
        if key not in extra_env:
            env.pop(key, None)
    return run_script("main.py", *args, check=False, env=env, timeout=600)


BENCHMARK = ["--mode", "training_benchmark", "--batch_size", 2, "--num_iter", 3, "--warmup_steps", 1,
             "--synthetic_data_size", 32, "--num_classes", 10, "--cpu", "--no_progress"]


@pytest.mark.slow
def test_a_cpu_run_prints_no_tensorflow_noise(tmp_path):
    result = _main(*BENCHMARK, "--results_dir", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Ending Model Training" in result.stdout
    assert not [line for line in result.stderr.splitlines() if any(word in line for word in FORBIDDEN)], \
        result.stderr[-3000:]


def test_an_error_after_tensorflow_started_is_the_only_stderr_line_and_verbose_brings_tf_back(tmp_path):
    """--data_format NCHW on CPU fails after TF is imported and the GPUs were probed (the noisy part)."""
    args = ["--mode", "training_benchmark", "--batch_size", 2, "--cpu", "--data_format", "NCHW",
            "--results_dir", tmp_path]
    quiet_run = _main(*args)
    assert quiet_run.returncode == 2
    assert quiet_run.stderr == ("ERROR: --data_format NCHW needs a GPU (TensorFlow's CPU convolution and pooling "
                                "kernels are NHWC only); use --data_format NHWC\n")
    for verbose_run in (_main(*args, "--verbose"), _main(*args, RN50_VERBOSE="1")):
        assert verbose_run.returncode == 2
        assert "absl::InitializeLog" in verbose_run.stderr  # written at import on every machine
        assert verbose_run.stderr.rstrip().endswith("use --data_format NHWC")
