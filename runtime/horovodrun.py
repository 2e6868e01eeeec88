"""`python -m runtime.horovodrun <horovodrun's arguments>`: Horovod's horovodrun, read as one run (docs/SCALING.md).

What `training/common.sh` runs for LAUNCHER=horovod when $PYTHON has Horovod (the horovodrun beside it). The same
horovodrun (`horovod.runner.launch.run_commandline`, in this process), with three differences:
- TensorFlow's start-up lines of horovodrun's own process (it imports TensorFlow before any worker starts:
  `WARNING: All log messages before absl::InitializeLog() ...`, `oneDNN custom operations are on`, the CUDA probe,
  `cpu_feature_guard`) go through utils/quiet.py as every tool's do (--verbose or RN50_VERBOSE=1 shows them);
- an ERROR or WARNING line several workers print alike (`[0]<stderr>:ERROR: ...`, `[1]<stderr>:ERROR: ...`) is
  shown once, the first one, and at the end one line names the processes whose line was not shown again;
- after a process failed, Horovod's C++ lines of the others on the connection it closed (`Horovod background loop
  uncaught exception: ... Connection reset by peer`) are counted, not shown (each worker's ERROR line says why it
  stopped), and a survivor's `Received signal SIGTERM` line names horovodrun and the failure as its cause;
- a failed job ends with one line, `runtime.horovodrun: job failed: process R exited with code C`, and that status
  (horovodrun printed its own RuntimeError's traceback and exited 1);
- a Ctrl-C ends with status 130 and one INTERRUPTED line, as main.py and runtime.launch: horovodrun turns it into
  SIGTERM for its workers, which stop at a checkpoint with status 0, and exited 0 itself, as if the job had ended.
"""

import contextlib
import re
import signal
import sys
import threading

from utils import quiet

# horovodrun's prefix of a worker's line (gloo; with --prefix-output-with-timestamp a time before it)
_WORKER_LINE = re.compile(r"^(?P<time>.*?)\[(?P<rank>\d+)\]<(?P<stream>stdout|stderr)>:(?P<text>(?:ERROR|WARNING): .*)",
                          re.S)
# horovodrun's line when one process has failed and it stops the others (SIGTERM), and the line a survivor's
# main.py then prints (runtime/runner.StopRequest)
_TERMINATING = re.compile(r"Terminating remaining workers after failure of Process (?P<name>\S+?)\.?\s*$")
_SIGTERM_RECEIVED = re.compile(r"^(?P<prefix>.*?\[\d+\]<(?:stdout|stderr)>:)Received signal SIGTERM: ", re.S)
# Horovod's C++ line of a worker whose peer closed the connection (the peer stopped or was killed): the worker's
# own ERROR line follows and says so ("a collective with the other workers failed ... because another worker
# stopped ... or lost its connection")
_LOST_CONNECTION = re.compile(r"^.*?\[\d+\]<stderr>:\[[^\]]*\] \[\d+\]: Horovod background loop uncaught exception: "
                              r".*(?:Connection reset by peer|Connection closed by peer|Broken pipe)", re.S)
_FAILED = re.compile(r"one or more processes exited with non-zero status.*Process name: (?P<name>\S+)\s+"
                     r"Exit code: (?P<code>-?\d+)", re.S)


