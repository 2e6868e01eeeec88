"""The one conversion of a decoded image to 8-bit RGB that every door uses: dataprep before it writes a JPEG, and
predict for PNG content that TensorFlow's decoder would read otherwise. So a photo gives a model the same pixels
in training and in prediction:
- transparent areas are shown on white, as a viewer shows them (TensorFlow's decoder drops the alpha channel and
  keeps whatever colour the transparent pixels hold, often black): an alpha channel, a transparent palette entry,
  and the transparent grey level or RGB colour of a PNG's tRNS chunk, compared with the full samples (8- and 16-bit
  greyscale and RGB). PIL keeps only the high byte of 16-bit RGB samples, and its own conversion compared those
  with the 16-bit colour: a colour above 255 matched nothing, one below 256 every pixel whose high bytes equal it;
  so a 16-bit RGB PNG with a tRNS colour is decoded again by TensorFlow (`tf.io.decode_png(dtype=uint16)`, imported
  only then: both doors have TensorFlow loaded already) for the mask (`_sixteen_bit_rgb_on_white`);
- 16-bit greyscale and RGB keep the high byte of each sample, as TensorFlow's PNG decoder and PIL's 16-bit RGB do
  (PIL's own conversion of 16-bit greyscale clips every value above 255 to white);
- anything else (greyscale, CMYK, palette) as PIL converts it.
Some files are refused by both doors with the same reason, where the decoders would give different pixels:
- a CMYK JPEG without an Adobe APP14 marker (`cmyk_without_adobe`): PIL always reads CMYK as Adobe-inverted ink,
  TensorFlow's decoder inverts only after that marker, and the file does not record which convention it uses.
- an image of several frames (an animated GIF, PNG or WebP, a multi-page TIFF; `several_frames`): a decoder would
  keep its first frame only and say nothing. A multi-picture camera JPEG (MPO) is not refused: its first picture is
  the photo, the others are previews or a second view.
Both doors also refuse an image over MAX_IMAGE_SIDE a side or MAX_IMAGE_PIXELS pixels with one message
(`too_large`), checked on the header before any decode (`opened`), instead of PIL's decompression-bomb error and
warning, which name no file and no size, and a JPEG or PNG cut off before its end (`truncated`). `refused` is the
one check of all these, and EMPTY_FILE and NOT_AN_IMAGE the reasons for an empty file and one of no known format.
PIL is imported by the caller's image; this module imports nothing heavy."""

import contextlib
import io
import threading
import warnings

SIXTEEN_BIT_GREY = ("I;16", "I;16B", "I;16L", "I;16N")
CMYK_WITHOUT_ADOBE = ("CMYK JPEG without an Adobe marker: whether its ink values are inverted is not recorded, and "
                      "decoders disagree; convert it to RGB first")
# JPEG start-of-frame markers (SOF0-SOF15 without DHT C4, JPG C8 and DAC CC): their segment holds the component count.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


MAX_IMAGE_SIDE = 16384
# PIL's default refusal threshold (twice its warning's MAX_IMAGE_PIXELS): about 540 MB of decoded RGB.
MAX_IMAGE_PIXELS = 2 * 89478485
_PIL_LIMIT_LOCK = threading.Lock()  # PIL's limit is a module global, switched off only inside `opened`


def too_large(width: int, height: int) -> str | None:
    """The reason an image of this size is refused, None when it is not."""
    if max(width, height) > MAX_IMAGE_SIDE:
        return f"image too large ({width}x{height}, max side {MAX_IMAGE_SIDE})"
    if width * height > MAX_IMAGE_PIXELS:
        return f"image too large ({width}x{height}, {width * height} pixels, max {MAX_IMAGE_PIXELS} pixels)"
    return None


