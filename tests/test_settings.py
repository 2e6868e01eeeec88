"""runtime/settings.py: one resolution of a run's settings from the flags given, the checkpoint's metadata and the
dataset's manifest. In-process, on checkpoints that hold only what `inspect` reads (metadata and key names)."""
import dataclasses
import os
import re

import numpy as np
import pytest

from model import checkpoint
from runtime import settings
from runtime.config import RunConfig, given_options
from utils.ema import EMA_SUFFIX
from utils.errors import UserError


def fake_checkpoint(directory, step=3, arch="resnet50", num_classes=10, image_size=32, use_final_conv=False,
                    slots=True, ranges=False, averages=False, training=None, lineage=None):
    """A named-format checkpoint with the metadata and the kinds of keys a real one has, and nothing else."""
    os.makedirs(directory, exist_ok=True)
    kernel = f"{arch}/conv2d/conv2d/kernel"
    entries = {checkpoint.GLOBAL_STEP_KEY: np.int64(step), kernel: np.zeros([1], np.float32)}
    if slots:
        entries[kernel + checkpoint.SLOT_SUFFIX] = np.zeros([1], np.float32)
    if ranges:
        entries[f"{arch}/conv2d/quant_min"] = np.zeros([], np.float32)
    if averages:
        entries[kernel + EMA_SUFFIX] = np.zeros([1], np.float32)
    name = f"model.ckpt-{step}"
    meta = dict(checkpoint.metadata(arch, num_classes, image_size, use_final_conv, False, training), step=step)
    if lineage is not None:
        meta["lineage"] = lineage
    checkpoint.write(os.path.join(str(directory), name), entries, meta)
    checkpoint.write_state_file(str(directory), [name])
    return os.path.join(str(directory), name)


UNRECORDED_TRAINING = re.compile(r"^Note: checkpoint \S+ does not record its training's ")


def collect(lines):
    """A log that appends to `lines` all but the line resolve leaves out by default."""
    return lambda line: None if UNRECORDED_TRAINING.match(line) else lines.append(line)


def resolve(model_dir, given=(), unrecorded_note=False, **flags):
    """settings.resolve's result and its lines; most tests fake checkpoints that record only what they are about,
    so the line saying a resume cannot compare the rest (test_a_resume_says_what_its_checkpoint_does_not_record)
    is left out unless `unrecorded_note`."""
    lines = []
    flags.setdefault("batch_size", 2)
    resolved = settings.resolve(RunConfig(model_dir=str(model_dir), **flags), set(given) | set(flags),
                                log=lines.append)
    return resolved, [line for line in lines if unrecorded_note or not UNRECORDED_TRAINING.match(line)]


def using(path, *flags):
    """The lines saying each of `flags` was taken from checkpoint `path`."""
    return [f"Using {flag} from checkpoint {path}" for flag in flags]


# ---------------------------------------------------------------- the model a checkpoint fixes

def test_inference_takes_the_checkpoints_model_and_says_so(tmp_path):
    path = fake_checkpoint(tmp_path, arch="resnext101-32x4d", num_classes=10, image_size=48, use_final_conv=True)
    resolved, lines = resolve(tmp_path, mode="predict", to_predict=str(tmp_path))
    config = resolved.config
    assert (config.arch, config.num_classes, config.image_size, config.use_final_conv) == (
        "resnext101-32x4d", 10, 48, True)
    assert lines == using(path, "--arch resnext101-32x4d", "--num_classes 10", "--image_size 48", "--use_final_conv")
    assert resolved.checkpoint.path == path
    assert resolved.parameters() == {"checkpoint": path, "settings_from_checkpoint": [
        "arch", "image_size", "num_classes", "use_final_conv"], "working_directory": os.getcwd(),
        "class_names_file": None}


def test_predicts_record_names_the_labels_file_its_class_names_come_from(tmp_path, monkeypatch):
    """The record said `labels_file: None` (the flag) while the run took model_dir's labels.txt (2026-12-07)."""
    fake_checkpoint(tmp_path / "run", num_classes=3)
    data = tmp_path / "data"
    data.mkdir()
    (data / "labels.txt").write_text("a\nb\nc\n")
    monkeypatch.chdir(tmp_path)

    def recorded(**flags):
        return resolve(tmp_path / "run", mode="predict", to_predict=str(tmp_path), **flags)[0].parameters()[
            "class_names_file"]

    assert recorded(data_dir="data") == str(data / "labels.txt")  # model_dir has none: --data_dir's
    (tmp_path / "run" / "labels.txt").write_text("")  # an empty file names no class
    assert recorded(data_dir="data") == str(data / "labels.txt")
    (tmp_path / "run" / "labels.txt").write_text("x\ny\nz\n")
    assert recorded(data_dir="data") == str(tmp_path / "run" / "labels.txt")
    assert recorded(labels_file="data/labels.txt") == str(data / "labels.txt")
    assert "class_names_file" not in resolve(tmp_path / "run", mode="evaluate")[0].parameters()


def test_the_record_names_the_checkpoint_read_absolutely_and_where_a_link_led(tmp_path, monkeypatch):
    """`--model_dir ./qslink/` logged `"checkpoint": "./qslink/model.ckpt-3"`: relative, and silent on the directory
    the link leads to, while the class names' line of the same run was absolute."""
    path = fake_checkpoint(tmp_path / "real")
    os.symlink(tmp_path / "real", tmp_path / "qslink")
    monkeypatch.chdir(tmp_path)
    resolved, _ = resolve("./qslink/", mode="predict", to_predict=str(tmp_path))
    parameters = resolved.parameters()
    assert parameters["checkpoint"] == str(tmp_path / "qslink" / os.path.basename(path))
    assert parameters["checkpoint_target"] == path
    resolved, _ = resolve(tmp_path / "real", mode="predict", to_predict=str(tmp_path))
    assert resolved.parameters()["checkpoint"] == path and "checkpoint_target" not in resolved.parameters()


@pytest.mark.parametrize("flag,value,recorded", [("num_classes", 7, 10), ("image_size", 224, 32),
                                                 ("arch", "se-resnext101-32x4d", "resnet50")])
def test_a_given_flag_that_contradicts_the_checkpoint_is_refused_naming_both(tmp_path, flag, value, recorded):
    path = fake_checkpoint(tmp_path)
    with pytest.raises(UserError) as error:
        resolve(tmp_path, mode="evaluate", **{flag: value})
    assert str(error.value) == (f"--{flag} {value} contradicts checkpoint {path}, trained with --{flag} {recorded} "
                                "(omit the flag to use the checkpoint's)")


def test_the_synthetic_inference_benchmark_runs_at_the_checkpoints_size(tmp_path):
    fake_checkpoint(tmp_path, image_size=32)
    config = resolve(tmp_path, mode="inference_benchmark")[0].config
    assert (config.synthetic_data_size, config.input_size, config.num_classes) == (32, 32, 10)
    # Another size of synthetic images is a choice: the model takes any size.
    config = resolve(tmp_path, mode="inference_benchmark", synthetic_data_size=64)[0].config
    assert config.input_size == 64


@pytest.mark.parametrize("mode", ["training_benchmark", "inference_benchmark"])
def test_a_synthetic_benchmark_runs_at_a_given_image_size(tmp_path, mode):
    resolved, lines = resolve(tmp_path / "new", mode=mode, image_size=40)
    assert (resolved.config.synthetic_data_size, resolved.config.input_size) == (40, 40)
    assert lines == ["Using --synthetic_data_size 40 from --image_size 40"]
    assert resolved.adopted == {}  # taken from a flag, not from a checkpoint
    # Given alone, --synthetic_data_size is the size, as in the original, and the model is built at it (its
    # PARAMETER record and export say 48, not --image_size's default 224).
    resolved, lines = resolve(tmp_path / "new", mode=mode, synthetic_data_size=48)
    assert (resolved.config.input_size, resolved.config.image_size) == (48, 48)
    assert lines == ["Using --image_size 48 from --synthetic_data_size 48"]
    assert resolve(tmp_path / "new", mode=mode, image_size=48, synthetic_data_size=48)[0].config.input_size == 48
    with pytest.raises(UserError) as error:
        resolve(tmp_path / "new", mode=mode, image_size=40, synthetic_data_size=64)
    assert str(error.value) == ("--image_size 40 and --synthetic_data_size 64 disagree: a benchmark on synthetic "
                                "data runs at one size (give one of them)")


def test_a_synthetic_training_benchmark_says_the_input_augmentation_flags_are_unused(tmp_path):
    """Synthetic batches skip the input pipeline, so an augmenter or crop area given there would time nothing of
    what it names; mixup and CutMix run in the train step and stay."""
    lines = resolve(tmp_path / "new", mode="training_benchmark", augmenter_name="autoaugment", min_crop_area=0.5,
                    cutmix=1.0)[1]
    assert [line for line in lines if line.startswith("Note:")] == [
        "Note: --augmenter_name and --min_crop_area are not used: synthetic images are not augmented (this benchmark "
        "reads no --data_dir)"]
    from tests._data_helpers import write_tfrecord_shards
    write_tfrecord_shards(str(tmp_path / "data"), "train", 1, 4, 32)
    assert not [line for line in resolve(tmp_path / "new", mode="training_benchmark", data_dir=str(tmp_path / "data"),
                                         augmenter_name="autoaugment")[1] if line.startswith("Note:")]


@pytest.mark.parametrize("flags", [{"image_size": 40}, {"synthetic_data_size": 40},
                                   {"image_size": 40, "synthetic_data_size": 40}])
def test_a_given_size_sizes_the_synthetic_images_of_a_checkpoints_model_whichever_flag_gave_it(tmp_path, flags):
    """The same benchmark recorded `image_size: 40` when typed with --image_size 40 and 32 (the checkpoint's) with
    --synthetic_data_size 40 (2026-12-07): the record now says the model's size and the images' alike."""
    path = fake_checkpoint(tmp_path, image_size=32)
    resolved, lines = resolve(tmp_path, mode="inference_benchmark", **flags)
    assert (resolved.config.input_size, resolved.config.synthetic_data_size, resolved.config.image_size) == (40, 40, 32)
    assert lines == ["Using --synthetic_data_size 40 from --image_size 40"] * (flags == {"image_size": 40}) + [
        f"Using --num_classes 10 from checkpoint {path}", f"Using --image_size 32 from checkpoint {path}",
        f"Note: this benchmark times synthetic 40x40 images; checkpoint {path} was trained at 32x32 (the model "
        "takes any size)"]


@pytest.mark.parametrize("flag", ["image_size", "synthetic_data_size"])
def test_a_benchmark_that_exports_times_the_model_it_exports_at_its_trained_size(tmp_path, flag):
    """inference_benchmark --export_dir writes the model it timed: at another size than the checkpoint's it would be
    a 64 px model of 40 px weights (26.8% against 80.75% on the quick start's data), so that is refused; the
    checkpoint's size exports, and fresh weights export at --image_size."""
    path = fake_checkpoint(tmp_path, image_size=32)
    export = {"mode": "inference_benchmark", "export_dir": str(tmp_path / "export")}
    with pytest.raises(UserError) as error:
        resolve(tmp_path, **export, **{flag: 40})
    assert str(error.value) == (
        f"--{flag} 40 but --export_dir exports the model at 32x32 (the size checkpoint {path} was trained at): a "
        "benchmark that exports times the model it exports (time another size without --export_dir)")
    assert resolve(tmp_path, **export)[0].config.input_size == 32
    # Fresh weights: the model is built, timed and exported at the size given by either flag.
    assert resolve(tmp_path / "new", **export, synthetic_data_size=48)[0].config.image_size == 48
    assert resolve(tmp_path / "new", **export, image_size=48)[0].config.input_size == 48


def test_evaluate_says_synthetic_data_size_unused_at_the_size_the_checkpoint_gives(tmp_path, monkeypatch):
    path = fake_checkpoint(tmp_path, image_size=32)
    monkeypatch.setattr(settings, "check_data", lambda *_, **__: {})  # the dataset's checks are not this test's
    lines = []
    config = RunConfig(mode="evaluate", model_dir=str(tmp_path), data_dir=str(tmp_path), batch_size=2,
                       synthetic_data_size=64)
    settings.resolve(config, {"synthetic_data_size", "data_dir", "model_dir"}, log=lines.append)
    assert lines[-1] == (f"Note: --synthetic_data_size 64 is not used: this run reads its images from --data_dir at "
                         "--image_size 32")
    assert f"Using --image_size 32 from checkpoint {path}" in lines


