"""Tests of model/checkpoint/read.py: finding the newest complete checkpoint, and what inspect() reads from the
object format's object graph (architecture from model.resnet.ARCHITECTURES, classes, classifier form)."""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from model import checkpoint
from model.resnet import ARCHITECTURES, ArchSpec, build_model
from tests._checkpoint_helpers import save_named
from utils.errors import UserError

# Architectures of two small stages that differ only in what tells them apart: the 3x3 conv's groups, SE or not.
TINY = {
    "tiny-resnet": ArchSpec(layers=(1, 2), widths=(8, 16), expansions=2, cardinality=1, use_se=False),
    "tiny-resnext": ArchSpec(layers=(1, 2), widths=(8, 16), expansions=2, cardinality=4, use_se=False),
    "tiny-se-resnext": ArchSpec(layers=(1, 2), widths=(8, 16), expansions=2, cardinality=4, use_se=True,
                                se_ratio=4),
}


def write_object(directory, model):
    """An object-format checkpoint of `model` alone (no optimizer, no step)."""
    return tf.train.Checkpoint(model=model).write(os.path.join(str(directory), "model.ckpt-1"))


@pytest.fixture
def tiny_architectures(monkeypatch):
    for name, spec in TINY.items():
        monkeypatch.setitem(ARCHITECTURES, name, spec)


# ---------------------------------------------------------------- finding a checkpoint

@pytest.mark.parametrize("step, share", [(0, "100%"), (3, "73%"), (43, "1%"), (44, None), (1124, None), (None, None)])
def test_a_model_trained_too_few_steps_for_its_bn_statistics_is_warned_about(step, share):
    """Decay 0.9 per step from mean 0 / variance 1: 0.9 ** 43 = 0.0108 still holds 1% of them, 0.9 ** 44 = 0.0097
    does not; a checkpoint that records no step is not judged."""
    line = checkpoint.unsettled_statistics(step, "checkpoint /x/model.ckpt-7")
    if share is None:
        assert line is None
    else:
        assert line == (f"WARNING: checkpoint /x/model.ckpt-7 was trained {step} step(s): its BN moving statistics "
                        f"still hold {share} of their starting values (mean 0, variance 1, where a training or a "
                        "--finetune_checkpoint fine-tune starts them), so it normalises with statistics that are not "
                        "its data's and its outputs are unreliable; train it to step 44 or beyond (under 1% left)")


def test_missing_checkpoint_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such checkpoint"):
        checkpoint.find_checkpoint(str(tmp_path / "nothing"), "--checkpoint")
    with pytest.raises(UserError, match="no complete checkpoint in that directory"):
        checkpoint.find_checkpoint(str(tmp_path), "--checkpoint")


def test_a_checkpoints_file_or_an_export_given_as_a_checkpoint_is_refused_with_what_to_give(tmp_path):
    """A checkpoint's .index file said `expected model.ckpt-30.index.index`, and a SavedModel said `no complete
    checkpoint in that directory`, as if a checkpoint were damaged (2026-12-07)."""
    prefix = tmp_path / "model.ckpt-30"
    checkpoint.write(str(prefix), {checkpoint.GLOBAL_STEP_KEY: np.int64(30)},
                     dict(checkpoint.metadata("resnet50", 10, 32, False, False), step=30))
    data = [name for name in os.listdir(tmp_path) if ".data-" in name][0]
    for name in ("model.ckpt-30.index", data):
        with pytest.raises(UserError) as error:
            checkpoint.find_checkpoint(str(tmp_path / name), "--finetune_checkpoint")
        assert str(error.value) == (f"--finetune_checkpoint {tmp_path / name} is one of a checkpoint's files: name "
                                    f"the checkpoint by its prefix, --finetune_checkpoint {prefix}")
    export = tmp_path / "export" / "1796663213"
    export.mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    with pytest.raises(UserError) as error:
        checkpoint.find_checkpoint(str(export), "--finetune_checkpoint")
    assert str(error.value) == (f"--finetune_checkpoint {export} is a SavedModel (an export), not a training "
                                "checkpoint: give the checkpoint it was exported from, which its record does not name")
    # the --export_dir that holds it, named as such, with the checkpoint its newest export records (an audit's
    # `export_frozen_graph.py --checkpoint <export_dir>` said `no complete checkpoint in that directory`, 2026-12-07)
    newer = tmp_path / "export" / "1796663299"
    (newer / "assets.extra").mkdir(parents=True)
    (newer / "saved_model.pb").write_bytes(b"")
    (newer / "assets.extra" / "source.json").write_text(json.dumps({"checkpoint": "/runs/a/model.ckpt-7"}))
    (tmp_path / "export" / ".tmp-1796663300").mkdir()  # an interrupted export's temporary: not one
    for flag in ("--checkpoint", "--input"):
        with pytest.raises(UserError) as error:
            checkpoint.find_checkpoint(str(tmp_path / "export"), flag)
        assert str(error.value) == (f"{flag} {tmp_path / 'export'} is an --export_dir holding 2 SavedModels "
                                    f"(exports), the newest {newer}, not a training checkpoint: give the checkpoint "
                                    "it was exported from, /runs/a")


