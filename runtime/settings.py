"""The one resolution of a run's settings: from the flags given, the checkpoint's metadata and the dataset's
manifest (docs/ORIGINAL.md#modes, docs/RELIABILITY.md#one-resolution-of-a-runs-settings).

Rules, the same for every tool:
- A setting the checkpoint records (arch, classes, image size, classifier form, and for a resume the QAT and EMA
  settings) and the flags leave at their default is taken from the checkpoint, and the log says so.
- A flag given explicitly that contradicts the checkpoint is refused in one line naming both.
- Training state that a resume may add but not silently drop: `--quantize` and `--moving_average_decay` may start
  on a checkpoint without QAT ranges or EMA weights (said so); a checkpoint that has them resumes with them unless
  the flag is given to drop them (`--moving_average_decay 0`, warned). A resume in another precision than the
  checkpoint's (`--amp` or not), at another number of images per step, on a train split of another size, with
  other schedule flags or other recipe flags (RECIPE_FLAGS) is said, not refused.
- A flag given that the mode leaves unused (`--export_dir` in `train`, the QAT flags in `evaluate`, ...) is said.
- Where the run writes (`--results_dir`, a training run's `--model_dir`, an exporting run's `--export_dir`) must
  be a directory it can create or write, checked before any work (utils/output_paths.py).
- The dataset's manifest (utils/dataset_manifest.py) must be complete and its labels must fit the classifier.
- A benchmark on synthetic data feeds one image size: `--image_size` given alone sets it, and a
  `--synthetic_data_size` that disagrees with a given `--image_size` is refused; a run that reads `--data_dir`
  says that it leaves a given `--synthetic_data_size` unused.

`parse` (flags only, no TensorFlow) is what runtime.launch checks before starting workers; `resolve` (reads the
checkpoint, so it imports TensorFlow) is what main.py runs; `reconcile` is the rule the other tools
(export_frozen_graph.py, postprocess_ckpt.py) apply with their own flag names.
"""

import dataclasses
import os
from typing import Any, Callable, Mapping

from runtime.config import EXTENSIONS, RunConfig, flag_of, given_flags, parse_cmdline
from utils.errors import UserError

INFERENCE_MODES = ("evaluate", "predict", "inference_benchmark")
TRAINING_MODES = ("train", "train_and_evaluate")
# The modes that run in one process on one device, as the original's.
SINGLE_PROCESS_MODES = ("inference_benchmark", "predict")
# The modes that write --export_dir's SavedModel, after their evaluation.
EXPORT_MODES = ("train_and_evaluate", "evaluate", "inference_benchmark")

# Settings a checkpoint fixes for every run that reads it: a given flag must agree.
MODEL_SETTINGS = ("arch", "num_classes", "image_size")
# Settings of the training a checkpoint records (metadata version 2): a resume continues the QAT and EMA ones, and
# says when it runs in another precision than `amp` records.
QAT_FLAGS = ("quantize", "symmetric", "use_qdq", "quant_delay")
TRAINING_STATE = QAT_FLAGS + ("moving_average_decay", "amp")
# The flags of the optimisation and its input augmentation: only a training step reads them.
OPTIMIZATION_FLAGS = ("run_iter", "lr_init", "lr_warmup_epochs", "cosine_lr", "momentum", "weight_decay",
                      "weight_init", "label_smoothing", "mixup", "cutmix", "mixup_switch_prob", "min_crop_area",
                      "augmenter_name", "raug_num_layers", "raug_magnitude", "grad_accum_steps",
                      "moving_average_decay", "static_loss_scale", "use_static_loss_scaling", "max_skipped_steps")


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What a run of main.py is: its resolved configuration and what it reads."""
    config: RunConfig
    checkpoint: Any = None              # model/checkpoint.CheckpointInfo restored from model_dir, or None
    finetune: Any = None                # CheckpointInfo of --finetune_checkpoint when this run fine-tunes from it
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # {split: utils/dataset_manifest.SplitFacts}
    adopted: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # {field: value} taken from a checkpoint
    lineage: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # a training run's lineage(), else {}

    def parameters(self):
        """The settings the PARAMETER log line records besides the flags: what was read, and from where, and the
        directory the run's relative paths (the flags as typed) are relative to."""
        record = {"working_directory": os.getcwd()}
        # (absolute, and where a link led, as the class names' line says them: the record is read elsewhere, later)
        for key, info in (("checkpoint", self.checkpoint), ("finetune_from", self.finetune)):
            if info is not None:  # (a fine-tune's settings come from finetune_from)
                record[key] = os.path.abspath(info.path)
                if os.path.realpath(info.path) != record[key]:
                    record[key + "_target"] = os.path.realpath(info.path)
        if self.checkpoint is not None and self.config.mode in TRAINING_MODES:
            # An extension the checkpoint's run used and this one leaves at its default (a resume given
            # --moving_average_decay 0) is recorded too: the flags in use alone would leave it out, unsaid.
            recorded = self.checkpoint.recorded_settings()
            for field in dataclasses.fields(self.config):
                value = getattr(self.config, field.name)
                if flag_of(field).group == EXTENSIONS and recorded.get(field.name, value) != value:
                    record[field.name] = value
        if self.adopted:
            record["settings_from_checkpoint"] = sorted(self.adopted)
        if self.lineage:
            record["training"] = dict(self.lineage)
        if self.config.mode == "predict":  # the file its "Class names:" line will name, or None
            record["class_names_file"] = class_names_file(self.config)
        if self.data.get("train") is not None and self.data["train"].files:
            # The digest a checkpoint records of the train files (training_state): utils/plot_log tells a moved
            # copy of the same data from other data by it.
            record["train_files"] = files_fingerprint(self.data["train"].files)
        return record


def class_names_candidates(labels_file, model_dir, data_dir):
    """The labels files predict takes its class names from, the first that names any: --labels_file alone when
    given, else labels.txt beside the checkpoints (a training copies its dataset's there), then --data_dir's."""
    if labels_file:
        return [labels_file]
    return [os.path.join(model_dir, "labels.txt")] + ([os.path.join(data_dir, "labels.txt")] if data_dir else [])


def class_names_file(config):
    """The absolute path of the labels file predict takes its class names from, or None (shown by number)."""
    from runtime.runner_utils import read_class_names
    for path in class_names_candidates(config.labels_file, config.model_dir, config.data_dir):
        try:
            if read_class_names(path) is None:
                continue
        except UserError:  # unreadable: predict's own line says why, and stops
            pass
        return os.path.abspath(path)
    return None


def lineage(config, info, resumes):
    """The `training` record of a run that trains into model_dir ({} for other modes): `session`, new for every run;
    `id`, the training's: new for a new training or a fine-tune, the checkpoint's on a resume (kept through resumes, and
    through copies, moves and links of model_dir); `resumes`, the session that wrote the checkpoint it resumes (None: a
    new training, or a checkpoint of before 2026-12-06, which records none). The checkpoints record `id` and `session`
    (runtime/runner.py), so the sessions of one training are found in a log whatever path reached its model_dir, and a
    fork (a copy of model_dir resumed beside the original) is another branch (utils/plot_log._sessions_continued_by,
    utils/logger.last_training_step). A resume of a checkpoint that records no id (before 2026-12-06) takes the id of
    that checkpoint's training from the checkpoint itself (checkpoint_training_id), so every session resuming it, or a
    copy of it, has the same one, and says so: `id_from`, the index file it was derived from."""
    import uuid
    if config.mode not in TRAINING_MODES:
        return {}
    recorded = (info.lineage or {}) if info is not None and resumes else {}
    derived = checkpoint_training_id(info.path) if resumes and not recorded.get("id") else None
    record = {"id": recorded.get("id") or derived or uuid.uuid4().hex, "session": uuid.uuid4().hex,
              "resumes": recorded.get("session")}
    if derived is not None:
        record["id_from"] = info.path + ".index"
    return record


