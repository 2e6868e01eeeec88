"""Every checkpoint save and restore: training state, inference weights, fine-tuning, in every format.

Formats, told apart by what the file holds (never by its name):
- "named" (what this port writes): a name-based TensorFlow checkpoint whose keys are the original's TF1 variable
  names (`resnet50/conv2d/conv2d/kernel`, momentum slots `<name>/Momentum`, `global_step`, and with
  `--moving_average_decay` the EMA as `<name>/ExponentialMovingAverage`, TF1's name), plus the QAT ranges as
  `<arch>/<keras path>`, the dynamic loss scale as `loss_scale/...`, and one string tensor `checkpoint_metadata`
  (JSON: arch, classes, image size, classifier form, input normalisation). The keys depend on neither layer order
  nor data layout, so an NHWC-trained checkpoint loads into an NCHW model, and the original's code
  (tf.compat.v1.train.Saver over its variables) reads our weights.
- "tf1": the original's checkpoints (NGC): the same names, no metadata.
- "object": the object-based `tf.train.Checkpoint(model=, optimizer=, global_step=)` that earlier versions of
  this port wrote. Read only; its keys follow the Keras layer order, so it is read into an NHWC twin of the model
  and copied over by variable path.

Every restore verifies that each variable the model needs came from the checkpoint (one UserError naming the
first few that did not, and how many), and reports what it restored.
"""
import dataclasses
import glob
import json
import os
import re
import shutil
import time
from typing import Optional

import numpy as np
import tensorflow as tf

from model import checkpoint_names
from model.layers.quantization import QuantizationConfig, is_quantization_variable
from model.resnet import ARCHITECTURES, averaged_variables, build_model
from utils.ema import EMA_SUFFIX
from utils.errors import UserError

CHECKPOINT_PREFIX = "model.ckpt"
METADATA_KEY = "checkpoint_metadata"
GLOBAL_STEP_KEY = "global_step"
LOSS_SCALE_KEYS = {"dynamic_scale": "loss_scale/current_loss_scale", "step_counter": "loss_scale/good_steps"}
OPTIMIZER_ITERATIONS_KEY = "Momentum/iterations"
SLOT_SUFFIX = "/Momentum"
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
# 2 adds `training`, the training flags of the run that wrote it (QAT, EMA); version 1 is read the same way, with
# no training flags recorded.
METADATA_VERSION = 2
_MAX_LISTED = 5
_DATA_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)$")
_OPERATION_KEY = re.compile(r"^model/_operations/(\d+)/")


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

    def recorded_settings(self):
        """{RunConfig field: value} of every setting this checkpoint records (None-valued ones left out). `quantize`
        is known from the content (QAT ranges present or not) when the metadata does not say."""
        settings = {"arch": self.arch, "num_classes": self.num_classes, "image_size": self.image_size,
                    "use_final_conv": self.use_final_conv}
        settings.update(self.training_state)
        settings.setdefault("quantize", self.has_quantization_ranges)
        return {key: value for key, value in settings.items() if value is not None}

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
class RestoreReport:
    info: CheckpointInfo
    restored: int                     # variables assigned from the checkpoint
    total: int                        # variables the model has
    fresh: tuple = ()                 # variables deliberately left at their initial values, e.g. a new classifier
    trainable_only: bool = False      # BN moving statistics (and QAT ranges) deliberately not restored

    def describe(self):
        text = f"Restored {self.restored} of {self.total} variables from {self.info.path} ({self.info.describe()})"
        if self.trainable_only:
            text += "; trainable variables only (BN moving statistics start fresh, as the original's fine-tune)"
        if self.fresh:
            text += f"; {len(self.fresh)} initialised fresh: {_listing(self.fresh)}"
        return text


def _listing(items):
    items = list(items)
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f" ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else "")


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


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


def _candidates(directory):
    """Checkpoint prefixes of `directory`, newest first: the `checkpoint` state file's list, then any other
    `*.index` on disk. Paths recorded on another machine are looked up by basename here."""
    listed = []
    try:
        state = tf.compat.v1.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError):  # an unparsable state file: fall back to the files
        state = None
    if state is not None:
        for path in reversed(list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]):
            local = os.path.join(directory, os.path.basename(path))
            listed.append(path if os.path.exists(path + ".index") else local)
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


