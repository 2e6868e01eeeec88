"""utils/plot_log.py: curves and CSV from a DLLL log written by utils.logger.DLLogger."""

import csv
import os
import math
import struct

import pytest

from tests._cli import run_script
from utils import plot_log
from utils.logger import DLLogger

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_training_log(path, epochs=3, steps_per_epoch=20, display_every=3, evaluate=True, epoch_end_steps=True):
    """A log shaped like Runner.train + Runner.evaluate's: returns the training records as (step, data).
    `epoch_end_steps=False`: the end-of-epoch records without their global_step (logs before 2026-12-06)."""
    logger = DLLogger(str(path), stdout=False)
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train_and_evaluate", "batch_size": 32})
    logged = []
    for step in range(1, epochs * steps_per_epoch + 1):
        epoch = (step - 1) // steps_per_epoch
        cross_entropy = 6.9 * math.exp(-step / 25.0) + 0.5
        data = {"imgs_per_sec": 400.0 + step % 7, "cross_entropy": cross_entropy, "l2_loss": 0.25 - step / 1000.0,
                "total_loss": cross_entropy + 0.25 - step / 1000.0, "learning_rate": 0.1 * min(1.0, step / 20.0)}
        if (step - 1) % display_every == 0:
            logger.log(step=(epoch, step), data=data)
            logged.append(((epoch, step), data))
        if step % steps_per_epoch == 0:
            logger.log(step=(epoch,), data={**{k: data[k] for k in ("cross_entropy", "l2_loss", "total_loss",
                                                                    "learning_rate")},
                                            **({"global_step": step} if epoch_end_steps else {})})
    logger.log(step=(), data={"train_throughput": 403.0, "train_throughput_total": 401.5})
    if evaluate:  # the evaluation's step throughput (the original's BenchmarkLoggingHook), not plotted
        for index in (10, 20):
            logger.log(step=(0, index), data={"total_ips": 1200.0 + index})
        logger.log(step=(), data={"top1_accuracy": 0.7523, "top5_accuracy": 0.9268, "eval_throughput": 1200.0,
                                  "eval_latency_avg": 26.5, "eval_latency_p90": 27.0, "eval_latency_p95": 27.5,
                                  "eval_latency_p99": 29.0})
    logger.close()
    return logged


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def png_size(path):
    with open(path, "rb") as handle:
        header = handle.read(24)
    assert header[:8] == PNG_SIGNATURE and header[12:16] == b"IHDR"
    return struct.unpack(">II", header[16:24])


def test_plot_and_csv_match_the_log(tmp_path, capsys):
    log_path = tmp_path / "log.json"
    logged = write_training_log(log_path)
    png, table = tmp_path / "out" / "curves.png", tmp_path / "steps.csv"
    assert plot_log.main([str(log_path), "-o", str(png), "--csv", str(table)]) == 0
    assert "wrote" in capsys.readouterr().out

    width, height = png_size(png)
    assert width >= 800 and height >= 600
    assert png.stat().st_size > 20_000  # four panels of curves, not an empty canvas
    from PIL import Image
    with Image.open(png) as image:
        image.verify()

    rows = read_csv(table)
    assert list(rows[0]) == list(plot_log.CSV_COLUMNS)
    assert len(rows) == len(logged)
    for row, ((epoch, step), data) in zip(rows, logged, strict=True):
        assert (int(row["epoch"]), int(row["global_step"])) == (epoch, step)
        for key, value in data.items():
            assert float(row[key]) == value  # exact: the CSV keeps every digit
        assert row["total_ips"] == ""


def test_default_output_is_next_to_the_log(tmp_path):
    log_path = tmp_path / "log.json"
    write_training_log(log_path, epochs=1, evaluate=False)
    args = plot_log.parse_args([str(log_path)])
    assert args.output == str(tmp_path / "curves.png")


def test_resumed_log_keeps_the_later_record_of_a_step(tmp_path):
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    for step, loss in ((1, 5.0), (2, 4.0), (3, 3.0), (2, 3.9), (3, 2.9), (4, 2.0)):  # resumed from step 1
        logger.log(step=(0, step), data={"cross_entropy": loss, "total_loss": loss, "learning_rate": 0.1,
                                         "l2_loss": 0.0, "imgs_per_sec": 10.0})
    logger.close()
    rows = plot_log.step_table(plot_log.load_log(str(log_path))[0])
    assert [(r["global_step"], r["cross_entropy"]) for r in rows] == [(1, 5.0), (2, 3.9), (3, 2.9), (4, 2.0)]


