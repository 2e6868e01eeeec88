"""Training curves from a DLLL log (the JSON lines written by utils.logger.DLLogger, docs/ORIGINAL.md#logging).

    python -m utils.plot_log results/log.json -o curves.png [--csv steps.csv]

Draws four panels, like the original's imgs/train_loss.png: loss (cross_entropy, total_loss), learning rate,
throughput (imgs_per_sec per logged step, benchmark total_ips, the final train_throughput as a line) and the
final top-1 / top-5 accuracy as annotated points. `--csv` writes the per-step table.

Records read (by their `step`):
    [epoch, global_step]   training step: imgs_per_sec, cross_entropy, l2_loss, total_loss, learning_rate
    [0, i]                 benchmark step (training_benchmark / inference_benchmark): total_ips (an
                           evaluation's steps log it too: not plotted)
    [epoch]                end of an epoch: the losses (not plotted; the per-step records carry the same curves)
                           and (since 2026-12-06) the global_step that ended it, where its boundary is drawn
    []                     final results: train_throughput, top1_accuracy, top5_accuracy, eval_throughput, ...
A resumed run appends to the same log and repeats the steps since its last checkpoint; the later record of a
step wins, and a dashed line marks the step it resumed at (a Note names the settings it changed, e.g. another
batch size, where a global step stands for another number of images). Benchmark runs logged to a training's file
are left out of its plot (and said so).
"""

import collections
import csv
import itertools
import math
import os
import sys

from runtime.settings import RECIPE_FLAGS, SCHEDULE_FLAGS, TRAINING_STATE
from utils.errors import ArgumentParser, UserError, command, doc_part
from utils.logger import lineage_of, logged_path, read_log, starts_run
from utils.output_paths import check_output_file, replaced_file

TRAIN_KEYS = ("imgs_per_sec", "cross_entropy", "l2_loss", "total_loss", "learning_rate")
BENCHMARK_KEY = "total_ips"
CSV_COLUMNS = ("epoch", "global_step") + TRAIN_KEYS + (BENCHMARK_KEY,)
FINAL_TEXT_KEYS = (  # (key, label, format) shown in the accuracy panel's summary box when present
    ("train_throughput", "train throughput", "{:.1f} img/s"),
    ("eval_throughput", "eval throughput", "{:.1f} img/s"),
    ("eval_latency_avg", "eval latency avg", "{:.2f} ms"),
    ("eval_latency_p99", "eval latency p99", "{:.2f} ms"),
)
MAX_EPOCH_LINES = 20
RUN_MODE_KEY = "_run_mode"  # load_log's mark of a final record's run (not a logged key)
RUN_PARAMETERS = ("arch", "mode", "batch_size", "amp", "xla")  # shown in the title when the log has them
# The modes whose runs log the plotted steps. A log also holds the PARAMETER records of evaluate / predict runs on
# the same results directory (the quick start predicts after training); the title describes the steps' runs.
STEP_MODES = ("train", "train_and_evaluate", "training_benchmark", "inference_benchmark")
BENCHMARK_MODES = ("training_benchmark", "inference_benchmark")
TRAINING_MODES = ("train", "train_and_evaluate")
EVALUATING_MODES = ("train_and_evaluate", "evaluate")  # their (0, i) records are evaluation steps
# Settings a resume may change that change what the curves mean from its step on: the images per step, XLA (the
# throughput), the data read and its stream, and the lists runtime/settings.py notes a resume's changes of (the
# precision and QAT / EMA state, the learning-rate schedule, the rest of the recipe), so the two say the same.
RESUME_KEYS = tuple(dict.fromkeys(("batch_size", "grad_accum_steps", "replicas", "xla", "data_dir", "dali", "seed")
                                  + TRAINING_STATE + SCHEDULE_FLAGS + RECIPE_FLAGS))


