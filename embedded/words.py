"""The scene grammar's words: colours, shapes, places and backgrounds (``embedded.scenes`` draws
and judges scenes made of them, ``embedded.grammar`` reads prompts into them). Plain data: the page
imports this module to say what the model understands, before anything else of the model loads.
"""

from __future__ import annotations

# Named colours (RGB, 0-255), far enough apart that the nearest-colour test is unambiguous.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (245, 215, 40),
    "orange": (250, 140, 20),
    "purple": (140, 50, 180),
    "pink": (245, 130, 200),
    "cyan": (40, 210, 230),
    "white": (250, 250, 250),
    "black": (15, 15, 15),
}
GREY = (128, 128, 128)
SHAPES = ("circle", "square", "triangle", "star", "ring")
# name -> (phrase in the caption, centre as (x, y) fractions of width and height)
POSITIONS: dict[str, tuple[str, tuple[float, float]]] = {
    "left": ("on the left", (0.25, 0.5)),
    "right": ("on the right", (0.75, 0.5)),
    "top": ("at the top", (0.5, 0.25)),
    "bottom": ("at the bottom", (0.5, 0.75)),
    "centre": ("in the centre", (0.5, 0.5)),
}
# Vertical gradients: name -> (top colour, bottom colour).
GRADIENTS: dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = {
    "sunset": ((250, 150, 60), (110, 30, 100)),
    "sky": ((60, 120, 230), (190, 225, 250)),
    "night": ((5, 5, 40), (40, 40, 110)),
}
# Flat backgrounds (every named colour, and grey), and the first colour of stripes / checkerboards
# (the second one is white).
FLAT_BACKGROUNDS = ("white", "black", "grey", "blue", "green", "yellow", "purple", "pink", "red", "orange", "cyan")
PATTERN_COLOURS = ("grey", "blue", "green", "purple")
# Two shapes go only where they cannot overlap.
POSITION_PAIRS = (("left", "right"), ("top", "bottom"), ("left", "top"), ("right", "bottom"),
                  ("left", "bottom"), ("right", "top"))


# Turkish words for the grammar's colours, shapes, places and backgrounds: a Turkish page's prompt
# ("mavi arka planda kırmızı bir daire") is read into the same caption (``embedded.grammar``). Word
# order needs no care: Turkish puts the colour before the shape and the place before what it places,
# which the reading already takes ("on the left, a red circle"). Suffixes (plural -ler/-lar, locative
# -da/-de/-ta/-te, with a buffer n) are taken off a word that is not known whole.
TURKISH = {
    "kırmızı": "red", "yeşil": "green", "mavi": "blue", "sarı": "yellow", "turuncu": "orange", "mor": "purple",
    "pembe": "pink", "turkuaz": "cyan", "camgöbeği": "cyan", "beyaz": "white", "siyah": "black", "gri": "grey",
    "daire": "circle", "yuvarlak": "circle", "nokta": "dot", "kare": "square", "üçgen": "triangle",
    "yıldız": "star", "halka": "ring", "çember": "ring",
    "sol": "left", "solda": "on the left", "sağ": "right", "sağda": "on the right", "üst": "top",
    "üstte": "at the top", "yukarıda": "at the top", "alt": "bottom", "altta": "at the bottom",
    "aşağıda": "at the bottom", "orta": "centre", "ortada": "in the centre",
    "arka": "", "plan": "background", "zemin": "background", "fon": "background", "üzerinde": "on",
    "çizgili": "striped", "çizgi": "stripes", "damalı": "checkered", "dama": "checkerboard",
    "gökyüzü": "sky", "gece": "night", "günbatımı": "sunset", "gradyan": "gradient",
    "ve": "and", "bir": "a", "iki": "two",
    # edits ("daireyi mavi yap", "yıldızı kaldır", "kareyi sola taşı", "üste sarı bir yıldız ekle")
    "yap": "make", "boya": "make", "taşı": "move", "ekle": "add", "kaldır": "remove", "sil": "remove",
    "yerine": "instead", "yukarı": "top", "aşağı": "bottom",
}
# Each place as a Turkish page says it: the first Turkish word for its caption phrase ("solda": "on the left").
TURKISH_PLACES = {place: next(tr for tr, en in TURKISH.items() if en == phrase)
                  for place, (phrase, _) in POSITIONS.items()}
# The grammar's words as a page in another language says them (Turkish: the first Turkish word for each).
NATIVE = {"tr": {**{english: turkish for turkish, english in reversed(TURKISH.items())
                    if english and " " not in english}, "stripes": "çizgili", "checkerboard": "dama"}}


def describe(lang: str = "en") -> str:
    """What the grammar understands, in its own words (the page says it once, under the prompt), in
    English or Turkish (its Turkish words: ``embedded.grammar`` reads both)."""
    if lang == "tr":
        tr = NATIVE["tr"]
        shapes, colours = ", ".join(tr[s] for s in SHAPES), ", ".join(tr[c] for c in COLOURS)
        places = ", ".join(TURKISH_PLACES[p] for p in POSITIONS)
        gradients, patterns = "/".join(tr[g] for g in GRADIENTS), "/".join(tr[c] for c in PATTERN_COLOURS)
        return (f"Bu model en fazla iki şekil ({shapes}) çizer, her biri bir renkte ({colours}) ve bir yerde "
                f"({places}; yazılmazsa ortada), bir arka plan üzerinde: bu renklerden biri ya da gri, bir "
                f"{gradients} gradyanı, ya da {patterns} çizgili veya damalı. İngilizce sözcükleri de okur "
                f"(“a red circle on the left, on a blue background”).")
    places = ", ".join(phrase for phrase, _ in POSITIONS.values())
    shapes, colours = ", ".join(SHAPES), ", ".join(COLOURS)
    gradients, patterns = "/".join(GRADIENTS), "/".join(PATTERN_COLOURS)
    return (f"This model draws up to two shapes ({shapes}) in a colour ({colours}), "
            f"each {places} (left out: the centre), on a background: any of those colours or grey, a "
            f"{gradients} gradient, or {patterns} stripes or checkerboard.")


# The edits the model learned (embedded.editing), as the page shows them under "Edit".
# A shape is named with its colour, as it was trained most ("the red circle").
EDIT_EXAMPLES = ("make the red circle blue", "on a green background instead", "move the white square to the left",
                 "add a yellow star at the top", "remove the pink star")


def describe_edits(lang: str = "en") -> str:
    """What an edit prompt may ask of this model, in English or Turkish."""
    examples = ", ".join(f"“{e}”" for e in EDIT_EXAMPLES)
    if lang == "tr":
        return (f"Bu model bir referans görselde bir şeyi değiştirir; istemde yazın: {examples} "
                f"(ya da Türkçe: “kırmızı daireyi mavi yap”, “pembe yıldızı kaldır”). Geri kalanı referanstan kalır.")
    return (f"This model changes one thing in a reference image; say it in the prompt: {examples}. "
            f"The rest is kept from the reference.")
