"""The procedural scene set the embedded model is trained on, and the statistics that judge it.

A scene is one or two flat shapes in named colours, each at a named position, on a background; its
caption comes from a small grammar::

    a red circle on the left, on a sky gradient
    a yellow star at the top and a blue ring at the bottom, on grey stripes
    a white triangle in the centre, on a purple checkerboard

Everything is drawn with numpy from a seed (no downloads), at any size whose sides are multiples of
16. ``agrees(image, caption)`` decides from pixel statistics alone whether an image shows what its
caption says: each named shape colour must be the dominant colour of a non-background region whose
centroid lies in the named part of the image, that region's outline must be the named kind
(``classify_shape``: a ring has a hole, a star fills little of its convex hull, a square most of its
bounding box, a circle less, a triangle half), and most of the image must match the named background.

Held-out combinations: ``is_held_out(colour, shape, background)`` marks a fixed slice of
(colour, shape, background) triples that training never draws (at any position), so the check can
be run on prompts the model has not seen verbatim.
"""

from __future__ import annotations

import dataclasses
import random
import re
import zlib

import numpy as np

# The grammar's words (colours, shapes, places, backgrounds) live in embedded.words, which the page
# can read without numpy or this module.
from embedded.words import (COLOURS, FLAT_BACKGROUNDS, GRADIENTS, GREY, PATTERN_COLOURS, POSITION_PAIRS,  # isort: skip
                            POSITIONS, SHAPES)

SIZES = ((64, 64), (96, 96), (128, 128), (128, 96), (96, 128), (192, 192), (256, 256), (256, 128),
         (128, 256), (192, 128), (128, 192), (160, 160), (224, 288), (208, 304), (192, 336), (160, 384),
         (384, 160))
MIN_COLOUR_DISTANCE = 130.0  # a shape colour must be this far (RGB) from every background colour
# Shape radius as a fraction of the image's shorter side: one shape, two shapes (which must not meet).
# Big enough that a shape spans ~3 latent tokens (16 px each) at 128 px.
SHAPE_RADIUS = (0.2, 0.14)


# Stripes and checkerboards have a fixed scale, like a texture: a cell is 16*pi ~ 50 px wide, so a
# pattern repeats every 2*pi latent tokens (16 px each), the period of the highest frequency (1 rad
# per token) of the transformer's rotary position embedding; the model can draw it in phase at any
# image size. (Cells of one token would need a frequency of pi per token, which RoPE does not have.)
PATTERN_CELL = 16 * np.pi


def _rgb(name: str) -> tuple[int, int, int]:
    return GREY if name == "grey" else COLOURS[name]


