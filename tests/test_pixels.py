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


def _rgba(seed=0, shape=(24, 32)):
    rng = np.random.default_rng(seed)
    rgba = rng.integers(0, 256, shape + (4,), dtype=np.uint8)
    rgba[:, : shape[1] // 2, 3] = 0  # the left half fully transparent, the rest random alpha
    return rgba


def _on_white(rgba):
    """NumPy: colour * alpha + white * (1 - alpha)."""
    alpha = rgba[..., 3:].astype(np.float64) / 255.0
    return rgba[..., :3] * alpha + 255.0 * (1.0 - alpha)


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
    path = tmp_path / "photo.png"
    path.write_bytes(data)
    jpeg, _, _, converted = records.to_rgb_jpeg(data)
    assert converted
    training_door = image_processing.eval_preprocess(tf.constant(jpeg), side, side).numpy()
    predict_door = data_utils.load_inference_image(str(path), side, side)
    reference_door = image_processing.eval_preprocess(
        tf.constant(_png(np.round(reference).astype(np.uint8))), side, side).numpy()
    assert np.abs(predict_door - reference_door).max() <= 1.5
    assert np.abs(training_door - predict_door).mean() < 1.5
