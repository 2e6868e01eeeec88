"""A small logger writing NVIDIA dllogger's formats (docs/ORIGINAL.md#logging); dllogger itself is not on PyPI.

stdout:  `DLL 2026-11-29 20:41:07.123456 - (0, 40) total_ips : 512.3 images/s`
file:    `DLLL {"timestamp": "...", "datetime": "...", "elapsedtime": "...", "type": "LOG", "step": [0, 40], "data": {...}}`

Each JSON line is written with a single `write` of a complete line and flushed, so a crash can at worst lose the
line being written, never leave a half line followed by more data. Non-chief ranks get a logger with no backends.
"""

import datetime
import errno
import json
import os
import sys
import time

from utils.errors import LogWriteError  # for the log file; stdout's failure (StdoutWriteError) is one too
from utils.output_paths import on_read_only_file_system

# Metadata the original declared (docs/ORIGINAL.md#logging) plus the totals we add.
DEFAULT_METADATA = {
    "train_throughput": {"unit": "images/s"},
    "train_throughput_total": {"unit": "images/s"},
    "eval_throughput": {"unit": "images/s"},
    "eval_throughput_total": {"unit": "images/s"},
    "eval_latency_avg": {"unit": "ms"},
    "eval_latency_p90": {"unit": "ms"},
    "eval_latency_p95": {"unit": "ms"},
    "eval_latency_p99": {"unit": "ms"},
    "top1_accuracy": {"unit": None},
    "top5_accuracy": {"unit": None},
}


def _step_for_json(step):
    return list(step) if isinstance(step, tuple) else step


class DLLogger:
    """`log(step, data)` and `metadata(metric, meta)` as dllogger; `print` for free-form lines (rank 0 only)."""

    def __init__(self, json_path=None, stdout=True, enabled=True):
        self.enabled = enabled
        self.stdout = stdout and enabled
        self.start = time.time()
        self.units = {}
        self._file = None
        self._path = json_path if enabled and json_path else None
        # The file is opened at the run's first LOG record, and the METADATA records made before it wait for it:
        # a run refused before it logs anything leaves no file, and adds nothing to an earlier run's log.
        self._pending = []
        self._appends = False
        if self._path:
            directory = os.path.dirname(os.path.abspath(self._path))
            os.makedirs(directory, exist_ok=True)
            for target in (self._path, directory):  # unwritable: the caller's OSError now, not at the first record
                if os.path.exists(target) and not os.access(target, os.W_OK):
                    code = errno.EROFS if on_read_only_file_system(target) else errno.EACCES
                    raise OSError(code, os.strerror(code), target)
            self._appends = os.path.isfile(self._path) and os.path.getsize(self._path) > 0
        for metric, meta in DEFAULT_METADATA.items():
            self.metadata(metric, meta)

    def _open(self):
        # Append: a resumed run continues the same log, as dllogger's JSONStreamBackend(append) would.
        self._file = open(self._path, "a", encoding="utf-8")
        if _ends_with_torn_line(self._path):
            self._file.write("\n")  # a killed run's half line stays alone: read_log skips just that one

    def _write_json(self, record):
        if self._path is None:
            return
        if self._file is None and record["type"] != "LOG":
            self._pending.append(record)
            return
        try:
            if self._file is None:
                self._open()
            lines, self._pending = self._pending + [record], []
            self._file.write("".join("DLLL " + json.dumps(line) + "\n" for line in lines))
            self._file.flush()
        except OSError as error:  # disk full, quota: one clear line instead of a traceback
            path = self._path
            self._drop_file()
            raise LogWriteError("cannot write the log {}: {}".format(path, error.strerror or error)) from None

    def _record(self, kind):
        now = datetime.datetime.now()
        return now, {
            "timestamp": str(now.timestamp()),
            "datetime": now.strftime("%Y-%m-%d %H:%M:%S.%f"),
            "elapsedtime": str(time.time() - self.start),
            "type": kind,
        }

    def metadata(self, metric, meta):
        if not self.enabled:
            return
        self.units[metric] = meta.get("unit", "")
        _, record = self._record("METADATA")
        record.update(metric=metric, metadata=meta)
        self._write_json(record)

    def log(self, step, data, echo=True):
        """One LOG record, in the file and (with `echo`, by default) as a `DLL ...` line on stdout."""
        if not self.enabled:
            return
        now, record = self._record("LOG")
        record.update(step=_step_for_json(step), data=data)
        self._write_json(record)
        if self.stdout and echo:
            items = []
            for key, value in data.items():
                text = "{} : {}".format(key, value)
                if key in self.units:
                    text += " {}".format(self.units[key])
                items.append(text)
            print("DLL {} - {} {}".format(now.strftime("%Y-%m-%d %H:%M:%S.%f"), step, " ".join(items)), flush=True)

    def destination(self):
        """The line saying where the run's records go, or None when it writes no log file: a default --results_dir
        of `.` appends every run to ./log.json, and nothing else said so."""
        if not self._path:
            return None
        return "Log: {} ({})".format(os.path.abspath(self._path), "appended after the earlier runs' records it holds"
                                     if self._appends else "a new file")

    def print(self, *args, **kwargs):
        if self.enabled:
            print(*args, **kwargs, flush=True)

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    def _drop_file(self):
        """After a failed write: no more writes, and a close that does not retry the lost bytes."""
        file, self._file, self._path = self._file, None, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass


def _ends_with_torn_line(path):
    """True when the file is non-empty and its last byte is not a newline (a writer was killed mid-line)."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def _well_formed(record):
    """Whether a parsed DLLL line has the shape the JSON backend writes: an object whose `data` is an object and
    whose `step` is PARAMETER or a list of integers (a hand edit or a damaged disk gives other things)."""
    if not isinstance(record, dict) or not isinstance(record.get("data", {}), dict):
        return False
    step = record.get("step")
    return step is None or isinstance(step, str) or (
        isinstance(step, list) and all(isinstance(part, int) and not isinstance(part, bool) for part in step))


def read_log(path, damaged=None):
    """Parses a `DLLL` log file into a list of dicts (the inverse of the JSON backend); skips any line that is not a
    record as the backend writes them, a torn one included (a run killed mid-write, a file cut short), whose numbers
    are appended to `damaged` (a list)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.startswith("DLLL "):
                continue
            try:
                record = json.loads(line[5:])
            except json.JSONDecodeError:  # torn or edited: said, not dropped silently (its record may be a result)
                if damaged is not None:
                    damaged.append(number)
                continue
            if _well_formed(record):
                records.append(record)
            elif damaged is not None:
                damaged.append(number)
    return records


def logged_path(parameters, name):
    """The absolute form of the path flag `name` of a run's PARAMETER record, or None: a relative path is taken
    relative to the record's working_directory (logs of before 2026-12-06 do not record it: then relative to this
    process's)."""
    path = parameters.get(name)
    if not isinstance(path, str) or not path:
        return None
    base = parameters.get("working_directory")
    if isinstance(base, str) and os.path.isabs(base):
        return os.path.normpath(os.path.join(base, path))
    return os.path.abspath(path)


# The original's PARAMETER lines that a training logs within its run, after the run's own record (a fine-tune's
# source, the QAT mode: runtime/runner.py): they start no run.
IN_RUN_PARAMETERS = frozenset({"Restoring variables from checkpoint", "MODE", "QUANTIZATION AWARE TRAINING ENABLED"})


def starts_run(data):
    """Whether a PARAMETER record's `data` is a run's own record (a run starts at it), not one of IN_RUN_PARAMETERS."""
    return not (isinstance(data, dict) and data and set(data) <= IN_RUN_PARAMETERS)


def lineage_of(parameters):
    """(session, the session it resumed or None) of a training run's PARAMETER record (runtime/settings.lineage),
    or (None, None): not a training, or logged before 2026-12-06."""
    training = parameters.get("training")
    if not isinstance(training, dict) or not isinstance(training.get("session"), str):
        return None, None
    resumed = training.get("resumes")
    return training["session"], resumed if isinstance(resumed, str) else None


def _trained_step(step, data):
    """The training step a record states, or None: a step record's (epoch, step) with its losses, or an end-of-epoch
    record's (epoch,) with the global_step that ended the epoch (which the step records, every --display_every
    steps, may not show)."""
    if isinstance(step, list) and len(step) == 2 and "cross_entropy" in data and isinstance(step[1], int):
        return step[1]
    if isinstance(step, list) and len(step) == 1 and isinstance(data.get("global_step"), int) and \
            not isinstance(data["global_step"], bool):
        return data["global_step"]
    return None


def last_training_step(path, model_dir, session=None):
    """The last training step the DLLL log at `path` records for trainings into `model_dir` (the largest any record
    of a session states: _trained_step), or None: none, or no such log. With `session` (the session that wrote the
    checkpoint a resume starts from, which checkpoints record since 2026-12-06): the steps of that session and of
    the sessions that continued it, whatever path reached the model_dir (moved, copied, linked); a log without that
    session holds none of them. Without: the steps of the runs whose PARAMETER record names `model_dir` (or
    results_dir, in logs of before model_dir was recorded; relative to the run's working directory)."""
    try:
        records = read_log(path)
    except (OSError, UnicodeDecodeError):
        return None
    if session is not None:
        return _last_step_of_sessions(records, session)
    target, ours, last, session = os.path.abspath(model_dir), False, None, None
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
            continue  # a damaged line: it only fed a Note
        step, data = record.get("step"), record["data"]
        if step == "PARAMETER" and not starts_run(data):
            continue  # a fine-tune's source or the QAT mode, within the run before
        if step == "PARAMETER":
            where = logged_path(data, "model_dir" if data.get("model_dir") else "results_dir")
            ours = data.get("mode") in ("train", "train_and_evaluate") and where == target
            if ours:
                last, session = session if session is not None else last, None
        elif ours and _trained_step(step, data) is not None:
            session = max(_trained_step(step, data), session or 0)
    # The last session that logged a step: an earlier one may have gone further (a model_dir emptied and trained
    # again from step 0).
    return session if session is not None else last


def _last_step_of_sessions(records, session):
    """The largest training step logged by `session` or a session that continued it (resumed one of its
    checkpoints, or one of theirs), or None."""
    family, ours, last = {session}, False, None
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
            continue
        step, data = record.get("step"), record["data"]
        if step == "PARAMETER" and not starts_run(data):
            continue  # a fine-tune's source or the QAT mode, within the run before
        if step == "PARAMETER":
            this, resumed = lineage_of(data)
            ours = this is not None and (this in family or resumed in family)
            if ours:
                family.add(this)
        elif ours and _trained_step(step, data) is not None:
            last = max(_trained_step(step, data), last or 0)
    return last


def progress_enabled(no_progress_flag):
    """Progress bars (drawn on stderr) only without --no_progress and when stdout is a terminal: an interactive run.
    stdout, not stderr, because utils/quiet.py may put a pipe behind stderr, and a run whose output goes to a file
    or a batch scheduler should not fill it with bar redraws (docs/OBSERVABILITY.md#progress-bars)."""
    return not no_progress_flag and sys.stdout.isatty()