def latest_checkpoint(directory, warn=print):
    """The newest complete checkpoint of `directory`, or None. Skipped incomplete ones are reported."""
    if not directory or not os.path.isdir(directory):
        return None
    for prefix in _candidates(directory):
        if is_complete(prefix):
            return prefix
        warn(f"WARNING: checkpoint {prefix} is incomplete (missing .index or .data files); "
             "using the newest complete one before it")
    return None


def find_checkpoint(path, flag, warn=print):
    """A checkpoint prefix, or a directory -> its newest complete checkpoint. UserError naming `flag` otherwise."""
    if os.path.isdir(path):
        latest = latest_checkpoint(path, warn)
        if latest is None:
            raise UserError(f"{flag} {path}: no complete checkpoint in that directory")
        return latest
    if not os.path.exists(path + ".index"):
        raise UserError(f"{flag} {path}: no such checkpoint (expected {path}.index or a directory of checkpoints)")
    if not is_complete(path):
        raise UserError(f"{flag} {path}: the checkpoint is incomplete (its .data file is missing)")
    return path


# ---------------------------------------------------------------- reading what a checkpoint holds

def _reader(path):
    try:
        return tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError, IndexError) as error:
        raise UserError(f"cannot read checkpoint {path}: {_first_line(error)}") from None


def _tf1_arch(shapes):
    heads = [arch for arch in ARCHITECTURES if f"{arch}/output/dense/kernel" in shapes]
    if len(heads) == 1:
        return heads[0]
    prefixes = {name.split("/", 1)[0] for name in shapes}
    found = [arch for arch in ARCHITECTURES if arch in prefixes]
    return found[0] if len(found) == 1 else None


