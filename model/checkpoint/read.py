"""Finding checkpoints on disk and reading what one holds (CheckpointInfo), in each of the three formats.

A format is told from what the file holds, never from its name:
- "named": the checkpoint_metadata string tensor is there (model/checkpoint/write.py writes it).
- "tf1": the original's names, no metadata.
- "object": the object graph (`_CHECKPOINTABLE_OBJECT_GRAPH`) of tf.train.Checkpoint(model=, optimizer=,
  global_step=). Its architecture is the one of model.resnet.ARCHITECTURES whose bottleneck blocks (width, groups
  of the 3x3 conv, output depth, SE width) are the ones the graph's variables have.
"""
import dataclasses
import glob
import json
import math
import os
import re
from typing import Any, Optional

import tensorflow as tf

from model.layers.batch_norm import BN_MOMENTUM
from model.resnet import ARCHITECTURES
from utils.ema import EMA_SUFFIX
from utils.errors import UserError, first_line, printable, reset_with_each_command

METADATA_KEY = "checkpoint_metadata"
GLOBAL_STEP_KEY = "global_step"
SLOT_SUFFIX = "/Momentum"
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
OBJECT_STEP_KEY = "global_step/.ATTRIBUTES/VARIABLE_VALUE"
_DATA_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)$")
_OPERATION_KEY = re.compile(r"^model/_operations/(\d+)/")
# The kernels that tell a bottleneck block apart: its three convs and the SE squeeze dense layer.
_BLOCK_KERNEL_KEY = re.compile(r"^model/_operations/(\d+)/(bottleneck_[123]/conv|se/squeeze)/[^/]*kernel$")


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint holds, read from the file. None where the format does not record it."""
    path: str
    format: str                       # "named", "tf1" or "object"
    step: Optional[int]
    arch: Optional[str]
    num_classes: Optional[int]
    use_final_conv: Optional[bool]
    image_size: Optional[int] = None
    input_normalized: Optional[bool] = None
    has_quantization_ranges: bool = False
    has_optimizer_state: bool = False
    has_weight_averages: bool = False  # the EMA of --moving_average_decay
    # {RunConfig field: value} of the training flags the metadata records ({} before version 2).
    training_state: dict = dataclasses.field(default_factory=dict)
    # {"step": N, "sign": what showed it} when the training that wrote it was seen to diverge (runtime/metrics.py)
    diverged: Optional[dict] = None
    # {"id": the training's, "session": the run's that wrote it} (runtime/settings.lineage; None before 2026-12-06)
    lineage: Optional[dict] = None
    # The open reader inspect() read it with (reader_of): its files stay readable through it after a training's
    # rotation deletes them, so a restore reads the very checkpoint the settings were resolved from.
    reader: Any = dataclasses.field(default=None, compare=False, repr=False)

    def recorded_settings(self):
        """{RunConfig field (and `images_per_step`): value} of every setting this checkpoint records (None-valued
        ones left out). `quantize` is known from the content (QAT ranges present or not) when the metadata does not
        say."""
        settings = {"arch": self.arch, "num_classes": self.num_classes, "image_size": self.image_size,
                    "use_final_conv": self.use_final_conv}
        settings.update(self.training_state)
        settings.setdefault("quantize", self.has_quantization_ranges)
        return {key: value for key, value in settings.items() if value is not None}

    def unrecorded_settings(self):
        """{setting name: why} of the settings that shaped this checkpoint's training but that it does not record:
        a run reading it takes the flag's value and must say so. The original trained only at 224 px, so a "tf1"
        checkpoint's size is known; its QAT grid is not, nor are the ones of this port's earlier checkpoints."""
        why = self.unrecorded_settings_reason()
        names = ["image_size"] if self.format != "tf1" and self.image_size is None else []
        if self.has_quantization_ranges:
            names += [name for name in ("symmetric", "use_qdq") if name not in self.training_state]
        return {name: why for name in names}

    def unrecorded_settings_reason(self):
        """Why a setting may be missing from what this checkpoint records (its format)."""
        return {"object": "an object-based checkpoint of an earlier version of this port",
                "tf1": "the original's format",
                "named": "metadata of an earlier version of this port, or converted from one"}[self.format]

    def describe(self):
        parts = [f"{self.format} format", f"step {self.step}" if self.step is not None else "no step"]
        if self.arch:
            parts.append(self.arch)
        if self.num_classes:
            parts.append(f"{self.num_classes} classes")
        if self.image_size:
            parts.append(f"{self.image_size} px")
        if self.has_weight_averages:
            parts.append("with EMA weights")
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True)
class ObjectModel:
    """The model an object-format checkpoint holds, as its object graph records it."""
    arch: str
    num_classes: int
    use_final_conv: bool
    input_normalized: bool
    quantized: bool
    variables: int                    # model variables in the checkpoint


# ---------------------------------------------------------------- finding a checkpoint

def is_complete(prefix):
    """The index and every data shard it names are on disk (a save killed midway leaves neither renamed)."""
    if not os.path.isfile(prefix + ".index"):
        return False
    shards = [_DATA_SHARD.search(path) for path in glob.glob(glob.escape(prefix) + ".data-*-of-*")]
    shards = [match for match in shards if match]
    if not shards:
        return False
    expected = int(shards[0].group(2))
    return sorted(int(match.group(1)) for match in shards) == list(range(expected))


def _step_of(prefix):
    match = re.search(r"-(\d+)$", prefix)
    return int(match.group(1)) if match else -1


# How much of a name read from a `checkpoint` state file a message quotes: the file may hold anything.
SHOWN = 200


def candidates(directory, notes=None):
    """Checkpoint prefixes of `directory`, newest first: the `checkpoint` state file's list, then any other
    `*.index` on disk. Only `directory`'s own files are candidates: a path the state file records in another
    directory (a model_dir copied or moved, the state file of another run, another machine) is looked up by its
    basename in `directory`, and appended to `notes` (when given)."""
    listed = []
    try:
        state = tf.compat.v1.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError):  # an unparsable state file: fall back to the files
        state = None
    if state is not None:
        here = os.path.realpath(directory)
        for path in reversed(list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]):
            local = os.path.join(directory, os.path.basename(path))
            listed.append(local)
            if notes is not None and os.path.realpath(os.path.dirname(path)) != here:
                notes.append(path)
    on_disk = sorted((path[:-len(".index")] for path in glob.glob(os.path.join(glob.escape(directory), "*.index"))),
                     key=lambda prefix: (_step_of(prefix), os.path.getmtime(prefix + ".index")), reverse=True)
    seen = set()
    ordered = []
    for prefix in listed + on_disk:
        key = os.path.abspath(prefix)
        if key not in seen:
            seen.add(key)
            ordered.append(prefix)
    return ordered


def _what_is_missing(prefix):
    """Why checkpoint `prefix` (a candidate) is not complete, as the rest of a sentence."""
    has_index = os.path.isfile(prefix + ".index")
    if not has_index and not glob.glob(glob.escape(prefix) + ".data-*"):
        return "is missing (the `checkpoint` state file names it, but none of its files is there)"
    return "is incomplete (its {} missing)".format("data files are" if has_index else ".index file is")


# Incomplete checkpoints already warned about in this run (several of its steps look for the newest one).
_reported = set()
reset_with_each_command(_reported.clear)


def latest_checkpoint(directory, warn=print):
    """The newest complete checkpoint of `directory`, or None when it has no checkpoint at all. A newer one that is
    incomplete or missing (its files damaged or deleted after the save: a save writes the index last and the state
    file after it) is reported once, with the one used instead. When every checkpoint the directory names is
    incomplete or missing, a UserError: a training run would start afresh there over the run it was meant to
    continue, and no other mode would find anything to load."""
    if not directory or not os.path.isdir(directory):
        return None
    skipped, notes = [], []
    ordered = candidates(directory, notes)
    if notes and ("elsewhere", os.path.abspath(directory)) not in _reported:
        _reported.add(("elsewhere", os.path.abspath(directory)))
        others = sorted({os.path.dirname(path) for path in notes})
        more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
        here = printable(directory, SHOWN)
        warn(f"Note: the `checkpoint` state file of {here} names {len(notes)} checkpoint(s) in another directory, "
             f"{printable(others[0], SHOWN)}{more}; checkpoints are read only from the model_dir, so each is looked for "
             f"in {here} by its name")
    for prefix in ordered:
        if is_complete(prefix):
            for bad in skipped:
                if os.path.abspath(bad) not in _reported:
                    _reported.add(os.path.abspath(bad))
                    warn(f"WARNING: checkpoint {printable(bad, SHOWN)} {_what_is_missing(bad)}; using the newest "
                         f"complete one, {printable(prefix, SHOWN)}")
            return prefix
        skipped.append(prefix)
    if skipped:
        older = len(skipped) - 1
        raise UserError(f"{printable(directory, SHOWN)} has no complete checkpoint: {printable(skipped[0], SHOWN)} "
                        f"{_what_is_missing(skipped[0])}"
                        + (f", as are the {older} older one(s) it names" if older else "")
                        + "; restore the files, or move the checkpoint files and the `checkpoint` state file away to "
                        "start afresh")
    return None


# The file name endings of a checkpoint's files after its prefix.
_CHECKPOINT_FILE_SUFFIX = re.compile(r"\.(?:index|data-\d+-of-\d+|meta)$")


def find_checkpoint(path, flag, warn=print):
    """A checkpoint prefix, or a directory -> its newest complete checkpoint. UserError naming `flag` otherwise."""
    if os.path.isdir(path):
        latest = latest_checkpoint(path, warn)
        if latest is None:
            from model.export import as_export
            exported = as_export(path)
            if exported is not None:
                raise UserError(printable(f"{flag} {path} is {exported.what}, not a training checkpoint: give the "
                                          "checkpoint it was exported from, " + (
                                              exported.checkpoint_dir or "which its record does not name")))
            raise UserError(f"{flag} {path}: no complete checkpoint in that directory")
        return latest
    if not os.path.exists(path + ".index"):
        prefix = _CHECKPOINT_FILE_SUFFIX.sub("", path)
        if prefix != path and os.path.exists(prefix + ".index"):
            raise UserError(f"{flag} {path} is one of a checkpoint's files: name the checkpoint by its prefix, "
                            f"{flag} {prefix}")
        if glob.glob(glob.escape(path) + ".data-*"):  # its data without its index: not "no such checkpoint"
            try:
                newest = latest_checkpoint(os.path.dirname(path) or ".", warn=lambda line: None)
            except UserError:  # none complete there either
                newest = None
            raise UserError(f"{flag} {path}: the checkpoint is incomplete (its .index file is missing)" + (
                f"; the newest complete one beside it is {newest}" if newest else ""))
        raise UserError(f"{flag} {path}: no such checkpoint (expected {path}.index or a directory of checkpoints)")
    if not is_complete(path):
        raise UserError(f"{flag} {path}: the checkpoint is incomplete (its .data file is missing)")
    return path


# ---------------------------------------------------------------- reading what a checkpoint holds

def checkpoint_gone(path):
    """The UserError of a checkpoint that was there when it was chosen and is gone when read: deleted in between,
    usually by the retention of a training running in its directory (named from its lock when one runs), not
    damaged. None while its .index is still there."""
    if os.path.exists(path + ".index"):
        return None
    from utils.run_lock import describe_holder, live_holder
    directory = os.path.dirname(os.path.abspath(path))
    holder = live_holder(directory)
    by = (f" by the training running in {printable(directory, SHOWN)} ({describe_holder(holder)}), which keeps only "
          "its newest checkpoints" if holder is not None else "")
    return UserError(f"checkpoint {printable(path, SHOWN)} is gone: it was deleted{by} after this run chose it; run "
                     "the command again to read the newest one, or copy the checkpoint out of that directory and "
                     "pass its prefix")


def open_reader(path):
    """tf.train.load_checkpoint(path); a UserError when the file cannot be read (or is gone since it was chosen)."""
    try:
        return tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError, IndexError) as error:
        raise (checkpoint_gone(path) or UserError(f"cannot read checkpoint {path}: {first_line(error)}")) from None


def read_tensor(reader, key, path):
    """One tensor of the checkpoint at `path`; a UserError when it is corrupt or truncated (or gone since it was
    opened)."""
    try:
        return reader.get_tensor(key)
    except (tf.errors.OpError, IndexError, ValueError) as error:  # IndexError: "Read less bytes than requested"
        raise (checkpoint_gone(path) or UserError(f"checkpoint {path} is corrupt or truncated ({key}: "
                                                  f"{first_line(error)})")) from None


def _tf1_arch(shapes):
    heads = [arch for arch in ARCHITECTURES if f"{arch}/output/dense/kernel" in shapes]
    if len(heads) == 1:
        return heads[0]
    prefixes = {name.split("/", 1)[0] for name in shapes}
    found = [arch for arch in ARCHITECTURES if arch in prefixes]
    return found[0] if len(found) == 1 else None


def object_paths(reader):
    """{object path under `model/`: shape} of every variable of an object-format checkpoint's model, from its
    object graph. Each node is visited once, by the first path that reaches it (children in recorded order), so
    a cycle or an object referenced twice is walked once and no nesting depth is cut off."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
    found = {}
    visited = set()
    pending = [(child.node_id, child.local_name) for child in reversed(graph.nodes[0].children)
               if child.local_name == "model"]
    while pending:  # depth first, children in the order the graph records them
        node_id, path = pending.pop()
        if node_id in visited:
            continue
        visited.add(node_id)
        node = graph.nodes[node_id]
        for attribute in node.attributes:
            if attribute.name == "VARIABLE_VALUE" and attribute.checkpoint_key in shapes:
                found[path] = shapes[attribute.checkpoint_key]
        pending.extend((child.node_id, f"{path}/{child.local_name}") for child in reversed(node.children)
                       if child.node_id not in visited)
    return found