def _cell_parity(pixels: int) -> np.ndarray:
    """0/1 per pixel along one side: which pattern cell (of PATTERN_CELL px) its centre falls in."""
    return (np.floor((np.arange(pixels) + 0.5) / PATTERN_CELL) % 2).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Background:
    kind: str  # "flat" | "gradient" | "stripes" | "checkerboard"
    name: str  # a colour name, or a gradient name

    @property
    def phrase(self) -> str:
        return {"flat": f"a {self.name} background", "gradient": f"a {self.name} gradient",
                "stripes": f"{self.name} stripes", "checkerboard": f"a {self.name} checkerboard"}[self.kind]

    def colours(self) -> list[tuple[int, int, int]]:
        """Every colour this background contains (the gradient's two ends and its middle)."""
        if self.kind == "flat":
            return [_rgb(self.name)]
        if self.kind == "gradient":
            top, bottom = GRADIENTS[self.name]
            mid = tuple((a + b) // 2 for a, b in zip(top, bottom))
            return [top, mid, bottom]
        return [_rgb(self.name), COLOURS["white"]]

    def render(self, height: int, width: int) -> np.ndarray:
        """float32 (H, W, 3) in 0..255. Patterns have a fixed phase so a caption fixes the background."""
        if self.kind == "flat":
            return np.broadcast_to(np.array(_rgb(self.name), np.float32), (height, width, 3)).copy()
        if self.kind == "gradient":
            return self.expected(height, width)
        a, b = np.array(_rgb(self.name), np.float32), np.array(COLOURS["white"], np.float32)
        xs = _cell_parity(width)
        if self.kind == "stripes":
            mask = np.broadcast_to(xs[None, :], (height, width))
        else:
            ys = _cell_parity(height)
            mask = (ys[:, None] + xs[None, :]) % 2
        return np.where(mask[..., None] == 0, a, b).astype(np.float32)

    def expected(self, height: int, width: int) -> np.ndarray:
        """Per-pixel background colour candidates, (H, W, 3) for one-colour rows (gradients, flat)."""
        if self.kind == "gradient":
            top, bottom = (np.array(c, np.float32) for c in GRADIENTS[self.name])
            t = (np.arange(height, dtype=np.float32) + 0.5)[:, None, None] / height
            return np.broadcast_to(top * (1 - t) + bottom * t, (height, width, 3)).copy()
        return self.render(height, width)


def all_backgrounds() -> list[Background]:
    return ([Background("flat", c) for c in FLAT_BACKGROUNDS]
            + [Background("gradient", g) for g in GRADIENTS]
            + [Background("stripes", c) for c in PATTERN_COLOURS]
            + [Background("checkerboard", c) for c in PATTERN_COLOURS])


def _grammar_words() -> tuple[str, ...]:
    """Every word a caption can contain, read off the phrases the captions are made of."""
    phrases = ([ShapeSpec(c, sh, p).phrase for c in COLOURS for sh in SHAPES for p in POSITIONS]
               + [b.phrase for b in all_backgrounds()] + ["and", "on"])
    return tuple(dict.fromkeys(word for phrase in phrases for word in phrase.split()))


def colour_fits(colour: str, background: Background) -> bool:
    rgb = np.array(COLOURS[colour], np.float32)
    return all(np.linalg.norm(rgb - np.array(c, np.float32)) >= MIN_COLOUR_DISTANCE
               for c in background.colours())


@dataclasses.dataclass(frozen=True)
class ShapeSpec:
    colour: str
    shape: str
    position: str

    @property
    def noun(self) -> str:
        """``an orange circle``: the phrase without its place."""
        return f"{'an' if self.colour[0] in 'aeiou' else 'a'} {self.colour} {self.shape}"

    @property
    def phrase(self) -> str:
        return f"{self.noun} {POSITIONS[self.position][0]}"


@dataclasses.dataclass(frozen=True)
class Scene:
    shapes: tuple[ShapeSpec, ...]
    background: Background

    @property
    def caption(self) -> str:
        return " and ".join(s.phrase for s in self.shapes) + ", on " + self.background.phrase


# Every word the grammar uses (the trained model's tokenizer holds each as one token).
WORDS: tuple[str, ...] = _grammar_words()


def is_held_out(colour: str, shape: str, background: Background) -> bool:
    """A fixed ~1/6 of (colour, shape, background) triples never appears in training."""
    return zlib.crc32(f"{colour}|{shape}|{background.kind}|{background.name}".encode()) % 6 == 0


# --- parsing -----------------------------------------------------------------------------------

_COLOUR = "|".join(COLOURS)
_SHAPE = "|".join(SHAPES)
_POS = "|".join(re.escape(p) for p, _ in POSITIONS.values())
_SHAPE_RE = re.compile(rf"an? ({_COLOUR}) ({_SHAPE}) ({_POS})")
_BG_RE = re.compile(r"(?:an? )?(\w+) (background|gradient|stripes|checkerboard)")


def parse_caption(caption: str) -> Scene:
    """Caption -> Scene; ValueError naming the part that does not follow the grammar."""
    text = caption.strip().lower()
    if ", on " not in text:
        raise ValueError(f"caption {caption!r}: expected '<shapes>, on <background>'")
    head, bg_text = text.rsplit(", on ", 1)
    shapes = []
    for part in head.split(" and "):
        m = _SHAPE_RE.fullmatch(part.strip())
        if not m:
            raise ValueError(f"caption {caption!r}: cannot read the shape {part.strip()!r}")
        position = next(k for k, (p, _) in POSITIONS.items() if p == m.group(3))
        shapes.append(ShapeSpec(m.group(1), m.group(2), position))
    m = _BG_RE.fullmatch(bg_text.strip())
    if not m:
        raise ValueError(f"caption {caption!r}: cannot read the background {bg_text!r}")
    name, word = m.groups()
    kind = {"background": "flat", "gradient": "gradient", "stripes": "stripes",
            "checkerboard": "checkerboard"}[word]
    known = GRADIENTS if kind == "gradient" else (FLAT_BACKGROUNDS if kind == "flat" else PATTERN_COLOURS)
    if name not in known:
        raise ValueError(f"caption {caption!r}: unknown {word} {name!r}")
    return Scene(tuple(shapes), Background(kind, name))


# --- sampling and rendering ------------------------------------------------------------------------

def sample_scene(rng: random.Random, held_out: bool | None = False, two_shapes: float = 0.3) -> Scene:
    """A random scene. held_out=False draws only training combinations, True only held-out ones
    (every shape's triple held out), None either."""
    backgrounds = all_backgrounds()
    while True:
        bg = rng.choice(backgrounds)
        if rng.random() < two_shapes:
            positions = rng.choice(POSITION_PAIRS)
            if rng.random() < 0.5:
                positions = positions[::-1]
        else:
            positions = (rng.choice(list(POSITIONS)),)
        specs, used = [], set()
        for pos in positions:
            colour = rng.choice([c for c in COLOURS if c not in used and colour_fits(c, bg)])
            used.add(colour)
            specs.append(ShapeSpec(colour, rng.choice(SHAPES), pos))
        flags = [is_held_out(s.colour, s.shape, bg) for s in specs]
        if held_out is None or (held_out and all(flags)) or (not held_out and not any(flags)):
            return Scene(tuple(specs), bg)


def _shape_mask(shape: str, height: int, width: int, cx: float, cy: float, r: float) -> np.ndarray:
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
    dx, dy = xs - cx, ys - cy
    if shape == "circle":
        return dx * dx + dy * dy <= r * r
    if shape == "ring":
        d2 = dx * dx + dy * dy
        return (d2 <= r * r) & (d2 >= (0.55 * r) ** 2)
    if shape == "square":
        s = 0.85 * r
        return (np.abs(dx) <= s) & (np.abs(dy) <= s)
    if shape == "triangle":  # apex up
        t = (dy + r * 0.8) / (1.7 * r)  # 0 at the apex, 1 at the base
        return (t >= 0) & (t <= 1) & (np.abs(dx) <= t * r)
    if shape == "star":  # five points, apex up
        ang = np.arctan2(dx, -dy)
        rad = np.sqrt(dx * dx + dy * dy)
        k = np.cos(5 * ang)  # 1 at the points
        return rad <= r * (0.5 + 0.5 * (k + 1) / 2)
    raise ValueError(f"unknown shape {shape!r}")


@dataclasses.dataclass(frozen=True)
class Placed:
    """A shape where a render put it: centre (x, y) and radius as fractions of the width, the height and
    the shorter side (an edit keeps a reference's shapes exactly where they were)."""

    spec: ShapeSpec
    x: float
    y: float
    radius: float


def place(scene: Scene, rng: random.Random | None = None) -> list[Placed]:
    """Where ``render`` puts each shape: its named place, jittered a little by ``rng`` (None: exactly)."""
    base_r = SHAPE_RADIUS[len(scene.shapes) > 1]
    out = []
    for spec in scene.shapes:
        fx, fy = POSITIONS[spec.position][1]
        jx = jy = js = 0.0
        if rng is not None:
            jx, jy, js = rng.uniform(-0.03, 0.03), rng.uniform(-0.03, 0.03), rng.uniform(-0.02, 0.02)
        out.append(Placed(spec, fx + jx, fy + jy, base_r + js))
    return out


def shape_side(height: int, width: int, rule: str | int = "shorter") -> float:
    """The length a shape's radius is a share of: the canvas's shorter side (``"shorter"``, as the
    embedded model's first phases drew), the side of a square of the canvas's area (``"area"``: a
    shape has one size in pixels at every aspect ratio of one image size), or a number of pixels."""
    if isinstance(rule, int) and not isinstance(rule, bool) and rule > 0:
        return float(rule)
    if rule == "shorter":
        return float(min(height, width))
    if rule == "area":
        return float((height * width) ** 0.5)
    raise ValueError(f"unknown shape size rule {rule!r}")


def draw(background: Background, shapes: list[Placed], height: int, width: int,
         side: float | None = None) -> np.ndarray:
    """uint8 (H, W, 3): ``shapes`` on ``background``, radii a share of ``side`` (default: the shorter side)."""
    image = background.render(height, width)
    side = shape_side(height, width) if side is None else side
    for p in shapes:
        mask = _shape_mask(p.spec.shape, height, width, p.x * width, p.y * height, p.radius * side)
        image[mask] = COLOURS[p.spec.colour]
    return image.clip(0, 255).astype(np.uint8)


def outline_pixels(shapes: list[Placed], height: int, width: int, side: float | None = None) -> np.ndarray:
    """(H, W) bool: where each shape's kind shows, the pixels another kind at its place and size would
    draw otherwise (a square's corners, a ring's hole, a star's notches): what a training loss weighs
    up so that the outline is learnt, not only the colour and the place."""
    out = np.zeros((height, width), bool)
    side = shape_side(height, width) if side is None else side
    for p in shapes:
        masks = {kind: _shape_mask(kind, height, width, p.x * width, p.y * height, p.radius * side) for kind in SHAPES}
        for mask in masks.values():
            out |= mask ^ masks[p.spec.shape]
    return out


def render(scene: Scene, height: int, width: int, rng: random.Random | None = None) -> np.ndarray:
    """uint8 (H, W, 3). ``rng`` jitters each shape's centre and size a little (None: canonical)."""
    return draw(scene.background, place(scene, rng), height, width)


def scene_seeded(seed: int, height: int, width: int, held_out: bool | None = False) -> tuple[str, np.ndarray]:
    """(caption, uint8 image) drawn deterministically from ``seed``."""
    rng = random.Random(seed)
    scene = sample_scene(rng, held_out=held_out)
    return scene.caption, render(scene, height, width, rng)


# --- evaluation ------------------------------------------------------------------------------------

BACKGROUND_TOLERANCE = 60.0  # RGB distance under which a pixel counts as background
MIN_BACKGROUND_FRACTION = 0.45
MIN_PATTERN_SHARE = 0.15  # each colour of stripes / a checkerboard covers ~half the background
MIN_SHAPE_FRACTION = 0.006  # of the image; a shape of radius 0.14 covers >= 3 % (ring, star less)
# Which colours dominate, where a colour sits and what an edit left (editing) are counted on solid
# pixels: those whose (2r+1)-square neighbourhood is all foreground. Soft edges (a pattern's cell
# edges; a shape's rim, where red on white turns pink) are not shapes, and at 160x384 a
# checkerboard's edges outvoted a shape drawn right, and rims failed VAE-decoded ground truth. A
# shape (radius >= 0.14 of the shorter side, >= 22 px at the smallest preset) keeps its core.
SOLID_RADIUS = 2


def solid(mask: np.ndarray, r: int = SOLID_RADIUS, outside: bool = False) -> np.ndarray:
    """``mask`` eroded by a (2r+1)-square: True where the whole neighbourhood is True (beyond the
    image: ``outside``)."""
    padded = np.pad(mask, r, constant_values=outside)
    out = np.ones_like(mask)
    h, w = mask.shape
    for dy in range(2 * r + 1):
        for dx in range(2 * r + 1):
            out &= padded[dy:dy + h, dx:dx + w]
    return out


def _in_region(position: str, x: float, y: float) -> bool:
    """(x, y) as fractions of width and height. Shapes are drawn at 0.25 / 0.5 / 0.75 +- 0.03."""
    if position == "left":
        return x < 0.4 and 0.3 < y < 0.7
    if position == "right":
        return x > 0.6 and 0.3 < y < 0.7
    if position == "top":
        return y < 0.4 and 0.3 < x < 0.7
    if position == "bottom":
        return y > 0.6 and 0.3 < x < 0.7
    return abs(x - 0.5) < 0.15 and abs(y - 0.5) < 0.15


# --- what a shape's outline is -----------------------------------------------------------------------
# A shape is told from its mask (the region of its colour with the deepest core) by three numbers, each
# far apart between the kinds as ``render`` draws them (``shape_features`` of a canonical render:
# tests/backend/test_scenes.py), and kept through the model's VAE:
#   hole     the largest hole's share of the filled region: a ring 0.30, every other kind 0;
#   solidity the filled region's share of its convex hull: a star 0.72, the others 0.94 to 1;
#   extent   the filled region's share of its bounding box: a square 1.0, a circle 0.79, a triangle 0.51.
# The thresholds sit between them. A round blob is a circle, whatever it was asked to be.
# A shape's mask is its colour's pixels within SHAPE_TOLERANCE of it, not every pixel nearest to it:
# the soft edge between a pattern's two colours can be nearest to a shape's colour (green and white
# blend to a pale green nearer cyan than either) and draw lines that join the shape.
SHAPE_TOLERANCE = 70.0
SHAPE_OPENING = 2  # lines up to 2 * 2 px wide are opened away (``shape_features``)
EDGE_BAND = 6  # px along the image's sides that join no shape (``shape_features``)
# Below this shorter side (px) a shape is too few pixels to tell its outline (a two-shape triangle at
# 64x64 is 9 px high); the model is judged at its presets (160 px and up).
OUTLINE_MIN_SIDE = 128
RING_HOLE = 0.1
STAR_SOLIDITY = 0.85
SQUARE_EXTENT = 0.85
CIRCLE_EXTENT = 0.7


def _shift_min(labels: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each masked pixel's label, lowered to its smallest 4-neighbour's within the mask."""
    out = labels.copy()
    big = np.iinfo(labels.dtype).max
    for axis, step in ((0, 1), (0, -1), (1, 1), (1, -1)):
        moved = np.roll(labels, step, axis=axis)
        edge = [slice(None)] * 2
        edge[axis] = 0 if step == 1 else -1
        moved[tuple(edge)] = big  # no wrap-around
        out = np.where(mask, np.minimum(out, moved), out)
    return out


def components(mask: np.ndarray) -> np.ndarray:
    """4-connected components of ``mask``: (H, W) int labels (a component's smallest flat index), -1 off it.
    Label propagation with pointer jumping: a few dozen whole-array passes, no per-pixel loop."""
    h, w = mask.shape
    big = np.iinfo(np.int64).max
    labels = np.where(mask, np.arange(h * w, dtype=np.int64).reshape(h, w), big)
    while True:
        new = _shift_min(labels, mask)
        flat = new.ravel()
        inside = flat != big
        flat[inside] = flat[flat[inside]]  # jump to the representative's own label
        new = flat.reshape(h, w)
        if np.array_equal(new, labels):
            return np.where(mask, labels, -1)
        labels = new


def _hull_area(mask: np.ndarray) -> float:
    """Area of the convex hull of the mask's pixels (their corners), by Andrew's monotone chain."""
    ys, xs = np.nonzero(mask & ~solid(mask, 1))
    points = sorted({(x + dx, y + dy) for x, y in zip(xs.tolist(), ys.tolist()) for dx in (0, 1) for dy in (0, 1)})
    if len(points) < 3:
        return float(mask.sum())

    def half(pts):
        out: list[tuple[int, int]] = []
        for p in pts:
            while len(out) >= 2 and ((out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                                     - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])) <= 0:
                out.pop()
            out.append(p)
        return out

    hull = half(points)[:-1] + half(points[::-1])[:-1]
    x = np.array([p[0] for p in hull], np.float64)
    y = np.array([p[1] for p in hull], np.float64)
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2)


def shape_features(mask: np.ndarray) -> dict[str, float]:
    """hole, solidity and extent (see above) of the connected region of ``mask`` with the deepest core,
    opened: its solid core (``solid`` by SHAPE_OPENING), grown back within ``mask``. A pattern's soft
    cell edges can have a shape's colour in long lines a few pixels wide; opened away, they neither
    join the shape nor pass for it."""
    ys, xs = np.nonzero(mask)
    if len(ys) == 0:
        return {"hole": 0.0, "solidity": 0.0, "extent": 0.0}
    height, width = mask.shape
    mask = mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1]  # nothing outside matters
    edges = (ys.min(), height - 1 - ys.max(), xs.min(), width - 1 - xs.max())  # to the image's sides
    opened = solid(mask, SHAPE_OPENING)
    # A decoded image's outermost pixels can take any colour (a VAE's padding): a band there must
    # not join a shape that nears the edge.
    top, bottom, left, right = (max(0, EDGE_BAND - e) for e in edges)
    opened[:top], opened[opened.shape[0] - bottom:], opened[:, :left], opened[:, opened.shape[1] - right:] = (
        False, False, False, False)
    labels = components(opened)
    deepest = opened
    while True:  # the shape is the region with the deepest core (a line a few pixels wide has none)
        deeper = solid(deepest, 1)
        if not deeper.any():
            break
        deepest = deeper
    if not deepest.any():
        return {"hole": 0.0, "solidity": 0.0, "extent": 0.0}
    values, counts = np.unique(labels[deepest], return_counts=True)
    region = labels == values[np.argmax(counts)]
    region = ~solid(~region, SHAPE_OPENING, outside=True) & mask  # grown back as far
    ys, xs = np.nonzero(region)
    if len(ys) == 0:
        return {"hole": 0.0, "solidity": 0.0, "extent": 0.0}
    box = np.pad(region[ys.min():ys.max() + 1, xs.min():xs.max() + 1], 1)
    gaps = components(~box)
    outside = gaps == gaps[0, 0]
    holes = ~box & ~outside
    filled = box | holes
    hole = 0.0
    if holes.any():
        _, counts = np.unique(gaps[holes], return_counts=True)
        hole = float(counts.max() / filled.sum())
    area = float(filled.sum())
    return {"hole": round(hole, 3), "solidity": round(area / _hull_area(filled), 3),
            "extent": round(area / float((ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)), 3)}


def classify_shape(features: dict[str, float]) -> str:
    """Which of SHAPES a region with these ``shape_features`` is."""
    if features["hole"] >= RING_HOLE:
        return "ring"
    if features["solidity"] < STAR_SOLIDITY:
        return "star"
    if features["extent"] >= SQUARE_EXTENT:
        return "square"
    return "circle" if features["extent"] >= CIRCLE_EXTENT else "triangle"


@dataclasses.dataclass
class Verdict:
    agrees: bool
    background_fraction: float
    shapes: list[dict]  # per named shape: colour, position, fraction, centroid (x, y), ok; drawn, features
    reason: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def pixel_classes(pixels: np.ndarray, bg: Background) -> tuple[np.ndarray, np.ndarray]:
    """(foreground, nearest): (H, W) bool, the pixels off ``bg`` (farther than BACKGROUND_TOLERANCE
    from what it draws there), and (H, W) int, each pixel's nearest named colour (its index in COLOURS)."""
    height, width = pixels.shape[:2]
    if bg.kind in ("flat", "gradient"):
        bg_dist = np.linalg.norm(pixels - bg.expected(height, width), axis=-1)
    else:
        bg_dist = np.min([np.linalg.norm(pixels - np.array(c, np.float32), axis=-1) for c in bg.colours()], axis=0)
    palette = np.array(list(COLOURS.values()), np.float32)
    return bg_dist >= BACKGROUND_TOLERANCE, np.argmin(np.linalg.norm(pixels[..., None, :] - palette, axis=-1), axis=-1)


def judge(image, caption: str | Scene, shapes: bool = True) -> Verdict:
    """Do the image's statistics agree with the caption? ``image``: uint8 (H, W, 3) array or PIL.
    Each named shape's colour, place and (``shapes``; False: the judge before issue 54) outline, and
    the background; the outline where the shorter side is OUTLINE_MIN_SIDE or more. A shape's entry
    says what it was ``drawn`` as once its colour and place are right."""
    scene = parse_caption(caption) if isinstance(caption, str) else caption
    pixels = np.asarray(image, dtype=np.float32)[..., :3]
    height, width = pixels.shape[:2]
    bg = scene.background
    foreground, nearest = pixel_classes(pixels, bg)
    bg_fraction = float((~foreground).mean())
    names = list(COLOURS)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
    results, reasons = [], []
    if bg_fraction < MIN_BACKGROUND_FRACTION:
        reasons.append(f"background {bg.phrase!r} covers only {bg_fraction:.0%}")
    elif bg.kind in ("stripes", "checkerboard"):  # both pattern colours, not just one of them
        for c in bg.colours():
            share = float((np.linalg.norm(pixels - np.array(c, np.float32), axis=-1) < BACKGROUND_TOLERANCE).mean())
            if share < MIN_PATTERN_SHARE:
                reasons.append(f"{bg.phrase!r} has only {share:.0%} of {c}")
    cores = solid(foreground)
    fg_counts = np.bincount(nearest[cores], minlength=len(names))
    for spec in scene.shapes:
        own = foreground & (nearest == names.index(spec.colour))
        frac, core = float(own.mean()), own & cores
        entry = {"colour": spec.colour, "position": spec.position, "fraction": round(frac, 4),
                 "centroid": None, "ok": False}
        if frac < MIN_SHAPE_FRACTION:
            reasons.append(f"{spec.colour} covers only {frac:.1%}")
        else:
            where = core if core.any() else own
            cx, cy = float(xs[where].mean() / width), float(ys[where].mean() / height)
            entry["centroid"] = (round(cx, 3), round(cy, 3))
            # The named colours must be the dominant foreground colours.
            rank = int((fg_counts > fg_counts[names.index(spec.colour)]).sum())
            if rank >= len(scene.shapes):
                reasons.append(f"{spec.colour} is not a dominant foreground colour")
            elif not _in_region(spec.position, cx, cy):
                reasons.append(f"{spec.colour} sits at ({cx:.2f}, {cy:.2f}), not {POSITIONS[spec.position][0]}")
            elif shapes and min(height, width) >= OUTLINE_MIN_SIDE:
                close = np.linalg.norm(pixels - np.array(COLOURS[spec.colour], np.float32), axis=-1) < SHAPE_TOLERANCE
                features = shape_features(own & close)
                entry["drawn"], entry["features"] = classify_shape(features), features
                if entry["drawn"] != spec.shape:
                    reasons.append(f"the {spec.colour} {spec.shape} is drawn as a {entry['drawn']}")
                else:
                    entry["ok"] = True
            else:
                entry["ok"] = True
        results.append(entry)
    return Verdict(not reasons, round(bg_fraction, 4), results, "; ".join(reasons) or "ok")


def agrees(image, caption: str | Scene, shapes: bool = True) -> bool:
    return judge(image, caption, shapes).agrees


def held_out_prompts(count: int, seed: int = 1234) -> list[str]:
    """``count`` distinct captions made only of held-out (colour, shape, background) triples."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        caption = sample_scene(rng, held_out=True).caption
        if caption not in out:
            out.append(caption)
    return out