@contextlib.contextmanager
def opened(data: bytes):
    """The PIL image of `data`, its header parsed, not decoded; PIL's decompression-bomb error and warning are off
    inside the block, since the caller checks `too_large(*image.size)` before it decodes. PIL's exceptions for bytes
    it cannot open propagate."""
    from PIL import Image

    with _PIL_LIMIT_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            with Image.open(io.BytesIO(data)) as image:
                yield image
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def has_alpha(image) -> bool:
    """True when a PIL image has transparency: an alpha channel, or a transparent colour (`info["transparency"]`:
    a palette entry, or a PNG tRNS chunk's grey level or RGB colour)."""
    return image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info


def is_sixteen_bit_grey(image) -> bool:
    return image.mode in SIXTEEN_BIT_GREY or (image.mode == "I" and image.format == "PNG")


def cmyk_without_adobe(data: bytes) -> bool:
    """True when `data` is a JPEG whose frame has 4 components (CMYK or YCCK) and whose header before the first
    scan holds no APP14 segment starting with b"Adobe". Walks the marker segments of the first image only (an MPO's
    later pictures and embedded thumbnails are not looked at); anything malformed gives False (the decoders report
    it)."""
    if not data.startswith(b"\xff\xd8"):
        return False
    pos, size, components, adobe = 2, len(data), None, False
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            return False
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            pos += 2
            continue
        if marker in (0xDA, 0xD9):  # start of scan / end of image: the header is over
            break
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        segment = data[pos + 4:pos + 2 + length]
        if marker in _SOF_MARKERS and len(segment) >= 6:
            components = segment[5]
        elif marker == 0xEE and segment.startswith(b"Adobe"):
            adobe = True
        pos += 2 + length
    return components == 4 and not adobe


def several_frames(image) -> str | None:
    """The reason a PIL image of more than one frame is refused, naming the frame count; None for one frame or an
    MPO (a camera JPEG, read as its first picture by every decoder here)."""
    frames = getattr(image, "n_frames", 1)
    if frames <= 1 or image.format == "MPO":
        return None
    return (f"animated or multi-frame image ({frames} frames): only its first frame would be used; save the frame "
            "wanted as an image of its own")


def is_sixteen_bit_rgb_png(data: bytes | None) -> bool:
    """True when `data` is a PNG whose header (IHDR, always the first chunk) says 16-bit samples, colour type 2 (RGB
    without alpha): signature 8 bytes, chunk length 4, b"IHDR" 4, width 4, height 4, then bit depth and colour type."""
    return (data is not None and len(data) >= 26 and data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
            and data[24] == 16 and data[25] == 2)


def _sixteen_bit_rgb_on_white(image, data: bytes):
    """as_rgb of a 16-bit RGB PNG with a tRNS colour: the high byte of each sample (PIL's RGB of it), white where all
    three 16-bit samples equal the tRNS colour (PIL's info["transparency"], the chunk's three 2-byte values).
    Raises ValueError when TensorFlow cannot decode the PNG that PIL read (e.g. a damaged data checksum)."""
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    try:
        samples = tf.io.decode_png(data, channels=3, dtype=tf.uint16).numpy()
    except tf.errors.OpError as error:
        from utils.data_utils import op_error_text  # imported here: data_utils imports this module

        raise ValueError(f"its 16-bit samples cannot be decoded ({op_error_text(error)})") from None
    if samples.shape[:2] != (image.height, image.width):  # cannot happen for one PNG; never mask the wrong pixels
        raise ValueError(f"16-bit samples {samples.shape[1]}x{samples.shape[0]} for an image of {image.size}")
    transparent = (samples == np.array(image.info["transparency"], np.uint16)).all(axis=-1)
    return Image.fromarray(np.where(transparent[..., None], 255, samples >> 8).astype(np.uint8), mode="RGB")


