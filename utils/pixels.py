"""The one conversion of a decoded image to 8-bit RGB that every door uses: dataprep before it writes a JPEG, and
predict for PNG content that TensorFlow's decoder would read otherwise. So a photo gives a model the same pixels
in training and in prediction:
- transparent areas are shown on white, as a viewer shows them (TensorFlow's decoder drops the alpha channel and
  keeps whatever colour the transparent pixels hold, often black);
- 16-bit greyscale keeps the high byte of each sample, as TensorFlow's PNG decoder and PIL's 16-bit RGB do (PIL's
  own conversion of 16-bit greyscale clips every value above 255 to white);
- anything else (greyscale, CMYK, palette) as PIL converts it.
PIL is imported by the caller's image; this module imports nothing heavy."""

import io

SIXTEEN_BIT_GREY = ("I;16", "I;16B", "I;16L", "I;16N")


def has_alpha(image) -> bool:
    """True when a PIL image has transparency (an alpha channel, or a palette entry marked transparent)."""
    return image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (image.mode == "P" and "transparency" in image.info)


def is_sixteen_bit_grey(image) -> bool:
    return image.mode in SIXTEEN_BIT_GREY or (image.mode == "I" and image.format == "PNG")


def as_rgb(image):
    """The PIL image as 8-bit RGB by the rules above."""
    from PIL import Image

    if has_alpha(image):
        rgba = image.convert("RGBA")
        rgb = Image.new("RGB", rgba.size, (255, 255, 255))
        rgb.paste(rgba, mask=rgba.getchannel("A"))
        return rgb
    if is_sixteen_bit_grey(image):
        import numpy as np

        high = (np.asarray(image, dtype=np.uint32) >> 8).clip(0, 255).astype(np.uint8)
        return Image.fromarray(high, mode="L").convert("RGB")
    return image.convert("RGB")


def png_for_model(data: bytes) -> bytes:
    """PNG bytes as TensorFlow's decoder should see them: unchanged, unless the image has transparency or 16-bit
    greyscale, where TensorFlow would read other pixels than as_rgb: then its as_rgb form, re-encoded losslessly
    as PNG. Bytes PIL cannot open are returned as they are (the decoder reports them)."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        if not (has_alpha(image) or is_sixteen_bit_grey(image)):
            return data
        image.load()
    except Exception:  # noqa: BLE001 - whatever PIL fails on, TensorFlow's decoder names it
        return data
    out = io.BytesIO()
    as_rgb(image).save(out, format="PNG")
    return out.getvalue()
