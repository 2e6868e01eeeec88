"""dataprep/verify_records.py: every record read with TensorFlow's reader, and each shard it cannot read to its end
named, with how far it got (the file the training warning for unreadable stream data cannot name)."""
import os
import re

import pytest

from tests._cli import tool_in_process
from tests._data_helpers import corrupt_payload, write_tfrecord_shards

pytestmark = pytest.mark.shallow

RECORDS = 5


def _verify(*args):
    return tool_in_process("dataprep.verify_records", *map(str, args), check=False)


def test_a_readable_dataset_passes_and_a_damaged_shard_is_named_with_how_far_its_reader_got(tmp_path):
    train = write_tfrecord_shards(str(tmp_path), "train", 2, RECORDS, 16)
    validation = write_tfrecord_shards(str(tmp_path), "validation", 1, RECORDS, 16, seed=1)
    result = _verify(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"Read 3 shard(s) of {tmp_path}, 15 records: every record is readable"]

    corrupt_payload(train[1], 2)
    result = _verify(tmp_path)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"BAD {train[1]}: its reader stops after 2 of 5 records (")
    assert "corrupted record" in lines[0].lower()
    assert lines[1] == (f"Read 3 shard(s) of {tmp_path}, 12 records: 1 shard cannot be read to the end (the count is "
                        "of the records read); delete it and run the same dataprep.build_tfrecords command with "
                        "--resume to write it again")
    assert _verify(tmp_path, "--split", "validation", "--verbose").returncode == 0  # the damaged shard is a train one
    assert validation  # (written, and read above)


def test_decode_names_the_records_whose_image_does_not_decode(tmp_path):
    """Records whose framing and checksum are sound but whose image does not decode (or that hold none): the reader
    passes them, tf.data skips them with a warning and DALI stops on them; --decode names the shard, the first
    record and why, and the others."""
    paths = write_tfrecord_shards(str(tmp_path), "validation", 2, 8, 16, corrupt={
        (0, 5): "bad_jpeg", (1, 1): "bad_jpeg", (1, 2): "missing_image", (1, 6): "bad_jpeg"})
    result = _verify(tmp_path)
    assert result.returncode == 0 and result.stdout.endswith("every record is readable\n"), result.stdout
    result = _verify(tmp_path, "--decode")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 3, lines
    assert re.fullmatch(rf"BAD {re.escape(paths[0])}: record 5 does not decode \(.*JPEG.*\)", lines[0])
    assert re.fullmatch(rf"BAD {re.escape(paths[1])}: record 1 does not decode \(.*\); 2 more fail: records 2, 6",
                        lines[1])
    assert lines[2] == (f"Read 2 shard(s) of {tmp_path}, 16 records: 2 shards cannot be read to the end or hold "
                        "images that do not decode (the count is of the records read); delete them and run the same "
                        "dataprep.build_tfrecords command with --resume to write them again")
    from utils import data_utils
    total, failing, first = data_utils.undecodable_records(paths[1], limit=1)
    assert (total, failing, len(first), first[0][0]) == (8, 3, 1, 1) and first[0][1].startswith("does not decode (")
    other, = write_tfrecord_shards(str(tmp_path / "other"), "validation", 1, 4, 16, corrupt={
        (0, 1): "missing_image", (0, 2): "not_example"})
    assert data_utils.undecodable_records(other) == (4, 2, [
        (1, "has no image (image/encoded missing or empty)"),
        (2, "is not a tf.train.Example (protobuf cannot parse it)")])
    clean = tmp_path / "clean"
    write_tfrecord_shards(str(clean), "validation", 1, 4, 16)
    result = _verify(clean, "--decode")
    assert (result.returncode, result.stdout) == (0, f"Read 1 shard(s) of {clean}, 4 records: every record is readable "
                                                     "and its image decodes\n")


def test_a_shard_with_broken_framing_is_named_by_the_framing_check(tmp_path):
    (path,) = write_tfrecord_shards(str(tmp_path), "train", 1, RECORDS, 16)
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 7)  # ends inside its last record
    result = _verify(tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].startswith(f"BAD {path}: ")


def test_a_dataset_training_would_refuse_is_not_passed_as_readable(tmp_path):
    """Two runs' shards in one directory (train-*-of-00002 beside train-*-of-00003) read as `every record is readable`,
    status 0, where training refuses them: the dataset is named BAD too, and the status is 1."""
    write_tfrecord_shards(str(tmp_path), "train", 2, RECORDS, 16)
    write_tfrecord_shards(str(tmp_path), "train", 3, RECORDS, 16, seed=1)
    result = _verify(tmp_path, "--split", "train")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"BAD {tmp_path} (train): ") and "-of-" in lines[0]
    assert lines[1] == (f"Read 5 shard(s) of {tmp_path}, 25 records: every record is readable; training and "
                        "evaluation refuse the dataset as it is (above)")


def test_a_directory_without_shards_is_one_error_line(tmp_path):
    result = _verify(tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"ERROR: no train-* or validation-* files in {tmp_path}"
    result = _verify(tmp_path / "missing")
    assert result.returncode == 2 and result.stderr.strip() == f"ERROR: TFRecord directory not found: {tmp_path / 'missing'}"


@pytest.mark.parametrize("module", ["dataprep.verify_records", "dataprep.build_tfrecords", "dataprep.make_dali_index",
                                    "dataprep.process_bounding_boxes", "dataprep.fashion_mnist"])
def test_each_dataprep_tool_s_help_describes_it_in_whole_sentences(module):
    """The description under the usage is a whole paragraph of the docstring (verify_records' stopped at the end of
    its docstring's first line: "...with TensorFlow's reader, which")."""
    result = tool_in_process(module, "--help")
    description = " ".join(result.stdout.split("\n\n")[1].split())
    assert description.endswith("."), description