def load_log(path):
    """Reads `path` and returns `(records, parameters, left_out)`: the records of the runs plotted, the parameters
    of those that logged steps (all of theirs if none says its mode), and a line naming the runs left out, or None.
    UserError if it is missing or holds no DLLL records.

    Every run appends to the log of its --results_dir, starting with its PARAMETER record. A training (with its
    resumes and the evaluations that follow) is plotted without the benchmark runs logged beside it, whose steps
    and throughput are not its own; a log of benchmarks alone plots the last one."""
    if not os.path.exists(path):
        raise UserError("log file {} does not exist".format(path))
    if not os.path.isfile(path):
        raise UserError("{} is not a file (pass the DLLL log, e.g. results/log.json)".format(path))
    damaged = []
    try:
        records = read_log(path, damaged)
    except UnicodeDecodeError:
        raise UserError("{} is not a text DLLL log".format(path)) from None
    if damaged:
        print("Note: {} left out {} damaged line{} (not a record as main.py writes them): line{} {}".format(
            path, len(damaged), "s" * (len(damaged) > 1), "s" * (len(damaged) > 1),
            ", ".join(map(str, damaged[:10])) + (", ..." if len(damaged) > 10 else "")))
    logs = [r for r in records if r.get("type") == "LOG" and isinstance(r.get("data"), dict)]
    if not logs:
        if records:  # METADATA lines only: a log cut before the run's first record (its PARAMETER)
            raise UserError("{} has DLLL METADATA records but no LOG record: the run that wrote it stopped before "
                            "its PARAMETER record, or the file was cut there".format(path))
        raise UserError("{} has no DLLL records (expected lines `DLLL {{json}}` written by main.py)".format(path))
    plotted, left_out = _select_runs(_split_runs(logs))
    plotted, other_trainings = _last_training(plotted)
    left_out = "; ".join(line for line in (left_out, other_trainings) if line) or None
    runs = [parameters for parameters, _ in plotted if parameters is not None]
    stepping = [run for run in runs if run.get("mode") in STEP_MODES]
    parameters = {}
    for run in stepping or runs:  # a later run of the same kind (a resumed training) wins
        parameters.update(run)
    # Each run's final records carry its mode (RUN_MODE_KEY), for the summary box to tell whose figures it shows.
    records = [dict(record, data=dict(record["data"], **{RUN_MODE_KEY: (run or {}).get("mode")}))
               if record.get("step") == [] else record for run, run_records in plotted for record in run_records]
    return records, parameters, left_out


def _split_runs(logs):
    """[(PARAMETER data or None, that run's records)] in file order; a run starts at its PARAMETER record (not at the
    PARAMETER lines a training logs within its run: utils/logger.IN_RUN_PARAMETERS). The step
    throughput an evaluation logs (`total_ips` at (0, i), as the benchmarks do) is left out: its steps are not the
    training's, and the evaluation's result says its throughput."""
    runs = [(None, [])]
    for record in logs:
        if record.get("step") == "PARAMETER" and starts_run(record["data"]):
            runs.append((record["data"], []))
        elif _mode(runs[-1]) in EVALUATING_MODES and BENCHMARK_KEY in record["data"]:
            continue
        runs[-1][1].append(record)
    return [run for run in runs if run[1]]


def _mode(run):
    return (run[0] or {}).get("mode")


def _has_steps(run):
    return any(isinstance(r.get("step"), list) and len(r["step"]) == 2 for r in run[1])