def checkpoint_training_id(path):
    """The training id of the checkpoint at prefix `path` when it records none (written before 2026-12-06): a
    uuid5 of the SHA-256 of its .index file, which holds each variable's checksum, so the same checkpoint, or a copy
    of it, gives the same id. None when that file cannot be read."""
    import hashlib
    import uuid
    try:
        with open(path + ".index", "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None
    return uuid.uuid5(uuid.NAMESPACE_OID, "checkpoint index sha256 " + digest).hex


# The other flags of the training recipe a checkpoint records, so a resume that changes one says so.
RECIPE_FLAGS = ("weight_decay", "momentum", "label_smoothing", "mixup", "cutmix", "mixup_switch_prob",
                "augmenter_name", "raug_num_layers", "raug_magnitude", "min_crop_area", "amp_dtype",
                "static_loss_scale")


def training_state(config, replicas=1, train_images=None, length=None, workers=1, seen=None):
    """{name: value} of the training state a checkpoint records (model/checkpoint.metadata), so a resume
    continues it: the TRAINING_STATE fields, the images of one optimizer step and the processes (`workers`) that
    read them, the RECIPE_FLAGS, (`train_images`, None on synthetic data) the records of the train split, which
    count the run's epochs, (`length`, the run's runtime/inputs.TrainingLength) its learning-rate schedule and
    (`seen`, an images_seen_record) the images its training had seen at its first step."""
    state = dict({name: getattr(config, name) for name in TRAINING_STATE},
                 images_per_step=images_per_step(config, replicas), processes=int(workers),
                 recipe={name: getattr(config, name) for name in RECIPE_FLAGS}, data_stream=data_stream(config))
    if train_images is not None:
        state["train_images"] = int(train_images)
        if config.data_dir is not None:
            from runtime.runner_utils import list_filenames_in_dataset
            state["train_files"] = files_fingerprint(list_filenames_in_dataset(config.data_dir, "train"))
    if length is not None:
        state["schedule"] = schedule_record(config, length.num_steps, length.num_decay_steps, length.steps_per_epoch)
    if seen is not None:
        state["images_seen"] = dict(seen)
    if config.finetune_checkpoint:  # the fine-tune this run started, or continues (resolve adopts it on a resume)
        state["finetune_checkpoint"] = os.path.abspath(config.finetune_checkpoint)
    return state


def images_seen_record(info, step):
    """The `images_seen` record of a training run that starts at `step` from checkpoint `info` (None: no checkpoint,
    a new run or a fine-tune, which has seen no image yet): {"step": step, "images": the images its training had
    seen by then}, from which on the checkpoints it writes count images_per_step a step (images_seen). None when
    `info` does not record the images it had seen (checkpoints before 2026-12-06, and the resumes of them): the
    images of the steps before cannot be known once a resume may have changed the images per step."""
    if info is None:
        return {"step": int(step), "images": 0}
    images = images_seen(info, step)
    return None if images is None else {"step": int(step), "images": int(images)}


def images_seen(info, step=None):
    """The images the training of checkpoint `info` had seen by `step` (by default its own step), counting
    images_per_step a step from its `images_seen` record on; None where it records no such count, or `step` is
    before it."""
    recorded = info.recorded_settings()
    seen, per_step = recorded.get("images_seen"), recorded.get("images_per_step")
    step = info.step if step is None else step
    if seen is None or per_step is None or step is None or step < seen["step"]:
        return None
    return seen["images"] + (step - seen["step"]) * per_step


def data_stream(config):
    """What a training's data stream depends on besides the files, as a checkpoint records it: --seed and the
    input that reads it ("dali", "tf.data" or "synthetic")."""
    return {"seed": config.seed, "input": "synthetic" if config.uses_synthetic_data else
            "dali" if config.uses_dali else "tf.data"}


# The flags that shape the learning rate at each step, besides the images per step and the train split's size.
SCHEDULE_FLAGS = ("lr_init", "lr_warmup_epochs", "cosine_lr", "num_iter", "iter_unit")


def schedule_record(config, num_steps, decay_steps, steps_per_epoch):
    """The learning-rate schedule of a run (utils/learning_rate.learning_rate_schedule's arguments but the batch),
    as a checkpoint records it."""
    return dict({name: getattr(config, name) for name in SCHEDULE_FLAGS}, num_steps=int(num_steps),
                decay_steps=int(decay_steps), steps_per_epoch=float(steps_per_epoch))


def learning_rate_at(schedule, images, step):
    """The learning rate of `schedule` (a schedule_record) at `step`, `images` per step: a float, or for a list of
    steps a NumPy array of their rates."""
    from utils.learning_rate import learning_rate_schedule
    rates = learning_rate_schedule(step, schedule["lr_init"], images, schedule["steps_per_epoch"],
                                   schedule["lr_warmup_epochs"], schedule["decay_steps"], schedule["cosine_lr"]).numpy()
    return rates if isinstance(step, (list, tuple)) else float(rates)


def images_per_step(config, replicas=1):
    """The images of one optimizer step: --batch_size on each of `replicas`, times --grad_accum_steps."""
    return config.batch_size * replicas * config.grad_accum_steps


# ---------------------------------------------------------------- flags

def check_mode_arguments(config):
    """The mode checks (docs/ORIGINAL.md#modes) that need no TensorFlow, so bad input fails fast and writes
    nothing."""
    if config.mode == "predict":
        if config.to_predict is None:
            raise UserError("No data to predict on.")
        if not os.path.exists(config.to_predict) and not os.path.islink(config.to_predict):
            raise UserError("--to_predict {} does not exist".format(config.to_predict))
    from runtime.runner_utils import require_data_dir
    if config.mode in TRAINING_MODES:
        require_data_dir(config.data_dir, "train")
    if config.mode == "evaluate":
        require_data_dir(config.data_dir, "validation")
    if config.data_dir is not None and not os.path.isdir(config.data_dir):
        raise UserError("--data_dir {} does not exist or is not a directory".format(config.data_dir))
    from utils.output_paths import check_output_dir, check_output_file, check_tensorflow_path, check_unexpanded_home
    # (model_dir is results_dir when not given: the checkpoints' path is named by the flag the user gave; a benchmark
    # reads a checkpoint only when there is one)
    if config.mode not in ("training_benchmark", "inference_benchmark") or os.path.isfile(
            os.path.join(config.model_dir, "checkpoint")):
        check_tensorflow_path("--model_dir" if config.model_dir != config.results_dir else
                              "--results_dir (model_dir)", config.model_dir)
    check_tensorflow_path("--export_dir", config.export_dir)
    check_tensorflow_path("--finetune_checkpoint", config.finetune_checkpoint)
    check_output_dir("--results_dir", config.results_dir, default=RunConfig.results_dir)  # the log
    if os.path.dirname(config.log_filename):  # (an absolute path, or one into a sub-directory, goes elsewhere)
        check_unexpanded_home("--log_filename", config.log_filename)  # joined to --results_dir it is no longer first
        check_output_file("--log_filename", config.log_path)
    if config.mode in TRAINING_MODES:
        check_output_dir("--model_dir", config.model_dir)
    elif config.model_dir and os.path.exists(config.model_dir) and not os.path.isdir(config.model_dir):
        raise UserError("--model_dir {} exists and is not a directory".format(config.model_dir))
    if config.model_dir and not os.path.exists(config.model_dir) and os.path.isfile(config.model_dir + ".index"):
        directory = os.path.dirname(config.model_dir) or "."
        raise UserError("--model_dir {} is a checkpoint, not a directory: --model_dir takes the directory ({}), whose "
                        "newest complete checkpoint every mode uses{}".format(
                            config.model_dir, directory,
                            "; to use this one, link its files into a directory of their own (mkdir D && ln -s {}.* "
                            "{} D/) and pass --model_dir D, or export it with export_frozen_graph.py --checkpoint"
                            .format(os.path.abspath(config.model_dir),
                                    os.path.abspath(os.path.join(directory, "labels.txt")))
                            if config.mode not in TRAINING_MODES else ""))
    if config.export_dir and config.mode in EXPORT_MODES:
        check_output_dir("--export_dir", config.export_dir)
    if config.finetune_checkpoint and not (os.path.exists(config.finetune_checkpoint)
                                           or os.path.exists(config.finetune_checkpoint + ".index")):
        raise UserError("--finetune_checkpoint {} does not exist".format(config.finetune_checkpoint))


def check_single_process(config, processes):
    """The original's refusal of an inference mode in several processes (or on several devices), with how to run it
    (the original's sentence named no way out, and spoke of GPUs on a CPU too)."""
    if processes > 1 and config.mode in SINGLE_PROCESS_MODES:
        raise UserError("Only single GPU inference is implemented. (--mode {} runs in one process on one device: run "
                        "main.py directly, without runtime.launch, horovodrun, mpirun, srun or "
                        "RN50_ENGINE=mirrored)".format(config.mode))


def parse(argv=None):
    """(argparse namespace, RunConfig, given flag destinations) of main.py's command line, checked without
    TensorFlow."""
    args = parse_cmdline(argv)
    config = RunConfig.from_args(args)
    check_mode_arguments(config)
    return args, config, frozenset(given_flags(argv))


# ---------------------------------------------------------------- the rule

def contradiction(flag, value, source, recorded_flag, recorded):
    if isinstance(value, bool) and isinstance(recorded, bool):  # a switch: "--symmetric ..., trained without it"
        return UserError("{} contradicts {}, trained {} {} (omit the flag to use the checkpoint's)".format(
            flag if value else flag + " False", source, "with" if recorded else "without", recorded_flag))
    return UserError("{} {} contradicts {}, trained with {} {} (omit the flag to use the checkpoint's)".format(
        flag, _shown(value), source, recorded_flag, _shown(recorded)))


def _shown(value):
    return "{:g}".format(value) if isinstance(value, float) else str(value)


def _flag_value(flag, value):
    """`--flag value`, or for a switch `--flag` / `no --flag`."""
    if isinstance(value, bool):
        return flag if value else "no " + flag
    return "{} {}".format(flag, _shown(value))


def reconcile(current: Mapping[str, Any], recorded: Mapping[str, Any], given, flags: Mapping[str, str], source,
              log: Callable[[str], None] = print, compatible: Callable[[str, Any, Any], bool] = lambda *_: False,
              unrecorded: Mapping[str, str] = None):
    """The changes {name: value} that make `current` agree with what `source` (a checkpoint) `recorded`: a name not
    in `given` takes the recorded value (logged as `Using <flag> <value> from <source>`); a given one that differs
    is a UserError naming both, unless `compatible(name, given value, recorded value)`. `flags` maps each name to
    its flag; names missing from `recorded` are left as they are, and those of them in `unrecorded` ({name: why the
    source does not record it}, CheckpointInfo.unrecorded_settings) and not given are warned about: the run
    assumes the flag's default for a setting its checkpoint's training may have had otherwise."""
    assumed = [name for name in flags if name in (unrecorded or {}) and name not in recorded and name not in given]
    if assumed:
        log("WARNING: {} does not record {} ({}): this run assumes {}; pass {} if it was trained otherwise".format(
            source, " or ".join(flags[name] for name in assumed), unrecorded[assumed[0]],
            ", ".join(_flag_value(flags[name], current[name]) for name in assumed),
            " and ".join(flags[name] for name in assumed)))
    changes = {}
    for name, flag in flags.items():
        if name not in recorded or recorded[name] == current[name]:
            continue
        if name in given:
            if compatible(name, current[name], recorded[name]):
                continue
            raise contradiction(flag, current[name], source, flag, recorded[name])
        changes[name] = recorded[name]
        if isinstance(recorded[name], bool):
            log("Using {} from {}".format(flag, source) if recorded[name] else
                "Leaving out {}: {} was trained without it".format(flag, source))
        else:
            log("Using {} {} from {}".format(flag, _shown(recorded[name]), source))
    return changes


# ---------------------------------------------------------------- main.py

def _synthetic_size_changes(config, given, log):
    """--synthetic_data_size against --image_size: a benchmark on synthetic data runs at one size, which either
    flag may give; a run that reads --data_dir runs at --image_size."""
    both_given = "image_size" in given and "synthetic_data_size" in given
    if not config.uses_synthetic_data:
        return {}  # the flag is unused: _note_unused_synthetic_size says so once the size is resolved
    if both_given and config.image_size != config.synthetic_data_size:
        raise UserError("--image_size {} and --synthetic_data_size {} disagree: a benchmark on synthetic data runs "
                        "at one size (give one of them)".format(config.image_size, config.synthetic_data_size))
    if "image_size" in given and config.image_size != config.synthetic_data_size:
        log("Using --synthetic_data_size {0} from --image_size {0}".format(config.image_size))
        return {"synthetic_data_size": config.image_size}
    return {}


def _image_size_from_synthetic_size(config, given, log):
    """The other direction of _synthetic_size_changes: a synthetic benchmark given only --synthetic_data_size builds
    its model at that size, so that the model, its export and the PARAMETER record agree. Only for a run that does
    not use a checkpoint's model (the caller's condition): there the checkpoint gives the size."""
    if config.uses_synthetic_data and "synthetic_data_size" in given and "image_size" not in given and \
            config.image_size != config.synthetic_data_size:
        log("Using --image_size {0} from --synthetic_data_size {0}".format(config.synthetic_data_size))
        return {"image_size": config.synthetic_data_size}
    return {}


def _note_unused_synthetic_size(config, given, log):
    if "synthetic_data_size" in given and not config.uses_synthetic_data:
        log("Note: --synthetic_data_size {} is not used: this run reads {}".format(
            config.synthetic_data_size, "its images from --data_dir at --image_size {}".format(config.image_size)
            if config.data_dir is not None else "no synthetic data"))


def _check_benchmark_size(config, info, given, log):
    """The size a synthetic benchmark times against the model's: a checkpoint's model at another size than it was
    trained at is timed as asked (the model takes any size) and said; but a benchmark that exports (--export_dir)
    times and exports one model, built at one size, which must be the model's (the checkpoint's, else --image_size).
    `given`: the flags typed, of which the error names the one that gave the size."""
    if not config.uses_synthetic_data:
        return
    trained = info.recorded_settings().get("image_size") if info is not None else None
    model_size = trained or config.image_size
    if config.mode in EXPORT_MODES and config.export_dir and config.synthetic_data_size != model_size:
        flag = "--synthetic_data_size" if "synthetic_data_size" in given else "--image_size"
        raise UserError("{} {} but --export_dir exports the model at {}x{} ({}): a benchmark that exports times the "
                        "model it exports (time another size without --export_dir)".format(
                            flag, config.synthetic_data_size, model_size, model_size,
                            "the size checkpoint {} was trained at".format(info.path) if trained else "--image_size"))
    if trained is not None and config.synthetic_data_size != trained:
        log("Note: this benchmark times synthetic {0}x{0} images; checkpoint {1} was trained at {2}x{2} (the model "
            "takes any size)".format(config.synthetic_data_size, info.path, trained))


# Flags that only some modes use: (names, whether this run uses them, why not). A run given one it leaves unused
# says so, where the original ignored them without a word.
_MODE_FLAGS = (
    (("export_dir",), lambda c: c.mode in EXPORT_MODES,
     lambda c: "--mode {} exports nothing (--mode {}, {} and {} write the SavedModel after their evaluation)".format(
         c.mode, *EXPORT_MODES)),
    # (evaluate uses it without an export too: it refuses a checkpoint without EMA weights, whose accuracy is
    # reported beside the raw weights')
    (("use_ema_weights",), lambda c: c.mode in ("predict", "inference_benchmark", "evaluate") or
     (c.mode in EXPORT_MODES and bool(c.export_dir)),
     lambda c: "it picks the weights of predict, inference_benchmark and an --export_dir export, and this run has "
               "none of them{}".format(" (an evaluation reports both the raw and the EMA weights' accuracy)"
                                       if c.mode in EXPORT_MODES else "")),
    (("to_predict",), lambda c: c.mode == "predict", lambda c: "only --mode predict reads it"),
    (("labels_file",), lambda c: c.mode == "predict",
     lambda c: "only --mode predict reads it{}".format(
         " (an --export_dir export records model_dir's labels.txt)" if c.mode in EXPORT_MODES and c.export_dir
         else "")),
    (("finetune_checkpoint",), lambda c: c.mode in TRAINING_MODES, lambda c: "only a training mode fine-tunes"),
    (("dali", "data_idx_dir"), lambda c: c.mode != "predict", lambda c: "predict reads image files, not the dataset"),
    (("data_idx_dir",), lambda c: c.dali or c.mode == "predict",
     lambda c: "without --dali the TFRecords are read through tf.data"),
    (OPTIMIZATION_FLAGS, lambda c: c.mode in TRAINING_MODES + ("training_benchmark",),
     lambda c: "--mode {} trains nothing".format(c.mode)),
    (("checkpoint_interval",), lambda c: c.mode in TRAINING_MODES,
     lambda c: "--mode {} writes no checkpoint".format(c.mode)),
    (("num_iter", "iter_unit", "warmup_steps", "display_every", "seed"), lambda c: c.mode != "predict",
     lambda c: "--mode predict runs each --to_predict image once, untimed, and draws nothing at random"),
    # (the input pipeline's augmentation; mixup and CutMix happen in the train step, on synthetic batches too)
    (("augmenter_name", "raug_num_layers", "raug_magnitude", "min_crop_area"),
     lambda c: not (c.mode == "training_benchmark" and c.uses_synthetic_data),
     lambda c: "synthetic images are not augmented (this benchmark reads no --data_dir)"),
    (("gpu_id", "gpu_memory_fraction"), lambda c: not c.cpu, lambda c: "--cpu runs on no GPU"),
    (QAT_FLAGS, lambda c: c.mode not in INFERENCE_MODES,
     lambda c: "--mode {} runs the float model, as the original (export_frozen_graph.py --quantize exports the "
               "quantised graph)".format(c.mode)),
)


def _note_unused_flags(config, given, log, info=None, platform=None, engine=None):
    """One `Note:` line for each flag given that this run's mode leaves unused (_MODE_FLAGS), and for the GPU and
    loss-scaling flags that this process's devices and precision leave unused (`platform`: utils/devices.Platform,
    `engine`: utils/engines.Engine; not checked when None)."""
    checks = [(names, why(config)) for names, used, why in _MODE_FLAGS if not used(config)
              and not (names == QAT_FLAGS and info is not None and info.has_quantization_ranges)]
    # (a checkpoint with quantisation ranges: resolve's line on them says it)
    if platform is not None and not config.cpu:
        checks += _unused_device_flags(config, platform, engine)
    if platform is not None and config.mode in TRAINING_MODES + ("training_benchmark",):
        checks += _unused_loss_scaling_flags(config, platform)
    for names, why in checks:
        # (a switch given as off is not a setting left unused; a 0 is: --weight_decay 0 to evaluate)
        unused = ["--" + name for name in names
                  if name in given and getattr(config, name) is not None and getattr(config, name) is not False]
        if unused:
            listed = " and ".join([", ".join(unused[:-1]), unused[-1]] if len(unused) > 1 else unused)
            log("Note: {} {} not used: {}".format(listed, "is" if len(unused) == 1 else "are", why))


def _unused_device_flags(config, platform, engine):
    """[(names, why)] of --gpu_id and --gpu_memory_fraction where this process's devices leave them unused (the
    original ignored them without a word): no GPU at all; a memory fraction without DALI (the memory then grows as
    needed); a GPU id where the engine picks the GPUs."""
    if not platform.gpu:
        return [(("gpu_id", "gpu_memory_fraction"), "no GPU is visible to this process")]
    checks = []
    if not config.uses_dali:
        checks.append((("gpu_memory_fraction",), "only a --dali run limits the GPU's memory (TensorFlow's grows as "
                                                 "needed otherwise)"))
    if engine is not None and engine.name == "mirrored":
        checks.append((("gpu_id",), "RN50_ENGINE=mirrored trains on every visible GPU"))
    elif engine is not None and engine.multi_process:
        checks.append((("gpu_id",), "each worker takes the GPU of its local rank"))
    return checks


def _unused_loss_scaling_flags(config, platform):
    """[(names, why)] of --static_loss_scale and --max_skipped_steps where the precision the run resolves to on
    `platform` leaves them unused (the original ignored a static scale without AMP without a word)."""
    from utils.precision import Precision
    precision = Precision.resolve(config.amp, config.static_loss_scale, platform, config.amp_dtype)
    checks = []
    if precision.loss_scaling != "static":
        checks.append((("static_loss_scale",), "only --amp scales the loss, and this run computes in float32"))
    if precision.loss_scaling != "dynamic":
        checks.append((("max_skipped_steps",), "only dynamic loss scaling (--amp in float16 without "
                                               "--static_loss_scale) skips steps, and this run {}".format(
                                                   "scales statically" if precision.loss_scaling == "static" else
                                                   "computes in {} without loss scaling".format(
                                                       precision.policy or "float32"))))
    return checks


def _checkpoint_read_by(config, log):
    """(CheckpointInfo of model_dir's newest complete checkpoint, or None; whether this run resumes it)."""
    from model import checkpoint
    path = checkpoint.latest_checkpoint(config.model_dir, warn=log)
    if path is None:
        return None, False
    info = checkpoint.inspect(path)
    if config.mode not in INFERENCE_MODES:
        # Only an inference mode restores through this reader (Runner.restore_for_inference); held for a whole
        # training it would keep a rotated-out checkpoint's disk space.
        info = dataclasses.replace(info, reader=None)
    return info, config.mode in TRAINING_MODES


def _model_changes(config, info, given, log):
    source = "checkpoint {}".format(info.path)
    recorded = info.recorded_settings()
    flags = {name: "--" + name for name in MODEL_SETTINGS + ("use_final_conv",)}
    synthetic = config.uses_synthetic_data
    if synthetic and "image_size" in recorded:
        # Synthetic images are --synthetic_data_size: the checkpoint's size unless that flag asks for another.
        recorded = dict(recorded, synthetic_data_size=recorded["image_size"])
        flags["synthetic_data_size"] = "--synthetic_data_size"
    # A dense classifier loads into a 1x1-conv one and back (the same numbers): --use_final_conv is a choice; so is
    # the size of synthetic images, which any size of the fully convolutional model takes.
    free = ("use_final_conv", "synthetic_data_size", "image_size") if synthetic else ("use_final_conv",)
    changes = reconcile(dataclasses.asdict(config), recorded, given, flags, source, log,
                        compatible=lambda name, *_: name in free,
                        unrecorded={} if synthetic else info.unrecorded_settings())
    if "use_final_conv" in given and recorded.get("use_final_conv", config.use_final_conv) != config.use_final_conv:
        log(classifier_form_note(source, recorded["use_final_conv"], config.use_final_conv,
                                 writes_checkpoints=config.mode in TRAINING_MODES))
    return changes


def classifier_form_note(source: str, recorded_final_conv: bool, final_conv: bool,
                         writes_checkpoints: bool = False) -> str:
    """The line for a checkpoint (`source`) whose classifier form, dense or 1x1 conv, is not the one a run builds:
    the weights load into either (the same numbers), so it is said, not refused. main.py's (_model_changes) and
    export_frozen_graph.py's; `writes_checkpoints`: a training run's."""
    forms = ("a dense layer", "a 1x1 conv")
    return "Note: {} holds its classifier as {}; this run builds it as {} ({}), from the same weights{}".format(
        source, forms[recorded_final_conv], forms[final_conv],
        "--use_final_conv" if final_conv else "without --use_final_conv",
        ", and the checkpoints it writes hold that form" if writes_checkpoints else "")


def _finetune_on_resume(config, info, log):
    """A resume's --finetune_checkpoint, which is read only when a run starts: the same as the fine-tune the
    checkpoint's run started (the recipes' "same command" after an interrupt) is said as such; another one, or one
    the checkpoint does not record (before 2026-12-05), is warned about as ignored. Without the flag a recorded
    fine-tune is adopted, so the run's record and its checkpoints keep naming it."""
    recorded = info.recorded_settings().get("finetune_checkpoint")
    given = config.finetune_checkpoint
    if given and _same_checkpoint(given, recorded):
        log("Continuing the fine-tune of {} from checkpoint {} (--finetune_checkpoint is read only when a run "
            "starts)".format(given, info.path))
    elif given:
        log("WARNING: --finetune_checkpoint {} is ignored: model_dir {} already has checkpoint {}{}, and training "
            "resumes from it (use a new --model_dir to fine-tune)".format(
                given, config.model_dir, info.path,
                ", fine-tuned from {}".format(recorded) if recorded else ""))
    # The record and the checkpoints keep naming the source the training was fine-tuned from, never a flag ignored.
    return {"finetune_checkpoint": recorded} if recorded != config.finetune_checkpoint else {}


def _same_checkpoint(given, recorded):
    """Whether --finetune_checkpoint `given` names the checkpoint `recorded` (an absolute path, as a fine-tune
    records its flag): the same path, or a directory and the checkpoint of it that the fine-tune read."""
    if not recorded:
        return False
    if os.path.abspath(given) == recorded:
        return True
    from model import checkpoint
    quiet = lambda *_: None  # noqa: E731 (the fine-tune said what it found there)
    try:
        return os.path.realpath(checkpoint.find_checkpoint(given, "", warn=quiet)) == \
            os.path.realpath(checkpoint.find_checkpoint(recorded, "", warn=quiet))
    except UserError:  # either one gone or damaged since: not known to be the same
        return False


def _training_state_changes(config, info, given, log, note):
    """What a resume continues of the QAT and EMA state, and the one line for each choice; `note` takes the lines on
    what changes from the checkpoint's run (mixed precision, the EMA kept or started), which a resume with no step
    left to train does not print."""
    source = "checkpoint {}".format(info.path)
    recorded = info.recorded_settings()
    changes = {}
    if recorded.get("quantize") and not config.quantize:
        changes["quantize"] = True
        log("Using --quantize from {}: it holds quantisation ranges, which this run keeps training".format(source))
    elif config.quantize and not info.has_quantization_ranges:
        log("Checkpoint {} has no quantisation ranges: quantisation-aware training starts at its step {} with fresh "
            "ranges{}".format(info.path, info.step, ", its first {} step(s) unquantised (--quant_delay counts QAT "
                              "steps, from here, not the global step)".format(config.quant_delay)
                              if config.quant_delay else ""))
    if changes.get("quantize", config.quantize) and recorded.get("quantize"):
        # The grid QAT ranges were trained on binds a resume; a float checkpoint's (unused) QAT flags do not.
        changes.update(reconcile(dataclasses.asdict(config), recorded, given,
                                 {name: "--" + name for name in QAT_FLAGS[1:]}, source,
                                 log, unrecorded=info.unrecorded_settings()))
    decay, recorded_decay = config.moving_average_decay, recorded.get("moving_average_decay")
    if info.has_weight_averages and decay == 0:
        if "moving_average_decay" in given:
            note("WARNING: checkpoint {} has EMA weights, but this run has --moving_average_decay 0: its checkpoints "
                 "will not keep them".format(info.path))
        elif recorded_decay is None:
            raise UserError("checkpoint {} has EMA weights but does not record their decay: pass "
                            "--moving_average_decay D to continue them, or --moving_average_decay 0 to drop "
                            "them".format(info.path))
        else:
            changes["moving_average_decay"] = recorded_decay
            log("Using --moving_average_decay {:g} from {}".format(recorded_decay, source))
    elif info.has_weight_averages and recorded_decay is not None and decay != recorded_decay:
        raise contradiction("--moving_average_decay", decay, source, "--moving_average_decay", recorded_decay)
    elif decay > 0 and not info.has_weight_averages:
        note("The checkpoint has no EMA weights: the averages start from its weights")
    # Mixed precision keeps float32 weights, so a resume may change it (bfloat16 is emulated, several times slower,
    # on a CPU without it): neither refused nor adopted, but said.
    recorded_amp = recorded.get("amp")
    if recorded_amp is not None and recorded_amp != config.amp:
        note("Note: checkpoint {} was trained with --amp: this run continues it in float32 (pass --amp to keep mixed "
             "precision)".format(info.path) if recorded_amp else
             "Note: checkpoint {} was trained in float32: this run continues it with --amp".format(info.path))
    return changes


# What a resume compares with the checkpoint's training (the notes below), by the record it needs.
_TRAINING_RECORDS = (("schedule", "learning-rate schedule"), ("images_per_step", "images per step"),
                     ("amp", "precision"), ("recipe", "training flags (--weight_decay, --momentum, augmentation)"),
                     ("data_stream", "input and --seed"))


def _note_unrecorded_training(info, note):
    """A resume of a checkpoint without the records the notes on a changed training compare with (the original's,
    and this port's before they were added): those notes cannot be said, so that is."""
    recorded = info.recorded_settings()
    missing = [what for key, what in _TRAINING_RECORDS if key not in recorded]
    if missing and info.has_optimizer_state:  # without it the resume is refused (no note before the error)
        note("Note: checkpoint {} does not record its training's {} ({}): whether this run continues them "
             "unchanged is not checked".format(info.path, ", ".join(missing[:-1]) + " or " + missing[-1]
                                                if len(missing) > 1 else missing[0],
                                                info.unrecorded_settings_reason()))


def _note_redone_steps(config, info, last, note):
    """A resume whose log already holds steps past its checkpoint (a session killed between checkpoints): those
    steps, up to `last`, the last this run trains (_last_step), are trained again, and logged twice."""
    from utils.logger import last_training_step
    logged = last_training_step(config.log_path, config.model_dir, session=(info.lineage or {}).get("session"))
    step = info.step or 0
    again = min(logged, last) if logged is not None else None
    if again is not None and again > step:
        note("Note: the log {} records steps up to {} of an earlier session of this training, past its "
             "last checkpoint: this run resumes from checkpoint {} at step {} and trains step{} {} again (logged "
             "twice; plot_log keeps the later)".format(config.log_path, logged, info.path, step,
                                                      "s" * (again > step + 1),
                                                      step + 1 if again == step + 1 else f"{step + 1}-{again}"))


def _last_step(config, info, count, replicas):
    """The last step a resume of checkpoint `info` trains (its step when it trains none: runner_utils.steps_this_run,
    as runtime/runner.py counts it) on a train split of `count` records (None: synthetic data, --num_iter steps, as
    runtime/inputs.training_length)."""
    from runtime import runner_utils
    step = info.step or 0
    if count is None:
        num_steps, steps_per_epoch = config.num_iter, float(config.num_iter)
    else:
        num_steps, num_epochs, _ = runner_utils.count_steps(config.iter_unit, count, config.num_iter,
                                                            images_per_step(config, replicas))
        steps_per_epoch = num_steps / num_epochs
    return step + runner_utils.steps_this_run(config.run_iter, config.iter_unit, steps_per_epoch, num_steps, step)


def _note_another_stream(config, info, count, replicas, workers, note):
    """A resume whose images per step (another --batch_size, GPU count or --grad_accum_steps), processes, input or
    --seed differ from the checkpoint's run: its schedule per step or its data stream is another from here. Said,
    not refused, each fact once: the input or seed change in its own note (whatever else changed), the images per
    step in its, which adds that --seed's stream does not continue only when no such note says so already. With
    the train split's record `count` (None: synthetic data), the images-per-step note gives the rate at the
    resume's step in both runs and the epoch's length in steps."""
    recorded = info.recorded_settings()
    recorded_images, images = recorded.get("images_per_step"), images_per_step(config, replicas)
    stream_notes = []
    _note_another_data_stream(config, info, recorded.get("data_stream"), stream_notes.append)
    if recorded_images is not None and recorded_images != images:
        note("Note: checkpoint {} was trained at {} images per step: this run continues at {} (--batch_size {} x {} "
             "replica(s) x --grad_accum_steps {}), {}{}".format(
                 info.path, recorded_images, images, config.batch_size, replicas, config.grad_accum_steps,
                 _schedule_at_other_images(config, info, count, images),
                 "; --seed's data stream does not continue where the checkpoint's stopped"
                 if config.seed is not None and not stream_notes else ""))
    elif config.seed is not None and not config.uses_dali and recorded.get("processes") not in (None, workers) \
            and not stream_notes:
        # The same images per step read by another number of processes, each reading its own share of the train
        # files: the seeded stream is another one (DALI's resume has its own note).
        processes = recorded["processes"]
        note("Note: checkpoint {} was trained by {}: this run has {} process{}{}, so --seed's data stream does not "
             "continue where the checkpoint's stopped (the same {} images per step, other images in them)".format(
                 info.path, "1 process, which read all the train files" if processes == 1 else
                 "{} processes, each reading its own share of the train files".format(processes), workers,
                 "es" * (workers != 1), ", each reading its own share" if workers > 1 else "", images))
    for line in stream_notes:
        note(line)
    if config.uses_dali and config.seed is not None:
        note("Note: DALI's input cannot skip to step {}: this resume reads its data stream from the start, so it is "
             "not the exact continuation --seed gives on the TFRecord input".format(info.step))


def _schedule_at_other_images(config, info, count, images):
    """The images-per-step note's account of the schedule: the rate at the checkpoint's step in this run and in
    the checkpoint's, and an epoch's steps in each, where the checkpoint records its schedule and the train split
    is counted; else that both follow from the new images per step."""
    recorded = info.recorded_settings().get("schedule")
    if recorded is None or count is None:
        return "and its learning rate and steps per epoch follow from {}".format(images)
    step = info.step or 0
    schedule = _schedule_of(config, count, images)
    recorded_images = info.recorded_settings()["images_per_step"]
    # Steps count the run's length: its last step is another one, and so are the images it will have seen. The
    # images before the checkpoint's step are its record's count (earlier resumes may have changed the images per
    # step); a checkpoint without one gives a figure only on the assumption, said, that every step had its images.
    end = schedule["num_steps"]
    before, then = images_seen(info), images_seen(info, recorded["num_steps"])
    assumed = before is None or then is None
    if assumed:
        before, then = step * recorded_images, recorded["num_steps"] * recorded_images
    seen = before + max(end - step, 0) * images
    # "Epoch" is the schedule's (under --iter_unit batch, num_iter steps over a whole number of them, as the
    # original's), the images are counted in passes over the train split: the two differ under --iter_unit batch.
    # A run length given anew moves the end itself: said first, so the end is not read as the batch's doing.
    length = "".join("--{} {} (was {}); ".format(name, getattr(config, name), recorded.get(name))
                     for name in ("num_iter", "iter_unit") if recorded.get(name) != getattr(config, name))
    return ("so at step {} its learning rate is {:.6g} where the checkpoint's run had {:.6g}, and it ends at step {} "
            "where that run ended at step {} ({}{}its schedule's epoch is {:g} steps, that run's {:g}): {:,} images in "
            "all ({:.3g} pass{} over the {:,} train images) where that run saw {:,} ({:.3g} pass{}){}".format(
                step, learning_rate_at(schedule, images, step), learning_rate_at(recorded, recorded_images, step),
                end, recorded["num_steps"], length, "under --iter_unit batch " if config.iter_unit == "batch" else "",
                schedule["steps_per_epoch"], recorded["steps_per_epoch"],
                seen, seen / count, "" if seen == count else "es", count, then, then / count,
                "" if then == count else "es",
                ", if every step before {} had {} images (the checkpoint does not record the images it has seen)"
                .format(step, recorded_images) if assumed else ""))


def _schedule_of(config, count, images):
    """The schedule_record of a run of `config` at `images` per step on a train split of `count` records."""
    from runtime import runner_utils
    num_steps, num_epochs, decay_steps = runner_utils.count_steps(config.iter_unit, count, config.num_iter, images)
    return schedule_record(config, num_steps, decay_steps, num_steps / num_epochs)


def _note_another_data_stream(config, info, recorded, note):
    """A resume through another input, or with another --seed, than the checkpoint's run: its data stream is
    another from here (said, in one line naming each change; checkpoints before 2026-12-05 record neither)."""
    if not recorded:
        return
    stream = data_stream(config)
    was, now = [], []
    if recorded.get("input") != stream["input"]:
        was.append("through {}".format(recorded.get("input")))
        now.append("reads through {}".format(stream["input"]))
    if recorded.get("seed") != stream["seed"] and (stream["seed"] is not None or recorded.get("seed") is not None):
        was.append("without --seed" if recorded.get("seed") is None else "with --seed {}".format(recorded["seed"]))
        now.append("has no --seed" if stream["seed"] is None else "has --seed {}".format(stream["seed"]))
    if now:
        note("Note: checkpoint {} was trained {}: this run {}, so its data stream does not continue the "
             "checkpoint's{}".format(info.path, " ".join(was), " and ".join(now),
                                     " (and DALI's resize filter is not TensorFlow's)" if recorded.get("input") !=
                                     stream["input"] and "dali" in (recorded.get("input"), stream["input"]) else ""))


def _schedule_points(schedule, step, num_steps):
    """The steps from `step` to the run's last (num_steps - 1) where `schedule` (a schedule_record) changes course:
    the ends of its warmup and its decay, its step-decay boundaries and the steps after them."""
    from utils.learning_rate import STEP_DECAY_EPOCHS, warmup_steps
    per_epoch = schedule["steps_per_epoch"]
    marks = [warmup_steps(per_epoch, schedule["lr_warmup_epochs"]), schedule["decay_steps"]]
    marks += [int(per_epoch * epoch) for epoch in STEP_DECAY_EPOCHS]
    return {point for mark in marks for point in (mark - 1, mark, mark + 1) if step <= point < num_steps}


def _note_another_schedule(config, info, count, replicas, log):
    """A resume whose schedule flags (SCHEDULE_FLAGS) differ from the checkpoint's run and whose learning rate from
    this step on differs with them (the cosine of a longer --num_iter restarts well above the rate the checkpoint's
    run ended at). Said, not refused: extending or retuning a run is legitimate. Both schedules are taken at this
    run's images per step and train split (another batch or split size changes the rate too, and the notes on
    those say so), and compared at the steps where either changes course and 256 between (both are piecewise
    smooth). Returns True when flags differ but the rate at every step this run trains does not (a longer run of
    the step schedule: the curves continue the same run), else False."""
    import numpy as np
    recorded = info.recorded_settings().get("schedule")
    if recorded is None:
        return False
    changed = [name for name in SCHEDULE_FLAGS if recorded.get(name) != getattr(config, name)]
    if not changed:
        return False
    images = images_per_step(config, replicas)
    schedule = _schedule_of(config, count, images)
    num_steps, step = schedule["num_steps"], info.step or 0
    if step >= num_steps:
        return False  # nothing left to train
    # The checkpoint's schedule flags at this run's images per step and train split: what the flags alone change
    # (another batch or split changes the rate too, and its own note says so).
    was = _schedule_of(dataclasses.replace(config, **{name: recorded[name] for name in SCHEDULE_FLAGS}), count, images)
    points = {int(point) for point in np.linspace(step, num_steps - 1, 256)}
    points = sorted(points | _schedule_points(schedule, step, num_steps) | _schedule_points(was, step, num_steps))
    rates = learning_rate_at(schedule, images, points)
    were = learning_rate_at(was, images, points)
    differs = ~np.isclose(rates, were, rtol=1e-6, atol=0.0)
    if not differs.any():
        return True  # the same rate at every step this run trains
    first = int(np.argmax(differs))
    flags = ", ".join(("--{} (was off)" if getattr(config, name) else "no --{} (was on)").format(name)
                      if isinstance(getattr(config, name), bool) else
                      "--{} {} (was {})".format(name, _shown(getattr(config, name)), _shown(recorded[name]))
                      for name in changed)
    same = "" if first == 0 else "the rate is the same up to step {}; ".format(points[first - 1])
    # At another images per step the checkpoint's run never had that rate: it is what its flags give at this one.
    other_images = info.recorded_settings().get("images_per_step") not in (None, images)
    log("Note: this run's learning-rate schedule is not the one checkpoint {} was trained with: {}; {}at step {} the "
        "rate is {:.6g} where {} {:.6g}{}{}".format(
            info.path, flags, same, points[first], rates[first],
            "the checkpoint's flags give" if other_images else "that schedule had", were[first],
            " at this run's {} images per step".format(images) if other_images else "",
            ", over {} steps in all (was {})".format(num_steps, recorded["num_steps"])
            if num_steps != recorded["num_steps"] else ""))
    return False


def _steps_left(config, info, count, replicas):
    """Whether a resume of checkpoint `info` trains any step on a train split of `count` records (_last_step)."""
    return _last_step(config, info, count, replicas) > (info.step or 0)


def _note_fewer_images_than_asked(config, info, count, replicas):
    """[the line] when a resume with no step left (its length in steps reached) stands on a checkpoint whose
    training saw fewer images than that length at this run's images per step (some of its steps had fewer), else
    []: --num_iter counts steps, as the original's, so no more are trained, and the user is told how far short."""
    from runtime import runner_utils
    images = images_per_step(config, replicas)
    num_steps = runner_utils.count_steps(config.iter_unit, count, config.num_iter, images)[0]
    seen = images_seen(info)
    if seen is None or seen >= num_steps * images:
        return []
    asked = num_steps * images
    return ["Note: checkpoint {} is at step {}, this run's last, but its training saw {:,} images ({:.3g} passes over "
            "the {:,} train images), not the {:,} ({:.3g} passes) that {} steps of this run's {} images make: some of "
            "its steps had fewer images; raise --num_iter to train more".format(
                info.path, info.step, seen, seen / count, count, asked, asked / count, num_steps, images)]


def _recipe_in_effect(recipe, amp):
    """The RECIPE_FLAGS of `recipe` that shape the training: RandAugment's only with it, the switch between mixup
    and CutMix only with both, the loss scale and the --amp dtype only with --amp."""
    unused = set()
    if recipe.get("augmenter_name") != "randaugment":
        unused |= {"raug_num_layers", "raug_magnitude"}
    if not (recipe.get("mixup") and recipe.get("cutmix")):
        unused.add("mixup_switch_prob")
    if not amp:
        unused |= {"amp_dtype", "static_loss_scale"}
    if recipe.get("amp_dtype") is None:  # the platform's default dtype, said by the precision line
        unused.add("amp_dtype")
    return {name: value for name, value in recipe.items() if name not in unused}


def _note_another_recipe(config, info, log, finetune=False):
    """A resume with other RECIPE_FLAGS than the checkpoint's run: said, not refused (retuning a run is
    legitimate), so that a run's log says what its steps were trained with. A fine-tune (`finetune`) from a
    checkpoint that records its recipe says the same of its own flags: on the checkpoint's data they usually
    continue its recipe, and the original's defaults (crops down to 5% of the image, no label smoothing) left in
    by omission are a different training."""
    recorded_settings = info.recorded_settings()
    recorded = recorded_settings.get("recipe")
    if recorded is None:
        return
    was = _recipe_in_effect(recorded, recorded_settings.get("amp"))
    now = _recipe_in_effect({name: getattr(config, name) for name in RECIPE_FLAGS}, config.amp)
    changed = [name for name in RECIPE_FLAGS if name in was and name in now and was[name] != now[name]]
    if changed:
        log("Note: this {} checkpoint {} with other training flags than it was trained with: {}".format(
            "fine-tune starts from" if finetune else "run continues", info.path,
            ", ".join("--{} {} (was {})".format(name, _shown(now[name]), _shown(was[name])) for name in changed)))


def files_fingerprint(files):
    """A short digest of the names (without their directory) and sizes of `files`: the same for a moved copy of a
    dataset, another for other shards of it. Sizes, not contents, so it costs a stat per file on ImageNet too."""
    import hashlib
    listing = "\n".join("{} {}".format(os.path.basename(name), os.path.getsize(name)) for name in sorted(files))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()[:16]


def _train_records(train):
    from utils.tfrecord_framing import count_records  # pure Python, cached: training_length counts them again
    return sum(count_records(name) for name in train.files)


def _note_another_train_set(config, info, train, count, log):
    """A resume whose train split (`train`, a SplitFacts of `count` records) holds another number of records than
    the checkpoint's run read: its epochs, and the schedule counted in them, change from this step on; or as many
    in other files: the run goes on on other data. Said, not refused (more data is a legitimate change); a moved
    copy of the same data says nothing."""
    recorded = info.recorded_settings().get("train_images")
    if recorded is None:
        return
    recorded_files = info.recorded_settings().get("train_files")
    if count == recorded and recorded_files is not None and recorded_files != files_fingerprint(train.files):
        log("Note: the train-* files of --data_dir {} are not the ones checkpoint {} was trained on (other names or "
            "sizes, {:,} records as before): this run goes on on other data".format(config.data_dir, info.path, count))
    if count != recorded:
        log("Note: checkpoint {} was trained on {:,} train images; the train-* files of --data_dir {} hold {:,}: "
            "this run's epochs, and the learning-rate schedule counted in them, follow from {:,} from step {} on{}"
            .format(info.path, recorded, config.data_dir, count, count, info.step,
                    "; --seed's data stream does not continue where the checkpoint's stopped"
                    if config.seed is not None else ""))


def _finetune_changes(config, given, log):
    """--finetune_checkpoint: its architecture, class count and image size where the flags leave them out. A given
    class count or size is a choice (a new classifier; another resolution); another --arch is refused here, before
    the run logs anything."""
    from model import checkpoint
    info = checkpoint.inspect(checkpoint.find_checkpoint(config.finetune_checkpoint, "--finetune_checkpoint",
                                                         warn=log))
    # (the classifier's form too, as a resume takes it: a postprocess_ckpt.py checkpoint's 1x1 conv was built
    # dense without a word)
    names = MODEL_SETTINGS + ("use_final_conv",)
    recorded = {name: value for name, value in info.recorded_settings().items() if name in names}
    changes = reconcile(dataclasses.asdict(config), recorded, given, {name: "--" + name for name in names},
                        "checkpoint {}".format(info.path), log, compatible=lambda *_: True,
                        unrecorded=info.unrecorded_settings())
    arch = changes.get("arch", config.arch)
    if info.arch is not None and arch != info.arch:  # refused now, before the run logs or writes anything
        from runtime.checkpoints import check_fits
        check_fits(info, arch, changes.get("num_classes", config.num_classes), allow_other_classes=True)
    if "use_final_conv" in given and recorded.get("use_final_conv", config.use_final_conv) != config.use_final_conv:
        log(classifier_form_note("checkpoint {}".format(info.path), recorded["use_final_conv"],
                                 config.use_final_conv, writes_checkpoints=True))
    if "image_size" in given and info.image_size and config.image_size != info.image_size:
        log("Fine-tuning at --image_size {} from checkpoint {}, trained at {} px (the convolutions' weights do not "
            "depend on the size; the features they learned are of another scale)".format(
                config.image_size, info.path, info.image_size))
    if info.has_quantization_ranges and not config.quantize:
        log("Checkpoint {} holds quantisation ranges: this fine-tune without --quantize trains the float model and "
            "leaves them out".format(info.path))
    _note_another_recipe(config, info, log, finetune=True)
    if config.moving_average_decay > 0:  # a fine-tune restores the weights only (runtime/checkpoints.py)
        log("EMA: the averages start from the weights restored from checkpoint {}{}".format(
            info.path, " (not from its averages)" if info.has_weight_averages else ""))
    return info, changes


def data_splits(config):
    """The splits of --data_dir this run reads."""
    if config.data_dir is None or config.mode == "predict":
        return ()
    if config.mode in TRAINING_MODES:
        return ("train", "validation") if config.mode == "train_and_evaluate" else ("train",)
    if config.mode == "training_benchmark":
        return ("train",)
    return ("validation",)


def check_data(config, log=print, workers=1, classes_from=None):
    """{split: SplitFacts} of the splits the run reads, each complete, with labels the classifier can hold, with
    --dali the index files of its shards, and (the tf.data input, whose workers read whole files) at least as many
    train files as `workers`. `classes_from`: the checkpoint whose model the run uses as it is (a resume, an
    inference mode), whose class count no flag can change."""
    facts = {}
    splits = data_splits(config)
    if not splits:
        return facts
    from utils import dataset_manifest
    for split in splits:
        split_facts = dataset_manifest.read_split(config.data_dir, split)
        dataset_manifest.check_complete(split_facts)
        dataset_manifest.check_classes(split_facts, config.num_classes,
                                       model="checkpoint {}".format(classes_from) if classes_from else None)
        if config.uses_dali:  # each index file present and describing its shard
            from runtime.runner_utils import list_index_files
            list_index_files(config.data_idx_dir, split_facts.files)
        elif split == "train" and 0 < len(split_facts.files) < workers:
            # A worker without a file would stop at its first batch while the others wait for it in a collective.
            files = len(split_facts.files)
            raise UserError("--data_dir {} has {} train-* file{} but this job runs {} workers, and each worker reads "
                            "whole files (worker k: files k, k + {}, ...): use at most {} worker{}, or write more "
                            "shards (python -m dataprep.build_tfrecords --train_shards N)".format(
                                config.data_dir, files, "s" * (files > 1), workers, workers, files,
                                "s" * (files > 1)))
        elif split == "train" and workers > 1 and len(split_facts.files) % workers:
            _note_uneven_files(config.data_dir, split_facts.files, workers, log)
        if split == "train":
            _check_training_batch(config, split_facts, workers)
        if split == "validation" and config.mode == "train_and_evaluate":
            _check_evaluation_batch(config, split_facts)
        if split_facts.num_classes is not None:
            log("Dataset {} {}: {} images in {} shard{}, labels {}..{} ({} classes; the classifier has {} "
                "outputs)".format(config.data_dir, split, split_facts.num_images, split_facts.present_shards,
                                  "s" * (split_facts.present_shards != 1), *split_facts.label_range,
                                  split_facts.num_classes, config.num_classes))
        facts[split] = split_facts
    _check_labels_file(config.data_dir, facts.values(), log)
    return facts


def _check_labels_file(data_dir, split_facts, log):
    """A WARNING when --data_dir's labels.txt names another number of classes than the labels dataprep recorded:
    a training copies it beside its checkpoints, where predict and the exports take the outputs' names from it."""
    classes = {facts.num_classes for facts in split_facts if facts.num_classes is not None}
    if len(classes) != 1:
        return
    from runtime.runner_utils import read_class_names
    path = os.path.join(data_dir, "labels.txt")
    try:
        names = read_class_names(path)
    except UserError:  # predict and the export say why it cannot be read, where they read it
        return
    if names is not None and len(names) != next(iter(classes)):
        log("WARNING: {} names {} classes, but the dataset's labels are 1..{}: its names are another dataset's or "
            "cut short, and the names a training keeps beside its checkpoints (for predict and the exports) come "
            "from it; write one name per label".format(path, len(names), next(iter(classes))))


def _note_uneven_files(data_dir, files, workers, log):
    """The note of a tf.data job whose workers read unequal shares of the train files (worker k: files k, k +
    workers, ...; the original's Horovod input): each worker takes an epoch's steps from its own share, so the one
    with fewer images sees some of them twice an epoch and the one with more leaves some out."""
    from runtime.runner_utils import count_samples
    shares = [count_samples(files[rank::workers]) for rank in range(workers)]
    log("Note: --data_dir {} has {} train-* files for {} workers, which read whole files (worker k: files k, k + {}, "
        "...), so their shares differ: {} images; each worker takes an epoch's steps from its own share, so the "
        "smaller shares are read more than once an epoch and the larger ones not whole, as in the original's "
        "multi-GPU input. A multiple of {} files reads each image once an epoch (python -m dataprep.build_tfrecords "
        "--train_shards N)".format(data_dir, len(files), workers, workers,
                                   " / ".join("{:,}".format(share) for share in shares), workers))


def _note_default_num_classes(config, given, split_facts, log):
    """A new training (or fine-tune) left at the original's ImageNet --num_classes on a dataset whose recorded labels
    need far fewer outputs: said once, with the count that fits (labels 1..K are outputs 0..K-1; one more, the
    original's layout of an unlabelled last output, is not remarked on)."""
    if config.mode not in TRAINING_MODES or "num_classes" in given or split_facts is None or \
            split_facts.label_range is None:
        return
    high = split_facts.label_range[1]
    if config.num_classes > high + 1:
        log("Note: --num_classes is the original's ImageNet default, {}, but dataset {} has labels 1..{}: the "
            "classifier gets {} outputs no image is labelled with; --num_classes {} fits this dataset".format(
                config.num_classes, config.data_dir, high, config.num_classes - high, high))


def _check_training_batch(config, split_facts, workers):
    """A train split of fewer records than one global batch (at least one replica a worker) is refused here, before
    the run's log and model_dir are written, when dataprep recorded its image count; without a manifest (ImageNet
    converted by the original's scripts: 1.28 M records, walked once already by runtime/inputs.training_length)
    that refusal comes at the count there."""
    from runtime import runner_utils
    images = split_facts.num_images
    if images is not None and images < images_per_step(config, workers):
        raise runner_utils.too_few_for_a_batch(images, config, workers)


def _check_evaluation_batch(config, split_facts):
    """train_and_evaluate's evaluation needs one whole batch of --batch_size validation images: refused before the
    training rather than after it."""
    from runtime.runner_utils import count_samples
    images = split_facts.num_images if split_facts.num_images is not None else count_samples(split_facts.files)
    if images < config.batch_size:
        raise UserError("--data_dir {} has {} validation images, fewer than one evaluation batch of --batch_size {}: "
                        "train_and_evaluate would train, then fail to evaluate; use a --batch_size of at most {}, or "
                        "--mode train".format(config.data_dir, images, config.batch_size, images))


def resolve(config, given, log=print, replicas=1, workers=1, platform=None, engine=None):
    """The RunSettings of a main.py run: `config` (from `parse`) reconciled with the checkpoint it reads (resume or
    inference) or fine-tunes from, then checked against the dataset. `replicas`: the run's model replicas, over
    every worker (utils/distributed.Distribution.num_replicas); `workers`: its processes, each reading its own
    shard of the train files (Distribution.size); `platform` and `engine` (utils/devices.Platform,
    utils/engines.Engine): the devices and engine this process set up, against which the GPU flags are checked."""
    given = typed = frozenset(given)
    sized = _synthetic_size_changes(config, given, log)
    if sized:  # the size follows a given flag, which a checkpoint's size does not override
        config, given = dataclasses.replace(config, **sized), given | {"synthetic_data_size"}
    info, resumes = _checkpoint_read_by(config, log)
    if info is None and (config.mode in ("evaluate", "predict") or
                         config.mode == "inference_benchmark" and config.use_ema_weights):
        from runtime.checkpoints import no_checkpoint
        error = no_checkpoint(config.model_dir)  # before the lines on the dataset of a run that cannot go on
        if config.finetune_checkpoint:  # the checkpoint meant, given to the flag only a training reads
            raise UserError("{}; --finetune_checkpoint is read only by a training: to {} {}, pass it as "
                            "--model_dir".format(error, config.mode.replace("_", " "), config.finetune_checkpoint))
        raise error
    if info is not None and config.use_ema_weights and config.mode in ("evaluate", "predict", "inference_benchmark"):
        from runtime.checkpoints import require_averages
        require_averages(info)  # before the run's log: it would record a run refused at its restore
    changes, finetune = {}, None
    notes = []  # a resume's lines on what changes from the checkpoint's run: said only if it has steps to train
    # The run uses the checkpoint's model as it is (its class count and size): a resume, an inference mode, the
    # training benchmark.
    uses_checkpoint_model = info is not None and (resumes or config.mode in INFERENCE_MODES + ("training_benchmark",))
    if uses_checkpoint_model and config.uses_synthetic_data:
        # --image_size has sized the synthetic images (above), as --synthetic_data_size would have: the model's size
        # is the checkpoint's either way, and the record says the same whichever of the two flags was typed
        given = given - {"image_size"}
    if uses_checkpoint_model:
        try:
            changes.update(_model_changes(config, info, given, log))
        except UserError as error:
            if not (resumes and config.finetune_checkpoint):
                raise
            # --num_classes 4 --finetune_checkpoint X into a model_dir that holds a checkpoint: the flag's advice
            # alone (omit it) would resume that checkpoint's training on the new data
            raise UserError("{}; but model_dir {} already has that checkpoint, so this run would resume it and "
                            "--finetune_checkpoint {} is not read: use a new --model_dir to fine-tune".format(
                                error, config.model_dir, config.finetune_checkpoint)) from None
        if config.mode == "training_benchmark":
            # It times the checkpoint's model (as the original, whose Estimator restored model_dir's checkpoint), but
            # from fresh weights, and writes nothing: a benchmark must not continue or extend a run.
            left_out = []  # what the checkpoint's training step did that this benchmark's does not time
            if info.has_quantization_ranges and not config.quantize:
                left_out.append("quantisation-aware training needs --quantize")
            if info.has_weight_averages and not config.moving_average_decay > 0:
                decay = info.recorded_settings().get("moving_average_decay")
                left_out.append("weight averaging needs --moving_average_decay {}".format(
                    _shown(decay) if decay else "D"))
            if info.recorded_settings().get("amp") and not config.amp:
                left_out.append("mixed precision needs --amp")
            log("Note: training_benchmark times the model of checkpoint {} from fresh weights; it restores no "
                "checkpoint and writes none{}".format(
                    info.path, " (the checkpoint's {} here)".format(" and its ".join(left_out)) if left_out else ""))
        elif resumes:
            changes.update(_finetune_on_resume(config, info, log))
            changes.update(_training_state_changes(config, info, given, log, notes.append))
            _note_another_recipe(dataclasses.replace(config, **changes), info, notes.append)
            _note_unrecorded_training(info, notes.append)
            redone_at = len(notes)  # where the steps-again note goes, once this run's last step is known (below)
        elif info.has_quantization_ranges:
            log("Checkpoint {} holds quantisation ranges: {} runs the float model, as the original "
                "(export_frozen_graph.py --quantize exports the quantised graph)".format(info.path, config.mode))
    elif config.finetune_checkpoint and config.mode in TRAINING_MODES:
        finetune, changes = _finetune_changes(config, given, log)
    if not uses_checkpoint_model:
        changes.update(_image_size_from_synthetic_size(config, given, log))
    _note_unused_flags(config, given, log, info, platform, engine)
    resolved = dataclasses.replace(config, **changes) if changes else config
    if resolved.mode in INFERENCE_MODES:  # the float model runs (the notes above say so), and the run's record too
        float_model = {field.name: field.default for field in dataclasses.fields(RunConfig) if field.name in QAT_FLAGS}
        resolved = dataclasses.replace(resolved, **float_model)
    if resolved.mode == "train_and_evaluate" and resolved.quantize:
        log("Note: --mode train_and_evaluate evaluates{} the float model, as the original "
            "(export_frozen_graph.py --quantize exports the quantised graph)".format(
                " and exports" if resolved.export_dir else ""))
    _note_unused_synthetic_size(resolved, given, log)
    _check_benchmark_size(resolved, info, typed, log)
    data = check_data(resolved, log, workers, classes_from=info.path if uses_checkpoint_model else None)
    if not uses_checkpoint_model:
        _note_default_num_classes(resolved, given, data.get("train"), log)
    same_rates = False
    if resumes:
        count = _train_records(data["train"]) if "train" in data else None  # None: synthetic data
        redone = []
        _note_redone_steps(resolved, info, _last_step(resolved, info, count, replicas), redone.append)
        notes[redone_at:redone_at] = redone
        _note_another_stream(resolved, info, count, replicas, workers, notes.append)
        if count is not None:
            _note_another_train_set(resolved, info, data["train"], count, notes.append)
            same_rates = _note_another_schedule(resolved, info, count, replicas, notes.append)
            if not _steps_left(resolved, info, count, replicas):
                # The run says "Model already trained required number of steps. Skipped": of its notes, only
                # that the steps it counts trained fewer images than this run's length means, if so.
                notes = _note_fewer_images_than_asked(resolved, info, count, replicas)
    for line in notes:
        log(line)
    record = lineage(resolved, info, resumes)
    if same_rates:  # schedule flags changed, the rates did not: utils/plot_log then sees the same run go on
        record["schedule_rates_unchanged"] = True
    return RunSettings(resolved, info, finetune, data, changes, record)
