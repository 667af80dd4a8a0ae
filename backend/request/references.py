"""Reference images for FLUX.2-klein's editing: read bounded, fitted to a reference size, kept whole.

``Flux2KleinPipeline(image=[...])`` appends each reference's latent tokens at its own size, so every
new reference size is a new sequence length: on Trainium, a new compile. So each reference is fitted
to the nearest-aspect of a few **reference sizes** (the model's presets unless ``--reference-sizes``),
by cropping (default) or padding (``--reference-fit pad``).

A file is hostile until bounded: its bytes are counted before it is opened, its header is read
before a pixel is decoded, the request's cheap checks run on the header sizes
(``planned_references``) before any decode, and only single-frame PNG, JPEG and WebP within
``MAX_SOURCE_PIXELS`` are decoded at all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import math
from pathlib import Path
from typing import Any, Sequence

from PIL import Image, UnidentifiedImageError

from backend.errors import InvalidRequest
from backend.shapes import MAX_COUNT, Shape, parse_shape, whole_number

FIELD = "images"
MAX_REFERENCE_BYTES = 20 * 2**20  # the page's upload cap (Gradio's max_file_size, the app's MAX_UPLOAD)
MAX_SOURCE_PIXELS = 4096 * 4096  # decoded at most: 48 MiB of RGB, before fitting
FORMATS = ("PNG", "JPEG", "WEBP")  # single images; GIF is refused (counting its frames decodes them)
FITS = ("crop", "pad")


@dataclasses.dataclass(frozen=True)
class Reference:
    """One reference, fitted: the pipeline's pixels (``rgb``) and what the record keeps."""

    sha256: str
    source_width: int
    source_height: int
    width: int
    height: int
    fit: str  # crop | pad | as is
    rgb: bytes = dataclasses.field(repr=False, compare=False)

    @property
    def size(self) -> tuple[int, int]:
        return self.height, self.width

    def describe(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "source": f"{self.source_width}x{self.source_height}",
                "fitted": f"{self.width}x{self.height}", "fit": self.fit}

    def image(self):
        return Image.frombytes("RGB", (self.width, self.height), self.rgb)


def nearest_size(width: int, height: int, sizes: Sequence[Shape]) -> Shape:
    """The reference size nearest in aspect ratio (log scale), then in area."""
    aspect = math.log(width / height)
    return min(sizes, key=lambda s: (round(abs(math.log(s.width / s.height) - aspect), 6),
                                     abs(s.pixels - width * height), s.pixels))


def _open(source, which: str):
    """The image in ``source`` with only its header read, checked."""
    try:
        image = Image.open(source)  # reads the header only
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise InvalidRequest(FIELD, f"{which} is not an image (PNG, JPEG or WebP): "
                                    f"{type(error).__name__}") from None
    except Image.DecompressionBombError:
        raise InvalidRequest(FIELD, f"{which} announces more pixels than an image may have") from None
    if image.format not in FORMATS:
        raise InvalidRequest(FIELD, f"{which} is {image.format or 'an unknown format'}; references are PNG, "
                                    "JPEG or WebP")
    width, height = image.size
    if width * height > MAX_SOURCE_PIXELS:
        raise InvalidRequest(FIELD, f"{which} is {width}x{height} ({width * height / 1e6:.1f} megapixels); the "
                                    f"limit is {MAX_SOURCE_PIXELS / 1e6:.1f} megapixels")
    if getattr(image, "is_animated", False) or getattr(image, "n_frames", 1) != 1:
        raise InvalidRequest(FIELD, f"{which} is an animation; a reference is one still image")
    return image


def _decode(image, which: str):
    try:
        image.load()  # within MAX_SOURCE_PIXELS (checked from the header), far below PIL's own bomb bound
    except (OSError, ValueError, Image.DecompressionBombError, SyntaxError) as error:
        raise InvalidRequest(FIELD, f"{which} could not be decoded ({type(error).__name__}: "
                                    f"{' '.join(str(error).split())[:120]})") from None
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        flat = Image.new("RGB", image.size, "white")
        flat.paste(image.convert("RGBA"), mask=image.convert("RGBA").getchannel("A"))
        return flat
    return image.convert("RGB")


