"""What a TFRecord dataset says about itself, read without TensorFlow: its shards, whether it is complete, and the
class count dataprep recorded (docs/RELIABILITY.md#how-state-survives-a-crash).

dataprep (`dataprep/records.write_split`) writes a manifest `<data_dir>/.dataprep-<split>.json` beside the shards
of each split. Version 2 holds the contract of the split:

    {"version": 2, "split": "train", "num_shards": 10, "num_images": 9000, "fingerprint": "...",
     "num_classes": 10, "label_range": [1, 10], "complete": true,
     "shards": {"0": {"written": 900, "skipped": [[file, reason], ...]}, ...}}

`complete` is false from the start of a run and true only once its last shard is written and recorded. Version 1
(earlier dataprep) has no class facts and no `complete`: such a split is complete when every shard is recorded.
Datasets without a manifest (converted by the original's scripts, or written by tests) have no class facts;
their completeness comes from the shard names: `train-00003-of-00010` promises 10 shards; names without such a
suffix promise nothing, and the split counts as complete.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import re

from utils.errors import UserError

SPLITS = ("train", "validation")
MANIFEST_VERSIONS = (1, 2)
_SHARD_NAME = re.compile(r"^(?P<split>[a-z]+)-(?P<index>\d+)-of-(?P<count>\d+)$")


@dataclasses.dataclass(frozen=True)
class SplitFacts:
    """One split of a dataset directory.

    files: the shard files present, sorted (what the trainer reads: `<split>-*`, temporary files excluded).
    expected_shards: the shard count promised (manifest, else the agreeing `-of-NNNNN` names), None if unknown.
    present_shards: how many of the promised shards are present (all files when nothing is promised).
    complete: every promised shard present and, with a version 2 manifest, the run recorded as finished.
    num_classes, label_range: K and (1, K) of the labels 1..K dataprep wrote (None without a version 2 manifest).
    num_images: records written to the shards the manifest records (None without a manifest).
    manifest_path: the manifest read, or None.
    """

    split: str
    data_dir: str
    files: tuple[str, ...]
    expected_shards: int | None
    present_shards: int
    complete: bool
    num_classes: int | None = None
    label_range: tuple[int, int] | None = None
    num_images: int | None = None
    manifest_path: str | None = None


def manifest_path(data_dir: str, split: str) -> str:
    """Where dataprep writes the manifest of `split`."""
    return os.path.join(data_dir, f".dataprep-{split}.json")


def list_split_files(data_dir: str, split: str) -> list[str]:
    """The sorted `<split>-*` files of data_dir, without temporary files (`*.tmp`, `*.tmp-*`): the same list as
    runtime/runner_utils.list_filenames_in_dataset, with no error when it is empty."""
    return sorted(path for path in glob.glob(os.path.join(glob.escape(data_dir), split + "-*"))
                  if os.path.isfile(path) and not path.endswith(".tmp") and ".tmp-" not in path)


def _read_manifest(path: str) -> dict | None:
    """The manifest at `path` (None when there is none); a UserError naming it when it cannot be used."""
    if not os.path.exists(path):
        return None
    remedy = ("re-run the dataprep command with --resume to rewrite it, or delete it to use the shards without "
              "the facts it records")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read dataset manifest {path} ({error}); {remedy}") from None
    if not isinstance(manifest, dict) or manifest.get("version") not in MANIFEST_VERSIONS:
        version = manifest.get("version") if isinstance(manifest, dict) else None
        raise UserError(f"dataset manifest {path} has an unknown format (version {version!r}; this code reads "
                        f"{', '.join(str(v) for v in MANIFEST_VERSIONS)}); {remedy}")
    try:
        int(manifest["num_shards"])
        dict(manifest.get("shards", {}))
    except (KeyError, TypeError, ValueError):
        raise UserError(f"dataset manifest {path} lacks its shard count; {remedy}") from None
    return manifest


def _shards_by_name(files, split):
    """[(shard index, promised count)] of files named `<split>-IIIII-of-NNNNN`; None if any file is named
    otherwise."""
    found = []
    for path in files:
        match = _SHARD_NAME.match(os.path.basename(path))
        if match is None or match["split"] != split:
            return None
        found.append((int(match["index"]), int(match["count"])))
    return found


def read_split(data_dir: str, split: str) -> SplitFacts:
    """The facts of `split` ("train" or "validation") of the dataset in data_dir. Raises UserError when data_dir is
    not a directory or its manifest cannot be read."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    if not os.path.isdir(data_dir):
        raise UserError(f"data dir {data_dir} does not exist or is not a directory")
    files = tuple(list_split_files(data_dir, split))
    path = manifest_path(data_dir, split)
    manifest = _read_manifest(path)
    names = {os.path.basename(f) for f in files}
    if manifest is not None:
        expected = int(manifest["num_shards"])
        shard_names = [f"{split}-{i:05d}-of-{expected:05d}" for i in range(expected)]
        present = sum(1 for name in shard_names if name in names)
        recorded = {str(k) for k in manifest.get("shards", {})}
        if manifest["version"] >= 2:
            finished = manifest.get("complete") is True
        else:  # version 1 recorded each shard as it was written, but not the end of the run
            finished = all(str(i) in recorded for i in range(expected))
        num_classes = manifest.get("num_classes")
        label_range = manifest.get("label_range")
        written = [info.get("written") for info in manifest.get("shards", {}).values() if isinstance(info, dict)]
        return SplitFacts(
            split=split, data_dir=data_dir, files=files, expected_shards=expected, present_shards=present,
            complete=finished and present == expected,
            num_classes=int(num_classes) if num_classes is not None else None,
            label_range=(int(label_range[0]), int(label_range[1])) if label_range is not None else None,
            num_images=sum(int(w) for w in written if w is not None) if written else None,
            manifest_path=path)
    by_name = _shards_by_name(files, split)
    counts = {count for _, count in by_name} if by_name else set()
    if by_name is None or len(counts) != 1:  # no promise in the names, or names that disagree
        return SplitFacts(split=split, data_dir=data_dir, files=files, expected_shards=None,
                          present_shards=len(files), complete=bool(files))
    expected = counts.pop()
    present = len({index for index, _ in by_name if index < expected})
    return SplitFacts(split=split, data_dir=data_dir, files=files, expected_shards=expected, present_shards=present,
                      complete=present == expected)


