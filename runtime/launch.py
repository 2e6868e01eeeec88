"""Starts N workers on this machine, what `mpiexec -np N` did for the original (docs/SCALING.md).

    python -m runtime.launch --nproc N main.py --mode train_and_evaluate --batch_size 256 ...

Each worker is `python <script> <args>` with
- TF_CONFIG naming all N workers on free loopback ports (127.0.0.1 only) and its own index, so `main.py` runs
  MultiWorkerMirroredStrategy with rank = index (rank 0 is the chief: it alone logs, checkpoints, evaluates);
- RN50_LOCAL_RANK = its index, and CUDA_VISIBLE_DEVICES = one GPU (the index-th of the GPUs visible to the
  launcher) when there are GPUs.
Output: rank 0's lines pass through unchanged (logs and benchmark parsers see what one process prints); the
other workers' lines are prefixed with `[worker R] ` (or dropped with --quiet_workers). An ERROR or WARNING line
several workers print alike is shown once (RepeatedLines), and the launcher says which workers it did not show.
Signals: SIGINT/SIGTERM/SIGUSR1/SIGHUP to the launcher are forwarded once to every worker (they run in their own
sessions, so a terminal's Ctrl-C reaches them only through here): each finishes its step, the workers agree,
checkpoint and stop (after a Ctrl-C the job exits 130, as each worker does). A second signal is forwarded again
(workers then exit at once). A worker still running --grace seconds after rank 0 stopped on the signal is blocked
where no signal reaches it (a collective rank 0 left) and is killed, said in one line. A worker still starting
when a peer stops on the signal may print what TensorFlow and Keras say about the aborted collectives
(AbortNoise), and so may the others when a worker fails (killed, or its own ERROR): after a forwarded signal or a
worker's failure those lines are not shown, their count is said once per worker (RN50_VERBOSE=1 or --verbose shows
them).
Failure: when a worker exits with a non-zero status, the launcher names it (rank, pid, exit code or signal),
terminates the others (SIGTERM, then SIGKILL after --grace seconds) and exits with its status. One that exits 2
(bad input, its ERROR line) first gives the others BAD_INPUT_WAIT s to stop on their own (they usually find the
same), and the lowest rank that failed is named. A worker that stopped only because another did (status 3,
utils.errors.PeerStopped) is not named while the other one's failure can still be seen: the launcher waits up to
--grace seconds for it.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from utils import quiet as quiet_module
from utils.engines import number_ranges
from utils.errors import ArgumentParser, PeerStopped, StdoutWriteError, UserError, command


def free_ports(count, host="127.0.0.1"):
    """`count` distinct ports the OS reports free on `host` (sockets kept open until all are chosen)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def visible_gpus(environ=None):
    """GPU ids the launcher may hand out: CUDA_VISIBLE_DEVICES if set (empty = none), else `nvidia-smi -L`."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        value = environ["CUDA_VISIBLE_DEVICES"].strip()
        return [gpu for gpu in value.split(",") if gpu.strip() and gpu.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(index) for index, line in enumerate(l for l in listing.splitlines() if l.startswith("GPU "))]


def worker_environments(nproc, ports, base_env, gpus, host="127.0.0.1"):
    workers = ["{}:{}".format(host, port) for port in ports]
    envs = []
    for rank in range(nproc):
        env = dict(base_env)
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}})
        env["RN50_LOCAL_RANK"] = str(rank)
        env.pop("RN50_ENGINE", None)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[rank % len(gpus)]
        env.setdefault("PYTHONUNBUFFERED", "1")
        envs.append(env)
    return envs


# What a worker prints when a peer exits while a collective is under way (seen when a Ctrl-C reached the workers
# during start-up: the peer stopped, this worker's broadcast of the initial variables was aborted; and when a peer
# was killed mid-training: its ring all-reduce aborted): TensorFlow's C++ abort lines, the gRPC detail of their
# status, and Keras' warning about a layer it could not build because that broadcast failed. After an interrupt or
# a peer's stop they are consequences of it, not failures.
_ABORT_LINE = re.compile(rb"[IWEF]\d{4} [0-9:.]+ +\d+ (?:base_collective_executor\.cc:\d+\] "
                         rb"BaseCollectiveExecutor::StartAbort |ring_alg\.cc:\d+\] Aborting Ring\w+ with )")
# The lines of TensorFlow's status text that may follow such a line (seen, 2026-12-05: the gRPC detail as
# `:{"created":...}` or `:UNKNOWN:Error received from peer {...}`, the tasks the coordination service lost).
_ABORT_CONTINUATION = re.compile(rb"Additional GRPC error information from remote target "
                                 rb"|:(?:\{\"created\":|[A-Z_]+:Error received from peer )"
                                 rb"|/job:worker/replica:\d+/task:\d+\s*$"
                                 rb"|The tasks have crashed\. Check the task logs "
                                 rb"|The error could be from a previous operation\. Restart your program to reset\.")
_UNBUILT_WARNING = re.compile(rb".*: UserWarning: Layer '.*' looks like it has unbuilt state")
_WARNING_END = b"  warnings.warn("
_ABORTED_COLLECTIVE = re.compile(rb"Collective ops is aborted by|__wrapped__Collective\w*")
_ALWAYS_SHOWN = re.compile(rb"ERROR|INTERRUPTED|Traceback \(most recent call last\)")
_MAX_HELD = 40  # a warning longer than this is not the one above: shown


class AbortNoise:
    """One worker's filter of the lines above, on once the launcher has forwarded an interrupt or a worker has
    failed: `feed(line)` returns the lines to show now. An abort line goes with the status lines right after it; a
    Keras warning is held until its `warnings.warn(` line and dropped only if it names an aborted collective. Never
    dropped: ERROR and INTERRUPTED lines, and from a `Traceback` line on, all of this worker's lines (a real
    failure's traceback may quote a gRPC status too)."""

    def __init__(self):
        self.held = []
        self.dropped = 0
        self.traceback = False
        self.in_abort = False  # the last line was an abort line or its continuation

    def feed(self, line):
        if self.traceback or _ALWAYS_SHOWN.match(line):
            self.traceback = self.traceback or line.startswith(b"Traceback")
            return self.flush() + [line]
        if self.held:
            self.held.append(line)
            if line.rstrip(b"\r\n") == _WARNING_END:
                block, self.held = self.held, []
                if any(_ABORTED_COLLECTIVE.search(held) for held in block):
                    self.dropped += len(block)
                    return []
                return block
            return self.flush() if len(self.held) > _MAX_HELD else []
        if _UNBUILT_WARNING.match(line):
            self.held = [line]
            return []
        self.in_abort = bool(_ABORT_LINE.match(line) or self.in_abort and _ABORT_CONTINUATION.match(line))
        if self.in_abort:
            self.dropped += 1
            return []
        return [line]

    def flush(self):
        """The held lines, shown after all (the warning did not end as expected, or the output ended)."""
        held, self.held = self.held, []
        return held


