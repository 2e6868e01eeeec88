"""Step counting (docs/ORIGINAL.md#step-counting) and file listing with clear errors."""

import os

import pytest
import tensorflow as tf

from runtime import runner_utils
from utils.errors import UserError


def write_records(path, count):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for index in range(count):
            writer.write(b"record-%d" % index)


def test_a_data_dir_is_a_directory_not_a_pattern(tmp_path):
    """`--data_dir "d [ab]"` read `d b`'s shards (glob's character class) and `d s*` read `d sX`'s beside its own:
    another dataset scored, or two mixed, under the directory's name."""
    for name, neighbour in (("d [ab]", "d b"), ("d s*", "d sX"), ("d ?", "d x")):
        for directory, count in ((name, 2), (neighbour, 3)):
            os.makedirs(tmp_path / directory)
            for index in range(count):
                write_records(tmp_path / directory / ("validation-%05d-of-%05d" % (index, count)), 1)
        files = runner_utils.list_filenames_in_dataset(str(tmp_path / name), "validation")
        assert files == [str(tmp_path / name / ("validation-%05d-of-00002" % index)) for index in range(2)], name


def test_sample_count_is_exact_on_shards_of_unequal_size(tmp_path):
    write_records(tmp_path / "train-00000-of-00004", 10)
    write_records(tmp_path / "train-00001-of-00004", 99)  # the original's first/last estimate said 10 * 3 + 7
    write_records(tmp_path / "train-00002-of-00004", 0)
    write_records(tmp_path / "train-00003-of-00004", 7)
    files = runner_utils.list_filenames_in_dataset(str(tmp_path), "train")
    assert [os.path.basename(f) for f in files] == ["train-%05d-of-00004" % i for i in range(4)]
    lines = []
    assert runner_utils.count_samples(files, "Training", lines.append) == 116
    assert lines == ["Training samples: 116 (from 4 files)"]
    assert runner_utils.count_samples(files[:1]) == 10


def _one_line_user_error(path, match):
    with pytest.raises(UserError, match=match) as info:
        runner_utils.count_samples([str(path)])
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    return message


def test_corrupt_length_checksum_is_a_clear_error(tmp_path):
    path = tmp_path / "train-00000-of-00001"
    write_records(path, 5)  # b"record-N": 8-byte payloads, 24-byte frames
    data = bytearray(path.read_bytes())
    data[2 * 24 + 8] ^= 0x01  # the length CRC of record 2
    path.write_bytes(bytes(data))
    assert "bad length checksum at byte 48" in _one_line_user_error(path, "corrupt or truncated")
    data[2 * 24 + 8] ^= 0x01
    data[2 * 24] ^= 0x40  # record 2's length itself: the CRC no longer matches it
    path.write_bytes(bytes(data))
    assert "bad length checksum at byte 48" in _one_line_user_error(path, "corrupt or truncated")


def test_truncated_file_is_a_clear_one_line_error(tmp_path):
    path = tmp_path / "train-00000-of-00001"
    write_records(path, 5)
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # inside the last record
    assert "truncated at 113" in _one_line_user_error(path, "corrupt or truncated")
    path.write_bytes(data[:4 * 24 + 5])  # inside the last record's header
    assert "header cut off at byte 96" in _one_line_user_error(path, "corrupt or truncated")
    _one_line_user_error(tmp_path / "train-missing", "cannot read TFRecord file")


