"""A run owns its model_dir: an advisory lock file `<model_dir>/.run.lock` that a second training run into the
same directory finds taken, so that two runs never write checkpoints over each other (docs/RELIABILITY.md).

    with RunLock(config.model_dir):
        runner.train(...)

How it works: the file is opened (created if absent) and locked with `fcntl.flock(LOCK_EX | LOCK_NB)`; the holder
then writes a JSON line into it (pid, host, start time, command line) for the messages. The kernel releases a
flock when the process ends in any way, `kill -9` included, so:
- flock refused: another run holds it -> UserError `model_dir <dir> is in use by another run (pid P on host H,
  started T); wait for it to end or use another --model_dir`;
- flock granted on a file that still holds a holder's JSON: that run ended without releasing (killed) -> taken
  over with one line `WARNING: taking over the lock of a run that is gone (pid P on host H, started T)`;
- release (normal end, error, interrupt: the `with` block's exit) deletes the file, then drops the flock. A run
  that acquires checks after locking that the path still names the file it locked (a releasing run may have
  deleted it in between) and starts over if not, so two runs can never both hold the lock.

The lock is advisory: it stops our own runs, not other programs writing into the directory. Locks are per open
file description: two RunLock objects in one process conflict like two processes (a process that forks without
exec shares its lock with the child; the file descriptor is not inherited across exec).

Network file systems: flock is only as good as the file system's lock support. On a local file system it is
exact. On NFS, Linux maps flock to NFS byte-range locks, which reach other hosts only when the lock service works
(NFSv4, or lockd for v3); some file systems (CIFS/SMB mounts, several FUSE file systems, Lustre mounted with
`localflock`) lock only within one host, so two hosts can both acquire. Where flock fails outright (ENOLCK,
EOPNOTSUPP) the run goes on unprotected with a WARNING line. A lock file naming another host cannot be checked for
life from here: when its flock is free it is taken over with a warning that says to make sure that run has ended.
"""

import datetime
import errno
import fcntl
import json
import os
import socket
import sys

from utils.errors import UserError

LOCK_NAME = ".run.lock"
_READ_LIMIT = 65536
_ACQUIRE_ATTEMPTS = 20  # each retry means another run released (deleted) the file between our open and lock
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}


def _print_stderr(message):
    print(message, file=sys.stderr, flush=True)


def describe_holder(holder):
    """`pid P on host H, started T` from a lock file's JSON (dict), as far as it is known."""
    if not isinstance(holder, dict):
        return "details unknown: the lock file is being written or is not ours"
    text = "pid {} on host {}".format(holder.get("pid", "?"), holder.get("host", "?"))
    if holder.get("started"):
        text += ", started {}".format(holder["started"])
    return text


