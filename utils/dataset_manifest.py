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

from utils.errors import UserError, first_line, printable

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
    recorded_finished: whether the manifest records the dataprep run as finished (None without a manifest).
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
    recorded_finished: bool | None = None  # whether the manifest records the run as finished (None: no manifest)


def manifest_path(data_dir: str, split: str) -> str:
    """Where dataprep writes the manifest of `split`."""
    return os.path.join(data_dir, f".dataprep-{split}.json")


def list_split_files(data_dir: str, split: str) -> list[str]:
    """The sorted `<split>-*` files of data_dir, without temporary files (`*.tmp`, `*.tmp-*`): the same list as
    runtime/runner_utils.list_filenames_in_dataset, with no error when it is empty."""
    return sorted(path for path in glob.glob(os.path.join(glob.escape(data_dir), split + "-*"))
                  if os.path.isfile(path) and not path.endswith(".tmp") and ".tmp-" not in path)


# More shards than any dataset has (ImageNet's are 1,024 and 128): a count above it is a damaged manifest, refused
# before anything is sized by it.
MAX_SHARDS = 1_000_000
_REMEDY = ("re-run the dataprep command with --resume to rewrite it, or delete it to use the shards without the facts "
           "it records")


def _is_count(value, low=0):
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _shown(value):
    """A value read from a manifest, as an error quotes it: printable, at most 60 characters."""
    return printable(json.dumps(value) if not isinstance(value, str) else repr(value), 60)


