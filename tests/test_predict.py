"""runtime/predict.py: what `--mode predict` prints for a directory (links, ignored entries, interrupts), with a
stand-in predict step (no model); the labels file against the classifier's width (load_class_names)."""
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

from runtime import runner_utils
from runtime.config import RunConfig
from runtime.predict import load_class_names, predict_files
from tests._data_helpers import encode_image, random_image
from utils.errors import Terminated, UserError, command

NUM_CLASSES = 6


def fake_step(images):
    """Probabilities that put class 3 first whatever the image."""
    probabilities = np.tile(np.linspace(0.1, 0.2, NUM_CLASSES, dtype=np.float32), (len(images), 1))
    probabilities[:, 3] = 0.5
    return tf.constant(probabilities)


def photo_dir(tmp_path, names):
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for name in names:
        (images / name).write_bytes(encode_image(random_image(rng, 20, 24)))
    return images


def test_a_link_out_of_the_directory_is_skipped_and_the_others_are_predicted(tmp_path, capsys):
    images = photo_dir(tmp_path, ["a.jpg", "c.jpg"])
    (tmp_path / "outside.jpg").write_bytes((images / "a.jpg").read_bytes())
    os.symlink(tmp_path / "outside.jpg", images / "b_out.jpg")
    os.symlink("gone.jpg", images / "d_dangling.jpg")
    (images / "e.webp").write_bytes(b"x")
    (images / "f.bmp").write_bytes(b"x")
    (images / "g.bmp").write_bytes(b"x")
    (images / "notes.txt").write_text("x")
    (images / "sub").mkdir()
    (images / "z_empty.png").write_bytes(b"")

    records = []
    counts = predict_files(fake_step, runner_utils.parse_inference_input(str(images)), 16, 2, log=records.append)
    out, err = capsys.readouterr()
    assert (counts.predicted, counts.failed) == (2, 3)
    assert records == [{"predicted": 2, "failed": 3}]  # the log's final record
    assert err.splitlines() == [
        "Ignored 4 files that are not .jpg/.jpeg/.png (2 .bmp: f.bmp, g.bmp; 1 .txt: notes.txt; 1 .webp: e.webp) and 1 "
        "sub-directory (not searched)",
        "SKIPPED {}: a link pointing outside {} (not followed)".format(images / "b_out.jpg", images),
        "SKIPPED {}: a dangling link (its target gone.jpg does not exist)".format(images / "d_dangling.jpg"),
        "SKIPPED {}: image file is empty (0 bytes)".format(images / "z_empty.png")]
    legend, *lines = out.splitlines()
    assert legend == ("Each line below gives a file's top 5 as <output index> <probability>, and output k is label "
                      "k + 1 of the dataset's records (their labels start at 1)")
    assert [line.split(": ", 1)[0] for line in lines[:-2]] == [str(images / "a.jpg"), str(images / "c.jpg")]
    assert lines[0].split(": ", 1)[1].startswith("3 0.5000, ")
    assert lines[-2:] == ["Ending Inference ...", "predicted 2, failed 3"]


def test_a_file_whose_outputs_are_not_finite_is_reported_and_counts_as_failed(tmp_path, capsys):
    """A diverged model's NaN probabilities are no ranking: each such file is a SKIPPED line naming the cause (the
    run then exits 1), the others are predicted. Until 2026-12-05 it printed `0 nan, 1 nan, ...` and exit 0."""
    images = photo_dir(tmp_path, ["a.jpg", "b.jpg", "c.jpg"])

    def step(batch):
        probabilities = fake_step(batch).numpy()
        probabilities[1, 2] = np.nan  # the second image of each batch
        return tf.constant(probabilities)

    counts = predict_files(step, [str(images / name) for name in ("a.jpg", "b.jpg", "c.jpg")], 16, 3)
    out, err = capsys.readouterr()
    assert (counts.predicted, counts.failed) == (2, 1)
    assert err.splitlines() == ["SKIPPED {}: the model's outputs for it are not finite: the model is not usable as it "
                                "stands (trained for only a few steps, its BN moving statistics not settled, or its "
                                "training diverged)".format(images / "b.jpg")]
    assert [line.split(": ", 1)[0] for line in out.splitlines()[1:3]] == [str(images / "a.jpg"),
                                                                          str(images / "c.jpg")]
    assert out.splitlines()[-1] == "predicted 2, failed 1"


