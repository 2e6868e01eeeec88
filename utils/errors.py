"""The one exception type for problems the user can fix (bad flag, missing data, corrupt input), and the wrapper
every command-line tool's `main` goes through so they all fail, and stop on a signal, the same way."""

import argparse
import atexit
import contextlib
import errno
import functools
import gc
import json
import os
import re
import signal
import sys
import unicodedata

from utils import quiet

# The shell's convention for a process ended by a signal: 128 + the signal number.
INTERRUPT_STATUS = {signum: 128 + signum for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
DEFAULT_KEPT = "its work is not complete; run the same command again"


class UserError(Exception):
    """Raised for bad input; the CLI prints `ERROR: <message>` on one line and exits with `status`."""

    status = 2


class LogWriteError(UserError):
    """The run's log could not be written: its file (a full disk, a quota) or stdout (`StdoutWriteError`). A
    training saves its steps before it stops on one (runtime/runner.py); utils.logger raises it for the file."""


class StdoutWriteError(LogWriteError):
    """stdout could not be written (docs/RELIABILITY.md#faults): its reader closed the pipe (`| head`), or the file
    it is redirected to is on a full disk. A broken pipe ends the tool as SIGPIPE ends a Unix tool, status 141 and
    no line, unless work is left incomplete (`on_interrupt`: an `INTERRUPTED: ... stopped by SIGPIPE; <kept>`
    line; a training checkpoints and says so); any other error is one ERROR line, status 2."""

    def __init__(self, error, target):
        self.broken_pipe = isinstance(error, BrokenPipeError)
        if self.broken_pipe:
            self.status = 128 + signal.SIGPIPE
            message = "stdout was closed by the program reading it (a broken pipe): the rest of the output is lost"
        else:
            message = "cannot write the log to stdout{}: {}: give it room or send stdout elsewhere".format(
                " ({})".format(target) if target else "", error.strerror or error)
        super().__init__(message)


class PeerStopped(UserError):
    """A worker of a multi-worker job stopped because another one did (could not start, failed, was killed): its
    own status, so that runtime.launch names the other worker as the cause."""

    status = 3


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors (a missing required flag, a bad choice or type) are one line,
    `ERROR: <prog>: <message> (--help lists the flags)`, and exit status 2, instead of the whole usage text."""

    def error(self, message):
        self.exit(2, "ERROR: {}: {} (--help lists the flags)\n".format(self.prog, message))


def doc_part(doc, part=0, separator="\n\n", rest=False):
    """A piece of a tool's module docstring for its --help: piece `part` of `doc` split at `separator` (with
    `rest`, everything from it on). None when the docstring is gone: `python -OO` (PYTHONOPTIMIZE=2) drops
    docstrings, and the tool should still run, with a shorter --help."""
    if not doc:
        return None
    pieces = doc.split(separator, part) if rest else doc.split(separator)
    return pieces[part] if part < len(pieces) else None


# What TensorFlow wraps an eager op's error message in: `{{function_node __wrapped__SaveV2_dtypes_1_device_/job:
# localhost/replica:0/task:0/device:CPU:0}} <message> [Op:SaveV2]`. Only the message tells the user anything.
_TF_OP_NOISE = re.compile(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]$")


def printable(text, limit=None):
    """`text` (a file name, a name read from a file) with its control characters escaped (`\\n`, `\\x1b`): one line
    per item, and nothing that drives the terminal (an escape sequence, a carriage return, a newline forging a
    line of output). With `limit`, text read from a file that may hold anything is cut to that many characters,
    ending in `...` when cut (a 200 KB name is not echoed in full)."""
    text = str(text)
    cut = limit is not None and len(text) > limit
    if cut:
        text = text[:limit]  # before escaping: escaping a huge text first would cost its size again
    shown = "".join(char.encode("unicode_escape").decode("ascii") if unicodedata.category(char) == "Cc" else char
                    for char in text)
    if limit is not None and len(shown) > limit:
        cut = True
    return shown[:max(limit - 3, 0)] + "..." if cut else shown


def first_line(error):
    """The first line of an exception's message (at most 300 characters), for one-line UserErrors; TensorFlow's
    function-node and op tags are left out."""
    line = (str(error).strip().splitlines() or [""])[0]
    return _TF_OP_NOISE.sub("", line).strip()[:300] or type(error).__name__


def open_files_line(error, then="run the same command again", alternative=""):
    """The sentence for an OSError of too many open files (EMFILE: this process's limit, `ulimit -n`; ENFILE: the
    system's), ending in how to go on (`then`; `alternative`: a fix besides raising the limit), or None for any
    other error: no file is at fault, and the same command succeeds once the limit is raised."""
    if not isinstance(error, OSError) or error.errno not in (errno.EMFILE, errno.ENFILE):
        return None
    if error.errno == errno.ENFILE:
        return f"too many open files in the system (ENFILE): close other programs' files{alternative}, then {then}"
    try:
        import resource
        limit = " is {}".format(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    except (ImportError, OSError, ValueError):
        limit = ""
    return f"too many open files: this process reached its limit (ulimit -n{limit}): raise it (e.g. ulimit -n " \
           f"4096){alternative}, then {then}"


# How TensorFlow's oneDNN kernels report a oneDNN error: `Status: <dnnl_status_t>, message: <what>`. Status 1 is
# dnnl_out_of_memory (oneDNN's dnnl_types.h), whatever the message says ("could not create a primitive").
_ONEDNN_OUT_OF_MEMORY = re.compile(r"Status: 1, message: ")
_TF_NODE = re.compile(r"\{\{node ([^}]+)\}\}")


def memory_line(error):
    """The sentence for an error that is memory running short, or None: Python's MemoryError, or a TensorFlow op
    whose oneDNN kernel reported dnnl_out_of_memory (under `ulimit -v`, "could not create a primitive"). Other
    oneDNN failures (an unimplemented primitive: another status) are not this one."""
    if isinstance(error, MemoryError):
        where = ""
    elif _ONEDNN_OUT_OF_MEMORY.search(str(error)) and type(error).__module__.startswith("tensorflow"):
        node = _TF_NODE.search(str(error))
        where = " (oneDNN, in {})".format(printable(node.group(1), 200) if node else "an op")
    else:
        return None
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        soft = None
    limit = "" if soft in (None, getattr(resource, "RLIM_INFINITY", -1)) else \
        " under this process's limit on its address space (ulimit -v is {} KB)".format(soft // 1024)
    return ("out of memory{}{}: raise the limit, or use less (a smaller --batch_size), then run the same command "
            "again".format(where, limit) if limit else
            "out of memory{}: free memory, or use less (a smaller --batch_size), then run the same command "
            "again".format(where))


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM (or SIGHUP: a closed terminal) while a `command` runs: the counterpart of
    KeyboardInterrupt (a BaseException for the same reason: `except Exception` clean-up code must not swallow it)."""

    def __init__(self, signum=signal.SIGTERM):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOPPING = (KeyboardInterrupt, Terminated)


def restrict_umask():
    """Files and directories we create are never group/world-writable, whatever the caller's umask (a stricter
    umask is kept). TensorFlow and Python create files with mode 0666 & ~umask (docs/RELIABILITY.md)."""
    os.umask(os.umask(0o022) | 0o022)


@contextlib.contextmanager
def on_interrupt(kept, closed_stdout=False):
    """Inside the block, an interrupt (SIGINT or SIGTERM) ends the command with `kept` in its line: what was kept
    and how to go on, e.g. "complete shards are kept; run the same command with --resume to finish". `kept` may be
    a callable returning the text, called when the interrupt passes (to count what was done). The innermost block
    names it. With `closed_stdout`, stdout's failure (StdoutWriteError: a closed pipe, a full disk) gets the same
    account: for work that leaves files incomplete (a dataset), not for a tool whose output is all it makes (predict,
    whose `| head` is meant to cut it short)."""
    stopping = STOPPING + (StdoutWriteError,) if closed_stdout else STOPPING
    try:
        yield
    except stopping as stop:
        if getattr(stop, "kept", None) is None:
            stop.kept = kept() if callable(kept) else kept
        raise


def interrupt_line(tool, signum, kept=None):
    """The one line an interrupted command prints on stderr."""
    return "INTERRUPTED: {} stopped by {}; {}".format(tool, signal.Signals(signum).name, kept or DEFAULT_KEPT)


# Where an interrupt may be raised (docs/RELIABILITY.md#interrupts). Python runs a signal handler between two
# bytecodes of the main thread, wherever they are, including library code that TensorFlow's C++ called back: graph
# building while it traces (Tensor.consumers()), the C++ error translation (an op's InvalidArgumentError being
# built), isinstance checks (typing_extensions) and the like, which do not all cope with an exception of ours
# arriving there (a SystemError from CPython's list code, pybind11's RuntimeError "MISMATCH of original and
# normalized active exception types", a corrupted heap that aborts with `free(): invalid next size`), nor does
# TensorFlow's bookkeeping ("Nesting violated for default stack"). So the wrapper raises an interrupt only in this
# repository's own code and outside any tracing: at once if the signal finds the main thread there, else at the
# next line it runs there; an exception from our code is what TensorFlow expects from code it calls.
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OUR_MODULES = frozenset(["__main__"] + [  # the repository's top-level modules and packages, and the script run
    name[:-3] if name.endswith(".py") else name for name in os.listdir(_REPOSITORY)
    if name.endswith(".py") or os.path.isfile(os.path.join(_REPOSITORY, name, "__init__.py"))])
_pending = None  # the signal number waiting for a line where it may be raised
_traced = False  # whether sys.settrace is ours while one waits
_previous_trace = None


def _is_ours(frame):
    """Whether `frame` runs this repository's code (by module name, wherever it is installed), not this module's
    (the handlers)."""
    name = frame.f_globals.get("__name__") or ""
    return name.partition(".")[0] in _OUR_MODULES and name != __name__


def _tensorflow_is_tracing():
    """Whether this (the main) thread is inside TensorFlow's tracing of a function: a tf.function's first call, a
    tf.data map or filter being built. Other code runs there too (the model's layers), called by the tracing."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    return ops is not None and ops.inside_function()


def _stop(signum):
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _stop_waiting():
    """Forgets the waiting interrupt and puts the previous trace function back; the interrupt's signal number."""
    global _pending, _traced, _previous_trace
    signum, _pending = _pending, None
    if _traced:
        sys.settrace(_previous_trace)
        _traced, _previous_trace = False, None
    return signum


def _on_line(frame, event, _arg):
    """Local trace function of our frames while an interrupt waits: raises it at the first line run outside a
    tracing (an exception raised by a trace function is raised in the traced frame, at that line)."""
    if _pending is None:
        return None
    if event == "line" and not _tensorflow_is_tracing():
        raise _stop(_stop_waiting())
    return _on_line


def _on_call(frame, _event, _arg):
    return _on_line if _is_ours(frame) else None


def _on_signal(signum, frame):
    """The wrapper's handler of SIGINT, SIGTERM and SIGHUP: raises KeyboardInterrupt or Terminated, at once if the
    signal finds the main thread in our code (`_is_ours`) and outside a tracing, else at the next line of ours run
    outside one (a trace function, in the main thread only, until then). A second signal while one waits changes
    nothing."""
    global _pending, _traced, _previous_trace
    if signum == signal.SIGHUP:  # the terminal may be gone: a failed write must not stop the line's way out
        survive_a_closed_terminal()
    if _pending is None:
        _pending = signum
    if frame is not None and _is_ours(frame) and not _tensorflow_is_tracing():
        raise _stop(_stop_waiting())
    if not _traced:
        _previous_trace, _traced = sys.gettrace(), True
        sys.settrace(_on_call)
    while frame is not None:  # the frames already running get the line events too
        if _is_ours(frame):
            frame.f_trace = _on_line
        frame = frame.f_back


def deliver_pending_interrupt():
    """Raises the interrupt that is waiting for a line of our code, if any, now. For code that is about to replace the
    wrapper's handlers with its own (the training loop's StopRequest): the signal came before it, so the wrapper's
    rule applies to it."""
    if _pending is not None:
        raise _stop(_stop_waiting())


def _raise_at_once(signum, _frame):
    if signum == signal.SIGHUP:
        survive_a_closed_terminal()
    raise _stop(signum)


class InterruptHandlers:
    """For the duration of a `with` block, SIGTERM and SIGHUP raise Terminated and SIGINT KeyboardInterrupt, through
    `_on_signal` (only in our code, outside tracing) or, with `at_once`, wherever the signal finds the main thread
    (as Python's own KeyboardInterrupt does). A signal set to be ignored (e.g. by the parent process) stays
    ignored, a handler someone else installed (an outer command, a test harness) stays, and outside the main thread
    nothing is installed: signals are not ours to handle there. `restore()` (also on leaving) puts the previous
    handlers back and drops an interrupt still waiting: the block's work is over."""

    def __init__(self, at_once=False):
        self.at_once = at_once
        self._replaced = {}

    def __enter__(self):
        # SIGHUP (a closed terminal, a dropped ssh session) as SIGTERM: its default killed the process with no line.
        usual = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler,
                 signal.SIGHUP: signal.SIG_DFL}
        handler = _raise_at_once if self.at_once else _on_signal
        try:
            self._replaced = {signum: signal.signal(signum, handler) for signum, default in usual.items()
                              if signal.getsignal(signum) == default}
        except ValueError:  # not the main thread
            self._replaced = {}
        return self

    def restore(self):
        if self._replaced:
            _stop_waiting()
        for signum, previous in self._replaced.items():
            signal.signal(signum, previous)
        self._replaced = {}

    def __exit__(self, *exc):
        self.restore()
        return False