def _object_paths(reader):
    """{object path under `model/`: shape} of an object-based checkpoint, by its object graph."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
    found = {}

    def walk(node_id, prefix, depth):
        for attribute in graph.nodes[node_id].attributes:
            if attribute.name == "VARIABLE_VALUE" and attribute.checkpoint_key in shapes:
                found[prefix] = shapes[attribute.checkpoint_key]
        if depth < 12:
            for child in graph.nodes[node_id].children:
                walk(child.node_id, f"{prefix}/{child.local_name}", depth + 1)

    for child in graph.nodes[0].children:
        if child.local_name == "model":
            walk(child.node_id, "model", 0)
    return found


def _object_settings(reader):
    """(arch, num_classes, use_final_conv, input_normalized, quantized, variables) of an object-based checkpoint."""
    paths = _object_paths(reader)
    operations = {int(_OPERATION_KEY.match(k).group(1)) for k in paths if _OPERATION_KEY.match(k)}
    blocks = {_OPERATION_KEY.match(k).group(1) for k in paths
              if _OPERATION_KEY.match(k) and "/bottleneck_1/" in k}
    if any("/se/" in k for k in paths):
        arch = "se-resnext101-32x4d"
    else:
        arch = {16: "resnet50", 33: "resnext101-32x4d"}.get(len(blocks))
    if arch is None or not operations:
        raise UserError(f"cannot tell the architecture of this checkpoint ({len(blocks)} bottleneck blocks)")
    head = max(operations)
    kernels = [shape for k, shape in paths.items() if k.startswith(f"model/_operations/{head}/dense/")
               and k.endswith("kernel")]
    if len(kernels) != 1:
        raise UserError("cannot find the classifier kernel in this checkpoint")
    # Operation 0 is the Input; without DALI the input normalisation (no variables) comes next, then the stem.
    stem = min(int(_OPERATION_KEY.match(k).group(1)) for k in paths if _OPERATION_KEY.match(k) and "/conv/" in k)
    quantized = any("quant" in k for k in paths)
    return arch, int(kernels[0][-1]), len(kernels[0]) == 4, stem == 1, quantized, len(paths)


def inspect(path):
    """CheckpointInfo of the checkpoint at prefix `path` (see find_checkpoint)."""
    reader = _reader(path)
    shapes = reader.get_variable_to_shape_map()
    if OBJECT_GRAPH_KEY in shapes:
        arch, num_classes, final_conv, normalized, quantized, _ = _object_settings(reader)
        step_key = "global_step/.ATTRIBUTES/VARIABLE_VALUE"
        step = int(_read(reader, step_key, path)) if step_key in shapes else None
        return CheckpointInfo(path, "object", step, arch, num_classes, final_conv, None, normalized, quantized,
                              any(k.startswith("optimizer/") for k in shapes))
    step = int(_read(reader, GLOBAL_STEP_KEY, path)) if GLOBAL_STEP_KEY in shapes else None
    has_slots = any(name.endswith(SLOT_SUFFIX) for name in shapes)
    has_ranges = any("quant" in name.lower() for name in shapes)
    has_averages = any(name.endswith(EMA_SUFFIX) for name in shapes)
    if METADATA_KEY in shapes:
        try:
            meta = json.loads(_read(reader, METADATA_KEY, path).decode("utf-8"))
        except (ValueError, AttributeError) as error:
            raise UserError(f"checkpoint {path}: unreadable {METADATA_KEY} ({error})") from None
        return CheckpointInfo(path, "named", step, meta.get("arch"), meta.get("num_classes"),
                              meta.get("use_final_conv"), meta.get("image_size"), meta.get("input_normalized"),
                              has_ranges, has_slots, has_averages,
                              dict(meta.get("training") or {}))
    arch = _tf1_arch(shapes)
    num_classes = use_final_conv = None
    if arch is not None and f"{arch}/output/dense/kernel" in shapes:
        kernel = shapes[f"{arch}/output/dense/kernel"]
        num_classes, use_final_conv = int(kernel[-1]), len(kernel) == 4
    return CheckpointInfo(path, "tf1", step, arch, num_classes, use_final_conv, None, None, has_ranges, has_slots,
                          has_averages)


def check_fits(info, arch, num_classes, *, allow_other_classes=False, arch_flag="--arch"):
    """UserError naming the flag to change when the model that `arch`/`num_classes` build cannot hold `info`."""
    if info.arch is None:
        raise UserError(f"checkpoint {info.path} holds no {', '.join(ARCHITECTURES)} variables; is it a "
                        "checkpoint of this model?")
    if info.arch != arch:
        raise UserError(f"checkpoint {info.path} is a {info.arch} checkpoint; this run builds {arch} "
                        f"(pass {arch_flag} {info.arch})")
    if info.num_classes is not None and info.num_classes != num_classes and not allow_other_classes:
        raise UserError(f"checkpoint {info.path} has {info.num_classes} classes; this run builds {num_classes} "
                        f"(pass --num_classes {info.num_classes})")


# ---------------------------------------------------------------- restoring

def model_entries(model, arch):
    """{checkpoint key: model variable} for the named and tf1 formats."""
    entries = dict(checkpoint_names.tf1_variable_map(model, arch))
    entries.update({f"{arch}/{v.path}": v for v in model.variables if is_quantization_variable(v)})
    return entries


def _classifier_keys(arch):
    return {f"{arch}/output/dense/kernel", f"{arch}/output/dense/bias"}


def _compatible(checkpoint_shape, variable_shape):
    """Equal shapes, or the classifier kernel as dense [C, N] vs 1x1 conv [1, 1, C, N] (the same numbers)."""
    a, b = tuple(checkpoint_shape), tuple(variable_shape)
    return a == b or (1, 1) + a == b or a == (1, 1) + b


def _refuse(info, problems, describe):
    raise UserError(f"checkpoint {info.path} does not fit {describe}: " + "; ".join(problems))


def _verify_shapes(info, shapes, wanted, optional, describe, unexpected=()):
    missing = [key for key in wanted if key not in shapes and key not in optional]
    mis_shaped = [f"{key} {list(shapes[key])} vs model {list(variable.shape)}" for key, variable in wanted.items()
                  if key in shapes and not _compatible(shapes[key], variable.shape)]
    problems = [f"{len(items)} {title}: {_listing(sorted(items))}" for title, items in
                (("missing", missing), ("mis-shaped", mis_shaped), ("unexpected", list(unexpected))) if items]
    if problems:
        _refuse(info, problems, describe)


def _read(reader, key, path):
    try:
        return reader.get_tensor(key)
    except (tf.errors.OpError, IndexError, ValueError) as error:  # IndexError: "Read less bytes than requested"
        raise UserError(f"checkpoint {path} is corrupt or truncated ({key}: {_first_line(error)})") from None


def _assign(reader, pairs, path):
    """Read every value first, so a corrupt checkpoint assigns nothing."""
    values = [_read(reader, key, path) for key, _ in pairs]
    for value, (_, variable) in zip(values, pairs):
        variable.assign(tf.cast(np.reshape(value, variable.shape), variable.dtype))


def _legacy_twin(info):
    """An NHWC float (or QAT, when the checkpoint has ranges) model with the structure that wrote `info`."""
    return build_model(info.arch, num_classes=info.num_classes, use_final_conv=info.use_final_conv,
                       input_normalized=bool(info.input_normalized),
                       quantization=QuantizationConfig() if info.has_quantization_ranges else None)


def _read_legacy(info, describe):
    twin = _legacy_twin(info)
    try:
        status = tf.train.Checkpoint(model=twin).read(info.path)
        status.expect_partial()  # optimizer and step are read by restore_training, not here
        status.assert_existing_objects_matched()
    except (ValueError, AssertionError, IndexError, tf.errors.OpError) as error:
        _refuse(info, [_first_line(error)], describe)
    saved = _object_settings(_reader(info.path))[-1]
    if saved != len(twin.variables):
        _refuse(info, [f"it holds {saved} model variables, the model has {len(twin.variables)}"], describe)
    return twin


def restore_model(model, info, arch, describe, *, trainable_only=False, skip_classifier=False):
    """Assign the model's variables from checkpoint `info`; UserError if any needed one is missing or mis-shaped.

    QAT range variables absent from a float checkpoint keep their initial values (a QAT fine-tune starts so).
    `trainable_only`: BN moving statistics keep theirs too (the original's --finetune_checkpoint).
    `skip_classifier`: the classifier keeps its fresh initialisation (fine-tuning to another class count).
    """
    fresh = []
    if info.format == "object":
        source = {v.path: v for v in _read_legacy(info, describe).variables}
        pairs = []
        for variable in model.variables:
            is_head = variable.path.startswith("output/") and not is_quantization_variable(variable)
            if (trainable_only and not variable.trainable) or (skip_classifier and is_head):
                if skip_classifier and is_head:
                    fresh.append(variable.path)
                continue
            if variable.path in source:
                pairs.append((source[variable.path], variable))
            elif not is_quantization_variable(variable):
                _refuse(info, [f"missing {variable.path}"], describe)
        for value, variable in pairs:
            variable.assign(tf.reshape(tf.cast(value, variable.dtype), variable.shape))
        return RestoreReport(info, len(pairs), len(model.variables), tuple(fresh), trainable_only)

    reader = _reader(info.path)
    shapes = reader.get_variable_to_shape_map()
    entries = model_entries(model, arch)
    wanted = {}
    for key, variable in entries.items():
        if skip_classifier and key in _classifier_keys(arch):
            fresh.append(key)
        elif variable.trainable or not trainable_only:
            wanted[key] = variable
    optional = {key for key, variable in wanted.items() if is_quantization_variable(variable)}
    unexpected = [key for key in shapes if key.startswith(f"{arch}/") and key not in entries
                  and not key.endswith((SLOT_SUFFIX, EMA_SUFFIX)) and "quant" not in key]
    _verify_shapes(info, shapes, wanted, optional, describe, unexpected)
    pairs = [(key, variable) for key, variable in wanted.items() if key in shapes]
    _assign(reader, pairs, info.path)
    return RestoreReport(info, len(pairs), len(model.variables), tuple(fresh), trainable_only)


def average_keys(model, arch):
    """{checkpoint key of an EMA: the model variable it averages} (utils/ema.py, resnet.averaged_variables)."""
    averaged = {id(v) for v in averaged_variables(model)}
    return {key + EMA_SUFFIX: variable for key, variable in model_entries(model, arch).items()
            if id(variable) in averaged}


def require_averages(info):
    """UserError unless checkpoint `info` has EMA weights (--use_ema_weights asked for them)."""
    if not info.has_weight_averages:
        raise UserError(f"checkpoint {info.path} has no EMA weights (train with --moving_average_decay to get "
                        "them), so --use_ema_weights cannot be used with it")


def load_averages(model, info, arch, describe):
    """Assign the checkpoint's EMA weights to the model's averaged variables (the raw values of the others, QAT
    ranges, stay); UserError when the checkpoint has none. Returns how many were assigned."""
    require_averages(info)
    reader = _reader(info.path)
    wanted = average_keys(model, arch)
    _verify_shapes(info, reader.get_variable_to_shape_map(), wanted, (), describe)
    _assign(reader, list(wanted.items()), info.path)
    return len(wanted)


def use_averages(model, info, arch, describe, log=print):
    """load_averages, and the log line that says the model now holds the EMA weights (--use_ema_weights)."""
    log("Using the EMA weights of {} ({} averaged variables)".format(
        info.path, load_averages(model, info, arch, describe)))


def load(model, path, arch, describe=None, **options):
    """find + inspect + restore_model for a prefix or directory; returns the RestoreReport."""
    info = inspect(find_checkpoint(path, "checkpoint"))
    return restore_model(model, info, arch, describe or f"{arch} ({len(model.variables)} variables)", **options)


def _accumulator(optimizer, variable):
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return inner.accumulators[inner._get_variable_index(variable)]


def training_entries(model, optimizer, global_step, arch, averages=None):
    """{key: variable} of the whole training state in the named format; `averages`: the run's WeightAverage."""
    entries = model_entries(model, arch)
    trainable = {id(v) for v in model.trainable_variables}
    for key, variable in list(entries.items()):
        if id(variable) in trainable:
            entries[key + SLOT_SUFFIX] = _accumulator(optimizer, variable)
    entries[GLOBAL_STEP_KEY] = global_step
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    entries[OPTIMIZER_ITERATIONS_KEY] = inner.iterations
    for attribute, key in LOSS_SCALE_KEYS.items():  # LossScaleOptimizer's state
        variable = getattr(optimizer, attribute, None)
        if variable is not None and hasattr(variable, "assign"):
            entries[key] = variable
    if averages is not None:
        entries.update({key: averages.average_of(variable) for key, variable in average_keys(model, arch).items()})
    return entries


def restore_training(model, optimizer, global_step, info, arch, describe, averages=None):
    """Resume: model, momentum slots and global step (the loss scale and Keras' iteration count when saved; the
    EMA when `averages` is given and the checkpoint has it)."""
    if info.format == "object":
        try:
            status = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=global_step).read(info.path)
            status.assert_existing_objects_matched()
        except (ValueError, AssertionError, IndexError, tf.errors.OpError) as error:
            _refuse(info, [_first_line(error) + " (checkpoints of earlier versions resume only with the NHWC "
                           "layout and the flags they were trained with)"], describe)
        return RestoreReport(info, len(model.variables), len(model.variables))
    if not info.has_optimizer_state:
        raise UserError(f"checkpoint {info.path} has no optimizer state (no */Momentum slots), so training cannot "
                        "resume from it; start a new --model_dir with --finetune_checkpoint to train from it")
    reader = _reader(info.path)
    shapes = reader.get_variable_to_shape_map()
    entries = training_entries(model, optimizer, global_step, arch,
                               averages if info.has_weight_averages else None)
    optional = {key for key in entries if "quant" in key}  # QAT ranges: absent from a float checkpoint
    optional |= set(LOSS_SCALE_KEYS.values()) | {OPTIMIZER_ITERATIONS_KEY}
    _verify_shapes(info, shapes, entries, optional, describe)
    pairs = [(key, variable) for key, variable in entries.items() if key in shapes]
    _assign(reader, pairs, info.path)
    model_keys = model_entries(model, arch)
    return RestoreReport(info, sum(1 for key, _ in pairs if key in model_keys), len(model.variables))


