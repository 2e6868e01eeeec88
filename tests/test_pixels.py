"""utils/pixels.py: the one conversion to 8-bit RGB, against NumPy; and the two doors that use it (dataprep's
JPEG, predict's PNG input) giving a model the same pixels for a transparent or 16-bit photo."""
import io

import numpy as np
import pytest
from PIL import Image

from utils import pixels


def _png(array, mode=None):
    buffer = io.BytesIO()
    (Image.fromarray(array, mode) if mode else Image.fromarray(array)).save(buffer, format="PNG")
    return buffer.getvalue()


def _sixteen_bit_grey(values):
    """A 16-bit greyscale PNG (TensorFlow writes one from uint16; PIL reads it as mode I;16)."""
    import tensorflow as tf
    return tf.io.encode_png(tf.constant(values[..., None].astype(np.uint16))).numpy()


def _sixteen_bit_rgb(values):
    """A 16-bit RGB PNG (TensorFlow writes one from uint16 [H, W, 3]; PIL reads it as RGB, keeping high bytes)."""
    import tensorflow as tf
    data = tf.io.encode_png(tf.constant(values.astype(np.uint16))).numpy()
    assert data[24:26] == bytes([16, 2])  # IHDR: bit depth 16, colour type 2 (RGB)
    return data


def _rgba(seed=0, shape=(24, 32)):
    rng = np.random.default_rng(seed)
    rgba = rng.integers(0, 256, shape + (4,), dtype=np.uint8)
    rgba[:, : shape[1] // 2, 3] = 0  # the left half fully transparent, the rest random alpha
    return rgba


def _on_white(rgba):
    """NumPy: colour * alpha + white * (1 - alpha)."""
    alpha = rgba[..., 3:].astype(np.float64) / 255.0
    return rgba[..., :3] * alpha + 255.0 * (1.0 - alpha)


def _both_doors(tmp_path, data, side):
    """(training's eval input of dataprep's JPEG of PNG `data`, predict's input of the PNG file) at `side` px."""
    import tensorflow as tf
    from dataprep import records
    from utils import data_utils, image_processing
    path = tmp_path / "photo.png"
    path.write_bytes(data)
    jpeg, _, _, converted = records.to_rgb_jpeg(data)
    assert converted
    training_door = image_processing.eval_preprocess(tf.constant(jpeg), side, side).numpy()
    return training_door, data_utils.load_inference_image(str(path), side, side)


def test_transparency_is_shown_on_white():
    rgba = _rgba()
    rgb = np.asarray(pixels.as_rgb(Image.fromarray(rgba, "RGBA")), dtype=np.float64)
    assert np.abs(rgb - _on_white(rgba)).max() <= 1.0  # PIL's integer blend rounds
    assert (rgb[:, :16] == 255).all()


def test_sixteen_bit_grey_keeps_the_high_byte_as_tensorflows_decoder_does():
    import tensorflow as tf
    values = np.array([[0, 255, 256, 32767, 32768, 65279, 65280, 65535, 12345, 383]], np.uint16)
    data = _sixteen_bit_grey(values)
    image = Image.open(io.BytesIO(data))
    assert image.mode.startswith("I")
    rgb = np.asarray(pixels.as_rgb(image))
    np.testing.assert_array_equal(rgb, np.repeat((values >> 8)[..., None], 3, axis=-1))
    np.testing.assert_array_equal(rgb, tf.io.decode_png(data, channels=3).numpy())
    assert np.asarray(image.convert("RGB")).max() == 255 and (np.asarray(image.convert("RGB"))[0, 2:] == 255).all()


@pytest.mark.parametrize("kind", ["rgb", "grey", "palette"])
def test_png_for_model_leaves_what_tensorflow_reads_the_same_way_alone(kind):
    rng = np.random.default_rng(1)
    array = rng.integers(0, 256, (8, 8, 3) if kind == "rgb" else (8, 8), dtype=np.uint8)
    image = Image.fromarray(array)
    if kind == "palette":
        image = image.convert("RGB").quantize(16)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    assert pixels.png_for_model(buffer.getvalue()) == buffer.getvalue()
    assert pixels.png_for_model(b"\x89PNG not really") == b"\x89PNG not really"


@pytest.mark.parametrize("kind", ["rgba", "grey16"])
def test_dataprep_and_predict_give_the_model_the_same_pixels(tmp_path, kind):
    """The same file through dataprep (its JPEG, decoded as training does) and through predict's reader: equal to
    JPEG's quality-100 rounding, and equal to the NumPy reference. Before, a transparent half was white in the
    dataset and black in predict, and a 16-bit greyscale photo nearly white in the dataset."""
    import tensorflow as tf
    from dataprep import records
    from utils import data_utils, image_processing
    side = 64
    y, x = np.mgrid[0:side, 0:side] / side  # smooth content, as photos are (JPEG blurs noise far more)
    if kind == "rgba":
        rgba = np.stack([200 * x, 150 * y + 50, 255 * (1 - x * y), 128 + 127 * np.sin(6 * y)], -1).astype(np.uint8)
        rgba[:, : side // 2] = 0  # the left half transparent, black under it
        data, reference = _png(rgba, "RGBA"), _on_white(rgba)
    else:
        values = (65535 * (0.5 + 0.45 * np.sin(5 * x + 3 * y))).astype(np.uint16)
        data, reference = _sixteen_bit_grey(values), np.repeat((values >> 8)[..., None], 3, axis=-1)
    training_door, predict_door = _both_doors(tmp_path, data, side)
    reference_door = image_processing.eval_preprocess(
        tf.constant(_png(np.round(reference).astype(np.uint8))), side, side).numpy()
    assert np.abs(predict_door - reference_door).max() <= 1.5
    assert np.abs(training_door - predict_door).mean() < 1.5


def _cmyk_jpeg(adobe=True):
    """A CMYK JPEG as PIL writes it (with an Adobe APP14 segment, inverted ink), or the same bytes without that
    segment: a file that does not say which ink convention it uses."""
    side = 32
    y, x = np.mgrid[0:side, 0:side] / side
    cmyk = np.stack([200 * x, 150 * y, 60 + 0 * x, 30 * x * y], -1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(cmyk, "CMYK").save(buffer, format="JPEG", quality=95)
    data = buffer.getvalue()
    if adobe:
        return data
    pos, out = 2, data[:2]
    while data[pos + 1] != 0xDA:
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if not (data[pos + 1] == 0xEE and data[pos + 4:pos + 9] == b"Adobe"):
            out += data[pos:pos + 2 + length]
        pos += 2 + length
    assert len(out) < pos  # a segment was taken out
    return out + data[pos:]


def test_a_cmyk_jpeg_without_an_adobe_marker_is_refused_by_both_doors_with_the_same_reason(tmp_path):
    """PIL reads such a file as inverted ink, TensorFlow's decoder as plain ink (an all-black image here, which the
    model classified with confidence): neither can be right for every such file, so both doors refuse it."""
    import tensorflow as tf
    from dataprep import records
    from utils import data_utils
    data = _cmyk_jpeg(adobe=False)
    assert pixels.cmyk_without_adobe(data)
    assert not pixels.cmyk_without_adobe(_cmyk_jpeg(adobe=True))
    plain = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(plain, format="JPEG")
    assert not pixels.cmyk_without_adobe(plain.getvalue()) and not pixels.cmyk_without_adobe(b"\xff\xd8\xff")
    # the disagreement the refusal is about
    pil = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)
    assert np.abs(pil - tf.io.decode_jpeg(data, channels=3).numpy()).max() > 100
    with pytest.raises(records.UnreadableImage) as refused:
        records.to_rgb_jpeg(data)
    assert str(refused.value) == pixels.CMYK_WITHOUT_ADOBE
    path = tmp_path / "cmyk.jpg"
    path.write_bytes(data)
    with pytest.raises(data_utils.ImageFileError) as error:
        data_utils.load_inference_image(str(path), 32, 32)
    assert error.value.reason == pixels.CMYK_WITHOUT_ADOBE
    assert str(error.value) == f"{pixels.CMYK_WITHOUT_ADOBE}: {path}"


def test_a_cmyk_jpeg_with_an_adobe_marker_gives_both_doors_pils_pixels(tmp_path):
    import tensorflow as tf
    from dataprep import records
    from utils import data_utils, image_processing
    data = _cmyk_jpeg(adobe=True)
    path = tmp_path / "cmyk.jpg"
    path.write_bytes(data)
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    jpeg, _, _, converted = records.to_rgb_jpeg(data)
    assert converted
    assert np.abs(tf.io.decode_jpeg(jpeg).numpy() - reference.astype(np.float32)).max() <= 8
    training_door = image_processing.eval_preprocess(tf.constant(jpeg), 32, 32).numpy()
    predict_door = data_utils.load_inference_image(str(path), 32, 32)
    reference_door = image_processing.eval_preprocess(tf.constant(_png(reference)), 32, 32).numpy()
    # TensorFlow's decoder (INTEGER_FAST IDCT, no fancy upscaling) and PIL's differ by a level or two; inverted
    # ink would differ by over a hundred
    assert np.abs(predict_door - reference_door).mean() < 3
    assert np.abs(training_door - reference_door).mean() < 3


def _with_trns(png, payload):
    """`png` with a tRNS chunk of `payload` inserted before its first IDAT chunk."""
    import struct
    import zlib
    pos = 8
    while png[pos + 4:pos + 8] != b"IDAT":
        pos += 12 + int.from_bytes(png[pos:pos + 4], "big")
    chunk = b"tRNS" + payload
    return png[:pos] + struct.pack(">I", len(payload)) + chunk + struct.pack(">I", zlib.crc32(chunk)) + png[pos:]


@pytest.mark.parametrize("kind", ["grey", "rgb", "grey16", "rgb16"])
def test_a_png_s_transparent_colour_is_shown_on_white_by_both_doors(tmp_path, kind):
    """A tRNS chunk marks one grey level or RGB colour transparent (PIL: info["transparency"]). Before, has_alpha
    counted only palette images, so those areas stayed black in the dataset and in predict."""
    import struct

    import tensorflow as tf
    from dataprep import records
    from utils import data_utils, image_processing
    side = 64
    y, x = np.mgrid[0:side, 0:side] / side
    transparent = x < 0.5  # the left half holds the transparent colour, black
    if kind == "grey":
        grey = np.where(transparent, 0, 60 + 190 * x * (1 - y / 2)).astype(np.uint8)
        data = _with_trns(_png(grey, "L"), struct.pack(">H", 0))
        colour = np.repeat(grey[..., None], 3, axis=-1)
    elif kind == "rgb":
        rgb = np.stack([200 * x, 150 * y + 50, 255 * (1 - x * y)], -1).astype(np.uint8)
        rgb[transparent] = 0
        data = _with_trns(_png(rgb, "RGB"), struct.pack(">HHH", 0, 0, 0))
        colour = rgb
    elif kind == "grey16":
        values = np.where(transparent, 0, 65535 * (0.5 + 0.45 * np.sin(5 * x + 3 * y))).astype(np.uint16)
        data = _with_trns(_sixteen_bit_grey(values), struct.pack(">H", 0))
        colour = np.repeat((values >> 8)[..., None], 3, axis=-1)
    else:
        values = (65535 * np.stack([0.5 + 0.45 * np.sin(5 * x + 3 * y), 0.3 + 0.6 * y, 0.9 - 0.5 * x * y], -1))
        values = np.where(transparent[..., None], 0, values).astype(np.uint16)
        data = _with_trns(_sixteen_bit_rgb(values), struct.pack(">HHH", 0, 0, 0))
        colour = values >> 8
    assert "transparency" in Image.open(io.BytesIO(data)).info
    reference = np.where(transparent[..., None], 255, colour).astype(np.uint8)  # NumPy: composited on white
    np.testing.assert_array_equal(np.asarray(pixels.as_rgb(Image.open(io.BytesIO(data)), data)), reference)
    training_door, predict_door = _both_doors(tmp_path, data, side)
    reference_door = image_processing.eval_preprocess(tf.constant(_png(reference)), side, side).numpy()
    np.testing.assert_allclose(predict_door, reference_door, atol=1e-3)
    assert np.abs(training_door - reference_door).mean() < 1.5


@pytest.mark.parametrize("colour", [(0x0012, 0x0034, 0x0056), (0x1234, 0x5678, 0x9ABC)])
def test_a_sixteen_bit_rgb_png_s_transparent_colour_is_matched_on_all_16_bits(colour):
    """tRNS of a 16-bit RGB PNG: three 2-byte values, compared with the full samples (PNG spec). Pixels equal to the
    colour become white; every other pixel keeps the high bytes that the same PNG without tRNS gives (PIL's 16-bit
    RGB, TensorFlow's 8-bit decode), also those whose high bytes alone equal the colour's or whose low bytes differ by
    one. Before, PIL compared its 8-bit samples (high bytes) with the 16-bit colour: (0x0012, 0x0034, 0x0056) made
    the pixel (0x1200, 0x3400, 0x5600) white and left the three of that colour opaque; (0x1234, ...) made nothing
    white."""
    import struct

    import tensorflow as tf
    r, g, b = colour
    values = np.array([[colour, (r, g, b + 1), (r ^ 0xFF, g, b), (0xFFFF, 0, 1)],
                       [(r >> 8, g >> 8, b >> 8), (0x0000, 0x0000, 0x0000), colour, (r & 0xFF00, g & 0xFF00, b)],
                       [(0x1200, 0x3400, 0x5600), (0x8000, 0x8001, 0x7FFF), (r, g, b ^ 0x0100), colour]], np.uint16)
    opaque_png = _sixteen_bit_rgb(values)
    data = _with_trns(opaque_png, struct.pack(">HHH", *colour))
    transparent = (values == np.array(colour)).all(axis=-1)  # NumPy: all three 16-bit samples equal
    assert transparent.sum() == 3
    without_trns = np.asarray(pixels.as_rgb(Image.open(io.BytesIO(opaque_png)), opaque_png))
    np.testing.assert_array_equal(without_trns, values >> 8)  # the non-tRNS path: high bytes
    np.testing.assert_array_equal(without_trns, tf.io.decode_png(opaque_png, channels=3).numpy())
    rgb = np.asarray(pixels.as_rgb(Image.open(io.BytesIO(data)), data))
    np.testing.assert_array_equal(rgb, np.where(transparent[..., None], 255, without_trns))
    # predict's door: the PNG it hands TensorFlow's decoder holds those pixels
    np.testing.assert_array_equal(tf.io.decode_png(pixels.png_for_model(data), channels=3).numpy(), rgb)


def test_a_sixteen_bit_rgb_png_with_trns_that_only_pil_reads_is_skipped_by_dataprep_and_left_to_predict_s_decoder():
    """A damaged image-data checksum: PIL decodes the file, TensorFlow's 16-bit decode refuses it. Dataprep skips it
    as corrupt naming TensorFlow's reason in one line; predict's PNG is left as it is, for its decoder to report."""
    import struct

    from dataprep import records
    data = bytearray(_with_trns(_sixteen_bit_rgb(np.full((4, 6, 3), 40000, np.uint16)), struct.pack(">HHH", 0, 0, 0)))
    data[data.index(b"IEND") - 5] ^= 0xFF  # the last byte of the IDAT chunk's CRC
    data = bytes(data)
    Image.open(io.BytesIO(data)).load()
    with pytest.raises(records.UnreadableImage) as info:
        records.to_rgb_jpeg(data)
    reason = f"its 16-bit samples cannot be decoded (Invalid PNG data, size {len(data)})"
    assert str(info.value) == f"corrupt image ({reason})"
    assert pixels.png_for_model(data) == data


def test_as_rgb_of_an_rgb_png_with_a_transparent_colour_needs_its_bytes():
    """Without the file's bytes the samples' bit depth is unknown once PIL has decoded them: an error, not a guess."""
    import struct
    data = _with_trns(_png(np.zeros((2, 2, 3), np.uint8), "RGB"), struct.pack(">HHH", 0, 0, 0))
    with pytest.raises(ValueError, match="bytes of an RGB PNG with a tRNS colour"):
        pixels.as_rgb(Image.open(io.BytesIO(data)))


def _frames(image_format, count, side=16):
    frames = [Image.fromarray(np.full((side, side, 3), 60 * i + 20, np.uint8)) for i in range(count)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format=image_format, save_all=True, append_images=frames[1:])
    return buffer.getvalue()


@pytest.mark.parametrize("image_format", ["GIF", "PNG", "WEBP", "TIFF"])
def test_an_image_of_several_frames_is_skipped_by_dataprep_naming_the_count(image_format):
    """Before, dataprep wrote an animated GIF's first frame without a word."""
    from dataprep import records
    with pytest.raises(records.UnreadableImage) as refused:
        records.to_rgb_jpeg(_frames(image_format, 3))
    assert str(refused.value).startswith("animated or multi-frame image (3 frames): ")
    assert records.to_rgb_jpeg(_frames(image_format, 1))[3]  # one frame: converted as before


def test_an_animated_png_is_refused_by_predict_with_dataprep_s_reason(tmp_path):
    """TensorFlow's PNG decoder reads an APNG's default image only; predict refuses it as dataprep skips it."""
    from dataprep import records
    from utils import data_utils
    data = _frames("PNG", 2)
    path = tmp_path / "animated.png"
    path.write_bytes(data)
    with pytest.raises(data_utils.ImageFileError) as error:
        data_utils.load_inference_image(str(path), 16, 16)
    with pytest.raises(records.UnreadableImage) as refused:
        records.to_rgb_jpeg(data)
    assert error.value.reason == str(refused.value) == pixels.several_frames(Image.open(io.BytesIO(data)))
    assert "(2 frames)" in error.value.reason


def test_a_multi_picture_camera_jpeg_is_still_written_unchanged():
    from dataprep import records
    data = _frames("MPO", 2)
    assert Image.open(io.BytesIO(data)).format == "MPO"
    assert records.to_rgb_jpeg(data) == (data, 16, 16, False)


def _png_header_only(width, height):
    """A PNG that declares width x height (RGB) and holds no valid data: enough for every header check, and a
    decode fails at its first bytes."""
    import struct
    import zlib

    def chunk(kind, payload):
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"not zlib data")
            + chunk(b"IEND", b""))


