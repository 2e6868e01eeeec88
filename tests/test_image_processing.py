"""utils/image_processing.py: crop statistics, eval preprocessing against a NumPy reference, predict inputs."""
import os

import numpy as np
import pytest
import tensorflow as tf

from tests._data_helpers import encode_image, random_image
from utils import data_utils, image_processing, pixels
from utils.errors import UserError


# ------------------------------------------------ NumPy reference of docs/ORIGINAL.md#evaluation-preprocessing
def legacy_bilinear(image, out_h, out_w, top=0, left=0, rows=None, columns=None):
    """TF1 resize_images bilinear: src = dst * in / out (float32), no half-pixel offset, edge clamp. Only the
    output rows top .. top + rows - 1 and columns left .. left + columns - 1 (default: all) are computed."""
    image = image.astype(np.float32)
    in_h, in_w = image.shape[:2]
    scale_y = np.float32(in_h) / np.float32(out_h)
    scale_x = np.float32(in_w) / np.float32(out_w)
    src_y = np.arange(top, top + (out_h if rows is None else rows), dtype=np.float32) * scale_y
    src_x = np.arange(left, left + (out_w if columns is None else columns), dtype=np.float32) * scale_x
    y0 = np.floor(src_y).astype(np.int64)
    x0 = np.floor(src_x).astype(np.int64)
    y1 = np.minimum(y0 + 1, in_h - 1)
    x1 = np.minimum(x0 + 1, in_w - 1)
    dy = (src_y - y0).astype(np.float32)[:, None, None]
    dx = (src_x - x0).astype(np.float32)[None, :, None]
    top_left, top_right = image[y0][:, x0], image[y0][:, x1]
    bottom_left, bottom_right = image[y1][:, x0], image[y1][:, x1]
    top = top_left + (top_right - top_left) * dx
    bottom = bottom_left + (bottom_right - bottom_left) * dx
    return top + (bottom - top) * dy


def numpy_eval_preprocess(decoded, height, width, resize_min):
    h, w = decoded.shape[:2]
    scale = np.float32(resize_min) / np.float32(min(h, w))
    new_h, new_w = int(np.float32(h) * scale), int(np.float32(w) * scale)
    top, left = (new_h - height) // 2, (new_w - width) // 2
    return legacy_bilinear(decoded, new_h, new_w, top, left, height, width)  # the central crop only


@pytest.mark.parametrize("shape", [(48, 64), (64, 40), (37, 53), (56, 56)])
def test_eval_preprocess_matches_numpy_reference(shape):
    rng = np.random.default_rng(1)
    jpeg = encode_image(random_image(rng, *shape), quality=90)
    decoded = image_processing.decode_image(jpeg).numpy()
    out = image_processing.eval_preprocess(jpeg, 32, 32).numpy()
    expected = numpy_eval_preprocess(decoded, 32, 32, image_processing.eval_resize_min(32, 32))
    assert out.shape == (32, 32, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-3)


@pytest.mark.parametrize("shape", [(1, 1000), (2, 1000), (1000, 1), (3, 1400)])
def test_an_elongated_image_whose_resize_exceeds_the_bound_is_evaluated_as_the_numpy_reference(shape):
    """At 32 px these resize to 36000-16800 px on the long side, over EVAL_RESIZE_MAX_SIDE: only the crop's window
    is computed, eagerly (predict) and in a tf.data map (evaluation), and it equals the full computation."""
    rng = np.random.default_rng(3)
    jpeg = encode_image(random_image(rng, *shape), quality=90)
    decoded = image_processing.decode_image(jpeg).numpy()
    new_h, new_w = (int(v) for v in image_processing.aspect_preserving_size(decoded, 36))
    assert max(new_h, new_w) > image_processing.EVAL_RESIZE_MAX_SIDE
    expected = numpy_eval_preprocess(decoded, 32, 32, 36)
    np.testing.assert_allclose(image_processing.eval_preprocess(jpeg, 32, 32).numpy(), expected, rtol=0, atol=1e-3)
    mapped = tf.data.Dataset.from_tensors(jpeg).map(lambda data: image_processing.eval_preprocess(data, 32, 32))
    np.testing.assert_allclose(next(iter(mapped)).numpy(), expected, rtol=0, atol=1e-3)
    full = image_processing.central_crop(image_processing.resize_bilinear_legacy(decoded, new_h, new_w), 32, 32)
    window = image_processing.central_window_of_resize(decoded, new_h, new_w, 32, 32)
    np.testing.assert_allclose(window.numpy(), full.numpy(), rtol=0, atol=1e-4)  # TensorFlow's kernel, to rounding


