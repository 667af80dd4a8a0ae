"""Reading what a person types as a caption of the scene grammar (``embedded.scenes``).

The trained embedded model knows one caption form, ``a red circle on the left, on a blue
background``. People write "a red circle on a blue background" (no place), "in the center",
"in the middle", "gray", "on top", "a red square and a blue star". ``read(prompt)`` turns such a
prompt into the caption the model is given:

- the place is optional: one shape without one goes in the centre; two shapes go left and right
  (or, when one has a place, the other opposite it);
- synonyms are understood (center/centre/middle, gray/grey, on top/at the top/above, below,
  to the left, disc/dot for circle, donut for ring, striped, checkered, sunset/night sky, ...);
- the background may be any named colour, flat, and may be left out (white, or black where a
  white shape would not show);
- a prompt with words outside the grammar still becomes a scene: the colours and shapes it does
  name, and the defaults above for the rest (``Reading.guessed`` says what was made up, and
  ``Reading.ignored`` lists the words that were not understood).

No torch, no numpy: the serving code calls it for every request to a model whose card declares
this grammar (``backend.models.card``).
"""

from __future__ import annotations

import dataclasses
import re

from embedded.scenes import (
    COLOURS,
    FLAT_BACKGROUNDS,
    GRADIENTS,
    PATTERN_COLOURS,
    POSITION_PAIRS,
    SHAPES,
    Background,
    Scene,
    ShapeSpec,
    colour_fits,
)
from embedded.words import NATIVE as _NATIVE
from embedded.words import TURKISH

NAME = "scenes"  # what a model card's "prompt_grammar" says to select this reading

COLOUR_WORDS = {**{c: c for c in COLOURS}, "grey": "grey", "gray": "grey", "violet": "purple", "magenta": "pink",
                "aqua": "cyan", "turquoise": "cyan"}
SHAPE_WORDS = {**{s: s for s in SHAPES}, **{s + "s": s for s in SHAPES}, "disc": "circle", "disk": "circle",
               "dot": "circle", "ball": "circle", "box": "square", "donut": "ring", "doughnut": "ring",
               "hoop": "ring"}
# Place phrases, longest first where one contains another; each maps to a grammar position.
PLACE_PHRASES = (
    ("in the centre", "centre"), ("in the center", "centre"), ("in the middle", "centre"),
    ("at the centre", "centre"), ("at the center", "centre"), ("centred", "centre"), ("centered", "centre"),
    ("centre", "centre"), ("center", "centre"), ("middle", "centre"),
    ("on the left", "left"), ("to the left", "left"), ("at the left", "left"), ("left", "left"),
    ("on the right", "right"), ("to the right", "right"), ("at the right", "right"), ("right", "right"),
    ("at the top", "top"), ("on the top", "top"), ("on top", "top"), ("top", "top"), ("above", "top"),
    ("upper", "top"), ("at the bottom", "bottom"), ("on the bottom", "bottom"), ("bottom", "bottom"),
    ("below", "bottom"), ("lower", "bottom"), ("up", "top"), ("down", "bottom"),
)
PATTERN_WORDS = {"background": "flat", "backdrop": "flat", "stripes": "stripes", "striped": "stripes",
                 "stripe": "stripes", "checkerboard": "checkerboard", "checkered": "checkerboard",
                 "chequered": "checkerboard", "checkers": "checkerboard", "checker": "checkerboard",
                 "gradient": "gradient"}
GRADIENT_WORDS = {g: g for g in GRADIENTS}
FILLER = {"a", "an", "the", "and", "on", "in", "at", "of", "with", "to", "side", "sky", "image", "picture",
          "photo", "drawing", "shape", "one", "some", "two", "is", "there", "please", "draw"}
SHAPE_COLOUR_ORDER = ("red", "blue", "yellow", "green", "white", "black", "orange", "purple", "pink", "cyan")
BACKGROUND_ORDER = ("white", "black", "grey")
OPPOSITE = {"left": "right", "right": "left", "top": "bottom", "bottom": "top"}


