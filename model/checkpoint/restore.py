"""The checkpoint keys of a model and of its training state, and restoring them verified.

Every restore checks that each variable the model needs came from the checkpoint (one UserError naming the first
few that did not, and how many) before it assigns anything, and reports what it restored (RestoreReport).
The object format is read into an NHWC twin of the model (its keys follow the Keras layer order) and copied over
by variable path.
"""
import dataclasses

import numpy as np
import tensorflow as tf

from model import checkpoint_names
from model.checkpoint.read import (GLOBAL_STEP_KEY, SLOT_SUFFIX, CheckpointInfo, find_checkpoint,
                                   inspect, object_model, read_tensor, reader_of)
from model.layers.quantization import QuantizationConfig, is_quantization_variable
from model.resnet import averaged_variables, build_model
from utils.ema import EMA_SUFFIX
from utils.errors import UserError, first_line

LOSS_SCALE_KEYS = {"dynamic_scale": "loss_scale/current_loss_scale", "step_counter": "loss_scale/good_steps"}
OPTIMIZER_ITERATIONS_KEY = "Momentum/iterations"
_MAX_LISTED = 5


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
            text += "; trainable variables only (BN moving statistics start fresh, as the original's fine-tune{})" \
                .format(", and the raw weights, not its EMA weights" if self.info.has_weight_averages else "")
        if self.fresh:
            text += f"; {len(self.fresh)} initialised fresh: {_listing(self.fresh)}"
        return text


def _listing(items):
    items = list(items)
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f" ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else "")


def describe_model(arch, num_classes, use_final_conv=False):
    """How a refused restore names the model it was for."""
    return "this model (--arch {} --num_classes {}{})".format(
        arch, num_classes, " --use_final_conv" if use_final_conv else "")


# ---------------------------------------------------------------- the keys

def model_entries(model, arch):
    """{checkpoint key: model variable} for the named and tf1 formats."""
    entries = dict(checkpoint_names.tf1_variable_map(model, arch))
    entries.update({f"{arch}/{v.path}": v for v in model.variables if is_quantization_variable(v)})
    return entries


def _classifier_keys(arch):
    return {f"{arch}/output/dense/kernel", f"{arch}/output/dense/bias"}


def average_keys(model, arch):
    """{checkpoint key of an EMA: the model variable it averages} (utils/ema.py, resnet.averaged_variables)."""
    averaged = {id(v) for v in averaged_variables(model)}
    return {key + EMA_SUFFIX: variable for key, variable in model_entries(model, arch).items()
            if id(variable) in averaged}


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


# ---------------------------------------------------------------- verifying and assigning

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


def _assign(reader, pairs, path):
    """Read every value first, so a corrupt checkpoint assigns nothing."""
    values = [read_tensor(reader, key, path) for key, _ in pairs]
    for value, (_, variable) in zip(values, pairs):
        variable.assign(tf.cast(np.reshape(value, variable.shape), variable.dtype))


# ---------------------------------------------------------------- the object format

def _object_twin(info):
    """An NHWC float (or QAT, when the checkpoint has ranges) model with the structure that wrote `info`."""
    return build_model(info.arch, num_classes=info.num_classes, use_final_conv=info.use_final_conv,
                       input_normalized=bool(info.input_normalized),
                       quantization=QuantizationConfig() if info.has_quantization_ranges else None)


def _read_object_model(info, describe):
    """The twin of `info` holding the checkpoint's model variables, all of them (verified)."""
    twin = _object_twin(info)
    try:
        status = tf.train.Checkpoint(model=twin).read(info.path)
        status.expect_partial()  # optimizer and step are read by restore_training, not here
        status.assert_existing_objects_matched()
    except (ValueError, AssertionError, IndexError, tf.errors.OpError) as error:
        _refuse(info, [first_line(error)], describe)
    saved = object_model(reader_of(info)).variables
    if saved != len(twin.variables):
        _refuse(info, [f"it holds {saved} model variables, the model has {len(twin.variables)}"], describe)
    return twin


def _restore_object(model, info, describe, trainable_only, skip_classifier):
    source = {v.path: v for v in _read_object_model(info, describe).variables}
    pairs, fresh = [], []
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


# ---------------------------------------------------------------- restoring

def restore_model(model, info, arch, describe, *, trainable_only=False, skip_classifier=False):
    """Assign the model's variables from checkpoint `info`; UserError if any needed one is missing or mis-shaped.

    QAT range variables absent from a float checkpoint keep their initial values (a QAT fine-tune starts so).
    `trainable_only`: BN moving statistics keep theirs too (the original's --finetune_checkpoint).
    `skip_classifier`: the classifier keeps its fresh initialisation (fine-tuning to another class count).
    """
    if info.format == "object":
        return _restore_object(model, info, describe, trainable_only, skip_classifier)
    fresh = []
    reader = reader_of(info)
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


def load(model, path, arch, describe=None, **options):
    """find + inspect + restore_model for a prefix or directory; returns the RestoreReport."""
    info = inspect(find_checkpoint(path, "checkpoint"))
    return restore_model(model, info, arch, describe or f"{arch} ({len(model.variables)} variables)", **options)


def restore_training(model, optimizer, global_step, info, arch, describe, averages=None):
    """Resume: model, momentum slots and global step (the loss scale and Keras' iteration count when saved; the
    EMA when `averages` is given and the checkpoint has it)."""
    if info.format == "object":
        try:
            status = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=global_step).read(info.path)
            status.assert_existing_objects_matched()
            # Every object of the run matched; what the old tf.train.Checkpoint kept besides (its save_counter)
            # is not read, which TF would otherwise warn about when the status is deleted.
            status.expect_partial()
        except (ValueError, AssertionError, IndexError, tf.errors.OpError) as error:
            _refuse(info, [first_line(error) + " (checkpoints of earlier versions resume only with the NHWC "
                           "layout and the flags they were trained with)"], describe)
        return RestoreReport(info, len(model.variables), len(model.variables))
    if not info.has_optimizer_state:
        raise UserError(f"checkpoint {info.path} has no optimizer state (no */Momentum slots), so training cannot "
                        "resume from it; start a new --model_dir with --finetune_checkpoint to train from it")
    reader = reader_of(info)
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


# ---------------------------------------------------------------- the EMA weights

def load_averages(model, info, arch, describe):
    """Assign the checkpoint's EMA weights to the model's averaged variables (the raw values of the others, QAT
    ranges, stay); a UserError naming the missing ones when the checkpoint lacks any. Returns how many were
    assigned. The refusal in the terms of --use_ema_weights is require_averages' (runtime/checkpoints.py)."""
    reader = reader_of(info)
    wanted = average_keys(model, arch)
    _verify_shapes(info, reader.get_variable_to_shape_map(), wanted, (), describe)
    _assign(reader, list(wanted.items()), info.path)
    return len(wanted)


def use_averages(model, info, arch, describe, log=print):
    """load_averages, and the log line that says the model now holds the EMA weights (--use_ema_weights)."""
    log("Using the EMA weights of {} ({} averaged variables)".format(
        info.path, load_averages(model, info, arch, describe)))
