"""Shared pieces of the reliability tests (tests/test_reliability_*.py): run main.py (in subprocesses where they
are signalled or killed at chosen moments, in-process otherwise), and compare checkpoints tensor by tensor."""
import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np

from tests._cli import child_env, main_in_process, run_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES = 11  # tests/_data_helpers.py writes labels 1..10
SMALL = ["--num_classes", str(NUM_CLASSES), "--image_size", "32", "--weight_init", "fan_in",
         "--lr_warmup_epochs", "0", "--display_every", "1", "--no_progress"]


def env(**extra):
    return child_env(**extra)


def run(args, check=True, timeout=900, umask=None, script="main.py"):
    """`python <script> args` in a child process (tests/_cli.run_script)."""
    return run_script(script, *args, check=check, timeout=timeout, umask=umask)


class Process:
    """main.py (or another command) in the background with stdout/stderr going to files we can poll."""

    def __init__(self, args, workdir, name, command=None, new_session=False, extra_env=None):
        """`new_session`: the process leads its own process group, so that `signal_group` reaches it and every
        process it started, as a terminal's Ctrl-C does. `extra_env`: variables added to its environment."""
        self.out_path = os.path.join(str(workdir), name + ".out")
        self.err_path = os.path.join(str(workdir), name + ".err")
        self._out = open(self.out_path, "w")
        self._err = open(self.err_path, "w")
        command = command or [sys.executable, "main.py"]
        self.popen = subprocess.Popen([*command, *map(str, args)], cwd=ROOT, env=env(**(extra_env or {})), stdout=self._out,
                                      stderr=self._err, start_new_session=new_session)

    def stdout(self):
        with open(self.out_path) as handle:
            return handle.read()

    def stderr(self):
        with open(self.err_path) as handle:
            return handle.read()

    def wait_for(self, predicate, timeout=600, poll=0.01, what="condition"):
        """Polls `predicate()` until true; fails if the process ends first or on timeout."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.popen.poll() is not None:
                raise AssertionError("process ended ({}) before {}:\n{}\n{}".format(
                    self.popen.returncode, what, self.stdout()[-3000:], self.stderr()[-3000:]))
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("timeout waiting for {}".format(what))
            time.sleep(poll)

    def signal(self, signum):
        self.popen.send_signal(signum)

    def signal_group(self, signum):
        """`signum` to the process group the process leads (needs `new_session`)."""
        os.killpg(self.popen.pid, signum)

    def kill(self):
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()

    def finish(self, timeout=600):
        try:
            self.popen.wait(timeout=timeout)
        finally:
            self.kill()
            self._out.close()
            self._err.close()
        return self.popen.returncode


def checkpoint_steps(model_dir):
    return sorted(int(p.rsplit("-", 1)[1].split(".")[0])
                  for p in glob.glob(os.path.join(str(model_dir), "model.ckpt-*.index")))


def latest_checkpoint(model_dir):
    import tensorflow as tf
    return tf.train.latest_checkpoint(str(model_dir))


def read_all_tensors(path):
    """Every tensor of a checkpoint (raises if any file is missing, truncated or fails its checksum); for the
    object-based format of earlier versions, not `save_counter` (bookkeeping that differs after a resume)."""
    import tensorflow as tf
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not name.startswith("save_counter/")}


def _comparable_metadata(path, tensors):
    """The metadata record of checkpoint `path` with its `images_seen` record (the images seen at the first step of
    the run that wrote it: another step after a resume) replaced by the images seen by the checkpoint's step,
    which an exact resume leaves as they were, and without its `lineage` (the ids of the training and of the
    session that wrote it: new in every run)."""
    import json
    from model import checkpoint
    from runtime import settings
    meta = json.loads(tensors.pop(checkpoint.METADATA_KEY).decode("utf-8"))
    meta.pop("lineage", None)
    if "images_seen" in meta.get("training", {}):
        meta["training"]["images_seen"] = settings.images_seen(checkpoint.inspect(path))
    return meta


def assert_checkpoints_identical(path_a, path_b):
    from model import checkpoint
    a, b = read_all_tensors(path_a), read_all_tensors(path_b)
    assert sorted(a) == sorted(b)
    if checkpoint.METADATA_KEY in a:
        assert _comparable_metadata(path_a, a) == _comparable_metadata(path_b, b)
        keys = sorted(a) + [checkpoint.METADATA_KEY]
    else:
        keys = sorted(a)
    different = [name for name in a if not np.array_equal(a[name], b[name])]
    assert not different, "{} of {} tensors differ, e.g. {}".format(len(different), len(a), different[:5])
    return sorted(keys)


def run_cases(cases):
    """Several main.py runs that each end in a message, called in this process (tests/_cli.main_in_process);
    [{"rc", "out", "err"}] in order."""
    results = []
    for case in cases:
        result = main_in_process(*case, check=False)
        results.append({"rc": result.returncode, "out": result.stdout, "err": result.stderr})
    return results


class _FullDiskFile:
    """A file opened for writing on a full disk: created, empty, and every write fails with ENOSPC. It has no
    fileno, so shutil copies through its write too."""

    def __init__(self, handle):
        self._handle = handle

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self._handle.close()

    def close(self):
        self._handle.close()

    def fileno(self):
        import io
        raise io.UnsupportedOperation("fileno")

    def write(self, _):
        import errno
        raise OSError(errno.ENOSPC, "No space left on device")

    writelines = write

    def flush(self):
        pass


def full_disk_for(monkeypatch, matches):
    """Files opened for writing through `open` whose path `matches(path)` behave as on a full disk (created empty,
    writes fail with ENOSPC); every other file is opened as usual."""
    import builtins
    real_open = builtins.open

    def fake_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        writing = any(flag in mode for flag in "wax+")
        return _FullDiskFile(handle) if writing and isinstance(file, (str, os.PathLike)) and matches(
            os.fspath(file)) else handle

    monkeypatch.setattr(builtins, "open", fake_open)