def _fd_open(fd):
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


STDOUT_CLOSED = ("stdout is closed: the tool's output would be lost; run it with stdout open (>/dev/null to "
                 "discard the output)")


def _standard_streams():
    """For a tool run as a script, before anything else opens a file. A closed stderr (`2>&-`) gets /dev/null: the
    tool runs and its messages go where the caller sent them (nowhere); left closed, the next file opened (the
    quiet filter's pipe) would take fd 2 and the C++ logging would write into it. A closed stdout (`>&-`) is
    refused: the output would be lost, under a status of 0. Returns the status to stop with, or None."""
    if sys.stderr is None or not _fd_open(2):
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 2:
            os.dup2(devnull, 2)
            os.close(devnull)
        sys.stderr = open(2, "w", errors="backslashreplace", closefd=False)
    if sys.stdout is None or not _fd_open(1):
        _say("ERROR: " + STDOUT_CLOSED)
        return UserError.status
    return None


def _stdout_target():
    """Where fd 1 goes (a file's path), for the error line; None for a pipe, a terminal, or if unknown."""
    try:
        target = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    return target if target.startswith(os.sep) else None


class GuardedStdout:
    """sys.stdout of a tool run as a script (and stdout and stderr after a SIGHUP: survive_a_closed_terminal): its
    first failed write or flush raises StdoutWriteError (a training then checkpoints, as when its log file fills;
    with `failures_raise` off it is dropped), later ones are dropped, and its descriptor is pointed at /dev/null, so
    that what the stream still buffers does not fail again at exit as a traceback. Characters its encoding lacks
    (an ASCII locale, PYTHONIOENCODING=ascii) are written as backslash escapes, as Python writes them on stderr."""

    def __init__(self, stream, failures_raise=True):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
        self._stream = stream
        self._lost = False
        # False once the terminal behind the stream may be gone (survive_a_closed_terminal): failures are dropped.
        self.failures_raise = failures_raise

    def write(self, text):
        if self._lost:
            return len(text)
        try:
            return self._stream.write(text)
        except OSError as error:
            failure = self._lose(error)
            if self.failures_raise:
                raise failure from None
            return len(text)

    def flush(self):
        if self._lost:
            return
        try:
            self._stream.flush()
        except OSError as error:
            failure = self._lose(error)
            if self.failures_raise:
                raise failure from None

    def _lose(self, error):
        self._lost = True
        target = _stdout_target()
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        return StdoutWriteError(error, target)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def survive_a_closed_terminal():
    """After a SIGHUP (a closed terminal, a dropped ssh session) the terminal behind stdout and stderr may be gone,
    and a write to it fails (EIO). A training must still finish its step and write its checkpoint, so from here on
    a failed write to either is dropped, and so is every later one to that stream (runtime/runner.StopRequest)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, GuardedStdout):
            stream.failures_raise = False
        elif stream is not None:
            setattr(sys, name, GuardedStdout(stream, failures_raise=False))


def _say(line):
    """Writes one line on stderr; a stderr that cannot take it (2>/dev/full) does not change the exit status."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def _tool_name(body):
    """How the user started the tool: `main.py`, `dataprep.build_tfrecords` (python -m); the module in-process."""
    if body.__module__ != "__main__":
        return body.__module__
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return spec.name
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "the command"