# ---------------------------------------------------------------- what each mode restores

def describe_model(arch, num_classes, use_final_conv=False):
    return "this model (--arch {} --num_classes {}{})".format(
        arch, num_classes, " --use_final_conv" if use_final_conv else "")


def restore_for_inference(model, global_step, model_dir, arch, num_classes, *, use_final_conv=False, required=True,
                          ema=False, log=print):
    """Evaluate / predict / inference_benchmark: every variable of `model` from model_dir's newest complete
    checkpoint (verified), `global_step` set to its step; returns its CheckpointInfo. `ema`: then the EMA weights
    over the raw ones (a UserError if it has none). With no checkpoint: a UserError when `required` or `ema`, else
    None (fresh weights, said so)."""
    path = latest_checkpoint(model_dir, warn=log)
    if path is None:
        if required or ema:
            raise UserError("no checkpoint in model_dir {} (train first, or point --model_dir at a directory with "
                            "model.ckpt-* files)".format(model_dir))
        log("No checkpoint in {}: running with freshly initialised weights".format(model_dir))
        return None
    info = inspect(path)
    check_fits(info, arch, num_classes)
    describe = describe_model(arch, num_classes, use_final_conv)
    report = restore_model(model, info, arch, describe)
    global_step.assign(info.step or 0)  # evaluation summaries land at the checkpoint's step
    log(report.describe())
    if ema:
        use_averages(model, info, arch, describe, log)
    return info