def _block_signature(spec, stage):
    """(width, groups, output depth, SE width or None) of the bottleneck blocks of `stage` of ArchSpec `spec`."""
    out = spec.out_channels(stage)
    return spec.widths[stage], spec.cardinality, out, out // spec.se_ratio if spec.use_se else None


def _recorded_blocks(paths):
    """[(width, groups, output depth, SE width or None)] of each bottleneck block the object paths hold, in
    operation order: the 3x3 conv's kernel [3, 3, width / groups, width], the last 1x1 conv's output depth, the
    SE squeeze kernel's width."""
    kernels = {}
    for key, shape in paths.items():
        match = _BLOCK_KERNEL_KEY.match(key)
        if match:
            kernels.setdefault(int(match.group(1)), {})[match.group(2)] = list(shape)
    blocks = []
    for operation in sorted(kernels):
        held = kernels[operation]
        middle, last = held.get("bottleneck_2/conv"), held.get("bottleneck_3/conv")
        if "bottleneck_1/conv" not in held or not middle or not last or len(middle) != 4 or not middle[2]:
            blocks.append(None)  # a block whose kernels are not all there fits no architecture
            continue
        squeeze = held.get("se/squeeze")
        blocks.append((middle[3], middle[3] // middle[2], last[-1], squeeze[-1] if squeeze else None))
    return blocks


def _object_arch(paths):
    """The architecture of model.resnet.ARCHITECTURES whose blocks are the ones the checkpoint holds."""
    blocks = _recorded_blocks(paths)
    matches = [arch for arch, spec in ARCHITECTURES.items()
               if blocks == [_block_signature(spec, stage) for stage, count in enumerate(spec.layers)
                             for _ in range(count)]]
    if not matches:
        raise UserError(f"cannot tell the architecture of this checkpoint ({len(blocks)} bottleneck blocks)")
    if len(matches) > 1:
        raise UserError(f"cannot tell the architecture of this checkpoint ({len(blocks)} bottleneck blocks, as "
                        f"in {' and '.join(matches)})")
    return matches[0]


def object_model(reader):
    """ObjectModel of an object-format checkpoint: the architecture, the classifier, the input normalisation and
    QAT ranges present or not, from the variables its object graph records."""
    paths = object_paths(reader)
    operations = {int(_OPERATION_KEY.match(k).group(1)) for k in paths if _OPERATION_KEY.match(k)}
    if not operations:
        raise UserError("cannot tell the architecture of this checkpoint (0 bottleneck blocks)")
    arch = _object_arch(paths)
    head = max(operations)
    kernels = [shape for k, shape in paths.items() if k.startswith(f"model/_operations/{head}/dense/")
               and k.endswith("kernel")]
    if len(kernels) != 1:
        raise UserError("cannot find the classifier kernel in this checkpoint")
    # Operation 0 is the Input; without DALI the input normalisation (no variables) comes next, then the stem.
    stem = min(int(_OPERATION_KEY.match(k).group(1)) for k in paths if _OPERATION_KEY.match(k) and "/conv/" in k)
    quantized = any("quant" in k for k in paths)
    return ObjectModel(arch, int(kernels[0][-1]), len(kernels[0]) == 4, stem == 1, quantized, len(paths))


# Below this share of their starting values left in the BN moving statistics, a model's outputs are its own.
SETTLED_SHARE = 0.01


def unsettled_statistics(step, what):
    """A WARNING line when a model trained `step` steps still holds 1% or more of its BN moving statistics'
    starting values (mean 0, variance 1: every training, and the original's --finetune_checkpoint fine-tune, starts
    them there at step 0, and each step keeps BN_MOMENTUM of them); else None. `what` names the model."""
    if step is None or step < 0:
        return None
    share = BN_MOMENTUM ** step
    if share < SETTLED_SHARE:
        return None
    settled = math.ceil(math.log(SETTLED_SHARE) / math.log(BN_MOMENTUM))  # the first step under the share
    return (f"WARNING: {what} was trained {step} step(s): its BN moving statistics still hold {share:.0%} of their "
            "starting values (mean 0, variance 1, where a training or a --finetune_checkpoint fine-tune starts them), "
            "so it normalises with statistics that are not its data's and its outputs are unreliable; train it to "
            f"step {settled} or beyond (under {SETTLED_SHARE:.0%} left)")


def divergence_warning(record, what):
    """A WARNING line when `record` (the `diverged` a checkpoint's metadata or an export's source holds:
    {"step": N, "sign": what showed it}) says the training of `what` diverged; else None."""
    if not isinstance(record, dict) or "step" not in record:
        return None
    return (f"WARNING: {what} comes from a training that diverged at step {record['step']} "
            f"({printable(record.get('sign'))[:300]}) "
            "and had not recovered: its outputs are not to be trusted, however confident they look; train it again "
            "with a lower --lr_init or a larger --batch_size")


def _integer(low, high):
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and low <= value <= high, \
        "an integer from {:,} to {:,}".format(low, high)


_SWITCH = (lambda value: isinstance(value, bool), "true or false")
_RECORD = (lambda value: isinstance(value, dict), "a JSON object")
# What each field of checkpoint_metadata (and of its `training` record) may hold; None (absent) is always allowed.
# Beyond these bounds a value is damage, not a model: 10**9 classes asked Keras for an 8 TB classifier.
_METADATA_FIELDS = {
    "arch": (lambda value: value in ARCHITECTURES, "one of " + ", ".join(sorted(ARCHITECTURES))),
    "num_classes": _integer(2, 1_000_000), "image_size": _integer(8, 8192),
    "use_final_conv": _SWITCH, "input_normalized": _SWITCH, "training": _RECORD,
    "diverged": (lambda value: isinstance(value, dict) and isinstance(value.get("step"), int)
                 and isinstance(value.get("sign"), str), 'a {"step": N, "sign": "..."} record'),
    "lineage": (lambda value: isinstance(value, dict) and all(
        isinstance(value.get(key), str) and 0 < len(value[key]) <= 64 for key in ("id", "session")),
        'an {"id": "...", "session": "..."} record'),
}
_TRAINING_FIELDS = {
    "quantize": _SWITCH, "symmetric": _SWITCH, "use_qdq": _SWITCH, "amp": _SWITCH,
    "quant_delay": _integer(0, 2 ** 62), "images_per_step": _integer(1, 2 ** 40), "processes": _integer(1, 2 ** 20),
    "train_images": _integer(0, 2 ** 50),
    "moving_average_decay": (lambda value: isinstance(value, (int, float)) and not isinstance(value, bool)
                             and 0 <= value < 1, "a number from 0 to 1"),
    "schedule": _RECORD, "recipe": _RECORD, "data_stream": _RECORD,
    "images_seen": (lambda value: isinstance(value, dict) and all(
        isinstance(value.get(key), int) and value[key] >= 0 for key in ("step", "images")),
        'a {"step": N, "images": N} record'),
    "finetune_checkpoint": (lambda value: isinstance(value, str), "a path"),
}


def _checked_metadata(meta, path):
    """`meta` (checkpoint_metadata, parsed) when each field it has holds what write.py writes there; else a
    UserError naming the first that does not: a hand edit or damage, which no run can take for settings."""
    def damaged(what):
        return UserError(f"checkpoint {path}: damaged {METADATA_KEY} ({what}): it is no checkpoint of this port "
                         "as written")
    if not isinstance(meta, dict):
        raise damaged("not a JSON object")
    for record, fields, prefix in ((meta, _METADATA_FIELDS, ""), (meta.get("training") or {}, _TRAINING_FIELDS,
                                                                  "training.")):
        for name, (valid, expected) in fields.items():
            value = record.get(name)
            if value is not None and not valid(value):
                raise damaged(f"{prefix}{name} {value!r:.80} is not {expected}")
    return meta


def reader_of(info):
    """The reader of CheckpointInfo `info`: the one inspect() opened (still reading its files if they were deleted
    since), else a new one."""
    return info.reader if info.reader is not None else open_reader(info.path)


def inspect(path):
    """CheckpointInfo of the checkpoint at prefix `path` (see find_checkpoint), holding the reader it was read with
    (`reader`; drop it with dataclasses.replace(info, reader=None) where the info is kept long)."""
    reader = open_reader(path)
    return dataclasses.replace(_inspect(path, reader), reader=reader)


def _inspect(path, reader):
    shapes = reader.get_variable_to_shape_map()
    if OBJECT_GRAPH_KEY in shapes:
        held = object_model(reader)
        step = int(read_tensor(reader, OBJECT_STEP_KEY, path)) if OBJECT_STEP_KEY in shapes else None
        return CheckpointInfo(path, "object", step, held.arch, held.num_classes, held.use_final_conv, None,
                              held.input_normalized, held.quantized, any(k.startswith("optimizer/") for k in shapes))
    step = int(read_tensor(reader, GLOBAL_STEP_KEY, path)) if GLOBAL_STEP_KEY in shapes else None
    has_slots = any(name.endswith(SLOT_SUFFIX) for name in shapes)
    has_ranges = any("quant" in name.lower() for name in shapes)
    has_averages = any(name.endswith(EMA_SUFFIX) for name in shapes)
    if METADATA_KEY in shapes:
        try:
            meta = json.loads(read_tensor(reader, METADATA_KEY, path).decode("utf-8"))
        except (ValueError, AttributeError) as error:
            raise UserError(f"checkpoint {path}: unreadable {METADATA_KEY} ({error})") from None
        meta = _checked_metadata(meta, path)
        return CheckpointInfo(path, "named", step, meta.get("arch"), meta.get("num_classes"),
                              meta.get("use_final_conv"), meta.get("image_size"), meta.get("input_normalized"),
                              has_ranges, has_slots, has_averages,
                              dict(meta.get("training") or {}), meta.get("diverged"), meta.get("lineage"))
    arch = _tf1_arch(shapes)
    num_classes = use_final_conv = None
    if arch is not None and f"{arch}/output/dense/kernel" in shapes:
        kernel = shapes[f"{arch}/output/dense/kernel"]
        num_classes, use_final_conv = int(kernel[-1]), len(kernel) == 4
    return CheckpointInfo(path, "tf1", step, arch, num_classes, use_final_conv, None, None, has_ranges, has_slots,
                          has_averages)