def test_a_plain_list_of_files_still_works(tmp_path, capsys):
    images = photo_dir(tmp_path, ["a.jpg"])
    counts = predict_files(fake_step, [str(images / "a.jpg")], 16, 4)
    assert (counts.predicted, counts.failed) == (1, 0)
    assert capsys.readouterr().err == ""


def test_a_file_name_with_control_characters_is_printed_escaped_on_one_line(tmp_path, capsys):
    """A newline in a file name forged a line of output (`FAKE.jpg: 0 (T-shirt) 1.0000`), an escape sequence
    drove the terminal: both reached stdout and the SKIPPED lines raw."""
    names = ["nl\nFAKE.jpg: 0 (T-shirt) 1.0000.jpg", "ansi\x1b]0;PWN\x07.jpg"]
    images = photo_dir(tmp_path, names)
    (images / "bad\x1b[31m.jpg").write_bytes(b"not an image")
    counts = predict_files(fake_step, [str(images / name) for name in names + ["bad\x1b[31m.jpg"]], 16, 4)
    assert (counts.predicted, counts.failed) == (2, 1)
    captured = capsys.readouterr()
    lines = captured.out.splitlines()[1:]  # (after the legend)
    # (a name holding ": " is quoted as a JSON string: a reader splits the line at its first ": ")
    assert lines[0].startswith('"{}": 3 '.format(images / "nl\\nFAKE.jpg: 0 (T-shirt) 1.0000.jpg"))
    assert lines[1].startswith(str(images / "ansi\\x1b]0;PWN\\x07.jpg") + ": 3 ")
    assert "\x1b" not in captured.out + captured.err
    assert "SKIPPED {}: ".format(images / "bad\\x1b[31m.jpg") in captured.err


def test_a_file_name_holding_colon_space_is_quoted_so_the_line_splits_at_the_right_place(tmp_path, capsys):
    """`colon: 9 (Bag) 1.0000.jpg: 3 ...` read as class 9 to anything splitting at the first ": "."""
    import json
    names = ["colon: 9 (Bag) 1.0000.jpg", 'quote" and: x.jpg', "plain:x.jpg"]
    images = photo_dir(tmp_path, names)
    predict_files(fake_step, [str(images / name) for name in names], 16, 4)
    lines = capsys.readouterr().out.splitlines()[1:]  # (after the legend)
    assert [json.loads(line.split(": 3 ", 1)[0]) for line in lines[:2]] == [str(images / name) for name in names[:2]]
    assert lines[2].startswith(str(images / "plain:x.jpg") + ": 3 ")


@pytest.mark.parametrize("stop, name", [(KeyboardInterrupt, "SIGINT"), (lambda: Terminated(signal.SIGTERM), "SIGTERM")])
def test_an_interrupt_says_how_many_files_were_predicted_and_logs_the_counts(tmp_path, capsys, stop, name):
    """The line says how far the run got, and so does the log's final record, with the signal that ended it (until
    2026-12-07 an interrupted run's log ended at its PARAMETER record)."""
    images = photo_dir(tmp_path, ["a.jpg", "b.jpg", "c.jpg", "d.jpg", "e.jpg"])
    calls = []
    records = []

    def interrupted_step(batch):
        calls.append(len(batch))
        if len(calls) == 2:
            raise stop()
        return fake_step(batch)

    @command
    def main(argv=None):
        predict_files(interrupted_step, runner_utils.parse_inference_input(str(images)), 16, 2, log=records.append)

    try:
        status = main()
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt escaped the command wrapper")
    assert status == (130 if name == "SIGINT" else 143)
    out, err = capsys.readouterr()
    assert err.splitlines() == ["INTERRUPTED: {} stopped by {}; 2 of 5 files predicted (the lines above); run "
                                "the same command again to predict all".format(__name__, name)]
    assert len(out.splitlines()) == 3 and "predicted 2" not in out  # the legend and two files
    assert records == [{"predicted": 2, "failed": 0, "interrupted": name}]