@pytest.mark.parametrize("width, height, message", [
    (14000, 13000, "image too large (14000x13000, 182000000 pixels, max 178956970 pixels)"),
    (20000, 10, "image too large (20000x10, max side 16384)")])
def test_a_huge_image_is_too_large_in_both_doors_with_one_message(tmp_path, width, height, message):
    """Before, dataprep said `corrupt image (Image size (182000000 pixels) exceeds limit ...)` for the first (PIL's
    error) and wrote the second; predict said `image too large (Image size ...)` for the first."""
    from dataprep import records
    from utils import data_utils
    data = _png_header_only(width, height)
    with pytest.raises(records.UnreadableImage) as refused:
        records.to_rgb_jpeg(data)
    assert str(refused.value) == message
    path = tmp_path / "huge.png"
    path.write_bytes(data)
    with pytest.raises(data_utils.ImageFileError) as error:
        data_utils.read_image_file(str(path))
    assert error.value.reason == message


def test_dataprep_never_lets_pils_decompression_bomb_warning_through():
    """A 99-megapixel image is under the limits: PIL used to print its two-line DecompressionBombWarning, naming no
    file (this one's data is not valid, so it is then skipped as corrupt, without any warning)."""
    import warnings

    from dataprep import records
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(records.UnreadableImage, match="corrupt image"):
            records.to_rgb_jpeg(_png_header_only(11000, 9000))
    assert not caught, [str(w.message) for w in caught]
    assert Image.MAX_IMAGE_PIXELS == 89478485  # PIL's own limit is back for everyone else


