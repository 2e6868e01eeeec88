"""Step counting and file listing of the original (docs/ORIGINAL.md#step-counting,
docs/ORIGINAL.md#predict-input), with clear errors for missing data."""

import errno
import glob
import math
import os
import shlex
import unicodedata
from typing import Callable, Sequence

from utils.dataset_manifest import leaves_outputs_unnamed
from utils.errors import UserError, printable
from utils.tfrecord_framing import count_records  # the one record counter (framing walk, no decoding)

PREDICT_EXTENSIONS = (".jpg", ".jpeg", ".png")


def require_data_dir(data_dir, mode):
    """The original's error when training ('train') or evaluation ('validation') has no --data_dir."""
    if not data_dir:
        raise UserError("`data_dir` must be specified for {}!".format(
            "training" if mode == "train" else "evaluation"))


def list_filenames_in_dataset(data_dir, mode):
    """Sorted `train-*` (mode 'train') or `validation-*` files of `data_dir`; a clear error when there are none."""
    prefix = {"train": "train", "validation": "validation"}[mode]
    require_data_dir(data_dir, mode)
    if not os.path.isdir(data_dir):
        raise UserError("data dir {} does not exist or is not a directory".format(data_dir))
    filenames = sorted(path for path in glob.glob(os.path.join(glob.escape(data_dir), prefix + "-*"))
                       if os.path.isfile(path) and not path.endswith(".tmp") and ".tmp-" not in path)
    if not filenames:
        raise UserError("no {}-* files in data dir {} (TFRecord shards named {}-00000-of-NNNNN expected; "
                        "see `python -m dataprep.build_tfrecords`)".format(prefix, data_dir, prefix))
    return filenames


def list_index_files(idx_dir, filenames):
    """DALI index file for every TFRecord file (same basename in `idx_dir`); a clear error if one is missing."""
    if not os.path.isdir(idx_dir):
        raise UserError("DALI index dir {} does not exist".format(idx_dir))
    indexes = [os.path.join(idx_dir, os.path.basename(path)) for path in filenames]
    missing = [path for path in indexes if not os.path.isfile(path)]
    if missing:
        raise UserError("{} DALI index file(s) missing in {}, e.g. {} (create them with "
                        "`python -m dataprep.make_dali_index {} {}`)".format(
                            len(missing), idx_dir, os.path.basename(missing[0]),
                            shlex.quote(os.path.dirname(filenames[0]) or "."), shlex.quote(idx_dir)))
    for index, path in zip(indexes, filenames):
        check_index_matches(index, path)
    return indexes


def check_index_matches(index_path, tfrecord_path):
    """UserError unless the DALI index describes this TFRecord file: its records (`<offset> <size>` lines) must
    follow each other from offset 0, each starting where the one before ends, the last end where the file ends, and
    there must be as many as the file's framing holds. An index of another dataset, of the file before it was
    rewritten, or edited (DALI reads whatever it says: a repeated line scored one record several times, two lines
    merged into one dropped a record and read another twice), fails this."""
    records = []
    try:
        with open(index_path, encoding="ascii") as handle:
            records = [tuple(int(field) for field in line.split()[:2]) for line in handle if line.strip()]
        end = 0
        for offset, size in records:
            if offset != end or size <= 0:
                raise ValueError("record at {} where {} was expected".format(offset, end))
            end = offset + size
    except (OSError, ValueError, TypeError, UnicodeDecodeError):
        end = None
    # (count_records names a damaged shard as such, a UserError, not blamed on its index; the count is the one
    # count_samples made of the same file, cached)
    if end != os.path.getsize(tfrecord_path) or len(records) != count_records(tfrecord_path):
        count_records(tfrecord_path)  # (when the sizes already disagreed)
        raise UserError("DALI index {} does not describe {} (another dataset's, or made before the file was "
                        "rewritten): re-create it with `python -m dataprep.make_dali_index {} {}`".format(
                            index_path, tfrecord_path, shlex.quote(os.path.dirname(tfrecord_path) or "."),
                            shlex.quote(os.path.dirname(index_path) or ".")))


