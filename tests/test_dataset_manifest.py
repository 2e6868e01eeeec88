"""utils/dataset_manifest.py: what a dataset directory says about itself (shards, completeness, class count), with
and without the manifest dataprep writes (dataprep/records.write_split)."""
import json
import os

import numpy as np
import pytest

from dataprep import records
from tests._data_helpers import encode_image, random_image, write_tfrecord_shards
from utils import dataset_manifest
from utils.dataset_manifest import check_classes, check_complete, read_split
from utils.errors import UserError


def _items(count, num_classes):
    rng = np.random.default_rng(0)
    return [records.ImageItem(filename="i%d.jpg" % i, label=1 + i % num_classes, synset="c%d" % (i % num_classes),
                              text="class %d" % (i % num_classes), data=encode_image(random_image(rng, 32, 32)))
            for i in range(count)]


def _write(out, split="train", count=8, num_shards=4, num_classes=12, **options):
    return records.write_split(_items(count, num_classes), str(out), split, num_shards, num_classes=num_classes,
                               **options)


# ---- datasets without a manifest ------------------------------------------------------------------------------

def test_shard_names_tell_the_completeness_of_a_dataset_without_a_manifest(tmp_path):
    paths = write_tfrecord_shards(str(tmp_path), "train", 10, 1, 32)
    (tmp_path / "train-00003-of-00010.tmp").write_bytes(b"")  # a temporary file is no shard
    facts = read_split(str(tmp_path), "train")
    assert facts == dataset_manifest.SplitFacts(
        split="train", data_dir=str(tmp_path), files=tuple(paths), expected_shards=10, present_shards=10,
        complete=True)
    check_complete(facts)
    check_classes(facts, 2)  # no recorded labels: nothing to check

    for path in paths[4:]:
        os.remove(path)
    facts = read_split(str(tmp_path), "train")
    assert (facts.expected_shards, facts.present_shards, facts.complete) == (10, 4, False)
    with pytest.raises(UserError) as info:
        check_complete(facts)
    assert str(info.value) == (f"dataset {tmp_path} is incomplete: 4 of 10 train shards (dataprep was interrupted?); "
                               "finish it with the same dataprep command plus --resume")
    assert read_split(str(tmp_path), "validation").files == ()
    with pytest.raises(UserError, match="no validation-\\* files in data dir"):
        check_complete(read_split(str(tmp_path), "validation"))


def test_names_without_a_shard_count_or_disagreeing_counts_promise_nothing(tmp_path):
    for name in ("train-a", "train-b"):
        (tmp_path / name).write_bytes(b"")
    facts = read_split(str(tmp_path), "train")
    assert (facts.expected_shards, facts.present_shards, facts.complete) == (None, 2, True)
    write_tfrecord_shards(str(tmp_path / "mixed"), "validation", 2, 1, 32)
    write_tfrecord_shards(str(tmp_path / "mixed"), "validation", 3, 1, 32)
    facts = read_split(str(tmp_path / "mixed"), "validation")
    assert (facts.expected_shards, facts.present_shards, facts.complete) == (None, 5, True)


def test_a_missing_data_dir_and_a_broken_manifest_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist or is not a directory"):
        read_split(str(tmp_path / "none"), "train")
    (tmp_path / ".dataprep-train.json").write_text("{not json")
    with pytest.raises(UserError, match=r"cannot read dataset manifest .*\.dataprep-train\.json.*--resume"):
        read_split(str(tmp_path), "train")
    (tmp_path / ".dataprep-train.json").write_text(json.dumps({"version": 7, "num_shards": 1}))
    with pytest.raises(UserError, match="unknown format"):
        read_split(str(tmp_path), "train")


# ---- datasets written by dataprep -----------------------------------------------------------------------------

