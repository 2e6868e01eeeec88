"""What each mode restores, from which checkpoint, and what it says: evaluate / predict / inference_benchmark
(restore_for_inference), --finetune_checkpoint (finetune_from), training (restore_or_initialise), and the one-line
refusals naming the flag to change (check_fits, require_averages). Reading and writing the files is
model/checkpoint's."""
import os

from model import checkpoint
from model.resnet import ARCHITECTURES
from utils.errors import UserError, printable


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


def require_averages(info):
    """UserError unless checkpoint `info` has EMA weights (--use_ema_weights asked for them)."""
    if not info.has_weight_averages:
        raise UserError(f"checkpoint {info.path} has no EMA weights (train with --moving_average_decay to get "
                        "them), so --use_ema_weights cannot be used with it")


def note_unused_averages(info, log=print):
    """Say that the raw weights are used when the checkpoint also holds EMA weights (its description, "with EMA
    weights", would otherwise read as if they were used)."""
    if info.has_weight_averages:
        log(f"Using the raw weights of {info.path}; it also holds EMA weights, which --use_ema_weights would use")


def no_checkpoint(model_dir):
    """The error of a mode that needs a checkpoint in a model_dir that has none: a relative one also absolute (the
    directory it was taken relative to may be the wrong one). A SavedModel given as model_dir is said to be one,
    with the tool that serves it and the checkpoint it records it was exported from."""
    where = model_dir if os.path.isabs(model_dir) else "{} ({})".format(model_dir, os.path.abspath(model_dir))
    from model.export import as_export
    exported = as_export(model_dir)
    if exported is not None:
        origin = ", or give --model_dir the directory of the checkpoint it was exported from, {}".format(
            exported.checkpoint_dir) if exported.checkpoint_dir else ""
        return UserError(printable(
            "model_dir {} is {}, not a training directory: serve it with python inference.py --model {} "
            "(--to-predict <images> for their classes, --data-dir <TFRecords> for its accuracy){}".format(
                where, exported.what, exported.saved_model, origin)))
    return UserError("no checkpoint in model_dir {} (train first, or point --model_dir at a directory with "
                     "model.ckpt-* files)".format(where))


def restore_for_inference(model, global_step, model_dir, arch, num_classes, *, resolved=None, use_final_conv=False,
                          required=True, ema=False, note_raw=True, note_unsettled=True, log=print):
    """Evaluate / predict / inference_benchmark: every variable of `model` from checkpoint `resolved` (the
    CheckpointInfo the run's settings were resolved from and its record names; a training in model_dir may have saved
    newer ones since, and its rotation deleted this one: its reader still reads it), by default model_dir's newest
    complete checkpoint (verified), `global_step` set to its step; returns its CheckpointInfo. `ema`: then the EMA
    weights over the raw ones (a UserError if it has none); else, with `note_raw`, a line saying the raw ones are used
    when it has EMA weights too; with `note_unsettled`, a WARNING when it was trained too few steps for its BN moving
    statistics to be its own. With no checkpoint: a UserError when `required` or `ema`, else None (fresh weights, said
    so)."""
    path = resolved.path if resolved is not None else checkpoint.latest_checkpoint(model_dir, warn=log)
    if path is None:
        if required or ema:
            raise no_checkpoint(model_dir)
        log("No checkpoint in {}: running with freshly initialised weights".format(model_dir))
        return None
    info = resolved if resolved is not None else checkpoint.inspect(path)
    check_fits(info, arch, num_classes)
    describe = checkpoint.describe_model(arch, num_classes, use_final_conv)
    report = checkpoint.restore_model(model, info, arch, describe)
    global_step.assign(info.step or 0)  # evaluation summaries land at the checkpoint's step
    log(report.describe())
    if ema:
        require_averages(info)
        checkpoint.use_averages(model, info, arch, describe, log)
    elif note_raw:
        note_unused_averages(info, log)
    unsettled = checkpoint.unsettled_statistics(info.step, f"checkpoint {path}") if note_unsettled else None
    for warning in (unsettled, checkpoint.divergence_warning(info.diverged, f"checkpoint {path}")):
        if warning:
            log(warning)
    return info


def finetune_from(model, path, arch, num_classes, *, use_final_conv=False, log=print):
    """The original's --finetune_checkpoint: the trainable variables from `path` (BN moving statistics and the
    optimizer start fresh). A checkpoint with another class count gives everything but the classifier, which keeps
    its initialisation (transfer learning). Returns the checkpoint prefix read."""
    prefix = checkpoint.find_checkpoint(path, "--finetune_checkpoint", warn=log)
    info = checkpoint.inspect(prefix)
    check_fits(info, arch, num_classes, allow_other_classes=True)
    new_classifier = info.num_classes is not None and info.num_classes != num_classes
    report = checkpoint.restore_model(model, info, arch, checkpoint.describe_model(arch, num_classes, use_final_conv),
                                      trainable_only=True, skip_classifier=new_classifier)
    if new_classifier:
        log("Fine-tuning from {} to {} classes: the classifier is initialised fresh, every other trainable variable "
            "comes from the checkpoint".format(info.num_classes, num_classes))
    log(report.describe())
    diverged = checkpoint.divergence_warning(info.diverged, f"--finetune_checkpoint {prefix}")
    if diverged:
        log(diverged)
    return prefix


def restore_or_initialise(model, optimizer, global_step, model_dir, arch, num_classes, *, use_final_conv=False,
                          finetune_checkpoint=None, averages=None, image_size=None, log=print):
    """Training: resume from model_dir's newest complete checkpoint (weights, optimizer state, step, and the EMA of
    `averages` when it has one), else fine-tune from `finetune_checkpoint`, else keep the fresh weights. Averages
    not read from the checkpoint start as copies of the weights. Returns the fine-tuning prefix read, or None.
    Which settings and training state the run continues is decided before, by runtime/settings.py, which says so."""
    latest = checkpoint.latest_checkpoint(model_dir, warn=log)
    if latest is None:
        # said, with the absolute path: a model_dir typed relative to the wrong directory starts a training anew
        log(printable("model_dir {} has no checkpoint, so this is a new training of {}, {} classes{}, from {}".format(
            os.path.abspath(model_dir), arch, num_classes, f", {image_size}x{image_size}" if image_size else "",
            f"--finetune_checkpoint {finetune_checkpoint}" if finetune_checkpoint else "freshly initialised weights")))
        finetuned = None
        if finetune_checkpoint:
            finetuned = finetune_from(model, finetune_checkpoint, arch, num_classes, use_final_conv=use_final_conv,
                                      log=log)
        if averages is not None:
            averages.reset()
        return finetuned
    info = checkpoint.inspect(latest)
    check_fits(info, arch, num_classes)
    report = checkpoint.restore_training(model, optimizer, global_step, info, arch,
                                         checkpoint.describe_model(arch, num_classes, use_final_conv), averages)
    log(report.describe() + " with the optimizer state")
    diverged = checkpoint.divergence_warning(info.diverged, f"checkpoint {latest}")
    if diverged:
        log(diverged)
    if averages is not None and not info.has_weight_averages:
        averages.reset()
    return None