def count_samples(filenames: Sequence[str], what: str = "", log: Callable[[str], None] | None = None) -> int:
    """Exact number of records in `filenames` (every file's framing walked, payloads skipped).

    The original estimated count(first) * (n - 1) + count(last), wrong for unevenly sharded data. With `log`,
    prints `<what> samples: N (from K files)`. A corrupt or truncated file is a UserError naming it.
    """
    num_samples = sum(count_records(path) for path in filenames)
    if log is not None:
        log("{} samples: {} (from {} file{})".format(what, num_samples, len(filenames),
                                                    "" if len(filenames) == 1 else "s"))
    return num_samples


def too_few_for_a_batch(num_samples, config, replicas):
    """The UserError of a train split of `num_samples` records, fewer than one global batch of `config` over
    `replicas`: the flags that make up the batch, and which to lower."""
    parts = ["--batch_size {}".format(config.batch_size)] + \
        (["{} replicas".format(replicas)] if replicas > 1 else []) + \
        (["--grad_accum_steps {}".format(config.grad_accum_steps)] if config.grad_accum_steps > 1 else [])
    return UserError("the dataset has {} samples, fewer than one global batch of {} ({}): use a smaller {}".format(
        num_samples, config.batch_size * replicas * config.grad_accum_steps, " x ".join(parts),
        "--batch_size or --grad_accum_steps" if config.grad_accum_steps > 1 else "--batch_size"))


def count_steps(iter_unit, num_samples, num_iter, global_batch_size):
    """(num_steps, num_epochs, num_decay_steps) of docs/ORIGINAL.md#step-counting."""
    steps_per_real_epoch = num_samples // global_batch_size
    if steps_per_real_epoch == 0:
        raise UserError("the dataset has {} samples, fewer than one global batch of {}".format(
            num_samples, global_batch_size))
    if iter_unit == "epoch":
        num_steps = steps_per_real_epoch * num_iter
        num_epochs = num_iter
        num_decay_steps = num_steps
    else:
        num_steps = num_iter
        num_epochs = math.ceil(num_steps / steps_per_real_epoch)
        num_decay_steps = 90 * num_samples // global_batch_size
    return num_steps, num_epochs, num_decay_steps


def batch_unit_epoch_note(iter_unit, num_samples, num_steps, num_epochs, global_batch_size):
    """The note of a run counted in batches on a dataset whose pass is not the schedule's epoch, else None: the
    original's epoch is then num_steps / num_epochs steps (count_steps), which the learning-rate schedule and the
    log's epoch numbers count, not a pass over the data."""
    if iter_unit != "batch" or not num_samples:
        return None
    per_pass = num_samples // global_batch_size
    steps_per_epoch = num_steps / num_epochs
    if steps_per_epoch == per_pass:
        return None
    return ("Note: under --iter_unit batch an epoch of the learning-rate schedule (--lr_warmup_epochs included) and "
            "of the log's epoch numbers is {:,} steps / {} Training Epochs = {:g} steps (the original's counting), "
            "not a pass over the {:,} training images ({:,} steps of {})").format(
                num_steps, num_epochs, steps_per_epoch, num_samples, per_pass, global_batch_size)


def steps_this_run(run_iter, iter_unit, steps_per_epoch, num_steps, current_step):
    """Training steps of this invocation: --run_iter (in --iter_unit; -1 = all), never past num_steps."""
    if run_iter == -1:
        run_iter = num_steps
    elif iter_unit == "epoch":
        run_iter = int(run_iter * steps_per_epoch)
    return max(0, min(run_iter, num_steps - current_step))


class InferenceFiles(list):
    """The files `--mode predict` reads (a list of paths, in order) and what listing a directory left out:
    `skipped`: [(path, reason)] for entries named like images that cannot be used (a link pointing outside the
    directory, a dangling link, not a regular file); runtime/predict.predict_files reports each as a `SKIPPED`
    line and counts it as failed. `ignored`: one line saying how many entries were not considered (other
    extensions, sub-directories), or None."""

    def __init__(self, files=(), skipped=(), ignored=None):
        super().__init__(files)
        self.skipped = list(skipped)
        self.ignored = ignored


