"""runtime/config.py: the flags of the original (docs/ORIGINAL.md#command-line), their names, aliases, defaults and
choices, and the clear errors for bad values, on the command line and in a RunConfig built in Python."""

import os
import re
import subprocess
import sys

import pytest

from runtime.config import ORIGINAL_FLAG_DESTS, RunConfig, build_parser, given_flags, parse_cmdline
from utils.errors import UserError

# Every flag of the original main.py, written out independently of runtime/config.py:
# destination -> (option strings, default, a non-default value to give it).
ORIGINAL_FLAGS = {
    "arch": (("--arch",), "resnet50", "se-resnext101-32x4d"),
    "mode": (("--mode",), "train_and_evaluate", "evaluate"),
    "export_dir": (("--export_dir",), None, "/export"),
    "to_predict": (("--to_predict",), None, "/predict"),
    "batch_size": (("--batch_size",), None, 7),
    "num_iter": (("--num_iter",), 1, 3),
    "run_iter": (("--run_iter",), -1, 2),
    "iter_unit": (("--iter_unit",), "epoch", "batch"),
    "warmup_steps": (("--warmup_steps",), 50, 5),
    "model_dir": (("--model_dir",), None, "/model"),
    "results_dir": (("--results_dir",), ".", "/results"),
    "log_filename": (("--log_filename",), "log.json", "other.json"),
    "display_every": (("--display_every",), 10, 3),
    "seed": (("--seed",), None, 4),
    "gpu_memory_fraction": (("--gpu_memory_fraction",), 0.7, 0.5),
    "gpu_id": (("--gpu_id",), 0, 1),
    "finetune_checkpoint": (("--finetune_checkpoint",), None, "/ckpt"),
    "use_final_conv": (("--use_final_conv",), False, True),
    "quant_delay": (("--quant_delay",), 0, 9),
    "quantize": (("--quantize",), False, True),
    "use_qdq": (("--use_qdq",), False, True),
    "symmetric": (("--symmetric",), False, True),
    "data_dir": (("--data_dir",), None, "/data"),
    "data_idx_dir": (("--data_idx_dir",), None, "/idx"),
    "dali": (("--dali",), False, True),
    "synthetic_data_size": (("--synthetic_data_size",), 224, 64),
    "lr_init": (("--lr_init",), 0.1, 0.2),
    "lr_warmup_epochs": (("--lr_warmup_epochs",), 5, 2),
    "weight_decay": (("--weight_decay",), 1e-4, 0.5),
    "weight_init": (("--weight_init",), "fan_out", "fan_in"),
    "momentum": (("--momentum",), 0.9, 0.5),
    "label_smoothing": (("--label_smoothing",), 0.0, 0.1),
    "mixup": (("--mixup",), 0.0, 0.2),
    "cosine_lr": (("--cosine_lr", "--use_cosine_lr", "--use_cosine", "--cosine", "--use_cosine_lr--cosine"),
                  False, True),
    "xla": (("--xla", "--use_xla"), False, True),
    "data_format": (("--data_format",), "NHWC", "NCHW"),
    "amp": (("--amp", "--use_tf_amp"), False, True),
    "cpu": (("--cpu",), False, True),
    "static_loss_scale": (("--static_loss_scale", "--loss_scale"), -1, 128.0),
    "use_static_loss_scaling": (("--use_static_loss_scaling",), False, True),
}


def test_defaults_match_the_original():
    args = parse_cmdline(["--batch_size", "8"])
    expected = {dest: default for dest, (_, default, _) in ORIGINAL_FLAGS.items() if dest != "batch_size"}
    for key, value in expected.items():
        assert getattr(args, key) == value, key
    assert set(expected) == set(ORIGINAL_FLAG_DESTS) - {"batch_size"}
    assert args.num_classes == 1001 and args.image_size == 224


def test_every_original_flag_and_alias_sets_its_destination():
    parser = build_parser()
    option_strings = {action.dest: tuple(action.option_strings) for action in parser._actions}
    for dest, (options, _, value) in ORIGINAL_FLAGS.items():
        assert option_strings[dest] == options, dest
        for option in options:
            given = [option] if isinstance(value, bool) else [option, str(value)]
            argv = given if dest == "batch_size" else ["--batch_size", "1"] + given
            assert getattr(parser.parse_args(argv), dest) == value, option


