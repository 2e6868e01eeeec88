"""dllogger formats (docs/ORIGINAL.md#logging)."""

import json
import os
import re

import pytest

from utils.logger import DLLogger, last_training_step, logged_path, read_log


def test_json_and_stdout_formats(tmp_path, capsys):
    path = tmp_path / "log.json"
    logger = DLLogger(str(path))
    logger.log(step="PARAMETER", data={"batch_size": 8})
    logger.log(step=(0, 40), data={"total_ips": 512.5})
    logger.log(step=(), data={"train_throughput": 100.0, "top1_accuracy": 0.5})
    logger.close()
    lines = path.read_text().splitlines()
    assert all(line.startswith("DLLL {") for line in lines)
    records = [json.loads(line[5:]) for line in lines]
    metadata = {r["metric"]: r["metadata"] for r in records if r["type"] == "METADATA"}
    assert metadata["train_throughput"] == {"unit": "images/s"}
    assert metadata["eval_latency_p99"] == {"unit": "ms"}
    assert metadata["top1_accuracy"] == {"unit": None}
    logs = [r for r in records if r["type"] == "LOG"]
    assert logs[0]["step"] == "PARAMETER" and logs[1]["step"] == [0, 40] and logs[2]["step"] == []
    assert float(logs[1]["timestamp"]) > 0 and "elapsedtime" in logs[1]
    out = capsys.readouterr().out.splitlines()
    assert re.match(r"^DLL \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ - PARAMETER batch_size : 8$", out[0])
    assert out[1].endswith("- (0, 40) total_ips : 512.5")
    assert out[2].endswith("- () train_throughput : 100.0 images/s top1_accuracy : 0.5 None")
    assert [r["step"] for r in read_log(str(path)) if r["type"] == "LOG"] == ["PARAMETER", [0, 40], []]


def test_disabled_logger_writes_nothing(tmp_path, capsys):
    logger = DLLogger(str(tmp_path / "log.json"), enabled=False)
    logger.log(step=(), data={"x": 1})
    logger.print("hello")
    assert not (tmp_path / "log.json").exists()
    assert capsys.readouterr().out == ""


def test_a_logger_that_logged_no_record_leaves_no_file_and_adds_nothing(tmp_path):
    """A run refused before its first LOG record (its PARAMETER record) writes no file, and appends nothing to an
    earlier run's log; the METADATA records made before the first LOG record come first when it is written."""
    path = tmp_path / "log.json"
    DLLogger(str(path), stdout=False).close()
    assert not path.exists()
    logger = DLLogger(str(path), stdout=False)
    logger.metadata("latency", {"unit": "ms"})
    logger.log(step="PARAMETER", data={"batch_size": 8})
    logger.close()
    records = read_log(str(path))
    assert [r["type"] for r in records] == ["METADATA"] * 11 + ["LOG"]
    assert records[10]["metric"] == "latency"
    before = path.read_text()
    DLLogger(str(path), stdout=False).close()
    assert path.read_text() == before


def test_the_logger_says_where_its_records_go_and_whether_they_follow_earlier_runs(tmp_path, monkeypatch):
    """A default --results_dir of `.` appends every run to ./log.json: the line names the file absolutely and says
    whether it already held records."""
    monkeypatch.chdir(tmp_path)
    first = DLLogger("log.json", stdout=False)
    assert first.destination() == "Log: {} (a new file)".format(tmp_path / "log.json")
    first.log(step="PARAMETER", data={"batch_size": 8})
    first.close()
    assert DLLogger("log.json", stdout=False).destination() == \
        "Log: {} (appended after the earlier runs' records it holds)".format(tmp_path / "log.json")
    (tmp_path / "empty.json").write_text("")
    assert DLLogger("empty.json", stdout=False).destination().endswith("(a new file)")
    assert DLLogger(None).destination() is None and DLLogger("x.json", enabled=False).destination() is None


def test_a_log_that_cannot_be_created_is_refused_when_the_logger_is_made(tmp_path):
    """The callers turn this OSError into their one-line error before any work, as when the file was opened first."""
    import pytest
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(OSError):
        DLLogger(str(tmp_path / "a_file" / "log.json"), stdout=False)


def test_read_log_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "log.json"
    path.write_text('DLLL {"type": "LOG", "step": [], "data": {"a": 1}}\nDLLL {"type": "LO')
    assert len(read_log(str(path))) == 1


def test_a_log_directory_on_a_read_only_file_system_is_refused_with_that_reason(tmp_path, monkeypatch):
    """A read-only mount (simulated: it needs privileges) stops root too; the error says so, not EACCES."""
    import errno
    from utils import logger as logger_module
    real_statvfs = os.statvfs

    class ReadOnly:
        def __init__(self, result):
            self.f_flag = result.f_flag | os.ST_RDONLY

    monkeypatch.setattr(logger_module.os, "access", lambda path, mode: False)
    monkeypatch.setattr(logger_module.os, "statvfs", lambda path: ReadOnly(real_statvfs(path)))
    with pytest.raises(OSError) as error:
        DLLogger(str(tmp_path / "log.json"), stdout=False)
    assert (error.value.errno, error.value.filename) == (errno.EROFS, str(tmp_path))