def test_predict_of_a_16000x1_image_never_computes_its_full_resize(tmp_path, monkeypatch):
    """Before, its eval preprocessing resized it to 1,168,000x73 floats at 64 px (about 2 GB of memory) and tried
    to allocate 12.6 GB at 224."""
    resize = image_processing.resize_bilinear_legacy

    def bounded_resize(image, height, width):
        assert max(int(height), int(width)) <= image_processing.EVAL_RESIZE_MAX_SIDE, (int(height), int(width))
        return resize(image, height, width)
    monkeypatch.setattr(image_processing, "resize_bilinear_legacy", bounded_resize)
    image = random_image(np.random.default_rng(4), 1, 16000)
    path = tmp_path / "line.jpg"
    path.write_bytes(encode_image(image, quality=90))
    out = data_utils.load_inference_image(str(path), 64, 64)
    decoded = image_processing.decode_image(path.read_bytes()).numpy()
    np.testing.assert_allclose(out, numpy_eval_preprocess(decoded, 64, 64, 73), rtol=0, atol=1e-3)


def test_legacy_resize_differs_from_half_pixel_resize():
    image = random_image(np.random.default_rng(2), 40, 50)
    ours = image_processing.resize_bilinear_legacy(image, 32, 32).numpy()
    np.testing.assert_allclose(ours, legacy_bilinear(image, 32, 32), atol=1e-3)
    assert np.abs(ours - tf.image.resize(image, [32, 32]).numpy()).max() > 1.0


def test_eval_resize_rule():
    assert image_processing.eval_resize_min(224, 224) == 256
    assert image_processing.eval_resize_min(128, 128) == 146
    assert image_processing.eval_resize_min(32, 32) == 36
    assert image_processing.eval_resize_min(224, 160) == 256


# ------------------------------------------------------------------ training augmentation statistics
def _crop_windows(image_shape, bbox, draws):
    windows = []
    for i in range(draws):
        begin, size = image_processing.distorted_crop_window(image_shape, bbox, seed=tf.constant([7, i]))
        windows.append((begin.numpy()[:2], size.numpy()[:2]))
    return windows


def test_crop_area_and_aspect_within_ranges():
    h, w = 120, 160
    windows = _crop_windows(tf.constant([h, w, 3]), tf.zeros([1, 0, 4]), 300)
    areas = np.array([s[0] * s[1] / (h * w) for _, s in windows])
    aspects = np.array([s[1] / s[0] for _, s in windows])
    whole = areas == 1.0
    # Integer rounding of the window moves area/aspect slightly off the sampled values.
    assert areas.min() >= 0.05 - 0.01 and areas.max() <= 1.0
    assert (aspects[~whole] >= 0.75 - 0.05).all() and (aspects[~whole] <= 1.33 + 0.05).all()
    assert 0.3 < areas.mean() < 0.7  # roughly uniform over [0.05, 1], minus rejected draws
    for begin, size in windows:
        assert begin.min() >= 0 and begin[0] + size[0] <= h and begin[1] + size[1] <= w
    assert len({tuple(b) + tuple(s) for b, s in windows}) > 200


