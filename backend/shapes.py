"""Image shapes: parsing, validation against the configured bounds, and the ~1 MP presets (the
real model's; a model folder may declare its own: ``backend.models.card``).

A shape is written WIDTHxHEIGHT everywhere a person types or reads one (``--size 768x1344``,
``--prewarm``, PNG infotext), like other diffusion UIs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import numbers
import operator
import re
from typing import Iterable

from backend.errors import InvalidRequest

MULTIPLE = 16  # the VAE's 8x downsampling times the 2x2 latent patches
MAX_COUNT = 4  # images per prompt (one batch)


@dataclasses.dataclass(frozen=True, order=True)
class Shape:
    """A static signature: what one compiled pipeline is for. The output's height and width, and
    for an edit or a batch also ``count`` (images per prompt: the batch) and ``refs`` (each
    reference image's (height, width) after fitting, sorted: their order changes no tensor's
    shape). A plain text-to-image shape is ``Shape(height, width)``; its spelling is unchanged."""

    height: int
    width: int
    count: int = 1
    refs: tuple[tuple[int, int], ...] = ()

    def __str__(self) -> str:
        text = f"{self.width}x{self.height}" + (f"*{self.count}" if self.count != 1 else "")
        for (height, width), same in itertools.groupby(self.refs):  # equal neighbours: the spelling's xN
            repeat = len(list(same))
            text += f"+ref{width}x{height}" + (f"x{repeat}" if repeat > 1 else "")
        return text

    @property
    def plain(self) -> bool:
        return self.count == 1 and not self.refs

    @property
    def pixels(self) -> int:
        return self.height * self.width

    @property
    def tokens(self) -> int:
        """Tokens in the transformer's image sequence (the output's and every reference's):
        compiled graphs are keyed by this and the batch, not by (h, w)."""
        return sum((h // MULTIPLE) * (w // MULTIPLE) for h, w in ((self.height, self.width), *self.refs))

    @property
    def graph_key(self) -> tuple[int, int]:
        """What the transformer's graph depends on: (batch, sequence tokens)."""
        return self.count, self.tokens

    @property
    def work_pixels(self) -> int:
        """Pixels the transformer works on per step: the output's and the references', per image."""
        return (self.pixels + sum(h * w for h, w in self.refs)) * self.count

    def with_inputs(self, count: int = 1, refs: "Iterable[tuple[int, int]]" = ()) -> "Shape":
        return Shape(self.height, self.width, count, tuple(sorted(refs)))


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
# On Neuron: sizes whose whole sequence (the 512 text tokens and the image's) is a multiple of 512, so
# every attention of the transformer takes TorchNeuron's NKI flash kernel (backend.hardware.kernels);
# the nearest such sizes to the usual ratios, about 0.8 to 1.8 megapixels. Their ratios are exact.
NEURON_PRESETS: tuple[tuple[str, Shape], ...] = (
    ("1:1", Shape(1024, 1024)),
    ("4:3", Shape(768, 1024)),
    ("3:4", Shape(1024, 768)),
    ("3:2", Shape(1024, 1536)),
    ("2:3", Shape(1536, 1024)),
    ("7:4", Shape(1024, 1792)),
    ("4:7", Shape(1792, 1024)),
    ("2:1", Shape(768, 1536)),
    ("1:2", Shape(1536, 768)),
)


def parse_shape(text: str) -> Shape:
    """Parse 'WIDTHxHEIGHT' (e.g. '768x1344'). Raises ValueError with the expected form."""
    parts = [p.strip() for p in text.strip().lower().replace("×", "x").split("x")]
    if len(parts) != 2 or not all(p and len(p) <= 6 and _ASCII_DIGITS.issuperset(p) for p in parts):
        raise ValueError(f"expected WIDTHxHEIGHT such as 1024x1024, got {show_value(text)}")
    width, height = (int(p) for p in parts)
    return Shape(height=height, width=width)


MAX_SIGNATURE_REFS = 16  # more references than any setting allows; a longer spelling is refused unread
_REF = re.compile(r"\+ref([0-9]{1,6})x([0-9]{1,6})(?:x([0-9]{1,2}))?")


