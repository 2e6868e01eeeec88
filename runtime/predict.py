"""`--mode predict` (docs/ORIGINAL.md#modes): top-5 classes of image files, in batches, with class names from a
labels file when there is one. A file that cannot be used is reported and skipped; the others are still predicted."""

import json
import os
import signal
import sys

import numpy as np

from runtime.metrics import NON_FINITE_CAUSES
from runtime import runner_utils, settings
from runtime.runner_utils import read_class_names
from utils import data_utils, pixels
from utils.dataset_manifest import leaves_outputs_unnamed
from utils.errors import STOPPING, UserError, on_interrupt, printable


# The units of the counts ending a prediction's log (its final record, `PredictCounts.record`).
METADATA = {"predicted": {"unit": "files"}, "failed": {"unit": "files"}}


class PredictCounts:
    """What a prediction run did: files predicted, and files skipped because they could not be used."""

    def __init__(self):
        self.predicted = 0
        self.failed = 0

    def record(self, stop=None):
        """The log's final record: the counts, and `interrupted` (the signal's name) when `stop` ended the run."""
        data = {"predicted": self.predicted, "failed": self.failed}
        if stop is not None:
            data["interrupted"] = signal.Signals(getattr(stop, "signum", signal.SIGINT)).name
        return data


def predict_files(predict_step, files, image_size, batch_size, class_names=None, log=None):
    """Prints a legend (`legend_line`), then `<file>: <class> <probability>, ...` (top 5) for every file, `SKIPPED
    <file>: <reason>` on stderr for one that cannot be used, then `predicted N, failed M`; returns PredictCounts.
    `predict_step`: float32 images
    [B, S, S, 3] -> probabilities, a tensor or an array (runtime/train_step.make_predict_step; inference.py's
    backends).

    `files` from runtime/runner_utils.parse_inference_input (InferenceFiles): its `ignored` line goes to stderr
    first, and each of its `skipped` entries is a SKIPPED line and counts as failed, before the files are read.
    An interrupt (Ctrl-C, SIGTERM) ends the run with one line saying how many files were predicted. `log(data)`
    takes the final record (`PredictCounts.record`) when the run ends, an interrupted one included, so a log says
    what a run it ended did."""
    counts = PredictCounts()

    def skip(path, reason):
        counts.failed += 1
        print("SKIPPED {}: {}".format(printable(path), reason), file=sys.stderr, flush=True)

    print(legend_line(class_names), flush=True)
    ignored = getattr(files, "ignored", None)
    if ignored:
        print(ignored, file=sys.stderr, flush=True)
    for path, reason in getattr(files, "skipped", ()):
        skip(path, reason)
    total = len(files) + counts.failed
    try:
        with on_interrupt(lambda: "{} of {} file{} predicted (the lines above); run the same command again to predict "
                                  "all".format(counts.predicted, total, "" if total == 1 else "s")):
            _predict_batches(predict_step, files, image_size, batch_size, class_names, counts, skip)
    except STOPPING as stop:
        if log is not None:
            log(counts.record(stop))
        raise
    print("Ending Inference ...", flush=True)
    print("predicted {}, failed {}".format(counts.predicted, counts.failed), flush=True)
    if log is not None:
        log(counts.record())
    return counts


def _predict_batches(predict_step, files, image_size, batch_size, class_names, counts, skip):
    """predict_files' loop: a line for each file, SKIPPED for one whose outputs are not finite."""
    noted = False  # an EXIF orientation note explained once; later ones short (a folder of phone photos)
    for images, names in data_utils.iter_inference_batches(list(files), image_size, image_size, batch_size, skip):
        probabilities = np.asarray(predict_step(images))
        for probs, name in zip(probabilities, names):
            if not np.all(np.isfinite(probs)):  # a ranking of NaNs would be a made-up answer
                skip(name, "the model's outputs for it are not finite: " + NON_FINITE_CAUSES)
                continue
            top = np.argsort(-probs, kind="stable")[:5]
            print(format_prediction(name, probs, top, class_names), flush=True)
            counts.predicted += 1
            orientation = _orientation_note(name, explained=noted)
            if orientation:
                noted = True
                print(orientation, file=sys.stderr, flush=True)


def _orientation_note(path, explained=False):
    """The note for a photo whose EXIF Orientation tag a viewer obeys and the model does not, else None; short once
    a note has `explained` what it means."""
    try:
        with open(path, "rb") as handle:
            orientation = pixels.exif_orientation_note(handle.read(1 << 20))  # the tag is in the header
    except OSError:
        return None
    if orientation is None:
        return None
    if explained:
        return "Note: {} carries EXIF orientation {} too: seen as stored, as the first note says".format(
            path, orientation.split(",")[0])
    return ("Note: {} carries EXIF orientation {}: viewers show it so, but the model saw its pixels as stored, as "
            "every image in training (TensorFlow's decoder ignores the tag, as the original's did)".format(
                path, orientation))