# The lines a worker prints when something is wrong: every worker that meets the same problem (a flag value checked
# after start-up, the dataset, the checkpoint to resume) prints the same one, and so does every worker a Ctrl-C
# stops before its first step.
_REPEATABLE = re.compile(rb"(ERROR|WARNING|INTERRUPTED): ")


def _ranks(ranks):
    """"worker 1", "workers 1-3, 5" (ranks sorted, runs of consecutive ones as ranges)."""
    text = number_ranges(ranks, separator=", ")
    return ("worker " if len(ranks) == 1 else "workers ") + text


class RepeatedLines:
    """The ERROR, WARNING and INTERRUPTED lines several workers print alike, shown once: rank 0's where rank 0 says
    it too.
    `feed(rank, line)` and `end(rank)` (the worker's output ended) return the (rank, line) pairs to show now; the
    caller holds the launcher's lock. A line of rank 0 is never held (its output passes through as it comes); such
    a line of another worker is held until rank 0 says the same (it is then not shown), or that
    worker prints another line, or rank 0's output has ended, or it has waited `wait` seconds (`expire()`, which
    the launcher calls while it waits), or the launcher reports how the job ended (`release()`); then it is shown
    unless another worker's identical line already was. One worker's line is matched with at most one line of each
    other worker (a worker that says a warning twice is shown twice); lines that differ are all shown. `notes()`:
    one line per shown line that others repeated, naming them."""

    def __init__(self, wait=5.0, clock=time.monotonic):
        self.shown = {}  # the text of a repeatable line -> [[rank that showed it, ranks that said it], ...]
        self.held = {}  # rank -> [(its repeatable line not shown yet, when it came), ...]
        self.chief_ended = False
        self.wait = wait
        self.clock = clock

    def _said_before(self, rank, text):
        """Claims for `rank` the first line shown with this text that `rank` had not said: True if there is one."""
        for shown in self.shown.get(text, []):
            if rank not in shown[1]:
                shown[1].add(rank)
                return True
        return False

    def _show(self, rank, text):
        shown = [rank, {rank}]
        self.shown.setdefault(text, []).append(shown)
        return shown

    def feed(self, rank, line):
        text = line.rstrip(b"\r\n")
        if not _REPEATABLE.match(text):
            return self._release(rank) + [(rank, line)]
        if self._said_before(rank, text):
            return []
        if rank != 0:
            self.held.setdefault(rank, []).append((line, self.clock()))
            return []
        shown = self._show(rank, text)
        for other, held in self.held.items():  # the same line held from another worker: said by rank 0
            match = next((entry for entry in held if entry[0].rstrip(b"\r\n") == text), None)
            if match is not None:
                held.remove(match)
                shown[1].add(other)
        return [(rank, line)]

    def end(self, rank):
        if rank == 0:
            self.chief_ended = True
            return self.release()
        return self._release(rank) if self.chief_ended else []

    def release(self):
        """Every held line (the job's end is being reported; rank 0 will not say them now)."""
        return [pair for rank in sorted(self.held) for pair in self._release(rank)]

    def expire(self):
        """The held lines of each worker whose first held line has waited `wait` seconds."""
        now = self.clock()
        return [pair for rank in sorted(self.held) if self.held[rank] and now - self.held[rank][0][1] >= self.wait
                for pair in self._release(rank)]

    def _release(self, rank):
        shown = []
        for line, _since in self.held.pop(rank, []):
            text = line.rstrip(b"\r\n")
            if not self._said_before(rank, text):
                self._show(rank, text)
                shown.append((rank, line))
        return shown

    def notes(self):
        """For each line shown once for several workers: `runtime.launch: worker 1 printed the same ERROR line (not
        shown again)` (`... as worker 2` when not rank 0's was shown)."""
        notes = []
        for text, lines in self.shown.items():
            for shown_by, ranks in lines:
                others = ranks - {shown_by}
                if others:
                    notes.append("runtime.launch: {} printed the same {} line{} (not shown again)".format(
                        _ranks(others), _REPEATABLE.match(text).group(1).decode(),
                        "" if shown_by == 0 else " as worker {}".format(shown_by)))
        return notes


