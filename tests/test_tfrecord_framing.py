"""utils/tfrecord_framing.py: the TF-free TFRecord framing writer, walker and record counter."""

import ast
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from utils import tfrecord_framing as framing
from utils.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_crc32c_reference_value():
    assert framing.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert framing.crc32c(b"") == 0


def test_frames_are_byte_identical_to_tensorflows_writer(tmp_path):
    payloads = [b"", b"a", b"record" * 100, bytes(range(256)) * 40]
    with tf.io.TFRecordWriter(str(tmp_path / "tf")) as writer:
        for payload in payloads:
            writer.write(payload)
    assert framing.write_records(str(tmp_path / "ours"), payloads) == len(payloads)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "tf").read_bytes()
    frames = list(framing.iter_record_frames(str(tmp_path / "ours")))
    assert [size for _, size in frames] == [16 + len(p) for p in payloads]
    assert [offset for offset, _ in frames] == [0, 16, 33, 649]
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "ours"))] == payloads


def test_count_skips_payloads_and_follows_rewrites(tmp_path):
    path = tmp_path / "train-00000-of-00001"
    framing.write_records(str(path), [b"x" * 1000] * 3)
    data = bytearray(path.read_bytes())
    data[12 + 500] ^= 0xFF  # payload damage: not the counter's business (the readers check data CRCs)
    path.write_bytes(bytes(data))
    assert framing.count_records(str(path)) == 3
    framing.write_records(str(path), [b"y"] * 5)
    assert framing.count_records(str(path)) == 5
    (tmp_path / "text").write_bytes(b"this is not a tfrecord file at all")
    with pytest.raises(UserError, match="not a TFRecord"):
        framing.count_records(str(tmp_path / "text"))
    assert framing.count_records(_empty(tmp_path)) == 0


def _empty(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    return str(path)


def test_framing_module_imports_neither_tensorflow_nor_dataprep():
    code = ("import sys, utils.tfrecord_framing, runtime.runner_utils\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'dataprep', 'nvidia')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def _imported_modules(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def _python_files(*directories):
    for directory in directories:
        for base, _, names in os.walk(os.path.join(ROOT, directory)):
            yield from (os.path.join(base, n) for n in names if n.endswith(".py"))


def test_imports_run_downwards_and_the_crc_code_exists_once():
    for path in _python_files("utils", "runtime"):
        upward = [m for m in _imported_modules(path) if m.split(".")[0] == "dataprep"]
        assert not upward, (path, upward)
    holders = [os.path.relpath(p, ROOT) for p in _python_files("utils", "runtime", "dataprep", "model", "bench")
               if "0x82F63B78" in open(p, encoding="utf-8").read().upper().replace("0X", "0x")]
    assert holders == [os.path.join("utils", "tfrecord_framing.py")]