def _read_manifest(path: str, split: str | None = None) -> dict | None:
    """The manifest at `path` (None when there is none), each field it has checked for its type and range (and its
    `split`, when given, for being that split); a UserError naming the file and the field when it cannot be used."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError, RecursionError) as error:
        raise UserError(f"cannot read dataset manifest {printable(path)} ({first_line(error)}); {_REMEDY}") from None
    if not isinstance(manifest, dict) or not _is_count(manifest.get("version")) or \
            manifest.get("version") not in MANIFEST_VERSIONS:
        version = manifest.get("version") if isinstance(manifest, dict) else None
        raise UserError(f"dataset manifest {printable(path)} has an unknown format (version {_shown(version)}; this "
                        f"code reads {', '.join(str(v) for v in MANIFEST_VERSIONS)}); {_REMEDY}")
    check_manifest_fields(manifest, path, split)
    return manifest


def check_manifest_fields(manifest: dict, path: str, split: str | None = None) -> None:
    """A UserError naming `path` and the first field of `manifest` whose type or value dataprep never writes."""
    def bad(field, value, wanted):
        return UserError(f"dataset manifest {printable(path)}: field \"{field}\" is {_shown(value)}, not {wanted}; "
                         f"{_REMEDY}")

    if "num_shards" not in manifest:
        raise UserError(f"dataset manifest {printable(path)} lacks its shard count (field \"num_shards\"); {_REMEDY}")
    num_shards = manifest["num_shards"]
    if not _is_count(num_shards, 1) or num_shards > MAX_SHARDS:
        raise bad("num_shards", num_shards, f"a shard count (an integer 1..{MAX_SHARDS:,})")
    if "split" in manifest and (not isinstance(manifest["split"], str) or split is not None and
                                manifest["split"] != split):
        raise bad("split", manifest["split"], repr(split) if split else "a split name")
    if "num_images" in manifest and not _is_count(manifest["num_images"]):
        raise bad("num_images", manifest["num_images"], "an image count (an integer >= 0)")
    if "num_images" in manifest and manifest["num_images"] < num_shards:
        raise UserError(f"dataset manifest {printable(path)} records {num_shards:,} shards (field \"num_shards\") "
                        f"for {manifest['num_images']:,} images (field \"num_images\"): dataprep never writes an "
                        f"empty shard; {_REMEDY}")
    if "fingerprint" in manifest and not isinstance(manifest["fingerprint"], str):
        raise bad("fingerprint", manifest["fingerprint"], "a string")
    if "complete" in manifest and not isinstance(manifest["complete"], bool):
        raise bad("complete", manifest["complete"], "true or false")
    if "num_classes" in manifest and not _is_count(manifest["num_classes"], 1):
        raise bad("num_classes", manifest["num_classes"], "a class count (an integer >= 1)")
    if "label_range" in manifest:
        labels = manifest["label_range"]
        if not (isinstance(labels, list) and len(labels) == 2 and all(_is_count(v) for v in labels)
                and labels[0] <= labels[1]):
            raise bad("label_range", labels, "[lowest, highest] label")
    shards = manifest.get("shards", {})
    if not isinstance(shards, dict):
        raise bad("shards", shards, "an object of shard index: {written, skipped}")
    for key, info in shards.items():
        if not (key.isdigit() and key.isascii() and key == str(int(key)) and int(key) < num_shards):
            raise bad("shards", key, f"a shard index 0..{num_shards - 1:,} (as its key)")
        if not isinstance(info, dict):
            raise bad(f"shards.{key}", info, "an object {written, skipped}")
        if not _is_count(info.get("written")):
            raise bad(f"shards.{key}.written", info.get("written"), "a record count (an integer >= 0)")
        skipped = info.get("skipped", [])
        if not (isinstance(skipped, list) and all(isinstance(s, list) and len(s) == 2 and
                                                  all(isinstance(t, str) for t in s) for s in skipped)):
            raise bad(f"shards.{key}.skipped", skipped, "a list of [file, reason]")
    if manifest.get("complete") is True and "num_images" in manifest and len(shards) == num_shards:
        accounted = sum(info["written"] + len(info.get("skipped", [])) for info in shards.values())
        if accounted != manifest["num_images"]:
            raise UserError(f"dataset manifest {printable(path)} records {manifest['num_images']:,} images (field "
                            f"\"num_images\") but its shards record {accounted:,} written or skipped (field "
                            f"\"shards\"); {_REMEDY}")


def _promised_present(files, split, count):
    """The indices of the files named exactly `<split>-IIIII-of-<count>` (the names dataprep gives), below count."""
    found = set()
    for path in files:
        match = _SHARD_NAME.match(os.path.basename(path))
        if match is not None and match["split"] == split and int(match["count"]) == count:
            index = int(match["index"])
            if index < count and os.path.basename(path) == f"{split}-{index:05d}-of-{count:05d}":
                found.add(index)
    return found


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
    manifest = _read_manifest(path, split)
    if manifest is not None:
        expected = manifest["num_shards"]
        # The promised shards present, from the names present (not from the promise: its size is the manifest's).
        present = len(_promised_present(files, split, expected))
        shards = manifest.get("shards", {})
        if manifest["version"] >= 2:
            finished = manifest.get("complete") is True
        else:  # version 1 recorded each shard as it was written, but not the end of the run
            finished = len(shards) == expected  # keys are distinct indices below the count (checked)
        label_range = manifest.get("label_range")
        return SplitFacts(
            split=split, data_dir=data_dir, files=files, expected_shards=expected, present_shards=present,
            complete=finished and present == expected, recorded_finished=finished,
            num_classes=manifest.get("num_classes"),
            label_range=tuple(label_range) if label_range is not None else None,
            num_images=sum(info["written"] for info in shards.values()) if shards else None,
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


def _names(paths, shown=3):
    """The first `shown` basenames of `paths`, and how many more."""
    names = ", ".join(printable(os.path.basename(path)) for path in paths[:shown])
    return names + (f" and {len(paths) - shown:,} more" if len(paths) > shown else "")


def check_only_its_shards(facts: SplitFacts) -> None:
    """A UserError when the split holds shard files that are not its own: with a manifest, any `<split>-*` file that
    is not one of the `<split>-IIIII-of-NNNNN` shards it records (the trainer would read it too, and the figures
    said would be the manifest's); without one, shards named for different shard counts (-of-N), two dataprep runs'
    output in one directory."""
    if facts.manifest_path is not None:
        own = _promised_present(facts.files, facts.split, facts.expected_shards)
        listed = {f"{facts.split}-{index:05d}-of-{facts.expected_shards:05d}" for index in own}
        foreign = [path for path in facts.files if os.path.basename(path) not in listed]
        if foreign:
            raise UserError(f"dataset {printable(facts.data_dir)}: {len(foreign):,} {facts.split} file"
                            f"{'s' * (len(foreign) > 1)} not among the {facts.expected_shards:,} shards its manifest "
                            f"{os.path.basename(facts.manifest_path)} records ({facts.split}-*-of-"
                            f"{facts.expected_shards:05d}): {_names(foreign)}; they would be read with its shards "
                            "(another dataprep run's output?): delete them, or re-run the dataprep command with "
                            "--overwrite")
        return
    counts = {}
    for path in facts.files:
        match = _SHARD_NAME.match(os.path.basename(path))
        if match is not None and match["split"] == facts.split:
            counts.setdefault(int(match["count"]), []).append(path)
    if len(counts) > 1:
        sets = ", ".join(f"{len(paths):,} -of-{count:05d} (e.g. {printable(os.path.basename(paths[0]))})"
                         for count, paths in sorted(counts.items()))
        raise UserError(f"dataset {printable(facts.data_dir)}: its {facts.split} shards are named for "
                        f"{len(counts)} different shard counts: {sets}; two datasets in one directory would be read "
                        "as one: keep one set of shards")


def check_complete(facts: SplitFacts) -> None:
    """A UserError when the split is missing shards, its dataprep run did not finish, or it holds shard files that
    are not its own (check_only_its_shards)."""
    if facts.complete:
        check_only_its_shards(facts)
        return
    if not facts.files:
        raise UserError(f"no {facts.split}-* files in data dir {facts.data_dir} (TFRecord shards named "
                        f"{facts.split}-00000-of-NNNNN expected; see `python -m dataprep.build_tfrecords`)")
    resume = "finish it with the same dataprep command plus --resume"
    if facts.manifest_path is not None and facts.present_shards < facts.expected_shards:
        # The manifest's count against the shards present: say which of them contradicts the other.
        where = f"{printable(facts.manifest_path)} records {facts.expected_shards:,} {facts.split} shards (field " \
                '"num_shards")'
        by_name = _shards_by_name(facts.files, facts.split) or []
        others = sorted({count for _, count in by_name if count != facts.expected_shards})
        if others and facts.present_shards == 0:
            raise UserError(f"dataset {printable(facts.data_dir)}: {where}, but its shards are named -of-"
                            f"{others[0]:05d} ({printable(os.path.basename(facts.files[0]))}): the manifest is not "
                            "theirs; re-run the dataprep command with --overwrite, or delete the manifest")
        if facts.recorded_finished:
            present = _promised_present(facts.files, facts.split, facts.expected_shards)
            missing = next(i for i in range(facts.expected_shards) if i not in present)
            raise UserError(f"dataset {printable(facts.data_dir)} is incomplete: {facts.present_shards:,} of "
                            f"{facts.expected_shards:,} {facts.split} shards (though {printable(facts.manifest_path)} "
                            f"records the run as finished; the first missing is {facts.split}-{missing:05d}-of-"
                            f"{facts.expected_shards:05d}: deleted after dataprep?); the same dataprep command plus "
                            "--resume writes them again")
    if facts.expected_shards is not None and facts.present_shards < facts.expected_shards:
        raise UserError(f"dataset {facts.data_dir} is incomplete: {facts.present_shards} of {facts.expected_shards} "
                        f"{facts.split} shards (dataprep was interrupted?); {resume}")
    raise UserError(f"dataset {facts.data_dir} is incomplete: {os.path.basename(facts.manifest_path or '')} does "
                    f"not record the {facts.split} split as finished (dataprep was interrupted?); {resume}")


def leaves_outputs_unnamed(num_names: int, num_classes: int) -> bool:
    """Whether a labels file of `num_names` names leaves more of a model's `num_classes` outputs unnamed than the
    original's layout does: labels 1..K are outputs 0..K-1 of a model of K + 1 outputs, whose last one is never a
    label, so K names for K + 1 outputs name all there are."""
    return num_names < num_classes - 1


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