# What a reading says of a prompt, in the page's languages; the API, the CLI and the record keep the English.
NOTES = {
    "en": {"shape": "a shape: {0}", "colour": "a colour: {0}", "place": "a place: {0}", "gradient": "a gradient: {0}",
           "pattern_colour": "a colour for the {0}: {1}", "not_shape_colour": "{0} (not a shape colour)",
           "two_shapes": "{0} (at most two shapes)", "corner": "{0} (no corners: read as {1})",
           "refuse_kind": "an edit cannot change a shape's kind: remove the shape, then add a {0}",
           "one_shape": "{0} (an edit changes one shape: ask for it next)"},
    "tr": {"shape": "bir şekil: {0}", "colour": "bir renk: {0}", "place": "bir yer: {0}",
           "gradient": "bir gradyan: {0}",
           "pattern_colour": "{0} için bir renk: {1}", "not_shape_colour": "{0} (şekil rengi değil)",
           "two_shapes": "{0} (en çok iki şekil)", "corner": "{0} (köşe yok: {1} olarak okundu)",
           "refuse_kind": "bir düzenleme şeklin türünü değiştiremez: şekli kaldırın, sonra bir {0} ekleyin",
           "one_shape": "{0} (bir düzenleme tek bir şekli değiştirir: sonra onu isteyin)"},
}


class Note(str):
    """One note of a reading ("a shape: circle"): the English text, which can also say itself in
    another language of the page (``said``), the grammar's words in that language's own."""

    def __new__(cls, key: str, *args: str) -> "Note":
        note = super().__new__(cls, NOTES["en"][key].format(*args))
        note.key, note.args = key, args
        return note

    def __getnewargs__(self) -> tuple[str, ...]:  # pickled (a request's reading) as its key and words
        return (self.key, *self.args)

    def said(self, lang: str) -> str:
        words = _NATIVE.get(lang, {})
        return NOTES.get(lang, NOTES["en"])[self.key].format(*(words.get(a, a) for a in self.args))