class RunLock:
    """Exclusive ownership of `model_dir` for one run. `acquire()` (or `with RunLock(dir):`) creates model_dir if
    needed and takes the lock or raises UserError (in use, or the directory cannot be written); `release()` is
    idempotent. `warn(line)` gets the one-line warnings (takeover, no lock support); default: stderr.

    `held` tells whether this object holds the lock (False after a failed acquire or on a file system without
    lock support)."""

    def __init__(self, model_dir, warn=None, argv=None, flag="--model_dir", subject=None, remedy=None):
        self.model_dir = model_dir
        self.flag = flag  # the flag that named the directory, for the messages (--results_dir for a log's)
        # what the in-use message calls the directory and how it says to go on, where the flag names no directory
        # (inference.py's --log-path: "the directory of --log-path", "give --log-path a file in another directory")
        self.subject = subject or flag.lstrip("-")
        self.remedy = remedy or "use another " + flag
        self.path = os.path.join(model_dir, LOCK_NAME)
        self._warn = warn or _print_stderr
        self._argv = list(sys.argv if argv is None else argv)
        self._fd = None
        self._created = []
        self.held = False

    # ------------------------------------------------------------------ public
    def acquire(self):
        if self._fd is not None:
            raise RuntimeError("RunLock for {} is already acquired".format(self.model_dir))
        self._created = missing_directories(self.model_dir)
        try:
            os.makedirs(self.model_dir, exist_ok=True)
        except OSError as error:
            raise UserError("cannot create {} {}: {}".format(self.flag, self.model_dir, error.strerror or error)) \
                from None
        for _ in range(_ACQUIRE_ATTEMPTS):
            fd = self._open()
            try:
                locked = self._lock(fd)
            except BaseException:
                os.close(fd)
                raise
            if locked is None:  # no lock support here: go on unprotected (warned), leaving no empty lock file
                if os.fstat(fd).st_size == 0:
                    _remove_quietly(self.path)
                os.close(fd)
                self._created = []
                return self
            if self._is_current(fd):
                self._fd = fd
                break
            os.close(fd)  # the file was deleted by a releasing run after we opened it: open the new one
        else:
            raise UserError("cannot lock {} {}: {} keeps being replaced".format(self.flag, self.model_dir, self.path))
        try:
            self._take(fd)
        except BaseException:
            self.release()
            raise
        self.held = True
        return self

    def release(self):
        """Deletes the lock file (while still holding the lock) and drops the lock; then removes the directories
        `acquire` created if the run left them empty (a run refused on bad input leaves no model_dir behind).
        Safe to call twice."""
        fd, self._fd = self._fd, None
        self.held = False
        if fd is None:
            return
        try:
            if self._is_current(fd):
                os.unlink(self.path)
        except OSError:
            pass  # the directory went away or became read-only; the kernel still drops the lock below
        finally:
            os.close(fd)
        created, self._created = self._created, []
        for directory in created:  # deepest first
            try:
                os.rmdir(directory)
            except OSError:  # not empty (the run wrote into it), or gone: keep the rest too
                break

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False

    # ------------------------------------------------------------------ steps
    def _open(self):
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise UserError("cannot create the lock file {} in {}: {}".format(
                self.path, self.flag, error.strerror or error)) from None

    def _lock(self, fd):
        """True when locked; raises UserError when another run holds it; None when the file system cannot lock."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            raise UserError("{} {} is in use by another run ({}); wait for it to end or {}".format(
                self.subject, self.model_dir, describe_holder(_read_holder(fd)), self.remedy)) from None
        except OSError as error:
            if error.errno not in _UNSUPPORTED:
                raise UserError("cannot lock {} {}: {}".format(self.flag, self.model_dir, error.strerror or error)) \
                    from None
            self._warn("WARNING: the file system of {} {} cannot lock files ({}); this run is not "
                       "protected against another run writing into the same directory".format(
                           self.flag, self.model_dir, error.strerror or error))
            return None

    def _is_current(self, fd):
        """The path still names the file `fd` is open on (not deleted or replaced by another run's release)."""
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)

    def _take(self, fd):
        """We hold the flock: warn if a previous holder's record is there (it died), then write ours."""
        previous = _read_holder(fd)
        if previous is not None:
            host = socket.gethostname()
            if isinstance(previous, dict) and previous.get("host") not in (None, host):
                self._warn("WARNING: taking over the lock of a run on another host ({}); this host cannot tell "
                           "whether it still runs (locks may not reach across hosts on network file systems): "
                           "make sure it has ended".format(describe_holder(previous)))
            else:
                self._warn("WARNING: taking over the lock of a run that is gone ({})".format(
                    describe_holder(previous)))
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                  "command": self._argv, "model_dir": os.path.abspath(self.model_dir)}
        data = (json.dumps(record) + "\n").encode("utf-8")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError as error:
            raise UserError("cannot write the lock file {}: {}".format(self.path, error.strerror or error)) \
                from None


def _remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def missing_directories(path):
    """The directories `os.makedirs(path)` would create, deepest first (the run lock's and an export's, which
    remove them again when a run leaves them empty)."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _read_holder(fd):
    """The JSON record in the lock file: a dict, None when the file is empty, or "" when it cannot be parsed
    (being written, or not ours)."""
    try:
        data = os.pread(fd, _READ_LIMIT, 0)
    except OSError:
        return ""
    if not data.strip():
        return None
    try:
        holder = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return ""
    return holder if isinstance(holder, dict) else ""


def read_lock(model_dir):
    """The record of the run holding (or last holding, if it died) model_dir's lock, or None (for messages and
    tests; it does not tell whether that run is alive)."""
    try:
        with open(os.path.join(model_dir, LOCK_NAME), "rb") as handle:
            holder = json.loads(handle.read().decode("utf-8") or "null")
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def live_holder(model_dir):
    """The record of the live run holding model_dir's lock (a dict; {} when its record cannot be read), or None when
    no run holds it (no lock file, or one a killed run left). Unlike read_lock it asks the kernel: a shared flock
    that is refused means a run holds the lock now. For tools that write into or report on a directory a training
    may own; a RunLock of this process counts as a holder too."""
    try:
        fd = os.open(os.path.join(model_dir, LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            return holder if isinstance(holder, dict) else {}
        except OSError:  # no lock support here: nothing can be told
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