def test_min_crop_area_raises_the_lower_end_only():
    h, w = 120, 160
    windows = []
    for i in range(200):
        begin, size = image_processing.distorted_crop_window(tf.constant([h, w, 3]), tf.zeros([1, 0, 4]),
                                                             seed=tf.constant([7, i]), min_area=0.5)
        windows.append(size.numpy()[:2])
    areas = np.array([s[0] * s[1] / (h * w) for s in windows])
    assert areas.min() >= 0.5 - 0.01 and areas.max() <= 1.0
    assert 0.6 < areas.mean() < 0.9  # roughly uniform over [0.5, 1]


def test_min_crop_area_one_keeps_the_whole_image_through_the_pipeline(tmp_path):
    """--min_crop_area 1 on square images: every training crop is the whole image, resized, maybe mirrored."""
    from tests._data_helpers import make_example
    rng = np.random.default_rng(4)
    path = str(tmp_path / "train-00000-of-00001")
    jpegs = {}
    with tf.io.TFRecordWriter(path) as writer:
        for label in range(1, 7):  # one image per label, so the label identifies the image
            jpegs[label] = encode_image(random_image(rng, 40, 40), quality=90)
            writer.write(make_example(jpegs[label], label, 40, 40))
    paths = [path]
    dataset = data_utils.get_tfrecords_input_fn(paths, 6, 32, 32, training=True, deterministic=True, seed=3,
                                                num_classes=10, min_crop_area=1.0)
    batch, labels = next(iter(dataset))
    assert sorted(labels.numpy() + 1) == list(range(1, 7))
    decoded = {label: image_processing.decode_image(jpeg).numpy() for label, jpeg in jpegs.items()}
    for image, label in zip(batch.numpy(), labels.numpy() + 1):
        # The flip comes before the resize, and legacy bilinear sampling is not mirror-symmetric.
        whole, mirrored = decoded[int(label)], decoded[int(label)][:, ::-1]
        error = min(np.abs(image - legacy_bilinear(whole, 32, 32)).max(),
                    np.abs(image - legacy_bilinear(mirrored, 32, 32)).max())
        assert error < 1e-3


def test_crop_covers_at_least_ten_percent_of_box():
    h, w = 100, 100
    box = np.array([0.6, 0.6, 0.9, 0.9], np.float32)  # small box in a corner
    windows = _crop_windows(tf.constant([h, w, 3]), tf.constant(box.reshape(1, 1, 4)), 200)
    for begin, size in windows:
        y0, x0 = begin / 100.0
        y1, x1 = (begin + size) / 100.0
        inter = max(0, min(y1, box[2]) - max(y0, box[0])) * max(0, min(x1, box[3]) - max(x0, box[1]))
        assert inter / ((box[2] - box[0]) * (box[3] - box[1])) >= 0.1 - 1e-3


def test_train_preprocess_seeded_and_flips():
    jpeg = encode_image(random_image(np.random.default_rng(3), 48, 64))
    bbox = tf.zeros([1, 0, 4])
    a = image_processing.train_preprocess(jpeg, bbox, 32, 32, seed=tf.constant([1, 2], tf.int64)).numpy()
    b = image_processing.train_preprocess(jpeg, bbox, 32, 32, seed=tf.constant([1, 2], tf.int64)).numpy()
    assert a.shape == (32, 32, 3) and a.dtype == np.float32 and 0 <= a.min() and a.max() <= 255
    np.testing.assert_array_equal(a, b)
    outs = [image_processing.train_preprocess(jpeg, bbox, 32, 32, seed=tf.constant([1, i], tf.int64)).numpy()
            for i in range(8)]
    assert len({o.tobytes() for o in outs}) == 8
    unseeded = image_processing.train_preprocess(jpeg, bbox, 32, 32)
    assert unseeded.shape == (32, 32, 3)


# ------------------------------------------------------------------ predict inputs
def _write(path, data):
    path.write_bytes(data)
    return str(path)


