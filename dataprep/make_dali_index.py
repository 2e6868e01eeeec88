"""Creates DALI index files for every `train-*` / `validation-*` TFRecord shard (the original's utils/dali_index.sh).

    python -m dataprep.make_dali_index <tfrecord_dir> <idx_dir>

Each index gets the shard's basename; lines are `<offset> <size>` per record (see dataprep/dali_index.py).
"""
from __future__ import annotations

import argparse
import os
import sys

from dataprep.dali_index import write_dali_index
from dataprep.records import progress_enabled
from utils import dataset_manifest
from utils.errors import ArgumentParser, UserError, command
from utils.output_paths import check_output_dir
from utils.run_lock import RunLock

SPLIT_PREFIXES = ("train-", "validation-")


def list_shards(tfrecord_dir: str) -> list[str]:
    if not os.path.isdir(tfrecord_dir):
        raise UserError(f"TFRecord directory not found: {tfrecord_dir}")
    names = sorted(n for n in os.listdir(tfrecord_dir)
                   if n.startswith(SPLIT_PREFIXES) and os.path.isfile(os.path.join(tfrecord_dir, n)))
    if not names:
        raise UserError(f"no train-* or validation-* files in {tfrecord_dir}")
    return names


def make_dali_indexes(tfrecord_dir: str, idx_dir: str, progress: bool = False) -> dict[str, int]:
    """Indexes every shard of tfrecord_dir into idx_dir; returns {shard name: record count}."""
    names = list_shards(tfrecord_dir)
    for split in dataset_manifest.SPLITS:  # an unfinished dataprep run's shards: main.py would refuse them anyway
        facts = dataset_manifest.read_split(tfrecord_dir, split)
        if facts.files:
            dataset_manifest.check_complete(facts)
    check_output_dir("idx_dir", idx_dir)
    if os.path.isdir(idx_dir) and os.path.samefile(idx_dir, tfrecord_dir):
        # (each index takes its shard's name: it would overwrite the shard it indexes)
        raise UserError(f"idx_dir {idx_dir} is the TFRecord directory: the index files take their shards' names and "
                        "would replace the shards; give another directory (the original's layout: <data_dir>/../idx)")
    # The run owns idx_dir while it writes (utils/run_lock.py): a second run into it, of another dataset perhaps,
    # is refused in one line instead of leaving a mix of both runs' indexes. The lock also creates idx_dir.
    with RunLock(idx_dir, flag="idx_dir"):
        if progress:
            from tqdm import tqdm

            names_iter = tqdm(names, desc="index", unit="file")
        else:
            names_iter = names
        return {name: write_dali_index(os.path.join(tfrecord_dir, name), os.path.join(idx_dir, name))
                for name in names_iter}


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m dataprep.make_dali_index",
        description="Write a DALI index file (`offset size` per record) for each train-*/validation-* TFRecord.",
        allow_abbrev=False)
    parser.add_argument("tfrecord_dir", help="directory with train-* and validation-* TFRecord shards")
    parser.add_argument("idx_dir", help="output directory for the index files (created; same basenames)")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar (also off when not a TTY)")
    return parser.parse_args(argv)


@command
def main(argv=None):
    args = parse_args(argv)
    counts = make_dali_indexes(args.tfrecord_dir, args.idx_dir, progress_enabled(args.no_progress))
    print(f"wrote {len(counts)} index file(s) ({sum(counts.values())} records) to {args.idx_dir}")


if __name__ == "__main__":
    sys.exit(main())
