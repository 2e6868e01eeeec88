"""Quiet command-line output: TensorFlow's start-up noise is dropped, everything else passes (docs/OBSERVABILITY.md).

Every CPU run of TF 2.21 writes lines to stderr that look like failures and are not:

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 ... port.cc:153] oneDNN custom operations are on. ...
    I0000 ... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
    E0000 ... cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: ... UNKNOWN ERROR (303)
    E0000 ... node_def_util.cc:682] NodeDef mentions attribute use_unbounded_threadpool ... (multi-worker tf.data)

What the environment can do (TF 2.21): TF_CPP_MIN_LOG_LEVEL applies to the lines that go through
TensorFlow's own logging (cpu_feature_guard, grappler's devices.cc, the cuInit and NodeDef lines), 0-3 for
INFO/WARNING/ERROR/FATAL; TF_CPP_MAX_VLOG_LEVEL only raises VLOG detail (off by default). The lines written
while TF's shared libraries load go through Abseil logging before anything calls absl::InitializeLog; Abseil
then writes every message to stderr and reads no environment variable (TF_CPP_MIN_LOG_LEVEL, GLOG_minloglevel,
ABSL_MIN_LOG_LEVEL and TF_CPP_VMODULE change nothing). Level 3 would hide the cuInit line, but also every real
C++ error, so it is not used.

So `setup` (called by utils.errors.command for every tool, before the tool imports TensorFlow) does two things:
1. TF_CPP_MIN_LOG_LEVEL=2 unless already set (TF's C++ INFO and WARNING lines; the original's level).
2. Routes file descriptor 2 through a filter process that drops, line by line, only the patterns of
   `noise_patterns` and C++ INFO/WARNING lines below TF_CPP_MIN_LOG_LEVEL (what TF promises for that variable
   but cannot do for the lines written before its logging is set up); every other byte is passed on unchanged
   and in order. The GPU lines (cudart_stub, cuInit) are dropped only when no GPU is present (no /dev/nvidia*
   device, or CUDA_VISIBLE_DEVICES hides all): on a GPU machine they report a real driver problem. A separate
   process, not a thread, so that what a crashing process wrote still reaches the terminal. Python's own
   `sys.stderr` writes go to the real stderr directly (none of the noise is Python's), so they keep their order
   with stdout.
`--verbose` on a tool's command line, or RN50_VERBOSE=1 in the environment, turns both off (TF_CPP_MIN_LOG_LEVEL=0
and no filter) and is inherited by the processes the tool starts.
"""

import atexit
import glob
import os
import re
import select
import subprocess
import sys

VERBOSE_ENV = "RN50_VERBOSE"
VERBOSE_FLAG = "--verbose"
QUIET_LOG_LEVEL = "2"
HOLD_SECONDS = 0.05  # a partial line (progress bar, prompt) is passed on after this long without its newline
DRAIN_SECONDS = 5.0  # at exit, how long to wait for the filter to write what it still holds

# A C++ log line: severity, MMDD, time, thread id, file:line]
_CPP_HEADER = rb"[IWEF]\d{4} [0-9:.]+ +\d+ [\w.-]+:\d+\] "
_CPP_LINE = re.compile(_CPP_HEADER)
_ALWAYS_NOISE = (
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    _CPP_HEADER + rb"oneDNN custom operations are on\.",
    # tf.data on a multi-worker run: TF's Python op registry knows an attribute its C++ kernels do not; TF says
    # itself that it is ignored ("This may be expected ... Unknown attributes will be ignored").
    _CPP_HEADER + rb"NodeDef mentions attribute use_unbounded_threadpool which is not in the op definition",
)
_NO_GPU_NOISE = (
    _CPP_HEADER + rb"Could not find cuda drivers on your machine, GPU will not be used\.",
    _CPP_HEADER + rb"failed call to cuInit: ",
    # --amp_dtype float16 on a CPU without AVX-512: TF falls back to Eigen's kernels (the run prints its own line).
    _CPP_HEADER + rb"oneDNN supports DT_HALF only on platforms with AVX-512\.",
)
_SEVERITY_LEVEL = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}


def add_verbose_flag(parser):
    """The `--verbose` flag every tool accepts (read by `setup` from the raw argv, before argparse runs)."""
    parser.add_argument(VERBOSE_FLAG, action="store_true", default=False,
                        help="show TensorFlow's own log lines (C++ INFO/WARNING, the CUDA probe), hidden by default; "
                             "the same as {}=1".format(VERBOSE_ENV))


def verbose_requested(argv, environ=None):
    """--verbose (or an abbreviation argparse would accept, down to --verb) in argv, or RN50_VERBOSE set."""
    environ = os.environ if environ is None else environ
    flag_given = any(isinstance(arg, str) and len(arg) >= 6 and VERBOSE_FLAG.startswith(arg) for arg in argv or ())
    return flag_given or environ.get(VERBOSE_ENV, "") not in ("", "0")


