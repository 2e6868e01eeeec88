"""Every flag of the original `main.py` (docs/ORIGINAL.md#command-line), with its names, aliases, defaults and choices.

The original parsed with `parse_known_args` and rejected leftovers with
`ERROR: Unknown command line arg: <arg>`; we keep that text. Flags we add beyond the original are grouped under
"Additions (not in the original)" in `--help`.
"""

import argparse
import sys

from utils import quiet
from utils.errors import UserError

ARCH_CHOICES = ("resnet50", "resnext101-32x4d", "se-resnext101-32x4d")
MODE_CHOICES = (
    "train",
    "train_and_evaluate",
    "evaluate",
    "predict",
    "training_benchmark",
    "inference_benchmark",
)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    pass


def build_parser():
    parser = argparse.ArgumentParser(
        description="JoC-RN50v1.5-TF", formatter_class=_HelpFormatter, add_help=True
    )
    parser.add_argument("--arch", default="resnet50", type=str, choices=ARCH_CHOICES,
                        help="Architecture of model to run.")
    parser.add_argument("--mode", default="train_and_evaluate", type=str, choices=MODE_CHOICES,
                        help="The execution mode of the script.")
    parser.add_argument("--export_dir", required=False, default=None, type=str,
                        help="Directory in which to write exported SavedModel.")
    parser.add_argument("--to_predict", required=False, default=None, type=str,
                        help="Path to file or directory of files to run prediction on.")
    parser.add_argument("--batch_size", required=True, type=int, help="Size of each minibatch per GPU.")
    parser.add_argument("--num_iter", required=False, default=1, type=int, help="Number of iterations to run.")
    parser.add_argument("--run_iter", required=False, default=-1, type=int,
                        help="Number of training iterations to run on single run.")
    parser.add_argument("--iter_unit", default="epoch", type=str, required=False, choices=("epoch", "batch"),
                        help="Unit of iterations.")
    parser.add_argument("--warmup_steps", default=50, type=int, required=False,
                        help="Number of steps considered as warmup and not taken into account for performance "
                             "measurements.")
    parser.add_argument("--model_dir", type=str, required=False, default=None,
                        help="Directory in which to write model. If undefined, results dir will be used.")
    parser.add_argument("--results_dir", type=str, required=False, default=".",
                        help="Directory in which to write training logs, summaries and checkpoints.")
    parser.add_argument("--log_filename", type=str, required=False, default="log.json",
                        help="Name of the JSON file to which write the training log.")
    parser.add_argument("--display_every", default=10, type=int, required=False,
                        help="How often (in batches) to print out running information.")
    parser.add_argument("--seed", default=None, type=int, help="Random seed.")
    parser.add_argument("--gpu_memory_fraction", type=float, default=0.7,
                        help="Limit memory fraction used by training script for DALI.")
    parser.add_argument("--gpu_id", type=int, default=0,
                        help="Specify ID of the target GPU on multi-device platform. Effective only for "
                             "single-GPU mode.")
    parser.add_argument("--finetune_checkpoint", required=False, default=None, type=str,
                        help="Path to pre-trained checkpoint which will be used for fine-tuning "
                             "(ours or the original's TF1 checkpoint).")
    parser.add_argument("--use_final_conv", default=False, required=False, action="store_true",
                        help="Use convolution operator instead of MLP as last layer.")
    parser.add_argument("--quant_delay", type=int, default=0, required=False,
                        help="Number of steps to be run before quantization starts to happen.")
    parser.add_argument("--quantize", default=False, required=False, action="store_true",
                        help="Quantize weights and activations during training. (Defaults to Assymmetric "
                             "quantization)")
    parser.add_argument("--use_qdq", default=False, required=False, action="store_true",
                        help="Use QDQV3 op instead of FakeQuantWithMinMaxVars op for quantization. QDQv3 does "
                             "only scaling")
    parser.add_argument("--symmetric", default=False, required=False, action="store_true",
                        help="Quantize weights and activations during training using symmetric quantization.")

    dataset = parser.add_argument_group("Dataset arguments")
    dataset.add_argument("--data_dir", required=False, default=None, type=str,
                         help="Path to dataset in TFRecord format. Files should be named 'train-*' and "
                              "'validation-*'.")
    dataset.add_argument("--data_idx_dir", required=False, default=None, type=str,
                         help="Path to index files for DALI. Files should be named 'train-*' and "
                              "'validation-*'.")
    dataset.add_argument("--dali", action="store_true", default=False, required=False,
                         help="Enable DALI data input (requires --data_idx_dir).")
    dataset.add_argument("--synthetic_data_size", required=False, default=224, type=int,
                         help="Dimension of image for synthetic dataset")

    training = parser.add_argument_group("Training arguments")
    training.add_argument("--lr_init", default=0.1, type=float, required=False,
                          help="Initial value for the learning rate.")
    training.add_argument("--lr_warmup_epochs", default=5, type=int, required=False,
                          help="Number of warmup epochs for learning rate schedule.")
    training.add_argument("--weight_decay", default=1e-4, type=float, required=False,
                          help="Weight Decay scale factor.")
    training.add_argument("--weight_init", default="fan_out", choices=("fan_in", "fan_out"), type=str,
                          required=False, help="Model weight initialization method.")
    training.add_argument("--momentum", default=0.9, type=float, required=False, help="SGD momentum value.")
    training.add_argument("--label_smoothing", default=0.0, type=float, required=False,
                          help="The value of label smoothing.")
    training.add_argument("--mixup", default=0.0, type=float, required=False,
                          help="The alpha parameter for mixup (if 0 then mixup is not applied).")
    # The original meant these four spellings; a missing comma there registered `--use_cosine_lr--cosine`
    # instead (docs/ORIGINAL.md#known-bugs-of-the-original). We register the intended ones and keep the odd one
    # for old scripts.
    training.add_argument("--cosine_lr", "--use_cosine_lr", "--use_cosine", "--cosine",
                          "--use_cosine_lr--cosine", dest="cosine_lr", action="store_true", default=False,
                          required=False, help="Use cosine learning rate schedule.")

    optimisation = parser.add_argument_group("Generic optimization arguments")
    optimisation.add_argument("--xla", "--use_xla", dest="xla", action="store_true", default=False,
                              help="Enable XLA (Accelerated Linear Algebra) computation for improved "
                                   "performance.")
    optimisation.add_argument("--data_format", choices=("NHWC", "NCHW"), type=str, default="NHWC",
                              required=False, help="Data format used to do calculations")
    optimisation.add_argument("--amp", "--use_tf_amp", dest="amp", action="store_true", default=False,
                              help="Enable Automatic Mixed Precision to speedup computation using tensor "
                                   "cores (float16 on GPU, bfloat16 on CPU).")
    optimisation.add_argument("--cpu", action="store_true", dest="cpu", default=False,
                              help="Run model on CPU instead of GPU")

    amp = parser.add_argument_group("Automatic Mixed Precision arguments")
    amp.add_argument("--static_loss_scale", "--loss_scale", default=-1, type=float,
                     help="Use static loss scaling in FP32 AMP (-1 = dynamic loss scaling).")
    amp.add_argument("--use_static_loss_scaling", required=False, action="store_true",
                     help=argparse.SUPPRESS)

    extra = parser.add_argument_group("Additions (not in the original)")
    extra.add_argument("--num_classes", type=int, default=1001,
                       help="Width of the classifier. ImageNet TFRecords use labels 1..1000 and 1001 outputs; "
                            "a K-class dataset from dataprep uses labels 1..K and needs --num_classes >= K.")
    extra.add_argument("--image_size", type=int, default=224,
                       help="Training/evaluation image size (H = W) for real data. Evaluation resizes the "
                            "shorter side to image_size * 256 / 224 before the central crop.")
    extra.add_argument("--min_crop_area", type=float, default=0.05,
                       help="Smallest fraction of the image area a training crop keeps (the original: 0.05, its "
                            "ImageNet crop of 5-100%%). Raise it for small, centred images such as Fashion-MNIST.")
    extra.add_argument("--labels_file", type=str, default=None,
                       help="Class names for predict, one per line; the i-th line (from 0) names output index i. "
                            "Default: labels.txt in model_dir or data_dir when present.")
    extra.add_argument("--checkpoint_interval", type=int, default=1000,
                       help="Save a checkpoint every N training steps (the original: 1000).")
    extra.add_argument("--no_progress", action="store_true", default=False,
                       help="Never show progress bars (they are shown only when stdout is a terminal).")
    extra.add_argument("--max_skipped_steps", type=int, default=100,
                       help="With dynamic loss scaling, stop the run after this many non-finite steps in a row.")
    quiet.add_verbose_flag(extra)
    return parser