def _last_training(runs):
    """(the runs of the training logged last, a line naming the trainings left out or None). Trainings into other
    model_dirs that shared a --results_dir (so its log) are other models: their steps would interleave with this
    one's in one curve. A training's sessions are found by the sessions each resumed (runtime/settings.lineage),
    whatever path reached the model_dir (moved, copied, linked); a copy resumed on its own is a fork, left out, and
    a session of it stopped past its last checkpoint, whose checkpoint a later session in the same model_dir
    resumed, is left out as such (_abandoned_sessions), not named another training or a fork. In
    logs of before 2026-12-06 a training is its model_dir's path, however spelt (`m` and `m/`, or relative to
    another working directory), and a run that logged `model_dir` null (older versions did when --model_dir was not
    given: it then defaulted to --results_dir) trained into its results_dir.
    """
    stepping = [run for run in runs if _mode(run) in TRAINING_MODES and _has_steps(run)]
    if not stepping:
        return runs, None
    last = stepping[-1]
    if lineage_of(last[0] or {})[0] is None:  # logged before 2026-12-06: a training is its model_dir's path
        chain = [run for run in runs if _mode(run) in TRAINING_MODES and _model_dir(run) == _model_dir(last)]
    else:
        chain = _sessions_continued_by(runs, last)
    places = {_model_dir(run) for run in chain}
    kept = [run for run in runs if any(run is member for member in chain)
            or _mode(run) not in TRAINING_MODES and _model_dir(run) in places]
    abandoned = _abandoned_sessions(stepping, chain)
    others = [run for run in stepping if not any(run is member for member in kept + abandoned)]
    if not others:
        return kept, _describe_abandoned(abandoned)
    # One name per other training (its id; its path in logs of before 2026-12-06), from its last run.
    groups = {}
    for run in others:
        groups.pop(_training_key(run), None)
        groups[_training_key(run)] = run
    where = _model_dir(last)
    names = [_other_training(run, last, where) for run in groups.values()]
    return kept, "; ".join(line for line in (
        "plotted the training into model_dir {}, the last of {} trainings logged to the same file (the others: "
        "{})".format(where, len(names) + 1, ", ".join(names)), _describe_abandoned(abandoned)) if line)


def _abandoned_sessions(stepping, chain):
    """The sessions of `stepping` (training runs that logged steps) that are branches of the plotted training left
    behind in its own model_dir: not in `chain` (_sessions_continued_by), with the training id of a member and the
    session it resumed, in the same model_dir (against each run's working_directory). A session stopped past its
    last checkpoint (kill -9, a lost machine) is one: the next session in the model_dir resumed the same checkpoint
    and trained its steps again. A copy resumed in another model_dir is a fork, not one of these."""
    abandoned = []
    for run in stepping:
        session, resumed = lineage_of(run[0] or {})
        if session is None or any(run is member for member in chain):
            continue
        if any(_training_key(run) == _training_key(member) and lineage_of(member[0] or {})[1] == resumed and
               _model_dir(run) == _model_dir(member) for member in chain):
            abandoned.append(run)
    return abandoned


def _describe_abandoned(abandoned):
    """The left-out line's words on _abandoned_sessions, or None."""
    if not abandoned:
        return None
    ranges = []
    for _, records in abandoned:
        steps = [int(r["step"][1]) for r in records if isinstance(r.get("step"), list) and len(r["step"]) == 2
                 and BENCHMARK_KEY not in r["data"]]
        ranges.append(str(min(steps)) if min(steps) == max(steps) else "{}-{}".format(min(steps), max(steps)))
    one = len(abandoned) == 1
    return ("left out {} session{} of this training that stopped past {} last checkpoint ({} logged steps {}; {} in "
            "the same model_dir resumed from {})".format(
                len(abandoned), "" if one else "s", "its" if one else "their", "it" if one else "they",
                ", ".join(ranges), "a later session" if one else "later sessions",
                "that checkpoint" if one else "those checkpoints"))


def _training_key(run):
    training = (run[0] or {}).get("training")
    if isinstance(training, dict) and isinstance(training.get("id"), str):
        return "id", training["id"]
    return "path", _model_dir(run)


def _model_dir(run):
    parameters = run[0] or {}
    return logged_path(parameters, "model_dir" if parameters.get("model_dir") else "results_dir")


