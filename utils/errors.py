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


def _raise_terminated(signum, _frame):
    raise Terminated(signum)


def _install_sigterm_handler():
    """SIGTERM raises Terminated until `_restore` is called with the returned previous handler (None: left alone,
    because we are not in the main thread or SIGTERM is ignored on purpose, e.g. by the parent process)."""
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
            return None
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: signals are not ours to handle
        return None


def _restore(previous):
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


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

    Interrupts: for the duration of the call SIGTERM raises Terminated (the previous handler is restored after),
    and a KeyboardInterrupt (SIGINT, Ctrl-C) or Terminated that reaches here ends the command with one line
    `INTERRUPTED: <tool> stopped by SIGINT; <what was kept, how to go on>` on stderr (see `on_interrupt`) and
    the shell's status for the signal, 130 or 143, with no traceback. Code that handles signals itself (the
    training loop's StopRequest) installs its handlers inside and restores these.

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
        previous = _install_sigterm_handler()
        try:
            status = body(argv)
        except UserError as error:
            print(f"ERROR: {error}", file=sys.stderr, flush=True)
            return 2
        except STOPPING as stop:
            _restore(previous)  # a second SIGTERM from here on ends the process the default way
            previous = None
            signum = stop.signum if isinstance(stop, Terminated) else signal.SIGINT
            try:
                print(interrupt_line(_tool_name(body), signum, getattr(stop, "kept", None)), file=sys.stderr,
                      flush=True)
            except STOPPING:  # a second Ctrl-C while the line is written: the status still says it
                pass
            return INTERRUPT_STATUS[signum]
        finally:
            _restore(previous)
        return 0 if status is None else status

    return main