# Checks beyond argparse's type and choice checks: (predicate, message) on the parsed namespace.
_VALUE_CHECKS = (
    (lambda a: a.batch_size > 0, "--batch_size must be a positive integer (got {a.batch_size})"),
    (lambda a: a.num_iter > 0, "--num_iter must be a positive integer (got {a.num_iter})"),
    (lambda a: a.run_iter == -1 or a.run_iter > 0, "--run_iter must be -1 (all) or positive (got {a.run_iter})"),
    (lambda a: a.warmup_steps >= 0, "--warmup_steps must be >= 0 (got {a.warmup_steps})"),
    (lambda a: a.display_every > 0, "--display_every must be a positive integer (got {a.display_every})"),
    (lambda a: 0.0 < a.gpu_memory_fraction <= 1.0,
     "--gpu_memory_fraction must be in (0, 1] (got {a.gpu_memory_fraction})"),
    (lambda a: a.gpu_id >= 0, "--gpu_id must be >= 0 (got {a.gpu_id})"),
    (lambda a: a.quant_delay >= 0, "--quant_delay must be >= 0 (got {a.quant_delay})"),
    (lambda a: a.synthetic_data_size >= 32,
     "--synthetic_data_size must be at least 32 (got {a.synthetic_data_size})"),
    (lambda a: a.lr_init >= 0, "--lr_init must be >= 0 (got {a.lr_init})"),
    (lambda a: a.lr_warmup_epochs >= 0, "--lr_warmup_epochs must be >= 0 (got {a.lr_warmup_epochs})"),
    (lambda a: a.weight_decay >= 0, "--weight_decay must be >= 0 (got {a.weight_decay})"),
    (lambda a: 0 <= a.momentum < 1, "--momentum must be in [0, 1) (got {a.momentum})"),
    (lambda a: 0 <= a.label_smoothing < 1, "--label_smoothing must be in [0, 1) (got {a.label_smoothing})"),
    (lambda a: a.mixup >= 0, "--mixup must be >= 0 (got {a.mixup})"),
    (lambda a: a.static_loss_scale == -1 or a.static_loss_scale > 0,
     "--static_loss_scale must be -1 (dynamic) or positive (got {a.static_loss_scale})"),
    (lambda a: a.num_classes >= 2, "--num_classes must be at least 2 (got {a.num_classes})"),
    (lambda a: a.image_size >= 32, "--image_size must be at least 32 (got {a.image_size})"),
    (lambda a: 0 < a.min_crop_area <= 1, "--min_crop_area must be in (0, 1] (got {a.min_crop_area})"),
    (lambda a: a.checkpoint_interval > 0,
     "--checkpoint_interval must be a positive integer (got {a.checkpoint_interval})"),
    (lambda a: a.max_skipped_steps > 0, "--max_skipped_steps must be positive (got {a.max_skipped_steps})"),
    (lambda a: not (a.dali and a.data_idx_dir is None),
     "--dali needs --data_idx_dir (DALI index files; see `python -m dataprep.make_dali_index`)"),
    (lambda a: not (a.data_idx_dir and not a.data_dir),
     "--data_idx_dir needs --data_dir (the TFRecords the index files describe)"),
    (lambda a: not ((a.symmetric or a.use_qdq or a.quant_delay) and not a.quantize
                    and a.mode in ("train", "train_and_evaluate")),
     "--symmetric, --use_qdq and --quant_delay only take effect with --quantize"),
)