def class_name_as_read(line):
    """The class name a line of a labels file gives (without its "\\n"): a "\\r" before the line's end and the spaces
    around the name are no part of it. dataprep checks the names it writes by this reading."""
    return line.removesuffix("\r").strip()


def has_control_characters(name):
    """Whether `name` holds characters read_class_names refuses (printed raw, they would drive the terminal)."""
    return any(unicodedata.category(char) == "Cc" for char in name)


def read_class_names(path):
    """The class names of a labels file (line k names label k; blank lines at its end are left out), or None when
    there is no such file or it names none (an empty file, such as a copy cut short by a full disk, is no list of 0
    classes). UserError for a file that is not UTF-8 text, a blank line before a name (the names after it would
    name the wrong outputs) and a name with control characters (printed raw, they would drive the terminal)."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:  # a BOM is no part of the first name
            lines = handle.read().split("\n")
    except UnicodeDecodeError as error:
        raise UserError("{} is not UTF-8 text (byte {} of the file): write the class names in UTF-8".format(
            path, error.start + 1)) from None
    names = [class_name_as_read(line) for line in lines]
    while names and not names[-1]:
        names.pop()
    for number, name in enumerate(names, 1):
        if not name:
            raise UserError("{} line {} is empty: line k names label k, so the names after it would name the wrong "
                            "outputs; write the class's name there".format(path, number))
        if has_control_characters(name):
            raise UserError("{} line {} holds control characters ({!r}): write the class's name as plain "
                            "text".format(path, number, name[:80]))
    return names or None


def class_names_for_export(directory, num_classes):
    """The class names an export records: labels.txt in `directory` (a training keeps the dataset's beside its
    checkpoints), output k named by its line k + 1; None without one, or when it names more classes than the model
    has outputs (another dataset's file)."""
    names = read_class_names(os.path.join(directory, "labels.txt")) if directory else None
    return names if names and len(names) <= num_classes else None


def unnamed_outputs(names, num_classes):
    """", naming 4 of the 10 outputs (outputs 4..9 by their index only)" for an export's line when its class names
    leave more than the original's last output unnamed (a model given a larger --num_classes than its data), else
    ""."""
    if not names or not leaves_outputs_unnamed(len(names), num_classes):
        return ""
    return ", naming {} of the {} outputs (outputs {}..{} by their index only)".format(
        len(names), num_classes, len(names), num_classes - 1)


def no_class_names_line(directory, num_classes):
    """The line of an export that records no class names (class_names_for_export gave None): why, and what it
    means for its readers."""
    path = os.path.abspath(os.path.join(directory, "labels.txt")) if directory else None
    names = read_class_names(path) if path else None
    why = "no checkpoint" if path is None else "{} names {} classes, more than the model's {} outputs (another " \
        "dataset's)".format(path, len(names), num_classes) if names else "no labels.txt beside the checkpoint " \
        "({} {})".format(path, "is empty" if os.path.isfile(path) else "does not exist")
    return printable("It records no class names ({}): its outputs are known by their index only".format(why))


# The end of the warning of an evaluation whose data names other classes than the model was trained on.
OTHER_CLASSES_SCORED = "the accuracy compares output k with label k, which names another class here"


def class_list_difference(names, expected):
    """None when the two class lists are equal (or either is None); else their first difference in words."""
    if names is None or expected is None or list(names) == list(expected):
        return None
    if len(names) != len(expected):
        return "{} classes against {}".format(len(names), len(expected))
    if sorted(names) == sorted(expected):
        return "the same names in another order"
    index = next(i for i, (a, b) in enumerate(zip(names, expected)) if a != b)
    return "label {}: {!r} against {!r}".format(index + 1, names[index], expected[index])


def other_class_names(path, reference):
    """None when labels file `path` names the classes of labels file `reference` (or either is absent); else
    "<path> names other classes than <reference> (<the first difference>)"."""
    difference = class_list_difference(read_class_names(path), read_class_names(reference))
    return "{} names other classes than {} ({})".format(path, reference, difference) if difference else None


def parse_inference_input(to_predict, flag="--to_predict"):
    """A file, or the image files (by extension, non-recursive) of a directory in sorted order: InferenceFiles.

    In a directory, an entry named `*.jpg/*.jpeg/*.png` (any case) that is a link pointing outside the directory
    is not followed, and a dangling link or something that is not a regular file (a FIFO, a socket) cannot be
    read; each goes to `skipped` and the others are still predicted. Other names, hidden names (`.name`, which
    dataprep leaves out too: macOS's `._x.jpg` companions are no images) and sub-directories are counted, and the files
    named, in `ignored`. A directory with nothing to predict and nothing skipped is a UserError.
    """
    if to_predict is None:
        raise UserError("No data to predict on.")
    if os.path.isfile(to_predict):
        return InferenceFiles([to_predict])
    if not os.path.isdir(to_predict):
        raise UserError("{} {} does not exist".format(flag, to_predict))
    root = os.path.realpath(to_predict)
    try:
        names = sorted(os.listdir(to_predict))
    except OSError as error:
        raise UserError("cannot list {} {}: {}".format(flag, to_predict, error.strerror or error)) from None
    files, skipped, other_extensions, directories, hidden = [], [], {}, 0, []
    for name in names:
        path = os.path.join(to_predict, name)
        if name.startswith("."):
            hidden.append(name)
            continue
        if not name.lower().endswith(PREDICT_EXTENSIONS):
            if os.path.isdir(path):
                directories += 1
            else:
                extension = os.path.splitext(name)[1].lower() or "no extension"
                other_extensions.setdefault(extension, []).append(name)
            continue
        reason = _unusable_entry(path, root, to_predict)
        if reason == _DIRECTORY:
            directories += 1
        elif reason is not None:
            skipped.append((path, reason))
        else:
            files.append(path)
    ignored = _ignored_line(other_extensions, directories, hidden)
    if not files and not skipped:
        raise UserError("no image files ({}) in directory {}{}".format(
            " ".join(PREDICT_EXTENSIONS), to_predict, " ({})".format(ignored) if ignored else ""))
    return InferenceFiles(files, skipped, ignored)


_DIRECTORY = object()


def _unusable_entry(path, root, directory):
    """Why a directory entry named like an image cannot be predicted (None: it can; _DIRECTORY: a sub-directory,
    not searched). A link is resolved only as far as telling where it points; one pointing outside `root` is not
    opened or stat-ed."""
    if os.path.islink(path):
        target = os.path.realpath(path)
        if os.path.commonpath([root, target]) != root:
            return "a link pointing outside {} (not followed)".format(directory)
        try:
            os.stat(path)
        except FileNotFoundError:
            return "a dangling link (its target {} does not exist)".format(os.readlink(path))
        except OSError as error:
            if error.errno == errno.ELOOP:
                return "a link that loops (too many levels of symbolic links)"
            return "a link that cannot be followed: {}".format(error.strerror or error)
    if os.path.isdir(path):
        return _DIRECTORY
    if not os.path.isfile(path):
        return "not a regular file"
    return None


def _ignored_line(other_extensions, directories, hidden=()):
    """`Ignored 3 files that are not .jpg/.jpeg/.png (2 .bmp: a.bmp, b.bmp; 1 .webp: c.webp), 1 hidden entry
    (.x.jpg) and 1 sub-directory (not searched)`: `other_extensions` {extension: names}, the first names of each."""
    def named(names):
        return ", ".join(printable(name, 100) for name in names[:3]) + (", ..." if len(names) > 3 else "")

    parts = []
    count = sum(len(names) for names in other_extensions.values())
    if count:
        kinds = sorted(other_extensions.items(), key=lambda item: (-len(item[1]), item[0]))
        parts.append("{} file{} that {} not {} ({})".format(
            count, "" if count == 1 else "s", "is" if count == 1 else "are", "/".join(PREDICT_EXTENSIONS),
            "; ".join("{} {}: {}".format(len(names), extension, named(names)) for extension, names in kinds)))
    if hidden:
        parts.append("{} hidden entr{} ({})".format(len(hidden), "y" if len(hidden) == 1 else "ies", named(hidden)))
    if directories:
        parts.append("{} sub-director{} (not searched)".format(directories, "y" if directories == 1 else "ies"))
    if not parts:
        return None
    return "Ignored " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0])