def test_model_dir_defaults_to_results_dir():
    assert RunConfig().model_dir == "."
    assert RunConfig(results_dir="/r").model_dir == "/r"
    assert RunConfig(results_dir="/r", model_dir="/m").model_dir == "/m"
    assert RunConfig.from_args(parse_cmdline(["--batch_size", "1", "--results_dir", "/r"])).model_dir == "/r"


@pytest.mark.parametrize("values,message", [
    (dict(iter_unit="day"), "--iter_unit must be one of epoch, batch (got 'day')"),
    (dict(arch="resnet18"), "--arch must be one of resnet50, resnext101-32x4d, se-resnext101-32x4d (got 'resnet18')"),
    (dict(batch_size=0), "--batch_size must be a positive integer (got 0)"),
    (dict(momentum=1.0), "--momentum must be in [0, 1) (got 1.0)"),
    (dict(image_size=16), "--image_size must be at least 32 (got 16)"),
    (dict(dali=True), "--dali needs --data_idx_dir (DALI index files; see `python -m dataprep.make_dali_index`)"),
    (dict(mode="train", quant_delay=5), "--symmetric, --use_qdq and --quant_delay only take effect with --quantize"),
    (dict(mode="train_and_evaluate", use_ema_weights=True, export_dir="/e"),
     "--use_ema_weights with train_and_evaluate --export_dir needs --moving_average_decay (the EMA it would export)"),
])
def test_a_run_config_built_in_python_is_checked(values, message):
    with pytest.raises(UserError, match="^" + re.escape(message) + "$"):
        RunConfig(**values)


def test_use_ema_weights_where_it_picks_nothing_is_not_refused():
    """--mode train --use_ema_weights was refused for want of --moving_average_decay, and with it said unused
    (2026-12-07): where the flag picks no weights, the unused-flag note alone speaks."""
    assert RunConfig(mode="train", use_ema_weights=True).use_ema_weights
    assert RunConfig(mode="train_and_evaluate", use_ema_weights=True).use_ema_weights


def test_given_flags_are_the_explicit_ones_by_destination():
    assert given_flags(["--batch_size", "1", "--use_xla", "--loss_scale", "8", "--verbose"]) == {
        "batch_size", "xla", "static_loss_scale", "verbose"}


def test_the_parser_module_imports_no_tensorflow():
    code = "import sys, runtime.config; sys.exit('tensorflow' in sys.modules)"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert subprocess.run([sys.executable, "-c", code], cwd=root, timeout=60).returncode == 0


@pytest.mark.parametrize("flag,dest", [
    ("--amp", "amp"), ("--use_tf_amp", "amp"), ("--xla", "xla"), ("--use_xla", "xla"),
    ("--cosine_lr", "cosine_lr"), ("--use_cosine_lr", "cosine_lr"), ("--use_cosine", "cosine_lr"),
    ("--cosine", "cosine_lr"), ("--use_cosine_lr--cosine", "cosine_lr"),
])
def test_boolean_aliases(flag, dest):
    assert getattr(parse_cmdline(["--batch_size", "1", flag]), dest) is True


def test_loss_scale_alias_is_a_float():
    assert parse_cmdline(["--batch_size", "1", "--loss_scale", "128"]).static_loss_scale == 128.0
    assert isinstance(parse_cmdline(["--batch_size", "1", "--static_loss_scale", "64"]).static_loss_scale, float)


