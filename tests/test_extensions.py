"""The training extensions from the CLI (docs/EXTENSIONS.md): all of them at once in train_and_evaluate, the EMA
through checkpoints, resume, evaluation, predict and the export tools, and the flag checks. Under the mirrored engine
they run in test_gpu_paths.py."""
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from model import checkpoint, export, resnet
from tests._cli import tool_in_process
from tests._data_helpers import write_tfrecord_shards
from tests.conftest import copy_run
from utils.ema import EMA_SUFFIX

pytestmark = pytest.mark.shallow

CLASSES, SIZE = 5, 32
DATA_FLAGS = ("--num_classes", CLASSES, "--image_size", SIZE, "--batch_size", 4, "--iter_unit", "batch",
              "--seed", 1, "--display_every", 1, "--no_progress")
EXTENSIONS = ("--grad_accum_steps", 2, "--moving_average_decay", 0.9, "--augmenter_name", "randaugment",
              "--cutmix", 1.0, "--mixup", 0.2)


def run(script, *args):
    """`python <script> args` called in-process (tests/_cli.py)."""
    return tool_in_process(script.removesuffix(".py"), *args, check=False)


def checkpoint_values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("data")
    write_tfrecord_shards(str(directory), "train", 2, 8, 40, num_classes=CLASSES + 1)
    write_tfrecord_shards(str(directory), "validation", 1, 6, 40, num_classes=CLASSES + 1, seed=1)
    return directory


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    """train_and_evaluate with every extension at once: 3 optimizer steps of 2 x 4 images, EMA exported. (Micro-batches
    of 2 would make BN's batch variance at 1x1 spatial size too small: the weights blow up in 3 steps, with or
    without the extensions.)"""
    results = tmp_path_factory.mktemp("all_extensions")
    result = run("main.py", "--mode", "train_and_evaluate", "--data_dir", data_dir, "--results_dir", results,
                 "--num_iter", 3, "--export_dir", results / "export", "--use_ema_weights", *DATA_FLAGS, *EXTENSIONS)
    return results, result


@pytest.mark.slow
def test_every_extension_at_once_trains_evaluates_both_weights_and_exports_the_ema(trained):
    results, result = trained
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for line in ("Gradient accumulation: 2 micro-batches of 4 per step and GPU; effective batch 8",
                 "EMA of the weights and BN statistics, decay min(0.9, (1 + step) / (10 + step))",
                 "Using CutMix with alpha=1 (0.5 of the images; the others mixup)",
                 "Augmentation: RandAugment, 2 layers at magnitude 9",
                 "Total Steps 3", "Evaluating the EMA weights of", "Exporting the EMA weights (--use_ema_weights)"):
        assert line in out, line
    assert "grad_accum_steps : 2" in out and "augmenter_name : randaugment" in out  # the PARAMETER line
    assert "ema_top1_accuracy" in out and "ema_top5_accuracy" in out
    prefix = str(results / "model.ckpt-3")
    values = checkpoint_values(prefix)
    model = resnet.build_model("resnet50", num_classes=CLASSES, image_size=SIZE)
    averaged = checkpoint.average_keys(model, "resnet50")
    assert len(averaged) == len(resnet.averaged_variables(model)) == len(model.variables)
    assert set(averaged) <= set(values)
    assert sum(key.endswith(EMA_SUFFIX) for key in values) == len(averaged)
    raw_key = "resnet50/conv2d/conv2d/kernel"
    assert not np.allclose(values[raw_key], values[raw_key + EMA_SUFFIX])
    # The exported SavedModel holds the EMA weights: its outputs are those of a model loaded with them.
    info = checkpoint.inspect(prefix)
    assert info.has_weight_averages
    checkpoint.restore_model(model, info, "resnet50", "test")
    checkpoint.load_averages(model, info, "resnet50", "test")
    exported = [os.path.join(results / "export", name) for name in os.listdir(results / "export")]
    _, serve = export.load_serving_signature(exported[0])
    images = np.random.default_rng(0).uniform(0, 255, (2, SIZE, SIZE, 3)).astype("f4")
    expected = tf.nn.softmax(model(images, training=False)).numpy()
    np.testing.assert_allclose(serve(input=tf.constant(images))["probabilities"].numpy(), expected, atol=1e-5)