def test_a_run_on_real_images_says_it_leaves_synthetic_data_size_unused(tmp_path):
    lines = []
    fake_checkpoint(tmp_path / "run", image_size=40)
    config = RunConfig(mode="predict", model_dir=str(tmp_path / "run"), to_predict=str(tmp_path),
                       synthetic_data_size=64, image_size=40, num_classes=10)
    assert settings.resolve(config, {"synthetic_data_size", "image_size"}, log=lines.append).config.input_size == 40
    assert lines == ["Note: --synthetic_data_size 64 is not used: this run reads no synthetic data"]


def test_a_dense_checkpoint_serves_a_final_conv_run_and_says_so(tmp_path):
    path = fake_checkpoint(tmp_path, use_final_conv=False)
    resolved, lines = resolve(tmp_path, mode="evaluate", use_final_conv=True)
    assert resolved.config.use_final_conv
    assert lines[-1] == (f"Note: checkpoint {path} holds its classifier as a dense layer; this run builds it as a "
                         "1x1 conv (--use_final_conv), from the same weights")
    resolved, lines = resolve(tmp_path, mode="train", use_final_conv=True)
    assert [line for line in lines if "classifier" in line][0].endswith(
        "from the same weights, and the checkpoints it writes hold that form")


def test_training_benchmark_times_the_checkpoints_model_and_says_it_restores_nothing(tmp_path):
    path = fake_checkpoint(tmp_path, arch="resnext101-32x4d", num_classes=10, image_size=40, ranges=True)
    resolved, lines = resolve(tmp_path, mode="training_benchmark")
    config = resolved.config
    assert (config.arch, config.num_classes, config.input_size, config.quantize) == (
        "resnext101-32x4d", 10, 40, False)
    assert lines == using(path, "--arch resnext101-32x4d", "--num_classes 10", "--image_size 40",
                          "--synthetic_data_size 40") + [
        f"Note: training_benchmark times the model of checkpoint {path} from fresh weights; it restores no "
        "checkpoint and writes none (the checkpoint's quantisation-aware training needs --quantize here)"]
    # A checkpoint trained with weight averaging: its update is not in the step timed unless asked for.
    averaged = fake_checkpoint(tmp_path / "ema", num_classes=10, image_size=40, averages=True, ranges=True,
                               training={"quantize": True, "moving_average_decay": 0.999})
    assert resolve(tmp_path / "ema", mode="training_benchmark")[1][-1].endswith(
        "(the checkpoint's quantisation-aware training needs --quantize and its weight averaging needs "
        "--moving_average_decay 0.999 here)")
    assert resolve(tmp_path / "ema", mode="training_benchmark", quantize=True, moving_average_decay=0.5)[1][-1] == (
        f"Note: training_benchmark times the model of checkpoint {averaged} from fresh weights; it restores no "
        "checkpoint and writes none")
    # A checkpoint trained with --amp: a benchmark without it timed float32 and did not say so (2026-12-07).
    mixed = fake_checkpoint(tmp_path / "amp", num_classes=10, image_size=40, training={"amp": True})
    assert resolve(tmp_path / "amp", mode="training_benchmark")[1][-1] == (
        f"Note: training_benchmark times the model of checkpoint {mixed} from fresh weights; it restores no "
        "checkpoint and writes none (the checkpoint's mixed precision needs --amp here)")
    assert resolve(tmp_path / "amp", mode="training_benchmark", amp=True)[1][-1].endswith("and writes none")
    # Synthetic images of another size are a choice; another classifier is not.
    assert resolve(tmp_path, mode="training_benchmark", image_size=64)[0].config.input_size == 64
    with pytest.raises(UserError, match="--num_classes 1001 contradicts checkpoint"):
        resolve(tmp_path, mode="training_benchmark", num_classes=1001)


def test_training_without_a_checkpoint_keeps_the_flags(tmp_path):
    resolved, lines = resolve(tmp_path / "new", mode="train")
    assert resolved.config == RunConfig(model_dir=str(tmp_path / "new"), mode="train", batch_size=2)
    assert resolved.checkpoint is None and lines == []


# ---------------------------------------------------------------- the training state a resume continues

def test_a_resume_continues_quantisation_aware_training(tmp_path):
    path = fake_checkpoint(tmp_path, ranges=True, training={"quantize": True, "symmetric": True, "use_qdq": False,
                                                            "quant_delay": 100, "moving_average_decay": 0.0})
    resolved, lines = resolve(tmp_path, mode="train", num_classes=10, image_size=32)
    config = resolved.config
    assert (config.quantize, config.symmetric, config.quant_delay) == (True, True, 100)
    assert lines[0] == (f"Using --quantize from checkpoint {path}: it holds quantisation ranges, which this run "
                        "keeps training")
    with pytest.raises(UserError, match="^--quant_delay 5 contradicts checkpoint"):
        resolve(tmp_path, mode="train", quantize=True, quant_delay=5)


def test_a_setting_the_checkpoint_does_not_record_is_assumed_with_a_warning(tmp_path):
    """An object-based checkpoint of this port's first versions records no image size, and a QAT checkpoint of
    before the training record no grid: a run took the defaults (224 px, asymmetric FakeQuant) without a word, so
    a 32 px model was evaluated at 224 and a resume recorded 224 as its size. Now the assumption is said."""
    from tests._checkpoint_helpers import save_object_based, small_model
    path, _ = save_object_based(tmp_path / "object", small_model())
    resolved, lines = resolve(tmp_path / "object", mode="predict", to_predict=str(tmp_path))
    assert resolved.config.image_size == 224
    assert lines[0] == (f"WARNING: checkpoint {path} does not record --image_size (an object-based checkpoint of an "
                        "earlier version of this port): this run assumes --image_size 224; pass --image_size if it "
                        "was trained otherwise")
    resolved, lines = resolve(tmp_path / "object", mode="predict", to_predict=str(tmp_path), image_size=32)
    assert resolved.config.image_size == 32 and not any("does not record" in line for line in lines)
    path = fake_checkpoint(tmp_path / "qat", ranges=True, training=None)
    resolved, lines = resolve(tmp_path / "qat", mode="train", num_classes=10, image_size=32, quantize=True,
                              symmetric=True)
    assert f"WARNING: checkpoint {path} does not record --use_qdq (metadata of an earlier version of this port, " \
           "or converted from one): this run assumes no --use_qdq; pass --use_qdq if it was trained otherwise" in lines
    resolved, lines = resolve(tmp_path / "qat", mode="train", num_classes=10, image_size=32)
    assert f"WARNING: checkpoint {path} does not record --symmetric or --use_qdq (metadata of an earlier version " \
           "of this port, or converted from one): this run assumes no --symmetric, no --use_qdq; pass --symmetric " \
           "and --use_qdq if it was trained otherwise" in lines


def test_a_resume_says_what_its_checkpoint_does_not_record(tmp_path):
    """A checkpoint of before the schedule, precision and recipe were recorded resumed at another learning rate,
    batch or precision without a note (the notes compare with those records): that they cannot be compared is
    said instead. A checkpoint this code writes records them all."""
    model = {"mode": "train", "num_classes": 10, "image_size": 32}
    path = fake_checkpoint(tmp_path / "older", training={"moving_average_decay": 0.0})
    lines = resolve(tmp_path / "older", unrecorded_note=True, **model)[1]
    assert lines == [f"Note: checkpoint {path} does not record its training's learning-rate schedule, images per "
                     "step, precision, training flags (--weight_decay, --momentum, augmentation) or input and --seed "
                     "(metadata of an earlier version of this port, or converted from one): whether this run "
                     "continues them unchanged is not checked"]
    config = RunConfig(batch_size=2, **model)
    state = dict(settings.training_state(config), schedule=settings.schedule_record(config, 100, 100, 10.0))
    fake_checkpoint(tmp_path / "now", training=state)
    assert not any("does not record" in line for line in resolve(tmp_path / "now", unrecorded_note=True, **model)[1])


def test_a_resume_behind_its_log_says_which_steps_it_trains_again(tmp_path):
    """A session killed between checkpoints (kill -9, a lost node) logged steps its checkpoints do not hold: the
    resume trained and logged them again without a word. The steps trained again end at the last this run trains:
    a run that stops before the earlier session's last logged step does not train the steps after it (it said it
    did, up to the logged one), and a run that trains none trains none again."""
    from tests.test_logger import write_training_log
    # --num_iter 10 steps on synthetic data (the default, 1, trains nothing from step 3)
    model = {"mode": "train", "num_classes": 10, "image_size": 32, "results_dir": str(tmp_path), "num_iter": 10,
             "iter_unit": "batch"}
    path = fake_checkpoint(tmp_path, step=3, training={"moving_average_decay": 0.0})
    write_training_log(tmp_path / "log.json", [({"mode": "train", "model_dir": str(tmp_path)}, [1, 2, 3, 4, 5])])
    assert resolve(tmp_path, **model)[1] == [
        f"Note: the log {tmp_path}/log.json records steps up to 5 of an earlier session of this training, past its "
        f"last checkpoint: this run resumes from checkpoint {path} at step 3 and trains steps 4-5 "
        "again (logged twice; plot_log keeps the later)"]
    ends = {"steps up to 5": dict(model, num_iter=5), "step 4 again": dict(model, num_iter=4),
            "run_iter": dict(model, run_iter=1)}  # --run_iter 1: steps 4 of the 10
    assert resolve(tmp_path, **ends["steps up to 5"])[1][0].endswith("trains steps 4-5 again (logged twice; plot_log "
                                                                     "keeps the later)")
    for flags in (ends["step 4 again"], ends["run_iter"]):
        assert resolve(tmp_path, **flags)[1] == [
            f"Note: the log {tmp_path}/log.json records steps up to 5 of an earlier session of this training, past "
            f"its last checkpoint: this run resumes from checkpoint {path} at step 3 and trains step 4 again (logged "
            "twice; plot_log keeps the later)"]
    assert resolve(tmp_path, **dict(model, num_iter=3))[1] == []  # at its last step already: trains nothing
    (tmp_path / "log.json").unlink()  # a session that checkpointed its last step (Ctrl-C, SIGTERM)
    write_training_log(tmp_path / "log.json", [({"mode": "train", "model_dir": str(tmp_path)}, [1, 3])])
    assert resolve(tmp_path, **model)[1] == []


def test_a_training_keeps_its_id_through_resumes_and_finds_its_sessions_in_the_log_wherever_it_was(tmp_path):
    """Every training run gets a session id; a resume keeps the checkpoint's training id and names the session
    that wrote it. The steps-again note follows those sessions, not the model_dir's path: a model_dir moved (or
    copied with its log) gets the note, and another training once logged under the same path does not give a
    false one."""
    from tests.test_logger import write_training_log
    model = {"mode": "train", "num_classes": 10, "image_size": 32, "results_dir": str(tmp_path), "num_iter": 10,
             "iter_unit": "batch"}
    fresh = resolve(tmp_path / "new", **model)[0]
    assert set(fresh.lineage) == {"id", "session", "resumes"} and fresh.lineage["resumes"] is None
    assert fresh.parameters()["training"] == fresh.lineage
    again = resolve(tmp_path / "new", **model)[0]
    assert again.lineage["id"] != fresh.lineage["id"] and again.lineage["session"] != fresh.lineage["session"]
    path = fake_checkpoint(tmp_path / "moved", step=3, training={"moving_average_decay": 0.0},
                           lineage={"id": "t1", "session": "s1"})
    write_training_log(tmp_path / "log.json", [
        ({"mode": "train", "model_dir": "/before/the/move", "training": {"id": "t1", "session": "s1"}}, [1, 5]),
        ({"mode": "train", "model_dir": str(tmp_path / "moved"), "training": {"id": "t0", "session": "s0"}}, [9]),
    ])
    resolved, lines = resolve(tmp_path / "moved", **model)
    assert resolved.lineage["id"] == "t1" and resolved.lineage["resumes"] == "s1"
    assert resolved.lineage["session"] not in ("s1", "s0")
    assert lines == [
        f"Note: the log {tmp_path}/log.json records steps up to 5 of an earlier session of this training, past its "
        f"last checkpoint: this run resumes from checkpoint {path} at step 3 and trains steps 4-5 "
        "again (logged twice; plot_log keeps the later)"]
    assert resolve(tmp_path / "moved", mode="evaluate", num_classes=10, image_size=32)[0].lineage == {}


