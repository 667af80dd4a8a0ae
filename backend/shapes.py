"""Image shapes: parsing, validation against the configured bounds, and the ~1 MP presets (the
real model's; a model folder may declare its own: ``backend.models.card``).

A shape is written WIDTHxHEIGHT everywhere a person types or reads one (``--size 768x1344``,
``--prewarm``, PNG infotext), like other diffusion UIs.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator

from backend.errors import InvalidRequest

MULTIPLE = 16  # the VAE's 8x downsampling times the 2x2 latent patches


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


def parse_shape(text: str) -> Shape:
    """Parse 'WIDTHxHEIGHT' (e.g. '768x1344'). Raises ValueError with the expected form."""
    parts = [p.strip() for p in text.strip().lower().replace("×", "x").split("x")]
    if len(parts) != 2 or not all(p and len(p) <= 6 and _ASCII_DIGITS.issuperset(p) for p in parts):
        raise ValueError(f"expected WIDTHxHEIGHT such as 1024x1024, got {show_value(text)}")
    width, height = (int(p) for p in parts)
    return Shape(height=height, width=width)


def parse_shape_list(text: str) -> list[Shape]:
    """Parse '1024x1024,768x1344' into shapes (empty text gives an empty list)."""
    return [parse_shape(part) for part in text.split(",") if part.strip()]


def _nearest(value: int, lo: int, hi: int) -> int:
    # halves round up (1000 -> 1008), so the suggestion never depends on banker's rounding
    return min(max((value + MULTIPLE // 2) // MULTIPLE * MULTIPLE, lo), hi)


MAX_DIGITS = 24  # longer digit strings are refused before int() sees them (far past any bound)
_ASCII_DIGITS = frozenset("0123456789")


def show_value(value: object, limit: int = 40) -> str:
    """``value`` for an error message: short whatever it is (a 5000-digit number, a 10**400 int, a
    megabyte of text), never raising (an int over 4300 digits cannot even be printed)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > 14_000:  # past the 4300 digits str() converts
            return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
        text = str(value)
        return text if len(text) <= limit else f"a number of {len(text.lstrip('-'))} digits"
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[:limit] + "…" + size


def whole_number(field: str, value: object, what: str = "a whole number", allow_point: bool = False) -> int:
    """A whole number from an int, an integral finite float or text of ASCII digits (an optional
    leading '-'; with ``allow_point`` a trailing '.0'), or InvalidRequest naming ``field``. Text of
    other digits ('²', Arabic-Indic), signs ('--4', '+4'), underscores or exponents is refused, and
    so is text of more than ``MAX_DIGITS`` digits (before int() would reject or choke on it)."""
    if isinstance(value, bool):
        raise InvalidRequest(field, f"must be {what}, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text.startswith("-") else text
        if allow_point and "." in digits:
            digits, _, zeros = digits.partition(".")
            if zeros.strip("0"):
                raise InvalidRequest(field, f"must be {what}, got {show_value(value)}")
        if not digits or not _ASCII_DIGITS.issuperset(digits):
            raise InvalidRequest(field, f"must be {what} (digits 0-9), got {show_value(value)}")
        if len(digits) > MAX_DIGITS:
            raise InvalidRequest(field, f"must be {what} of at most {MAX_DIGITS} digits, got {len(digits)} digits")
        return -int(digits) if text.startswith("-") else int(digits)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise InvalidRequest(field, f"must be {what}, got {value!r}")
        return int(value)
    try:
        return operator.index(value)  # int, numpy integers
    except TypeError:
        pass
    if isinstance(value, numbers.Real):  # numpy floats
        return whole_number(field, float(value), what)
    raise InvalidRequest(field, f"must be {what}, got {show_value(value)}")


def _as_int(field: str, value: object) -> int:
    if value is None:
        raise InvalidRequest(field, "must be a whole number of pixels, got None")
    return whole_number(field, value, "a whole number of pixels", allow_point=True)


def validate_shape(height: object, width: object, min_size: int, max_size: int) -> Shape:
    """Return the Shape, or raise InvalidRequest naming the nearest valid shape."""
    h = _as_int("height", height)
    w = _as_int("width", width)
    problems = []
    for field, v in (("width", w), ("height", h)):
        if v < min_size or v > max_size:
            shown = v if abs(v) < 10**9 else f"({show_value(v)})"
            problems.append(f"{field} {shown} is outside {min_size}..{max_size}")
        elif v % MULTIPLE:
            problems.append(f"{field} {v} is not a multiple of {MULTIPLE}")
    if problems:
        nearest = Shape(_nearest(h, min_size, max_size), _nearest(w, min_size, max_size))
        field = "size"
        raise InvalidRequest(field, f"{'; '.join(problems)}; nearest valid size is {nearest}")
    return Shape(height=h, width=w)
