"""The run configuration and main.py's flags, defined once: built from the parsed flags, then passed explicitly (no
global state).

Every `RunConfig` field is one flag of main.py. The field's default is the flag's default, its annotation the flag's
type (a `bool` field is a `store_true` flag), and its metadata (`Flag`) holds the aliases, help text, `--help`
group, choices and value check. `build_parser` generates the argparse parser from these fields and
`RunConfig.__post_init__` runs the checks, so a RunConfig built in Python is checked like one from the command line.

The flags of the original main.py (docs/ORIGINAL.md#command-line) keep its names, aliases, defaults and choices;
the ones we add are the fields of the group "Additions (not in the original)". The original parsed with
`parse_known_args` and rejected leftovers with `ERROR: Unknown command line arg: <arg>`; we keep that text.

No TensorFlow here: main.py parses its flags before it imports TensorFlow.
"""

import argparse
import dataclasses
import math
import os
import sys
import typing
from typing import Any, Callable, Optional, Sequence

from model.arch_names import ARCH_NAMES
from utils import defaults
from utils import quiet
from utils.errors import ArgumentParser, UserError

MODE_CHOICES = (
    "train",
    "train_and_evaluate",
    "evaluate",
    "predict",
    "training_benchmark",
    "inference_benchmark",
)
BENCHMARK_MODES = ("training_benchmark", "inference_benchmark")

# Titles of the `--help` argument groups; None is argparse's top-level "options".
DATASET = "Dataset arguments"
TRAINING = "Training arguments"
OPTIMIZATION = "Generic optimization arguments"
AMP = "Automatic Mixed Precision arguments"
ADDITIONS = "Additions (not in the original)"
EXTENSIONS = "Training extensions (not in the original; the names of NVIDIA's TF2 examples)"

DESCRIPTION = "JoC-RN50v1.5-TF"
_FLAG = "flag"  # the key of a field's metadata that holds its Flag


@dataclasses.dataclass(frozen=True)
class Flag:
    """How one RunConfig field appears on the command line and which values it accepts."""

    help: str
    group: Optional[str]
    aliases: tuple[str, ...] = ()  # option strings accepted besides --<field name>
    choices: Optional[tuple[str, ...]] = None
    required: bool = False  # must be given on the command line; the field default serves Python callers only
    check: Optional[Callable[[Any], bool]] = None  # the value is valid when check(value) holds
    problem: str = ""  # the UserError message when check fails, `{}` replaced by the value

    @property
    def original(self) -> bool:
        """The original main.py had this flag; every flag we add lives in the ADDITIONS or EXTENSIONS group."""
        return self.group not in (ADDITIONS, EXTENSIONS)

    def option_strings(self, name: str) -> tuple[str, ...]:
        return ("--" + name,) + self.aliases


def _flag(default: Any, help: str, *, group: Optional[str] = None, aliases: tuple[str, ...] = (),
          choices: Optional[tuple[str, ...]] = None, required: bool = False,
          check: Optional[Callable[[Any], bool]] = None, problem: str = "") -> Any:
    return dataclasses.field(default=default, metadata={_FLAG: Flag(help=help, group=group, aliases=aliases,
                                                                     choices=choices, required=required,
                                                                     check=check, problem=problem)})


def flag_of(field: dataclasses.Field) -> Flag:
    return field.metadata[_FLAG]