def test_predicts_notes_and_png_conversion_never_let_pils_decompression_bomb_warning_through():
    """predict's EXIF note and its PNG conversion opened the image outside `opened`: a 100-megapixel photo (under the
    limits, and predicted) printed PIL's two-line warning naming no file."""
    import warnings
    header = _png_header_only(11000, 9000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert pixels.exif_orientation_note(header) is None
        assert pixels.png_for_model(header) == header
    assert not caught, [str(w.message) for w in caught]
    assert Image.MAX_IMAGE_PIXELS == 89478485


def test_a_bad_file_gets_the_same_reason_from_dataprep_and_predict(tmp_path):
    """Empty, not an image, a JPEG or PNG cut off, a PNG damaged inside: the reason is utils/pixels' in both doors.
    Before, dataprep said `empty file`, `not an image (unknown format)` and, for a cut-off file, PIL's `corrupt image
    (image file is truncated (14 bytes not processed))` or `corrupt image (Truncated File Read)` where predict said
    `truncated JPEG image (end-of-image marker FFD9 missing)`."""
    from dataprep import records
    from utils import data_utils
    rng = np.random.default_rng(3)
    array = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
    jpeg = io.BytesIO()
    Image.fromarray(array).save(jpeg, format="JPEG", quality=90)
    jpeg, png = jpeg.getvalue(), _png(array)
    idat = png.index(b"IDAT") - 4
    cases = {"empty.jpg": (b"", "image file is empty (0 bytes)"),
             "text.jpg": (b"just some notes", "not an image file (unknown format)"),
             "cut.jpg": (jpeg[:-14], "truncated JPEG image (end-of-image marker FFD9 missing)"),
             "cut_header.jpg": (jpeg[:40], "truncated JPEG image (end-of-image marker FFD9 missing)"),
             "cut.png": (png[:-20], "truncated PNG image (IEND chunk missing)"),
             "lost.png": (png[:idat] + (2 ** 31).to_bytes(4, "big") + png[idat + 4:],
                          "damaged PNG image (its chunks do not lead to the IEND chunk it ends with)")}
    for name, (data, reason) in cases.items():
        with pytest.raises(records.UnreadableImage) as skipped:
            records.to_rgb_jpeg(data)
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(data_utils.ImageFileError) as refused:
            data_utils.read_image_file(str(path))
        assert (str(skipped.value), refused.value.reason) == (reason, reason), name