def _batches(paths, batch_size, size=32):
    """(list of (batch shape, basenames), [(basename, reason)]) of iter_inference_batches over `paths`."""
    skipped = []
    batches = [(images.shape, [os.path.basename(name) for name in names]) for images, names in
               data_utils.iter_inference_batches(paths, size, size, batch_size,
                                                 lambda path, reason: skipped.append((os.path.basename(path), reason)))]
    return batches, skipped


def test_predict_inputs_png_grey_cmyk(tmp_path):
    rng = np.random.default_rng(4)
    array = random_image(rng, 50, 70)
    files = [_write(tmp_path / "a.png", encode_image(array, "PNG")),
             _write(tmp_path / "b.jpg", encode_image(array, "JPEG", mode="L")),
             _write(tmp_path / "c.jpg", encode_image(array, "JPEG", mode="CMYK", quality=95)),
             _write(tmp_path / "d.png", encode_image(np.dstack([array, array[..., :1]]), "PNG"))]  # RGBA
    ((images, names),) = list(data_utils.iter_inference_batches(files, 32, 32, 4, on_skip=pytest.fail))
    assert images.shape == (4, 32, 32, 3) and images.dtype == np.float32
    assert names == files
    reference = numpy_eval_preprocess(array, 32, 32, 36)
    np.testing.assert_allclose(images[0], reference, atol=1e-3)  # PNG is lossless
    assert np.abs(images[2] - reference).mean() < 10  # CMYK converted back to RGB


