"""The one record-writing code path: images -> TF-slim `tf.train.Example`s -> sharded TFRecord files
(docs/ORIGINAL.md#tfrecord-format).

Used by `dataprep.build_tfrecords` (JPEG folders, ImageNet) and `dataprep.fashion_mnist` (in-memory JPEGs).

Sharding follows the original `build_imagenet_data.py`: the caller's image list (already shuffled with
`random.seed(12345)`) is cut into `num_shards` contiguous ranges, shard i holding `images[i*n//S:(i+1)*n//S]`.
Each shard is written to a hidden temporary name (`.tmp.<final name>`, which never matches the trainer's
`train-*` / `validation-*` globs) and renamed when complete, so a complete-looking file is always a complete shard
and an interrupted run can be resumed shard by shard.

Beside the shards, `.dataprep-<split>.json` (the manifest, read by utils/dataset_manifest.py) records the run as it
goes: the shard count, each shard's written and skipped images, the class count K of the labels 1..K, and
`complete`, false until the last shard is written and recorded. An interrupted run thus leaves a manifest that
says so, and --resume checks against it that the inputs are the same.

TensorFlow is imported lazily, inside the process that writes, so the parent of a worker pool stays TF-free and
workers are started with the "spawn" method (forking a process with a live TF runtime can deadlock).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import multiprocessing
import os
import queue as queue_module
import signal
import sys
from typing import Callable, Sequence

from utils import pixels
from utils.errors import UserError, first_line, on_interrupt, open_files_line, printable
from utils.logger import progress_enabled  # noqa: F401 - the dataprep tools' progress check
from utils.output_paths import replaced_file
from utils.tfrecord_framing import count_records

TMP_PREFIX = ".tmp."
# What an interrupted dataprep run keeps and how to go on (the line of utils.errors.command).
INTERRUPTED_KEPT = "complete shards are kept; run the same command with --resume to finish"
RESUME = "run the same command with --resume (the complete shards are kept)"
JPEG_QUALITY_CONVERTED = 100  # quality used by the original when re-encoding PNG/CMYK sources
# Full-resolution chroma (4:4:4) for converted images, so their colours stay as predict reads the source (a PNG
# is fed to the model as it is); PIL's default 4:2:0, as the original's encode_jpeg, blurs colour edges.
JPEG_SUBSAMPLING_CONVERTED = 0
MANIFEST_VERSION = 2  # 2 adds num_classes, label_range and complete; 1 is still resumed


@dataclasses.dataclass(frozen=True)
class ImageItem:
    """One image to be written. Either `path` (read by the worker) or `data` (encoded bytes) is set."""

    filename: str  # basename stored in image/filename
    label: int  # 1..K (0 is the unused background class)
    synset: str
    text: str
    path: str | None = None
    data: bytes | None = None
    bboxes: tuple[tuple[float, float, float, float], ...] = ()  # (xmin, ymin, xmax, ymax), normalised


@dataclasses.dataclass
class ShardResult:
    shard_index: int
    written: int
    skipped: list[tuple[str, str]]  # (filename, reason)
    resumed: bool = False  # True when the shard already existed and was not rewritten


class UnreadableImage(Exception):
    """The file is not a decodable image; the message is the reason shown to the user."""


def shard_name(split: str, index: int, num_shards: int) -> str:
    return f"{split}-{index:05d}-of-{num_shards:05d}"


def shard_ranges(num_items: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges, sizes differing by at most one (as `np.linspace(...).astype(int)`)."""
    return [(i * num_items // num_shards, (i + 1) * num_items // num_shards) for i in range(num_shards)]


def to_rgb_jpeg(data: bytes) -> tuple[bytes, int, int, bool]:
    """Returns (jpeg_bytes, height, width, converted).

    Valid RGB JPEGs are returned unchanged (same bytes). Anything else PIL can decode (greyscale or CMYK JPEG, PNG,
    palette, RGBA, 16-bit, ... whatever the file extension says) is converted to RGB by utils/pixels.as_rgb, the
    conversion predict applies too, and re-encoded as JPEG at quality 100 with 4:4:4 chroma.
    Raises UnreadableImage for empty, non-image or corrupt files and for those utils/pixels.refused refuses, as
    predict does, with predict's reasons (over the size limit, several frames, a JPEG or PNG cut off, a CMYK JPEG
    without an Adobe marker), checked before the decode.
    """
    from PIL import UnidentifiedImageError

    if not data:
        raise UnreadableImage(pixels.EMPTY_FILE)  # predict's reasons (utils/pixels.py), so both doors say the same
    try:
        with pixels.opened(data) as image:  # PIL's size limit and warning off: _converted checks the size itself
            return _converted(data, image)
    except UnidentifiedImageError:
        raise UnreadableImage(pixels.NOT_AN_IMAGE) from None
    except (OSError, ValueError, SyntaxError) as exc:  # a header or image data PIL cannot decode
        raise UnreadableImage(pixels.truncated(data) or f"corrupt image ({exc})") from None


def _converted(data: bytes, image) -> tuple[bytes, int, int, bool]:
    """to_rgb_jpeg's result for the opened, not yet decoded PIL image of `data`."""
    width, height = image.size
    if width == 0 or height == 0:
        raise UnreadableImage("image has zero size")
    refused = pixels.refused(data, image)  # predict's check and reasons: too large, frames, cut off, CMYK
    if refused:
        raise UnreadableImage(refused)
    image_format = image.format
    image.load()  # full decode: catches corrupt data that the header parse accepts
    if image_format in ("JPEG", "MPO") and image.mode == "RGB":
        return data, height, width, False
    out = io.BytesIO()
    pixels.as_rgb(image, data).save(out, format="JPEG", quality=JPEG_QUALITY_CONVERTED,  # predict's conversion too
                                    subsampling=JPEG_SUBSAMPLING_CONVERTED)
    return out.getvalue(), height, width, True


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's start-up chatter out of the tool's output
    import tensorflow as tf

    return tf


def make_example(item: ImageItem, encoded: bytes, height: int, width: int):
    """The TF-slim / inception `tf.train.Example` (docs/ORIGINAL.md#tfrecord-format)."""
    tf = _tf()

    def _bytes(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

    def _ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def _floats(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    boxes = item.bboxes
    feature = {
        "image/height": _ints([height]),
        "image/width": _ints([width]),
        "image/colorspace": _bytes([b"RGB"]),
        "image/channels": _ints([3]),
        "image/class/label": _ints([item.label]),
        "image/class/synset": _bytes([item.synset.encode("utf-8")]),
        "image/class/text": _bytes([item.text.encode("utf-8")]),
        "image/object/bbox/xmin": _floats([b[0] for b in boxes]),
        "image/object/bbox/ymin": _floats([b[1] for b in boxes]),
        "image/object/bbox/xmax": _floats([b[2] for b in boxes]),
        "image/object/bbox/ymax": _floats([b[3] for b in boxes]),
        "image/object/bbox/label": _ints([item.label] * len(boxes)),
        "image/format": _bytes([b"JPEG"]),
        "image/filename": _bytes([item.filename.encode("utf-8", "surrogateescape")]),
        "image/encoded": _bytes([encoded]),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


def encode_item(item: ImageItem) -> bytes:
    """Reads/converts one image and returns the serialized Example. Raises UnreadableImage."""
    if item.data is not None:
        data = item.data
    else:
        try:
            with open(item.path, "rb") as f:
                data = f.read()
        except OSError as exc:
            if open_files_line(exc):  # the process's fault, not the file's: not a skipped image
                raise
            raise UnreadableImage(f"cannot read file ({exc.strerror or exc})") from None
    encoded, height, width, _ = to_rgb_jpeg(data)
    # deterministic: map keys sorted, so a shard is byte-identical whichever process (hash seed) writes it
    return make_example(item, encoded, height, width).SerializeToString(deterministic=True)


def write_shard(output_dir: str, split: str, shard_index: int, num_shards: int, items: Sequence[ImageItem],
                tick: Callable[[int], None] | None = None) -> ShardResult:
    """Writes one shard via a temporary file + atomic rename. Unreadable images are skipped and reported."""
    tf = _tf()

    final_path = os.path.join(output_dir, shard_name(split, shard_index, num_shards))
    tmp_path = os.path.join(output_dir, TMP_PREFIX + shard_name(split, shard_index, num_shards))
    skipped = []
    written = 0
    try:
        with on_interrupt(INTERRUPTED_KEPT), tf.io.TFRecordWriter(tmp_path) as writer:
            for item in items:
                try:
                    record = encode_item(item)
                except UnreadableImage as exc:
                    skipped.append((item.path or item.filename, str(exc)))
                else:
                    writer.write(record)
                    written += 1
                if tick is not None:
                    tick(1)
        os.replace(tmp_path, final_path)
    except BaseException as error:  # an interrupt, a write error: the incomplete shard is not left behind
        try:
            os.remove(tmp_path)
        except OSError:
            pass
        if open_files_line(error):
            raise UserError(f"cannot write {final_path}: {open_files_line(error, RESUME)}") from None
        if isinstance(error, (OSError, tf.errors.OpError)):  # a full disk, a directory removed meanwhile
            raise UserError(f"cannot write {final_path}: {first_line(error)}; the complete shards are kept: run the "
                            "same command with --resume once it can be written") from None
        raise
    return ShardResult(shard_index, written, skipped)


# ---- worker-pool plumbing -------------------------------------------------------------------------------------

_progress_queue = None


def _init_worker(progress_queue):
    global _progress_queue
    _progress_queue = progress_queue
    # Ctrl-C reaches every process of the terminal's process group: the parent handles it (terminates the pool,
    # one line); a worker would only print a traceback. Workers end by the pool's SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_write_shard(args):
    output_dir, split, shard_index, num_shards, items = args
    # Ticks are batched so that a shard of 1000+ images costs a handful of queue puts, not one per image.
    pending = [0]

    def tick(n):
        pending[0] += n
        if pending[0] >= 16:
            _progress_queue.put(pending[0])
            pending[0] = 0

    result = write_shard(output_dir, split, shard_index, num_shards, items, tick)
    if pending[0]:
        _progress_queue.put(pending[0])
    return result


# ---- manifest (bookkeeping for --resume and the summary) ------------------------------------------------------

def fingerprint(items: Sequence[ImageItem], num_shards: int) -> str:
    """Identifies the shard assignment: same inputs in the same order with the same shard count."""
    digest = hashlib.sha256(f"{num_shards}\n".encode())
    for item in items:
        content = hashlib.sha256(item.data).hexdigest() if item.data is not None else ""
        digest.update(f"{item.path or item.filename}\t{item.label}\t{item.text}\t{item.bboxes}\t{content}\n"
                      .encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _manifest_path(output_dir: str, split: str) -> str:
    return os.path.join(output_dir, f".dataprep-{split}.json")


def _read_manifest(output_dir: str, split: str) -> dict | None:
    """The split's manifest for --resume, its fields checked (utils/dataset_manifest); None when there is none or
    it cannot be used (unreadable, a field of the wrong type): --resume then goes by the shards present."""
    from utils import dataset_manifest
    try:
        return dataset_manifest._read_manifest(_manifest_path(output_dir, split), split)
    except UserError:
        return None


def _write_manifest(output_dir: str, split: str, manifest: dict) -> None:
    with replaced_file(_manifest_path(output_dir, split)) as f:
        json.dump(manifest, f, indent=1)


def existing_split_files(output_dir: str, split: str) -> list[str]:
    """Complete shards (any shard count) and leftover temporaries of `split` in output_dir."""
    if not os.path.isdir(output_dir):
        return []
    return sorted(name for name in os.listdir(output_dir)
                  if name.startswith(f"{split}-") or name.startswith(f"{TMP_PREFIX}{split}-"))


def write_split(items: Sequence[ImageItem], output_dir: str, split: str, num_shards: int, num_workers: int = 1,
                resume: bool = False, overwrite: bool = False, progress: bool = False, *,
                num_classes: int) -> list[ShardResult]:
    """Writes `items` (in the given order) to `num_shards` shards `<split>-XXXXX-of-NNNNN` in output_dir.

    num_classes: K of the dataset's labels 1..K (all classes, whether this split has images of each or not); every
    item's label must be in that range. Recorded in the manifest with `complete`.
    Existing output of this split is an error unless `overwrite` (delete it first) or `resume` (keep complete shards
    of an interrupted run with the same inputs and shard count; rewrite the missing ones).
    """
    outside = next((item for item in items if not 1 <= item.label <= num_classes), None)
    if outside is not None:  # the callers number classes 1..K; a label past K is a bug there
        raise ValueError(f"label {outside.label} of {outside.path or outside.filename} is outside 1..{num_classes}")
    if num_shards < 1:
        raise UserError(f"--{split}_shards must be >= 1 (got {num_shards})")
    if num_shards > len(items):  # callers cap the count (build_tfrecords.choose_shards); an empty shard is a bug
        raise UserError(f"{num_shards} {split} shards for {len(items)} images would leave shards empty")
    if resume and overwrite:
        raise UserError("--resume and --overwrite are mutually exclusive")
    os.makedirs(output_dir, exist_ok=True)
    names = [shard_name(split, i, num_shards) for i in range(num_shards)]
    input_fingerprint = fingerprint(items, num_shards)
    existing = existing_split_files(output_dir, split)
    complete = set()
    manifest = {"version": MANIFEST_VERSION, "split": split, "num_shards": num_shards, "num_images": len(items),
                "fingerprint": input_fingerprint, "num_classes": num_classes, "label_range": [1, num_classes],
                "complete": False, "shards": {}}
    if existing:
        if overwrite:
            for name in existing:
                os.remove(os.path.join(output_dir, name))
            if os.path.exists(_manifest_path(output_dir, split)):
                os.remove(_manifest_path(output_dir, split))
        elif resume:
            foreign = [n for n in existing if n not in names and not n.startswith(TMP_PREFIX)]
            if foreign:
                raise UserError(f"--resume: {output_dir} holds {split} shards of another run ({foreign[0]}); "
                                "use --overwrite")
            previous = _read_manifest(output_dir, split)  # version 1 or 2: the same fingerprint and shards
            if previous is not None and previous.get("fingerprint") != input_fingerprint:
                raise UserError(f"--resume: the {split} inputs or shard count changed since the interrupted run "
                                f"in {output_dir}; use --overwrite")
            if previous is not None:
                manifest["shards"] = previous.get("shards", {})
            complete = {i for i, name in enumerate(names) if name in existing}
        else:
            raise UserError(f"{output_dir} already holds {split} output ({existing[0]}); pass --resume to complete "
                            "an interrupted run or --overwrite to replace it")

    results = []
    for i in sorted(complete):
        info = manifest["shards"].get(str(i))
        if info is None:  # renamed but the run stopped before the manifest was updated: count the records
            info = {"written": count_records(os.path.join(output_dir, names[i])), "skipped": []}
            manifest["shards"][str(i)] = info
        results.append(ShardResult(i, info["written"], [tuple(s) for s in info["skipped"]], resumed=True))
    for name in os.listdir(output_dir):  # leftovers of an interrupted run: never complete, always rewritten
        if name.startswith(TMP_PREFIX + split + "-"):
            os.remove(os.path.join(output_dir, name))
    _write_manifest(output_dir, split, manifest)

    ranges = shard_ranges(len(items), num_shards)
    todo = [i for i in range(num_shards) if i not in complete]
    total = sum(ranges[i][1] - ranges[i][0] for i in todo)

    def record(result: ShardResult):
        manifest["shards"][str(result.shard_index)] = {"written": result.written,
                                                       "skipped": [list(s) for s in result.skipped]}
        _write_manifest(output_dir, split, manifest)
        results.append(result)

    in_process = num_workers <= 1 or len(todo) <= 1
    if in_process and todo:
        _tf()  # import before the bar starts, so its rate/ETA are not skewed by TF's start-up time
    bar = _progress_bar(total, f"{split}", progress)
    try:
        if in_process:
            for i in todo:
                start, end = ranges[i]
                record(write_shard(output_dir, split, i, num_shards, items[start:end], bar.update))
        else:
            _run_pool(output_dir, split, num_shards, items, ranges, todo, min(num_workers, len(todo)), bar, record)
    finally:
        bar.close()
    manifest["complete"] = True  # every shard written and recorded
    _write_manifest(output_dir, split, manifest)
    return sorted(results, key=lambda r: r.shard_index)


def _no_workers(error, num_workers):
    """The UserError of a worker pool that could not be started: out of file descriptors (each worker takes a few:
    its pipes) or another OSError (no memory for a process)."""
    reason = open_files_line(error, RESUME, " or pass fewer --num_workers") or \
        f"{first_line(error)}; pass fewer --num_workers, then {RESUME}"
    return UserError(f"cannot start {num_workers} worker processes: {reason}")


def _run_pool(output_dir, split, num_shards, items, ranges, todo, num_workers, bar, record):
    """Writes the shards of `todo` in `num_workers` spawned processes. An interrupt or error in the parent
    terminates the pool (the `with` block); its workers ignore SIGINT and leave no temporary shard that the next
    run would not remove."""
    ctx = multiprocessing.get_context("spawn")
    try:
        progress_queue = ctx.Queue()
    except OSError as error:
        raise _no_workers(error, num_workers) from None
    tasks = [(output_dir, split, i, num_shards, list(items[ranges[i][0]:ranges[i][1]])) for i in todo]
    # SIGINT is ignored while the workers start: an ignored signal stays ignored across exec, so a Ctrl-C during a
    # worker's start-up (before its initializer runs) cannot reach it either. (A blocked mask would not do:
    # multiprocessing's spawn clears it in the child.)
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: SIGINT is not ours to handle
        previous = None
    try:
        pool = ctx.Pool(num_workers, initializer=_init_worker, initargs=(progress_queue,))
    except OSError as error:  # (the workers started are stopped by the pool)
        raise _no_workers(error, num_workers) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    with on_interrupt(INTERRUPTED_KEPT), pool:
        pending = [pool.apply_async(_worker_write_shard, (task,)) for task in tasks]
        while pending:
            try:
                bar.update(progress_queue.get(timeout=0.2))
            except queue_module.Empty:
                pass
            still = []
            for async_result in pending:
                if async_result.ready():
                    record(async_result.get())  # re-raises a worker's exception here
                else:
                    still.append(async_result)
            pending = still
        while True:  # drain late ticks so the bar ends at 100%
            try:
                bar.update(progress_queue.get_nowait())
            except queue_module.Empty:
                break


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled or total == 0:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="img", dynamic_ncols=True)


def labels_line(text: str) -> str:
    """The line of labels.txt that names a class of text `text` (a newline in it would start another line)."""
    return text.replace("\n", " ")


def name_as_read(text: str) -> str:
    """The name the readers of labels.txt (runtime/runner_utils.read_class_names) get for a class of text `text`."""
    from runtime.runner_utils import class_name_as_read
    return class_name_as_read(labels_line(text))


def write_labels_file(output_dir: str, class_texts: Sequence[str]) -> str:
    """`labels.txt`: line k is the name of label k (output index k-1)."""
    path = os.path.join(output_dir, "labels.txt")
    with replaced_file(path, encoding="utf-8") as f:
        for text in class_texts:
            f.write(labels_line(text) + "\n")
    return path


def count_skipped(split_results: dict[str, list[ShardResult]], pre_skipped: dict | None = None) -> int:
    """The files summarize lists as skipped, over every split."""
    return (sum(len(files) for files in (pre_skipped or {}).values())
            + sum(len(r.skipped) for results in split_results.values() for r in results))


def summarize(split_results: dict[str, list[ShardResult]], pre_skipped: dict | None = None, out=None) -> str:
    """Human-readable end-of-run summary: images written per split, skipped files with reasons.

    `pre_skipped` holds files dropped before writing ({split: [(name, reason)]}, e.g. no ground-truth label).
    """
    lines = []
    for split, results in split_results.items():
        written = sum(r.written for r in results)
        # sorted by file: the shards' lists come in the order the workers wrote them
        skipped = sorted(list((pre_skipped or {}).get(split, [])) + [s for r in results for s in r.skipped])
        resumed = sum(1 for r in results if r.resumed)
        if resumed == 0:
            lines.append(f"{split}: {written} images written to {len(results)} shard(s), {len(skipped)} skipped")
        elif resumed == len(results):  # a --resume of a finished split
            lines.append(f"{split}: nothing to write: its {resumed} shard(s) ({written} images, {len(skipped)} "
                         "skipped) were already complete")
        else:
            lines.append(f"{split}: {written} images in {len(results)} shard(s), {len(skipped)} skipped; "
                         f"{len(results) - resumed} shard(s) written now, {resumed} kept from the run before "
                         "(--resume)")
        for name, reason in skipped:
            lines.append(f"  skipped {printable(name)}: {reason}")
    text = "\n".join(lines)
    print(text, file=out or sys.stdout)
    return text
