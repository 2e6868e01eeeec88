"""Flags of the original (docs/ORIGINAL.md#command-line): names, aliases, defaults, choices, and the clear errors
for bad values."""

import pytest

from utils.cmdline_helper import ORIGINAL_FLAG_DESTS, build_parser, parse_cmdline
from utils.errors import UserError


def test_defaults_match_the_original():
    args = parse_cmdline(["--batch_size", "8"])
    expected = dict(arch="resnet50", mode="train_and_evaluate", export_dir=None, to_predict=None, num_iter=1,
                    run_iter=-1, iter_unit="epoch", warmup_steps=50, model_dir=None, results_dir=".",
                    log_filename="log.json", display_every=10, seed=None, gpu_memory_fraction=0.7, gpu_id=0,
                    finetune_checkpoint=None, use_final_conv=False, quant_delay=0, quantize=False, use_qdq=False,
                    symmetric=False, data_dir=None, data_idx_dir=None, dali=False, synthetic_data_size=224,
                    lr_init=0.1, lr_warmup_epochs=5, weight_decay=1e-4, weight_init="fan_out", momentum=0.9,
                    label_smoothing=0.0, mixup=0.0, cosine_lr=False, xla=False, data_format="NHWC", amp=False,
                    cpu=False, static_loss_scale=-1, use_static_loss_scaling=False)
    for key, value in expected.items():
        assert getattr(args, key) == value, key
    assert set(expected) == set(ORIGINAL_FLAG_DESTS) - {"batch_size"}
    assert args.num_classes == 1001 and args.image_size == 224


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


def test_batch_size_is_required(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_cmdline([])
    assert exit_info.value.code != 0
    assert "--batch_size" in capsys.readouterr().err


def test_unknown_argument_prints_the_original_message(capsys):
    with pytest.raises(UserError, match="Invalid command line arg"):
        parse_cmdline(["--batch_size", "1", "--no_such_flag", "3"])
    assert "ERROR: Unknown command line arg: --no_such_flag" in capsys.readouterr().err


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
])
def test_out_of_range_values_are_clear_errors(argv, fragment):
    with pytest.raises(UserError, match=fragment.replace("-", r"\-")):
        parse_cmdline(argv)


def test_help_mentions_additions_group():
    text = build_parser().format_help()
    assert "Additions (not in the original)" in text
    assert "--num_classes" in text and "--image_size" in text