def test_predict_batches_keep_order_and_report_each_bad_file_once(tmp_path):
    rng = np.random.default_rng(6)
    jpeg = encode_image(random_image(rng, 40, 48))
    png = encode_image(random_image(rng, 40, 48), "PNG")
    broken_png = bytearray(png)
    broken_png[60:80] = bytes(20)  # pixel data damaged, chunk structure and IEND intact: only the decoder sees it
    idat = png.index(b"IDAT") - 4
    lost_chunk = png[:idat] + (2 ** 31).to_bytes(4, "big") + png[idat + 4:]  # a chunk length damaged, IEND still last
    content = {"a.jpg": jpeg, "b.jpg": b"", "c.png": png, "d.jpg": jpeg[:len(jpeg) // 2], "e.jpg": b"not an image",
               "f.jpg": jpeg, "g.png": bytes(broken_png), "h.png": png[:-6], "i.jpg": jpeg, "j.png": png,
               "k.jpg": encode_image(random_image(rng, 30, 30), "GIF"), "l.png": lost_chunk}
    paths = sorted(_write(tmp_path / name, data) for name, data in content.items())
    batches, skipped = _batches(paths, batch_size=2)
    assert batches == [((2, 32, 32, 3), ["a.jpg", "c.png"]), ((2, 32, 32, 3), ["f.jpg", "i.jpg"]),
                       ((1, 32, 32, 3), ["j.png"])]
    reasons = dict(skipped)
    assert [name for name, _ in skipped] == ["b.jpg", "d.jpg", "e.jpg", "g.png", "h.png", "k.jpg", "l.png"]
    assert reasons["b.jpg"] == "image file is empty (0 bytes)"
    assert reasons["d.jpg"] == "truncated JPEG image (end-of-image marker FFD9 missing)"
    assert reasons["e.jpg"] == "not an image file (unknown format)"
    assert reasons["g.png"].startswith("cannot decode image (") and "{{" not in reasons["g.png"]
    assert reasons["h.png"] == "truncated PNG image (IEND chunk missing)"
    assert reasons["l.png"] == "damaged PNG image (its chunks do not lead to the IEND chunk it ends with)"
    assert reasons["k.jpg"].startswith("unsupported image format GIF")
    assert all("\n" not in reason for reason in reasons.values())


def test_predict_batches_of_one_size_and_all_bad(tmp_path):
    jpeg = encode_image(random_image(np.random.default_rng(7), 40, 40))
    good = [_write(tmp_path / "{}.jpg".format(i), jpeg) for i in range(5)]
    assert [shape[0] for shape, _ in _batches(good, batch_size=5)[0]] == [5]
    assert [shape[0] for shape, _ in _batches(good, batch_size=1)[0]] == [1, 1, 1, 1, 1]
    bad = [_write(tmp_path / "x.jpg", b""), _write(tmp_path / "y.jpg", jpeg[:100])]
    assert _batches(bad, batch_size=3) == ([], [("x.jpg", "image file is empty (0 bytes)"),
                                                ("y.jpg", "truncated JPEG image (end-of-image marker FFD9 missing)")])


def test_predict_batches_are_made_lazily(tmp_path, monkeypatch):
    """Streaming: a file is read only when the batch that holds it is asked for."""
    jpeg = encode_image(random_image(np.random.default_rng(8), 40, 40))
    paths = [_write(tmp_path / "{}.jpg".format(i), jpeg) for i in range(4)]
    read = []
    original = data_utils.read_image_file

    def counting(path):
        read.append(os.path.basename(path))
        return original(path)

    monkeypatch.setattr(data_utils, "read_image_file", counting)
    batches = data_utils.iter_inference_batches(paths, 32, 32, 2, on_skip=pytest.fail)
    next(batches)
    assert read == ["0.jpg", "1.jpg"]
    next(batches)
    assert read == ["0.jpg", "1.jpg", "2.jpg", "3.jpg"]


def test_truncation_check_allows_data_after_the_end_and_progressive_jpegs(tmp_path):
    array = random_image(np.random.default_rng(9), 64, 80)
    jpeg, progressive = encode_image(array), encode_image(array, progressive=True)
    assert jpeg.endswith(b"\xff\xd9")
    with_trailer = jpeg + b"\x00\x00\x00\x18ftypmp42 appended video" * 8  # as phone "motion photos" do
    png = encode_image(array, "PNG")
    files = [_write(tmp_path / name, data) for name, data in
             [("a.jpg", with_trailer), ("b.jpg", progressive), ("c.png", png + b"trailing")]]
    batches, skipped = _batches(files, batch_size=3)
    assert skipped == [] and batches[0][0][0] == 3
    for data in (jpeg, progressive):
        for cut in (2, 1, 50, len(data) // 3):
            assert not pixels.is_complete(data[:-cut], "JPEG"), cut
        assert pixels.jpeg_end(data) == len(data)
    assert pixels.jpeg_end(with_trailer) == len(jpeg)
    for cut in (1, 12, len(png) // 2):
        assert not pixels.is_complete(png[:-cut], "PNG"), cut


def test_unreadable_file_is_reported(tmp_path, monkeypatch):
    path = _write(tmp_path / "locked.jpg", encode_image(random_image(np.random.default_rng(10), 40, 40)))
    real_open = open

    def deny(name, *args, **kwargs):
        if name == path:
            raise PermissionError(13, "Permission denied", name)
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr("builtins.open", deny)
    with pytest.raises(data_utils.ImageFileError, match="cannot read image file \\(Permission denied\\)") as info:
        data_utils.read_image_file(path)
    assert info.value.path == path


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"hello, not an image at all", "not an image"),
    (encode_image(random_image(np.random.default_rng(5), 40, 40))[:200], "truncated JPEG"),
    (encode_image(random_image(np.random.default_rng(5), 40, 40), "BMP"), "unsupported image format BMP"),
])
def test_predict_bad_files_are_clear_errors(tmp_path, content, message):
    path = _write(tmp_path / "bad.jpg", content)
    with pytest.raises(UserError, match=message) as info:
        data_utils.load_inference_image(path, 32, 32)
    assert str(info.value).endswith(": " + path)


def test_predict_refuses_huge_and_missing(tmp_path):
    from PIL import Image
    huge = str(tmp_path / "huge.png")
    Image.new("L", (20000, 1)).save(huge)
    with pytest.raises(UserError, match="too large"):
        data_utils.read_image_file(huge)
    with pytest.raises(UserError, match="not found"):
        data_utils.read_image_file(str(tmp_path / "nope.jpg"))