def _prefixed(rank, line):
    return ("" if rank == 0 else "[worker {}] ".format(rank)).encode() + line


class StdoutLost:
    """The launcher's stdout failed (its reader closed the pipe, `| head`; a full disk): the first failure is kept
    and `on_lost` called once (the Launcher stops its workers, which checkpoint); later lines are dropped, so the
    pumps go on draining the workers' pipes (a worker blocked on a full pipe would hang the job)."""
    error = None
    on_lost = None


def _show(pairs, quiet):
    """Writes (rank, line) pairs to stdout, each prefixed with its worker; with `quiet` rank 0's only. The caller
    holds the launcher's lock."""
    pairs = [(rank, line) for rank, line in pairs if not (rank != 0 and quiet)]
    if pairs and StdoutLost.error is None:
        try:
            sys.stdout.buffer.write(b"".join(_prefixed(rank, line) for rank, line in pairs))
            sys.stdout.buffer.flush()
        except OSError as error:
            StdoutLost.error = error
            if StdoutLost.on_lost is not None:
                StdoutLost.on_lost()


# s: how long an abort line met before the launcher knows of a failure waits for it. A worker killed with -9 resets
# its peers' connections as it exits, and a peer may print its abort lines before the killed one is reaped (a
# newcomer's audit saw six of them shown, 2026-12-07).
ABORT_SETTLE = 1.0