def test_a_checkpoint_that_records_no_training_id_gives_its_training_one_id_from_itself(tmp_path):
    """A checkpoint written before training ids (no `lineage` in its metadata) took a new random id on every resume
    until a session saved: a session killed before it saved and the resume after it logged two ids for one
    training. The id is now derived from the checkpoint's .index file: every resume of it, and of a copy of it,
    has the same one, recorded as derived (`id_from`); `resumes` stays null. A new training's id stays random."""
    import shutil
    model = {"mode": "train", "num_classes": 10, "image_size": 32, "results_dir": str(tmp_path), "num_iter": 10,
             "iter_unit": "batch"}
    path = fake_checkpoint(tmp_path / "old", step=3, training={"moving_average_decay": 0.0})
    first, again = (resolve(tmp_path / "old", **model)[0].lineage for _ in range(2))
    assert first["id"] == again["id"]
    assert first["id"] == settings.checkpoint_training_id(path)
    assert first["session"] != again["session"] and first["resumes"] is again["resumes"] is None
    assert first["id_from"] == path + ".index"
    shutil.copytree(tmp_path / "old", tmp_path / "copy")
    assert resolve(tmp_path / "copy", **model)[0].lineage["id"] == first["id"]  # a copy: the same training
    fake_checkpoint(tmp_path / "other", step=4, training={"moving_average_decay": 0.0})
    assert resolve(tmp_path / "other", **model)[0].lineage["id"] != first["id"]  # another checkpoint
    recorded = fake_checkpoint(tmp_path / "new", step=3, training={"moving_average_decay": 0.0},
                               lineage={"id": "t1", "session": "s1"})
    assert resolve(tmp_path / "new", **model)[0].lineage["id"] == "t1" and recorded
    assert "id_from" not in resolve(tmp_path / "new", **model)[0].lineage
    fresh = [resolve(tmp_path / f"fresh{i}", **model)[0].lineage for i in range(2)]
    assert fresh[0]["id"] != fresh[1]["id"] and "id_from" not in fresh[0]


def test_a_checkpoint_of_an_earlier_version_with_ranges_resumes_with_quantize(tmp_path):
    fake_checkpoint(tmp_path, ranges=True, training=None)  # no training record: the ranges tell
    assert resolve(tmp_path, mode="train")[0].config.quantize


def test_quantize_may_start_on_a_float_checkpoint_and_says_so(tmp_path):
    # The full record a float run writes: its QAT flags at their defaults, unused.
    path = fake_checkpoint(tmp_path, step=3, training=settings.training_state(RunConfig(batch_size=2, mode="train")))
    resolved, lines = resolve(tmp_path, mode="train", quantize=True)
    assert resolved.config.quantize
    assert f"Checkpoint {path} has no quantisation ranges: quantisation-aware training starts at its step 3 with " \
           "fresh ranges" in lines
    # Its own grid: the float checkpoint's unused QAT flags do not bind it (they refused it until 2026-12-04).
    resolved, lines = resolve(tmp_path, mode="train", quantize=True, symmetric=True, use_qdq=True, quant_delay=5)
    assert (resolved.config.symmetric, resolved.config.use_qdq, resolved.config.quant_delay) == (True, True, 5)
    # the delay counts QAT steps from here, where the original's counted the global step: said (2026-12-07)
    assert f"Checkpoint {path} has no quantisation ranges: quantisation-aware training starts at its step 3 with " \
           "fresh ranges, its first 5 step(s) unquantised (--quant_delay counts QAT steps, from here, not the global " \
           "step)" in lines


def test_a_resume_continues_the_ema_at_its_recorded_decay(tmp_path):
    path = fake_checkpoint(tmp_path, averages=True, training={"moving_average_decay": 0.999})
    resolved, lines = resolve(tmp_path, mode="train")
    assert resolved.config.moving_average_decay == 0.999
    assert f"Using --moving_average_decay 0.999 from checkpoint {path}" in lines
    with pytest.raises(UserError, match="^--moving_average_decay 0.9 contradicts checkpoint .* trained with "
                                        "--moving_average_decay 0.999"):
        resolve(tmp_path, mode="train", moving_average_decay=0.9)


def test_dropping_the_ema_takes_an_explicit_zero_and_is_warned(tmp_path):
    path = fake_checkpoint(tmp_path, averages=True, training={"moving_average_decay": 0.999})
    resolved, lines = resolve(tmp_path, mode="train", moving_average_decay=0.0)
    assert resolved.config.moving_average_decay == 0.0
    assert lines[-1] == (f"WARNING: checkpoint {path} has EMA weights, but this run has --moving_average_decay 0: "
                         "its checkpoints will not keep them")
    # the PARAMETER record says so too: the flags in use alone left the key out (an audit, 2026-12-08)
    assert resolved.parameters()["moving_average_decay"] == 0.0
    assert "moving_average_decay" not in resolve(tmp_path, mode="train", moving_average_decay=0.999)[0].parameters()
    assert "moving_average_decay" not in resolve(tmp_path, mode="evaluate", moving_average_decay=0.0)[0].parameters()


def test_ema_weights_of_an_unrecorded_decay_need_the_flag(tmp_path):
    path = fake_checkpoint(tmp_path, averages=True, training=None)
    with pytest.raises(UserError) as error:
        resolve(tmp_path, mode="train")
    assert str(error.value) == (f"checkpoint {path} has EMA weights but does not record their decay: pass "
                                "--moving_average_decay D to continue them, or --moving_average_decay 0 to drop them")
    assert resolve(tmp_path, mode="train", moving_average_decay=0.99)[0].config.moving_average_decay == 0.99


def test_the_ema_may_start_on_a_checkpoint_without_averages(tmp_path):
    fake_checkpoint(tmp_path, training={"moving_average_decay": 0.0})
    resolved, lines = resolve(tmp_path, mode="train", moving_average_decay=0.99)
    assert resolved.config.moving_average_decay == 0.99
    assert "The checkpoint has no EMA weights: the averages start from its weights" in lines


def test_a_resume_in_another_precision_than_its_checkpoint_says_so_and_goes_on(tmp_path):
    """Mixed precision keeps float32 weights, so a resume may change it (bfloat16 is emulated, several times slower,
    on a CPU without it): not refused, not adopted, but said, so a dropped --amp is no silent change of the run."""
    model = {"mode": "train", "num_classes": 10, "image_size": 32}  # the checkpoint's: no line about them
    path = fake_checkpoint(tmp_path, training={"amp": True, "moving_average_decay": 0.0})
    resolved, lines = resolve(tmp_path, **model)
    assert not resolved.config.amp
    assert lines == [f"Note: checkpoint {path} was trained with --amp: this run continues it in float32 (pass --amp to "
                     "keep mixed precision)"]
    assert resolve(tmp_path, amp=True, **model)[1] == []
    assert resolve(tmp_path, **dict(model, mode="evaluate"))[1] == []  # inference in float32 is the default, whatever trained it
    path = fake_checkpoint(tmp_path / "float", training={"amp": False, "moving_average_decay": 0.0})
    assert resolve(tmp_path / "float", amp=True, **model)[1] == [
        f"Note: checkpoint {path} was trained in float32: this run continues it with --amp"]
    fake_checkpoint(tmp_path / "older", training={"moving_average_decay": 0.0})  # before precision was recorded
    assert resolve(tmp_path / "older", amp=True, **model)[1] == []


def test_a_resume_at_another_number_of_images_per_step_says_so_and_goes_on(tmp_path):
    """Another --batch_size, GPU count or --grad_accum_steps changes the schedule a resume continues (the rate per
    step, the epoch's length in steps) and, with --seed, where the data stream restarts: said, not refused."""
    model = {"mode": "train", "num_classes": 10, "image_size": 32}
    path = fake_checkpoint(tmp_path, training={"moving_average_decay": 0.0, "images_per_step": 32})
    lines = []
    config = RunConfig(model_dir=str(tmp_path), batch_size=8, grad_accum_steps=2, seed=1, **model)
    settings.resolve(config, {"batch_size", "grad_accum_steps", "seed"} | set(model), log=collect(lines), replicas=3)
    assert lines == [f"Note: checkpoint {path} was trained at 32 images per step: this run continues at 48 (--batch_size "
                     "8 x 3 replica(s) x --grad_accum_steps 2), and its learning rate and steps per epoch follow "
                     "from 48; --seed's data stream does not continue where the checkpoint's stopped"]
    # The same images per step on another split of them: nothing to say.
    assert resolve(tmp_path, batch_size=32, **model)[1] == []
    lines = []
    settings.resolve(RunConfig(model_dir=str(tmp_path), batch_size=16, **model), set(model), log=collect(lines),
                     replicas=2)
    assert lines == []
    fake_checkpoint(tmp_path / "older", training={"moving_average_decay": 0.0})  # before it was recorded
    assert resolve(tmp_path / "older", batch_size=5, **model)[1] == []
    assert resolve(tmp_path, batch_size=5, **dict(model, mode="evaluate"))[1] == []  # inference continues nothing


def test_a_checkpoint_prefix_for_model_dir_is_refused_naming_its_directory(tmp_path):
    """--model_dir is a directory (a prefix there said "no checkpoint ... train first", and training would have made a
    directory of that name); the tool that takes one checkpoint is named."""
    path = fake_checkpoint(tmp_path / "run")
    use_it = (f"; to use this one, link its files into a directory of their own (mkdir D && ln -s {path}.* "
              f"{tmp_path / 'run' / 'labels.txt'} D/) and pass --model_dir D, or export it with export_frozen_graph.py "
              "--checkpoint")
    for mode, tail in (("evaluate", use_it), ("train", "")):
        with pytest.raises(UserError) as raised:
            settings.check_mode_arguments(RunConfig(mode=mode, model_dir=path, data_dir=str(tmp_path), batch_size=2))
        assert str(raised.value) == (f"--model_dir {path} is a checkpoint, not a directory: --model_dir takes the "
                                     f"directory ({tmp_path / 'run'}), whose newest complete checkpoint every mode "
                                     f"uses{tail}")


def test_a_model_dir_tensorflow_would_read_as_a_pattern_is_refused_before_anything_is_written(tmp_path):
    """A `[` in the checkpoints' directory: the run trained, then could not read its checkpoint back. Refused first,
    named by the flag given (model_dir is results_dir when --model_dir is not); a benchmark without a checkpoint there
    reads none and runs."""
    for mode in ("train", "evaluate"):
        with pytest.raises(UserError, match=r"^--model_dir .*run \[1\] holds '\['"):
            settings.check_mode_arguments(RunConfig(mode=mode, model_dir=str(tmp_path / "run [1]"),
                                                    data_dir=str(tmp_path), batch_size=2))
    with pytest.raises(UserError, match=r"^--results_dir \(model_dir\) .*r\[2\] holds '\['"):
        settings.check_mode_arguments(RunConfig(mode="train", results_dir=str(tmp_path / "r[2]"),
                                                data_dir=str(tmp_path), batch_size=2))
    with pytest.raises(UserError, match=r"^--export_dir .*e\[3\] holds '\['"):
        settings.check_mode_arguments(RunConfig(mode="evaluate", model_dir=str(tmp_path / "m"),
                                                export_dir=str(tmp_path / "e[3]"), data_dir=str(tmp_path),
                                                batch_size=2))
    settings.check_mode_arguments(RunConfig(mode="training_benchmark", results_dir=str(tmp_path / "b[4]"),
                                            batch_size=2))


