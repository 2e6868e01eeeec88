"""Byte-level corruption of a valid shard through the framing check (tests/test_data_utils.py already fuzzes the
parse/decode/filter path with generated records): check_tfrecord_files either passes cleanly with the right
record count or raises our UserError naming the file — never another exception, never a hang."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests._data_helpers import skipped_total, write_tfrecord_shards
from utils import data_utils
from utils.errors import UserError

RECORDS = 5


@pytest.fixture(scope="module")
def valid_shard(tmp_path_factory):
    (path,) = write_tfrecord_shards(str(tmp_path_factory.mktemp("fuzz")), "train", 1, RECORDS, 16, num_classes=11)
    with open(path, "rb") as handle:
        return handle.read()


_edit = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10 ** 6), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10 ** 6), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10 ** 6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10 ** 6), st.just(0)),
)


def _apply(data, edits):
    data = bytearray(data)
    for kind, where, value in edits:
        if not data:
            break
        where %= len(data)
        if kind == "flip":
            data[where] ^= value
        elif kind == "truncate":
            del data[where:]
        elif kind == "insert":
            data.insert(where, value)
        else:
            del data[where]
    return bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(_edit, min_size=1, max_size=3))
def test_corrupted_shard_is_a_clean_pass_or_a_user_error(tmp_path, valid_shard, edits):
    path = str(tmp_path / "train-00000-of-00001")
    corrupted = _apply(valid_shard, edits)
    with open(path, "wb") as handle:
        handle.write(corrupted)
    try:
        counts = data_utils.check_tfrecord_files([path])
    except UserError as error:
        assert path in str(error)
        return
    # Passing means the framing is intact: only payload bytes changed (caught later by the reader's data CRC
    # and skipped as unreadable stream data, docs/RELIABILITY.md), so the count is unchanged.
    assert counts == [RECORDS]
    assert len(corrupted) == len(valid_shard)


def test_payload_corruption_passes_the_framing_check_and_is_skipped_when_read(tmp_path, valid_shard, capfd):
    from tests._data_helpers import corrupt_payload
    paths = write_tfrecord_shards(str(tmp_path), "train", 2, RECORDS, 16, num_classes=11)
    corrupt_payload(paths[0], 2)  # inside record 2's payload: length header and its CRC intact
    assert data_utils.check_tfrecord_files(paths) == [RECORDS, RECORDS]
    dataset = data_utils.get_tfrecords_input_fn(paths, 2, 16, 16, training=True, deterministic=True, seed=1,
                                                num_classes=11)
    batches = list(dataset.take(6))
    assert len(batches) == 6
    err = capfd.readouterr().err
    assert skipped_total(err) >= 1
    # The read error names no record or file: the warning says what it knows, without empty lists.
    warning = ("WARNING: skipped 1 record(s) of unreadable stream data (a TFRecord read error; the rest of that file "
               "is lost: `python -m dataprep.verify_records <data_dir>` names the file) - total skipped: ")
    assert any(line.startswith(warning) for line in err.splitlines()), err[-2000:]  # once per pass of the stream
    assert "[] of []" not in err