def as_rgb(image, data: bytes | None = None):
    """The PIL image as 8-bit RGB by the rules above. data: the file's bytes, needed for a PNG of RGB samples with a
    tRNS colour (PIL tells 8- from 16-bit samples only before it decodes); ValueError without them."""
    from PIL import Image

    if image.format == "PNG" and image.mode == "RGB" and "transparency" in image.info:
        if data is None:
            raise ValueError("as_rgb needs the bytes of an RGB PNG with a tRNS colour (8- or 16-bit samples?)")
        if is_sixteen_bit_rgb_png(data):
            return _sixteen_bit_rgb_on_white(image, data)
    if is_sixteen_bit_grey(image):
        import numpy as np

        samples = np.asarray(image, dtype=np.uint32)
        rgb = Image.fromarray((samples >> 8).clip(0, 255).astype(np.uint8), mode="L").convert("RGB")
        if "transparency" not in image.info:
            return rgb
        # a tRNS grey level, compared with the 16-bit samples (PIL's own RGBA conversion would clip them to white)
        opaque = Image.fromarray(np.where(samples == image.info["transparency"], 0, 255).astype(np.uint8), mode="L")
        on_white = Image.new("RGB", rgb.size, (255, 255, 255))
        on_white.paste(rgb, mask=opaque)
        return on_white
    if has_alpha(image):
        rgba = image.convert("RGBA")
        rgb = Image.new("RGB", rgba.size, (255, 255, 255))
        rgb.paste(rgba, mask=rgba.getchannel("A"))
        return rgb
    return image.convert("RGB")


# ------------------------------------------------------------------------------------- which files are refused
# The reasons both doors (dataprep's to_rgb_jpeg, predict's utils/data_utils.read_image_file) give for a file, so the
# same file gets the same line from each.
EMPTY_FILE = "image file is empty (0 bytes)"
NOT_AN_IMAGE = "not an image file (unknown format)"
# A PNG's last chunk as every writer writes it: length 0, "IEND", its CRC.
_PNG_IEND_CHUNK = b"\x00\x00\x00\x00IEND\xaeB`\x82"


def refused(data: bytes, image) -> str | None:
    """Why both doors refuse the image of `data` (`image`: its PIL image, header parsed, not decoded), None when
    they do not: over the size limits (too_large), several frames (several_frames), cut off (truncated: a JPEG or
    PNG that does not reach its end), a CMYK JPEG without an Adobe marker. In that order, so a file with two faults
    gets the same reason from each."""
    reason = too_large(*image.size) or several_frames(image)
    if reason:
        return reason
    if image.format in ("JPEG", "MPO", "PNG"):
        reason = truncated(data, "PNG" if image.format == "PNG" else "JPEG")
    if reason:
        return reason
    if image.format in ("JPEG", "MPO") and cmyk_without_adobe(data):
        return CMYK_WITHOUT_ADOBE
    return None


def truncated(data: bytes, image_format: str | None = None) -> str | None:
    """The reason a JPEG or PNG (`image_format`, else by its signature) does not reach the end its format requires
    (is_complete): cut off, or (a PNG that still ends with its IEND chunk) damaged inside, where the chunk walk loses
    its way; None when it does, or for other data."""
    if image_format is None:
        image_format = next((name for magic, name in _SIGNATURES.items() if data.startswith(magic)), None)
    if image_format not in _END_MARKS or is_complete(data, image_format):
        return None
    if image_format == "PNG" and data.endswith(_PNG_IEND_CHUNK):
        return "damaged PNG image (its chunks do not lead to the IEND chunk it ends with)"
    return f"truncated {image_format} image ({_END_MARKS[image_format]} missing)"


_END_MARKS = {"JPEG": "end-of-image marker FFD9", "PNG": "IEND chunk"}
_SIGNATURES = {b"\xff\xd8": "JPEG", b"\x89PNG\r\n\x1a\n": "PNG"}


def is_complete(data: bytes, image_format: str) -> bool:
    """True when `data` reaches the image's end (a JPEG's EOI marker, a PNG's IEND chunk), so no result is computed
    on a cut-off file; damage inside a file that still ends right is not seen here (docs/RELIABILITY.md). TensorFlow's
    decoders refuse most cut-off files as well, but only as "Invalid JPEG data" plus libjpeg's own stderr lines;
    this check names the cause and never reaches the decoder. Bytes after the end are allowed (phone cameras
    append a video or metadata after a JPEG's EOI)."""
    if image_format == "JPEG":
        return data.endswith(b"\xff\xd9") or jpeg_end(data) is not None
    return png_end(data) is not None