@dataclasses.dataclass(frozen=True)
class RunConfig:
    # The field order is the order of `--help` and of the value checks.
    arch: str = _flag(defaults.ARCH, "Architecture of model to run.", choices=ARCH_NAMES)
    mode: str = _flag("train_and_evaluate", "The execution mode of the script.", choices=MODE_CHOICES)
    export_dir: Optional[str] = _flag(None, "Directory in which to write exported SavedModel.")
    to_predict: Optional[str] = _flag(None, "Path to file or directory of files to run prediction on.")
    batch_size: int = _flag(32, "Size of each minibatch per GPU.", required=True,
                            check=lambda v: v > 0, problem="--batch_size must be a positive integer (got {})")
    num_iter: int = _flag(1, "Number of iterations to run.",
                          check=lambda v: v > 0, problem="--num_iter must be a positive integer (got {})")
    run_iter: int = _flag(-1, "Number of training iterations to run on single run.",
                          check=lambda v: v == -1 or v > 0, problem="--run_iter must be -1 (all) or positive (got {})")
    iter_unit: str = _flag("epoch", "Unit of iterations.", choices=("epoch", "batch"))
    warmup_steps: int = _flag(50, "Number of steps considered as warmup and not taken into account for performance "
                                  "measurements.",
                              check=lambda v: v >= 0, problem="--warmup_steps must be >= 0 (got {})")
    # None (the flag not given) means the same directory as results_dir; __post_init__ fills it in.
    model_dir: Optional[str] = _flag(None, "Directory in which to write model. If undefined, results dir will be "
                                           "used.")
    results_dir: str = _flag(".", "Directory in which to write training logs, summaries and checkpoints.")
    log_filename: str = _flag("log.json", "Name of the JSON file to which write the training log.")
    display_every: int = _flag(10, "How often (in batches) to print out running information.",
                               check=lambda v: v > 0, problem="--display_every must be a positive integer (got {})")
    seed: Optional[int] = _flag(None, "Random seed.")
    gpu_memory_fraction: float = _flag(0.7, "Limit memory fraction used by training script for DALI.",
                                       check=lambda v: 0.0 < v <= 1.0,
                                       problem="--gpu_memory_fraction must be in (0, 1] (got {})")
    gpu_id: int = _flag(0, "Specify ID of the target GPU on multi-device platform. Effective only for single-GPU "
                           "mode.",
                        check=lambda v: v >= 0, problem="--gpu_id must be >= 0 (got {})")
    finetune_checkpoint: Optional[str] = _flag(None, "Path to pre-trained checkpoint which will be used for "
                                                     "fine-tuning (ours or the original's TF1 checkpoint).")
    use_final_conv: bool = _flag(False, "Use convolution operator instead of MLP as last layer.")
    quant_delay: int = _flag(0, "Number of steps to be run before quantization starts to happen.",
                             check=lambda v: v >= 0, problem="--quant_delay must be >= 0 (got {})")
    quantize: bool = _flag(False, "Quantize weights and activations during training. (Defaults to Assymmetric "
                                  "quantization)")
    use_qdq: bool = _flag(False, "Use QDQV3 op instead of FakeQuantWithMinMaxVars op for quantization. QDQv3 does "
                                 "only scaling")
    symmetric: bool = _flag(False, "Quantize weights and activations during training using symmetric quantization.")

    data_dir: Optional[str] = _flag(None, "Path to dataset in TFRecord format. Files should be named 'train-*' and "
                                          "'validation-*'.", group=DATASET)
    data_idx_dir: Optional[str] = _flag(None, "Path to index files for DALI. Files should be named 'train-*' and "
                                              "'validation-*'.", group=DATASET)
    dali: bool = _flag(False, "Enable DALI data input (requires --data_idx_dir).", group=DATASET)
    synthetic_data_size: int = _flag(defaults.IMAGE_SIZE, "Dimension of image for synthetic dataset", group=DATASET,
                                     check=lambda v: v >= 32,
                                     problem="--synthetic_data_size must be at least 32 (got {})")

    lr_init: float = _flag(0.1, "Initial value for the learning rate.", group=TRAINING,
                           check=lambda v: v >= 0, problem="--lr_init must be >= 0 (got {})")
    lr_warmup_epochs: int = _flag(5, "Number of warmup epochs for learning rate schedule.", group=TRAINING,
                                  check=lambda v: v >= 0, problem="--lr_warmup_epochs must be >= 0 (got {})")
    weight_decay: float = _flag(1e-4, "Weight Decay scale factor.", group=TRAINING,
                                check=lambda v: v >= 0, problem="--weight_decay must be >= 0 (got {})")
    weight_init: str = _flag("fan_out", "Model weight initialization method.", group=TRAINING,
                             choices=("fan_in", "fan_out"))
    momentum: float = _flag(0.9, "SGD momentum value.", group=TRAINING,
                            check=lambda v: 0 <= v < 1, problem="--momentum must be in [0, 1) (got {})")
    label_smoothing: float = _flag(0.0, "The value of label smoothing.", group=TRAINING,
                                   check=lambda v: 0 <= v < 1, problem="--label_smoothing must be in [0, 1) (got {})")
    mixup: float = _flag(0.0, "The alpha parameter for mixup (if 0 then mixup is not applied).", group=TRAINING,
                         check=lambda v: v >= 0, problem="--mixup must be >= 0 (got {})")
    # The original meant the first four spellings; a missing comma there registered `--use_cosine_lr--cosine`
    # instead (docs/ORIGINAL.md#known-bugs-of-the-original). We accept the intended ones and the odd one, which
    # old scripts may use.
    cosine_lr: bool = _flag(False, "Use cosine learning rate schedule.", group=TRAINING,
                            aliases=("--use_cosine_lr", "--use_cosine", "--cosine", "--use_cosine_lr--cosine"))

    xla: bool = _flag(False, "Enable XLA (Accelerated Linear Algebra) computation for improved performance.",
                      group=OPTIMIZATION, aliases=("--use_xla",))
    data_format: str = _flag("NHWC", "Data format used to do calculations", group=OPTIMIZATION,
                             choices=("NHWC", "NCHW"))
    amp: bool = _flag(False, "Enable Automatic Mixed Precision to speedup computation using tensor cores (float16 on "
                             "GPU, bfloat16 on CPU).", group=OPTIMIZATION, aliases=("--use_tf_amp",))
    cpu: bool = _flag(False, "Run model on CPU instead of GPU", group=OPTIMIZATION)

    # An int default, as the original's: `--help` and the PARAMETER log line show -1.
    static_loss_scale: float = _flag(-1, "Use static loss scaling in FP32 AMP (-1 = dynamic loss scaling).",
                                     group=AMP, aliases=("--loss_scale",),
                                     check=lambda v: v == -1 or v > 0,
                                     problem="--static_loss_scale must be -1 (dynamic) or positive (got {})")
    # Accepted, hidden and unused, as in the original.
    use_static_loss_scaling: bool = _flag(False, argparse.SUPPRESS, group=AMP)

    num_classes: int = _flag(defaults.NUM_CLASSES,
                             "Width of the classifier. ImageNet TFRecords use labels 1..1000 and 1001 outputs; "
                             "a K-class dataset from dataprep uses labels 1..K and needs --num_classes >= K.",
                             group=ADDITIONS,
                             check=lambda v: v >= 2, problem="--num_classes must be at least 2 (got {})")
    image_size: int = _flag(defaults.IMAGE_SIZE,
                            "Training/evaluation image size (H = W) for real data. Evaluation resizes the "
                            "shorter side to image_size * 256 / 224 before the central crop.",
                            group=ADDITIONS,
                            check=lambda v: v >= 32, problem="--image_size must be at least 32 (got {})")
    # `%%`: argparse %-formats help texts.
    min_crop_area: float = _flag(0.05, "Smallest fraction of the image area a training crop keeps (the original: "
                                       "0.05, its ImageNet crop of 5-100%%). Raise it for small, centred images such "
                                       "as Fashion-MNIST.",
                                 group=ADDITIONS,
                                 check=lambda v: 0 < v <= 1, problem="--min_crop_area must be in (0, 1] (got {})")
    labels_file: Optional[str] = _flag(None, "Class names for predict, one per line; the i-th line (from 0) names "
                                             "output index i. Default: labels.txt in model_dir or data_dir when "
                                             "present.", group=ADDITIONS)
    checkpoint_interval: int = _flag(1000, "Save a checkpoint every N training steps (the original: 1000).",
                                     group=ADDITIONS, check=lambda v: v > 0,
                                     problem="--checkpoint_interval must be a positive integer (got {})")
    no_progress: bool = _flag(False, "Never show progress bars (they are shown only when stdout is a terminal).",
                              group=ADDITIONS)
    max_skipped_steps: int = _flag(100, "With dynamic loss scaling, stop the run after this many non-finite steps in "
                                        "a row.", group=ADDITIONS,
                                   check=lambda v: v > 0, problem="--max_skipped_steps must be positive (got {})")
    amp_dtype: Optional[str] = _flag(None, "Compute dtype of --amp: float16 (with dynamic loss scaling unless "
                                           "--static_loss_scale) or bfloat16. Default: float16 with a GPU, bfloat16 "
                                           "without.", group=ADDITIONS, choices=("float16", "bfloat16"))

    # Extensions: off by default, so the defaults train exactly as the original (docs/EXTENSIONS.md).
    moving_average_decay: float = _flag(0.0, "Keep an exponential moving average (EMA) of the weights and BN "
                                             "statistics with this decay (e.g. 0.9999; 0 = off). Checkpointed; "
                                             "evaluation reports the raw and the EMA weights' accuracy.",
                                        group=EXTENSIONS, check=lambda v: 0 <= v < 1,
                                        problem="--moving_average_decay must be in [0, 1) (got {})")
    use_ema_weights: bool = _flag(False, "predict, inference_benchmark and --export_dir use the checkpoint's EMA "
                                         "weights instead of its raw ones.", group=EXTENSIONS)
    grad_accum_steps: int = _flag(1, "Accumulate the gradients of this many micro-batches of --batch_size per "
                                     "optimizer step (effective batch = batch_size x grad_accum_steps x GPUs).",
                                  group=EXTENSIONS, check=lambda v: v >= 1,
                                  problem="--grad_accum_steps must be a positive integer (got {})")
    augmenter_name: str = _flag("none", "Extra training augmentation of the TFRecord pipeline: the ImageNet "
                                        "AutoAugment policy or RandAugment.", group=EXTENSIONS,
                                choices=("none", "autoaugment", "randaugment"))
    raug_num_layers: int = _flag(2, "RandAugment: operations applied per image.", group=EXTENSIONS,
                                 check=lambda v: 1 <= v <= 10, problem="--raug_num_layers must be in [1, 10] (got {})")
    raug_magnitude: float = _flag(9.0, "RandAugment: magnitude of every operation, 0..10.", group=EXTENSIONS,
                                  check=lambda v: 0 <= v <= 10, problem="--raug_magnitude must be in [0, 10] (got {})")
    cutmix: float = _flag(0.0, "The alpha parameter for CutMix (0 = off): paste a box of another image of the "
                               "batch, labels mixed by the pasted area.", group=EXTENSIONS, aliases=("--cutmix_alpha",),
                          check=lambda v: v >= 0, problem="--cutmix must be >= 0 (got {})")
    mixup_switch_prob: float = _flag(0.5, "With both --mixup and --cutmix: the probability that an image gets "
                                          "CutMix instead of mixup.", group=EXTENSIONS,
                                     check=lambda v: 0 <= v <= 1,
                                     problem="--mixup_switch_prob must be in [0, 1] (got {})")

    def __post_init__(self) -> None:
        if not self.model_dir:
            object.__setattr__(self, "model_dir", self.results_dir)
        for field in dataclasses.fields(self):
            flag, value = flag_of(field), getattr(self, field.name)
            if flag.choices is not None and value is not None and value not in flag.choices:
                raise UserError("--{} must be one of {} (got {!r})".format(field.name, ", ".join(flag.choices),
                                                                          value))
            if isinstance(value, float) and not math.isfinite(value):  # (inf passed the ">= 0" checks)
                raise UserError("--{} must be a finite number (got {})".format(field.name, value))
            if flag.check is not None and not flag.check(value):
                raise UserError(flag.problem.format(value))
        for holds, problem in _COMBINATION_CHECKS:
            if not holds(self):
                raise UserError(problem)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "RunConfig":
        """The RunConfig of parsed flags; flags that are not fields (--verbose) are left out."""
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in vars(args).items() if key in names})

    @property
    def uses_synthetic_data(self) -> bool:
        """A benchmark without --data_dir: it runs on synthetic images of --synthetic_data_size."""
        return self.data_dir is None and self.mode in BENCHMARK_MODES

    @property
    def input_size(self) -> int:
        """H = W of the images: --synthetic_data_size for the benchmarks on synthetic data, else --image_size."""
        return self.synthetic_data_size if self.uses_synthetic_data else self.image_size

    @property
    def log_path(self) -> str:
        return os.path.join(self.results_dir, self.log_filename)

    @property
    def uses_dali(self) -> bool:
        return self.dali and self.data_idx_dir is not None

    def is_set(self, name: str) -> bool:
        """Field `name` differs from its default."""
        return getattr(self, name) != _FIELDS[name].default

    def additions(self) -> dict[str, Any]:
        """The ADDITIONS flags that decide what the run computes or writes (the PARAMETER log line shows them beside
        the original's flags); --no_progress, which only hides a progress bar, is left out."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if flag_of(field).group == ADDITIONS and field.name != "no_progress"}

    def extensions_in_use(self) -> dict[str, Any]:
        """The EXTENSIONS flags set away from their defaults (the PARAMETER log line shows them); {} by default."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if flag_of(field).group == EXTENSIONS and self.is_set(field.name)}