def test_dataprep_records_the_class_count_and_completion(tmp_path):
    _write(tmp_path, num_classes=12)
    facts = read_split(str(tmp_path), "train")
    assert (facts.expected_shards, facts.present_shards, facts.complete) == (4, 4, True)
    assert (facts.num_classes, facts.label_range, facts.num_images) == (12, (1, 12), 8)
    assert facts.manifest_path == str(tmp_path / ".dataprep-train.json")
    check_complete(facts)
    check_classes(facts, 12)
    check_classes(facts, 13)  # the ImageNet layout: labels 1..1000 in 1001 outputs
    with pytest.raises(UserError) as info:
        check_classes(facts, 10)
    assert str(info.value) == (f"--num_classes 10 cannot hold dataset {tmp_path}'s labels 1..12 (12 classes, "
                               "recorded in .dataprep-train.json); pass --num_classes 12 or more")
    with pytest.raises(UserError, match=r"^--other 3 cannot hold"):
        check_classes(facts, 3, flag="--other")
    with pytest.raises(UserError) as info:  # a model whose class count no flag changes
        check_classes(facts, 10, model="checkpoint /ckpt/model.ckpt-5")
    assert str(info.value) == (f"checkpoint /ckpt/model.ckpt-5 has 10 outputs, too few for dataset {tmp_path}'s "
                               "labels 1..12 (12 classes, recorded in .dataprep-train.json): it is not a model of "
                               "this dataset")


def test_a_killed_dataprep_run_is_incomplete_until_resumed(tmp_path, monkeypatch):
    real_write_shard = records.write_shard

    def killed_in_the_third_shard(output_dir, split, shard_index, *args, **kwargs):
        if shard_index == 2:
            raise KeyboardInterrupt
        return real_write_shard(output_dir, split, shard_index, *args, **kwargs)

    monkeypatch.setattr(records, "write_shard", killed_in_the_third_shard)
    with pytest.raises(KeyboardInterrupt):
        _write(tmp_path)
    monkeypatch.setattr(records, "write_shard", real_write_shard)
    manifest = json.loads((tmp_path / ".dataprep-train.json").read_text())
    assert manifest["complete"] is False and sorted(manifest["shards"]) == ["0", "1"]
    facts = read_split(str(tmp_path), "train")
    assert (facts.present_shards, facts.expected_shards, facts.complete) == (2, 4, False)
    with pytest.raises(UserError, match=r"incomplete: 2 of 4 train shards .*plus --resume$"):
        check_complete(facts)

    _write(tmp_path, resume=True)
    assert read_split(str(tmp_path), "train").complete


def test_all_shards_present_but_the_run_not_recorded_as_finished(tmp_path):
    _write(tmp_path)
    path = tmp_path / ".dataprep-train.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps(dict(manifest, complete=False)))  # killed before the last manifest write
    facts = read_split(str(tmp_path), "train")
    assert (facts.present_shards, facts.complete) == (4, False)
    with pytest.raises(UserError) as info:
        check_complete(facts)
    assert str(info.value) == (f"dataset {tmp_path} is incomplete: .dataprep-train.json does not record the train "
                               "split as finished (dataprep was interrupted?); finish it with the same dataprep "
                               "command plus --resume")


def test_version_1_manifests_are_read_and_resumed(tmp_path):
    """Earlier dataprep: no class facts and no `complete`; a split is complete when every shard is recorded."""
    _write(tmp_path)
    path = tmp_path / ".dataprep-train.json"
    manifest = json.loads(path.read_text())
    v1 = {key: manifest[key] for key in ("split", "num_shards", "num_images", "fingerprint", "shards")}
    path.write_text(json.dumps(dict(v1, version=1)))
    facts = read_split(str(tmp_path), "train")
    assert (facts.complete, facts.num_classes, facts.label_range) == (True, None, None)
    check_classes(facts, 2)

    del v1["shards"]["3"]  # an interrupted version 1 run: the last shard neither recorded nor renamed
    path.write_text(json.dumps(dict(v1, version=1)))
    os.remove(tmp_path / "train-00003-of-00004")
    facts = read_split(str(tmp_path), "train")
    assert (facts.present_shards, facts.complete) == (3, False)
    results = _write(tmp_path, resume=True)
    assert [r.resumed for r in results] == [True, True, True, False]
    facts = read_split(str(tmp_path), "train")
    assert (facts.complete, facts.num_classes) == (True, 12)
    assert json.loads(path.read_text())["version"] == 2


