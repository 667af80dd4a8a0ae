"""Image shapes: parsing, validation against the configured bounds, and the ~1 MP presets.

A shape is written WIDTHxHEIGHT everywhere a person types or reads one (``--size 768x1344``,
``--prewarm``, PNG infotext), like other diffusion UIs.
"""

from __future__ import annotations

import dataclasses

from backend.errors import InvalidRequest

MULTIPLE = 16  # the VAE's 8x downsampling times the 2x2 latent patches
PIXELS_PER_TOKEN = MULTIPLE * MULTIPLE


@dataclasses.dataclass(frozen=True, order=True)
class Shape:
    height: int
    width: int

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"

    @property
    def pixels(self) -> int:
        return self.height * self.width

    @property
    def tokens(self) -> int:
        """Image tokens the transformer sees; compiled graphs are keyed by this, not by (h, w)."""
        return (self.height // MULTIPLE) * (self.width // MULTIPLE)


# Usual aspect ratios at about one megapixel, all multiples of 16.
PRESETS: tuple[tuple[str, Shape], ...] = (
    ("1:1", Shape(1024, 1024)),
    ("4:3", Shape(896, 1152)),
    ("3:4", Shape(1152, 896)),
    ("3:2", Shape(832, 1216)),
    ("2:3", Shape(1216, 832)),
    ("16:9", Shape(768, 1344)),
    ("9:16", Shape(1344, 768)),
    ("21:9", Shape(640, 1536)),
    ("9:21", Shape(1536, 640)),
)

# The trained embedded model learnt at 64..256 px (larger sizes are extrapolation), so the page
# starts it at 256x256 instead of the first preset.
EMBEDDED_START = Shape(256, 256)


def parse_shape(text: str) -> Shape:
    """Parse 'WIDTHxHEIGHT' (e.g. '768x1344'). Raises ValueError with the expected form."""
    parts = text.strip().lower().replace("×", "x").split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"expected WIDTHxHEIGHT such as 1024x1024, got {text!r}")
    width, height = (int(p) for p in parts)
    return Shape(height=height, width=width)


def parse_shape_list(text: str) -> list[Shape]:
    """Parse '1024x1024,768x1344' into shapes (empty text gives an empty list)."""
    return [parse_shape(part) for part in text.split(",") if part.strip()]


def _nearest(value: int, lo: int, hi: int) -> int:
    # halves round up (1000 -> 1008), so the suggestion never depends on banker's rounding
    return min(max((value + MULTIPLE // 2) // MULTIPLE * MULTIPLE, lo), hi)


def _as_int(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidRequest(field, f"must be a whole number of pixels, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise InvalidRequest(field, f"must be a whole number of pixels, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")) or number != int(number):
        raise InvalidRequest(field, f"must be a whole number of pixels, got {value!r}")
    return int(number)


def validate_shape(height: object, width: object, min_size: int, max_size: int) -> Shape:
    """Return the Shape, or raise InvalidRequest naming the nearest valid shape."""
    h = _as_int("height", height)
    w = _as_int("width", width)
    problems = []
    for field, v in (("width", w), ("height", h)):
        if v < min_size or v > max_size:
            problems.append(f"{field} {v} is outside {min_size}..{max_size}")
        elif v % MULTIPLE:
            problems.append(f"{field} {v} is not a multiple of {MULTIPLE}")
    if problems:
        nearest = Shape(_nearest(h, min_size, max_size), _nearest(w, min_size, max_size))
        field = "size"
        raise InvalidRequest(field, f"{'; '.join(problems)}; nearest valid size is {nearest}")
    return Shape(height=h, width=w)
