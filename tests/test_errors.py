"""The shared command wrapper: one-line errors, exit statuses and the umask every tool runs under."""
import errno
import functools
import os
import signal
import sys
import time

import pytest

from utils.errors import (ArgumentParser, GuardedStdout, InterruptHandlers, LogWriteError, PeerStopped,
                          StdoutWriteError, Terminated, UserError, command, deliver_pending_interrupt, first_line,
                          interrupt_line, on_interrupt)

STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def test_user_error_is_one_line_on_stderr_with_status_2(capsys):
    @command
    def main(argv=None):
        raise UserError(f"no train-* files in {argv[0]}")

    assert main(["/data"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "ERROR: no train-* files in /data\n" and captured.out == ""


def test_a_worker_stopped_by_another_is_one_line_with_status_3(capsys):
    """Its own status, so that runtime.launch names the other worker as the cause."""
    @command
    def main(argv=None):
        raise PeerStopped("worker 1 stopped: another worker could not start this run")

    assert main([]) == 3
    assert capsys.readouterr().err == "ERROR: worker 1 stopped: another worker could not start this run\n"


def test_usage_errors_are_one_line_with_status_2(capsys):
    parser = ArgumentParser(prog="tool.py")
    parser.add_argument("--size", type=int, required=True)
    for argv, message in (([], "the following arguments are required: --size"),
                          (["--size", "x"], "argument --size: invalid int value: 'x'")):
        with pytest.raises(SystemExit) as stopped:
            parser.parse_args(argv)
        assert stopped.value.code == 2
        assert capsys.readouterr().err == f"ERROR: tool.py: {message} (--help lists the flags)\n"


def test_statuses_pass_through_and_none_means_success():
    assert command(lambda argv: None)() == 0
    assert command(lambda argv: 3)() == 3
    assert command(lambda argv: argv)(0) == 0


def test_other_exceptions_are_not_swallowed():
    @command
    def main(argv=None):
        raise RuntimeError("a bug, not bad input")

    with pytest.raises(RuntimeError):
        main()


def test_umask_is_restricted_but_a_stricter_one_is_kept_and_the_callers_is_back_after():
    def umask_inside(argv):
        umask = os.umask(0)
        os.umask(umask)
        seen.append(umask)

    seen = []
    previous = os.umask(0)
    try:
        command(umask_inside)()
        assert os.umask(0o077) == 0  # the caller's, back after an in-process call (2026-12-06: it stayed 0o022)
        command(umask_inside)()
        assert os.umask(previous) == 0o077
    finally:
        os.umask(previous)
    assert seen == [0o022, 0o077]


def test_an_in_process_call_leaves_the_callers_environment_as_it_was(monkeypatch):
    """main.py sets the original's runtime variables (setdefault); in-process they stayed in the caller's environment
    for good, and reached every process it started later."""
    monkeypatch.setenv("RN50_TEST_KEPT", "1")
    monkeypatch.delenv("RN50_TEST_ADDED", raising=False)

    def body(argv):
        os.environ["RN50_TEST_ADDED"] = "x"
        os.environ["RN50_TEST_KEPT"] = "changed"
        del os.environ["RN50_TEST_KEPT"]

    command(body)()
    assert "RN50_TEST_ADDED" not in os.environ and os.environ["RN50_TEST_KEPT"] == "1"


def test_keyboard_interrupt_is_one_line_and_status_130(capsys):
    @command
    def main(argv=None):
        print("working", flush=True)
        raise KeyboardInterrupt

    try:
        status = main()
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt escaped the command wrapper")
    assert status == 130
    captured = capsys.readouterr()
    assert captured.out == "working\n"
    assert captured.err == ("INTERRUPTED: {} stopped by SIGINT; its work is not complete; run the same command "
                            "again\n".format(__name__))


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_raise_terminated_one_line_and_their_status_then_the_handler_is_restored(
        capsys, signum, status):
    """SIGHUP too: a closed terminal's SIGHUP during start-up, an evaluation, predict or an export killed the process
    at once by its default action, status 129 and no line (the training loop alone handled it)."""
    previous = signal.getsignal(signum)

    @command
    def main(argv=None):
        with on_interrupt("the shards written so far are kept"):
            os.kill(os.getpid(), signum)
            time.sleep(30)  # the handler raises Terminated here, at once
        raise AssertionError("not reached")

    started = time.monotonic()
    assert main() == status
    assert time.monotonic() - started < 10
    assert capsys.readouterr().err == ("INTERRUPTED: {} stopped by {}; the shards written so far are "
                                       "kept\n".format(__name__, signal.Signals(signum).name))
    assert signal.getsignal(signum) is previous
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sighup_set_to_be_ignored_stays_ignored():
    """`nohup`: the command wrapper does not take over a SIGHUP its parent set to be ignored."""
    previous = signal.getsignal(signal.SIGHUP)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        seen = []
        command(lambda argv: seen.append(signal.getsignal(signal.SIGHUP)))()
        assert seen == [signal.SIG_IGN]
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_tensorflow_traces_is_raised_when_the_tracing_is_over(capsys, signum):
    """TensorFlow's C++ graph building calls back into Python while it traces, and an exception raised in such a
    callback can corrupt its state (a SystemError, or an abort with `free(): invalid next size`)."""
    import tensorflow as tf
    events = []

    @tf.function
    def traced(x):
        os.kill(os.getpid(), signum)
        for _ in range(300):  # more graph building, with Python bytecode where a handler could run
            x = tf.math.sin(x) + 1.0
        events.append("traced")
        return x

    @command
    def main(argv=None):
        traced(tf.constant(0.0))
        events.append("returned")  # the first line of ours after the tracing: the interrupt is raised here
        raise AssertionError("not reached")

    started = time.monotonic()
    assert main() == STATUS[signum]
    assert time.monotonic() - started < 10
    assert events == ["traced"]
    assert capsys.readouterr().err.startswith("INTERRUPTED: {} stopped by {};".format(
        __name__, signal.Signals(signum).name))


THEIRS = """
def work(send_signal):
    send_signal()
    done = []
    for index in range(1000):  # lines where a handler that raises at once would raise
        done.append(index)
    return len(done)
"""


@pytest.fixture
def theirs(tmp_path, monkeypatch):
    """A module that is not this repository's code, as TensorFlow's is not."""
    (tmp_path / "theirs_module.py").write_text(THEIRS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import theirs_module
    yield theirs_module
    sys.modules.pop("theirs_module", None)


@pytest.mark.parametrize("at_once", [False, True], ids=["ours", "at_once"])
def test_a_signal_in_library_code_is_raised_at_the_next_line_of_ours(theirs, at_once):
    results = []
    send = functools.partial(os.kill, os.getpid(), signal.SIGTERM)  # no Python frame in between
    trace_before = sys.gettrace()
    with InterruptHandlers(at_once=at_once):
        with pytest.raises(Terminated):
            results.append(theirs.work(send))
            time.sleep(30)  # not reached either way
    assert results == ([] if at_once else [1000])
    assert sys.gettrace() is trace_before


def test_code_with_its_own_handlers_takes_a_waiting_interrupt_first():
    from tensorflow.python.framework.func_graph import FuncGraph
    seen = []

    @command
    def main(argv=None):
        with FuncGraph("tracing").as_default():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)  # still tracing: nothing is raised
            seen.append("waited")
            try:
                deliver_pending_interrupt()  # as the training loop's StopRequest does on entry
            finally:
                seen.append(sys.gettrace())
        raise AssertionError("not reached")

    trace_before = sys.gettrace()
    assert main() == 143
    assert seen == ["waited", trace_before]  # raised, and the line tracing that waited for it stopped
    deliver_pending_interrupt()  # nothing waits any more


def test_a_signal_that_waits_until_the_command_is_done_is_dropped(theirs):
    """Its work is complete (the signal came in library code, and the body returned from there): the command ends
    with its own status."""
    @command
    def main(argv=None):
        return 5 + 0 * theirs.work(functools.partial(os.kill, os.getpid(), signal.SIGTERM))

    assert main() == 5
    deliver_pending_interrupt()  # nothing waits


def test_the_innermost_note_names_what_was_kept_and_may_count_it(capsys):
    done = []

    @command
    def main(argv=None):
        with on_interrupt("outer"), on_interrupt(lambda: "{} done".format(len(done))):
            done.extend([1, 2])
            raise Terminated()

    assert main() == 143
    assert capsys.readouterr().err.endswith("stopped by SIGTERM; 2 done\n")


def test_an_ignored_sigterm_stays_ignored():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        seen = []
        command(lambda argv: seen.append(signal.getsignal(signal.SIGTERM)))()
        assert seen == [signal.SIG_IGN] and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_interrupts_are_not_user_errors_and_pass_other_handlers():
    """Terminated is a BaseException: `except Exception` clean-up code does not swallow it."""
    assert not issubclass(Terminated, Exception) and issubclass(Terminated, BaseException)
    assert interrupt_line("main.py", signal.SIGINT, "x") == "INTERRUPTED: main.py stopped by SIGINT; x"


def test_a_package_missing_from_the_interpreter_is_one_line_naming_it_and_the_venv(capsys):
    """The system's `python` instead of the venv's: the first import of TensorFlow or Keras fails deep in a tool;
    one line and status 2, not a traceback. A module of the repository's own that cannot be imported is a bug."""
    def missing(name):
        @command
        def tool(argv=None):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return tool

    assert missing("keras")() == 2
    assert capsys.readouterr().err == (f"ERROR: Python module 'keras' is not installed for {sys.executable}: run the "
                                       "tools with the interpreter scripts/install.sh set up, .venv/bin/python (or "
                                       "`source .venv/bin/activate` first, then python)\n")
    with pytest.raises(ModuleNotFoundError):
        missing("runtime.gone")()


def test_first_line_leaves_out_tensorflows_function_node_and_op_tags():
    """The message TensorFlow gives for a SaveV2 on a full disk, as a checkpoint or export write passes it on."""
    import tensorflow as tf
    message = ("{{function_node __wrapped__SaveV2_dtypes_431_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
               "/m/model.ckpt-1_temp/part.data-00000-of-00001.tempstate1; No space left on device [Op:SaveV2]\nmore")
    assert first_line(tf.errors.ResourceExhaustedError(None, None, message)) == (
        "/m/model.ckpt-1_temp/part.data-00000-of-00001.tempstate1; No space left on device")
    assert first_line(OSError(28, "No space left on device")) == "[Errno 28] No space left on device"
    assert first_line(ValueError()) == "ValueError"


class _Unwritable:
    """A stream whose every write and flush fails with `error` (a full disk, a closed pipe)."""

    def __init__(self, error):
        self.error = error

    def write(self, text):
        raise self.error

    def flush(self):
        raise self.error


def test_a_stderr_that_cannot_take_the_line_leaves_the_status_as_it_is(monkeypatch):
    """2>/dev/full: the ERROR or INTERRUPTED line is lost, but the status still tells the caller what happened
    (until 2026-12-06 the failed write was a traceback, itself unwritable, and status 1)."""
    monkeypatch.setattr(sys, "stderr", _Unwritable(OSError(errno.ENOSPC, "No space left on device")))

    @command
    def refused(argv=None):
        raise UserError("bad flag")

    @command
    def interrupted(argv=None):
        raise KeyboardInterrupt

    assert refused([]) == 2
    assert interrupted([]) == 130


_TOOL = """import sys
sys.path.insert(0, {root!r})
from utils.errors import command

@command
def main(argv=None):
    print("the answer")
    print("a note", file=sys.stderr)

sys.exit(main())
"""


def _run_closing(tmp_path, redirection):
    """A tool run as a script by a shell that closes one of its standard streams (the process boundary is what
    is tested: Python starts with sys.stdout or sys.stderr None)."""
    import subprocess
    script = tmp_path / "tool.py"
    script.write_text(_TOOL.format(root=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return subprocess.run(["sh", "-c", 'exec "$0" "$1" ' + redirection, sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120)


def test_a_closed_stdout_is_refused_at_the_start_and_a_closed_stderr_lets_the_tool_run(tmp_path):
    """`>&-`: the output would be lost under status 0 (until 2026-12-06 predict did so; a training failed on
    sys.stdout.isatty() after its first checkpoint). `2>&-`: the tool runs, its messages discarded (until then the
    quiet filter's pipe took fd 2 and every tool exited 1 having done nothing)."""
    closed_stdout = _run_closing(tmp_path, ">&-")
    assert (closed_stdout.returncode, closed_stdout.stderr) == (2, "ERROR: stdout is closed: the tool's output would "
                                                                   "be lost; run it with stdout open (>/dev/null to "
                                                                   "discard the output)\n")
    closed_stderr = _run_closing(tmp_path, "2>&-")
    assert (closed_stderr.returncode, closed_stderr.stdout) == (0, "the answer\n")


def test_a_stdout_that_cannot_be_written_is_one_line_and_a_closed_pipe_ends_the_tool_quietly(monkeypatch, capsys):
    """A full disk behind stdout: one ERROR line, status 2 (a training checkpoints first: it is a LogWriteError).
    Its reader gone (`| head`): status 141, no line, as SIGPIPE ends a Unix tool; a line only where work is left
    incomplete (on_interrupt's closed_stdout). Later writes are dropped. Until 2026-12-06 both were tracebacks."""
    @command
    def tool(argv=None):
        print("first result")
        print("never written")

    @command
    def dataset(argv=None):
        with on_interrupt("complete shards are kept", closed_stdout=True):
            print("train: 40 images")

    full = GuardedStdout(_Unwritable(OSError(errno.ENOSPC, "No space left on device")))
    monkeypatch.setattr(sys, "stdout", full)
    assert tool([]) == 2
    error = capsys.readouterr().err
    assert error.startswith("ERROR: cannot write the log to stdout") and error.count("\n") == 1
    assert error.endswith(": No space left on device: give it room or send stdout elsewhere\n")
    assert full.write("dropped") == 7 and full.flush() is None
    assert issubclass(StdoutWriteError, LogWriteError)

    monkeypatch.setattr(sys, "stdout", GuardedStdout(_Unwritable(BrokenPipeError(errno.EPIPE, "Broken pipe"))))
    assert tool([]) == 141
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys, "stdout", GuardedStdout(_Unwritable(BrokenPipeError(errno.EPIPE, "Broken pipe"))))
    assert dataset([]) == 141
    assert capsys.readouterr().err == ("INTERRUPTED: tests.test_errors stopped by SIGPIPE; complete shards are "
                                       "kept\n")


def test_after_a_sighup_a_stream_that_fails_drops_the_write(monkeypatch):
    """A closed terminal (SIGHUP) fails every write (EIO): a training stopping on it must still finish its step and
    checkpoint, so the guarded stdout stops raising, and stderr is guarded too."""
    from utils.errors import survive_a_closed_terminal
    eio = OSError(errno.EIO, "Input/output error")
    stdout, stderr = GuardedStdout(_Unwritable(eio)), _Unwritable(eio)
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    survive_a_closed_terminal()
    assert sys.stdout is stdout and isinstance(sys.stderr, GuardedStdout)
    print("Received signal SIGHUP: stopping after the current step")
    print("training stopped by a signal", file=sys.stderr, flush=True)
    sys.stdout.flush()


def test_stdout_writes_characters_its_encoding_lacks_as_backslash_escapes():
    """PYTHONIOENCODING=ascii, LC_ALL=C: a path or a label with 'ü' is written as '\\xfc', as on stderr (until
    2026-12-06 a UnicodeEncodeError at the first such line, after an export had written its file)."""
    import io
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    guarded = GuardedStdout(stream)
    guarded.write("to_predict : /data/\u00fcn\u00ef dir, 3 (Pull-\u00f6ver)\n")
    guarded.flush()
    assert raw.getvalue() == b"to_predict : /data/\\xfcn\\xef dir, 3 (Pull-\\xf6ver)\n"


def test_a_tools_help_text_comes_from_its_docstring_and_survives_python_oo():
    """`python -OO` (PYTHONOPTIMIZE=2) drops docstrings: `doc_part` gives None and the --help is shorter (until
    2026-12-06 every tool but main.py failed at start: `'NoneType' object has no attribute 'splitlines'`). No tool
    indexes its __doc__ itself, nor does a benchmark (bench/*: until 2026-12-06 at start)."""
    import re
    from utils.errors import doc_part
    doc = "Title line\nmore of it.\n\nSecond paragraph.\n\nThird.\n\nFourth."
    assert doc_part(doc, 0, "\n") == "Title line"
    assert doc_part(doc) == "Title line\nmore of it."
    assert doc_part(doc, 2, rest=True) == "Third.\n\nFourth."
    assert doc_part(None) is None and doc_part(None, 2, rest=True) is None and doc_part("One.", 2) is None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    indexing = re.compile(r"__doc__\s*\.\s*split|__doc__\s*\[")
    sources = [os.path.join(directory, name) for top in ("", "bench", "dataprep", "model", "runtime", "utils", "scripts")
               for directory in [os.path.join(root, top)] for name in sorted(os.listdir(directory))
               if name.endswith(".py")]
    assert [path for path in sources if indexing.search(open(path, encoding="utf-8").read())] == []


_KERAS_TOOL = """import importlib.util, sys
sys.path.insert(0, {root!r})
from utils.errors import command

@command
def main(argv=None):
    assert importlib.util.find_spec("keras") is not None  # looked up, not imported (TensorFlow does so)
    print("looked up")
    import keras  # noqa: F401

sys.exit(main())
"""


def test_keras_set_to_another_backend_is_one_line_saying_so_when_a_tool_imports_it(tmp_path):
    """KERAS_BACKEND=jax (or keras.json's backend): one line naming it, checked as Keras is imported (a child
    process: Keras is imported once per process); a tool that never imports Keras is not refused. Until 2026-12-06
    the line blamed the interpreter: `Python module 'jax' is not installed for .../.venv/bin/python`."""
    import subprocess
    from utils.errors import check_keras_backend
    script = tmp_path / "tool.py"
    script.write_text(_KERAS_TOOL.format(root=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "KERAS_BACKEND": "jax"})
    assert (result.returncode, result.stdout) == (2, "looked up\n")
    assert result.stderr == ("ERROR: KERAS_BACKEND=jax is set: these tools need Keras' tensorflow backend; unset it "
                             "(or set KERAS_BACKEND=tensorflow)\n")
    check_keras_backend({"KERAS_BACKEND": "tensorflow"})
    check_keras_backend({"KERAS_HOME": str(tmp_path / "none")})
    (tmp_path / "keras.json").write_text('{"backend": "torch"}')
    with pytest.raises(UserError, match=r"keras\.json names the Keras backend torch: these tools need"):
        check_keras_backend({"KERAS_HOME": str(tmp_path)})


def test_too_many_open_files_anywhere_is_one_line_naming_the_limit(capsys):
    """`ulimit -n 20`: an OSError EMFILE (ENFILE) reaching a tool's wrapper was a traceback; no file is at fault."""
    import resource
    from utils.errors import open_files_line

    @command
    def tool(argv):
        raise OSError(errno.EMFILE, "Too many open files")

    assert tool([]) == 2
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert capsys.readouterr().err == (f"ERROR: too many open files: this process reached its limit (ulimit -n is "
                                       f"{limit}): raise it (e.g. ulimit -n 4096), then run the same command again\n")
    assert open_files_line(OSError(errno.ENFILE, "x"), "go on", " or fewer").startswith(
        "too many open files in the system (ENFILE): close other programs' files or fewer, then go on")
    assert open_files_line(OSError(errno.ENOENT, "x")) is None and open_files_line(ValueError()) is None

    @command
    def other(argv):
        raise OSError(errno.EACCES, "Permission denied")

    with pytest.raises(PermissionError):  # any other OSError is not this one: a bug stays a traceback
        other([])


def test_memory_running_short_is_one_line_and_other_onednn_failures_are_not_taken_for_it(monkeypatch, capsys):
    """`ulimit -v 3400000` then a training: oneDNN's dnnl_out_of_memory (status 1) surfaced as a traceback of an
    AbortedError, "could not create a primitive". Status 3 (unimplemented, e.g. bfloat16 on a CPU without it) is
    not memory: it stays what it was."""
    import resource
    import tensorflow as tf
    from utils.errors import memory_line

    def onednn(status):
        return tf.errors.AbortedError(None, None, (
            "Graph execution error:\n\nDetected at node a/b/FusedBatchNormV3 defined at:\n<stack traces unavailable>\n"
            f"Operation received an exception:Status: {status}, message: could not create a primitive, in file "
            "tensorflow/core/kernels/mkl/mkl_fused_batch_norm_op.cc:1188\n\t [[{{node a/b/FusedBatchNormV3}}]]"))

    real = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit", lambda which: (3_400_000 * 1024, resource.RLIM_INFINITY)
                        if which == resource.RLIMIT_AS else real(which))

    @command
    def training(argv):
        raise onednn(1)

    assert training([]) == 2
    assert capsys.readouterr().err == (
        "ERROR: out of memory (oneDNN, in a/b/FusedBatchNormV3) under this process's limit on its address space "
        "(ulimit -v is 3400000 KB): raise the limit, or use less (a smaller --batch_size), then run the same command "
        "again\n")
    assert memory_line(onednn(3)) is None and memory_line(ValueError("Status: 1, message: x")) is None
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert memory_line(MemoryError()) == ("out of memory: free memory, or use less (a smaller --batch_size), then run "
                                          "the same command again")

    @command
    def unimplemented(argv):
        raise onednn(3)

    with pytest.raises(tf.errors.AbortedError):
        unimplemented([])

    @command
    def missing(argv):
        import no_such_module_here  # noqa: F401

    assert missing([]) == 2 and "Python module 'no_such_module_here' is not installed" in capsys.readouterr().err