def test_incomplete_newest_checkpoint_falls_back_with_a_warning(trained_model, tmp_path):
    writer, _, _ = save_named(tmp_path, trained_model, step=1)
    writer.save(2)
    os.remove(tf.io.gfile.glob(str(tmp_path / "model.ckpt-2.data-*"))[0])
    warnings = []
    assert checkpoint.latest_checkpoint(str(tmp_path), warn=warnings.append).endswith("model.ckpt-1")
    assert warnings == [f"WARNING: checkpoint {tmp_path}/model.ckpt-2 is incomplete (its data files are missing); "
                        f"using the newest complete one, {tmp_path}/model.ckpt-1"]
    # said once per run: resolving a run's settings and restoring look for the checkpoint in turn
    assert checkpoint.latest_checkpoint(str(tmp_path), warn=warnings.append).endswith("model.ckpt-1")
    assert len(warnings) == 1
    # ... and again in the next run of the same process (2026-12-06: once per process, so a second in-process
    # predict took the older checkpoint without a word)
    from utils.errors import command
    command(lambda argv: checkpoint.latest_checkpoint(str(tmp_path), warn=warnings.append))()
    assert warnings == warnings[:1] * 2
    with pytest.raises(UserError, match="incomplete"):
        checkpoint.find_checkpoint(str(tmp_path / "model.ckpt-2"), "--checkpoint")
    # its .index gone instead, named by its prefix: incomplete too, as the directory's warning says, not "no such
    # checkpoint" (an audit, 2026-12-07), with the complete one beside it
    writer.save(3)
    os.remove(str(tmp_path / "model.ckpt-3.index"))
    with pytest.raises(UserError) as error:
        checkpoint.find_checkpoint(str(tmp_path / "model.ckpt-3"), "--checkpoint")
    assert str(error.value) == (f"--checkpoint {tmp_path}/model.ckpt-3: the checkpoint is incomplete (its .index file "
                                f"is missing); the newest complete one beside it is {tmp_path}/model.ckpt-1")


def test_a_directory_whose_checkpoints_are_all_damaged_or_missing_is_refused(trained_model, tmp_path):
    """Not taken for an empty one: training would start afresh over the run it was meant to continue (it did, as a
    1001-class 224 px model, until 2026-12-05), and the inference modes would say there is nothing to load."""
    writer, _, _ = save_named(tmp_path, trained_model, step=1)
    os.remove(str(tmp_path / "model.ckpt-1.index"))
    with pytest.raises(UserError) as raised:
        checkpoint.latest_checkpoint(str(tmp_path))
    assert str(raised.value) == (
        f"{tmp_path} has no complete checkpoint: {tmp_path}/model.ckpt-1 is incomplete (its .index file is missing); "
        "restore the files, or move the checkpoint files and the `checkpoint` state file away to start afresh")
    stale = tmp_path / "stale"  # a state file naming a checkpoint none of whose files is there
    stale.mkdir()
    checkpoint.write_state_file(str(stale), ["model.ckpt-5", "model.ckpt-9"])
    with pytest.raises(UserError, match=r"model.ckpt-9 is missing \(the `checkpoint` state file names it, but none "
                                        r"of its files is there\), as are the 1 older one\(s\) it names; "):
        checkpoint.latest_checkpoint(str(stale))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert checkpoint.latest_checkpoint(str(empty)) is None  # no checkpoint at all: a new run's directory