# ---- manifests dataprep never writes: one line naming the file and the field ----------------------------------

@pytest.mark.parametrize("field, value, named", [
    ("num_shards", "2", '"num_shards" is \'2\''),
    ("num_shards", None, '"num_shards" is null'),
    ("num_shards", True, '"num_shards" is true'),
    ("num_shards", 10 ** 7, '"num_shards" is 10000000'),
    ("num_shards", 0, '"num_shards" is 0'),
    ("num_images", "many", '"num_images" is \'many\''),
    ("num_classes", None, '"num_classes" is null'),
    ("num_classes", "ten", '"num_classes" is \'ten\''),
    ("label_range", "1-10", '"label_range" is \'1-10\''),
    ("label_range", {"low": 1}, '"label_range" is {"low": 1}'),
    ("label_range", [5, 1], '"label_range" is [5, 1]'),
    ("complete", "yes", '"complete" is \'yes\''),
    ("split", "validation", '"split" is \'validation\''),
    ("shards", [1, 2], '"shards" is [1, 2]'),
    ("shards", {"0": [1]}, '"shards.0" is [1]'),
    ("shards", {"0": {"written": "many", "skipped": []}}, '"shards.0.written" is \'many\''),
    ("shards", {"0": {"written": 1, "skipped": "none"}}, '"shards.0.skipped" is \'none\''),
    ("shards", {"9": {"written": 1, "skipped": []}}, '"shards" is \'9\''),
    ("shards", {"00": {"written": 1, "skipped": []}}, '"shards" is \'00\''),  # one index, two keys
    ("shards", {"0": {"written": 1, "skipped": []}, "x" * 500: {}}, '"shards" is \'xxxxxxxx'),
])
def test_a_manifest_field_of_the_wrong_type_or_range_is_refused_naming_the_file_and_field(
        tmp_path, field, value, named):
    _write(tmp_path)
    path = tmp_path / ".dataprep-train.json"
    manifest = json.loads(path.read_text())
    manifest[field] = value
    path.write_text(json.dumps(manifest))
    with pytest.raises(UserError) as info:
        read_split(str(tmp_path), "train")
    message = str(info.value)
    assert message.startswith(f"dataset manifest {path}: field {named}") and "\n" not in message
    assert len(message) < 400  # a long value is cut


def test_a_huge_shard_count_is_refused_before_anything_is_sized_by_it(tmp_path, monkeypatch):
    _write(tmp_path)
    path = tmp_path / ".dataprep-train.json"
    manifest = json.loads(path.read_text())
    manifest["num_shards"] = dataset_manifest.MAX_SHARDS  # the largest accepted: nothing built per promised shard
    manifest["num_images"] = manifest["num_shards"]
    manifest["complete"] = False
    path.write_text(json.dumps(manifest))
    monkeypatch.setattr(dataset_manifest, "range", lambda *a: pytest.fail("range over the promised shards"),
                        raising=False)
    facts = read_split(str(tmp_path), "train")
    assert (facts.expected_shards, facts.present_shards, facts.complete) == (dataset_manifest.MAX_SHARDS, 0, False)


def test_counts_that_contradict_the_shards_present_are_named(tmp_path):
    _write(tmp_path)  # 4 train shards of 8 images
    path = tmp_path / ".dataprep-train.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps(dict(manifest, num_images=9)))
    with pytest.raises(UserError, match=r'records 9 images \(field "num_images"\) but its shards record 8 written '
                                        r'or skipped \(field "shards"\)'):
        read_split(str(tmp_path), "train")
    path.write_text(json.dumps(dict(manifest, num_shards=3, shards={})))
    with pytest.raises(UserError, match=r'records 3 train shards \(field "num_shards"\), but its shards are named '
                                        r'-of-00004 \(train-00000-of-00004\): the manifest is not theirs'):
        check_complete(read_split(str(tmp_path), "train"))
    path.write_text(json.dumps(manifest))
    os.remove(tmp_path / "train-00002-of-00004")
    with pytest.raises(UserError, match=r'is incomplete: 3 of 4 train shards \(though .*\.dataprep-train\.json records '
                                        r'the run as finished; the first missing is train-00002-of-00004: deleted '
                                        r'after dataprep\?\); the same dataprep command plus --resume'):
        check_complete(read_split(str(tmp_path), "train"))