class RepeatedWorkerLines:
    """The filter of horovodrun's output streams: `keep(text)` for each line horovodrun writes. Every worker's line
    is prefixed alike (`[R]<stream>:`), so the first of identical ERROR / WARNING lines is shown (nothing is held)
    and the others' are not; one worker's line is matched with at most one line of each other worker. Unless
    `verbose`, Horovod's C++ lines on a connection a stopped peer closed are not shown (counted in `notes`), and
    `rewrite(text)` names horovodrun as the sender of the SIGTERM a survivor says it received after a failure."""

    def __init__(self, verbose=False):
        self.shown = {}  # text -> [[process that showed it, processes that said it], ...]
        self.lock = threading.Lock()
        self.verbose = verbose
        self.failed = None  # the process horovodrun named when it terminated the others
        self.lost_connection = 0  # Horovod's lines not shown

    def rewrite(self, line):
        """`line` as shown: a survivor's SIGTERM line after horovodrun stopped it for another's failure names both."""
        terminating = _TERMINATING.search(line)
        if terminating:
            self.failed = terminating.group("name")
        received = _SIGTERM_RECEIVED.match(line) if self.failed is not None else None
        if received:
            return "{}Received signal SIGTERM (sent by horovodrun, after process {}'s failure): {}".format(
                received.group("prefix"), self.failed, line[received.end():])
        return line

    def keep(self, line):
        if not self.verbose and _LOST_CONNECTION.match(line):
            self.lost_connection += 1
            return False
        match = _WORKER_LINE.match(line)
        if not match:
            return True
        text, rank = match.group("text").rstrip("\r\n"), int(match.group("rank"))
        with self.lock:
            for shown in self.shown.get(text, []):
                if rank not in shown[1]:
                    shown[1].add(rank)
                    return False
            self.shown.setdefault(text, []).append([rank, {rank}])
            return True

    def notes(self):
        notes = []
        if self.lost_connection:
            notes.append("runtime.horovodrun: {} line{} of Horovod's on a connection a stopped process closed not "
                         "shown ({}=1 shows them)".format(self.lost_connection, "s" if self.lost_connection > 1
                                                          else "", quiet.VERBOSE_ENV))
        for text, lines in self.shown.items():
            for shown_by, ranks in lines:
                others = sorted(ranks - {shown_by})
                if others:
                    notes.append("runtime.horovodrun: process{} {} printed the same {} line as process {} (not shown "
                                 "again)".format("es" if len(others) > 1 else "", ", ".join(map(str, others)),
                                                 text.split(":", 1)[0], shown_by))
        return notes


class _Filtered:
    """A text stream that passes horovodrun's writes (one line each) on unless `lines` drops them."""

    def __init__(self, stream, lines):
        self._stream = stream
        self._lines = lines

    def write(self, text):
        if self._lines.keep(text):
            self._stream.write(self._lines.rewrite(text))
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def failure(error):
    """(process, exit code) of horovodrun's RuntimeError for a failed job, or None for another error."""
    match = _FAILED.search(str(error))
    return (match.group("name"), int(match.group("code"))) if match else None


@contextlib.contextmanager
def signals_received():
    """A list of the signals horovodrun's own handlers get while the block runs (Horovod's gloo launcher
    registers them in `register_shutdown_event` and sets an event that stops the workers; its handlers are kept and
    the signal noted first). Without Horovod, a list nothing adds to."""
    received = []
    try:
        from horovod.runner import gloo_run
    except ImportError:
        yield received
        return
    register = gloo_run.register_shutdown_event

    def noting():
        event = register()
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if callable(handler):
                def noted(number, frame, handler=handler):
                    received.append(number)
                    handler(number, frame)
                signal.signal(signum, noted)
        return event

    gloo_run.register_shutdown_event = noting
    try:
        yield received
    finally:
        gloo_run.register_shutdown_event = register


def main(argv=None, run_commandline=None, install_filter=True):
    """horovodrun with `argv`; its exit status. `run_commandline`: horovodrun's (by default Horovod's, imported
    after the stderr filter is set up); `install_filter=False` leaves this process's stderr alone (a test)."""
    argv = sys.argv[1:] if argv is None else argv
    quiet.setup(argv, install_filter=install_filter)  # before horovod.runner imports TensorFlow
    if run_commandline is None:
        from horovod.runner.launch import run_commandline
    lines = RepeatedWorkerLines(verbose=quiet.verbose_requested(argv))
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Filtered(sys.stdout, lines), _Filtered(sys.stderr, lines)
    saved_argv, sys.argv = sys.argv, ["horovodrun", *argv]
    message = None
    try:
        with signals_received() as received:
            status = run_commandline()
        if not status and signal.SIGINT in received:
            status = 128 + signal.SIGINT
            message = ("INTERRUPTED: the workers stopped on SIGINT (horovodrun sends them SIGTERM) at a checkpoint; "
                       "run the same command again to resume")
    except RuntimeError as error:
        failed = failure(error)
        if failed is None:  # another of horovodrun's failures: its message, without the traceback
            status, message = 1, "ERROR: horovodrun: {}".format(str(error).strip().splitlines()[0])
        else:
            status = failed[1] if failed[1] > 0 else 1
            message = "runtime.horovodrun: job failed: process {} exited with code {}".format(*failed)
    finally:
        sys.stdout, sys.stderr = streams
        sys.argv = saved_argv
        sys.stdout.flush()
        for note in lines.notes():
            print(note, file=sys.stderr, flush=True)
    if message:
        print(message, file=sys.stderr, flush=True)
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