def check_image(path, image_size):
    """UserError when the single file to predict on cannot be decoded (before the checkpoint is read)."""
    data_utils.load_inference_image(path, image_size, image_size)


def legend_line(class_names):
    """What the numbers of a prediction line are, said once before them: the output index is 0-based, as the
    original printed it, while dataprep and the records label the classes 1..K."""
    return ("Each line below gives a file's top 5 as <output index>{} <probability>, and output k is label k + 1 of "
            "the dataset's records (their labels start at 1)".format(" (<class name>)" if class_names is not None
                                                                      else ""))


def format_prediction(filename, probabilities, top, class_names):
    parts = []
    for index in top:
        name = ""
        if class_names is not None and index < len(class_names):
            name = " ({})".format(class_names[index])
        parts.append("{}{} {:.4f}".format(index, name, probabilities[index]))
    # A name holding ": " is quoted as a JSON string (a reader splits the line at its first ": ")
    shown = printable(json.dumps(filename, ensure_ascii=False) if ": " in filename else filename)
    return "{}: {}".format(shown, ", ".join(parts))


def load_class_names(labels_file, config, warn=None, say=print):
    """Class names from --labels_file, else labels.txt in model_dir (written there by training) or data_dir; None
    when there is none (classes are shown by number). A file that names other classes than the labels.txt beside
    the checkpoints (the classes it was trained on) is warned about, as evaluate and inference.py do. One line
    through `say` tells where the names came from (`Class names: 10 from <file>`), or that there are none."""
    beside_checkpoints = os.path.join(config.model_dir, "labels.txt")
    for path in settings.class_names_candidates(labels_file, config.model_dir, config.data_dir):
        names = read_class_names(path)
        if names is not None:
            _check_class_names(path, names, config.num_classes, warn)
            say(printable(class_names_line(path, names, labels_file, beside_checkpoints)))
            if os.path.abspath(path) != os.path.abspath(beside_checkpoints):
                other = runner_utils.other_class_names(path, beside_checkpoints)
                if other:
                    (warn or _print_stderr)("WARNING: {}, the classes this checkpoint was trained on: output k is "
                                            "its class k, shown here under this file's name k".format(other))
            return names
    if labels_file:
        raise UserError("--labels_file {} {}".format(labels_file, "names no class (it is empty)" if os.path.isfile(
            labels_file) else "does not exist"))
    say(printable("Class names: none (no labels.txt in model_dir {}{}, no --labels_file): the classes are shown by "
                  "their output index".format(os.path.abspath(config.model_dir), " nor in --data_dir {}".format(
                      os.path.abspath(config.data_dir)) if config.data_dir else "")))
    return None


def class_names_line(path, names, labels_file, beside_checkpoints):
    """"Class names: 10 from <absolute file>", and when they come from --data_dir's labels.txt (model_dir has none:
    a checkpoint copied without it), that it is --data_dir's, whose dataset need not be the checkpoint's."""
    where = os.path.abspath(path)
    if labels_file:
        return "Class names: {} from --labels_file {}".format(len(names), where)
    if os.path.abspath(path) == os.path.abspath(beside_checkpoints):
        return "Class names: {} from {} (kept beside the checkpoints)".format(len(names), where)
    return ("Class names: {} from --data_dir's {}, not from model_dir, which has no labels.txt: they name the outputs "
            "only if --data_dir is the dataset the checkpoint was trained on".format(len(names), where))


def _check_class_names(path, names, num_classes, warn=None):
    """One warning when the labels file names fewer classes than the model has outputs. One name fewer than the
    outputs is the original's layout (ImageNet: labels 1..1000 -> outputs 0..999; output 1000 is never a label;
    dataprep's datasets at --num_classes K + 1 alike) and passes.
    More names than outputs is a UserError: the file belongs to another dataset, and its names would be wrong."""
    if len(names) > num_classes:
        raise UserError("labels file {} names {} classes but the model has {} outputs: it is the labels file of "
                        "another dataset (pass the right --labels_file)".format(path, len(names), num_classes))
    if not leaves_outputs_unnamed(len(names), num_classes):
        return
    (warn or _print_stderr)("WARNING: labels file {} names {} classes but the model has {} outputs; outputs {}..{} "
                            "are shown by number only".format(path, len(names), num_classes, len(names),
                                                             num_classes - 1))


def _print_stderr(message):
    print(message, file=sys.stderr, flush=True)