# The repository's own packages: a module of theirs that cannot be imported is not a missing install.
OWN_PACKAGES = ("bench", "dataprep", "model", "runtime", "tests", "utils")


def missing_module_line(name):
    """What a tool says when a package it needs is not installed for the interpreter running it (most often the
    system's `python` instead of the venv's)."""
    return ("Python module '{}' is not installed for {}: run the tools with the interpreter scripts/install.sh set "
            "up, .venv/bin/python (or `source .venv/bin/activate` first, then python)".format(name, sys.executable))


class KerasBackendError(UserError, ImportError):
    """Keras set to another backend than TensorFlow. An ImportError too: TensorFlow imports Keras where it can do
    without it (a tool that never uses Keras, dataprep, then runs), and a tool that uses it stops with this line."""


def check_keras_backend(environ=None):
    """UserError unless Keras will use its TensorFlow backend: KERAS_BACKEND (or the "backend" of Keras' own
    keras.json) naming jax, torch or numpy would make the first `import keras` fail for a package that is not
    installed, blamed on the interpreter, or build a model these tools cannot train or save. Checked as Keras is
    first imported (`_KerasBackendCheck`), so that a tool that does not use Keras (dataprep, plot_log) still runs."""
    environ = os.environ if environ is None else environ
    backend, where = environ.get("KERAS_BACKEND", "").strip(), "KERAS_BACKEND={} is set"
    if not backend:
        config = os.path.join(environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras"),
                              "keras.json")
        try:
            with open(config, encoding="utf-8") as handle:
                backend = str(json.load(handle).get("backend", "")).strip()
        except (OSError, ValueError, AttributeError):
            backend = ""
        where = "{} names the Keras backend {{}}".format(config)
    if backend and backend != "tensorflow":
        raise KerasBackendError("{}: these tools need Keras' tensorflow backend; unset it (or set "
                        "KERAS_BACKEND=tensorflow)".format(where.format(backend)))