def test_a_seeded_resume_by_another_number_of_processes_says_its_stream_is_another(tmp_path):
    """The same images per step read by another number of processes: each process reads its own share of the train
    files, so --seed's stream does not continue the checkpoint's. Said (a silent change before 2026-12-05)."""
    model = {"mode": "train", "num_classes": 10, "image_size": 32}
    path = fake_checkpoint(tmp_path, training={"moving_average_decay": 0.0, "images_per_step": 16, "processes": 2})
    lines = []
    config = RunConfig(model_dir=str(tmp_path), batch_size=16, seed=1, **model)
    settings.resolve(config, {"batch_size", "seed"} | set(model), log=collect(lines), replicas=1, workers=1)
    assert lines == [f"Note: checkpoint {path} was trained by 2 processes, each reading its own share of the train files: "
                     "this run has 1 process, so --seed's data stream does not continue where the checkpoint's "
                     "stopped (the same 16 images per step, other images in them)"]
    # the other way round, as the audit of 2026-12-07 met it ("trained by 1 process, each reading its own share")
    one = fake_checkpoint(tmp_path / "one", training={"moving_average_decay": 0.0, "images_per_step": 16,
                                                      "processes": 1})
    lines = []
    settings.resolve(RunConfig(model_dir=str(tmp_path / "one"), batch_size=8, seed=1, **model),
                     {"batch_size", "seed"} | set(model), log=collect(lines), replicas=2, workers=2)
    assert lines == [f"Note: checkpoint {one} was trained by 1 process, which read all the train files: this run has 2 "
                     "processes, each reading its own share, so --seed's data stream does not continue where the "
                     "checkpoint's stopped (the same 16 images per step, other images in them)"]
    lines = []  # the same processes, or no --seed (no exact stream to continue): nothing to say
    settings.resolve(RunConfig(model_dir=str(tmp_path), batch_size=8, seed=1, **model), {"batch_size", "seed"} |
                     set(model), log=collect(lines), replicas=2, workers=2)
    assert lines == []
    assert resolve(tmp_path, batch_size=16, **model)[1] == []
    fake_checkpoint(tmp_path / "older", training={"moving_average_decay": 0.0, "images_per_step": 16})
    assert resolve(tmp_path / "older", batch_size=16, seed=1, **model)[1] == []  # before processes were recorded


def test_a_training_checkpoint_records_the_processes_that_read_its_data():
    state = settings.training_state(RunConfig(mode="train", batch_size=8), replicas=2, workers=2)
    assert (state["images_per_step"], state["processes"]) == (16, 2)


def test_a_seeded_resume_on_dali_says_it_is_not_exact(tmp_path, monkeypatch):
    fake_checkpoint(tmp_path, step=3)
    monkeypatch.setattr(settings, "check_data", lambda *_, **__: {})  # the dataset's checks are not this test's
    model = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(tmp_path),
             "data_idx_dir": str(tmp_path), "dali": True}
    note = ("Note: DALI's input cannot skip to step 3: this resume reads its data stream from the start, so it is "
            "not the exact continuation --seed gives on the TFRecord input")
    assert resolve(tmp_path, seed=1, **model)[1] == [note]
    assert resolve(tmp_path, **model)[1] == []  # without --seed no resume is exact, as the original
    assert resolve(tmp_path, seed=1, **dict(model, dali=False))[1] == [
        "Note: --data_idx_dir is not used: without --dali the TFRecords are read through tf.data"]


def test_inference_leaves_the_training_state_alone_and_says_the_model_is_float(tmp_path):
    path = fake_checkpoint(tmp_path, ranges=True, averages=True,
                           training={"quantize": True, "moving_average_decay": 0.9})
    resolved, lines = resolve(tmp_path, mode="evaluate")
    assert not resolved.config.quantize and resolved.config.moving_average_decay == 0
    # Given, the QAT flags are said unused and the run's record holds what ran: the float model.
    given = resolve(tmp_path, mode="evaluate", quantize=True, symmetric=True, use_qdq=True, quant_delay=5)[0].config
    assert (given.quantize, given.symmetric, given.use_qdq, given.quant_delay) == (False, False, False,
                                                                                   RunConfig().quant_delay)
    assert lines[-1] == (f"Checkpoint {path} holds quantisation ranges: evaluate runs the float model, as the "
                         "original (export_frozen_graph.py --quantize exports the quantised graph)")


def test_a_resume_of_a_fine_tune_with_its_own_command_continues_it_without_a_warning(tmp_path):
    """The checkpoint records the fine-tune its run started (absolute path): the same --finetune_checkpoint again
    (GPU1_RN50_QAT.sh's "same command" after a Ctrl-C) is said as a continuation; another one is warned about as
    ignored, naming the recorded source; none adopts the recorded one, so the run's record keeps naming it."""
    source = fake_checkpoint(tmp_path / "imagenet")
    path = fake_checkpoint(tmp_path / "tuned", training={"moving_average_decay": 0.0,
                                                         "finetune_checkpoint": str(tmp_path / "imagenet")})
    resolved, lines = resolve(tmp_path / "tuned", mode="train", finetune_checkpoint=str(tmp_path / "imagenet"))
    assert resolved.finetune is None
    assert lines[-1] == (f"Continuing the fine-tune of {tmp_path / 'imagenet'} from checkpoint {path} "
                         "(--finetune_checkpoint is read only when a run starts)")
    other = fake_checkpoint(tmp_path / "other")
    assert resolve(tmp_path / "tuned", mode="train", finetune_checkpoint=other)[1][-1:] == [
        f"WARNING: --finetune_checkpoint {other} is ignored: model_dir {tmp_path / 'tuned'} already has checkpoint "
        f"{path}, fine-tuned from {tmp_path / 'imagenet'}, and training resumes from it (use a new --model_dir to "
        "fine-tune)"]
    # the ignored flag is not what the run's record and its checkpoints name: they named it (2026-12-07)
    assert resolve(tmp_path / "tuned", mode="train", finetune_checkpoint=other)[0].config.finetune_checkpoint == \
        str(tmp_path / "imagenet")
    # the directory's checkpoint, named by its prefix, is the same source, not another one
    resolved, lines = resolve(tmp_path / "tuned", mode="train", finetune_checkpoint=source)
    assert lines[-1].startswith(f"Continuing the fine-tune of {source} from checkpoint {path}")
    assert resolved.config.finetune_checkpoint == str(tmp_path / "imagenet")
    resolved, lines = resolve(tmp_path / "tuned", mode="train")
    assert not [line for line in lines if "fine-tun" in line]
    assert resolved.config.finetune_checkpoint == str(tmp_path / "imagenet")
    assert settings.training_state(resolved.config)["finetune_checkpoint"] == str(tmp_path / "imagenet")
    assert "finetune_checkpoint" not in settings.training_state(RunConfig(mode="train"))
    del source


def test_a_resume_ignores_the_finetune_checkpoint_and_says_so(tmp_path):
    fake_checkpoint(tmp_path / "run")
    other = fake_checkpoint(tmp_path / "other", arch="resnext101-32x4d")
    resolved, lines = resolve(tmp_path / "run", mode="train", finetune_checkpoint=other)
    assert resolved.config.arch == "resnet50" and resolved.finetune is None
    assert lines[-1].startswith(f"WARNING: --finetune_checkpoint {other} is ignored: model_dir {tmp_path / 'run'} "
                                "already has checkpoint")
    assert resolved.config.finetune_checkpoint is None  # nor recorded as the run's source (2026-12-07)


def test_an_inference_mode_given_its_checkpoint_as_finetune_checkpoint_says_to_pass_it_as_model_dir(tmp_path):
    """evaluate --finetune_checkpoint base --model_dir <empty>: the error said to train first (2026-12-07)."""
    fake_checkpoint(tmp_path / "base")
    with pytest.raises(UserError) as error:
        resolve(tmp_path / "empty", mode="evaluate", finetune_checkpoint=str(tmp_path / "base"))
    assert str(error.value) == (f"no checkpoint in model_dir {tmp_path / 'empty'} (train first, or point --model_dir "
                                "at a directory with model.ckpt-* files); --finetune_checkpoint is read only by a "
                                f"training: to evaluate {tmp_path / 'base'}, pass it as --model_dir")


def test_labels_file_outside_predict_is_said_unused_and_what_an_export_records_instead(tmp_path):
    """evaluate --export_dir --labels_file said `only --mode predict names classes`, and its export then named
    classes, model_dir's (2026-12-07)."""
    fake_checkpoint(tmp_path)
    lines = resolve(tmp_path, mode="evaluate", labels_file="l4.txt", export_dir=str(tmp_path / "export"))[1]
    assert "Note: --labels_file is not used: only --mode predict reads it (an --export_dir export records " \
           "model_dir's labels.txt)" in lines
    assert "Note: --labels_file is not used: only --mode predict reads it" in resolve(
        tmp_path, mode="evaluate", labels_file="l4.txt")[1]


def test_a_fine_tune_into_a_model_dir_that_has_a_checkpoint_is_refused_saying_it_would_resume(tmp_path):
    """--num_classes 4 --finetune_checkpoint X into a copy of X's model_dir: the error said only to omit the flag,
    which resumed the 10-class training on the 4-class data (2026-12-07)."""
    path = fake_checkpoint(tmp_path / "base", num_classes=10)
    with pytest.raises(UserError) as error:
        resolve(tmp_path / "base", mode="train", finetune_checkpoint=str(tmp_path / "base"), num_classes=4)
    assert str(error.value) == (
        f"--num_classes 4 contradicts checkpoint {path}, trained with --num_classes 10 (omit the flag to use the "
        f"checkpoint's); but model_dir {tmp_path / 'base'} already has that checkpoint, so this run would resume it "
        f"and --finetune_checkpoint {tmp_path / 'base'} is not read: use a new --model_dir to fine-tune")


def test_a_finetune_takes_the_classifier_form_of_its_checkpoint(tmp_path):
    """A postprocess_ckpt.py checkpoint (a 1x1-conv classifier) was fine-tuned into a dense one without a word
    (2026-12-07); evaluate and predict on it took its form."""
    source = fake_checkpoint(tmp_path / "pp", use_final_conv=True)
    resolved, lines = resolve(tmp_path / "new", mode="train", finetune_checkpoint=source, num_classes=4)
    assert resolved.config.use_final_conv and f"Using --use_final_conv from checkpoint {source}" in lines
    dense = fake_checkpoint(tmp_path / "dense")
    resolved, lines = resolve(tmp_path / "new", mode="train", finetune_checkpoint=dense, use_final_conv=True)
    assert resolved.config.use_final_conv and lines[-1].startswith(
        f"Note: checkpoint {dense} holds its classifier as a dense layer; this run builds it as a 1x1 conv")


def test_a_finetune_takes_the_architecture_of_its_checkpoint_and_the_classes_and_size_not_given(tmp_path):
    source = fake_checkpoint(tmp_path / "imagenet", arch="resnext101-32x4d", num_classes=1001, image_size=224)
    resolved, lines = resolve(tmp_path / "new", mode="train", finetune_checkpoint=source, num_classes=10,
                              image_size=32)
    assert (resolved.config.arch, resolved.config.num_classes, resolved.config.image_size) == (
        "resnext101-32x4d", 10, 32)
    assert resolved.finetune.path == source and lines == using(source, "--arch resnext101-32x4d") + [
        f"Fine-tuning at --image_size 32 from checkpoint {source}, trained at 224 px (the convolutions' weights do "
        "not depend on the size; the features they learned are of another scale)"]
    # A fine-tune of a 10-class 40 px model (a QAT fine-tune of the quick start's, say) without those flags
    # continues that model, classifier included, rather than building the defaults' 1001 classes at 224 px.
    small = fake_checkpoint(tmp_path / "small", num_classes=10, image_size=40)
    resolved, lines = resolve(tmp_path / "qat", mode="train", finetune_checkpoint=small, quantize=True)
    assert (resolved.config.num_classes, resolved.config.image_size) == (10, 40)
    assert lines == using(small, "--num_classes 10", "--image_size 40")
    assert resolved.parameters() == {"finetune_from": small, "settings_from_checkpoint": ["image_size", "num_classes"],
                                     "working_directory": os.getcwd(), "training": resolved.lineage}
    assert resolved.lineage["resumes"] is None  # a fine-tune is a new training
    # With EMA the averages start from the restored weights (runtime/checkpoints.restore_or_initialise), never from
    # the source's averages, and the run says so.
    averaged = fake_checkpoint(tmp_path / "averaged", num_classes=10, image_size=40, averages=True)
    for source, detail in ((small, ""), (averaged, " (not from its averages)")):
        lines = resolve(tmp_path / "ema", mode="train", finetune_checkpoint=source, moving_average_decay=0.9)[1]
        assert lines[-1] == f"EMA: the averages start from the weights restored from checkpoint {source}{detail}"
    # A QAT checkpoint fine-tuned without --quantize: the float model trains, and the run says its ranges are left.
    qat = fake_checkpoint(tmp_path / "qat_source", num_classes=10, image_size=40, ranges=True,
                          training={"quantize": True})
    lines = resolve(tmp_path / "float", mode="train", finetune_checkpoint=qat)[1]
    assert lines[-1] == (f"Checkpoint {qat} holds quantisation ranges: this fine-tune without --quantize trains the "
                         "float model and leaves them out")
    assert not any("quantisation ranges" in line
                   for line in resolve(tmp_path / "qat2", mode="train", finetune_checkpoint=qat, quantize=True)[1])