def _settle(interrupted, seconds=ABORT_SETTLE):
    """Waits until `interrupted()` or `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while not interrupted() and time.monotonic() < deadline:
        time.sleep(0.02)


_SIGTERM_RECEIVED = re.compile(rb"Received signal SIGTERM: ")


def _pump(stream, rank, quiet, lock, interrupted=lambda: False, filter_abort=True, repeated=None,
          terminated_by=lambda: None):
    """Copies a worker's output to stdout, prefixed. `interrupted()`: whether the launcher has forwarded an
    interrupt or a worker has failed, from when on AbortNoise filters the lines (unless `filter_abort` is False:
    --verbose). `repeated`: the launcher's RepeatedLines, shared by every worker's pump (None: every line shown).
    `terminated_by()`: the rank whose failure made the launcher send SIGTERM to the others (None before), which a
    worker's line on receiving it then names: the user sent no signal."""
    noise = AbortNoise()

    def take(lines):
        with lock:
            _show([pair for line in lines for pair in (
                repeated.feed(rank, line) if repeated is not None else [(rank, line)])], quiet)

    for line in iter(stream.readline, b""):
        failed = terminated_by()
        if failed is not None and _SIGTERM_RECEIVED.match(line):
            line = "Received signal SIGTERM (sent by runtime.launch, after worker {}'s failure): ".format(
                failed).encode() + line[_SIGTERM_RECEIVED.match(line).end():]
        if filter_abort and not interrupted() and _ABORT_LINE.match(line):
            _settle(interrupted)
        take(noise.feed(line) if filter_abort and interrupted() else noise.flush() + [line])
    take(noise.flush())
    if repeated is not None:
        with lock:
            _show(repeated.end(rank), quiet)
    stream.close()
    if noise.dropped and not (rank != 0 and quiet):
        with lock:
            print("runtime.launch: {} line(s) of worker {}'s output on the collectives aborted by the interrupt or "
                  "a worker's stop not shown ({}=1 shows them)".format(noise.dropped, rank, quiet_module.VERBOSE_ENV),
                  file=sys.stderr, flush=True)


def describe_exit(code):
    if code < 0:
        try:
            return "was killed by signal {}".format(signal.Signals(-code).name)
        except ValueError:
            return "was killed by signal {}".format(-code)
    return "exited with code {}".format(code)


def _failed(codes, stopped):
    """(rank, exit code) of each worker whose exit code in `codes` (None: running) is a failure: non-zero and not
    `stopped` (the status of a worker that stopped on the forwarded Ctrl-C)."""
    return [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0, stopped)]


BAD_INPUT_WAIT = 5.0  # s: Launcher._cause
REPEAT_WAIT = 5.0  # s: how long another worker's ERROR / WARNING line waits for rank 0 to say the same


