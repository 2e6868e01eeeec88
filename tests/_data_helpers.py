"""Tiny TF-slim-format TFRecord shards (docs/ORIGINAL.md#tfrecord-format) with numpy/PIL JPEGs, for tests of any
module."""
from __future__ import annotations

import io
import os

import numpy as np
import tensorflow as tf
from PIL import Image

# Kinds of damage `write_tfrecord_shards(corrupt=...)` can put into a record. The pipelines skip the first, second
# and fourth as corrupt records; "label_out_of_range" (label num_classes + 5) stops them with one error instead.
CORRUPT_KINDS = ("bad_jpeg", "truncated_jpeg", "missing_image", "label_out_of_range", "not_example", "pixel_bbox",
                 "not_image")


def random_image(rng, height, width):
    """uint8 [H, W, 3]: smooth gradients plus noise, so resizing and cropping change pixels measurably."""
    y = np.linspace(0, 1, height)[:, None, None]
    x = np.linspace(0, 1, width)[None, :, None]
    base = 255 * (0.5 * y + 0.5 * x) * rng.uniform(0.3, 1.0, size=(1, 1, 3))
    noise = rng.normal(0, 20, size=(height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encode_image(array, fmt="JPEG", mode=None, **save_kwargs):
    image = Image.fromarray(array)
    if mode is not None:
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, fmt, **save_kwargs)
    return buffer.getvalue()


def _bytes(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def _ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _floats(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def make_example(image_bytes, label, height, width, filename="img.JPEG", bboxes=(), text=None):
    """Serialized tf.train.Example; `image_bytes=None` leaves out image/encoded; bboxes are (ymin,xmin,ymax,xmax)."""
    feature = {
        "image/height": _ints([height]), "image/width": _ints([width]),
        "image/colorspace": _bytes([b"RGB"]), "image/channels": _ints([3]), "image/format": _bytes([b"JPEG"]),
        "image/filename": _bytes([filename.encode()]),
        "image/class/label": _ints([label]),
        "image/class/synset": _bytes([b"n%08d" % label]),
        "image/class/text": _bytes([(text or "class %d" % label).encode()]),
        "image/object/bbox/ymin": _floats([b[0] for b in bboxes]),
        "image/object/bbox/xmin": _floats([b[1] for b in bboxes]),
        "image/object/bbox/ymax": _floats([b[2] for b in bboxes]),
        "image/object/bbox/xmax": _floats([b[3] for b in bboxes]),
        "image/object/bbox/label": _ints([label] * len(bboxes)),
    }
    if image_bytes is not None:
        feature["image/encoded"] = _bytes([image_bytes])
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def label_of(global_index, num_classes):
    """Stored (1-based) label of the record at `global_index` (shard-major order)."""
    return 1 + global_index % (num_classes - 1)


def write_tfrecord_shards(directory, prefix, num_shards, records_per_shard, image_size, num_classes=11,
                          with_bbox=False, corrupt=None, seed=0):
    """Writes `{prefix}-{i:05d}-of-{num_shards:05d}` files; returns their sorted paths.

    image_size: int (square), (height, width), or None for random sizes in 24..64.
    corrupt: {(shard, record): kind} with kind in CORRUPT_KINDS.
    Labels follow `label_of` (1..num_classes-1); with_bbox adds one box covering the image's central quarter.
    """
    rng = np.random.default_rng(seed)
    corrupt = corrupt or {}
    os.makedirs(directory, exist_ok=True)
    paths = []
    for shard in range(num_shards):
        path = os.path.join(directory, "%s-%05d-of-%05d" % (prefix, shard, num_shards))
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(records_per_shard):
                if image_size is None:
                    height, width = (int(v) for v in rng.integers(24, 65, size=2))
                elif isinstance(image_size, int):
                    height = width = image_size
                else:
                    height, width = image_size
                global_index = shard * records_per_shard + i
                label = label_of(global_index, num_classes)
                jpeg = encode_image(random_image(rng, height, width), quality=90)
                bboxes = [(0.25, 0.25, 0.75, 0.75)] if with_bbox else []
                kind = corrupt.get((shard, i))
                if kind == "not_example":
                    writer.write(b"\x12\x34not a protobuf\xff\xff")
                    continue
                if kind == "bad_jpeg":
                    jpeg = b"\xff\xd8\xff\xe0" + b"garbage" * 10
                elif kind == "truncated_jpeg":  # its header reads; the decode fails
                    jpeg = jpeg[:len(jpeg) // 2]
                elif kind == "pixel_bbox":  # a box in pixels, not in fractions of the sides: the training crop fails
                    bboxes = [(2.0, 3.0, height - 2.0, width - 3.0)]
                elif kind == "missing_image":
                    jpeg = None
                elif kind == "not_image":  # a text file's bytes where the JPEG belongs
                    jpeg = b"this is a text file, not an image\n"
                elif kind == "label_out_of_range":
                    label = num_classes + 5
                elif kind is not None:
                    raise ValueError(kind)
                writer.write(make_example(jpeg, label, height, width, "img_%d.JPEG" % global_index, bboxes))
        paths.append(path)
    return paths


def truncate_file(path, drop_bytes=10):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:-drop_bytes])


def skipped_total(stderr):
    """The running total of corrupt records a TFRecord pipeline reported skipping in `stderr` (0 if none)."""
    import re
    return max([int(count) for count in re.findall(r"total skipped: (\d+)", stderr)] or [0])


def corrupt_payload(path, record):
    """Flips a byte inside `record`'s data, leaving its length header and that header's CRC intact: the framing
    check passes, TensorFlow's reader stops at the record (its data CRC)."""
    from utils.tfrecord_framing import iter_record_frames
    offset = list(iter_record_frames(path))[record][0]
    with open(path, "r+b") as handle:
        handle.seek(offset + 12 + 50)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))


def zero_data_checksums(path):
    """Rewrites every record's data checksum of a TFRecord file as 0, as a writer that does not compute them would."""
    from utils.tfrecord_framing import iter_record_frames
    data = bytearray(open(path, "rb").read())
    for offset, size in iter_record_frames(path):
        data[offset + size - 4:offset + size] = bytes(4)
    with open(path, "wb") as handle:
        handle.write(data)


def tiny_onnx_classifier(path, batch, size=32, classes=11):
    """A small ONNX model (mean colour -> dense -> softmax) with input `input` [batch, size, size, 3] and output
    `probabilities`: a fixed batch dimension, as export_frozen_graph.py --batch_size writes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    weights = numpy_helper.from_array(np.random.default_rng(0).normal(size=(3, classes)).astype("f4"), "w")
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["input"], ["mean"], axes=[1, 2], keepdims=0),
         helper.make_node("MatMul", ["mean", "w"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1)],
        "fixed", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, size, size, 3])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [batch, classes])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)