def _labels(tmp_path, count):
    path = tmp_path / "labels.txt"
    path.write_text("".join("class_{}\n".format(i) for i in range(count)))
    return str(path)


def test_a_labels_file_shorter_than_the_classifier_is_warned_about_once(tmp_path):
    path = _labels(tmp_path, 3)
    warnings = []
    names = load_class_names(path, RunConfig(model_dir=str(tmp_path), num_classes=5), warn=warnings.append)
    assert names == ["class_0", "class_1", "class_2"]
    assert warnings == ["WARNING: labels file {} names 3 classes but the model has 5 outputs; outputs 3..4 are "
                        "shown by number only".format(path)]


def test_a_labels_file_of_more_classes_than_the_classifier_is_refused(tmp_path):
    path = _labels(tmp_path, 7)
    with pytest.raises(UserError) as error:
        load_class_names(path, RunConfig(model_dir=str(tmp_path), num_classes=5))
    assert str(error.value) == ("labels file {} names 7 classes but the model has 5 outputs: it is the labels file "
                                "of another dataset (pass the right --labels_file)".format(path))


@pytest.mark.parametrize("names,num_classes", [(5, 5), (1000, 1001), (10, 11)])
def test_a_labels_file_that_covers_the_classifier_is_not_warned_about(tmp_path, names, num_classes):
    """1000 names for 1001 outputs is the ImageNet layout: labels 1..1000 use outputs 0..999; K names for K + 1
    outputs is the same layout on any dataset (output K is never a label)."""
    warnings = []
    load_class_names(None, RunConfig(model_dir=str(tmp_path), num_classes=num_classes), warn=warnings.append)
    assert warnings == []  # no labels file at all
    load_class_names(_labels(tmp_path, names), RunConfig(model_dir=str(tmp_path), num_classes=num_classes),
                     warn=warnings.append)
    assert warnings == []