def validate_args(args):
    for predicate, message in _VALUE_CHECKS:
        if not predicate(args):
            raise UserError(message.format(a=args))
    return args


_NOT_GIVEN = object()


def given_flags(argv=None):
    """The destinations of the flags `argv` sets explicitly (a flag left at its default is not among them)."""
    parser = build_parser()
    parser.set_defaults(**{action.dest: _NOT_GIVEN for action in parser._actions if action.dest != "help"})
    args, _ = parser.parse_known_args(argv)
    return {dest for dest, value in vars(args).items() if value is not _NOT_GIVEN}


def parse_cmdline(argv=None):
    """Parses and validates `argv` (default sys.argv[1:]). Unknown arguments are rejected with the original's text."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        for arg in unknown:
            print("ERROR: Unknown command line arg: {}".format(arg), file=sys.stderr)
        raise UserError("Invalid command line arg(s)")
    return validate_args(args)


ORIGINAL_FLAG_DESTS = (
    "amp", "arch", "batch_size", "cosine_lr", "cpu", "dali", "data_dir", "data_format", "data_idx_dir",
    "display_every", "export_dir", "finetune_checkpoint", "gpu_id", "gpu_memory_fraction", "iter_unit",
    "label_smoothing", "log_filename", "lr_init", "lr_warmup_epochs", "mixup", "mode", "model_dir", "momentum",
    "num_iter", "quant_delay", "quantize", "results_dir", "run_iter", "seed", "static_loss_scale", "symmetric",
    "synthetic_data_size", "to_predict", "use_final_conv", "use_qdq", "use_static_loss_scaling", "warmup_steps",
    "weight_decay", "weight_init", "xla",
)