def _sessions_continued_by(runs, last):
    """The training runs `last` continues: itself, the session it resumed, the one that session resumed, and so on
    (utils/logger.lineage_of), whatever path reached their model_dir; where the first of them resumed a checkpoint
    that records no session (written before 2026-12-06), the earlier trainings logged into its model_dir."""
    chain, wanted = [last], lineage_of(last[0] or {})[1]
    earlier = runs[:next(i for i, run in enumerate(runs) if run is last)]
    for run in reversed(earlier):
        session, resumed = lineage_of(run[0] or {})
        if wanted is not None and session == wanted and _mode(run) in TRAINING_MODES:
            chain.insert(0, run)
            wanted = resumed
    first = chain[0]
    if wanted is None and (first[0] or {}).get("checkpoint"):
        older = earlier[:next(i for i, run in enumerate(runs) if run is first)]
        chain[:0] = [run for run in older if _mode(run) in TRAINING_MODES and lineage_of(run[0] or {})[0] is None
                     and _model_dir(run) == _model_dir(first)]
    return chain


def _other_training(run, last, where):
    """How the left-out line names training `run`: its model_dir, and when that is the plotted one's, how it
    differs (a fork: a copy of the model_dir resumed on its own; or another training that path held)."""
    name = str(_model_dir(run))
    if _training_key(run) == _training_key(last):
        return name + " (a fork of it: a copy of its checkpoints trained on its own)"
    return name + (" (another training that path held)" if name == str(where) else "")


def _select_runs(runs):
    """(runs to plot, a line naming the runs left out or None)."""
    mode, has_steps = _mode, _has_steps
    benchmarks = [run for run in runs if mode(run) in BENCHMARK_MODES]
    others = [run for run in runs if mode(run) not in BENCHMARK_MODES]
    if not benchmarks or not any(map(has_steps, benchmarks + others)):
        return runs, None
    if any(map(has_steps, others)):
        counts = collections.Counter(map(mode, benchmarks))
        return others, "left out {} logged to the same file (their steps and throughput are not this " \
                       "training's)".format(" and ".join("{} {} run{}".format(n, name, "s" * (n > 1))
                                                         for name, n in counts.items()))
    last = benchmarks[-1]
    if len(benchmarks) == 1:
        return [last], None
    return [last], "plotted the last of {} benchmark runs logged to the same file ({})".format(
        len(benchmarks), mode(last))


def step_table(records):
    """One row per logged step, sorted by (kind, step): dicts with the keys of CSV_COLUMNS (None when absent).

    Training rows come from records with step [epoch, global_step] and a training key; benchmark rows from step
    [0, i] with total_ips (their `global_step` is the benchmark step index)."""
    rows = {}
    for record in records:
        step, data = record.get("step"), record["data"]
        if not (isinstance(step, list) and len(step) == 2):
            continue
        if BENCHMARK_KEY in data:
            kind = "benchmark"
        elif any(key in data for key in TRAIN_KEYS):
            kind = "train"
        else:
            continue
        row = {column: None for column in CSV_COLUMNS}
        row["epoch"], row["global_step"] = int(step[0]), int(step[1])
        try:
            for key in TRAIN_KEYS + (BENCHMARK_KEY,):
                if key in data:
                    row[key] = float(data[key])
        except (TypeError, ValueError):  # a value edited or damaged into a non-number: not a point of the curves
            continue
        rows[(kind, row["global_step"])] = row  # later record of the same step wins (resume)
    return [rows[key] for key in sorted(rows, key=lambda k: (k[0] != "train", k[1]))]


def resumes(records):
    """[(global step, {setting: (before, after)})] for each training run that logged steps after an earlier one in
    `records` (a resume: load_log keeps one model_dir's trainings), at its first logged training step, with the
    RESUME_KEYS its PARAMETER record changed against the previous training run's."""
    points, previous, pending = [], None, None
    for record in records:
        step, data = record.get("step"), record["data"]
        if step == "PARAMETER":
            if data.get("mode") in TRAINING_MODES:
                pending = data
        elif (pending is not None and isinstance(step, list) and len(step) == 2 and BENCHMARK_KEY not in data
              and any(key in data for key in TRAIN_KEYS)):
            if previous is not None:
                points.append((int(step[1]), _resume_changes(previous, pending)))
            previous, pending = pending, None
    return points