def test_the_recorded_training_state_round_trips_through_the_metadata(tmp_path):
    config = RunConfig(batch_size=2, mode="train", quantize=True, symmetric=True, quant_delay=7,
                       moving_average_decay=0.5, amp=True)
    path = fake_checkpoint(tmp_path, training=settings.training_state(config, replicas=4, train_images=12,
                                                                      workers=2), ranges=True, averages=True)
    recorded = checkpoint.inspect(path).recorded_settings()
    assert {name: recorded[name] for name in settings.TRAINING_STATE + ("images_per_step", "processes",
                                                                        "train_images", "recipe", "data_stream")} \
        == settings.training_state(config, replicas=4, train_images=12, workers=2)
    assert (recorded["images_per_step"], recorded["processes"], recorded["train_images"]) == (8, 2, 12)
    assert "train_images" not in settings.training_state(config)  # synthetic data: no train split
    assert "schedule" not in settings.training_state(config)  # no run length: no schedule


def test_a_resume_on_a_train_split_of_another_size_says_its_epochs_change(tmp_path):
    """More (or other) data is a legitimate resume, but its epochs, and the schedule counted in them, change."""
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 2, 3, 32)  # 6 records
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(data), "num_iter": 2}
    trained_on = {}
    for count in (5, 6):
        config = RunConfig(batch_size=2, **flags)
        path = fake_checkpoint(tmp_path / f"run{count}", step=3,
                               training=settings.training_state(config, train_images=count))
        trained_on[count] = (path, resolve(tmp_path / f"run{count}", **flags)[1])
    path, lines = trained_on[5]
    assert lines == [f"Note: checkpoint {path} was trained on 5 train images; the train-* files of --data_dir {data} "
                     "hold 6: this run's epochs, and the learning-rate schedule counted in them, follow from 6 from "
                     "step 3 on"]
    assert trained_on[6][1] == []  # the same count (a moved copy of the data, say): nothing to say


def test_a_resume_on_other_train_files_of_the_same_size_says_so_and_a_moved_copy_does_not(tmp_path):
    import shutil
    from tests._data_helpers import write_tfrecord_shards
    data, moved, other = tmp_path / "data", tmp_path / "moved", tmp_path / "other"
    write_tfrecord_shards(str(data), "train", 2, 3, 32, seed=0)
    shutil.copytree(data, moved)
    write_tfrecord_shards(str(other), "train", 2, 3, 32, seed=1)  # 6 records too, other images
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "num_iter": 2}  # step 3 of 6
    path = fake_checkpoint(tmp_path / "run", step=3, training=settings.training_state(
        RunConfig(batch_size=2, data_dir=str(data), **flags), train_images=6))
    assert resolve(tmp_path / "run", data_dir=str(moved), **flags)[1] == []
    assert resolve(tmp_path / "run", data_dir=str(other), **flags)[1] == [
        f"Note: the train-* files of --data_dir {other} are not the ones checkpoint {path} was trained on (other "
        "names or sizes, 6 records as before): this run goes on on other data"]
    # The PARAMETER record holds the same digest, for utils/plot_log to tell the two apart in a log.
    recorded = {name: resolve(tmp_path / "run", data_dir=str(tmp_path / name), **flags)[0].parameters()
                .get("train_files") for name in ("data", "moved", "other")}
    assert recorded["data"] == recorded["moved"] == settings.files_fingerprint(
        [str(name) for name in data.glob("train-*")]) != recorded["other"]


def test_a_resume_with_other_schedule_flags_says_what_the_learning_rate_becomes(tmp_path):
    """A longer --num_iter under cosine restarts the rate well above where the checkpoint's run ended: legitimate,
    but said, with the rate at the resume step under both schedules (the cosine formula, by hand)."""
    import math
    from runtime.inputs import TrainingLength
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 2, 3, 32)  # 6 records: 3 steps of 2 per epoch
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(data), "lr_init": 0.256,
             "lr_warmup_epochs": 0, "cosine_lr": True, "iter_unit": "epoch"}
    trained = RunConfig(batch_size=2, num_iter=1, **flags)
    path = fake_checkpoint(tmp_path / "run", step=3, training=settings.training_state(
        trained, train_images=6, length=TrainingLength(3, 1, 3, 3.0, 6)))
    assert checkpoint.inspect(path).recorded_settings()["schedule"] == {
        "lr_init": 0.256, "lr_warmup_epochs": 0, "cosine_lr": True, "num_iter": 1, "iter_unit": "epoch",
        "num_steps": 3, "decay_steps": 3, "steps_per_epoch": 3.0}
    peak = 0.256 * 2 / 256
    assert resolve(tmp_path / "run", num_iter=1, **flags)[1] == []  # the same schedule: nothing to say
    lines = resolve(tmp_path / "run", num_iter=2, **flags)[1]
    assert lines == [f"Note: this run's learning-rate schedule is not the one checkpoint {path} was trained with: "
                     f"--num_iter 2 (was 1); at step 3 the rate is {peak * 0.5 * (1 + math.cos(math.pi * 3 / 6)):.6g}"
                     f" where that schedule had {peak * 0.5 * (1 + math.cos(math.pi)):.6g}, over 6 steps in all "
                     "(was 3)"]
    lines = resolve(tmp_path / "run", num_iter=2, **dict(flags, cosine_lr=False, lr_init=0.512))[1]
    assert lines[0].split("trained with: ")[1].startswith("--lr_init 0.512 (was 0.256), no --cosine_lr (was on), --num_iter 2 "
                                                 f"(was 1); at step 3 the rate is {2 * peak:.6g} where")


def test_a_schedule_note_names_the_first_step_whose_rate_changes_and_none_when_no_rate_does(tmp_path):
    """Other schedule flags need not change the rate this run trains with: the step schedule's boundaries are counted
    in epochs, so a longer --num_iter in epochs keeps every rate, and in batches moves the boundaries by the original's
    `num_steps / ceil(num_steps / steps per real epoch)` epoch (the boundary formula, by hand)."""
    from runtime.inputs import TrainingLength
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 2, 3, 32)  # 6 records: 3 steps of 2 per epoch
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(data), "lr_init": 0.256,
             "lr_warmup_epochs": 0, "cosine_lr": False}
    for unit, trained_length in (("epoch", TrainingLength(3, 1, 3, 3.0, 6)), ("batch", TrainingLength(3, 1, 270, 3.0, 6))):
        directory = tmp_path / unit
        path = fake_checkpoint(directory, step=3, training=settings.training_state(
            RunConfig(batch_size=2, num_iter=3 if unit == "batch" else 1, iter_unit=unit, **flags), train_images=6,
            length=trained_length))
        if unit == "epoch":
            resolved, lines = resolve(directory, num_iter=40, iter_unit=unit, **flags)
            assert lines == []  # boundaries at 90, 180, ...
            # and the training record says so, so that utils/plot_log does not call the longer run another one
            assert resolved.lineage["schedule_rates_unchanged"] is True
            continue
        peak = 0.256 * 2 / 256
        boundary = int(100 / 34 * 30)  # 100 steps are ceil(100 / 3) = 34 "epochs": the first boundary at 88, not 90
        resolved, lines = resolve(directory, num_iter=100, iter_unit=unit, **flags)
        assert "schedule_rates_unchanged" not in resolved.lineage
        assert lines == [
            f"Note: this run's learning-rate schedule is not the one checkpoint {path} was trained with: --num_iter "
            f"100 (was 3); the rate is the same up to step {boundary}; at step {boundary + 1} the rate is "
            f"{peak * 0.1:.6g} where that schedule had {peak:.6g}, over 100 steps in all (was 3)"]


def test_a_checkpoint_of_fewer_classes_than_the_dataset_is_not_a_model_of_it(tmp_path):
    """Evaluating, resuming or benchmarking a 4-class checkpoint on a 12-class dataset: --num_classes cannot help
    (it would contradict the checkpoint), so the error names the checkpoint. A fine-tune takes a new classifier:
    there --num_classes is the advice."""
    import numpy as np
    from dataprep import records
    from tests._data_helpers import encode_image, random_image
    data = tmp_path / "data"
    rng = np.random.default_rng(0)
    items = [records.ImageItem(filename="i%d.jpg" % i, label=1 + i, synset="c%d" % i, text="class %d" % i,
                               data=encode_image(random_image(rng, 32, 32))) for i in range(12)]
    for split in ("train", "validation"):
        records.write_split(items, str(data), split, 1, num_classes=12)  # with dataprep's manifest: labels 1..12
    path = fake_checkpoint(tmp_path / "run", num_classes=4)
    for mode in ("evaluate", "train", "training_benchmark"):
        with pytest.raises(UserError) as info:
            resolve(tmp_path / "run", mode=mode, data_dir=str(data), num_iter=9)
        assert str(info.value).startswith(f"checkpoint {path} has 4 outputs, too few for dataset {data}'s labels "
                                          "1..12 (12 classes"), mode
    with pytest.raises(UserError, match=r"^--num_classes 4 cannot hold .*; pass --num_classes 12 or more$"):
        resolve(tmp_path / "new", mode="train", data_dir=str(data), finetune_checkpoint=str(tmp_path / "run"))


def test_a_schedule_note_is_about_the_schedule_flags_not_a_batch_change(tmp_path):
    """A resume at twice the images per step and one more step: the rate doubles with the batch (the linear scaling
    rule), which the images-per-step note says; --num_iter 4 (was 3) alone changes no rate of this run (the step
    schedule's first boundary is 60 or 90 steps away), so there is no schedule note blaming it."""
    from runtime.inputs import TrainingLength
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 2, 3, 32)  # 6 records
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(data), "lr_init": 0.256,
             "lr_warmup_epochs": 0, "cosine_lr": False, "iter_unit": "batch"}
    path = fake_checkpoint(tmp_path / "run", step=2, training=settings.training_state(
        RunConfig(batch_size=1, num_iter=3, **flags), train_images=6, length=TrainingLength(3, 1, 540, 3.0, 6),
        seen={"step": 0, "images": 0}))
    lines = resolve(tmp_path / "run", batch_size=2, num_iter=4, **flags)[1]
    # The rate at the checkpoint's step in each run (0.256 per 256 images, no warmup, the step schedule), the
    # schedule's epoch (num_steps / num_epochs: 3 steps of 1 epoch then, 4 steps of ceil(4 / 3) = 2 epochs now) and
    # the images of the whole run (2 x 1 + 2 x 2 against 3 x 1, of 6 records).
    assert lines == [f"Note: checkpoint {path} was trained at 1 images per step: this run continues at 2 (--batch_size 2 x "
                     f"1 replica(s) x --grad_accum_steps 1), so at step 2 its learning rate is {0.256 * 2 / 256:.6g} "
                     f"where the checkpoint's run had {0.256 / 256:.6g}, and it ends at step 4 where that run ended at "
                     "step 3 (--num_iter 4 (was 3); under --iter_unit batch its schedule's epoch is 2 steps, that "
                     "run's 3): 6 images in "
                     "all (1 pass over the 6 train images) where that run saw 3 (0.5 passes)"]
    assert resolve(tmp_path / "run", batch_size=2, num_iter=4, **dict(flags, lr_init=0.512))[1][1].endswith(
        f"--lr_init 0.512 (was 0.256), --num_iter 4 (was 3); at step 2 the rate is {0.512 * 2 / 256:.6g} where the "
        f"checkpoint's flags give {0.256 * 2 / 256:.6g} at this run's 2 images per step, over 4 steps in all (was 3)")
    # (both at this run's 2 images per step: the checkpoint's run, at 1, never had that rate, and the line says so)


