"""utils/run_lock.py: a run owns its model_dir (docs/RELIABILITY.md#a-run-owns-its-model_dir)."""
import errno
import json
import os
import signal
import socket
import sys

import pytest

from tests._cli import main_in_process
from tests._reliability_helpers import ROOT, SMALL, NUM_CLASSES, Process
from utils import run_lock
from utils.errors import UserError
from utils.run_lock import LOCK_NAME, RunLock, read_lock

pytestmark = pytest.mark.shallow

HOLD_LOCK = ("import sys, time; sys.path.insert(0, {root!r}); from utils.run_lock import RunLock; "
             "RunLock(sys.argv[1]).acquire(); print('locked', flush=True); time.sleep(120)")


def test_a_second_lock_on_the_same_dir_is_refused_until_the_first_is_released(tmp_path):
    model_dir = str(tmp_path / "model")
    first = RunLock(model_dir, argv=["main.py", "--mode", "train"]).acquire()
    assert first.held and os.path.isdir(model_dir)
    record = read_lock(model_dir)
    assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
    assert record["command"] == ["main.py", "--mode", "train"] and record["started"]
    # flock locks belong to the open file description: a second open in the same process conflicts too.
    second = RunLock(model_dir)
    with pytest.raises(UserError) as refused:
        second.acquire()
    message = str(refused.value)
    assert message.startswith("model_dir {} is in use by another run (pid {} on host {}, started {})".format(
        model_dir, os.getpid(), socket.gethostname(), record["started"]))
    assert message.endswith("; wait for it to end or use another --model_dir") and "\n" not in message
    assert not second.held and read_lock(model_dir)["pid"] == os.getpid()  # the refused run changed nothing

    first.release()
    first.release()  # idempotent
    assert not os.path.exists(os.path.join(model_dir, LOCK_NAME))
    assert not os.path.exists(model_dir)  # created by the lock and left empty: removed
    with RunLock(model_dir) as third:
        assert third.held
        with open(os.path.join(model_dir, "checkpoint"), "w") as handle:
            handle.write("the run's output")
    assert os.listdir(model_dir) == ["checkpoint"]  # only the lock file is gone


def test_an_existing_empty_model_dir_is_kept(tmp_path):
    with RunLock(str(tmp_path / "model" / "deeper")):
        assert os.path.isdir(tmp_path / "model" / "deeper")
    assert os.listdir(tmp_path) == []  # both levels it created are removed
    (tmp_path / "existing").mkdir()
    with RunLock(str(tmp_path / "existing")):
        pass
    assert os.listdir(tmp_path / "existing") == []


@pytest.mark.parametrize("stop", [KeyboardInterrupt, UserError])
def test_the_lock_is_released_when_the_run_ends_by_an_error_or_interrupt(tmp_path, stop):
    with pytest.raises(stop):
        with RunLock(str(tmp_path)):
            raise stop("stopped")
    assert not os.path.exists(tmp_path / LOCK_NAME)
    RunLock(str(tmp_path)).acquire().release()


def test_a_lock_left_by_a_killed_run_is_taken_over_with_a_warning(tmp_path):
    model_dir = str(tmp_path / "model")
    holder = Process([model_dir], tmp_path, "holder",
                     command=[sys.executable, "-c", HOLD_LOCK.format(root=ROOT)])
    try:
        holder.wait_for(lambda: "locked" in holder.stdout(), timeout=60, what="the child's lock")
        with pytest.raises(UserError, match=r"in use by another run \(pid {} on host".format(holder.popen.pid)):
            RunLock(model_dir).acquire()
        holder.signal(signal.SIGKILL)
    finally:
        holder.finish(timeout=30)
    assert read_lock(model_dir)["pid"] == holder.popen.pid  # kill -9: the file stays, the kernel dropped the flock
    warnings = []
    with RunLock(model_dir, warn=warnings.append) as lock:
        assert lock.held and read_lock(model_dir)["pid"] == os.getpid()
    assert len(warnings) == 1
    assert warnings[0].startswith("WARNING: taking over the lock of a run that is gone (pid {} on host {}".format(
        holder.popen.pid, socket.gethostname()))


def test_live_holder_names_a_run_holding_the_lock_and_not_one_that_died(tmp_path):
    """For the tools that write into or read from a directory a training may own: read_lock also returns the record
    a killed run left."""
    model_dir = str(tmp_path / "model")
    assert run_lock.live_holder(model_dir) is None  # no directory, no lock file
    holder = Process([model_dir], tmp_path, "holder",
                     command=[sys.executable, "-c", HOLD_LOCK.format(root=ROOT)])
    try:
        holder.wait_for(lambda: "locked" in holder.stdout(), timeout=60, what="the child's lock")
        assert run_lock.live_holder(model_dir)["pid"] == holder.popen.pid
        with pytest.raises(UserError, match="in use by another run"):
            RunLock(model_dir).acquire()
        holder.signal(signal.SIGKILL)
    finally:
        holder.finish(timeout=30)
    assert read_lock(model_dir)["pid"] == holder.popen.pid and run_lock.live_holder(model_dir) is None
    with RunLock(model_dir):
        assert run_lock.live_holder(model_dir)["pid"] == os.getpid()
    assert run_lock.live_holder(model_dir) is None