def finetune_from(model, path, arch, num_classes, *, use_final_conv=False, log=print):
    """The original's --finetune_checkpoint: the trainable variables from `path` (BN moving statistics and the
    optimizer start fresh). A checkpoint with another class count gives everything but the classifier, which keeps
    its initialisation (transfer learning). Returns the checkpoint prefix read."""
    prefix = find_checkpoint(path, "--finetune_checkpoint", warn=log)
    info = inspect(prefix)
    check_fits(info, arch, num_classes, allow_other_classes=True)
    new_classifier = info.num_classes is not None and info.num_classes != num_classes
    report = restore_model(model, info, arch, describe_model(arch, num_classes, use_final_conv),
                           trainable_only=True, skip_classifier=new_classifier)
    if new_classifier:
        log("Fine-tuning from {} to {} classes: the classifier is initialised fresh, every other trainable variable "
            "comes from the checkpoint".format(info.num_classes, num_classes))
    log(report.describe())
    return prefix


def restore_or_initialise(model, optimizer, global_step, model_dir, arch, num_classes, *, use_final_conv=False,
                          finetune_checkpoint=None, averages=None, log=print):
    """Training: resume from model_dir's newest complete checkpoint (weights, optimizer state, step, and the EMA of
    `averages` when it has one), else fine-tune from `finetune_checkpoint`, else keep the fresh weights. Averages
    not read from the checkpoint start as copies of the weights. Returns the fine-tuning prefix read, or None.
    Which settings and training state the run continues is decided before, by runtime/settings.py, which says so."""
    latest = latest_checkpoint(model_dir, warn=log)
    if latest is None:
        finetuned = None
        if finetune_checkpoint:
            finetuned = finetune_from(model, finetune_checkpoint, arch, num_classes, use_final_conv=use_final_conv,
                                      log=log)
        if averages is not None:
            averages.reset()
        return finetuned
    info = inspect(latest)
    check_fits(info, arch, num_classes)
    report = restore_training(model, optimizer, global_step, info, arch,
                              describe_model(arch, num_classes, use_final_conv), averages)
    log(report.describe() + " with the optimizer state")
    if averages is not None and not info.has_weight_averages:
        averages.reset()
    return None