_FIELDS = {field.name: field for field in dataclasses.fields(RunConfig)}


# Checks of several fields together, after the per-field ones: (holds(config), message).
_COMBINATION_CHECKS: tuple[tuple[Callable[[RunConfig], bool], str], ...] = (
    # (predict reads image files: its --dali and --data_idx_dir are only said to be unused)
    (lambda c: not (c.dali and c.data_idx_dir is None and c.mode != "predict"),
     "--dali needs --data_idx_dir (DALI index files; see `python -m dataprep.make_dali_index`)"),
    (lambda c: not (c.data_idx_dir and not c.data_dir and c.mode != "predict"),
     "--data_idx_dir needs --data_dir (the TFRecords the index files describe)"),
    (lambda c: not (c.amp_dtype and not c.amp), "--amp_dtype only takes effect with --amp"),
    (lambda c: not (c.augmenter_name != "none" and c.dali and c.mode != "predict"),
     "--augmenter_name is implemented in the TFRecord pipeline only; leave out --dali to use it"),
    (lambda c: not (c.augmenter_name != "randaugment" and (c.is_set("raug_num_layers") or c.is_set("raug_magnitude"))),
     "--raug_num_layers and --raug_magnitude only take effect with --augmenter_name randaugment"),
    # (in --mode train, and train_and_evaluate without an export, the flag picks nothing: said unused, not refused)
    (lambda c: not (c.use_ema_weights and c.moving_average_decay == 0 and c.mode == "train_and_evaluate"
                    and c.export_dir),
     "--use_ema_weights with train_and_evaluate --export_dir needs --moving_average_decay (the EMA it would export)"),
    (lambda c: not (c.is_set("mixup_switch_prob") and not (c.mixup > 0 and c.cutmix > 0)),
     "--mixup_switch_prob only takes effect with both --mixup and --cutmix"),
    (lambda c: not ((c.symmetric or c.use_qdq or c.quant_delay) and not c.quantize
                    and c.mode in ("train", "train_and_evaluate", "training_benchmark")),
     "--symmetric, --use_qdq and --quant_delay only take effect with --quantize"),
)