def test_damaged_lines_are_left_out_and_counted(tmp_path, capsys):
    """A line edited or damaged into another shape (a list, a step of text or of 1e999, a loss of text) was a
    traceback (AttributeError, ValueError, OverflowError, TypeError)."""
    log_path = tmp_path / "log.json"
    logged = write_training_log(log_path, epochs=1, evaluate=False)
    with open(log_path, "a") as handle:
        handle.write('DLLL [1, 2]\n'
                     'DLLL {"type": "LOG", "step": [0, "x"], "data": {"cross_entropy": 1}}\n'
                     'DLLL {"type": "LOG", "step": [0, 1e999], "data": {"cross_entropy": 1}}\n'
                     'DLLL {"type": "LOG", "step": [0, 99], "data": {"cross_entropy": "abc"}}\n'
                     'DLLL {"type": "LOG", "step": [0, 98], "data": {"learning_rate": [1]}}\n')
    rows = plot_log.run(str(log_path), str(tmp_path / "curves.png"))
    assert [row["global_step"] for row in rows] == [step for (_, step), _ in logged]
    assert "left out 3 damaged lines (not a record as main.py writes them): lines " in capsys.readouterr().out
    # a torn line, in the middle (edited) or last (a run killed mid-write, a file cut short), is counted too: it may
    # have been a step or the run's result (until 2026-12-07 left out without a word)
    text = log_path.read_text().splitlines(keepends=True)
    text[3] = text[3][:40] + "\n"
    log_path.write_text("".join(text) + 'DLLL {"type": "LOG", "step": [], "data": {"train_thr')
    plot_log.run(str(log_path), str(tmp_path / "curves.png"))
    assert "left out 5 damaged lines (not a record as main.py writes them): lines 4, " in capsys.readouterr().out


def test_benchmark_log_plots_total_ips(tmp_path, monkeypatch):
    from matplotlib.figure import Figure
    figures = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), save(self, *a, **k))[1])
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    for index in (10, 20, 30):
        logger.log(step=(0, index), data={"total_ips": 100.0 + index})
    logger.log(step=(), data={"train_throughput": 120.0})
    logger.close()
    table = tmp_path / "bench.csv"
    rows = plot_log.run(str(log_path), str(tmp_path / "bench.png"), str(table))
    assert [r["total_ips"] for r in rows] == [110.0, 120.0, 130.0]
    assert [(r["global_step"], float(r["total_ips"])) for r in read_csv(table)] == \
        [("10", 110.0), ("20", 120.0), ("30", 130.0)]
    assert (tmp_path / "bench.png").read_bytes()[:8] == PNG_SIGNATURE
    # A benchmark's panels speak of its steps and its run, not of a training's.
    labels = {axis.get_title(): axis.get_xlabel() for axis in figures[0].axes}
    assert labels["Throughput"] == "benchmark step" and "Accuracy (end of the run)" in labels


def test_final_results_follow_the_last_training_step(tmp_path):
    log_path = tmp_path / "log.json"
    write_training_log(log_path, epochs=1, steps_per_epoch=10, display_every=4)
    finals = plot_log.final_results(plot_log.load_log(str(log_path))[0])
    # the training's last step is 10 (its epoch end says so), though --display_every 4 logged 9 last: the evaluation
    # of its checkpoint sits at 10 (until 2026-12-07 at 9, a step no checkpoint was written at)
    assert [step for step, _ in finals] == [10, 10]
    assert finals[1][1]["top1_accuracy"] == 0.7523
    write_training_log(tmp_path / "old.json", epochs=1, steps_per_epoch=10, display_every=4, epoch_end_steps=False)
    assert [step for step, _ in plot_log.final_results(plot_log.load_log(str(tmp_path / "old.json"))[0])] == [9, 9]


def test_the_summary_box_says_when_its_evaluation_figures_are_a_later_runs(tmp_path, monkeypatch):
    """A --mode evaluate after the training, logged to the same file: its throughput and latency took the box's
    eval lines without a word, under a title naming the training's mode (an audit, 2026-12-07)."""
    from matplotlib.figure import Figure
    figures = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), save(self, *a, **k))[1])
    log_path = tmp_path / "log.json"
    write_training_log(log_path, epochs=1, steps_per_epoch=10)
    plot_log.run(str(log_path), str(tmp_path / "a.png"))
    texts = [text.get_text() for axis in figures[0].axes for text in axis.texts if "throughput" in text.get_text()]
    assert texts == ["train throughput: 403.0 img/s\neval throughput: 1200.0 img/s\neval latency avg: 26.50 ms\n"
                     "eval latency p99: 29.00 ms"]
    logger = DLLogger(str(log_path), stdout=False)
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "evaluate", "batch_size": 32})
    logger.log(step=(), data={"top1_accuracy": 0.75, "top5_accuracy": 0.93, "eval_throughput": 900.0,
                              "eval_latency_avg": 30.0, "eval_latency_p99": 41.0})
    logger.close()
    plot_log.run(str(log_path), str(tmp_path / "b.png"))
    texts = [text.get_text() for axis in figures[1].axes for text in axis.texts if "throughput" in text.get_text()]
    assert texts == ["train throughput: 403.0 img/s\neval throughput (--mode evaluate): 900.0 img/s\neval latency "
                     "avg (--mode evaluate): 30.00 ms\neval latency p99 (--mode evaluate): 41.00 ms"]