class _KerasBackendCheck:
    """A sys.meta_path finder for a tool run as a script: when `keras` is imported, `check_keras_backend` runs
    before any of Keras' code does (in the loader's exec_module, not at the finding: TensorFlow looks Keras' spec
    up without importing it). The spec itself comes from the other finders."""

    def find_spec(self, name, path=None, target=None):
        if name != "keras":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _CheckedLoader(spec.loader)
                return spec
        return None


class _CheckedLoader:
    """Keras' own loader, with the backend checked first."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        check_keras_backend()
        module.__loader__ = self._loader
        self._loader.exec_module(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def command(body):
    """Decorates a tool's `main(argv=None)`: restricts the umask, turns a UserError into one line
    `ERROR: <message>` on stderr and exit status 2 (3 for PeerStopped), and maps a `None` return to 0. Usage errors
    of the tools' parsers (`ArgumentParser` above: one line, SystemExit 2) pass through unchanged.

    Interrupts: for the duration of the call SIGTERM and SIGHUP raise Terminated and SIGINT KeyboardInterrupt, only
    in this repository's code and outside TensorFlow's tracing (`_on_signal`); the previous handlers are restored
    after.
    A KeyboardInterrupt or Terminated that reaches here ends the command with one line `INTERRUPTED: <tool>
    stopped by SIGINT; <what was kept, how to go on>` on stderr (see `on_interrupt`) and the shell's status for the
    signal, 130, 143 or 129, with no traceback. Code that handles signals itself (the training loop's StopRequest) calls
    `deliver_pending_interrupt`, then installs its handlers and restores these.

    Run as a script (`python tool.py`, `python -m pkg.tool`), the tool first gets the quiet TensorFlow output of
    utils/quiet.py (`--verbose` / RN50_VERBOSE=1 turn it off), and its exit skips the collector's last pass over
    the heap; called in-process (tests, a notebook) it leaves the caller's stderr and collector alone and puts its
    environment variables and umask back as they were. Each call starts with what modules remember for one run
    emptied (`reset_with_each_command`)."""

    @functools.wraps(body)
    def main(argv=None):
        in_process = body.__module__ != "__main__"
        if not in_process:
            # The last exit handler: what the heap still holds (millions of TensorFlow objects) goes with the
            # process, and a final collection walking all of it only delays the exit (docs/PERFORMANCE.md).
            atexit.register(gc.freeze)
            refused = _standard_streams()
            if refused is not None:
                return refused
            quiet.setup(argv)
            if "keras" not in sys.modules and not any(isinstance(f, _KerasBackendCheck) for f in sys.meta_path):
                sys.meta_path.insert(0, _KerasBackendCheck())
            if not isinstance(sys.stdout, GuardedStdout):
                sys.stdout = GuardedStdout(sys.stdout)
        for reset in _PER_COMMAND_RESETS:
            reset()
        with contextlib.ExitStack() as caller_state:
            if in_process:
                caller_state.enter_context(_environment_and_umask_kept())
            restrict_umask()
            return _run_command(body, argv)

    return main


def _run_command(body, argv):
    """`body(argv)` under the interrupt handlers, its errors and interrupts turned into their one line and status."""
    with InterruptHandlers() as handlers:
        try:
            status = body(argv)
            if isinstance(sys.stdout, GuardedStdout):
                sys.stdout.flush()  # a last failure here, not in the interpreter's flush at exit
        except StdoutWriteError as error:
            kept = getattr(error, "kept", None)
            if not error.broken_pipe:
                _say("ERROR: {}{}".format(error, "; " + kept if kept else ""))
            elif kept:  # a closed pipe ends a tool as SIGPIPE would, silently, unless its work is left incomplete
                _say(interrupt_line(_tool_name(body), signal.SIGPIPE, kept))
            return error.status
        except UserError as error:
            _say(f"ERROR: {error}")
            return error.status
        except OSError as error:
            line = open_files_line(error)  # out of file descriptors wherever it happens: no traceback
            if line is None:
                raise
            _say(f"ERROR: {line}")
            return UserError.status
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] in OWN_PACKAGES:
                raise  # one of ours: a bug, or a tool run from outside the repository
            _say(f"ERROR: {missing_module_line(error.name)}")
            return UserError.status
        except Exception as error:  # noqa: BLE001 - only memory running short is turned into a line
            line = memory_line(error)
            if line is None:
                raise
            _say(f"ERROR: {line}")
            return UserError.status
        except STOPPING as stop:
            handlers.restore()  # a second signal from here on ends the process the default way
            signum = stop.signum if isinstance(stop, Terminated) else signal.SIGINT
            try:
                _say(interrupt_line(_tool_name(body), signum, getattr(stop, "kept", None)))
            except STOPPING:  # a second Ctrl-C while the line is written: the status still says it
                pass
            return INTERRUPT_STATUS[signum]
    return 0 if status is None else status


# What a module remembers for the length of one run (warnings said once per run): emptied as each command starts,
# so a second call in the same process says them again, as a process of its own would.
_PER_COMMAND_RESETS = []


def reset_with_each_command(reset):
    """Registers `reset()` (e.g. a set's `clear`) to run as each `command` starts; returns it."""
    _PER_COMMAND_RESETS.append(reset)
    return reset


@contextlib.contextmanager
def _environment_and_umask_kept():
    """The caller's environment variables and umask as they were before an in-process call (a tool sets the
    original's runtime variables and restricts the umask for its own files)."""
    environment, umask = dict(os.environ), os.umask(0o022)
    os.umask(umask)
    try:
        yield
    finally:
        os.umask(umask)
        for key in set(os.environ) - set(environment):
            del os.environ[key]
        for key, value in environment.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