def gpu_absent(environ=None):
    """No NVIDIA device node, or CUDA_VISIBLE_DEVICES set to hide every GPU ("" or -1)."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return True
    return not glob.glob("/dev/nvidia[0-9]*")


def noise_patterns(no_gpu):
    return re.compile(b"|".join(b"(?:" + p + b")" for p in _ALWAYS_NOISE + (_NO_GPU_NOISE if no_gpu else ())))


def is_noise(line, patterns, min_level):
    """Whether one stderr line (bytes) is dropped: a known pattern, or a C++ INFO/WARNING line below min_level."""
    if patterns.match(line):
        return True
    return bool(_CPP_LINE.match(line)) and _SEVERITY_LEVEL[line[:1]] < min(min_level, 2)


def setup(argv=None, install_filter=True):
    """For a command-line tool, before TensorFlow is imported: the quiet defaults, or nothing under --verbose.

    install_filter=False only sets the environment (a tool called in-process, e.g. from a test, leaves the
    caller's stderr alone). The filter is never installed once TensorFlow is imported (too late to matter)."""
    argv = sys.argv[1:] if argv is None else argv
    if verbose_requested(argv):
        os.environ[VERBOSE_ENV] = "1"
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
        return False
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL)
    if not install_filter or "tensorflow" in sys.modules:
        return False
    return _start_stderr_filter(gpu_absent(), _min_level())


def _min_level():
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def _start_stderr_filter(no_gpu, min_level):
    """fd 2 -> pipe -> filter process -> the original stderr. Returns True when the filter runs."""
    try:
        read_fd, write_fd = os.pipe()
        real_stderr = os.dup(2)
    except OSError:
        return False
    try:
        # Own session: a terminal's Ctrl-C or a kill of our process group must not stop it before it has
        # written what we wrote; it ends on end-of-file, when every process holding the pipe has exited.
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), "--filter", "1" if no_gpu else "0",
             str(min_level)],
            stdin=read_fd, stdout=real_stderr, stderr=real_stderr, close_fds=True, start_new_session=True)
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        os.close(real_stderr)
        return False
    os.close(read_fd)
    sys.stderr.flush()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    _python_stderr_to(real_stderr)
    atexit.register(_drain, child, real_stderr)
    return True


def _python_stderr_to(fd):
    """Python's own writes to stderr (the tool's messages, warnings, a traceback) need no filtering: they go to a
    copy of `fd`, the real stderr, so that on a terminal they keep their order with stdout. Through the filter
    process they could arrive after later stdout lines (a SKIPPED line after the summary that counts it). fd 2
    (C++ logging, child processes) stays filtered."""
    import io
    previous = sys.stderr
    sys.stderr = io.TextIOWrapper(io.FileIO(os.dup(fd), "w"), encoding=getattr(previous, "encoding", None),
                                  errors="backslashreplace", line_buffering=True, write_through=True)


def _drain(child, real_stderr):
    """At exit: give fd 2 back to the real stderr (closing our end of the pipe) and wait until the filter has
    written everything, so that the last lines come before the shell prompt or the caller's next read."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.dup2(real_stderr, 2)
    os.close(real_stderr)
    try:
        child.wait(timeout=DRAIN_SECONDS)
    except subprocess.TimeoutExpired:  # a process we started still holds the pipe; it will drain after us
        pass


def filter_stream(source_fd, sink_fd, patterns, min_level):
    """Copies source to sink line by line, dropping noise lines; returns at end-of-file of source."""
    pending = b""
    while True:
        if pending:
            ready, _, _ = select.select([source_fd], [], [], HOLD_SECONDS)
            if not ready:  # a line without its end yet (a progress bar): pass it on as it is
                _write_all(sink_fd, pending)
                pending = b""
                continue
        chunk = os.read(source_fd, 65536)
        if not chunk:
            break
        lines = (pending + chunk).splitlines(keepends=True)
        pending = b"" if lines[-1].endswith((b"\n", b"\r")) else lines.pop()
        kept = b"".join(line for line in lines if not is_noise(line, patterns, min_level))
        if kept:
            _write_all(sink_fd, kept)
    if pending and not is_noise(pending, patterns, min_level):
        _write_all(sink_fd, pending)


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _filter_main(no_gpu, min_level):
    """The filter process. Should anything in the filtering fail, it copies the rest unfiltered: losing the
    tool's stderr would be far worse than a few noise lines."""
    try:
        try:
            filter_stream(0, 1, noise_patterns(no_gpu == "1"), int(min_level))
        except (BrokenPipeError, OSError):
            raise
        except Exception:  # noqa: BLE001 - see the docstring
            _copy(0, 1)
    except (BrokenPipeError, OSError):  # the real stderr went away: nothing left to write to
        pass


def _copy(source_fd, sink_fd):
    while True:
        chunk = os.read(source_fd, 65536)
        if not chunk:
            return
        _write_all(sink_fd, chunk)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--filter":
    _filter_main(sys.argv[2], sys.argv[3])