def check_complete(facts: SplitFacts) -> None:
    """A UserError when the split is missing shards or its dataprep run did not finish."""
    if facts.complete:
        return
    if not facts.files:
        raise UserError(f"no {facts.split}-* files in data dir {facts.data_dir} (TFRecord shards named "
                        f"{facts.split}-00000-of-NNNNN expected; see `python -m dataprep.build_tfrecords`)")
    resume = "finish it with the same dataprep command plus --resume"
    if facts.expected_shards is not None and facts.present_shards < facts.expected_shards:
        raise UserError(f"dataset {facts.data_dir} is incomplete: {facts.present_shards} of {facts.expected_shards} "
                        f"{facts.split} shards (dataprep was interrupted?); {resume}")
    raise UserError(f"dataset {facts.data_dir} is incomplete: {os.path.basename(facts.manifest_path or '')} does "
                    f"not record the {facts.split} split as finished (dataprep was interrupted?); {resume}")


def check_classes(facts: SplitFacts, num_classes: int, flag: str = "--num_classes", model: str | None = None) -> None:
    """A UserError when the labels dataprep recorded do not fit 1..num_classes (labels are 1-based; the model's
    output index is label - 1, so ImageNet's labels 1..1000 fit 1001 outputs). Nothing is checked without
    recorded labels. `model` names what fixed num_classes ("checkpoint <path>", "--model <path>"), when a flag
    cannot change it: the error then says the model is not one of this dataset."""
    if facts.label_range is None:
        return
    low, high = facts.label_range
    where = os.path.basename(facts.manifest_path) if facts.manifest_path else "the dataset"
    if low < 1:
        raise UserError(f"dataset {facts.data_dir}'s labels {low}..{high} (recorded in {where}) are not 1-based; "
                        "re-create it with python -m dataprep.build_tfrecords")
    if high > num_classes:
        count = facts.num_classes if facts.num_classes is not None else high
        labels = f"dataset {facts.data_dir}'s labels {low}..{high} ({count} classes, recorded in {where})"
        if model is not None:
            raise UserError(f"{model} has {num_classes} outputs, too few for {labels}: it is not a model of this "
                            "dataset")
        raise UserError(f"{flag} {num_classes} cannot hold {labels}; pass {flag} {high} or more")