def _error(argv, capsys):
    assert plot_log.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and err.count("\n") == 1
    return err


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("", "no DLLL records"),
    ("just some text\nDLL 2026-01-01 - () top1_accuracy : 0.5\n", "no DLLL records"),
    ('DLLL {"type": "METADATA", "metric": "top1_accuracy", "metadata": {"unit": null}}\nDLLL {"type": "LO',
     "has DLLL METADATA records but no LOG record: the run that wrote it stopped before its PARAMETER record"),
    ('DLLL {"type": "LOG", "step": [], "data": {"top1_accuracy": 0.7, "top5_accuracy": 0.9}}\n',
     "no steps to plot"),
])
def test_errors(tmp_path, capsys, content, message):
    log_path = tmp_path / "log.json"
    if content is not None:
        log_path.write_text(content)
    output = tmp_path / "curves.png"
    assert message in _error([str(log_path), "-o", str(output)], capsys)
    assert not output.exists()


def test_directory_is_not_a_log(tmp_path, capsys):
    assert "not a file" in _error([str(tmp_path)], capsys)


def test_command_line(tmp_path):
    log_path = tmp_path / "log.json"
    write_training_log(log_path, epochs=1, evaluate=False)
    run_script("-m utils.plot_log", log_path, "-o", tmp_path / "c.png", timeout=120)
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG_SIGNATURE
    missing = run_script("-m utils.plot_log", tmp_path / "none.json", check=False, timeout=120)
    assert missing.returncode == 2 and missing.stderr.startswith("ERROR: ")


def test_title_describes_the_training_run_not_a_later_predict_on_the_same_log(tmp_path):
    # The quick start predicts into the training run's log: the title must still say how the steps were made.
    log_path = tmp_path / "log.json"
    write_training_log(log_path)
    logger = DLLogger(str(log_path), stdout=False)
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "predict", "batch_size": 1})
    logger.close()
    parameters = plot_log.load_log(str(log_path))[1]
    assert (parameters["mode"], parameters["batch_size"]) == ("train_and_evaluate", 32)
    assert plot_log._title("log.json", parameters) == "log.json  (arch resnet50, mode train_and_evaluate, batch_size 32)"


def test_title_without_modes_merges_every_run(tmp_path):
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    logger.log(step="PARAMETER", data={"arch": "resnet50"})
    logger.log(step="PARAMETER", data={"batch_size": 8})
    logger.log(step=(0, 1), data={"cross_entropy": 1.0})
    logger.close()
    assert plot_log.load_log(str(log_path))[1] == {"arch": "resnet50", "batch_size": 8}


def _benchmark_run(logger, mode, values, throughput):
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": mode, "batch_size": 8})
    for index, value in zip((10, 20, 30), values):
        logger.log(step=(0, index), data={"total_ips": value})
    logger.log(step=(), data={"train_throughput": throughput})


def test_a_benchmark_logged_to_a_trainings_file_is_left_out_of_its_plot(tmp_path, capsys):
    # main.py --mode training_benchmark --results_dir <a training's results>: the same log.json gets its records.
    log_path = tmp_path / "log.json"
    logged = write_training_log(log_path)
    logger = DLLogger(str(log_path), stdout=False)
    _benchmark_run(logger, "training_benchmark", (6.0, 6.1, 6.2), 6.1)
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "evaluate", "batch_size": 32})
    logger.log(step=(), data={"top1_accuracy": 0.76, "top5_accuracy": 0.93})
    logger.close()
    records, parameters, left_out = plot_log.load_log(str(log_path))
    assert parameters["mode"] == "train_and_evaluate"
    assert left_out == ("left out 1 training_benchmark run logged to the same file (their steps and throughput "
                        "are not this training's)")
    rows = plot_log.step_table(records)
    assert len(rows) == len(logged) and all(row["total_ips"] is None for row in rows)
    finals = plot_log.final_results(records)
    assert [data.get("train_throughput") for _, data in finals] == [403.0, None, None]
    assert finals[-1][1]["top1_accuracy"] == 0.76  # the later evaluation stays, after the last training step
    assert plot_log.main([str(log_path), "-o", str(tmp_path / "c.png")]) == 0
    assert capsys.readouterr().out.startswith("Note: left out 1 training_benchmark run")


def test_a_log_of_benchmarks_plots_the_last_one(tmp_path):
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    _benchmark_run(logger, "inference_benchmark", (100.0, 101.0, 102.0), 101.0)
    _benchmark_run(logger, "inference_benchmark", (200.0, 201.0, 202.0), 201.0)
    logger.close()
    records, _, left_out = plot_log.load_log(str(log_path))
    assert [row["total_ips"] for row in plot_log.step_table(records)] == [200.0, 201.0, 202.0]
    assert left_out == "plotted the last of 2 benchmark runs logged to the same file (inference_benchmark)"
    # One benchmark alone: nothing to say.
    single = tmp_path / "single.json"
    logger = DLLogger(str(single), stdout=False)
    _benchmark_run(logger, "training_benchmark", (1.0, 2.0, 3.0), 2.0)
    logger.close()
    assert plot_log.load_log(str(single))[2] is None