# The flags the original main.py had, by destination; sorted, which is the key order of the PARAMETER log line.
ORIGINAL_FLAG_DESTS: tuple[str, ...] = tuple(sorted(field.name for field in dataclasses.fields(RunConfig)
                                                    if flag_of(field).original))


def _value_type(annotation: Any) -> type:
    """int for `int` and `Optional[int]`, and so on."""
    arguments = [argument for argument in typing.get_args(annotation) if argument is not type(None)]
    return arguments[0] if arguments else annotation


def build_parser() -> argparse.ArgumentParser:
    """main.py's argparse parser: one argument per RunConfig field, plus --verbose (utils/quiet.py, every tool's)."""
    # allow_abbrev=False: `--model` is not `--model_dir`, nor `--batch` `--batch_size` (an unknown argument instead).
    # prog: the flags are main.py's wherever they are parsed (runtime.launch checks them once before its workers).
    parser = ArgumentParser(prog="main.py", description=DESCRIPTION, allow_abbrev=False,
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    groups: dict[Optional[str], Any] = {None: parser}
    annotations = typing.get_type_hints(RunConfig)
    for field in dataclasses.fields(RunConfig):
        flag = flag_of(field)
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(flag.group)
        options: dict[str, Any] = dict(dest=field.name, help=flag.help, required=flag.required)
        # A required flag has no default to show in --help (its field default serves Python callers only).
        options["default"] = argparse.SUPPRESS if flag.required else field.default
        value_type = _value_type(annotations[field.name])
        if value_type is bool:
            options["action"] = "store_true"
        else:
            options["type"] = value_type
            if flag.choices is not None:
                options["choices"] = flag.choices
        groups[flag.group].add_argument(*flag.option_strings(field.name), **options)
    quiet.add_verbose_flag(groups[ADDITIONS])
    return parser


def _suggestion(arg: str, options: Sequence[str]) -> str:
    """` (did you mean --a or --b?)` for an unknown `--name[=value]`: the options it abbreviates, else those it
    resembles."""
    import difflib
    if not arg.startswith("--"):
        return ""
    name = arg.split("=", 1)[0]
    close = sorted(option for option in options if option.startswith(name)) or \
        difflib.get_close_matches(name, options, n=2, cutoff=0.8)
    return " (did you mean {}?)".format(" or ".join(close[:3])) if close else ""


def _unknown_flags(argv: Sequence[str], unknown: Sequence[str]) -> list:
    """`unknown` (parse_known_args' leftovers of `argv`) less each value that directly follows an unknown `--flag`:
    `--batch 8` is one unknown flag, not also an unknown `8` (the original reported both)."""
    def is_flag(arg):
        return arg.startswith("-") and not arg[1:].replace(".", "", 1).isdigit()  # -1 and -0.5 are values
    left = list(unknown)
    for flag, value in zip(argv, argv[1:]):
        if flag.startswith("--") and "=" not in flag and flag in unknown and not is_flag(value) and value in left:
            left.remove(value)
    return left


def given_options(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]) -> frozenset:
    """The destinations `argv` sets explicitly on `parser` (an option left at its default is not among them); any
    tool's parser, its defaults left as they were."""
    marker = object()
    saved = {action.dest: action.default for action in parser._actions}
    try:
        parser.set_defaults(**{dest: marker for dest in saved if dest != "help"})
        args, _ = parser.parse_known_args(argv)
    finally:
        parser.set_defaults(**saved)
    return frozenset(dest for dest, value in vars(args).items() if value is not marker)