def test_a_resume_at_another_batch_gives_the_rate_of_both_runs_at_its_step(tmp_path):
    """The quick start's schedule shape (1 warmup epoch, cosine over 2 epochs of 40 records) at batch 4, resumed at
    step 6 with batch 8: the checkpoint's run was in its warmup (W = 10), this run's warmup (W = 5) is over and its
    cosine (D = 10 steps) has begun; both rates from the schedule's formula (docs/ORIGINAL.md#learning-rate)."""
    import math
    from runtime.inputs import TrainingLength
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 2, 20, 32)  # 40 records
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(data), "lr_init": 0.05,
             "lr_warmup_epochs": 1, "cosine_lr": True, "iter_unit": "epoch", "num_iter": 2}
    path = fake_checkpoint(tmp_path / "run", step=6, training=settings.training_state(
        RunConfig(batch_size=4, **flags), train_images=40, length=TrainingLength(20, 2, 20, 10.0, 40)))
    was = 0.05 * 4 / 256 * 6 / 10
    now = 0.05 * 8 / 256 * 0.5 * (1 + math.cos(math.pi * 6 / 10))
    assert resolve(tmp_path / "run", batch_size=8, **flags)[1] == [
        f"Note: checkpoint {path} was trained at 4 images per step: this run continues at 8 (--batch_size 8 x 1 "
        f"replica(s) x --grad_accum_steps 1), so at step 6 its learning rate is {now:.6g} where the checkpoint's run "
        f"had {was:.6g}, and it ends at step 10 where that run ended at step 20 (its schedule's epoch is 5 steps, "
        "that run's 10): 56 images in all (1.4 passes over the 40 train images) where that run saw 80 (2 passes), "
        "if every step before 6 had 4 images (the checkpoint does not "
        "record the images it has seen)"]  # 6 x 4 + 4 x 8 images against 20 x 4, on that assumption


def test_the_images_seen_count_every_images_per_step_a_run_had(tmp_path):
    """6 steps at 16 images (96), resumed to step 10 at 8 (32 more: 128 by step 10), resumed to step 30 at 16 (20
    x 16 more: 448 in all). The figures come from the checkpoint's count, not from its last images per step (400
    and 80 before 2026-12-06)."""
    from runtime.inputs import TrainingLength
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 2, 32, 32)  # 64 records
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(data), "lr_init": 0.1,
             "lr_warmup_epochs": 1, "cosine_lr": True, "iter_unit": "batch"}
    first = fake_checkpoint(tmp_path / "first", step=6, training=settings.training_state(
        RunConfig(batch_size=16, num_iter=6, **flags), train_images=64, length=TrainingLength(6, 2, 360, 3.0, 64),
        seen=settings.images_seen_record(None, 0)))
    assert settings.images_seen(checkpoint.inspect(first)) == 96
    seen = settings.images_seen_record(checkpoint.inspect(first), 6)
    assert seen == {"step": 6, "images": 96}
    path = fake_checkpoint(tmp_path / "run", step=10, training=settings.training_state(
        RunConfig(batch_size=8, num_iter=10, **flags), train_images=64, length=TrainingLength(10, 2, 720, 5.0, 64),
        seen=seen))
    info = checkpoint.inspect(path)
    assert (settings.images_seen(info), settings.images_seen(info, 8), settings.images_seen(info, 5)) == (128, 112,
                                                                                                           None)
    assert settings.images_seen_record(info, 10) == {"step": 10, "images": 128}
    line = resolve(tmp_path / "run", batch_size=16, num_iter=30, **flags)[1][0]
    # (under --iter_unit batch the schedule's epoch is num_iter / ceil(num_iter / steps of a pass over the 64 records):
    # 30 / ceil(30 / 4) = 3.75 steps now, 10 / ceil(10 / 8) = 5 then; not a pass's 4)
    # (--num_iter 30 against that run's 10 moved the end, not the batch: said first, 2026-12-07)
    assert line.endswith("and it ends at step 30 where that run ended at step 10 (--num_iter 30 (was 10); under "
                         "--iter_unit batch its schedule's epoch is 3.75 steps, that run's 5): 448 images in all "
                         "(7 passes over the 64 train images) where that run saw 128 (2 passes)"), line
    older = fake_checkpoint(tmp_path / "older", step=10, training=settings.training_state(
        RunConfig(batch_size=8, num_iter=10, **flags), train_images=64, length=TrainingLength(10, 2, 720, 5.0, 64)))
    assert settings.images_seen(checkpoint.inspect(older)) is None  # before the count was recorded
    assert settings.images_seen_record(checkpoint.inspect(older), 10) is None  # nor do its resumes record one
    assert resolve(tmp_path / "older", batch_size=16, num_iter=30, **flags)[1][0].endswith(
        ": 400 images in all (6.25 passes over the 64 train images) where that run saw 80 (1.25 passes), if every step before 10 had 8 images (the "
        "checkpoint does not record the images it has seen)")


def test_a_resume_with_nothing_left_to_train_says_nothing_of_what_it_would_change(tmp_path):
    """Its run prints "Model already trained required number of steps. Skipped": notes on the recipe, schedule or
    batch it would have trained with would only mislead."""
    from runtime.inputs import TrainingLength
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 2, 3, 32)  # 6 records: 3 steps of 2 per epoch
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(data), "iter_unit": "epoch"}
    path = fake_checkpoint(tmp_path / "run", step=3, training=settings.training_state(
        RunConfig(batch_size=2, num_iter=1, **flags), train_images=6, length=TrainingLength(3, 1, 3, 3.0, 6)))
    changed = dict(flags, weight_decay=5e-4, lr_init=0.5)
    assert resolve(tmp_path / "run", num_iter=1, **changed)[1] == []
    lines = resolve(tmp_path / "run", num_iter=2, **changed)[1]
    assert [line.split(" checkpoint ")[0] for line in lines] == [
        "Note: this run continues", "Note: this run's learning-rate schedule is not the one"]
    assert all(path in line for line in lines)


def test_a_resume_with_no_step_left_but_fewer_images_than_its_length_means_says_how_far_short(tmp_path):
    """--num_iter counts steps: a checkpoint whose first 3 steps had 4 images and the next 3 had 8 reaches step 6,
    the last of 2 epochs at 8 images per step, having seen 36 of the 48 images those steps make. The run skips
    (the original's rule), and says how far short it is (until 2026-12-06 it said nothing)."""
    from runtime.inputs import TrainingLength
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 2, 12, 32)  # 24 records: 3 steps of 8 per epoch
    flags = {"mode": "train", "num_classes": 10, "image_size": 32, "data_dir": str(data), "iter_unit": "epoch",
             "num_iter": 2}
    path = fake_checkpoint(tmp_path / "run", step=6, training=settings.training_state(
        RunConfig(batch_size=8, **flags), train_images=24, length=TrainingLength(6, 2, 6, 3.0, 24),
        seen={"step": 3, "images": 12}))
    assert resolve(tmp_path / "run", batch_size=8, **flags)[1] == [
        f"Note: checkpoint {path} is at step 6, this run's last, but its training saw 36 images (1.5 passes over the "
        "24 train images), not the 48 (2 passes) that 6 steps of this run's 8 images make: some of its steps had "
        "fewer images; raise --num_iter to train more"]
    full = fake_checkpoint(tmp_path / "full", step=6, training=settings.training_state(
        RunConfig(batch_size=8, **flags), train_images=24, length=TrainingLength(6, 2, 6, 3.0, 24),
        seen={"step": 0, "images": 0}))
    assert resolve(tmp_path / "full", batch_size=8, **flags)[1] == [] and full


def test_a_resume_with_other_recipe_flags_says_which_of_those_in_effect_changed(tmp_path):
    trained = RunConfig(batch_size=2, mode="train", label_smoothing=0.1, augmenter_name="randaugment")
    path = fake_checkpoint(tmp_path, training=settings.training_state(trained))
    common = dict(mode="train", label_smoothing=0.1, augmenter_name="randaugment")

    def notes(**flags):
        return [line for line in resolve(tmp_path, **common, **flags)[1] if "other training flags" in line]

    assert notes(weight_decay=5e-4, raug_magnitude=5.0, static_loss_scale=128.0) == [
        f"Note: this run continues checkpoint {path} with other training flags than it was trained with: "
        "--weight_decay 0.0005 (was 0.0001), --raug_magnitude 5 (was 9)"]  # no --amp: the loss scale is unused
    assert notes() == []
    assert notes(mixup=0.2, cutmix=1.0, mixup_switch_prob=0.9)[0].endswith(": --mixup 0.2 (was 0), --cutmix 1 (was 0)")


def test_a_finetune_with_other_recipe_flags_than_its_checkpoint_says_which(tmp_path):
    """The quick start's checkpoint (crops of 75-100%, label smoothing 0.1) fine-tuned with the original's defaults
    left in (crops down to 5%, none): a 20-step fine-tune of it so evaluated 67% against its 81% (76% with its own
    flags: the BN moving statistics restart, as the original's), and the run said nothing that told the two
    trainings apart."""
    recipe = dict(min_crop_area=0.75, label_smoothing=0.1, momentum=0.875, weight_decay=3.0517578125e-05)
    source = fake_checkpoint(tmp_path / "quickstart", num_classes=10, image_size=40,
                             training=settings.training_state(RunConfig(mode="train", **recipe)))

    def notes(**flags):
        lines = resolve(tmp_path / "tuned", mode="train", finetune_checkpoint=source, **flags)[1]
        return [line for line in lines if "other training flags" in line]

    assert notes() == [
        f"Note: this fine-tune starts from checkpoint {source} with other training flags than it was trained with: "
        "--weight_decay 0.0001 (was 3.05176e-05), --momentum 0.9 (was 0.875), --label_smoothing 0 (was 0.1), "
        "--min_crop_area 0.05 (was 0.75)"]
    assert notes(**recipe) == []
    # A checkpoint that records no recipe (the original's, or ours before the records): nothing to compare.
    assert not [line for line in resolve(tmp_path / "tuned2", mode="train",
                                         finetune_checkpoint=fake_checkpoint(tmp_path / "plain"))[1]
                if "other training flags" in line]


def test_flags_the_mode_leaves_unused_are_said_once_each(tmp_path):
    _, lines = resolve(tmp_path / "new", mode="train", export_dir=str(tmp_path / "export"), to_predict="x.jpg",
                       use_ema_weights=True, moving_average_decay=0.5)
    assert [line for line in lines if line.startswith("Note: --")] == [
        "Note: --export_dir is not used: --mode train exports nothing (--mode train_and_evaluate, evaluate and "
        "inference_benchmark write the SavedModel after their evaluation)",
        "Note: --use_ema_weights is not used: it picks the weights of predict, inference_benchmark and an "
        "--export_dir export, and this run has none of them",
        "Note: --to_predict is not used: only --mode predict reads it"]
    fake_checkpoint(tmp_path / "float")
    _, lines = resolve(tmp_path / "new_ema", mode="train_and_evaluate", use_ema_weights=True,
                       moving_average_decay=0.5)
    assert [line for line in lines if line.startswith("Note: --")] == [
        "Note: --use_ema_weights is not used: it picks the weights of predict, inference_benchmark and an "
        "--export_dir export, and this run has none of them (an evaluation reports both the raw and the EMA "
        "weights' accuracy)"]
    _, lines = resolve(tmp_path / "float", mode="evaluate", quantize=True, symmetric=True, finetune_checkpoint="x")
    assert [line for line in lines if line.startswith("Note: --")] == [
        "Note: --finetune_checkpoint is not used: only a training mode fine-tunes",
        "Note: --quantize and --symmetric are not used: --mode evaluate runs the float model, as the original "
        "(export_frozen_graph.py --quantize exports the quantised graph)"]
    # Used, or left at their defaults: nothing said. A QAT checkpoint's own line covers --quantize.
    fake_checkpoint(tmp_path / "ema", averages=True, training={"moving_average_decay": 0.9})
    for flags in (dict(mode="evaluate", export_dir=str(tmp_path / "export"), use_ema_weights=True),
                  dict(mode="evaluate", use_ema_weights=True),
                  dict(mode="predict", to_predict="x.jpg", labels_file="labels.txt", use_ema_weights=True),
                  dict(mode="training_benchmark", quantize=True), dict(mode="evaluate")):
        folder = tmp_path / ("ema" if flags.get("use_ema_weights") else "float")
        assert not [line for line in resolve(folder, **flags)[1] if line.startswith("Note: --")], flags
    # a checkpoint without them is refused with the run's settings, before its log (an audit, 2026-12-08)
    for mode in ("evaluate", "predict", "inference_benchmark"):
        with pytest.raises(UserError, match=r"has no EMA weights \(train with --moving_average_decay to get them\)"):
            resolve(tmp_path / "float", mode=mode, to_predict="x.jpg" if mode == "predict" else None,
                    use_ema_weights=True)
    fake_checkpoint(tmp_path / "qat", ranges=True, training={"quantize": True})
    assert not [line for line in resolve(tmp_path / "qat", mode="evaluate", quantize=True)[1]
                if line.startswith("Note: --")]