def test_trainings_into_other_model_dirs_on_one_log_plot_the_last_and_a_resume_stays(tmp_path):
    """--model_dir given and --results_dir left at `.`: every training appends to ./log.json. Their steps are
    other models' and would interleave in one curve; a resume of the same model_dir is one training."""
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    for model_dir, steps, rate in (("/runs/a", range(1, 7), 0.0005), ("/runs/b", range(1, 4), 0.002),
                                   ("/runs/b/", range(4, 6), 0.003)):  # b, then b resumed (spelt with a slash)
        logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": model_dir})
        for step in steps:
            logger.log(step=(0, step), data={"cross_entropy": 1.0, "learning_rate": rate})
    logger.close()
    records, parameters, left_out = plot_log.load_log(str(log_path))
    assert [(row["global_step"], row["learning_rate"]) for row in plot_log.step_table(records)] == [
        (1, 0.002), (2, 0.002), (3, 0.002), (4, 0.003), (5, 0.003)]
    assert parameters["model_dir"] == "/runs/b/"  # the last run's, as given
    assert left_out == ("plotted the training into model_dir /runs/b, the last of 2 trainings logged to the same "
                        "file (the others: /runs/a)")


def test_a_resume_from_another_working_directory_stays_one_training(tmp_path):
    """`--model_dir m` trained in /runs and resumed as `--model_dir runs/m` from / are one model_dir: the relative
    paths are read against the working directory each run recorded. The training plotted is the one logged last."""
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    for model_dir, cwd, steps in (("m", "/runs", range(1, 4)), ("runs/m", "/", range(4, 6)),
                                  ("m", "/elsewhere", range(1, 3))):
        logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": model_dir,
                                           "working_directory": cwd})
        for step in steps:
            logger.log(step=(0, step), data={"cross_entropy": 1.0, "learning_rate": 0.1})
    logger.close()
    records, parameters, left_out = plot_log.load_log(str(log_path))
    assert left_out == ("plotted the training into model_dir /elsewhere/m, the last of 2 trainings logged to the "
                        "same file (the others: /runs/m)")
    logger = DLLogger(str(log_path), stdout=False)
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": "../runs/m",
                                       "working_directory": "/elsewhere"})
    logger.log(step=(0, 6), data={"cross_entropy": 1.0, "learning_rate": 0.1})
    logger.close()
    records, parameters, left_out = plot_log.load_log(str(log_path))
    assert [row["global_step"] for row in plot_log.step_table(records)] == [1, 2, 3, 4, 5, 6]
    assert left_out == ("plotted the training into model_dir /runs/m, the last of 2 trainings logged to the same "
                        "file (the others: /elsewhere/m)")  # the model_dir trained last, not the one first seen last


def test_a_training_is_followed_by_its_sessions_through_moves_and_a_fork_is_left_out(tmp_path):
    """A model_dir moved (or reached through a link) between sessions is one training: each session names the one
    it resumed. A fork (a copy of the checkpoints resumed on its own, here through a link retargeted to it) logged
    to the same file is another branch: its steps would replace the plotted training's. A session that resumed a
    checkpoint of before sessions were recorded takes the older runs of its model_dir."""
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    for model_dir, session, resumed, steps, loss in (
            ("/runs/a", "s1", None, range(1, 4), 1.0),     # a new training
            ("/moved/a", "s2", "s1", range(4, 6), 2.0),    # resumed after `mv /runs/a /moved/a`
            ("/link", "f1", "s1", range(4, 7), 9.0),       # a copy of /runs/a at step 3, resumed on its own
            ("/link", "s3", "s2", range(6, 8), 3.0)):      # /link now points at /moved/a
        logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": model_dir,
                                           "training": {"id": "t", "session": session, "resumes": resumed}})
        for step in steps:
            logger.log(step=(0, step), data={"cross_entropy": loss, "learning_rate": 0.1})
    logger.close()
    records, parameters, left_out = plot_log.load_log(str(log_path))
    assert [(row["global_step"], row["cross_entropy"]) for row in plot_log.step_table(records)] == [
        (1, 1.0), (2, 1.0), (3, 1.0), (4, 2.0), (5, 2.0), (6, 3.0), (7, 3.0)]
    assert left_out == ("plotted the training into model_dir /link, the last of 2 trainings logged to the same file "
                        "(the others: /link (a fork of it: a copy of its checkpoints trained on its own))")
    logger = DLLogger(str(log_path), stdout=False)
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": "/old", "checkpoint": None})
    logger.log(step=(0, 1), data={"cross_entropy": 5.0, "learning_rate": 0.1})
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": "/old",
                                       "checkpoint": "/old/model.ckpt-1", "training": {"id": "u", "session": "n1"}})
    logger.log(step=(0, 2), data={"cross_entropy": 6.0, "learning_rate": 0.1})
    logger.close()
    records, parameters, left_out = plot_log.load_log(str(log_path))
    assert [(row["global_step"], row["cross_entropy"]) for row in plot_log.step_table(records)] == [(1, 5.0), (2, 6.0)]
    assert left_out == ("plotted the training into model_dir /old, the last of 2 trainings logged to the same file "
                        "(the others: /link)")  # training t, its fork included, named by its last run


def _sessions_log(path, sessions):
    """load_log of a log of training sessions [(model_dir, working_directory, id, session, resumed, steps, loss)]."""
    logger = DLLogger(str(path), stdout=False)
    for model_dir, cwd, training, session, resumed, steps, loss in sessions:
        logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": model_dir,
                                           "working_directory": cwd, "checkpoint": "ckpt" if resumed else None,
                                           "training": {"id": training, "session": session, "resumes": resumed}})
        for step in steps:
            logger.log(step=(0, step), data={"cross_entropy": loss, "learning_rate": 0.1})
    logger.close()
    return plot_log.load_log(str(path))


