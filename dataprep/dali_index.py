"""DALI index files for TFRecord shards, in pure Python (the original ran DALI's `tfrecord2idx`).

The index has one line per record, `<offset> <size>`, where offset is the byte position of the frame start and
size = 8 + 4 + length + 4 is the whole frame. The framing walk (header CRCs checked, payloads skipped) lives in
utils/tfrecord_framing.py, shared with the trainer's record counting. No DALI or TensorFlow import.
"""
from __future__ import annotations

from utils.tfrecord_framing import count_records, iter_record_frames, write_dali_index

__all__ = ["count_records", "iter_record_frames", "write_dali_index"]
