"""Bad input end to end (docs/RELIABILITY.md): corrupt records are skipped and training completes; broken data,
checkpoints, images and SavedModels are one `ERROR:` line and status 2, with nothing written or lost.

The error cases run in this process (tests/_cli.main_in_process); the corrupt-record training runs in a child, whose
stderr holds the pipeline's warnings.
"""
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from tests._data_helpers import (encode_image, random_image, truncate_file, write_tfrecord_shards,
                                 zero_data_checksums)
from tests._reliability_helpers import (SMALL, NUM_CLASSES, checkpoint_steps, latest_checkpoint, run, run_cases)

pytestmark = pytest.mark.shallow

CORRUPT = {(0, 1): "bad_jpeg", (0, 3): "missing_image", (1, 0): "not_example"}  # skipped; a bad label stops the run


def snapshot(directory):
    """{relative path: (size, mtime_ns)} of every file: 'untouched' means equal snapshots."""
    found = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            info = os.stat(path)
            found[os.path.relpath(path, directory)] = (info.st_size, info.st_mtime_ns)
    return found


@pytest.fixture(scope="module")
def corrupt_training(tmp_path_factory):
    """Training on shards holding one record of every corrupt kind: it completes and names the files."""
    data = tmp_path_factory.mktemp("corrupt_data")
    paths = write_tfrecord_shards(str(data), "train", 2, 12, 40, num_classes=NUM_CLASSES, corrupt=CORRUPT)
    write_tfrecord_shards(str(data), "validation", 1, 8, 40, num_classes=NUM_CLASSES, seed=1,
                          corrupt={(0, 2): "bad_jpeg"})
    results = tmp_path_factory.mktemp("trained")
    # In a child process: the warnings are tf.print lines on the process's stderr.
    result = run(["--mode", "train_and_evaluate", "--data_dir", data, "--batch_size", 4, "--num_iter", 3,
                  "--iter_unit", "batch", "--results_dir", results, "--seed", 3, *SMALL])
    return {"data": str(data), "paths": paths, "dir": str(results), "result": result}


def test_corrupt_records_are_skipped_with_a_warning_and_training_completes(corrupt_training):
    result = corrupt_training["result"]
    assert "Ending Model Training ..." in result.stdout and "Model evaluation finished" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if "WARNING: skipped corrupt record" in line]
    assert warnings, result.stderr[-3000:]
    named = " ".join(warnings)
    assert any(path in named for path in corrupt_training["paths"])
    assert checkpoint_steps(corrupt_training["dir"]) == [0, 3]