# ---------------------------------------------------------------- saving

def metadata(arch, num_classes, image_size, use_final_conv, input_normalized, training_state=None):
    """The checkpoint_metadata record; `training_state`: {RunConfig field: value} of the training flags of the run
    that writes it, so a resume continues with the same QAT and EMA settings (runtime/settings.training_state)."""
    record = {"version": METADATA_VERSION, "arch": arch, "num_classes": int(num_classes),
              "image_size": int(image_size) if image_size else None, "use_final_conv": bool(use_final_conv),
              "input_normalized": bool(input_normalized)}
    if training_state:
        record["training"] = dict(training_state)
    return record


def write(prefix, entries, meta=None):
    """Write {key: variable or array} and the metadata (if any) as a checkpoint at `prefix`, atomically: the shards
    are written under `<prefix>_temp/`, then renamed into place data first and index last, so a killed save never
    leaves a complete-looking checkpoint. The state file is not touched (CheckpointWriter does that)."""
    temporary = prefix + "_temp"
    shutil.rmtree(temporary, ignore_errors=True)
    os.makedirs(temporary)
    keys = sorted(entries)
    with tf.device("/cpu:0"):
        tensors = [tf.convert_to_tensor(entries[key]) for key in keys]
        if meta is not None:
            keys.append(METADATA_KEY)
            tensors.append(tf.constant(json.dumps(meta, sort_keys=True)))
        tf.raw_ops.SaveV2(prefix=os.path.join(temporary, "part"), tensor_names=keys,
                          shape_and_slices=[""] * len(keys), tensors=tensors)
    written = os.listdir(temporary)
    for name in sorted(written, key=lambda n: n.endswith(".index")):
        source = os.path.join(temporary, name)
        with open(source, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(source, prefix + name[len("part"):])
    shutil.rmtree(temporary, ignore_errors=True)
    return prefix


def write_state_file(directory, names, timestamps=None, last_preserved=None):
    """The `checkpoint` state file (a CheckpointState text proto; the last name is the latest), replaced atomically.
    Names are basenames, so the directory can be moved. Written here because TF's update_checkpoint_state is
    deprecated and says so on stderr."""
    lines = [f"model_checkpoint_path: {json.dumps(names[-1])}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(name)}" for name in names]
    lines += [f"all_model_checkpoint_timestamps: {stamp!r}" for stamp in timestamps or ()]
    if last_preserved is not None:
        lines.append(f"last_preserved_timestamp: {last_preserved!r}")
    path = os.path.join(directory, "checkpoint")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".tmp", path)