@pytest.mark.slow
def test_resumed_ema_continues_the_recurrence_from_the_checkpoint(trained, data_dir):
    """One more step after resuming: EMA_4 = EMA_3 - (1 - d) (EMA_3 - W_4), d = min(0.9, (1 + 3) / (10 + 3)), for
    the saved values of steps 3 and 4 (so the averages were restored, not restarted)."""
    results, first = trained
    assert first.returncode == 0
    result = run("main.py", "--mode", "train", "--data_dir", data_dir, "--results_dir", results, "--num_iter", 4,
                 *DATA_FLAGS, *EXTENSIONS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "with EMA weights" in result.stdout and "Current step: 3" in result.stdout
    before, after = checkpoint_values(str(results / "model.ckpt-3")), checkpoint_values(str(results / "model.ckpt-4"))
    decay = min(0.9, 4 / 13)
    for key in ("resnet50/conv2d/conv2d/kernel", "resnet50/output/dense/bias",
                "resnet50/conv2d/BatchNorm/moving_mean"):
        ema = before[key + EMA_SUFFIX]
        np.testing.assert_allclose(after[key + EMA_SUFFIX], ema - (1 - decay) * (ema - after[key]), rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.slow
def test_ema_weights_in_predict_and_the_frozen_graph_and_refused_without_them(trained, data_dir, tmp_path,
                                                                              trained_run):
    results, first = trained
    assert first.returncode == 0
    photo = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(photo)
    predicted = run("main.py", "--mode", "predict", "--model_dir", results, "--results_dir", tmp_path / "p",
                    "--to_predict", photo, "--batch_size", 1, "--use_ema_weights")
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    assert "Using the EMA weights of" in predicted.stdout
    graph = run("export_frozen_graph.py", "--checkpoint", results, "--num_classes", CLASSES, "--image_size", SIZE,
                "--compute_format", "NHWC", "--input_format", "NHWC", "--output_file", tmp_path / "g.pb",
                "--use_ema_weights")
    assert graph.returncode == 0, graph.stderr[-2000:]
    assert "Using the EMA weights of" in graph.stdout
    # Without the flag the raw weights are used, and every tool says so (the checkpoint's description, "with EMA
    # weights", would read as if the EMA ones were).
    raw_line = "it also holds EMA weights, which --use_ema_weights would use"
    predicted = run("main.py", "--mode", "predict", "--model_dir", results, "--results_dir", tmp_path / "p_raw",
                    "--to_predict", photo, "--batch_size", 1)
    assert predicted.returncode == 0 and raw_line in predicted.stdout
    assert "Using the EMA weights" not in predicted.stdout
    graph = run("export_frozen_graph.py", "--checkpoint", results, "--num_classes", CLASSES, "--image_size", SIZE,
                "--compute_format", "NHWC", "--input_format", "NHWC", "--output_file", tmp_path / "g_raw.pb")
    assert graph.returncode == 0 and raw_line in graph.stdout
    # evaluate reports both weights' accuracy, so it says which ones it exports, and exports them
    evaluated = run("main.py", "--mode", "evaluate", "--data_dir", data_dir, "--model_dir", results,
                    "--results_dir", tmp_path / "ev", "--batch_size", 2, "--export_dir", tmp_path / "raw_export")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "Exporting the raw weights (--use_ema_weights would export the EMA ones)" in evaluated.stdout
    assert raw_line not in evaluated.stdout and "ema_top1_accuracy" in evaluated.stdout
    model = resnet.build_model("resnet50", num_classes=CLASSES, image_size=SIZE)
    latest = checkpoint.inspect(checkpoint.find_checkpoint(str(results), "test"))  # step 4 after the resume test
    checkpoint.restore_model(model, latest, "resnet50", "test")
    exported = [os.path.join(tmp_path / "raw_export", name) for name in os.listdir(tmp_path / "raw_export")]
    _, serve = export.load_serving_signature(exported[0])
    images = np.random.default_rng(0).uniform(0, 255, (2, SIZE, SIZE, 3)).astype("f4")
    np.testing.assert_allclose(serve(input=tf.constant(images))["probabilities"].numpy(),
                               tf.nn.softmax(model(images, training=False)).numpy(), atol=1e-5)
    # A run without --moving_average_decay: its checkpoint has no EMA, and asking for it is an error.
    plain = copy_run(trained_run, tmp_path / "plain")  # one step of CLASSES classes at SIZE, no EMA
    refused = run("main.py", "--mode", "evaluate", "--data_dir", data_dir, "--results_dir", plain, "--batch_size", 2,
                  "--export_dir", tmp_path / "e", "--use_ema_weights")
    assert refused.returncode == 2
    assert "has no EMA weights (train with --moving_average_decay" in refused.stderr
    evaluated = run("main.py", "--mode", "evaluate", "--data_dir", data_dir, "--results_dir", plain, "--batch_size", 2)
    assert evaluated.returncode == 0 and "ema_top1_accuracy" not in evaluated.stdout
    logged = (plain / "log.json").read_text()
    refused = run("main.py", "--mode", "evaluate", "--data_dir", data_dir, "--results_dir", plain, "--batch_size", 2,
                  "--use_ema_weights")
    assert refused.returncode == 2 and "has no EMA weights" in refused.stderr
    # refused with the run's settings, before its log (it was refused at the restore, its PARAMETER record written)
    assert "Restored" not in refused.stdout and (plain / "log.json").read_text() == logged
    # where the checkpoint has them, an evaluation without an export reports both: the flag picks nothing, said
    evaluated = run("main.py", "--mode", "evaluate", "--data_dir", data_dir, "--model_dir", results, "--results_dir",
                    tmp_path / "ev_flag", "--batch_size", 2, "--use_ema_weights")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert ("Note: --use_ema_weights picks nothing here: this evaluation reports both the raw and the EMA weights' "
            "accuracy (the flag picks the weights an --export_dir export takes)") in evaluated.stdout.splitlines()
    # Turning the EMA on in a directory whose checkpoint has none starts the averages from its weights.
    resumed = run("main.py", "--mode", "train", "--data_dir", data_dir, "--results_dir", plain, "--num_iter", 2,
                  *DATA_FLAGS, "--moving_average_decay", 0.99)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "The checkpoint has no EMA weights: the averages start from its weights" in resumed.stdout


@pytest.mark.parametrize("flags, message", [
    (("--augmenter_name", "autoaugment", "--dali", "--data_idx_dir", "i", "--data_dir", "d"),
     "--augmenter_name is implemented in the TFRecord pipeline only"),
    (("--raug_magnitude", 5), "--raug_magnitude only take effect with --augmenter_name randaugment"),
    (("--mixup_switch_prob", 0.2, "--mixup", 0.2), "--mixup_switch_prob only takes effect with both"),
    (("--grad_accum_steps", 0), "--grad_accum_steps must be a positive integer (got 0)"),
    (("--moving_average_decay", 1.0), "--moving_average_decay must be in [0, 1) (got 1.0)"),
    (("--raug_magnitude", 11, "--augmenter_name", "randaugment"), "--raug_magnitude must be in [0, 10]"),
    (("--cutmix", -1), "--cutmix must be >= 0"),
    (("--use_ema_weights", "--mode", "train_and_evaluate", "--export_dir", "e"),
     "--use_ema_weights with train_and_evaluate --export_dir needs --moving_average_decay"),
])
def test_extension_flags_are_checked(flags, message):
    from runtime.config import parse_cmdline
    from utils.errors import UserError
    with pytest.raises(UserError) as raised:
        parse_cmdline(["--batch_size", "2", *map(str, flags)])
    assert message in str(raised.value)


def test_extension_flags_have_their_own_help_group_and_are_not_original():
    from runtime import config
    text = config.build_parser().format_help()
    assert config.EXTENSIONS in text
    for name in ("moving_average_decay", "grad_accum_steps", "augmenter_name", "raug_num_layers", "raug_magnitude",
                 "cutmix", "mixup_switch_prob", "use_ema_weights"):
        assert name not in config.ORIGINAL_FLAG_DESTS
    assert config.RunConfig().extensions_in_use() == {}
    assert config.RunConfig(cutmix=0.5).extensions_in_use() == {"cutmix": 0.5}
    args = config.parse_cmdline(["--batch_size", "2", "--cutmix_alpha", "0.3"])
    assert args.cutmix == 0.3
