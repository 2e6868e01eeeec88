"""DALI index files for TFRecord shards, in pure Python (the original ran DALI's `tfrecord2idx`).

A TFRecord file is a sequence of framed records:
    uint64 length (little endian) | uint32 masked crc32c(length) | data[length] | uint32 masked crc32c(data)
The index has one line per record, `<offset> <size>`, where offset is the byte position of the frame start and
size = 8 + 4 + length + 4 is the whole frame. Only the header CRC is checked (cheap, and it tells a TFRecord from
some other file); data CRCs are left to the readers. No DALI or TensorFlow import.
"""
from __future__ import annotations

import os
import struct
from typing import Iterator

from utils.errors import UserError

_HEADER = struct.Struct("<QI")
_FOOTER_SIZE = 4


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
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def iter_record_frames(tfrecord_path: str) -> Iterator[tuple[int, int]]:
    """Yields (offset, frame_size) of every record. Raises UserError on a truncated or non-TFRecord file."""
    file_size = os.path.getsize(tfrecord_path)
    with open(tfrecord_path, "rb") as f:
        offset = 0
        while offset < file_size:
            header = f.read(_HEADER.size)
            if len(header) < _HEADER.size:
                raise UserError(f"{tfrecord_path}: truncated record header at byte {offset}")
            length, length_crc = _HEADER.unpack(header)
            if masked_crc32c(header[:8]) != length_crc:
                raise UserError(f"{tfrecord_path}: not a TFRecord file (bad length checksum at byte {offset})")
            frame_size = _HEADER.size + length + _FOOTER_SIZE
            if offset + frame_size > file_size:
                raise UserError(f"{tfrecord_path}: truncated record at byte {offset}")
            yield offset, frame_size
            offset += frame_size
            f.seek(offset)


def count_records(tfrecord_path: str) -> int:
    return sum(1 for _ in iter_record_frames(tfrecord_path))


def write_dali_index(tfrecord_path: str, idx_path: str) -> int:
    """Writes the DALI index of one TFRecord file (atomically); returns the number of records."""
    lines = [f"{offset} {size}\n" for offset, size in iter_record_frames(tfrecord_path)]
    tmp_path = idx_path + ".tmp"
    with open(tmp_path, "w") as f:
        f.writelines(lines)
    os.replace(tmp_path, idx_path)
    return len(lines)