class Launcher:
    def __init__(self, command, nproc, quiet_workers=False, grace=10.0):
        self.command = command
        self.nproc = nproc
        self.quiet_workers = quiet_workers
        self.grace = grace
        self.processes = []
        self.threads = []
        self.forwarded = set()  # the signals forwarded to the workers
        self.interrupted = False  # a signal to the launcher was forwarded (not the SIGTERM after a failure)
        self._chief_stopped_at = None  # when rank 0 stopped on a forwarded signal
        self._left_behind = set()  # the ranks killed after it (_kill_workers_left_behind): stopped, not failed
        self._terminated_by = None  # the rank whose failure made terminate_all stop the others
        self.filter_abort = not quiet_module.verbose_requested(command)
        # the ERROR / WARNING lines several workers print, shown once (with --quiet_workers only rank 0's are)
        self.repeated = None if quiet_workers else RepeatedLines(REPEAT_WAIT)
        self._lock = threading.Lock()

    def start(self):
        gpus = visible_gpus()
        if gpus and len(gpus) < self.nproc:
            print("runtime.launch: {} workers share {} GPU(s)".format(self.nproc, len(gpus)), file=sys.stderr)
        envs = worker_environments(self.nproc, free_ports(self.nproc), os.environ, gpus)
        for rank, env in enumerate(envs):
            process = subprocess.Popen(self.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
            self.processes.append(process)
            thread = threading.Thread(target=_pump, args=(process.stdout, rank, self.quiet_workers, self._lock,
                                                          self._stopping, self.filter_abort, self.repeated,
                                                          lambda: self._terminated_by),
                                      daemon=True)
            thread.start()
            self.threads.append(thread)

    def _stopping(self):
        """Whether the job is stopping: an interrupt was forwarded, or a worker has exited with a failure (killed,
        or its own ERROR), whose peers' collectives then abort. Asked by the pumps at each line: a peer's abort
        follows its death, so the dead worker has exited by the time the line is read."""
        return self.interrupted or any(process.poll() not in (None, 0) for process in self.processes)

    def forward(self, signum, _frame=None):
        """The launcher's handler of SIGINT, SIGTERM, SIGUSR1 and SIGHUP: the signal to every worker."""
        self.interrupted = True
        self._send(signum)

    def _send(self, signum):
        self.forwarded.add(signum)
        for process in self.processes:
            if process.poll() is None:
                try:
                    process.send_signal(signum)
                except ProcessLookupError:
                    pass

    def terminate_all(self, failed=None):
        """SIGTERM to the workers still running (`failed`: the rank whose failure stops them, which their line on
        the signal then names), SIGKILL to those left after --grace seconds."""
        if failed is not None:
            self._terminated_by = failed
        self._send(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(p.poll() is None for p in self.processes):
            time.sleep(0.1)
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait()

    def stdout_lost(self):
        """The launcher's stdout failed: the workers' output has nowhere to go, so they stop as one process whose
        stdout failed does, at the next step, with a checkpoint (SIGTERM, as a forwarded signal)."""
        self.interrupted = True
        self._send(signal.SIGTERM)

    def wait(self):
        """Exit status of the job: 0 when every worker exited 0; after a forwarded Ctrl-C, 130 once every worker
        has stopped (each checkpoints first: none is cut short); else non-zero after stopping the others. When the
        launcher's stdout failed, the workers stopped (stdout_lost) and the job ends as a tool whose stdout failed
        (utils/errors.StdoutWriteError)."""
        status = self._wait()
        if StdoutLost.error is not None:
            error = StdoutWriteError(StdoutLost.error, None)
            error.kept = "the workers were sent SIGTERM (a training stops at its next step, with a checkpoint): run " \
                         "the same command again to resume"
            raise error
        return status

    def _wait(self):
        while True:
            # A worker that stopped on the Ctrl-C forwarded to it exits with the shell's status for SIGINT.
            stopped = 128 + signal.SIGINT if signal.SIGINT in self.forwarded else None
            codes = [(stopped or 0) if rank in self._left_behind else process.poll()
                     for rank, process in enumerate(self.processes)]
            failed = _failed(codes, stopped)
            if failed:
                rank, code = self._cause(failed, stopped)
                # its last lines (the ERROR line saying why) before the line naming it, and the lines other workers
                # said alike shown once, before it too
                self.threads[rank].join(timeout=2)
                running = any(process.poll() is None for process in self.processes)
                message = "runtime.launch: worker {} (rank {}, pid {}) {}{}".format(
                    rank, rank, self.processes[rank].pid, describe_exit(code),
                    "; terminating the other workers" if running else "")
                with self._lock:
                    _show(self._repeated("release"), self.quiet_workers)
                    print(message, file=sys.stderr, flush=True)
                self.terminate_all(rank)
                self._end_output()
                with self._lock:
                    print("runtime.launch: job failed: worker {} {}".format(rank, describe_exit(code)),
                          file=sys.stderr, flush=True)
                return code if code > 0 else 128 - code
            if all(code is not None for code in codes):
                self._end_output()
                return max(codes)  # 0, or 130 when a worker stopped on the Ctrl-C
            self._kill_workers_left_behind(codes, stopped)
            with self._lock:
                _show(self._repeated("expire"), self.quiet_workers)
            time.sleep(0.2)

    def _kill_workers_left_behind(self, codes, stopped):
        """After a forwarded signal rank 0 stops with its checkpoint written; a worker still running --grace seconds
        later is blocked where no signal reaches it (in a collective its peer left: a Ctrl-C during start-up), and
        has nothing to save: it is killed, said once, and the job ends with the stop's status."""
        if not self.interrupted or codes[0] not in (0, stopped):
            return
        if self._chief_stopped_at is None:
            self._chief_stopped_at = time.monotonic()
        if time.monotonic() - self._chief_stopped_at < self.grace:
            return
        for rank, process in enumerate(self.processes):
            if process.poll() is None:
                with self._lock:
                    print("runtime.launch: worker {} (pid {}) had not stopped {:g} s after rank 0 stopped on the "
                          "signal (blocked in a collective rank 0 left; it had nothing to save): killed".format(
                              rank, process.pid, self.grace), file=sys.stderr, flush=True)
                process.kill()
                process.wait()
                self._left_behind.add(rank)

    def _cause(self, failed, stopped):
        """(rank, exit code) of the worker whose failure stopped the job, among `failed` ones. A worker that stopped
        because another did exits with PeerStopped's status: while only such workers have failed, the others get up
        to --grace seconds to show the cause (the worker that could not start, failed or was killed). A worker that
        stopped on bad input (UserError's status, its ERROR line) found what the others usually find too (a flag
        value, the dataset, the checkpoint): they get up to BAD_INPUT_WAIT s (at most --grace) to stop on their own
        rather than be terminated before they say it, and the lowest rank that failed is named."""
        deadline = time.monotonic() + self.grace
        while all(code == PeerStopped.status for _, code in failed) and time.monotonic() < deadline and \
                any(process.poll() is None for process in self.processes):
            time.sleep(0.1)
            failed = _failed([process.poll() for process in self.processes], stopped)
        deadline = time.monotonic() + min(self.grace, BAD_INPUT_WAIT)
        while any(code == UserError.status for _, code in failed) and time.monotonic() < deadline and \
                any(process.poll() is None for process in self.processes):
            time.sleep(0.1)
            failed = _failed([process.poll() for process in self.processes], stopped)
        return next(((rank, code) for rank, code in failed if code != PeerStopped.status), failed[0])


    def _join_output(self):
        for thread in self.threads:
            thread.join(timeout=5)

    def _end_output(self):
        """The workers' last lines, then which workers printed an ERROR / WARNING line already shown."""
        self._join_output()
        with self._lock:
            _show(self._repeated("release"), self.quiet_workers)
            for note in self._repeated("notes"):
                print(note, file=sys.stderr, flush=True)

    def _repeated(self, method):
        return [] if self.repeated is None else getattr(self.repeated, method)()


def parse_args(argv=None):
    parser = ArgumentParser(
        prog="python -m runtime.launch",
        description="Run N training workers on this machine (MultiWorkerMirroredStrategy over loopback).",
        allow_abbrev=False)
    parser.add_argument("--nproc", "-np", type=int, required=True, help="number of workers (one per GPU)")
    parser.add_argument("--quiet_workers", action="store_true", help="drop the output of workers other than rank 0")
    parser.add_argument("--grace", type=float, default=10.0,
                        help="seconds the other workers get to stop after one failed, before SIGKILL")
    parser.add_argument("script", help="the Python script every worker runs (main.py)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args(argv)
    if args.nproc < 1:
        parser.error("--nproc must be at least 1")
    return args


def check_script_args(script, script_args, nproc=1):
    """main.py's flags checked once here (runtime/settings.parse, no TensorFlow), so bad input is one error line
    rather than one per worker; so is an inference mode, which runs in one process."""
    if os.path.basename(script) == "main.py":
        from runtime import settings
        _, config, _ = settings.parse(script_args)
        settings.check_single_process(config, nproc)
        if not config.cpu and not visible_gpus():  # (a recipe for 8 GPUs run here: 8 CPU workers, said once)
            print("runtime.launch: no GPU visible: the {} workers run on the CPU (pass --cpu to say the CPU is "
                  "meant)".format(nproc), file=sys.stderr)


@command
def main(argv=None):
    args = parse_args(argv)
    check_script_args(args.script, args.script_args, args.nproc)
    launcher = Launcher([sys.executable, "-u", args.script, *args.script_args], args.nproc,
                        quiet_workers=args.quiet_workers, grace=args.grace)
    # SIGHUP: the terminal the launcher runs in closed; the workers, in their own sessions, do not get it themselves.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
        if signal.getsignal(signum) != signal.SIG_IGN:  # one the parent set to be ignored stays ignored
            signal.signal(signum, launcher.forward)
    StdoutLost.error, StdoutLost.on_lost = None, launcher.stdout_lost
    launcher.start()
    return launcher.wait()


if __name__ == "__main__":
    sys.exit(main())