def test_a_labels_file_naming_other_classes_than_the_checkpoints_is_warned_about(tmp_path):
    """--labels_file renames the outputs: when it differs from the labels.txt training left beside the checkpoints
    (the classes the model learned), predict says so, as evaluate and inference.py do."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "labels.txt").write_text("bag\ncoat\nshirt\n")
    other = tmp_path / "other.txt"
    other.write_text("shirt\ncoat\nbag\n")
    warnings = []
    config = RunConfig(model_dir=str(model_dir), num_classes=3)
    assert load_class_names(str(other), config, warn=warnings.append) == ["shirt", "coat", "bag"]
    assert warnings == [f"WARNING: {other} names other classes than {model_dir / 'labels.txt'} (the same names in "
                        "another order), the classes this checkpoint was trained on: output k is its class k, shown "
                        "here under this file's name k"]
    same = tmp_path / "same.txt"
    same.write_text("bag\ncoat\nshirt\n")
    for path in (str(same), None, str(model_dir / "labels.txt")):  # the same names, or the file itself
        warnings.clear()
        load_class_names(path, config, warn=warnings.append)
        assert warnings == []


def test_an_empty_labels_file_names_no_classes(tmp_path):
    """An empty labels.txt beside the checkpoints (a copy cut short by a full disk) is passed over for the data's,
    without a warning that the data names other classes than its "0 classes"; an empty --labels_file is refused."""
    model_dir, data_dir = tmp_path / "model", tmp_path / "data"
    model_dir.mkdir()
    data_dir.mkdir()
    (model_dir / "labels.txt").write_text("")
    (data_dir / "labels.txt").write_text("bag\ncoat\nshirt\n")
    warnings = []
    config = RunConfig(model_dir=str(model_dir), data_dir=str(data_dir), num_classes=3)
    assert load_class_names(None, config, warn=warnings.append) == ["bag", "coat", "shirt"]
    assert warnings == []
    with pytest.raises(UserError) as error:
        load_class_names(str(model_dir / "labels.txt"), config)
    assert str(error.value) == f"--labels_file {model_dir / 'labels.txt'} names no class (it is empty)"


def test_a_photo_whose_exif_orientation_asks_a_turn_is_noted_as_seen_as_stored(tmp_path, capsys):
    """A phone photo stored sideways with Orientation 6: viewers turn it, the model (as in training, and as the
    original's decoder) does not. Said once per such file on stderr, explained in the first; 1 and no tag say
    nothing."""
    from PIL import Image
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for name, orientation in (("a_plain.jpg", None), ("b_upright.jpg", 1), ("c_turned.jpg", 6), ("d_png.png", None),
                              ("e_turned.jpg", 8)):
        exif = Image.Exif()
        if orientation is not None:
            exif[0x0112] = orientation
        options = {"exif": exif.tobytes()} if orientation is not None else {}
        (images / name).write_bytes(encode_image(random_image(rng, 20, 24), "PNG" if name.endswith(".png") else
                                                 "JPEG", **options))
    counts = predict_files(fake_step, runner_utils.parse_inference_input(str(images)), 16, 2)
    _, err = capsys.readouterr()
    assert counts.predicted == 5
    assert err.splitlines() == [
        "Note: {} carries EXIF orientation 6, turned 90 degrees clockwise: viewers show it so, but the model saw its "
        "pixels as stored, as every image in training (TensorFlow's decoder ignores the tag, as the original's "
        "did)".format(images / "c_turned.jpg"),
        # a folder of phone photos: the explanation once, then one short line a file
        "Note: {} carries EXIF orientation 8 too: seen as stored, as the first note says".format(
            images / "e_turned.jpg")]


def test_predict_says_where_its_class_names_came_from_or_that_there_are_none(tmp_path):
    """One line: the file the names came from (absolute), and when it is --data_dir's labels.txt (a checkpoint
    copied without its own), that it is not model_dir's; with no file, that the classes are shown by index."""
    model_dir, data_dir = tmp_path / "model", tmp_path / "data"
    model_dir.mkdir()
    data_dir.mkdir()
    config = RunConfig(model_dir=str(model_dir), data_dir=str(data_dir), num_classes=3)
    said = []
    assert load_class_names(None, config, say=said.append) is None
    assert said == [f"Class names: none (no labels.txt in model_dir {model_dir} nor in --data_dir {data_dir}, no "
                    "--labels_file): the classes are shown by their output index"]
    (data_dir / "labels.txt").write_text("bag\ncoat\nshirt\n")
    said.clear()
    load_class_names(None, config, say=said.append)
    assert said == [f"Class names: 3 from --data_dir's {data_dir / 'labels.txt'}, not from model_dir, which has no "
                    "labels.txt: they name the outputs only if --data_dir is the dataset the checkpoint was trained on"]
    (model_dir / "labels.txt").write_text("bag\ncoat\nshirt\n")
    said.clear()
    load_class_names(None, config, say=said.append)
    assert said == [f"Class names: 3 from {model_dir / 'labels.txt'} (kept beside the checkpoints)"]
    said.clear()
    load_class_names(os.path.relpath(data_dir / "labels.txt"), config, say=said.append)
    assert said == [f"Class names: 3 from --labels_file {data_dir / 'labels.txt'}"]