def fit_image(image, size: Shape, fit: str):
    width, height = image.size
    if (width, height) == (size.width, size.height):
        return image
    if fit == "pad":
        scale = min(size.width / width, size.height / height)
        inner = image.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.LANCZOS)
        canvas = Image.new("RGB", (size.width, size.height), "white")
        canvas.paste(inner, ((size.width - inner.width) // 2, (size.height - inner.height) // 2))
        return canvas
    scale = max(size.width / width, size.height / height)
    cover = image.resize((max(size.width, round(width * scale)), max(size.height, round(height * scale))),
                         Image.LANCZOS)
    left, top = (cover.width - size.width) // 2, (cover.height - size.height) // 2
    return cover.crop((left, top, left + size.width, top + size.height))


def read_bytes(item: Any, which: str, limit: int = MAX_REFERENCE_BYTES) -> bytes:
    """The bytes of one reference as a caller gives it (``_source``). At most ``limit`` bytes are read."""
    with _source(item, which, limit) as source:
        try:
            data = source.read(limit + 1)
        except OSError as error:
            raise InvalidRequest(FIELD, f"{which} could not be read ({type(error).__name__})") from None
    if len(data) > limit:
        raise InvalidRequest(FIELD, f"{which} is over {limit / 2**20:.0f} MB; the limit is {limit / 2**20:.0f} MB")
    return data


def load_references(items: Sequence[Any] | None, sizes: Sequence[Shape], fit: str = "crop",
                    max_references: int = 4, pixels: bool = True) -> tuple[Reference, ...]:
    """Each reference read, checked and fitted (``sizes``: the reference sizes), or InvalidRequest
    naming "images" and which one. ``pixels=False``: see ``planned_references``."""
    if items and all(isinstance(item, Reference) for item in items):
        return tuple(items)  # already read and fitted (a request validated again)
    items = reference_files(items)
    if len(items) > max_references:
        raise InvalidRequest(FIELD, f"{len(items)} reference images; at most {max_references} per request")
    if fit not in FITS:
        raise InvalidRequest("reference fit", f"must be one of {', '.join(FITS)}, got {fit!r}")
    references = []
    for number, item in enumerate(items, 1):
        which = f"reference {number}"
        if pixels:
            data = read_bytes(item, which)
            image = _decode(_open(io.BytesIO(data), which), which)
        else:
            with _source(item, which) as source:
                image = _open(source, which)  # its header only: the size
        size = nearest_size(*image.size, sizes)
        references.append(Reference(hashlib.sha256(data).hexdigest() if pixels else "", image.width, image.height,
                                    size.width, size.height,
                                    "as is" if image.size == (size.width, size.height) else fit,
                                    fit_image(image, size, fit).tobytes() if pixels else b""))
    return tuple(references)


def planned_references(items: Sequence[Any] | None, sizes: Sequence[Shape], fit: str = "crop",
                       max_references: int = 4) -> tuple[Reference, ...]:
    """What ``load_references`` would make of ``items``, from their headers alone: each reference's
    source size and the size it will be fitted to, no pixels. The cheap checks (the signature, the
    work bound, the sequence budget) run on these before a single pixel is decoded."""
    return load_references(items, sizes, fit, max_references, pixels=False)


def check_count(value: Any) -> int:
    count = 1 if value in (None, "") else whole_number("count", value)
    if not 1 <= count <= MAX_COUNT:
        raise InvalidRequest("count", f"must be between 1 and {MAX_COUNT} images per prompt, got {count}",
                             (("between", {"low": 1, "high": MAX_COUNT, "got": count}),))
    return count


# The worker wire (backend.launch.calls, backend.workers.job_loop): a job carries each reference
# described (``describe``) and where its fitted pixels lie in the group's shared pixel buffer; rank
# 0 reads them there, checks their SHA-256, and broadcasts them whole to every rank.
MAX_REFERENCE_RGB = 1024 * 1024 * 3  # a reference size is at most 1024x1024 pixels (the pipeline's cap)


def pixel_layout(references: Sequence[Reference]) -> list[dict[str, Any]]:
    """Where each reference's RGB goes in the pixel buffer, and its SHA-256."""
    offsets = itertools.accumulate((len(reference.rgb) for reference in references), initial=0)
    return [{"offset": offset, "bytes": len(reference.rgb), "sha256": hashlib.sha256(reference.rgb).hexdigest()}
            for offset, reference in zip(offsets, references)]


def _size(text: Any) -> tuple[int, int]:
    try:
        shape = parse_shape(str(text))
    except ValueError:
        raise InvalidRequest(FIELD, f"a reference's size must be WIDTHxHEIGHT, got {str(text)[:20]!r}") from None
    return shape.width, shape.height


def expected_rgb_bytes(described: Any) -> int:
    """The RGB bytes of a described reference (InvalidRequest past ``MAX_REFERENCE_RGB``)."""
    if not isinstance(described, dict):
        raise InvalidRequest(FIELD, "a reference must be described by its fields")
    width, height = _size(described.get("fitted"))
    if not 0 < width * height * 3 <= MAX_REFERENCE_RGB:
        raise InvalidRequest(FIELD, f"a reference of {width}x{height} is past 1024x1024 pixels")
    return width * height * 3


def from_job(described: Sequence[Any], rgbs: Sequence[bytes]) -> tuple[Reference, ...]:
    """The references a job describes, with their pixels (checked: sizes and lengths agree)."""
    if len(described) != len(rgbs):
        raise InvalidRequest(FIELD, f"{len(described)} references described, {len(rgbs)} sent")
    out = []
    for item, rgb in zip(described, rgbs):
        if expected_rgb_bytes(item) != len(rgb):
            raise InvalidRequest(FIELD, "a reference's pixels do not match its size")
        width, height = _size(item["fitted"])
        source_width, source_height = _size(item.get("source"))
        out.append(Reference(str(item.get("sha256", ""))[:64], source_width, source_height, width, height,
                             str(item.get("fit", ""))[:8], bytes(rgb)))
    return tuple(out)


def blank_references(shape: Shape, pixels: bool = True) -> tuple[Reference, ...]:
    """Grey references at a signature's reference sizes: what a warm-up runs with (a compile
    depends on their sizes, not on what they show). ``pixels=False``: their sizes alone, for a
    prediction that runs nothing (no megabytes made and hashed per badge, every second)."""
    out = []
    for height, width in shape.refs:
        rgb = bytes([128]) * (width * height * 3) if pixels else b""
        out.append(Reference(hashlib.sha256(rgb).hexdigest() if pixels else "", width, height, width, height,
                             "as is", rgb))
    return tuple(out)


def reference_files(items: Any) -> list[Any]:
    """The files of an Edit area's value: a Gallery's (path, caption) pairs, Gradio file data,
    paths; empties dropped. Anything else is passed on for ``load_references`` to refuse."""
    out = []
    for item in items or []:
        if isinstance(item, (tuple, list)) and item:
            item = item[0]
        if isinstance(item, dict) and "path" in item:
            item = item["path"]
        if isinstance(item, dict) and isinstance(item.get("image"), dict):  # a Gallery's JSON form
            item = item["image"].get("path")
        if item not in (None, ""):
            out.append(item)
    return out


def _source(item: Any, which: str, limit: int = MAX_REFERENCE_BYTES):
    """A binary file object for one reference as a caller gives it: bytes, a path (the page's and the
    API's uploads), or a dict with a ``path`` (Gradio's FileData). A path's file is opened after its
    size is checked against ``limit`` (the cost line reads headers every second: no file is read whole)."""
    path = item.get("path") if isinstance(item, dict) else item
    if isinstance(path, (bytes, bytearray)):
        return io.BytesIO(bytes(path))
    if not isinstance(path, (str, Path)) or not str(path):
        raise InvalidRequest(FIELD, f"{which} must be an image file, got {type(path).__name__}")
    try:
        if not Path(path).is_file():
            raise InvalidRequest(FIELD, f"{which} is not a file")
        if Path(path).stat().st_size > limit:
            raise InvalidRequest(FIELD, f"{which} is over {limit / 2**20:.0f} MB; the limit is "
                                        f"{limit / 2**20:.0f} MB")
        return open(path, "rb")
    except OSError as error:
        raise InvalidRequest(FIELD, f"{which} could not be read ({type(error).__name__})") from None