@pytest.fixture(scope="module")
def cases(corrupt_training, tmp_path_factory):
    """Builds every bad input, runs all of them in this process, returns {name: (result, before, after)}."""
    import tensorflow as tf
    base = tmp_path_factory.mktemp("bad_inputs")
    trained = corrupt_training["dir"]

    truncated = base / "truncated_data"
    paths = write_tfrecord_shards(str(truncated), "train", 2, 6, 40, num_classes=NUM_CLASSES)
    truncate_file(paths[-1], 25)
    wrong_prefix = base / "wrong_prefix"
    wrong_prefix.mkdir()
    write_tfrecord_shards(str(wrong_prefix), "training", 1, 6, 40, num_classes=NUM_CLASSES)
    empty = base / "empty"
    empty.mkdir()
    no_checksums = base / "no_checksums"  # a writer that leaves every data checksum 0: no record can be read
    for path in write_tfrecord_shards(str(no_checksums), "train", 2, 6, 40, num_classes=NUM_CLASSES):
        zero_data_checksums(path)
    undecodable = base / "undecodable"  # every image fails to decode: without the check, training would spin
    write_tfrecord_shards(str(undecodable), "train", 2, 4, 40, num_classes=NUM_CLASSES,
                          corrupt={(shard, i): "bad_jpeg" for shard in range(2) for i in range(4)})

    pixel_boxes = base / "pixel_boxes"  # boxes in pixels: the training crop refuses every record
    write_tfrecord_shards(str(pixel_boxes), "train", 2, 4, 40, num_classes=NUM_CLASSES,
                          corrupt={(shard, i): "pixel_bbox" for shard in range(2) for i in range(4)})
    truncated_images = base / "truncated_images"  # headers read, no image decodes: past the first-record check
    write_tfrecord_shards(str(truncated_images), "train", 2, 4, 40, num_classes=NUM_CLASSES,
                          corrupt={(shard, i): "truncated_jpeg" for shard in range(2) for i in range(4)})

    tf1 = str(base / "tf1" / "model.ckpt-100")  # the original's names, but only two of them
    os.makedirs(os.path.dirname(tf1))
    tf.raw_ops.SaveV2(prefix=tf1, tensor_names=["resnet50/conv2d/kernel", "global_step"], shape_and_slices=["", ""],
                      tensors=[tf.zeros([7, 7, 3, 64]), tf.constant(100, tf.int64)])

    broken_ckpt = base / "broken_ckpt"
    broken_ckpt.mkdir()
    latest = latest_checkpoint(trained)
    for name in os.listdir(trained):
        if name.startswith(os.path.basename(latest) + ".") or name == "checkpoint":
            shutil.copy(os.path.join(trained, name), broken_ckpt / name)
    (data_file,) = broken_ckpt.glob("*.data-*")
    with open(data_file, "r+b") as handle:
        handle.truncate(os.path.getsize(data_file) // 2)

    images = base / "images"
    images.mkdir()
    (images / "text.jpg").write_text("this is not an image\n")
    (images / "zero.jpg").write_bytes(b"")
    Image.new("L", (20000, 2)).save(images / "huge.png")
    good = base / "good_images"
    good.mkdir()
    rgb = random_image(np.random.default_rng(0), 48, 40)
    Image.fromarray(rgb).save(good / "plain.png")
    (good / "cmyk.jpg").write_bytes(encode_image(rgb, mode="CMYK"))
    assert Image.open(good / "cmyk.jpg").mode == "CMYK"

    train = ["--mode", "train", "--batch_size", 4, "--num_iter", 2, "--iter_unit", "batch", *SMALL]
    evaluate = ["--mode", "evaluate", "--data_dir", corrupt_training["data"], "--batch_size", 4, *SMALL]
    predict = ["--mode", "predict", "--batch_size", 1, "--results_dir", base / "rp", "--model_dir", trained, *SMALL]
    specs = {
        "truncated_shard": (train + ["--data_dir", truncated, "--results_dir", base / "r1", "--model_dir",
                                     base / "m1"], "is corrupt or truncated"),
        "wrong_prefix": (train + ["--data_dir", wrong_prefix, "--results_dir", base / "r2", "--model_dir",
                                  base / "m2"], "no train-* files in data dir"),
        "empty_data_dir": (train + ["--data_dir", empty, "--results_dir", base / "r3", "--model_dir",
                                    base / "m3"], "no train-* files in data dir"),
        "no_data_checksums": (train + ["--data_dir", no_checksums, "--results_dir", base / "r9", "--model_dir",
                                       base / "m9"], "no record of the 2 TFRecord files can be read: the first "
                                                     "record of each fails its data checksum"),
        "no_decodable_image": (train + ["--data_dir", undecodable, "--results_dir", base / "r10", "--model_dir",
                                        base / "m10"], "the first record of each of the 2 TFRecord files cannot be used "
                                                       "(first: "),
        "pixel_boxes": (train + ["--data_dir", pixel_boxes, "--results_dir", base / "r11", "--model_dir",
                                 base / "m11"], "its bounding box (ymin 2, xmin 3, ymax 38, xmax 37) is not in "
                                                "fractions of the image's height and width"),
        "no_usable_record": (train + ["--data_dir", truncated_images, "--results_dir", base / "r12", "--model_dir",
                                      base / "m12"], "none of the last 112 records read could be used (each was "
                                                     "skipped as corrupt), more than a whole pass over the files "
                                                     "(8 records)"),
        "wrong_num_classes": (evaluate + ["--results_dir", base / "r4", "--model_dir", trained, "--num_classes",
                                          7], "--num_classes 7 contradicts checkpoint"),
        "wrong_arch": (evaluate + ["--results_dir", base / "r5", "--model_dir", trained, "--arch",
                                   "resnext101-32x4d"], "--arch resnext101-32x4d contradicts checkpoint"),
        "tf1_missing_names": (train + ["--data_dir", corrupt_training["data"], "--results_dir", base / "r6",
                                       "--model_dir", base / "m6", "--finetune_checkpoint", tf1],
                              "does not fit this model"),
        "truncated_checkpoint_eval": (evaluate + ["--results_dir", base / "r7", "--model_dir", broken_ckpt],
                                      str(broken_ckpt)),
        "truncated_checkpoint_train": (train + ["--data_dir", corrupt_training["data"], "--results_dir",
                                                base / "r8", "--model_dir", broken_ckpt], str(broken_ckpt)),
        "not_an_image": (predict + ["--to_predict", images / "text.jpg"], "not an image file"),
        "zero_bytes": (predict + ["--to_predict", images / "zero.jpg"], "is empty (0 bytes)"),
        "huge_image": (predict + ["--to_predict", images / "huge.png"], "too large"),
        "png_and_cmyk": (predict + ["--to_predict", good], None),
        "all_images_bad": (predict + ["--to_predict", images], None),
    }
    watched = {"trained": trained, "broken_ckpt": str(broken_ckpt)}
    before = {name: snapshot(path) for name, path in watched.items()}
    results = run_cases([args for args, _ in specs.values()])
    after = {name: snapshot(path) for name, path in watched.items()}
    return {"specs": specs, "results": dict(zip(specs, results)), "before": before, "after": after, "base": base}


ERROR_CASES = ["truncated_shard", "wrong_prefix", "empty_data_dir", "no_data_checksums", "no_decodable_image",
               "pixel_boxes", "no_usable_record", "wrong_num_classes", "wrong_arch",
               "tf1_missing_names", "truncated_checkpoint_eval", "truncated_checkpoint_train", "not_an_image",
               "zero_bytes", "huge_image"]


@pytest.mark.parametrize("name", ERROR_CASES)
def test_bad_input_is_one_error_line_and_status_2(cases, name):
    result, message = cases["results"][name], cases["specs"][name][1]
    assert result["rc"] == 2, result
    errors = [line for line in result["err"].splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and message in errors[0], result["err"][-2000:]
    assert "Traceback" not in result["err"]


def test_bad_inputs_write_no_checkpoint_and_leave_model_dirs_untouched(cases):
    assert cases["before"] == cases["after"]
    # m12's error comes from the input stream, after the run's step-0 checkpoint, as a label's would.
    for model_dir in ("m1", "m2", "m3", "m6", "m9", "m10", "m11"):
        assert not checkpoint_steps(cases["base"] / model_dir)


def test_png_and_cmyk_jpeg_are_predicted(cases):
    result = cases["results"]["png_and_cmyk"]
    assert result["rc"] == 0, result["err"][-2000:]
    good = str(cases["base"] / "good_images")
    lines = [line for line in result["out"].splitlines() if line.startswith(good)]
    assert {os.path.basename(line.split(": ")[0]) for line in lines} == {"plain.png", "cmyk.jpg"}


def test_a_directory_of_only_bad_images_is_reported_file_by_file_with_status_1(cases):
    result = cases["results"]["all_images_bad"]
    assert result["rc"] == 1, result["err"][-2000:]
    images = cases["base"] / "images"
    skipped = [line.split(": ")[0] for line in result["err"].splitlines() if line.startswith("SKIPPED ")]
    assert skipped == ["SKIPPED {}".format(images / name) for name in ("huge.png", "text.jpg", "zero.jpg")]
    assert "ERROR:" not in result["err"]
    assert result["out"].strip().splitlines()[-1] == "predicted 0, failed 3"


def test_inference_on_a_savedmodel_without_serving_default_is_a_clear_error(tmp_path):
    import tensorflow as tf
    module = tf.Module()
    module.scale = tf.Variable(2.0)
    module.double = tf.function(lambda x: x * module.scale, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "model"), signatures={"other": module.double})
    result = run(["--model", tmp_path / "model", "--batch-size", 1, "--num-iter", 1], check=False,
                 script="inference.py")
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ERROR:") and "has no serving_default signature (signatures: other)" in last
    assert "Traceback" not in result.stderr