def test_resume_goes_by_the_shards_present_when_the_manifest_has_a_field_of_the_wrong_type(tmp_path):
    _write(tmp_path)
    path = tmp_path / ".dataprep-train.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), shards=[1, 2])))
    os.remove(tmp_path / "train-00001-of-00004")
    _write(tmp_path, resume=True)
    facts = read_split(str(tmp_path), "train")
    assert facts.complete and facts.num_images == 8


def test_shards_the_manifest_does_not_list_are_refused_naming_them(tmp_path):
    """Two dataprep runs into one directory left a 40 px run's train-*-of-00002 (its manifest's) beside a 32 px
    run's train-*-of-00003; the training read all five files while saying the manifest's 2 shards and 2,000 images.
    Now any train-* file that is not one of the shards the manifest records stops the run, before anything is read."""
    _write(tmp_path, count=8, num_shards=2)
    write_tfrecord_shards(str(tmp_path), "train", 3, 1, 32)  # another run's shards
    facts = read_split(str(tmp_path), "train")
    assert facts.complete and len(facts.files) == 5
    with pytest.raises(UserError) as info:
        check_complete(facts)
    assert str(info.value) == (
        f"dataset {tmp_path}: 3 train files not among the 2 shards its manifest .dataprep-train.json records "
        "(train-*-of-00002): train-00000-of-00003, train-00001-of-00003, train-00002-of-00003; they would be read "
        "with its shards (another dataprep run's output?): delete them, or re-run the dataprep command with "
        "--overwrite")
    for name in os.listdir(tmp_path):
        if name.endswith("-of-00003"):
            os.remove(tmp_path / name)
    (tmp_path / "train-00005-of-00002").write_bytes(b"")  # an index past the count, or any other train-* name
    (tmp_path / "train-extra").write_bytes(b"")
    with pytest.raises(UserError, match=r"2 train files not among the 2 shards .*: train-00005-of-00002, train-extra;"):
        check_complete(read_split(str(tmp_path), "train"))
    os.remove(tmp_path / "train-00005-of-00002")
    os.remove(tmp_path / "train-extra")
    check_complete(read_split(str(tmp_path), "train"))


def test_without_a_manifest_shards_named_for_different_counts_are_refused(tmp_path):
    write_tfrecord_shards(str(tmp_path), "validation", 2, 1, 32)
    write_tfrecord_shards(str(tmp_path), "validation", 3, 1, 32)
    with pytest.raises(UserError) as info:
        check_complete(read_split(str(tmp_path), "validation"))
    assert str(info.value) == (
        f"dataset {tmp_path}: its validation shards are named for 2 different shard counts: 2 -of-00002 (e.g. "
        "validation-00000-of-00002), 3 -of-00003 (e.g. validation-00000-of-00003); two datasets in one "
        "directory would be read as one: keep one set of shards")
    for name in ("train-a", "train-b"):  # names that promise no count are still read as they are
        (tmp_path / name).write_bytes(b"")
    check_complete(read_split(str(tmp_path), "train"))


def test_names_leave_outputs_unnamed_only_beyond_the_originals_last_output():
    # labels 1..K are outputs 0..K-1 of a K + 1 output model: K names name every output a label reaches
    assert not dataset_manifest.leaves_outputs_unnamed(10, 11)
    assert not dataset_manifest.leaves_outputs_unnamed(11, 11)
    assert dataset_manifest.leaves_outputs_unnamed(9, 11)
    assert dataset_manifest.leaves_outputs_unnamed(0, 2)
    assert not dataset_manifest.leaves_outputs_unnamed(1, 2)