def test_batch_size_is_required_and_its_absence_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_cmdline([])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("ERROR: main.py: the following arguments are required: --batch_size (--help "
                                       "lists the flags)\n")
    with pytest.raises(SystemExit) as exit_info:  # --help shows it required, with no default
        parse_cmdline(["--mode", "train", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # (wrapped at the terminal's width)
    assert " --batch_size BATCH_SIZE [--num_iter" in text and "[--batch_size" not in text
    assert "Size of each minibatch per GPU. --num_iter" in text


def test_unknown_argument_prints_the_original_message(capsys):
    with pytest.raises(UserError) as error:
        parse_cmdline(["--batch_size", "1", "--no_such_flag", "3"])
    assert str(error.value) == "Unknown command line arg: --no_such_flag"  # one line: the error itself
    assert capsys.readouterr().err == ""


def test_the_value_of_an_unknown_flag_is_not_reported_as_another_unknown_arg(capsys):
    """`--batch 8` is one mistake (a misspelt --batch_size), not also an unknown `8`; a value that follows
    `--flag=value` or a known flag's value is still reported, and a negative number is a value, not a flag."""
    with pytest.raises(UserError) as error:
        parse_cmdline(["--mode", "train", "--batch", "8", "--lr", "-1", "--batch_size", "2", "--bogus=1", "stray"])
    assert capsys.readouterr().err.splitlines() + ["ERROR: " + str(error.value)] == [
        "ERROR: Unknown command line arg: --batch (did you mean --batch_size?)",
        "ERROR: Unknown command line arg: --lr (did you mean --lr_init or --lr_warmup_epochs?)",
        "ERROR: Unknown command line arg: --bogus=1",
        "ERROR: Unknown command line arg: stray"]


@pytest.mark.parametrize("flag,value", [("--arch", "resnet18"), ("--mode", "serve"), ("--iter_unit", "day"),
                                        ("--data_format", "NDHWC"), ("--weight_init", "uniform"),
                                        ("--batch_size", "eight")])
def test_bad_choice_or_type_exits_nonzero(flag, value, capsys):
    argv = ["--batch_size", "1", flag, value] if flag != "--batch_size" else [flag, value]
    with pytest.raises(SystemExit) as exit_info:
        parse_cmdline(argv)
    assert exit_info.value.code == 2
    assert flag.lstrip("-") in capsys.readouterr().err


@pytest.mark.parametrize("argv,fragment", [
    (["--batch_size", "-4"], "--batch_size must be a positive"),
    (["--batch_size", "2", "--num_iter", "0"], "--num_iter"),
    (["--batch_size", "2", "--momentum", "1.5"], "--momentum"),
    (["--batch_size", "2", "--label_smoothing", "-0.1"], "--label_smoothing"),
    (["--batch_size", "2", "--static_loss_scale", "0"], "--static_loss_scale"),
    (["--batch_size", "2", "--dali"], "--dali needs --data_idx_dir"),
    (["--batch_size", "2", "--data_idx_dir", "/x"], "--data_idx_dir needs --data_dir"),
    (["--batch_size", "2", "--mode", "train", "--symmetric"], "only take effect with --quantize"),
    (["--batch_size", "2", "--num_classes", "1"], "--num_classes"),
    (["--batch_size", "2", "--min_crop_area", "0"], "--min_crop_area must be in"),
    (["--batch_size", "2", "--min_crop_area", "1.5"], "--min_crop_area"),
    # inf passed ">= 0" and ended as "the loss became nan ... (lower --lr_init ...)"; 1000 RandAugment layers grew to
    # 5 GB before the first step (an audit, 2026-12-08)
    (["--batch_size", "2", "--mixup", "inf"], "--mixup must be a finite number (got inf)"),
    (["--batch_size", "2", "--cutmix", "inf"], "--cutmix must be a finite number (got inf)"),
    (["--batch_size", "2", "--lr_init", "inf"], "--lr_init must be a finite number (got inf)"),
    (["--batch_size", "2", "--weight_decay", "nan"], "--weight_decay must be a finite number (got nan)"),
    (["--batch_size", "2", "--augmenter_name", "randaugment", "--raug_num_layers", "1000"],
     "--raug_num_layers must be in [1, 10] (got 1000)"),
])
def test_out_of_range_values_are_clear_errors(argv, fragment):
    with pytest.raises(UserError, match=re.escape(fragment)):
        parse_cmdline(argv)


def test_predict_takes_the_dataset_flags_it_leaves_unused():
    """predict reads image files: --dali and --data_idx_dir without the dataset they need elsewhere are only noted
    unused (test_settings), not refused over a requirement predict does not have."""
    for extra in (["--dali"], ["--dali", "--data_idx_dir", "/x"], ["--data_idx_dir", "/x"]):
        config = parse_cmdline(["--batch_size", "1", "--mode", "predict", "--to_predict", "x.jpg"] + extra)
        assert config.mode == "predict" and config.dali == ("--dali" in extra)
    with pytest.raises(UserError, match=r"\-\-dali needs \-\-data_idx_dir"):
        parse_cmdline(["--batch_size", "1", "--mode", "evaluate", "--dali"])


def test_help_mentions_additions_group():
    text = build_parser().format_help()
    assert "Additions (not in the original)" in text
    assert "--num_classes" in text and "--image_size" in text
