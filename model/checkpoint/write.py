"""Writing checkpoints in the named format: the metadata record, the atomic save, the `checkpoint` state file, and
CheckpointWriter's retention."""
import errno
import glob
import json
import os
import shutil
import time

import tensorflow as tf

from model.checkpoint.read import METADATA_KEY
from utils.errors import UserError, first_line

CHECKPOINT_PREFIX = "model.ckpt"
# 2 adds `training`, the training flags of the run that wrote it (QAT, EMA); version 1 is read the same way, with
# no training flags recorded.
METADATA_VERSION = 2


def metadata(arch, num_classes, image_size, use_final_conv, input_normalized, training_state=None):
    """The checkpoint_metadata record; `training_state`: {RunConfig field: value} of the training flags of the run
    that writes it, so a resume continues with the same QAT and EMA settings (runtime/settings.training_state)."""
    record = {"version": METADATA_VERSION, "arch": arch, "num_classes": int(num_classes),
              "image_size": int(image_size) if image_size else None, "use_final_conv": bool(use_final_conv),
              "input_normalized": bool(input_normalized)}
    if training_state:
        record["training"] = dict(training_state)
    return record


def write(prefix, entries, meta=None):
    """Write {key: variable or array} and the metadata (if any) as a checkpoint at `prefix`, atomically: the shards
    are written under `<prefix>_temp/`, each fsynced, then renamed into place data first and index last, and the
    directory is fsynced, so neither a killed save nor a power loss leaves a complete-looking checkpoint. The state file is not touched (CheckpointWriter does that). A write that
    fails (a full disk, a directory that cannot be written) is a UserError; the temporary shards are removed."""
    temporary = prefix + "_temp"
    try:
        shutil.rmtree(temporary, ignore_errors=True)
        os.makedirs(temporary)
        keys = sorted(entries)
        with tf.device("/cpu:0"):
            tensors = [tf.convert_to_tensor(entries[key]) for key in keys]
            if meta is not None:
                keys.append(METADATA_KEY)
                tensors.append(tf.constant(json.dumps(meta, sort_keys=True)))
            tf.raw_ops.SaveV2(prefix=os.path.join(temporary, "part"), tensor_names=keys,
                              shape_and_slices=[""] * len(keys), tensors=tensors)
        written = os.listdir(temporary)
        for name in sorted(written, key=lambda n: n.endswith(".index")):
            source = os.path.join(temporary, name)
            with open(source, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(source, prefix + name[len("part"):])
        sync_directory(os.path.dirname(prefix) or ".")
    except (OSError, tf.errors.OpError) as error:
        raise UserError(f"cannot write checkpoint {prefix} ({first_line(error)})") from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return prefix


def write_state_file(directory, names, timestamps=None, last_preserved=None):
    """The `checkpoint` state file (a CheckpointState text proto; the last name is the latest), replaced atomically.
    Names are basenames, so the directory can be moved. Written here because TF's update_checkpoint_state is
    deprecated and says so on stderr."""
    lines = [f"model_checkpoint_path: {json.dumps(names[-1])}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(name)}" for name in names]
    lines += [f"all_model_checkpoint_timestamps: {stamp!r}" for stamp in timestamps or ()]
    if last_preserved is not None:
        lines.append(f"last_preserved_timestamp: {last_preserved!r}")
    path = os.path.join(directory, "checkpoint")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".tmp", path)
    sync_directory(directory)


