"""TFRecord framing in pure Python: the one reader and writer of record boundaries (no TensorFlow, no DALI).

A TFRecord file is a sequence of framed records:
    uint64 length (little endian) | uint32 masked crc32c(length) | data[length] | uint32 masked crc32c(data)
Walking the file needs only the 12-byte headers: read a header, check its length CRC, seek past data and data
CRC. The payload is never read or decoded, so counting ImageNet's 1.28 M records takes seconds; data CRCs are
left to the readers (tf.data, DALI). A bad length CRC or a file that ends inside a frame is a UserError that
names the file.

Used by dataprep (writing and DALI indexes), utils/data_utils (framing check before training) and
runtime/runner_utils (exact sample counts).
"""
from __future__ import annotations

import os
import struct
from typing import Iterable, Iterator

from utils.errors import UserError
from utils.output_paths import replaced_file

HEADER = struct.Struct("<QI")  # length, masked crc32c(length)
FOOTER_SIZE = 4  # masked crc32c(data)
_READ_SIZE = 4096  # bytes read at each record header that is not in the bytes already read
_CRC_MASK_DELTA = 0xA282EAD8


def _make_crc32c_table() -> list[int]:
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _make_crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: crc32c rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One record as stored in a TFRecord file (what tf.io.TFRecordWriter writes for `data`)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def write_records(path: str, records: Iterable[bytes]) -> int:
    """Writes an uncompressed TFRecord file of `records`; returns the number written."""
    count = 0
    with open(path, "wb") as f:
        for data in records:
            f.write(frame_record(data))
            count += 1
    return count


def _corrupt(path: str, why: str) -> UserError:
    return UserError(f"TFRecord file {path} is corrupt or truncated: {why}")


def iter_record_frames(path: str) -> Iterator[tuple[int, int]]:
    """Yields (offset, frame_size) of every record, frame_size = 8 + 4 + length + 4.

    Raises UserError naming the file when it cannot be read, a length CRC is wrong (not a TFRecord file, or a
    damaged header) or the file ends inside a frame.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise UserError(f"cannot read TFRecord file {path}: {exc.strerror or exc}") from None
    try:
        file_size = os.fstat(fd).st_size
        # One positioned read per page: small records share a page (one syscall for dozens of headers), large
        # ones cost one small read each; payloads beyond the page are never read.
        page, page_start = b"", 0
        offset = 0
        while offset < file_size:
            start = offset - page_start
            if start + HEADER.size > len(page):
                page, page_start, start = _pread(fd, path, _READ_SIZE, offset), offset, 0
            header = page[start:start + HEADER.size]
            if len(header) < HEADER.size:
                raise _corrupt(path, f"record header cut off at byte {offset} (file size {file_size})")
            length, length_crc = HEADER.unpack(header)
            if masked_crc32c(header[:8]) != length_crc:
                raise _corrupt(path, f"bad length checksum at byte {offset} (not a TFRecord file?)")
            frame_size = HEADER.size + length + FOOTER_SIZE
            if offset + frame_size > file_size:
                raise _corrupt(path, f"record at byte {offset} needs {frame_size} bytes, the file is truncated "
                                     f"at {file_size}")
            yield offset, frame_size
            offset += frame_size
    finally:
        os.close(fd)


def _pread(fd: int, path: str, size: int, offset: int) -> bytes:
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        raise UserError(f"cannot read TFRecord file {path}: {exc.strerror or exc}") from None


# (path, size, mtime_ns, inode) -> count. The framing check before training and the step count both walk the
# same files; the second walk is free. A rewritten file has a new mtime (or size), so it is counted again.
_count_cache: dict[tuple[str, int, int, int], int] = {}


def count_records(path: str) -> int:
    """Exact number of records in one TFRecord file, from the framing alone (see the module docstring)."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise UserError(f"cannot read TFRecord file {path}: {exc.strerror or exc}") from None
    key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _count_cache:
        _count_cache[key] = sum(1 for _ in iter_record_frames(path))
    return _count_cache[key]


def write_dali_index(tfrecord_path: str, idx_path: str) -> int:
    """Writes DALI's index of one TFRecord file (`<offset> <size>` per record, atomically); returns the count."""
    lines = [f"{offset} {size}\n" for offset, size in iter_record_frames(tfrecord_path)]
    with replaced_file(idx_path) as f:
        f.writelines(lines)
    return len(lines)