def write_training_log(path, sessions):
    """A DLLL log of training sessions [(PARAMETER data, [steps logged])], as main.py writes one."""
    logger = DLLogger(str(path), stdout=False)
    for parameters, steps in sessions:
        logger.log(step="PARAMETER", data=parameters)
        for step in steps:
            logger.log(step=(0, step), data={"cross_entropy": 2.0, "learning_rate": 0.1})
        logger.log(step=(0, 60), data={"total_ips": 9.0})  # an evaluation's step throughput: not a training step
    logger.close()


def test_the_last_training_step_of_a_model_dir_is_read_from_its_trainings_in_the_log(tmp_path):
    path, model_dir = tmp_path / "log.json", str(tmp_path / "m")
    write_training_log(path, [
        ({"mode": "train", "model_dir": None, "results_dir": model_dir}, [1, 11]),  # before model_dir was recorded
        ({"mode": "train", "model_dir": str(tmp_path / "other")}, [1, 31]),         # another model, same log
        ({"mode": "evaluate", "model_dir": model_dir}, []),
    ])
    assert last_training_step(str(path), model_dir) == 11
    write_training_log(path, [({"mode": "train_and_evaluate", "model_dir": model_dir + "/"}, [21])])
    assert last_training_step(str(path), model_dir) == 21
    assert last_training_step(str(tmp_path / "none.json"), model_dir) is None
    # A model_dir emptied and trained again from step 0: its last session's steps, not the earlier run's.
    write_training_log(path, [({"mode": "train", "model_dir": model_dir}, [1, 5])])
    assert last_training_step(str(path), model_dir) == 5
    # Damaged lines (a hand edit, a disk error) are skipped: they fed only a Note, and stopped the resume.
    with open(path, "a") as handle:
        handle.write('DLLL [1, 2]\nDLLL {"step": [0, "x"], "data": {"cross_entropy": 1}}\n'
                     'DLLL {"step": [0, 1e999], "data": {"cross_entropy": 1}}\nDLLL {"step": [0, 9], "data": 3}\n')
    assert last_training_step(str(path), model_dir) == 5


def test_a_relative_model_dir_is_taken_relative_to_the_working_directory_its_run_recorded(tmp_path, monkeypatch):
    """`--model_dir m` typed in /a and resumed as `--model_dir a/m` from the parent is one model_dir; a log of
    before the working directory was recorded reads relative paths from this process's directory."""
    path = tmp_path / "log.json"
    write_training_log(path, [({"mode": "train", "model_dir": "m", "working_directory": str(tmp_path / "a")},
                               [1, 9])])
    monkeypatch.chdir(tmp_path)
    assert last_training_step(str(path), "a/m") == 9
    assert last_training_step(str(path), "m") is None  # tmp_path/m is another directory
    assert logged_path({"model_dir": "m/", "working_directory": "/x/y"}, "model_dir") == "/x/y/m"
    assert logged_path({"model_dir": "m"}, "model_dir") == str(tmp_path / "m")
    assert logged_path({"model_dir": "m", "working_directory": 3}, "model_dir") == str(tmp_path / "m")
    assert logged_path({"model_dir": None}, "model_dir") is None


def test_a_fine_tunes_own_parameter_line_keeps_its_steps_in_its_session(tmp_path):
    """The steps of a fine-tune (or a QAT run) follow a PARAMETER line of the original's within the run: they were
    taken for another run's, so a resume behind its log got no steps-again note."""
    path, model_dir = tmp_path / "log.json", str(tmp_path / "ft")
    logger = DLLogger(str(path), stdout=False)
    logger.log(step="PARAMETER", data={"mode": "train", "model_dir": model_dir,
                                       "training": {"id": "t", "session": "s", "resumes": None}})
    logger.log(step="PARAMETER", data={"Restoring variables from checkpoint": "/m/model.ckpt-4"})
    logger.log(step=(0, 6), data={"cross_entropy": 2.0})
    logger.close()
    assert last_training_step(str(path), model_dir) == 6
    assert last_training_step(str(path), model_dir, session="s") == 6


def test_the_last_training_step_counts_the_end_of_epoch_record_past_the_last_displayed_step(tmp_path):
    """A session that displayed steps 1, 4 and 7 (--display_every 3) and ended its epoch at step 8 (the (epoch,)
    record's global_step) trained up to step 8: a resume from checkpoint 6 trains 7-8 again, not 7 alone. The end
    record (step [], throughput) states no step; another model_dir's end of epoch does not count."""
    path, model_dir = tmp_path / "log.json", str(tmp_path / "m")
    logger = DLLogger(str(path), stdout=False)
    logger.log(step="PARAMETER", data={"mode": "train", "model_dir": model_dir})
    for step in (1, 4, 7):
        logger.log(step=(0, step), data={"cross_entropy": 2.0, "learning_rate": 0.1})
    logger.log(step=(0,), data={"cross_entropy": 2.0, "global_step": 8})
    logger.log(step=(), data={"train_throughput": 9.0, "train_throughput_total": 8.0})
    logger.log(step="PARAMETER", data={"mode": "train", "model_dir": str(tmp_path / "other")})
    logger.log(step=(0, 1), data={"cross_entropy": 2.0, "learning_rate": 0.1})
    logger.log(step=(0,), data={"cross_entropy": 2.0, "global_step": 40})
    logger.close()
    assert last_training_step(str(path), model_dir) == 8