def test_a_session_killed_past_its_checkpoint_is_no_fork_and_a_copy_trained_on_is(tmp_path):
    """A session killed (kill -9) after its last checkpoint, and the session that resumed that checkpoint in the
    same model_dir after it, resumed the same session: the killed one is the training's abandoned branch, said in
    one line, not `a fork of it: a copy of its checkpoints trained on its own` (it was). The same model_dir is
    compared as a directory (`a` in /runs is /runs/a). A copy resumed in another model_dir is still a fork."""
    killed = [("/runs/a", "/", "t", "s1", None, range(1, 13), 1.0),   # checkpoint at 12
              ("a", "/runs", "t", "s2", "s1", range(13, 32, 2), 9.0),  # killed at ~31, no checkpoint after 12
              ("/runs/a", "/", "t", "s3", "s1", range(13, 31), 2.0)]   # resumed at 12, to 30
    records, _, left_out = _sessions_log(tmp_path / "k.json", killed)
    assert [(row["global_step"], row["cross_entropy"]) for row in plot_log.step_table(records)] == [
        (step, 1.0 if step <= 12 else 2.0) for step in range(1, 31)]
    assert left_out == ("left out 1 session of this training that stopped past its last checkpoint (it logged steps "
                        "13-31; a later session in the same model_dir resumed from that checkpoint)")
    forked = killed + [("/copy/a", "/", "t", "f1", "s1", range(13, 20), 5.0),  # a copy of /runs/a at 12, trained
                       ("/runs/a", "/", "t", "s4", "s3", range(31, 33), 3.0)]
    records, _, left_out = _sessions_log(tmp_path / "f.json", forked)
    assert left_out == ("plotted the training into model_dir /runs/a, the last of 2 trainings logged to the same file "
                        "(the others: /copy/a (a fork of it: a copy of its checkpoints trained on its own)); left out "
                        "1 session of this training that stopped past its last checkpoint (it logged steps 13-31; a "
                        "later session in the same model_dir resumed from that checkpoint)")
    # A checkpoint of before training ids: every session resuming it has the id derived from it, none `resumes`.
    legacy = [("/runs/o", "/", "x", "k1", None, (13, 15, 17), 9.0), ("/runs/o", "/", "x", "k2", None, (13, 24), 2.0)]
    records, _, left_out = _sessions_log(tmp_path / "l.json", legacy)
    assert [row["global_step"] for row in plot_log.step_table(records)] == [13, 24]
    assert left_out == ("left out 1 session of this training that stopped past its last checkpoint (it logged steps "
                        "13-17; a later session in the same model_dir resumed from that checkpoint)")


def test_a_fine_tunes_and_qat_runs_own_parameter_lines_stay_in_their_run(tmp_path):
    """A fine-tune logs `Restoring variables from checkpoint` and a QAT run `QUANTIZATION AWARE TRAINING ENABLED` as
    PARAMETER lines after its own record: each was taken for a new run of no mode, so a fine-tune logged after
    another training was dropped and the other plotted, without a word."""
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    for model_dir, session, extra, loss in (("/m3", "s1", None, 5.0),
                                            ("/ft3", "s2", {"Restoring variables from checkpoint": "/m3/c-4"}, 6.0),
                                            ("/q", "s3", {"QUANTIZATION AWARE TRAINING ENABLED": True}, 7.0)):
        logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": model_dir,
                                           "training": {"id": session, "session": session, "resumes": None}})
        logger.log(step="PARAMETER", data=extra) if extra else None
        logger.log(step=(0, 1), data={"cross_entropy": loss, "learning_rate": 0.1})
    logger.close()
    records, parameters, left_out = plot_log.load_log(str(log_path))
    assert [(row["global_step"], row["cross_entropy"]) for row in plot_log.step_table(records)] == [(1, 7.0)]
    assert parameters["model_dir"] == "/q"
    assert left_out == ("plotted the training into model_dir /q, the last of 3 trainings logged to the same file "
                        "(the others: /m3, /ft3)")