def jpeg_end(data: bytes) -> int | None:
    """Offset just past the EOI marker that ends the JPEG stream starting at data[0], or None when the data ends
    before it. Walks the marker segments and skips entropy-coded data to the next real marker (FF00 is a
    stuffed byte, FFD0-FFD7 restart markers, FFFF fill), so markers inside embedded thumbnails do not count."""
    pos, size = 2, len(data)  # after SOI
    while pos + 2 <= size:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
        elif marker == 0xD9:
            return pos + 2
        elif 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            pos += 2
        elif pos + 4 > size:
            return None
        else:
            pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
            if marker == 0xDA:  # start of scan: entropy-coded data up to the next marker
                pos = _skip_entropy_coded(data, pos)
    return None


def _skip_entropy_coded(data, pos):
    """Offset of the first marker at or after `pos` that is not part of entropy-coded data (len(data) if none)."""
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0 or pos + 1 >= len(data):
            return len(data)
        following = data[pos + 1]
        if following == 0x00 or 0xD0 <= following <= 0xD7:
            pos += 2
        elif following == 0xFF:
            pos += 1
        else:
            return pos


def png_end(data: bytes) -> int | None:
    """Offset just past the IEND chunk, or None when the data ends first (each chunk: length, type, data, CRC)."""
    pos = 8  # after the signature
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        end = pos + 12 + length
        if end > len(data):
            return None
        if data[pos + 4:pos + 8] == b"IEND":
            return end
        pos = end
    return None


# EXIF Orientation values other than 1, as a viewer turns the stored pixels to show them.
EXIF_ORIENTATIONS = {2: "mirrored", 3: "turned 180 degrees", 4: "flipped upside down", 5: "mirrored and turned",
                     6: "turned 90 degrees clockwise", 7: "mirrored and turned", 8: "turned 90 degrees anticlockwise"}


def exif_orientation_note(data: bytes) -> str | None:
    """What a JPEG's EXIF Orientation tag asks of a viewer, when it asks anything ("6, turned 90 degrees
    clockwise"); None without the tag, at 1, or for bytes PIL cannot open. Every door of this port, as the
    original's TensorFlow decoder, takes the pixels as stored and ignores the tag."""
    try:
        with opened(data) as image:  # (PIL's decompression-bomb warning, which names no file, stays off)
            value = image.getexif().get(0x0112) if image.format in ("JPEG", "MPO") else None
    except Exception:  # noqa: BLE001 - the decoders report unreadable bytes; this is only a note
        return None
    return "{}, {}".format(value, EXIF_ORIENTATIONS[value]) if value in EXIF_ORIENTATIONS else None


def png_for_model(data: bytes) -> bytes:
    """PNG bytes as TensorFlow's decoder should see them: unchanged, unless the image has transparency or 16-bit
    greyscale, where TensorFlow would read other pixels than as_rgb: then its as_rgb form, re-encoded losslessly
    as PNG. Bytes PIL cannot open, or whose 16-bit samples TensorFlow cannot decode, are returned as they are (the
    decoder reports them)."""
    try:
        with opened(data) as image:  # (the caller refused a too large image; PIL's warning names no file)
            if not (has_alpha(image) or is_sixteen_bit_grey(image)):
                return data
            image.load()
            try:
                rgb = as_rgb(image, data)
            except ValueError:  # TensorFlow's decoder, which failed on these bytes here, names the reason
                return data
            out = io.BytesIO()
            rgb.save(out, format="PNG")
            return out.getvalue()
    except Exception:  # noqa: BLE001 - whatever PIL fails on, TensorFlow's decoder names it
        return data