def test_a_checkpoint_deleted_after_it_was_chosen_is_said_to_be_gone_and_by_which_training(trained_model, tmp_path):
    """A tool picks model_dir's newest checkpoint, builds its model, and a training's max-to-keep rotation has deleted
    it meanwhile: until 2026-12-06 `cannot read checkpoint ...: Unsuccessful TensorSliceReader constructor`, which
    reads like a damaged checkpoint."""
    from utils.run_lock import RunLock
    save_named(tmp_path, trained_model, step=1)
    prefix = checkpoint.latest_checkpoint(str(tmp_path))
    reader = checkpoint.open_reader(prefix)  # opened before the deletion: its reads fail the same way
    for path in tf.io.gfile.glob(prefix + ".*"):
        os.remove(path)
    advice = ("after this run chose it; run the command again to read the newest one, or copy the checkpoint out of "
              "that directory and pass its prefix")
    with pytest.raises(UserError) as raised:
        checkpoint.open_reader(prefix)
    assert str(raised.value) == f"checkpoint {prefix} is gone: it was deleted {advice}"
    with RunLock(str(tmp_path), argv=["main.py"]):  # a training holds the directory
        with pytest.raises(UserError) as raised:
            checkpoint.inspect(prefix)
        assert str(raised.value).startswith(
            f"checkpoint {prefix} is gone: it was deleted by the training running in {tmp_path} (pid {os.getpid()} "
            "on host ")
        assert str(raised.value).endswith(f"which keeps only its newest checkpoints {advice}")
        with pytest.raises(UserError, match=r"^checkpoint .* is gone: it was deleted by the training running"):
            checkpoint.read_tensor(reader, checkpoint.GLOBAL_STEP_KEY, prefix)