def test_a_log_without_steps_says_which_tool_or_mode_wrote_it(tmp_path, capsys):
    """The reason a log has nothing to plot names what wrote it: inference.py (a real run of it), an evaluation or a
    predict, or a benchmark that ran no step past its warm-up (PARAMETER records as main.py writes them)."""
    from tests._cli import tool_in_process
    from tests._data_helpers import tiny_onnx_classifier
    inference_log = tmp_path / "inference.json"
    result = tool_in_process("inference", "--model", tiny_onnx_classifier(tmp_path / "m.onnx", batch=2),
                             "--backend", "onnxruntime", "--batch-size", "2", "--num-iter", "3", "--log-path",
                             str(inference_log), check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _error([str(inference_log)], capsys).endswith(
        "it is a log of inference.py, which logs its throughput, latency and accuracy, not steps\n")
    for mode in ("evaluate", "predict", "training_benchmark"):
        path = tmp_path / f"{mode}.json"
        logger = DLLogger(str(path), stdout=False)
        logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": mode, "display_every": 10, "warmup_steps": 5,
                                           "num_iter": 3, "iter_unit": "batch"})
        logger.log(step=(), data={"top1_accuracy": 0.5} if mode == "evaluate" else {"train_throughput": 30.0})
        logger.close()
        expected = {"evaluate": "--mode evaluate logs no training steps (its evaluation's throughput records are "
                                "not plotted; its result is its final record's accuracy and throughput), so there is "
                                "nothing to plot",
                    "predict": "--mode predict logs no steps, so there is nothing to plot",
                    "training_benchmark": "its --mode training_benchmark logged no step: a benchmark logs one every "
                                          "--display_every 10 steps after its --warmup_steps 5, and it was run with "
                                          "--num_iter 3 --iter_unit batch (or stopped before)"}[mode]
        assert _error([str(path)], capsys).endswith(expected + "\n")