def test_a_lock_file_of_another_host_is_taken_over_with_a_warning_to_check_it(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 7, "host": "elsewhere", "started": "then"}))
    warnings = []
    with RunLock(str(tmp_path), warn=warnings.append):
        pass
    assert len(warnings) == 1 and "another host (pid 7 on host elsewhere, started then)" in warnings[0]
    assert "make sure it has ended" in warnings[0]


def test_an_unreadable_leftover_lock_file_is_taken_over(tmp_path):
    (tmp_path / LOCK_NAME).write_bytes(b"\x00garbage")
    warnings = []
    with RunLock(str(tmp_path), warn=warnings.append):
        assert read_lock(str(tmp_path))["pid"] == os.getpid()
    assert warnings == ["WARNING: taking over the lock of a run that is gone (details unknown: the lock file is "
                        "being written or is not ours)"]


def test_a_file_system_without_locks_runs_unprotected_with_a_warning(tmp_path, monkeypatch):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_locks)
    warnings = []
    with RunLock(str(tmp_path), warn=warnings.append) as lock:
        assert not lock.held and os.listdir(tmp_path) == []
    assert len(warnings) == 1 and warnings[0].startswith("WARNING: the file system of --model_dir")
    assert "not protected" in warnings[0]


def test_a_model_dir_that_cannot_be_created_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot create --model_dir"):
        RunLock(str(blocker / "model")).acquire()


def test_a_lock_file_deleted_between_open_and_lock_is_not_trusted(tmp_path, monkeypatch):
    """A releasing run deletes the file after our open, before our flock: we must lock the new file instead."""
    real_flock = run_lock.fcntl.flock
    calls = []

    def flock_after_a_release(fd, operation):
        if not calls:  # the first attempt: the file we opened is deleted (and a new one may appear)
            os.unlink(os.path.join(str(tmp_path), LOCK_NAME))
        calls.append(fd)
        return real_flock(fd, operation)

    monkeypatch.setattr(run_lock.fcntl, "flock", flock_after_a_release)
    with RunLock(str(tmp_path)) as lock:
        assert lock.held and len(calls) == 2
        assert read_lock(str(tmp_path))["pid"] == os.getpid()


# ----------------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_a_second_training_run_into_the_same_model_dir_is_refused(tmp_path):
    from tests._data_helpers import write_tfrecord_shards
    data_dir = tmp_path / "data"
    write_tfrecord_shards(str(data_dir), "train", 1, 16, 32, num_classes=NUM_CLASSES)
    results = tmp_path / "results"

    def train_args():
        return ["--mode", "train", "--data_dir", data_dir, "--batch_size", 4, "--num_iter", 100000,
                "--iter_unit", "batch", "--results_dir", results, "--model_dir", results, *SMALL]

    first = Process(train_args(), tmp_path, "first")
    try:
        first.wait_for(lambda: "- (0, 1) imgs_per_sec" in first.stdout(), what="the first run's step 1")
        assert read_lock(str(results))["pid"] == first.popen.pid
        second = main_in_process(*train_args(), check=False)  # the first run is the other process
        assert second.returncode == 2, second.stderr[-3000:]
        assert second.stderr.strip().splitlines() == [
            "ERROR: model_dir {} is in use by another run (pid {} on host {}, started {}); wait for it to end or "
            "use another --model_dir".format(results, first.popen.pid, socket.gethostname(),
                                             read_lock(str(results))["started"])]
        # Another model_dir but the same --results_dir: its records would interleave with the first run's log.
        other = [str(tmp_path / "other") if str(a) == str(results) and i and args[i - 1] == "--model_dir" else a
                 for args in [train_args()] for i, a in enumerate(args)]
        third = main_in_process(*other, check=False)
        assert third.returncode == 2 and third.stderr.strip().splitlines()[-1].startswith(
            "ERROR: results_dir {} is in use by another run (pid {} on host".format(results, first.popen.pid))
        assert third.stderr.strip().endswith("use another --results_dir")
        assert not (tmp_path / "other").exists()
        assert first.popen.poll() is None, "the first run must still be training"
        first.signal(signal.SIGTERM)  # end it the normal way: finish the step, checkpoint, exit 0
        assert first.finish() == 0, first.stderr()[-3000:]
    finally:
        first.kill()
    assert "training stopped by a signal at step" in first.stdout()
    assert not os.path.exists(results / LOCK_NAME)