def test_a_state_file_naming_another_directorys_checkpoints_reads_only_the_model_dirs_own(trained_model, tmp_path):
    """A model_dir copied with its state file (absolute paths, written by TensorFlow or another tool) named the
    original's checkpoints, and the newest of them was loaded from there without a word (2026-12-06)."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    writer, _, _ = save_named(original, trained_model, step=1)
    writer.save(2)
    copy.mkdir()
    for path in original.glob("model.ckpt-1.*"):
        (copy / path.name).write_bytes(path.read_bytes())
    checkpoint.write_state_file(str(copy), [str(original / "model.ckpt-1"), str(original / "model.ckpt-2")])
    warned = []
    assert checkpoint.latest_checkpoint(str(copy), warn=warned.append) == str(copy / "model.ckpt-1")
    assert warned == [
        f"Note: the `checkpoint` state file of {copy} names 2 checkpoint(s) in another directory, {original}; "
        f"checkpoints are read only from the model_dir, so each is looked for in {copy} by its name",
        f"WARNING: checkpoint {copy}/model.ckpt-2 is missing (the `checkpoint` state file names it, but none of its "
        f"files is there); using the newest complete one, {copy}/model.ckpt-1"]
    checkpoint.write_state_file(str(copy), [str(copy / "model.ckpt-1")])  # its own directory: no note
    warned.clear()
    assert checkpoint.latest_checkpoint(str(tmp_path / "." / "copy"), warn=warned.append).endswith("model.ckpt-1")
    assert warned == []


def test_a_huge_name_in_the_state_file_is_cut_in_what_is_said(trained_model, tmp_path):
    huge = "model.ckpt-9" + "x" * 100_000 + "\x1b[2J"
    checkpoint.write_state_file(str(tmp_path), [huge])
    with pytest.raises(UserError) as raised:
        checkpoint.latest_checkpoint(str(tmp_path))
    assert len(str(raised.value)) < 600 and "xxx..." in str(raised.value) and "\x1b" not in str(raised.value)
    save_named(tmp_path, trained_model, step=1)
    checkpoint.write_state_file(str(tmp_path), ["model.ckpt-1", huge])
    warned = []
    assert checkpoint.latest_checkpoint(str(tmp_path), warn=warned.append).endswith("model.ckpt-1")
    assert len(warned) == 1 and len(warned[0]) < 600 and "xxx... is missing" in warned[0]


# ---------------------------------------------------------------- the object format

@pytest.mark.parametrize("num_classes, use_final_conv, input_normalized", [(2, False, False), (10, True, True)])
def test_object_format_records_resnet50_its_classes_and_classifier_form(tmp_path, num_classes, use_final_conv,
                                                                       input_normalized):
    model = build_model("resnet50", num_classes=num_classes, image_size=32, use_final_conv=use_final_conv,
                        input_normalized=input_normalized)
    info = checkpoint.inspect(write_object(tmp_path, model))
    assert (info.format, info.arch, info.num_classes, info.use_final_conv, info.input_normalized, info.step) == (
        "object", "resnet50", num_classes, use_final_conv, input_normalized, None)
    assert not info.has_optimizer_state and not info.has_quantization_ranges


def test_what_a_checkpoint_does_not_record_depends_on_its_format(tmp_path):
    """Settings that shaped a training but that its checkpoint does not record: a run must say it assumes them.
    The original trained only at 224 px; this port's object-based checkpoints did not record their size; a QAT
    checkpoint's grid is unknown unless its metadata records it."""
    model = build_model("resnet50", num_classes=2, image_size=32)
    info = checkpoint.inspect(write_object(tmp_path / "object", model))
    assert info.unrecorded_settings() == {"image_size": "an object-based checkpoint of an earlier version of this port"}
    base = dict(path="p", step=1, arch="resnet50", num_classes=10, use_final_conv=False)
    assert checkpoint.CheckpointInfo(format="tf1", **base).unrecorded_settings() == {}
    assert checkpoint.CheckpointInfo(format="tf1", has_quantization_ranges=True, **base).unrecorded_settings() == {
        "symmetric": "the original's format", "use_qdq": "the original's format"}
    named = checkpoint.CheckpointInfo(format="named", image_size=32, has_quantization_ranges=True,
                                      training_state={"quantize": True, "symmetric": True}, **base)
    why = "metadata of an earlier version of this port, or converted from one"
    assert named.unrecorded_settings() == {"use_qdq": why}
    # postprocess_ckpt.py's conversion of an object-based checkpoint has no size to record
    assert checkpoint.CheckpointInfo(format="named", **base).unrecorded_settings() == {"image_size": why}


@pytest.mark.parametrize("arch", sorted(TINY))
def test_object_format_architecture_is_the_one_whose_blocks_it_holds(tmp_path, tiny_architectures, arch):
    """The three differ only in the grouped conv's kernel shape and the SE layers; none is named in read.py."""
    info = checkpoint.inspect(write_object(tmp_path, build_model(arch, num_classes=3, image_size=32)))
    assert (info.format, info.arch, info.num_classes) == ("object", arch, 3)