def given_flags(argv: Optional[Sequence[str]] = None) -> frozenset:
    """The destinations of the main.py flags `argv` sets explicitly."""
    return given_options(build_parser(), argv)


def parse_cmdline(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses and checks `argv` (default sys.argv[1:]). Unknown arguments are rejected with the original's text;
    values are checked by building the RunConfig (its UserError propagates)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        parser.parse_args(["--help"])  # the help, with the required flags shown required; exits
    # Unknown arguments first (`--batch 8` is a misspelt --batch_size, not a missing one): a pass without required
    # flags, then the real one.
    required = [action for action in parser._actions if action.required]
    for action in required:
        action.required = False
    _, unknown = parser.parse_known_args(argv)
    for action in required:
        action.required = True
    if unknown:
        options = [option for action in parser._actions for option in action.option_strings]
        # The original's line for each; the last is the error itself, so one bad flag is one line.
        lines = ["Unknown command line arg: {}{}".format(arg, _suggestion(arg, options))
                 for arg in _unknown_flags(argv, unknown)] or ["Invalid command line arg(s): " + " ".join(unknown)]
        for line in lines[:-1]:
            print("ERROR: " + line, file=sys.stderr)
        raise UserError(lines[-1])
    args = parser.parse_args(argv)
    RunConfig.from_args(args)
    return args


# The flags reference, docs/FLAGS.md: rendered from build_parser() (so from RunConfig's fields, plus --verbose), in
# the groups and the order of `--help`. The test suite regenerates it and compares (tests/test_docs.py).
FLAGS_REFERENCE_COMMAND = ".venv/bin/python -m runtime.config --markdown > docs/FLAGS.md"

# What the reference says of a flag beyond its `--help` text (the original's help strings are kept as they were).
REFERENCE_NOTES: dict[str, str] = {
    "mode": "One example of each: [the README's modes](../README.md#modes).",
    "export_dir": "Written after evaluation.",
    "batch_size": "Per worker process: the global batch is this times the workers (and times --grad_accum_steps).",
    "num_iter": "Counted in --iter_unit; a run resumes until this total is reached.",
    "run_iter": "-1 = all the remaining iterations.",
    "warmup_steps": "Does not affect the learning rate (that is --lr_warmup_epochs).",
    "model_dir": "Checkpoints and TensorBoard events.",
    "results_dir": "The log file, and model_dir when --model_dir is not given.",
    "log_filename": "dllogger's JSON format (`DLLL {json}` lines).",
    "seed": "Per rank: seed*2+rank. Makes CPU runs (float or --quantize) bit-identical: TF op determinism on (and "
            "with --quantize Grappler's arithmetic optimizer off); with --xla in training only the seeds "
            "(docs/DEVIATIONS.md).",
    "finetune_checkpoint": "Used when model_dir has no checkpoint; --arch, --num_classes and --image_size left out "
                           "are its own; to another --num_classes the classifier starts fresh (a different --arch "
                           "is refused).",
    "use_final_conv": "A 1x1 conv classifier instead of dense (for TensorRT / QAT export).",
    "data_dir": "Without it only the benchmarks run, on synthetic data.",
    "data_idx_dir": "Made by `python -m dataprep.make_dali_index`.",
    "synthetic_data_size": "Given --image_size alone sets it too; the two given differently are refused.",
    "lr_init": "For a batch of 256: the rate used is lr_init x global batch / 256.",
    "lr_warmup_epochs": "Linear warmup from 0.",
    "weight_decay": "Coupled L2 on all non-BN trainable variables (biases included).",
    "weight_init": "Variance scaling over fan_in or fan_out (the recipes use fan_in).",
    "momentum": "TF1 semantics: a = m*a + g; w -= lr*a.",
    "label_smoothing": "Over all classes.",
    "cosine_lr": "Cosine decay anchored at step 0, instead of steps at 30/60/80/90 epochs.",
    "data_format": "NCHW needs a GPU.",
    "cpu": "Hide the GPUs.",
    "static_loss_scale": "Only under --amp; bfloat16 needs no loss scaling.",
    "amp_dtype": "float16 on CPU runs the GPU's float16 + dynamic loss scaling path ([GPU.md](GPU.md)).",
}


def _markdown_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _reference_default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if action.default is None:
        return "–"
    return "`{}`".format(action.default)


def _reference_type(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "switch"
    return getattr(action.type, "__name__", "str")


def flags_markdown() -> str:
    """The Markdown of docs/FLAGS.md: per `--help` group, a table of flag (and aliases), type, default and help."""
    unknown = set(REFERENCE_NOTES) - set(_FIELDS)
    if unknown:
        raise ValueError("REFERENCE_NOTES names no RunConfig field: {}".format(", ".join(sorted(unknown))))
    parser = build_parser()
    lines = [
        "<!-- Generated from runtime/config.py; do not edit. Regenerate with: {} -->".format(FLAGS_REFERENCE_COMMAND),
        "# Flags of `main.py`",
        "",
        "Generated from the `RunConfig` fields of `runtime/config.py`, which also generate main.py's parser:",
        "`python main.py --help` prints the same flags, in the same groups and order. The flags of the original",
        "main.py keep its names, aliases, defaults and help texts ([ORIGINAL.md](ORIGINAL.md#command-line)); the",
        "last two groups are ours.",
        "An unknown flag prints `ERROR: Unknown command line arg: <arg>` and exits non-zero, as the original.",
    ]
    for group in parser._action_groups:
        actions = [action for action in group._group_actions
                   if action.help is not argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)]
        if not actions:
            continue
        title = "General arguments" if group is parser._optionals else group.title
        lines += ["", "## {}".format(title), "", "| flag (aliases) | type | default | description |",
                  "|---|---|---|---|"]
        for action in actions:
            name, *aliases = action.option_strings
            flag = "`{}`".format(name) + (" ({})".format(", ".join("`{}`".format(a) for a in aliases))
                                          if aliases else "")
            params = dict(vars(action), prog=parser.prog)
            if action.choices is not None:
                params["choices"] = ", ".join(str(choice) for choice in action.choices)
            text = ((action.help or "") % params).strip()
            if text and text[-1] not in ".!?)":
                text += "."
            if action.choices is not None:
                text += " One of: {}.".format(", ".join("`{}`".format(choice) for choice in action.choices))
            if action.dest in REFERENCE_NOTES:
                text += " " + REFERENCE_NOTES[action.dest]
            lines.append("| {} | {} | {} | {} |".format(flag, _reference_type(action), _reference_default(action),
                                                        _markdown_cell(text)))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    _reference = ArgumentParser(prog="python -m runtime.config", description="main.py's flags reference.")
    _reference.add_argument("--markdown", action="store_true", required=True,
                            help="print docs/FLAGS.md (Markdown) to stdout")
    _reference.parse_args()
    sys.stdout.write(flags_markdown())