def _remove_if_present(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def sync_directory(directory):
    """fsync `directory` itself: a rename is durable only once the directory holding it is, so after a power loss
    the state file never names a checkpoint whose files' entries were lost. A file system that cannot sync a
    directory (EINVAL, ENOTSUP: some network and FUSE file systems) is left as it is."""
    descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(descriptor)


def remove_save_debris(directory):
    """A save killed midway leaves `<prefix>-N_temp/` (never read, but large)."""
    for debris in glob.glob(os.path.join(glob.escape(directory), CHECKPOINT_PREFIX + "-*_temp")):
        shutil.rmtree(debris, ignore_errors=True)


def _identity(directory):
    """(device, inode) of `directory`, or None when it does not exist."""
    try:
        status = os.stat(directory)
    except OSError:
        return None
    return status.st_dev, status.st_ino


class CheckpointWriter:
    """Saves the training state as `<model_dir>/model.ckpt-<step>` and keeps the `checkpoint` state file: the
    newest `max_to_keep`, plus one every `keep_every_hours` (tf.train.CheckpointManager's rule)."""

    def __init__(self, directory, entries, meta, max_to_keep=5, keep_every_hours=3.0):
        self.directory = directory
        self.entries = entries
        self.meta = meta
        self.max_to_keep = max_to_keep
        self.keep_every_seconds = keep_every_hours * 3600.0
        self._kept = []            # [(basename, timestamp)], oldest first
        self._last_preserved = time.time()
        self._identity = _identity(directory)  # the directory it writes into, once it exists
        state = tf.compat.v1.train.get_checkpoint_state(directory) if os.path.isdir(directory) else None
        if state is not None:
            stamps = list(state.all_model_checkpoint_timestamps) or [time.time()] * len(
                state.all_model_checkpoint_paths)
            self._kept = [(os.path.basename(p), t) for p, t in zip(state.all_model_checkpoint_paths, stamps)]
            self._last_preserved = state.last_preserved_timestamp or self._last_preserved

    @property
    def latest_checkpoint(self):
        return os.path.join(self.directory, self._kept[-1][0]) if self._kept else None

    def save(self, step):
        name = f"{CHECKPOINT_PREFIX}-{step}"
        prefix = os.path.join(self.directory, name)
        listed_before = any(kept == name for kept, _ in self._kept)
        self._check_still_there()
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._identity = self._identity or _identity(self.directory)
            write(prefix, self.entries, dict(self.meta, step=int(step)))
        except (OSError, tf.errors.OpError, UserError) as error:
            shutil.rmtree(prefix + "_temp", ignore_errors=True)
            if not listed_before:
                self._remove_files(name)
            reason = (error if isinstance(error, UserError) else
                      f"cannot write checkpoint {prefix} ({first_line(error)})")
            raise UserError(f"{reason}; {self._kept_phrase()}") from None
        kept = [(other, stamp) for other, stamp in self._kept if other != name] + [(name, time.time())]
        last_preserved, dropped = self._last_preserved, []
        while len(kept) > self.max_to_keep:
            old, stamp = kept.pop(0)
            if stamp - last_preserved >= self.keep_every_seconds:
                last_preserved = stamp  # kept on disk, no longer listed
                continue
            dropped.append(old)
        state_file = os.path.join(self.directory, "checkpoint")
        try:
            write_state_file(self.directory, [other for other, _ in kept], [stamp for _, stamp in kept],
                             last_preserved)
        except OSError as error:
            # The state file is replaced by a rename: unless that rename happened (and only the directory's fsync
            # failed), it still names the previous list, so the new checkpoint is unlisted and only holds space.
            _remove_if_present(state_file + ".tmp")
            if self._state_file_latest() == name:
                self._kept, self._last_preserved = kept, last_preserved
            elif not listed_before:
                self._remove_files(name)
            raise UserError(f"cannot write the checkpoint state file {state_file} ({first_line(error)}); "
                            f"{self._kept_phrase()}") from None
        # Old checkpoints go only once the state file no longer names them.
        self._kept, self._last_preserved = kept, last_preserved
        for old in dropped:
            self._remove_files(old)
        return prefix

    def _remove_files(self, name):
        for path in glob.glob(os.path.join(glob.escape(self.directory), glob.escape(name)) + ".*"):
            os.remove(path)

    def _state_file_latest(self):
        """The basename of the latest checkpoint the state file on disk names, or None."""
        try:
            state = tf.compat.v1.train.get_checkpoint_state(self.directory)
        except (OSError, tf.errors.OpError, ValueError):
            return None
        return os.path.basename(state.model_checkpoint_path) if state is not None else None

    def _check_still_there(self):
        """UserError when the directory this writer wrote into is gone or is another one (moved, renamed or deleted
        while the run was going): a save would create a new directory at the old path, and the training's
        checkpoints would be split between the two."""
        if self._identity is not None and _identity(self.directory) != self._identity:
            raise UserError(f"cannot write checkpoint {os.path.join(self.directory, CHECKPOINT_PREFIX)}-...: "
                            f"{self._gone_phrase()}")

    def _gone_phrase(self):
        return (f"model_dir {self.directory} is {'another directory' if os.path.isdir(self.directory) else 'gone'} "
                "now: it was moved, renamed or deleted while the run was going, with its checkpoints; resume with "
                "--model_dir where it went")

    def _kept_phrase(self):
        if self._identity is not None and _identity(self.directory) != self._identity:
            return self._gone_phrase()
        latest = self.latest_checkpoint
        return (f"the last complete checkpoint is kept: {latest}" if latest else
                "no earlier checkpoint exists")

    def discard_only(self, prefix):
        """Deletes checkpoint `prefix`, the only one this writer keeps (a run's start that no step followed), and
        the state file that names it, so the directory holds no checkpoint again."""
        if [os.path.join(self.directory, kept) for kept, _ in self._kept] != [prefix]:
            raise ValueError(f"{prefix} is not the only checkpoint of {self.directory}")
        os.remove(os.path.join(self.directory, "checkpoint"))
        for path in glob.glob(glob.escape(prefix) + ".*"):
            os.remove(path)
        self._kept = []