def test_count_steps_epoch_and_batch_units():
    assert runner_utils.count_steps("epoch", 1281025, 90, 2048) == (625 * 90, 90, 625 * 90)
    steps, epochs, decay = runner_utils.count_steps("batch", 1281025, 500, 2048)
    assert (steps, epochs, decay) == (500, 1, 90 * 1281025 // 2048)
    assert runner_utils.count_steps("batch", 1000, 25, 100) == (25, 3, 900)
    # evaluation at batch 256 on the estimated 49,921 validation images: 195 steps (partial batch dropped)
    assert runner_utils.count_steps("epoch", 49921, 1, 256)[0] == 195


def test_fewer_samples_than_a_batch_is_a_clear_error():
    with pytest.raises(UserError, match="fewer than one global batch"):
        runner_utils.count_steps("epoch", 10, 1, 64)


def test_missing_dir_and_missing_prefix_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        runner_utils.list_filenames_in_dataset(str(tmp_path / "nope"), "train")
    write_records(tmp_path / "val-00000-of-00001", 3)
    with pytest.raises(UserError, match="no validation-\\* files"):
        runner_utils.list_filenames_in_dataset(str(tmp_path), "validation")
    with pytest.raises(UserError, match="must be specified for training"):
        runner_utils.list_filenames_in_dataset(None, "train")


def test_truncated_file_is_a_clear_error(tmp_path):
    path = tmp_path / "train-00000-of-00001"
    write_records(path, 5)
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with pytest.raises(UserError, match="corrupt or truncated"):
        runner_utils.count_records(str(path))


def test_predict_inputs_file_dir_and_errors(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for name in ("b.JPEG", "a.png", "c.txt", "d.jpg"):
        (images / name).write_bytes(b"x")
    files = runner_utils.parse_inference_input(str(images))
    assert [os.path.basename(p) for p in files] == ["a.png", "b.JPEG", "d.jpg"]
    assert files.skipped == [] and files.ignored == "Ignored 1 file that is not .jpg/.jpeg/.png (1 .txt: c.txt)"
    single = runner_utils.parse_inference_input(str(images / "a.png"))
    assert single == [str(images / "a.png")] and single.skipped == [] and single.ignored is None
    with pytest.raises(UserError, match="No data to predict on"):
        runner_utils.parse_inference_input(None)
    with pytest.raises(UserError, match="does not exist"):
        runner_utils.parse_inference_input(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no image files"):
        runner_utils.parse_inference_input(str(empty))
    (empty / "notes.txt").write_text("x")
    (empty / "sub").mkdir()
    with pytest.raises(UserError) as nothing:
        runner_utils.parse_inference_input(str(empty))
    assert str(nothing.value) == ("no image files (.jpg .jpeg .png) in directory {} (Ignored 1 file that is not "
                                  ".jpg/.jpeg/.png (1 .txt: notes.txt) and 1 sub-directory (not searched))".format(
                                      empty))


def test_predict_directory_skips_links_out_and_dangling_links_and_counts_what_it_ignores(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for name in ("a.jpg", "c.png", "x.webp", "y.bmp", "z.BMP", "README"):
        (images / name).write_bytes(b"x")
    (tmp_path / "secret.jpg").write_bytes(b"x")
    os.symlink(tmp_path / "secret.jpg", images / "b_out.jpg")  # absolute link out of the directory
    os.symlink("../secret.jpg", images / "b_out_relative.png")
    os.symlink("a.jpg", images / "d_in.jpg")  # stays inside: predicted like a file
    os.symlink("missing.jpg", images / "e_dangling.jpg")
    os.symlink("f_loop.jpg", images / "f_loop.jpg")
    (images / "g_dir.jpg").mkdir()
    (images / "h_sub").mkdir()
    os.mkfifo(images / "i_fifo.jpg")
    files = runner_utils.parse_inference_input(str(images))
    assert list(files) == [str(images / name) for name in ("a.jpg", "c.png", "d_in.jpg")]
    assert files.skipped == [
        (str(images / "b_out.jpg"), "a link pointing outside {} (not followed)".format(images)),
        (str(images / "b_out_relative.png"), "a link pointing outside {} (not followed)".format(images)),
        (str(images / "e_dangling.jpg"), "a dangling link (its target missing.jpg does not exist)"),
        (str(images / "f_loop.jpg"), "a link that loops (too many levels of symbolic links)"),
        (str(images / "i_fifo.jpg"), "not a regular file")]
    assert files.ignored == ("Ignored 4 files that are not .jpg/.jpeg/.png (2 .bmp: y.bmp, z.BMP; 1 .webp: x.webp; "
                             "1 no extension: README) and 2 sub-directories (not searched)")


def test_predict_leaves_out_hidden_names_as_dataprep_does_and_names_what_it_ignores(tmp_path):
    """`.hidden.jpg` (macOS's `._x.jpg` companions) was predicted, or skipped as unreadable, where dataprep leaves
    hidden files out; the ignored files were counted by extension but not named."""
    images = tmp_path / "images"
    images.mkdir()
    for name in ("a.jpg", ".hidden.jpg", "._a.jpg", ".DS_Store", "n1.txt", "n2.txt", "n3.txt", "n4.txt", "x\nnew.gif"):
        (images / name).write_bytes(b"x")
    (images / ".git").mkdir()
    files = runner_utils.parse_inference_input(str(images))
    assert list(files) == [str(images / "a.jpg")] and files.skipped == []
    assert files.ignored == ("Ignored 5 files that are not .jpg/.jpeg/.png (4 .txt: n1.txt, n2.txt, n3.txt, ...; "
                             "1 .gif: x\\nnew.gif) and 4 hidden entries (.DS_Store, ._a.jpg, .git, ...)")


def test_a_directory_of_only_unusable_links_is_not_an_error_but_all_skipped(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    os.symlink("/etc/hostname", images / "out.jpg")
    files = runner_utils.parse_inference_input(str(images))
    assert list(files) == [] and [path for path, _ in files.skipped] == [str(images / "out.jpg")]


def test_a_dali_index_of_another_file_is_refused(tmp_path):
    from runtime.runner_utils import list_index_files
    from tests._data_helpers import write_tfrecord_shards
    from utils.tfrecord_framing import write_dali_index
    small = write_tfrecord_shards(str(tmp_path / "a"), "train", 1, 3, 32)
    large = write_tfrecord_shards(str(tmp_path / "b"), "train", 1, 5, 32)
    (tmp_path / "idx").mkdir()
    write_dali_index(large[0], str(tmp_path / "idx" / os.path.basename(large[0])))
    assert list_index_files(str(tmp_path / "idx"), large) == [str(tmp_path / "idx" / os.path.basename(large[0]))]
    with pytest.raises(UserError, match=r"^DALI index .* does not describe .*a/train-00000-of-00001 \(another "
                                        r"dataset's, or made before the file was rewritten\)"):
        list_index_files(str(tmp_path / "idx"), small)
    # A shard cut short after its index was made is named itself, not its (then stale) index.
    with open(large[0], "r+b") as handle:
        handle.truncate(os.path.getsize(large[0]) - 10)
    with pytest.raises(UserError, match=r"^TFRecord file .*b/train-00000-of-00001 is corrupt or truncated"):
        list_index_files(str(tmp_path / "idx"), large)


def test_other_class_names_says_how_two_labels_files_differ(tmp_path):
    def labels(name, *names):
        (tmp_path / name).write_text("".join(f"{n}\n" for n in names))
        return str(tmp_path / name)
    data = labels("data.txt", "tench, Tinca tinca", "zebra", "mango")
    assert runner_utils.other_class_names(data, labels("same.txt", "tench, Tinca tinca", "zebra", "mango", "")) is None
    assert runner_utils.other_class_names(data, str(tmp_path / "absent.txt")) is None
    assert runner_utils.other_class_names(data, labels("order.txt", "zebra", "mango", "tench, Tinca tinca")) == (
        f"{data} names other classes than {tmp_path / 'order.txt'} (the same names in another order)")
    assert runner_utils.other_class_names(data, labels("other.txt", "tench, Tinca tinca", "apple", "mango")) == (
        f"{data} names other classes than {tmp_path / 'other.txt'} (label 2: 'zebra' against 'apple')")
    assert runner_utils.other_class_names(data, labels("ten.txt", *map(str, range(10)))) == (
        f"{data} names other classes than {tmp_path / 'ten.txt'} (3 classes against 10)")


def test_a_labels_file_names_label_k_on_line_k_or_is_refused(tmp_path):
    """A blank line before a name shifted every name after it onto the wrong output, silently; a file that is not
    UTF-8 was a traceback; control characters in a name reached the terminal raw; a BOM stayed in the first name."""
    from runtime.runner_utils import read_class_names
    path = tmp_path / "labels.txt"
    path.write_bytes(b"\xef\xbb\xbfT-shirt\r\nTrouser\r\n\r\n\n")  # a BOM, Windows line ends, blank lines at the end
    assert read_class_names(str(path)) == ["T-shirt", "Trouser"]
    path.write_text("T-shirt\n\nPullover\n")
    with pytest.raises(UserError, match=r"labels.txt line 2 is empty: line k names label k, so the names after it "
                                        r"would name the wrong outputs"):
        read_class_names(str(path))
    path.write_bytes(b"T-shirt\nPull\xffover\n")
    with pytest.raises(UserError, match=r"labels.txt is not UTF-8 text \(byte 13 of the file\)"):
        read_class_names(str(path))
    path.write_text("T-shirt\n\x1b]0;PWNED\x07Shirt\n")
    with pytest.raises(UserError, match=r"labels.txt line 2 holds control characters \('\\x1b\]0;PWNED\\x07Shirt'\)"):
        read_class_names(str(path))
    path.write_bytes(b"T-shirt\rTrouser\n")  # a lone carriage return inside a line
    with pytest.raises(UserError, match="line 1 holds control characters"):
        read_class_names(str(path))


@pytest.mark.parametrize("edit", ["repeat_first", "garbage_line", "offset_past_end", "two_merged"])
def test_a_dali_index_edited_in_its_middle_is_refused(tmp_path, edit):
    """Only the last line was checked: an index whose lines all named record 0 (DALI read it again and again)
    changed evaluate's top-1 from 0.79 to 0.89 without a word; a line of garbage or an offset past the file's end
    (a DALI traceback) likewise. Two lines merged into one (`0 5639` for `0 2864` and `2864 2775`) follow on and end
    where the file does: DALI dropped one image and read another twice, and a top-1 of 0.33 read 0.5 (an audit,
    2026-12-08)."""
    from runtime.runner_utils import list_index_files
    from tests._data_helpers import write_tfrecord_shards
    from utils.tfrecord_framing import write_dali_index
    shard = write_tfrecord_shards(str(tmp_path / "a"), "train", 1, 5, 32)[0]
    index = str(tmp_path / "idx" / os.path.basename(shard))
    (tmp_path / "idx").mkdir()
    write_dali_index(shard, index)
    assert list_index_files(str(tmp_path / "idx"), [shard]) == [index]
    lines = open(index).read().splitlines()
    if edit == "repeat_first":
        lines = [lines[0]] * (len(lines) - 1) + lines[-1:]
    elif edit == "garbage_line":
        lines[2] = "abc def"
    elif edit == "two_merged":
        (offset, first), (_, second) = (map(int, line.split()) for line in lines[:2])
        lines[:2] = ["{} {}".format(offset, first + second)]
    else:
        lines[2] = "99999999999 {}".format(lines[2].split()[1])
    with open(index, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=r"^DALI index .* does not describe") as error:
        list_index_files(str(tmp_path / "idx"), [shard])
    # the command to re-create it names this run's directories (placeholders until 2026-12-07)
    assert str(error.value).endswith("re-create it with `python -m dataprep.make_dali_index {} {}`".format(
        os.path.dirname(shard), tmp_path / "idx"))


def test_an_epoch_of_a_run_counted_in_batches_is_said_when_it_is_not_a_pass_over_the_data():
    """The original's batch-unit epoch is num_steps / ceil(num_steps / steps per pass): 400 steps of 32 on 9,000
    images are 2 epochs of 200 steps, not of 281; the log said "Steps per Epoch 200.0" and nothing more."""
    num_steps, num_epochs, _ = runner_utils.count_steps("batch", 9000, 400, 32)
    assert (num_steps, num_epochs) == (400, 2)
    assert runner_utils.batch_unit_epoch_note("batch", 9000, num_steps, num_epochs, 32) == (
        "Note: under --iter_unit batch an epoch of the learning-rate schedule (--lr_warmup_epochs included) and of "
        "the log's epoch numbers is 400 steps / 2 Training Epochs = 200 steps (the original's counting), not a pass "
        "over the 9,000 training images (281 steps of 32)")
    assert runner_utils.batch_unit_epoch_note("batch", 9000, 562, 2, 32) is None  # 281 steps: a pass
    assert runner_utils.batch_unit_epoch_note("epoch", 9000, 562, 2, 32) is None
    assert runner_utils.batch_unit_epoch_note("batch", None, 400, 1, 32) is None  # synthetic data