@dataclasses.dataclass(frozen=True)
class Reading:
    caption: str  # what the model is given: a caption of the grammar
    guessed: tuple[str, ...] = ()  # what the prompt did not say and was made up ("a shape: circle")
    ignored: tuple[str, ...] = ()  # words of the prompt that mean nothing to the grammar
    refusal: str | None = None  # why the model cannot draw what the prompt asks (a Note): nothing runs

    @property
    def understood(self) -> bool:
        """Every word was understood and nothing but places and a background had to be filled in."""
        return not self.ignored and not self.guessed

    def said(self, lang: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(ignored, guessed) as the page of ``lang`` says them: the notes in its words, a word of the
        prompt as it came."""
        def say(notes: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(n.said(lang) if isinstance(n, Note) else n for n in notes)

        return say(self.ignored), say(self.guessed)


# plural, locative, accusative (the edits' object) and dative (where to) suffixes, longest first
_TURKISH_SUFFIXES = ("nda", "nde", "lar", "ler", "yi", "yı", "yu", "yü", "ya", "ye", "da", "de", "ta", "te",
                     "i", "ı", "u", "ü", "a", "e")


def _turkish(word: str) -> str | None:
    if word in TURKISH:
        return TURKISH[word]
    for suffix in _TURKISH_SUFFIXES:
        if word.endswith(suffix) and word[: -len(suffix)] in TURKISH:
            return TURKISH[word[: -len(suffix)]]
    return None


def _tokens(prompt: str) -> list[str]:
    """The prompt's words as typed, Turkish lower-casing first (I -> ı, İ -> i)."""
    return re.findall(r"\w+", prompt.replace("I", "ı").replace("İ", "i").lower())


def _words(prompt: str) -> list[str]:
    # Every Turkish word the grammar knows in English.
    words: list[str] = []
    for word in _tokens(prompt):
        english = _turkish(word)
        words.extend((english if english is not None else word).split())
    return [w for w in words if w]


def _find_places(words: list[str]) -> dict[int, tuple[str, int]]:
    """{start index: (position, length in words)} of every place phrase, longest first."""
    found: dict[int, tuple[str, int]] = {}
    taken: set[int] = set()
    for phrase, position in PLACE_PHRASES:
        parts = phrase.split()
        for i in range(len(words) - len(parts) + 1):
            span = set(range(i, i + len(parts)))
            if words[i:i + len(parts)] == parts and not span & taken:
                found[i] = (position, len(parts))
                taken |= span
    return found


def _background(words: list[str], used: set[int]) -> tuple[Background | None, set[int]]:
    """The background the prompt names, and the indices of its words. A pattern or a gradient named
    without its colour ("on a checkerboard", "on stripes", "on a gradient") comes back with an empty
    name, for ``_unnamed`` to choose once the shapes are known; a bare "background" names nothing
    but is understood."""
    bare, plain = None, set()
    for i, word in enumerate(words):
        kind = PATTERN_WORDS.get(word)
        if kind is None:
            continue
        near = [j for j in (i - 1, i - 2, i + 1) if 0 <= j < len(words) and j not in used]
        if kind == "gradient":
            name = next((words[j] for j in near if words[j] in GRADIENT_WORDS), None)
            if name:
                return Background("gradient", name), {i} | {j for j in near if words[j] == name}
            bare = bare or (Background("gradient", ""), {i})
            continue
        for j in near:
            colour = COLOUR_WORDS.get(words[j])
            if colour is None:
                continue
            if kind == "flat" and colour in FLAT_BACKGROUNDS:
                return Background("flat", colour), {i, j}
            if kind in ("stripes", "checkerboard"):
                # Patterns come in the grammar's pattern colours; another colour's pattern is the
                # nearest thing the model knows: that colour flat.
                if colour in PATTERN_COLOURS:
                    return Background(kind, colour), {i, j}
                return Background("flat", colour), {i, j}
        if kind in ("stripes", "checkerboard"):
            bare = bare or (Background(kind, ""), {i})
        else:  # "on a (striped) background": understood, and says nothing more
            plain.add(i)
    for i, word in enumerate(words):  # "a sunset", "at night", "a night sky"
        if word in GRADIENT_WORDS and i not in used:
            return Background("gradient", word), {i}
    # "... on blue" / "... on a blue" at the end, after the last shape: a flat colour.
    for i in range(len(words) - 1, 0, -1):
        colour = COLOUR_WORDS.get(words[i])
        if colour is None or i in used:
            continue
        if words[i - 1] == "on" or (i >= 2 and words[i - 2] == "on" and words[i - 1] in ("a", "an")):
            if not any(SHAPE_WORDS.get(w) for w in words[i + 1:]):
                return Background("flat", colour), {i}
        break
    return (bare[0], bare[1] | plain) if bare else (None, plain)


def _unnamed(background: Background, colours: list[str | None]) -> Background:
    """A pattern or gradient named without its colour: the first of the grammar's on which every
    shape colour shows."""
    names = GRADIENTS if background.kind == "gradient" else PATTERN_COLOURS
    fits = [n for n in names if all(c is None or colour_fits(c, Background(background.kind, n)) for c in colours)]
    return Background(background.kind, (fits or list(names))[0])


def _unnamed_said(background: Background) -> Note:
    """What ``Reading.guessed`` says of a background ``_unnamed`` chose."""
    if background.kind == "gradient":
        return Note("gradient", background.name)
    return Note("pattern_colour", background.kind, background.name)


def read(prompt: str) -> Reading:
    """The caption of the grammar that ``prompt`` asks for (see the module's docstring)."""
    words = _words(prompt)
    places = _find_places(words)
    place_at = {i + k: (pos, i) for i, (pos, n) in places.items() for k in range(n)}
    background, bg_words = _background(words, set(place_at))
    guessed: list[str] = []
    shapes: list[list] = []  # [colour | None, shape, position | None]
    pending_colour: str | None = None
    pending_place: str | None = None
    ignored: list[str] = []
    corner: tuple[int, str] | None = None  # (where the last place phrase ended, its position)
    for i, word in enumerate(words):
        if i in bg_words:
            continue
        if i in place_at:
            pos, start = place_at[i]
            if start == i and corner is not None and corner[0] == i and pos != corner[1]:
                # "top left": a corner is no place of the grammar; the first word places the shape,
                # and the second must not move on to the next shape
                ignored.append(Note("corner", pos, corner[1]))
                corner = (i + places[i][1], corner[1])
            elif start == i:
                corner = (i + places[i][1], pos)
                if shapes and shapes[-1][2] is None:
                    shapes[-1][2] = pos
                else:
                    pending_place = pos  # "on the left, a red circle"
            continue
        if word in COLOUR_WORDS:
            pending_colour = COLOUR_WORDS[word]
            continue
        if word in SHAPE_WORDS:
            if pending_colour is not None and pending_colour not in COLOURS:  # grey: a background only
                ignored.append(Note("not_shape_colour", pending_colour))
                pending_colour = None
            shapes.append([pending_colour, SHAPE_WORDS[word], pending_place])
            pending_colour = pending_place = None
            continue
        if word not in FILLER:
            ignored.append(word)
    if pending_colour is not None and not shapes and pending_colour in COLOURS:
        guessed.append(Note("shape", "circle"))
        shapes.append([pending_colour, "circle", pending_place])
    if not shapes:
        guessed.append(Note("shape", "circle"))
        shapes.append([None, "circle", pending_place])
    if len(shapes) > 2:
        ignored.extend(Note("two_shapes", s[1]) for s in shapes[2:])
        shapes = shapes[:2]
    _place(shapes)
    if background is not None and not background.name:
        background = _unnamed(background, [c for c, _, _ in shapes])
        guessed.append(_unnamed_said(background))
    if background is None:
        background = next((Background("flat", b) for b in BACKGROUND_ORDER
                           if all(c is None or colour_fits(c, Background("flat", b)) for c, _, _ in shapes)),
                          Background("flat", "white"))
    for spec in shapes:
        if spec[0] is None:
            named = {other[0] for other in shapes}
            spec[0] = next((c for c in SHAPE_COLOUR_ORDER if colour_fits(c, background) and c not in named), "red")
            guessed.append(Note("colour", spec[0]))
    scene = Scene(tuple(ShapeSpec(c, s, p) for c, s, p in shapes), background)
    return Reading(scene.caption, tuple(guessed), tuple(dict.fromkeys(ignored)))


def _place(shapes: list[list]) -> None:
    """Fill in missing places: one shape in the centre; two apart, as the grammar pairs them."""
    if len(shapes) == 1:
        shapes[0][2] = shapes[0][2] or "centre"
        return
    a, b = shapes[0][2], shapes[1][2]
    if (a, b) in POSITION_PAIRS or (b, a) in POSITION_PAIRS:
        return
    if a in OPPOSITE:
        shapes[1][2] = OPPOSITE[a]
    elif b in OPPOSITE:
        shapes[0][2] = OPPOSITE[b]
    else:
        shapes[0][2], shapes[1][2] = "left", "right"


EDIT_VERBS = (  # (kind, words), in the order they are looked for: "remove" before "make" etc.
    ("remove", {"remove", "delete", "erase", "without", "drop"}),
    ("add", {"add", "plus"}),
    ("move", {"move", "put", "place", "shift", "slide"}),
    ("recolour", {"make", "turn", "colour", "color", "paint", "recolour", "recolor", "change"}),
)
EDIT_FILLER = FILLER | {"it", "instead", "into", "so", "that", "now", "new", "other", "another", "its",
                        "this", "more", "also", "be", "becomes", "colored", "coloured"}


def _turkish_kind(prompt: str) -> str | None:
    """The shape a Turkish edit asks a shape to become: the kind's bare noun just before the verb
    ("üçgen yap", "daireyi yıldız yap"; the shape edited takes a case ending, "daireyi")."""
    raw = _tokens(prompt)
    return next((SHAPE_WORDS[TURKISH[a]] for a, b in zip(raw, raw[1:])
                 if TURKISH.get(a) in SHAPE_WORDS and TURKISH.get(b) == "make"), None)


def read_edit(prompt: str) -> Reading | None:
    """An edit instruction of the grammar (``embedded.editing``: "make the red circle blue", "on a
    green background instead", "move the square to the left", "add a yellow star at the top",
    "remove the white star"; a shape's colour is kept when the prompt names it) that ``prompt``
    asks for, or None when it asks for no edit (then ``read`` makes it a caption). Synonyms and
    Turkish as in ``read``; what is missing is filled in and said in ``guessed``."""
    words = _words(prompt)
    places = _find_places(words)
    place_at = {i + k: pos for i, (pos, n) in places.items() for k in range(n)}
    place = next((pos for i, (pos, _n) in sorted(places.items())), None)
    kind = next((k for k, verbs in EDIT_VERBS if verbs & set(words)), None)
    verbs = set().union(*(v for _, v in EDIT_VERBS))
    background, bg_words = _background(words, set(place_at))
    if background is None and "background" in words:  # "change the background to green"
        after = words.index("background")
        colour = next((COLOUR_WORDS[w] for w in words[after + 1:] if w in COLOUR_WORDS), None)
        if colour in FLAT_BACKGROUNDS:
            background, bg_words = Background("flat", colour), {after} | {
                i for i, w in enumerate(words) if i > after and COLOUR_WORDS.get(w) == colour}
    shapes = [SHAPE_WORDS[w] for i, w in enumerate(words) if w in SHAPE_WORDS and i not in bg_words]
    colours = [COLOUR_WORDS[w] for i, w in enumerate(words) if w in COLOUR_WORDS and i not in bg_words]
    if background is not None and not shapes:  # "put it on grey stripes", "make it a sunset"
        kind = "background"
    if kind is None:
        return None
    ignored = [w for i, w in enumerate(words) if i not in bg_words and i not in place_at and w not in verbs
               and w not in EDIT_FILLER and w not in SHAPE_WORDS and w not in COLOUR_WORDS
               and w not in PATTERN_WORDS]
    ignored += [Note("not_shape_colour", c) for c in colours if c not in COLOURS and kind != "background"]
    guessed: list[str] = []

    def pick(found: list[str], default: str, what: str) -> str:
        if found:
            return found[0]
        guessed.append(Note(what, default))
        return default

    if kind == "background":
        if not background.name:
            background = _unnamed(background, [])
            guessed.append(_unnamed_said(background))
        return Reading(f"on {background.phrase} instead", tuple(guessed), tuple(dict.fromkeys(ignored)))
    shape = pick(shapes, "circle", "shape")
    ignored += [Note("one_shape", other) for other in shapes[1:]]  # "remove the circle and the star"
    shape_colours = [c for c in colours if c in COLOURS]
    # the shape as named, with its colour when the prompt says it ("the red square"); a recolour's
    # new colour is said last ("paint the red square yellow"), so only the ones before it name the shape
    own_colours = shape_colours[:-1] if kind == "recolour" else shape_colours
    named = f"{own_colours[0]} {shape}" if own_colours else shape
    if kind == "remove":
        text = f"remove the {named}"
    elif kind == "move":
        text = f"move the {named} to the {pick([place] if place else [], 'centre', 'place')}"
    elif kind == "recolour":
        # What the shape is to become is said last: a colour ("paint a circle blue"), or a kind after
        # "a" or "into", colours between ("make it a triangle", "turn the red circle into a blue star").
        said = [i for i, w in enumerate(words) if w in SHAPE_WORDS or w in COLOUR_WORDS]
        before = [w for w in words[:said[-1]] if w not in COLOUR_WORDS] if said else []
        becomes = said and words[said[-1]] in SHAPE_WORDS and before and before[-1] in ("a", "an", "into")
        wanted = SHAPE_WORDS[words[said[-1]]] if becomes else _turkish_kind(prompt)
        if wanted:  # "make it a triangle", "turn the red circle into a blue star", "üçgen yap": refused, not
            return Reading(prompt, refusal=Note("refuse_kind", wanted))  # run as a recolour to a guess
        colour = pick(shape_colours[-1:], "red", "colour")
        text = f"make the {named} {colour}"
    else:
        colour = pick(shape_colours, "red", "colour")
        position = pick([place] if place else [], "right", "place")
        text = f"add {ShapeSpec(colour, shape, position).phrase}"
    return Reading(text, tuple(guessed), tuple(dict.fromkeys(ignored)))


def describe() -> str:
    """What the grammar understands, in its own words (``embedded.words.describe``)."""
    from embedded.words import describe as words_describe

    return words_describe()


def people_prompts(count: int, seed: int = 4321) -> list[tuple[str, str]]:
    """``count`` distinct (prompt, caption) pairs written as people write them, made only of held-out
    (colour, shape, background) triples: the place left out (one shape: the centre; two: left and
    right) and the common synonyms ("gray", "center", "in the middle", "on top") instead of the
    grammar's words. The caption is what ``read`` must turn the prompt into (and what the image is
    judged against)."""
    import random

    from embedded.scenes import sample_scene

    rng, out, seen = random.Random(seed), [], set()
    while len(out) < count:
        scene = sample_scene(rng, held_out=True)
        places = tuple(s.position for s in scene.shapes)
        if places not in (("centre",), ("left", "right")):
            continue  # only the scenes whose places a person may leave out
        words = " and ".join(s.noun for s in scene.shapes)
        prompt = words + " on " + scene.background.phrase
        prompt = prompt.replace("grey", rng.choice(["grey", "gray"]))
        if rng.random() < 0.3 and len(scene.shapes) == 1:  # a place said the other ways
            prompt = prompt.replace(" on ", f" {rng.choice(['in the center', 'in the middle'])} on ", 1)
        if prompt not in seen:
            seen.add(prompt)
            out.append((prompt, scene.caption))
    return out