# The settings whose product is the images of one step (runtime/settings.images_per_step), and the path flags among
# RESUME_KEYS, compared as the directories they name (relative to each run's working_directory), not as typed.
IMAGES_PER_STEP_KEYS = ("batch_size", "replicas", "grad_accum_steps")
PATH_KEYS = ("data_dir",)
IMAGES_PER_STEP = "images_per_step"  # resumes' entry for a change of the images of one step (not a setting)
# The RESUME_KEYS a PARAMETER record leaves out at a value: `replicas` is logged over several replicas only.
ABSENT_MEANS = {"replicas": 1}


def _images_per_step(parameters):
    """The images of one step a PARAMETER record's settings give, or None when it does not say its batch size."""
    batch_size = parameters.get("batch_size")
    if not isinstance(batch_size, int):
        return None
    return batch_size * (parameters.get("replicas") or 1) * (parameters.get("grad_accum_steps") or 1)


def _resume_changes(previous, pending):
    """{setting: (before, after)} of the RESUME_KEYS a resume's PARAMETER record (`pending`) changed against the
    previous training's. A path flag is changed when the directories differ, not its spelling (`data` typed in /w,
    `w/data` from /); and a data_dir at another path whose train files are the ones before (the `train_files`
    fingerprint both records hold, since 2026-12-06) is a moved copy of the same data, not a change, while the same
    data_dir holding other train files is (`train_files`). A record without `replicas` ran one (ABSENT_MEANS).
    IMAGES_PER_STEP when the images of one step changed. Schedule flags that the resume found to change no rate it
    trains at (its `training` record's `schedule_rates_unchanged`, since 2026-12-07: a longer run of the step
    schedule) are not a change."""
    changes = {}
    same_rates = (pending.get("training") or {}).get("schedule_rates_unchanged") is True
    for key in RESUME_KEYS:
        if same_rates and key in SCHEDULE_FLAGS:
            continue
        before, after = (ABSENT_MEANS.get(key) if record.get(key) is None else record[key]
                         for record in (previous, pending))
        if key in PATH_KEYS:
            same_files = previous.get("train_files") is not None and \
                previous.get("train_files") == pending.get("train_files")
            if logged_path(previous, key) == logged_path(pending, key) or (key == "data_dir" and same_files):
                continue
        elif before == after:
            continue
        changes[key] = (before, after)
    if "data_dir" not in changes and None not in (previous.get("train_files"), pending.get("train_files")) and \
            previous["train_files"] != pending["train_files"]:
        changes["train_files"] = (previous["train_files"], pending["train_files"])
    images = _images_per_step(previous), _images_per_step(pending)
    if None in images and any(key in changes for key in IMAGES_PER_STEP_KEYS) or images[0] != images[1]:
        changes[IMAGES_PER_STEP] = images
    return changes


def describe_resumes(points):
    """One line for the resumes that changed a setting, or None. The images of a global step are said to differ
    only where a resume changed them."""
    changed = ["at step {} with {}".format(step, ", ".join(
        "{} {} (was {})".format(key, after, before) for key, (before, after) in changes.items()
        if key != IMAGES_PER_STEP))
        for step, changes in points if changes]
    if not changed:
        return None
    return "the training resumed {}: its curves mean another run from there{}".format(
        "; ".join(changed), " (a global step of another batch size is another number of images)"
        if any(IMAGES_PER_STEP in changes for _, changes in points) else "")


def epoch_ends(records):
    """{epoch: the global step that ended it} from the end-of-epoch records that log it (since 2026-12-06); the
    later record of an epoch wins (a resume)."""
    ends = {}
    for record in records:
        step, data = record.get("step"), record["data"]
        if isinstance(step, list) and len(step) == 1 and isinstance(data.get("global_step"), int):
            ends[int(step[0])] = data["global_step"]
    return ends


