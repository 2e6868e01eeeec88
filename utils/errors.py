"""The one exception type for problems the user can fix (bad flag, missing data, corrupt input), and the wrapper
every command-line tool's `main` goes through so they all fail, and stop on a signal, the same way."""

import atexit
import contextlib
import functools
import gc
import os
import signal
import sys

from utils import quiet

# The shell's convention for a process ended by a signal: 128 + the signal number.
INTERRUPT_STATUS = {signal.SIGINT: 128 + signal.SIGINT, signal.SIGTERM: 128 + signal.SIGTERM}
DEFAULT_KEPT = "its work is not complete; run the same command again"


class UserError(Exception):
    """Raised for bad input; the CLI prints `ERROR: <message>` on one line and exits non-zero."""


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM while a `command` runs: the SIGTERM counterpart of KeyboardInterrupt
    (a BaseException for the same reason: `except Exception` clean-up code must not swallow it)."""

    def __init__(self, signum=signal.SIGTERM):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOPPING = (KeyboardInterrupt, Terminated)


def restrict_umask():
    """Files and directories we create are never group/world-writable, whatever the caller's umask (a stricter
    umask is kept). TensorFlow and Python create files with mode 0666 & ~umask (docs/RELIABILITY.md)."""
    os.umask(os.umask(0o022) | 0o022)


@contextlib.contextmanager
def on_interrupt(kept):
    """Inside the block, an interrupt (SIGINT or SIGTERM) ends the command with `kept` in its line: what was kept
    and how to go on, e.g. "complete shards are kept; run the same command with --resume to finish". `kept` may be
    a callable returning the text, called when the interrupt passes (to count what was done). The innermost block
    names it."""
    try:
        yield
    except STOPPING as stop:
        if getattr(stop, "kept", None) is None:
            stop.kept = kept() if callable(kept) else kept
        raise


def interrupt_line(tool, signum, kept=None):
    """The one line an interrupted command prints on stderr."""
    return "INTERRUPTED: {} stopped by {}; {}".format(tool, signal.Signals(signum).name, kept or DEFAULT_KEPT)


# A signal that arrives while TensorFlow traces a function waits until the tracing ends: SIGALRM, at this interval,
# looks again (docs/RELIABILITY.md#interrupts).
RETRY_SECONDS = 0.05
_pending = None  # the signal number waiting for the tracing to end


def _tensorflow_is_tracing():
    """Whether this (the main) thread is inside TensorFlow's tracing of a function: a tf.function's first call, a
    tf.data map or filter being built. There TensorFlow's C++ graph building calls back into Python and does not
    always cope with an exception raised in the callback: a SystemError from CPython's list code, or a corrupted
    heap that aborts the process (`free(): invalid next size`)."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    return ops is not None and ops.inside_function()


def _stop(signum):
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _on_signal(signum, _frame):
    """The wrapper's handler of SIGINT, SIGTERM and (for the retry) SIGALRM: raises KeyboardInterrupt or Terminated,
    at once unless TensorFlow is tracing; then the first signal waits and the raise comes when the tracing is over."""
    global _pending
    if signum == signal.SIGALRM:
        if _pending is None:
            return
        signum = _pending
    if _tensorflow_is_tracing():
        if _pending is None:
            _pending = signum
        signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS)
        return
    _pending = None
    raise _stop(signum)


def deliver_pending_interrupt():
    """Raises the interrupt that is waiting for a tracing to end, if any, now. For code that is about to replace the
    wrapper's handlers with its own (the training loop's StopRequest): the signal came before it, so the wrapper's
    rule applies to it."""
    global _pending
    if _pending is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signum, _pending = _pending, None
        raise _stop(signum)


def _raise_at_once(signum, _frame):
    raise _stop(signum)


class InterruptHandlers:
    """For the duration of a `with` block, SIGTERM raises Terminated and SIGINT KeyboardInterrupt through
    `_on_signal` (which waits while TensorFlow traces; with SIGALRM for its retry), or at once if
    `wait_while_tracing` is False or SIGALRM is taken. A signal set to be ignored (e.g. by the parent process)
    stays ignored, a handler someone else installed (an outer command, a test harness) stays, and outside the main
    thread nothing is installed: signals are not ours to handle there. `restore()` (also on leaving) puts the
    previous handlers back and drops an interrupt still waiting."""

    def __init__(self, wait_while_tracing=True):
        self.wait_while_tracing = wait_while_tracing
        self._replaced = {}

    def __enter__(self):
        usual = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}
        try:
            wait = self.wait_while_tracing and signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
            handler = _on_signal if wait else _raise_at_once
            self._replaced = {signum: signal.signal(signum, handler) for signum, default in usual.items()
                              if signal.getsignal(signum) == default}
            if wait and self._replaced:
                self._replaced[signal.SIGALRM] = signal.signal(signal.SIGALRM, _on_signal)
        except ValueError:  # not the main thread
            self._replaced = {}
        return self

    def restore(self):
        global _pending
        if signal.SIGALRM in self._replaced:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _pending = None
        for signum, previous in self._replaced.items():
            signal.signal(signum, previous)
        self._replaced = {}

    def __exit__(self, *exc):
        self.restore()
        return False


def _tool_name(body):
    """How the user started the tool: `main.py`, `dataprep.build_tfrecords` (python -m); the module in-process."""
    if body.__module__ != "__main__":
        return body.__module__
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return spec.name
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "the command"


def command(body):
    """Decorates a tool's `main(argv=None)`: restricts the umask, turns a UserError into one line
    `ERROR: <message>` on stderr and exit status 2, and maps a `None` return to 0. argparse's own usage errors
    (SystemExit 2) pass through unchanged.

    Interrupts: for the duration of the call SIGTERM raises Terminated and SIGINT KeyboardInterrupt, except while
    TensorFlow traces a function: there the raise waits for the tracing to end (`_on_signal`). The previous
    handlers are restored after. A KeyboardInterrupt or Terminated that reaches here ends the command with one
    line `INTERRUPTED: <tool> stopped by SIGINT; <what was kept, how to go on>` on stderr (see `on_interrupt`) and
    the shell's status for the signal, 130 or 143, with no traceback. Code that handles signals itself (the
    training loop's StopRequest) calls `deliver_pending_interrupt`, then installs its handlers and restores
    these.

    Run as a script (`python tool.py`, `python -m pkg.tool`), the tool first gets the quiet TensorFlow output of
    utils/quiet.py (`--verbose` / RN50_VERBOSE=1 turn it off), and its exit skips the collector's last pass over
    the heap; called in-process (tests) it leaves the caller's environment, stderr and collector alone."""

    @functools.wraps(body)
    def main(argv=None):
        if body.__module__ == "__main__":
            # The last exit handler: what the heap still holds (millions of TensorFlow objects) goes with the
            # process, and a final collection walking all of it only delays the exit (docs/PERFORMANCE.md).
            atexit.register(gc.freeze)
            quiet.setup(argv)
        restrict_umask()
        with InterruptHandlers() as handlers:
            try:
                status = body(argv)
            except UserError as error:
                print(f"ERROR: {error}", file=sys.stderr, flush=True)
                return 2
            except STOPPING as stop:
                handlers.restore()  # a second signal from here on ends the process the default way
                signum = stop.signum if isinstance(stop, Terminated) else signal.SIGINT
                try:
                    print(interrupt_line(_tool_name(body), signum, getattr(stop, "kept", None)), file=sys.stderr,
                          flush=True)
                except STOPPING:  # a second Ctrl-C while the line is written: the status still says it
                    pass
                return INTERRUPT_STATUS[signum]
        return 0 if status is None else status

    return main