def test_object_format_of_no_known_architecture_is_refused(tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setitem(ARCHITECTURES, "tiny-resnext", TINY["tiny-resnext"])
        prefix = write_object(tmp_path / "unknown", build_model("tiny-resnext", num_classes=3, image_size=32))
    with pytest.raises(UserError, match=r"^cannot tell the architecture of this checkpoint \(3 bottleneck blocks\)$"):
        checkpoint.inspect(prefix)
    dense = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(UserError, match=r"^cannot tell the architecture of this checkpoint \(0 bottleneck blocks\)$"):
        checkpoint.inspect(write_object(tmp_path / "dense", dense))


def test_object_format_matching_two_architectures_names_both(tmp_path, monkeypatch):
    monkeypatch.setitem(ARCHITECTURES, "tiny-resnet", TINY["tiny-resnet"])
    monkeypatch.setitem(ARCHITECTURES, "tiny-resnet-again", TINY["tiny-resnet"])
    prefix = write_object(tmp_path, build_model("tiny-resnet", num_classes=3, image_size=32))
    with pytest.raises(UserError, match="3 bottleneck blocks, as in tiny-resnet and tiny-resnet-again"):
        checkpoint.inspect(prefix)


def test_object_graph_walk_reaches_any_depth_and_walks_a_cycle_once(tmp_path):
    root = node = tf.Module()
    for _ in range(20):
        node.child = tf.Module()
        node.child.parent = node  # a reference back up: a cycle in the object graph
        node = node.child
    node.weight = tf.Variable([1.0, 2.0])
    root.shared = node  # the same object by a second path
    prefix = write_object(tmp_path, root)
    paths = checkpoint.object_paths(tf.train.load_checkpoint(prefix))
    assert paths == {"model/" + "child/" * 20 + "weight": [2]}
    with pytest.raises(UserError, match=r"\(0 bottleneck blocks\)"):
        checkpoint.inspect(prefix)


@pytest.mark.parametrize("edit, what", [
    (lambda meta: [1, 2], "not a JSON object"),
    (lambda meta: dict(meta, num_classes="ten"), "num_classes 'ten' is not an integer from 2 to 1,000,000"),
    (lambda meta: dict(meta, num_classes=10 ** 9), "num_classes 1000000000 is not an integer from 2"),
    (lambda meta: dict(meta, num_classes=True), "num_classes True is not an integer"),
    (lambda meta: dict(meta, image_size=-1), "image_size -1 is not an integer from 8 to 8,192"),
    (lambda meta: dict(meta, arch="../../x"), "arch '../../x' is not one of"),
    (lambda meta: dict(meta, use_final_conv="yes"), "use_final_conv 'yes' is not true or false"),
    (lambda meta: dict(meta, diverged="yes"), "diverged 'yes' is not a {\"step\": N"),
    (lambda meta: dict(meta, training=[1]), "training [1] is not a JSON object"),
    (lambda meta: dict(meta, training={"schedule": "fast"}), "training.schedule 'fast' is not a JSON object"),
    (lambda meta: dict(meta, training={"images_per_step": 0}), "training.images_per_step 0 is not an integer"),
    (lambda meta: dict(meta, training={"images_seen": {}}), "training.images_seen {} is not a {\"step\": N"),
])
def test_damaged_metadata_is_one_line_naming_the_field(tmp_path, edit, what):
    """A hand-edited or damaged checkpoint_metadata was a traceback in every tool (a list: 'list' object has no
    attribute 'get'; num_classes "ten": a TypeError), was blamed on a flag never given (`--num_classes must be at
    least 2 (got -5)`), or was acted on (10**9 classes: an 8 TB classifier; `diverged: "yes"` dropped the
    divergence warning). Each field is checked where the metadata is read."""
    import numpy as np
    meta = edit(dict(checkpoint.metadata("resnet50", 10, 32, False, False, {"quantize": False}), step=3))
    prefix = str(tmp_path / "model.ckpt-3")
    checkpoint.write(prefix, {checkpoint.GLOBAL_STEP_KEY: np.int64(3)}, meta)
    with pytest.raises(UserError) as raised:
        checkpoint.inspect(prefix)
    assert str(raised.value).startswith(f"checkpoint {prefix}: damaged checkpoint_metadata (")
    assert what in str(raised.value)


def test_text_a_checkpoint_or_its_state_file_holds_is_printed_escaped(tmp_path):
    """The divergence record's sign and a checkpoint name from the state file reached the terminal raw (an escape
    sequence could retitle the window, clear the screen or hide the rest of the line)."""
    warning = checkpoint.divergence_warning({"step": 3, "sign": "\x1b]0;PWN\x07\x1b[2Jred"}, "checkpoint m")
    assert "\x1b" not in warning and "(\\x1b]0;PWN\\x07\\x1b[2Jred)" in warning
    model = build_model("resnet50", num_classes=2, image_size=32)
    save_named(tmp_path, model, step=7)
    checkpoint.write_state_file(str(tmp_path), ["model.ckpt-7", "model.ckpt-9\x1b[2J"])
    warned = []
    assert checkpoint.latest_checkpoint(str(tmp_path), warn=warned.append).endswith("model.ckpt-7")
    assert len(warned) == 1 and "\x1b" not in warned[0] and "model.ckpt-9\\x1b[2J" in warned[0]