def epoch_boundaries(train, ends):
    """The steps to mark the epoch boundaries of the training rows `train` at: halfway between the step that ended
    an epoch (`ends`, from epoch_ends) and the next; for an epoch whose end the log does not record (older logs),
    the first logged step of the next, which is up to --display_every steps late."""
    boundaries = []
    for before, after in itertools.pairwise(train):
        if after["epoch"] != before["epoch"]:
            known = [ends[epoch] + 0.5 for epoch in range(before["epoch"], after["epoch"]) if epoch in ends]
            boundaries += known or [after["global_step"]]
    return boundaries


def final_results(records):
    """The step-[] records in file order, each paired with the last training step logged before it: a step record's,
    or an epoch end's `global_step` (the training's last step, which --display_every may not log: an evaluation
    after it is of that step's checkpoint)."""
    results, last_step = [], 0
    for record in records:
        step, data = record.get("step"), record["data"]
        if isinstance(step, list) and len(step) == 2 and BENCHMARK_KEY not in data:
            last_step = int(step[1])
        elif isinstance(step, list) and len(step) == 1 and isinstance(data.get("global_step"), int):
            last_step = max(last_step, data["global_step"])
        elif step == []:
            results.append((last_step, data))
    return results


def write_csv(rows, path):
    _make_parent(path)
    with replaced_file(path, newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            # repr() keeps every float exactly (a reader gets back the logged value).
            writer.writerow(["" if row[c] is None else repr(row[c]) for c in CSV_COLUMNS])


def throughput_lines(finals):
    """(value, legend label) of each final train_throughput: one a training invocation, so a resumed training has
    several, told apart by their order."""
    values = [data["train_throughput"] for _, data in finals if "train_throughput" in data]
    return [(value, "train_throughput {:.1f} img/s{}".format(
        value, " (run {} of {})".format(index + 1, len(values)) if len(values) > 1 else ""))
        for index, value in enumerate(values)]


def plot(rows, finals, output, title="", resumed=(), ends=None):
    """Writes the four-panel PNG to `output` with matplotlib's Agg canvas (no display, no pyplot state); a dashed
    line at each step of `resumed` (from `resumes`), a dotted one at each epoch boundary (`ends`: epoch_ends)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError("matplotlib is not installed (pip install -r requirements.txt)") from None

    train = [r for r in rows if r[BENCHMARK_KEY] is None]
    bench = [r for r in rows if r[BENCHMARK_KEY] is not None]
    figure = Figure(figsize=(13, 8.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    (ax_loss, ax_lr), (ax_ips, ax_acc) = figure.subplots(2, 2)
    if title:
        figure.suptitle(title)

    def series(key, source=train):
        points = [(r["global_step"], r[key]) for r in source if r[key] is not None]
        return [p[0] for p in points], [p[1] for p in points]

    # A thin line where the epoch changes, so the global-step axis also reads in epochs (not for long runs,
    # where the lines would hide the curves).
    epoch_starts = epoch_boundaries(train, ends or {})

    def epoch_lines(axis):
        for step in epoch_starts if len(epoch_starts) <= MAX_EPOCH_LINES else ():
            axis.axvline(step, color="0.6", linestyle=":", linewidth=0.8, zorder=0)
        for index, (step, changes) in enumerate(resumed):
            label = None if index else "resumed"
            axis.axvline(step, color="tab:red", linestyle="--", linewidth=0.9, alpha=0.7, zorder=0, label=label)
            if changes:
                axis.annotate(", ".join("{} {}".format(key, after) for key, (_, after) in changes.items()),
                              (step, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                              textcoords="offset points", color="tab:red", fontsize=8)

    for key in ("cross_entropy", "total_loss"):
        steps, values = series(key)
        if steps:
            ax_loss.plot(steps, values, marker="." if len(steps) < 50 else None, label=key)
    if not train:
        _no_data(ax_loss, "no training steps (benchmark log)")
        _no_data(ax_lr, "no training steps (benchmark log)")
    epoch_lines(ax_loss)
    _finish(ax_loss, "Loss", "global step", "loss")

    steps, values = series("learning_rate")
    if steps:
        ax_lr.plot(steps, values, color="tab:green", marker="." if len(steps) < 50 else None)
    epoch_lines(ax_lr)
    _finish(ax_lr, "Learning rate", "global step", "learning rate", legend=False)

    steps, values = series("imgs_per_sec")
    if steps:
        ax_ips.plot(steps, values, color="tab:purple", linewidth=0.9, label="imgs_per_sec (per step)")
    steps, values = series(BENCHMARK_KEY, bench)
    if steps:
        ax_ips.plot(steps, values, color="tab:orange", linewidth=0.9, label="total_ips (benchmark step)")
    for value, label in throughput_lines(finals):
        ax_ips.axhline(value, color="black", linestyle="--", linewidth=1, label=label)
    ax_ips.set_ylim(0, ax_ips.get_ylim()[1] * 1.1)  # headroom so the top of the curve is not on the frame
    _finish(ax_ips, "Throughput", "global step (benchmark: step index)" if train and bench else
            "global step" if train else "benchmark step", "images / s")

    _plot_accuracy(ax_acc, finals, ax_loss.get_xlim() if train else None,
                   "Accuracy (end of training)" if train else "Accuracy (end of the run)")

    _make_parent(output)
    with replaced_file(output, "wb") as handle:
        figure.savefig(handle, format="png")


def _plot_accuracy(axis, finals, xlim, title):
    evaluations = [(step, data) for step, data in finals if "top1_accuracy" in data or "top5_accuracy" in data]
    for key, color, offset in (("top1_accuracy", "tab:blue", -14), ("top5_accuracy", "tab:red", 8)):
        points = [(step, 100.0 * data[key]) for step, data in evaluations if key in data]
        if not points:
            continue
        axis.plot([p[0] for p in points], [p[1] for p in points], "o", color=color,
                  label=key.replace("_accuracy", ""), linestyle="-" if len(points) > 1 else "none")
        for step, value in points:  # left of the point: an evaluation follows the last step, at the axis's end
            axis.annotate("{:.2f}%".format(value), (step, value), textcoords="offset points",
                          xytext=(-6, offset), ha="right", color=color)
    if evaluations:
        axis.set_ylim(0, 105)
        # The training panels' step axis, so an evaluation sits under the step it followed; widened only for a step
        # outside it. A log without training steps has no such axis: the evaluations' steps and a margin.
        steps = [step for step, _ in evaluations]
        low, high = xlim if xlim else (min(steps), max(steps))
        margin = max(1.0, 0.05 * (high - low))
        axis.set_xlim(low if xlim and min(steps) >= low else min(steps) - margin,
                      high if xlim and max(steps) <= high else max(steps) + margin)
    else:
        _no_data(axis, "no evaluation in this log")
    summary = []
    last, source = {}, {}
    for _, data in finals:
        last.update(data)
        source.update(dict.fromkeys(data, data.get(RUN_MODE_KEY)))
    for key, label, fmt in FINAL_TEXT_KEYS:
        if isinstance(last.get(key), (int, float)) and math.isfinite(last[key]):
            # a figure of a later run on the same model (an evaluate after the training) says so
            where = " (--mode {})".format(source[key]) if source.get(key) not in (None,) + TRAINING_MODES else ""
            summary.append("{}{}: {}".format(label, where, fmt.format(last[key])))
    if summary:
        axis.text(0.02, 0.03, "\n".join(summary), transform=axis.transAxes, va="bottom", fontsize=9,
                  bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.7"})
    _finish(axis, title, "global step", "accuracy (%)", legend=bool(evaluations))


def _no_data(axis, text):
    axis.text(0.5, 0.55, text, ha="center", va="center", transform=axis.transAxes, color="0.4")


def _finish(axis, title, xlabel, ylabel, legend=True):
    axis.set_title(title)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.grid(True, alpha=0.3)
    if legend and axis.get_legend_handles_labels()[0]:
        axis.legend(loc="best", fontsize=9)


def _make_parent(path):
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as error:
        raise UserError("cannot create directory {}: {}".format(parent, error.strerror or error)) from None


def _title(path, parameters, resumed=()):
    """The log's path and the runs' RUN_PARAMETERS; one a resume changed reads `batch_size 32->16`."""
    details = []
    for key in RUN_PARAMETERS:
        values = [changes[key][0] for _, changes in resumed if key in changes]
        value = parameters.get(key)
        if values:
            details.append("{} {}".format(key, "->".join(str(v) for v in values + [value])))
            continue
        if value is None or value is False:
            continue
        details.append(key if value is True else "{} {}".format(key, value))
    return "{}  ({})".format(path, ", ".join(details)) if details else path


def _why_no_steps(parameters):
    """Why the runs of a log logged no step, from their PARAMETER record: the tool or mode that wrote it."""
    mode = parameters.get("mode")
    if "backend" in parameters and mode is None:
        return "it is a log of inference.py, which logs its throughput, latency and accuracy, not steps"
    if mode == "evaluate":  # its (0, i) throughput records are its evaluation's, left out of the curves
        return ("--mode evaluate logs no training steps (its evaluation's throughput records are not plotted; its "
                "result is its final record's accuracy and throughput), so there is nothing to plot")
    if mode == "predict":
        return "--mode predict logs no steps, so there is nothing to plot"
    if mode in BENCHMARK_MODES:
        return ("its --mode {} logged no step: a benchmark logs one every --display_every {} steps after its "
                "--warmup_steps {}, and it was run with --num_iter {} --iter_unit {} (or stopped before)".format(
                    mode, parameters.get("display_every"), parameters.get("warmup_steps"),
                    parameters.get("num_iter"), parameters.get("iter_unit")))
    if mode in STEP_MODES:
        return "its --mode {} run stopped before its first step was logged".format(mode)
    return "nothing to plot"


def run(log_path, output, csv_path=None):
    """The whole tool as a function: returns the per-step rows it plotted."""
    for flag, path in (("--output", output), ("--csv", csv_path)):
        if path:
            check_output_file(flag, path)  # before the (slow) plot
    records, parameters, left_out = load_log(log_path)
    if left_out:
        print("Note: {}".format(left_out))
    rows = step_table(records)
    if not rows:
        raise UserError("{} has no steps to plot (no training records with step [epoch, global_step], no benchmark "
                        "records with step [0, i]): {}".format(log_path, _why_no_steps(parameters)))
    resumed = resumes(records)
    changed = describe_resumes(resumed)
    if changed:
        print("Note: {}".format(changed))
    if csv_path:
        write_csv(rows, csv_path)
    plot(rows, final_results(records), output, title=_title(log_path, parameters, resumed), resumed=resumed,
         ends=epoch_ends(records))
    return rows


def parse_args(argv=None):
    parser = ArgumentParser(prog="python -m utils.plot_log", description=doc_part(__doc__),
                            allow_abbrev=False)
    parser.add_argument("log", help="DLLL log written by main.py (results_dir/log_filename, e.g. results/log.json)")
    parser.add_argument("-o", "--output", default=None,
                        help="PNG to write (default: curves.png next to the log)")
    parser.add_argument("--csv", default=None, metavar="OUT.csv", help="also write the per-step table as CSV")
    args = parser.parse_args(argv)
    if args.output is None:
        args.output = os.path.join(os.path.dirname(args.log), "curves.png")
    return args


@command
def main(argv=None):
    args = parse_args(argv)
    rows = run(args.log, args.output, args.csv)
    print("wrote {} ({} steps){}".format(args.output, len(rows), " and " + args.csv if args.csv else ""))


if __name__ == "__main__":
    sys.exit(main())