def parse_signature(text: str) -> Shape:
    """Parse a signature: ``WIDTHxHEIGHT``, then ``*COUNT`` for several images per prompt, then one
    ``+refWIDTHxHEIGHT`` per reference size (``xN`` after it: N references of that size). E.g.
    ``1024x1024``, ``1024x1024*2``, ``1024x1024+ref768x768``, ``1024x1024*2+ref1024x1024x2``.
    Raises ValueError with the expected form."""
    raw = text.strip().lower().replace("×", "x")
    head, plus, rest = raw.partition("+")
    size, star, count_text = head.partition("*")
    form = "WIDTHxHEIGHT[*COUNT][+refWIDTHxHEIGHT[xN]...] such as 1024x1024 or 1024x1024*2+ref768x768x2"
    bad = ValueError(f"expected {form}, got {show_value(text)}")
    if len(raw) > 400:
        raise bad
    try:
        shape = parse_shape(size)
    except ValueError:
        if star or plus:
            raise bad from None
        raise
    count = 1
    if star:
        if not (count_text and len(count_text) <= 2 and _ASCII_DIGITS.issuperset(count_text)) or int(count_text) < 1:
            raise bad
        count = int(count_text)
    refs: list[tuple[int, int]] = []
    tail = plus + rest
    position = 0
    while position < len(tail):
        match = _REF.match(tail, position)
        if not match:
            raise bad
        width, height, repeat = int(match[1]), int(match[2]), int(match[3] or 1)
        if repeat < 1 or len(refs) + repeat > MAX_SIGNATURE_REFS:
            raise ValueError(f"expected {form} with at most {MAX_SIGNATURE_REFS} references, got {show_value(text)}")
        refs += [(height, width)] * repeat
        position = match.end()
    return shape.with_inputs(count, refs)


def parse_shape_list(text: str) -> list[Shape]:
    """Parse '1024x1024,768x1344*2+ref768x768' into signatures (empty text gives an empty list)."""
    return [parse_signature(part) for part in text.split(",") if part.strip()]


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
            raise InvalidRequest(field, f"must be {what}, got {value!r}", (("whole", {"got": repr(value)}),))
        return int(value)
    with contextlib.suppress(TypeError):
        return operator.index(value)  # int, numpy integers
    if isinstance(value, numbers.Real):  # numpy floats
        return whole_number(field, float(value), what)
    raise InvalidRequest(field, f"must be {what}, got {show_value(value)}")


def _as_int(field: str, value: object) -> int:
    if value is None:
        raise InvalidRequest(field, "must be a whole number of pixels, got None")
    return whole_number(field, value, "a whole number of pixels", allow_point=True)


def within_tokens(shape: Shape, tokens: int, min_size: int = MULTIPLE) -> Shape | None:
    """The largest output of about ``shape``'s aspect (sides multiples of 16, at least ``min_size``)
    whose image tokens are at most ``tokens``; None when even the smallest is more."""
    scale = min(1.0, math.sqrt(tokens / shape.tokens)) if shape.tokens else 1.0
    height, width = (max(min_size, int(side * scale) // MULTIPLE * MULTIPLE) for side in (shape.height, shape.width))
    while (height // MULTIPLE) * (width // MULTIPLE) > tokens and max(height, width) > min_size:
        height, width = (max(min_size, side - MULTIPLE) if side == max(height, width) else side
                         for side in (height, width))
    fitted = Shape(height, width)
    return fitted if fitted.tokens <= tokens else None


def validate_shape(height: object, width: object, min_size: int, max_size: int, budget: int | None = None) -> Shape:
    """Return the Shape, or raise InvalidRequest naming the nearest valid shape (one within the
    sequence ``budget`` too, when given: a suggestion is always a size that would run)."""
    h, w = _as_int("height", height), _as_int("width", width)
    problems, why = [], []
    for field, v in (("width", w), ("height", h)):
        if v < min_size or v > max_size:
            shown = v if abs(v) < 10**9 else f"({show_value(v)})"
            problems.append(f"{field} {shown} is outside {min_size}..{max_size}")
            why.append(("outside", {"field": field, "value": shown, "low": min_size, "high": max_size}))
        elif v % MULTIPLE:
            problems.append(f"{field} {v} is not a multiple of {MULTIPLE}")
            why.append(("not_multiple", {"field": field, "value": v, "multiple": MULTIPLE}))
    if problems:
        nearest = Shape(_nearest(h, min_size, max_size), _nearest(w, min_size, max_size))
        if budget is not None and nearest.tokens > budget:
            nearest = within_tokens(nearest, budget, min_size) or nearest
        raise InvalidRequest("size", f"{'; '.join(problems)}; nearest valid size is {nearest}",
                             (*why, ("nearest", {"size": str(nearest)})))
    return Shape(height=h, width=w)