def remove_save_debris(directory):
    """A save killed midway leaves `<prefix>-N_temp/` (never read, but large)."""
    for debris in glob.glob(os.path.join(glob.escape(directory), CHECKPOINT_PREFIX + "-*_temp")):
        shutil.rmtree(debris, ignore_errors=True)


class CheckpointWriter:
    """Saves the training state as `<model_dir>/model.ckpt-<step>` and keeps the `checkpoint` state file: the
    newest `max_to_keep`, plus one every `keep_every_hours` (tf.train.CheckpointManager's rule)."""

    def __init__(self, directory, entries, meta, max_to_keep=5, keep_every_hours=3.0):
        self.directory = directory
        self.entries = entries
        self.meta = meta
        self.max_to_keep = max_to_keep
        self.keep_every_seconds = keep_every_hours * 3600.0
        self._kept = []            # [(basename, timestamp)], oldest first
        self._last_preserved = time.time()
        state = tf.compat.v1.train.get_checkpoint_state(directory) if os.path.isdir(directory) else None
        if state is not None:
            stamps = list(state.all_model_checkpoint_timestamps) or [time.time()] * len(
                state.all_model_checkpoint_paths)
            self._kept = [(os.path.basename(p), t) for p, t in zip(state.all_model_checkpoint_paths, stamps)]
            self._last_preserved = state.last_preserved_timestamp or self._last_preserved

    @property
    def latest_checkpoint(self):
        return os.path.join(self.directory, self._kept[-1][0]) if self._kept else None

    def save(self, step):
        name = f"{CHECKPOINT_PREFIX}-{step}"
        prefix = os.path.join(self.directory, name)
        try:
            os.makedirs(self.directory, exist_ok=True)
            write(prefix, self.entries, dict(self.meta, step=int(step)))
        except (OSError, tf.errors.OpError) as error:
            shutil.rmtree(prefix + "_temp", ignore_errors=True)
            if not any(kept == name for kept, _ in self._kept):
                for path in glob.glob(glob.escape(prefix) + ".*"):
                    os.remove(path)
            raise UserError(f"cannot write checkpoint {prefix} ({_first_line(error)}); the last complete "
                            f"checkpoint is kept: {self.latest_checkpoint}") from None
        self._kept = [(kept, stamp) for kept, stamp in self._kept if kept != name] + [(name, time.time())]
        while len(self._kept) > self.max_to_keep:
            old, stamp = self._kept.pop(0)
            if stamp - self._last_preserved >= self.keep_every_seconds:
                self._last_preserved = stamp  # kept on disk, no longer listed
                continue
            for path in glob.glob(os.path.join(glob.escape(self.directory), glob.escape(old)) + ".*"):
                os.remove(path)
        write_state_file(self.directory, [kept for kept, _ in self._kept], [stamp for _, stamp in self._kept],
                         self._last_preserved)
        return prefix