def test_training_flags_outside_training_and_gpu_flags_under_cpu_are_said_unused(tmp_path):
    fake_checkpoint(tmp_path / "float")
    for mode in ("evaluate", "predict", "inference_benchmark"):
        _, lines = resolve(tmp_path / "float", mode=mode, lr_init=0.3, cosine_lr=True, run_iter=1, mixup=0.2,
                           moving_average_decay=0.9, cpu=True, gpu_id=3)
        assert [line for line in lines if line.startswith("Note: --")] == [
            f"Note: --run_iter, --lr_init, --cosine_lr, --mixup and --moving_average_decay are not used: --mode "
            f"{mode} trains nothing",
            "Note: --gpu_id is not used: --cpu runs on no GPU"]
    for mode in ("train", "training_benchmark"):  # they train: nothing said
        _, lines = resolve(tmp_path / mode, mode=mode, lr_init=0.3, cosine_lr=True, run_iter=1, gpu_id=3)
        assert not [line for line in lines if line.startswith("Note: --")], lines


def test_flags_predict_and_the_benchmarks_leave_unused_are_said_and_a_zero_counts_as_given(tmp_path):
    """Audit of 2026-12-06: predict took --num_iter, --iter_unit, --warmup_steps, --display_every and --seed without a
    word, a benchmark --checkpoint_interval, and a flag given as 0 (--weight_decay 0 to evaluate) was never said."""
    fake_checkpoint(tmp_path / "float")
    _, lines = resolve(tmp_path / "float", mode="predict", to_predict="x.jpg", num_iter=9, iter_unit="batch",
                       warmup_steps=2, display_every=3, seed=3)
    assert [line for line in lines if line.startswith("Note: --")] == [
        "Note: --num_iter, --iter_unit, --warmup_steps, --display_every and --seed are not used: --mode predict runs "
        "each --to_predict image once, untimed, and draws nothing at random"]
    _, lines = resolve(tmp_path / "bench", mode="training_benchmark", checkpoint_interval=5)
    assert [line for line in lines if line.startswith("Note: --")] == [
        "Note: --checkpoint_interval is not used: --mode training_benchmark writes no checkpoint"]
    _, lines = resolve(tmp_path / "float", mode="evaluate", weight_decay=0.0, momentum=0.0, quantize=False)
    assert [line for line in lines if line.startswith("Note: --")] == [
        "Note: --momentum and --weight_decay are not used: --mode evaluate trains nothing"]  # not --quantize False


def test_gpu_flags_the_devices_leave_unused_are_said(tmp_path):
    """The original ignored --gpu_id and --gpu_memory_fraction where nothing used them; only --cpu said so here."""
    from utils.devices import Platform
    from utils.engines import Engine

    def notes(platform, engine=None, **flags):
        lines = []
        config = RunConfig(model_dir=str(tmp_path / "new"), batch_size=2, mode="train", **flags)
        settings.resolve(config, set(flags), log=lines.append, platform=platform, engine=engine)
        return [line for line in lines if line.startswith("Note: --")]

    assert notes(Platform(gpu=False), gpu_id=7, gpu_memory_fraction=0.2) == [
        "Note: --gpu_id and --gpu_memory_fraction are not used: no GPU is visible to this process"]
    assert notes(Platform(gpu=True), gpu_id=1, gpu_memory_fraction=0.2) == [
        "Note: --gpu_memory_fraction is not used: only a --dali run limits the GPU's memory (TensorFlow's grows as "
        "needed otherwise)"]
    assert notes(Platform(gpu=True), Engine("mirrored"), gpu_id=1) == [
        "Note: --gpu_id is not used: RN50_ENGINE=mirrored trains on every visible GPU"]
    assert notes(Platform(gpu=True), Engine("horovod", rank=1, size=2, local_rank=1), gpu_id=1) == [
        "Note: --gpu_id is not used: each worker takes the GPU of its local rank"]
    assert notes(Platform(gpu=True), gpu_id=1) == []  # one process, one GPU: it picks it
    assert notes(Platform(gpu=False), cpu=True, gpu_id=7) == ["Note: --gpu_id is not used: --cpu runs on no GPU"]


def test_a_quantisation_aware_train_and_evaluate_says_its_evaluation_runs_the_float_model(tmp_path):
    _, lines = resolve(tmp_path / "new", mode="train_and_evaluate", quantize=True,
                       export_dir=str(tmp_path / "export"))
    assert "Note: --mode train_and_evaluate evaluates and exports the float model, as the original " \
           "(export_frozen_graph.py --quantize exports the quantised graph)" in lines
    assert not [line for line in resolve(tmp_path / "new", mode="train_and_evaluate")[1] if "float model" in line]


def test_dali_index_files_without_dali_are_said_unused():
    lines = []
    config = RunConfig(batch_size=2, mode="train", data_dir="data", data_idx_dir="idx")
    settings._note_unused_flags(config, {"data_dir", "data_idx_dir"}, lines.append)
    assert lines == ["Note: --data_idx_dir is not used: without --dali the TFRecords are read through tf.data"]
    lines.clear()
    settings._note_unused_flags(dataclasses.replace(config, dali=True), {"data_idx_dir", "dali"}, lines.append)
    assert lines == []
    for given in ({"data_idx_dir", "dali"}, {"data_idx_dir"}):  # predict reads image files, with or without --dali
        lines.clear()
        predict = dataclasses.replace(config, mode="predict", to_predict="x.jpg", dali="dali" in given)
        settings._note_unused_flags(predict, given, lines.append)
        assert lines == ["Note: {} not used: predict reads image files, not the dataset".format(
            "--dali and --data_idx_dir are" if "dali" in given else "--data_idx_dir is")]


def test_qat_flags_without_quantize_are_refused_where_they_would_train(tmp_path):
    for mode in ("train", "train_and_evaluate", "training_benchmark"):
        with pytest.raises(UserError, match="only take effect with --quantize"):
            RunConfig(batch_size=2, mode=mode, symmetric=True)
    RunConfig(batch_size=2, mode="evaluate", symmetric=True)  # said, not refused (the test above)


def test_an_output_directory_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for flags, expected in (
            (["--mode", "evaluate", "--export_dir", str(blocker)], f"--export_dir {blocker} exists and is not a "
                                                                   "directory"),
            (["--mode", "train", "--model_dir", str(blocker / "m")], f"--model_dir {blocker / 'm'} cannot be "
                                                                     f"created: {blocker} is not a directory"),
            (["--mode", "predict", "--to_predict", str(tmp_path), "--results_dir", str(blocker / "r")],
             f"--results_dir {blocker / 'r'} cannot be created: {blocker} is not a directory")):
        with pytest.raises(UserError) as error:
            settings.parse(["--batch_size", "2", "--data_dir", str(tmp_path), *flags])
        assert str(error.value) == expected
    # --log_filename with a directory (an absolute path) writes outside --results_dir, and is checked itself.
    with pytest.raises(UserError) as error:
        settings.parse(["--batch_size", "2", "--mode", "predict", "--to_predict", str(tmp_path), "--results_dir",
                        str(tmp_path / "r"), "--log_filename", str(blocker / "log.json")])
    assert str(error.value) == f"--log_filename {blocker / 'log.json'} cannot be created: {blocker} is not a directory"
    # --export_dir in a mode that exports nothing is not checked (it is said unused instead).
    settings.parse(["--batch_size", "2", "--mode", "predict", "--to_predict", str(tmp_path), "--export_dir",
                    str(blocker), "--results_dir", str(tmp_path)])


# ---------------------------------------------------------------- helpers every tool uses

def test_reconcile_adopts_what_is_not_given_and_refuses_what_contradicts():
    lines = []
    changes = settings.reconcile({"a": 1, "b": False, "c": 3}, {"a": 2, "b": True, "c": 4}, {"c"},
                                 {"a": "--a", "b": "--b", "c": "--c"}, "X", lines.append,
                                 compatible=lambda name, *_: name == "c")
    assert changes == {"a": 2, "b": True} and lines == ["Using --a 2 from X", "Using --b from X"]
    with pytest.raises(UserError, match=r"^--c 3 contradicts X, trained with --c 4 \(omit the flag"):
        settings.reconcile({"c": 3}, {"c": 4}, {"c"}, {"c": "--c"}, "X", lines.append)


def test_given_options_are_the_explicit_ones_and_the_parser_keeps_its_defaults():
    import argparse
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--name", default="x")
    parser.add_argument("--flag", action="store_true")
    assert given_options(parser, ["--size", "224", "--flag"]) == {"size", "flag"}
    assert parser.parse_args([]).size == 224


def test_parse_needs_no_tensorflow_and_rejects_abbreviations(capsys):
    with pytest.raises(UserError) as error:
        settings.parse(["--mode", "train", "--model", "resnext101-32x4d", "--batch", "8", "--num_class", "10"])
    errors = capsys.readouterr().err.splitlines() + ["ERROR: " + str(error.value)]
    assert errors[0] == "ERROR: Unknown command line arg: --model (did you mean --model_dir?)"
    assert "ERROR: Unknown command line arg: --batch (did you mean --batch_size?)" in errors
    assert "ERROR: Unknown command line arg: --num_class (did you mean --num_classes?)" in errors


def test_a_labels_file_that_names_another_count_than_the_datasets_labels_is_warned_about(tmp_path):
    """A 3-name labels.txt beside records of labels 1..4 was copied beside a training's checkpoints without a word,
    and its predict named 3 of the 4 outputs (2026-12-07)."""
    from utils.dataset_manifest import SplitFacts
    (tmp_path / "labels.txt").write_text("astronaut\ncat\nmotorcycle\n")

    def facts(num_classes):
        return [SplitFacts("train", str(tmp_path), (), 1, 1, True, num_classes, (1, num_classes))]

    lines = []
    settings._check_labels_file(str(tmp_path), facts(4), lines.append)
    assert lines == [f"WARNING: {tmp_path / 'labels.txt'} names 3 classes, but the dataset's labels are 1..4: its "
                     "names are another dataset's or cut short, and the names a training keeps beside its checkpoints "
                     "(for predict and the exports) come from it; write one name per label"]
    lines.clear()
    settings._check_labels_file(str(tmp_path), facts(3), lines.append)  # agrees
    settings._check_labels_file(str(tmp_path), facts(None), lines.append)  # no manifest: nothing known
    (tmp_path / "labels.txt").unlink()
    settings._check_labels_file(str(tmp_path), facts(4), lines.append)  # no names
    assert lines == []


