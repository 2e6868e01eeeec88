"""Reads every record of a dataset's `train-*` / `validation-*` TFRecord shards with TensorFlow's reader, which
checks each record's data checksum, and names each shard it cannot read to its end.

    python -m dataprep.verify_records <tfrecord_dir> [--split train|validation] [--decode]

Training and evaluation check only the framing of every shard and its first record before they start (reading
all of ImageNet's 140 GB there would cost minutes on every run). A record whose payload is damaged later on passes
that check; when the reader reaches it, it stops reading that shard, and the run warns `skipped N record(s) of
unreadable stream data` without a file name, because the reader's error carries none. This tool names the shard:

    BAD /data/train-00007-of-01024: its reader stops after 312 of 1,251 records (corrupted record at 41187328)

With `--decode` it also parses every record and decodes its image as the input pipeline does, and names the
records that fail (which tf.data skips with a warning, and on which a `--dali` run stops: DALI cannot skip them),
with why (`does not decode (...)`, `has no image ...`, `is not a tf.train.Example ...`):

    BAD /data/validation-00000-of-00128: record 3 does not decode (jpeg::Uncompress failed. Invalid JPEG data ...)

That costs about one decoding pass over the dataset (`--split validation` checks the smaller split alone).
Delete each shard it names and run the same `dataprep.build_tfrecords` command with `--resume`, which writes the
missing shards again. Exit status 0 when every shard reads to its end (and, with `--decode`, every image decodes),
1 when one does not.
"""
from __future__ import annotations

import os
import sys

from dataprep.make_dali_index import list_shards
from utils import dataset_manifest, quiet
from utils.errors import ArgumentParser, UserError, command, doc_part, on_interrupt
from utils.tfrecord_framing import count_records


def verify(tfrecord_dir: str, splits=("train", "validation"), log=print, decode=False) -> list[str]:
    """One `BAD <shard>: ...` line (also logged) per shard of `splits` that cannot be read to its end, and one `BAD
    <dir> (<split>): ...` per split that training and evaluation refuse as it is (shards its manifest does not record,
    missing ones: utils/dataset_manifest.check_complete); [] when all is well. A shard whose framing is broken is named
    by the framing check, before TensorFlow reads it. `decode`: also one line per shard that reads to its end but
    holds records whose image does not parse or decode (data_utils.undecodable_records), naming the first ones."""
    names = [name for name in list_shards(tfrecord_dir) if name.split("-", 1)[0] in splits]
    if not names:
        raise UserError(f"no {' or '.join(split + '-*' for split in splits)} files in {tfrecord_dir}")
    from utils.data_utils import read_to_end, undecodable_records  # (TensorFlow: once the arguments are checked)
    bad, refused, records = [], [], 0
    for split in splits:  # what training and evaluation refuse before they read (another run's shards, missing ones)
        facts = dataset_manifest.read_split(tfrecord_dir, split)
        try:
            if facts.files:
                dataset_manifest.check_complete(facts)
        except UserError as error:
            refused.append(f"BAD {tfrecord_dir} ({split}): {error}")
            log(refused[-1])
    for name in names:
        path = os.path.join(tfrecord_dir, name)
        try:
            framed = count_records(path)
        except UserError as error:
            bad.append(f"BAD {path}: {error}")
            log(bad[-1])
            continue
        read, error = read_to_end(path)
        records += read
        if error is not None or read != framed:
            bad.append(f"BAD {path}: its reader stops after {read:,} of {framed:,} records ({error})")
            log(bad[-1])
        elif decode:
            _, failing, first = undecodable_records(path, records=read)
            if failing:
                (index, reason), more = first[0], [str(index) for index, _ in first[1:]]
                bad.append(f"BAD {path}: record {index} {reason}" + (
                    f"; {failing - 1:,} more fail: records {', '.join(more)}{', ...' if failing > len(first) else ''}"
                    if more else ""))
                log(bad[-1])
    one = len(bad) == 1
    log(f"Read {len(names):,} shard(s) of {tfrecord_dir}, {records:,} records: " +
        (f"{len(bad)} shard{'' if one else 's'} cannot be read to the end"
         f"{(' or holds' if one else ' or hold') + ' images that do not decode' if decode else ''} (the count is of "
         f"the records read); delete {'it' if one else 'them'} and run the same dataprep.build_tfrecords command "
         f"with --resume to write {'it' if one else 'them'} again" if bad
         else "every record is readable" + (" and its image decodes" if decode else "")) +
        ("; training and evaluation refuse the dataset as it is (above)" if refused else ""))
    return refused + bad


@command
def main(argv=None):
    parser = ArgumentParser(prog="python -m dataprep.verify_records", description=doc_part(__doc__),
                            allow_abbrev=False)
    parser.add_argument("tfrecord_dir", help="the directory of train-*/validation-* shards (--data_dir)")
    parser.add_argument("--split", choices=("train", "validation"), default=None,
                        help="read only this split (default: both)")
    parser.add_argument("--decode", action="store_true",
                        help="also decode every record's image as the input pipeline does, and name the records "
                             "that fail (slower: about one decoding pass over the dataset)")
    quiet.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    splits = (args.split,) if args.split else ("train", "validation")
    with on_interrupt("no shard was changed; run the same command again to read them all"):
        return 1 if verify(args.tfrecord_dir, splits, decode=args.decode) else 0


if __name__ == "__main__":
    sys.exit(main())