def test_a_resume_is_marked_and_one_at_another_batch_size_is_said(tmp_path, capsys):
    """A training resumed into the same model_dir appends to its log: the plot marks the step each resume started
    at, and a Note and the title say which settings it changed (a step at batch 16 is half the images of one at
    32); a resume that changed nothing is marked without a Note."""
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    runs = (({"batch_size": 32}, range(1, 11)),  # steps 1-10; checkpoint at 8
            ({"batch_size": 32}, range(9, 16)),  # resumed at 8: repeats 9-10, unchanged
            ({"batch_size": 16, "lr_init": 0.1}, range(13, 21)))  # resumed at 12, at another batch and rate
    for extra, steps in runs:
        logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": "/runs/a",
                                           "batch_size": 32, "lr_init": 0.05, **extra})
        for step in steps:
            logger.log(step=(0, step), data={"cross_entropy": 1.0, "learning_rate": 0.01})
    logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "evaluate", "batch_size": 64})
    logger.log(step=(), data={"top1_accuracy": 0.5})
    logger.close()
    records, parameters, _ = plot_log.load_log(str(log_path))
    assert plot_log.resumes(records) == [(9, {}), (13, {"batch_size": (32, 16), "lr_init": (0.05, 0.1),
                                                        "images_per_step": (32, 16)})]
    assert plot_log._title("log.json", parameters, plot_log.resumes(records)) == (
        "log.json  (arch resnet50, mode train, batch_size 32->16)")
    assert plot_log.main([str(log_path), "-o", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Note: the training resumed at step 13 with batch_size 16 (was 32), lr_init 0.1 (was "
                          "0.05): its curves mean another run from there (a global step of another batch size is "
                          "another number of images)\n")
    assert "step 9" not in out
    assert png_size(tmp_path / "c.png")[0] > 0
    # One training, no resume: nothing marked, nothing said.
    single = tmp_path / "single.json"
    write_training_log(single)
    assert plot_log.resumes(plot_log.load_log(str(single))[0]) == []
    assert plot_log.main([str(single), "-o", str(tmp_path / "s.png")]) == 0
    assert "Note" not in capsys.readouterr().out


@pytest.mark.parametrize("full", ["png", "csv"])
def test_a_write_that_fails_is_one_line_and_keeps_the_previous_file(tmp_path, capsys, monkeypatch, full):
    """A full disk where the PNG or the --csv table goes: one line naming the file, its previous version intact,
    no truncated file or temporary beside it (both are written under a temporary name and renamed)."""
    from tests._reliability_helpers import full_disk_for
    log_path = tmp_path / "log.json"
    write_training_log(log_path, epochs=1, evaluate=False)
    outputs = {"png": tmp_path / "png" / "curves.png", "csv": tmp_path / "csv" / "steps.csv"}
    for path in outputs.values():
        path.parent.mkdir()
        path.write_text("previous\n")
    full_disk_for(monkeypatch, lambda written: os.path.dirname(written) == str(outputs[full].parent))
    capsys.readouterr()
    assert plot_log.main([str(log_path), "-o", str(outputs["png"]), "--csv", str(outputs["csv"])]) == 2
    assert capsys.readouterr().err == f"ERROR: cannot write {outputs[full]}: No space left on device\n"
    assert outputs[full].read_text() == "previous\n" and os.listdir(outputs[full].parent) == [outputs[full].name]


def test_a_null_model_dir_is_its_results_dir_so_a_resume_of_an_older_run_stays_one_training(tmp_path, capsys):
    """Older versions logged `model_dir` null when --model_dir was not given (it defaulted to --results_dir): a
    training they started and this version resumed is one training, not two with the old steps dropped."""
    log_path = tmp_path / "log.json"
    logger = DLLogger(str(log_path), stdout=False)
    for model_dir, steps in ((None, (1, 7)), ("/runs/r/", (7, 12))):  # the resume repeats step 7
        logger.log(step="PARAMETER", data={"arch": "resnet50", "mode": "train", "model_dir": model_dir,
                                           "results_dir": "/runs/r"})
        for step in steps:
            logger.log(step=(0, step), data={"cross_entropy": 1.0, "learning_rate": 0.01})
    logger.close()
    records, _, left_out = plot_log.load_log(str(log_path))
    assert left_out is None
    assert [row["global_step"] for row in plot_log.step_table(records)] == [1, 7, 12]
    assert plot_log.resumes(records) == [(7, {})]


def test_a_resume_notes_every_setting_runtime_settings_notes(tmp_path, capsys):
    """The settings whose change a resume notes are the ones runtime/settings.py notes (schedule, recipe, precision
    and QAT / EMA state, data stream), not a second shorter list: a switched-off --cosine_lr and another momentum
    and seed are said beside the other learning rate."""
    from runtime import settings
    assert set(settings.SCHEDULE_FLAGS + settings.RECIPE_FLAGS + settings.TRAINING_STATE) <= set(plot_log.RESUME_KEYS)
    log_path = tmp_path / "log.json"
    common = {"cosine_lr": True, "lr_init": 0.01, "momentum": 0.9, "seed": None}
    _write_sessions(log_path, [(common, (1, 7)), (dict(common, cosine_lr=False, lr_init=0.1, momentum=0.875, seed=1),
                                                  (7, 9))])
    assert plot_log.main([str(log_path), "-o", str(tmp_path / "c.png")]) == 0
    assert capsys.readouterr().out.startswith(
        "Note: the training resumed at step 7 with seed 1 (was None), lr_init 0.1 (was 0.01), cosine_lr False (was "
        "True), momentum 0.875 (was 0.9): its curves mean another run from there")


def test_a_resume_whose_schedule_flags_change_no_rate_is_the_same_run(tmp_path, capsys):
    """A longer --num_iter of the step schedule changes no rate the resume trains at: main.py says nothing, and its
    training record says so (`schedule_rates_unchanged`); plot_log then notes no change either. Until 2026-12-07 it
    said `resumed at step 7 with num_iter 6 (was 4): its curves mean another run from there`."""
    log_path = tmp_path / "log.json"
    common = {"cosine_lr": False, "lr_init": 0.1, "iter_unit": "batch", "training": {}}
    _write_sessions(log_path, [(dict(common, num_iter=4), (1, 4)),
                               (dict(common, num_iter=6, training={"schedule_rates_unchanged": True}), (5, 6)),
                               (dict(common, num_iter=8, lr_init=0.2), (7, 8))])
    assert plot_log.main([str(log_path), "-o", str(tmp_path / "c.png")]) == 0
    assert capsys.readouterr().out.startswith(
        "Note: the training resumed at step 7 with lr_init 0.2 (was 0.1), num_iter 8 (was 6): its curves mean another "
        "run from there\n")


def _write_sessions(path, sessions):
    """Writes a log of one model_dir's training sessions [(PARAMETER data, steps logged)]."""
    logger = DLLogger(str(path), stdout=False)
    for extra, steps in sessions:
        logger.log(step="PARAMETER", data={"mode": "train", "model_dir": "/runs/a", **extra})
        for step in steps:
            logger.log(step=(0, step), data={"cross_entropy": 1.0, "learning_rate": 0.01})
    logger.close()


def _resumed_log(path, sessions):
    """The records plot_log loads of a log of one model_dir's training sessions [(PARAMETER data, steps logged)], at
    batch size 32 unless they say."""
    _write_sessions(path, [({"batch_size": 32, **extra}, steps) for extra, steps in sessions])
    return plot_log.load_log(str(path))[0]


def test_a_resume_compares_data_dir_as_the_directory_it_names_and_its_train_files(tmp_path, capsys):
    """`--data_dir data` typed in /w and resumed as `--data_dir w/data` from / is the same data_dir; one at another
    path whose train files have the digest of the ones before (a moved copy) is the same data; the same path holding
    other train files is not. The note's word on the images of a global step comes only with another batch size."""
    typed = [({"data_dir": "data", "working_directory": "/w"}, (1, 7)),
             ({"data_dir": "w/data", "working_directory": "/", "num_iter": 10}, (7, 9))]
    assert plot_log.resumes(_resumed_log(tmp_path / "a.json", typed)) == [(7, {"num_iter": (None, 10)})]
    assert plot_log.main([str(tmp_path / "a.json"), "-o", str(tmp_path / "a.png")]) == 0
    assert capsys.readouterr().out.startswith("Note: the training resumed at step 7 with num_iter 10 (was None): its "
                                              "curves mean another run from there\n")
    moved = [({"data_dir": "/data", "train_files": "ab12"}, (1, 7)),
             ({"data_dir": "/copy/data", "train_files": "ab12"}, (7, 9))]
    assert plot_log.resumes(_resumed_log(tmp_path / "b.json", moved)) == [(7, {})]
    other = [({"data_dir": "/data", "train_files": "ab12"}, (1, 7)),
             ({"data_dir": "/other", "train_files": "cd34"}, (7, 9)),
             ({"data_dir": "/other/", "train_files": "ef56"}, (9, 11))]
    assert plot_log.resumes(_resumed_log(tmp_path / "c.json", other)) == [
        (7, {"data_dir": ("/data", "/other")}), (9, {"train_files": ("cd34", "ef56")})]
    # Without the digest (logs of before 2026-12-06) another path is another data_dir.
    unknown = [({"data_dir": "/data"}, (1, 7)), ({"data_dir": "/copy/data"}, (7, 9))]
    assert plot_log.resumes(_resumed_log(tmp_path / "d.json", unknown)) == [
        (7, {"data_dir": ("/data", "/copy/data")})]
    # Half the batch on twice the replicas: the same images per step, so no word on the images of a step.
    replicas = [({"batch_size": 32, "replicas": 1}, (1, 7)), ({"batch_size": 16, "replicas": 2}, (7, 9))]
    points = plot_log.resumes(_resumed_log(tmp_path / "e.json", replicas))
    assert points == [(7, {"batch_size": (32, 16), "replicas": (1, 2)})]
    assert plot_log.describe_resumes(points) == ("the training resumed at step 7 with batch_size 16 (was 32), replicas "
                                                 "2 (was 1): its curves mean another run from there")
    accumulated = [({"grad_accum_steps": 1}, (1, 7)), ({"grad_accum_steps": 2}, (7, 9))]
    assert plot_log.describe_resumes(plot_log.resumes(_resumed_log(tmp_path / "f.json", accumulated))) == (
        "the training resumed at step 7 with grad_accum_steps 2 (was 1): its curves mean another run from there (a "
        "global step of another batch size is another number of images)")


def test_a_record_without_replicas_is_one_replica(tmp_path):
    """A single process logs no `replicas`: a multi-replica training resumed by one process changed replicas to 1
    (it said `replicas None (was 2)`), and a record of `replicas 1` beside one without is no change."""
    single = [({"replicas": 2, "processes": 2}, (1, 7)), ({}, (7, 9))]
    points = plot_log.resumes(_resumed_log(tmp_path / "a.json", single))
    assert points == [(7, {"replicas": (2, 1), "images_per_step": (64, 32)})]
    assert plot_log.describe_resumes(points) == (
        "the training resumed at step 7 with replicas 1 (was 2): its curves mean another run from there (a global "
        "step of another batch size is another number of images)")
    assert plot_log.resumes(_resumed_log(tmp_path / "b.json", [({}, (1, 7)), ({"replicas": 1}, (7, 9))])) == [(7, {})]


def test_epoch_boundaries_are_drawn_where_the_log_says_the_epoch_ended(tmp_path):
    """An end-of-epoch record that logs the step that ended it puts the boundary between that step and the next
    (20.5 and 40.5 for 20 steps an epoch), not at the next logged step, up to --display_every late (22 and 43 with
    steps logged every 3); a log without it (older versions) keeps those."""
    for epoch_end_steps, expected in ((True, [20.5, 40.5]), (False, [22, 43])):
        path = tmp_path / "log{}.json".format(int(epoch_end_steps))
        write_training_log(path, epoch_end_steps=epoch_end_steps)
        records = plot_log.load_log(str(path))[0]
        train = [row for row in plot_log.step_table(records) if row["total_ips"] is None]
        assert plot_log.epoch_boundaries(train, plot_log.epoch_ends(records)) == expected


def test_the_accuracy_panel_shares_the_training_panels_step_axis(tmp_path):
    """The evaluation is drawn at the step it followed on the training panels' step axis (it ran 8 margins past
    their end, 0-1,600 beside 0-1,150); without training steps, around the evaluations."""
    from matplotlib.figure import Figure
    finals = [(1100, {"top1_accuracy": 0.5, "top5_accuracy": 0.9})]
    axis = Figure().subplots()
    plot_log._plot_accuracy(axis, finals, (-50.0, 1150.0), "Accuracy")
    assert axis.get_xlim() == (-50.0, 1150.0)
    axis = Figure().subplots()
    plot_log._plot_accuracy(axis, finals, None, "Accuracy")
    assert axis.get_xlim() == (1099.0, 1101.0)


def test_outputs_are_checked_before_the_plot(tmp_path, monkeypatch):
    """`--output=~/c.png` (no expansion after '=') created ./~/c.png, and an output path going up out of a missing
    directory was refused only after the plot was drawn."""
    monkeypatch.chdir(tmp_path)
    write_training_log(tmp_path / "log.json", epochs=1)
    with pytest.raises(plot_log.UserError, match="^--output ~/c.png starts with ~, which the shell did not expand"):
        plot_log.run("log.json", "~/c.png")
    with pytest.raises(plot_log.UserError, match="^--csv missing/../c.csv cannot be created: it goes up out of"):
        plot_log.run("log.json", "c.png", "missing/../c.csv")
    assert sorted(os.listdir(tmp_path)) == ["log.json"]


def test_the_throughput_lines_of_a_resumed_training_say_which_run_each_is():
    finals = [(195, {"train_throughput": 112.5}), (195, {"top1_accuracy": 0.5}), (281, {"train_throughput": 110.0})]
    assert plot_log.throughput_lines(finals) == [(112.5, "train_throughput 112.5 img/s (run 1 of 2)"),
                                                 (110.0, "train_throughput 110.0 img/s (run 2 of 2)")]
    assert plot_log.throughput_lines(finals[:2]) == [(112.5, "train_throughput 112.5 img/s")]