def test_a_job_of_more_workers_than_train_files_is_refused_but_dali_shards_records(tmp_path):
    """A tf.data worker reads whole files: one without any would stop at its first batch while the others wait
    for it in a collective. DALI shards the records, so any number of workers has some."""
    from dataprep import make_dali_index
    from tests._data_helpers import write_tfrecord_shards
    data, index = tmp_path / "data", tmp_path / "index"
    write_tfrecord_shards(str(data), "train", 2, 2, 32)
    config = RunConfig(mode="train", data_dir=str(data), num_classes=11, batch_size=2, model_dir=str(tmp_path))
    with pytest.raises(UserError, match=re.escape(
            f"--data_dir {data} has 2 train-* files but this job runs 3 workers, and each worker reads whole files "
            "(worker k: files k, k + 3, ...): use at most 2 workers, or write more shards")):
        settings.check_data(config, workers=3)
    lines = []
    assert len(settings.check_data(config, workers=2, log=lines.append)["train"].files) == 2
    assert not [line for line in lines if line.startswith("Note:")]  # 1 file each
    uneven = tmp_path / "uneven"
    write_tfrecord_shards(str(uneven), "train", 3, 5, 32)  # 5 images a file: worker 0 reads 2 files, worker 1 one
    lines = []
    settings.check_data(dataclasses.replace(config, data_dir=str(uneven)), workers=2, log=lines.append)
    assert [line for line in lines if line.startswith("Note:")] == [
        f"Note: --data_dir {uneven} has 3 train-* files for 2 workers, which read whole files (worker k: files k, "
        "k + 2, ...), so their shares differ: 10 / 5 images; each worker takes an epoch's steps from its own share, "
        "so the smaller shares are read more than once an epoch and the larger ones not whole, as in the original's "
        "multi-GPU input. A multiple of 2 files reads each image once an epoch (python -m dataprep.build_tfrecords "
        "--train_shards N)"]
    assert make_dali_index.main([str(data), str(index), "--no_progress"]) == 0
    dali = RunConfig(mode="train", data_dir=str(data), num_classes=11, batch_size=2, model_dir=str(tmp_path),
                     dali=True, data_idx_dir=str(index))
    assert len(settings.check_data(dali, workers=3)["train"].files) == 2


def test_train_and_evaluate_with_fewer_validation_images_than_a_batch_is_refused_before_training(tmp_path):
    """Its evaluation would have no whole batch: refused at the start, not after the training (as it was)."""
    from tests._data_helpers import write_tfrecord_shards
    data = tmp_path / "data"
    write_tfrecord_shards(str(data), "train", 1, 30, 32)
    write_tfrecord_shards(str(data), "validation", 1, 20, 32)
    config = RunConfig(mode="train_and_evaluate", data_dir=str(data), num_classes=11, batch_size=24,
                       model_dir=str(tmp_path))
    with pytest.raises(UserError, match=re.escape(
            f"--data_dir {data} has 20 validation images, fewer than one evaluation batch of --batch_size 24: "
            "train_and_evaluate would train, then fail to evaluate; use a --batch_size of at most 20, or --mode "
            "train")):
        settings.check_data(config)
    assert set(settings.check_data(dataclasses.replace(config, batch_size=20))) == {"train", "validation"}
    assert set(settings.check_data(dataclasses.replace(config, mode="train"))) == {"train"}


def test_a_resume_through_another_input_or_with_another_seed_says_its_stream_is_another(tmp_path):
    """The checkpoint records its run's --seed and input (since 2026-12-05): a resume that changes either reads
    another data stream from there, said in one line; the same ones, or a checkpoint that records neither, say
    nothing."""
    model = {"mode": "train", "num_classes": 10, "image_size": 32}
    training = {"moving_average_decay": 0.0, "images_per_step": 2, "processes": 1}
    path = fake_checkpoint(tmp_path, training=dict(training, data_stream={"seed": 6, "input": "tf.data"}))
    assert resolve(tmp_path, seed=6, **model)[1] == []
    assert resolve(tmp_path, seed=99, **model)[1] == [
        f"Note: checkpoint {path} was trained with --seed 6: this run has --seed 99, so its data stream does not "
        "continue the checkpoint's"]
    assert resolve(tmp_path, **model)[1] == [
        f"Note: checkpoint {path} was trained with --seed 6: this run has no --seed, so its data stream does not "
        "continue the checkpoint's"]
    lines = []  # (a --dali run needs its data and index files to resolve: the note's own function here)
    settings._note_another_data_stream(RunConfig(seed=6, dali=True, data_dir="/data", data_idx_dir="/idx", **model),
                                       checkpoint.inspect(path), {"seed": 6, "input": "tf.data"}, lines.append)
    assert lines == [f"Note: checkpoint {path} was trained through tf.data: this run reads through dali, so its data "
                     "stream does not continue the checkpoint's (and DALI's resize filter is not TensorFlow's)"]
    unseeded = fake_checkpoint(tmp_path / "unseeded", training=dict(training, data_stream={"seed": None,
                                                                                           "input": "tf.data"}))
    assert resolve(tmp_path / "unseeded", **model)[1] == []
    assert resolve(tmp_path / "unseeded", seed=3, **model)[1] == [
        f"Note: checkpoint {unseeded} was trained without --seed: this run has --seed 3, so its data stream does not "
        "continue the checkpoint's"]
    fake_checkpoint(tmp_path / "older", training=training)  # before the stream was recorded
    assert resolve(tmp_path / "older", seed=99, **model)[1] == []


def test_a_checkpoint_records_its_runs_seed_and_input():
    config = RunConfig(mode="train", data_dir="/data", seed=4, batch_size=2)
    assert settings.training_state(config)["data_stream"] == {"seed": 4, "input": "tf.data"}
    assert settings.data_stream(dataclasses.replace(config, dali=True, data_idx_dir="/idx")) == {"seed": 4,
                                                                                          "input": "dali"}
    assert settings.data_stream(dataclasses.replace(config, mode="training_benchmark", data_dir=None, seed=None)) \
        == {"seed": None, "input": "synthetic"}


def test_a_resume_that_changes_the_images_per_step_and_the_stream_says_each_change_once(tmp_path):
    """The input and --seed notes are said whatever else changed (before 2026-12-06 another images per step or
    process count hid them), and the images-per-step note's "--seed's data stream does not continue" only where
    no such note already says the stream is another."""
    model = {"mode": "train", "num_classes": 10, "image_size": 32}
    path = fake_checkpoint(tmp_path, training={"moving_average_decay": 0.0, "images_per_step": 16, "processes": 1,
                                               "data_stream": {"seed": 1, "input": "tf.data"}})
    images = (f"Note: checkpoint {path} was trained at 16 images per step: this run continues at 8 (--batch_size 8 x "
              "1 replica(s) x --grad_accum_steps 1), and its learning rate and steps per epoch follow from 8")
    stream = f"Note: checkpoint {path} was trained with --seed 1: this run has {{}}, so its data stream does not " \
             "continue the checkpoint's"
    assert resolve(tmp_path, batch_size=8, **model)[1] == [images, stream.format("no --seed")]
    assert resolve(tmp_path, batch_size=8, seed=2, **model)[1] == [images, stream.format("--seed 2")]
    assert resolve(tmp_path, batch_size=8, seed=1, **model)[1] == [
        images + "; --seed's data stream does not continue where the checkpoint's stopped"]
    lines = []  # the same 16 images per step over 2 processes, with another seed: the seed note says it all
    settings.resolve(RunConfig(model_dir=str(tmp_path), batch_size=8, seed=2, **model), {"batch_size", "seed"} |
                     set(model), log=collect(lines), replicas=2, workers=2)
    assert lines == [stream.format("--seed 2")]
    # Through DALI over 2 processes at 4 images each (a --dali run needs its index files to resolve: the notes'
    # own function here): the input note, with the seed's change in the same line when there is one.
    info = checkpoint.inspect(path)
    for seed, change in ((1, ""), (None, " with --seed 1: this run reads through dali and has no --seed")):
        lines = []
        settings._note_another_stream(RunConfig(seed=seed, dali=True, data_dir="/data", data_idx_dir="/idx",
                                                batch_size=4, **model), info, None, 2, 2, lines.append)
        assert lines[0] == (f"Note: checkpoint {path} was trained at 16 images per step: this run continues at 8 "
                            "(--batch_size 4 x 2 replica(s) x --grad_accum_steps 1), and its learning rate and steps "
                            "per epoch follow from 8")
        assert lines[1] == (f"Note: checkpoint {path} was trained through tf.data"
                            f"{change or ': this run reads through dali'}, so its data stream does not continue the "
                            "checkpoint's (and DALI's resize filter is not TensorFlow's)")
        assert lines[2:] == ([] if seed is None else [
            "Note: DALI's input cannot skip to step 3: this resume reads its data stream from the start, so it is "
            "not the exact continuation --seed gives on the TFRecord input"])


def test_a_log_filename_with_a_tilde_the_shell_left_is_refused(tmp_path, monkeypatch):
    """`--log_filename=~/l.json` was checked joined to --results_dir, where `~` is no longer first: the run wrote
    <results_dir>/~/l.json without a word."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="^--log_filename ~/l.json starts with ~, which the shell did not expand"):
        settings.check_mode_arguments(RunConfig(mode="train", batch_size=2, data_dir=str(tmp_path),
                                                results_dir=str(tmp_path / "r"),
                                                log_filename="~/l.json"))


def test_a_train_split_smaller_than_one_global_batch_is_refused_before_the_run_starts(tmp_path):
    """dataprep recorded 30 images: a global batch of 8 x 2 workers x --grad_accum_steps 2 = 32 is refused at the
    data check, before the log and model_dir (until 2026-12-07 at the sample count, after the run's log began);
    without a manifest the count comes later, at the training's own (runtime/inputs.training_length)."""
    import numpy as np
    from dataprep import records
    from tests._data_helpers import encode_image, random_image, write_tfrecord_shards
    rng = np.random.default_rng(0)
    items = [records.ImageItem(filename="i%d.jpg" % i, label=1 + i % 3, synset="c%d" % (i % 3), text="c%d" % (i % 3),
                               data=encode_image(random_image(rng, 16, 16))) for i in range(30)]
    data = tmp_path / "data"
    records.write_split(items, str(data), "train", 2, num_classes=3)
    config = RunConfig(mode="train", data_dir=str(data), num_classes=4, batch_size=8, grad_accum_steps=2,
                       model_dir=str(tmp_path / "run"))
    with pytest.raises(UserError) as error:
        settings.check_data(config, workers=2)
    assert str(error.value) == ("the dataset has 30 samples, fewer than one global batch of 32 (--batch_size 8 x 2 "
                                "replicas x --grad_accum_steps 2): use a smaller --batch_size or --grad_accum_steps")
    assert set(settings.check_data(config)) == {"train"}  # one worker: 16 images a step
    plain = tmp_path / "plain"  # no manifest: nothing counted here
    write_tfrecord_shards(str(plain), "train", 2, 15, 16)
    assert set(settings.check_data(dataclasses.replace(config, data_dir=str(plain), num_classes=11),
                                   workers=2)) == {"train"}


def test_a_new_training_left_at_the_imagenet_class_count_on_a_small_dataset_is_told_the_count_that_fits(tmp_path):
    """The audit's 3-class dataset trained with the default --num_classes 1001 (998 outputs no image is labelled
    with) said so only inside the Dataset line. A Note now gives the count; a given --num_classes, the original's
    one extra output, and a dataset without recorded labels say nothing."""
    import numpy as np
    from dataprep import records
    from tests._data_helpers import encode_image, random_image
    rng = np.random.default_rng(0)
    items = [records.ImageItem(filename="i%d.jpg" % i, label=1 + i % 3, synset="c%d" % (i % 3), text="c%d" % (i % 3),
                               data=encode_image(random_image(rng, 16, 16))) for i in range(12)]
    data = tmp_path / "data"
    records.write_split(items, str(data), "train", 1, num_classes=3)

    def notes(given, **flags):
        lines = []
        settings.resolve(RunConfig(mode="train", data_dir=str(data), batch_size=4, model_dir=str(tmp_path / "run"),
                                   **flags), set(given) | {"data_dir", "batch_size", "model_dir"}, log=lines.append)
        return [line for line in lines if line.startswith("Note: --num_classes")]
    assert notes(set()) == [
        f"Note: --num_classes is the original's ImageNet default, 1001, but dataset {data} has labels 1..3: the "
        "classifier gets 998 outputs no image is labelled with; --num_classes 3 fits this dataset"]
    assert notes({"num_classes"}, num_classes=1001) == []
    assert notes(set(), num_classes=4) == []  # the original's layout: one unlabelled output more
