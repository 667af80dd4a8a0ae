"""Edits of a reference scene: what the embedded model learns to do with a reference image.

An edit takes a reference scene (``embedded.scenes``) and changes one thing, said in a short
instruction of the grammar:

    make the red circle blue          recolour a shape
    on a green background instead     change the background
    move the blue square to the left  move the (only) shape
    add a yellow star at the top      add a second shape where the grammar pairs it with the first
    remove the white star             remove one of two shapes

A shape is named with its colour in the reference ("the red circle"): the small model finds a shape
by its colour far more surely than by its outline (trained on shape names alone, it removed both
shapes of a two-shape reference, or neither). The instruction without the colour ("remove the
star", ``without_colour``) is trained too, less often.

Everything else is kept exactly: the target is drawn with the reference's shapes where the
reference's render put them (``scenes.place``), so the model learns to copy what the instruction
does not name. ``judge_edit`` decides from pixels whether an image is the edit of its reference: the
target scene's judge (``scenes.judge``: every shape's colour and place, the background) **and**
what the edit took away gone (the old colour of a recoloured shape, a removed shape, a moved shape
at its old place).

Held out: an edit whose reference scene is made only of held-out (colour, shape, background)
triples (``scenes.is_held_out``) is never trained on; ``held_out_edits`` draws those for P12.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from embedded import scenes
from embedded.scenes import COLOURS, POSITION_PAIRS, POSITIONS, SHAPES, Placed, Scene, ShapeSpec

KINDS = ("recolour", "background", "move", "add", "remove")
TO_PLACE = {"left": "to the left", "right": "to the right", "top": "to the top", "bottom": "to the bottom",
            "centre": "to the centre"}


@dataclasses.dataclass(frozen=True)
class Edit:
    kind: str  # one of KINDS
    reference: Scene
    target: Scene
    instruction: str  # the grammar's words for it: what the model is given
    changed: tuple[ShapeSpec, ...] = ()  # what must be gone: a recoloured/removed shape, a moved one's old place


def _pairs_with(position: str) -> list[str]:
    return [b if a == position else a for a, b in POSITION_PAIRS if position in (a, b)]


def possible(reference: Scene, kind: str) -> bool:
    """Can ``kind`` be asked of this reference? (move: one shape; add: one shape at a paired place;
    remove: two shapes; recolour and remove need the shapes told apart by their names.)"""
    n = len(reference.shapes)
    distinct = len({s.shape for s in reference.shapes}) == n
    return {"recolour": distinct, "background": True, "move": n == 1,
            "add": n == 1 and bool(_pairs_with(reference.shapes[0].position)), "remove": n == 2 and distinct}[kind]


def make_edit(reference: Scene, kind: str, rng: random.Random) -> Edit:
    """A random edit of ``kind`` of ``reference`` (``possible`` must hold)."""
    shapes, bg = list(reference.shapes), reference.background
    if kind == "recolour":
        i = rng.randrange(len(shapes))
        used = {s.colour for s in shapes}
        colour = rng.choice([c for c in COLOURS if c not in used and scenes.colour_fits(c, bg)])
        old = shapes[i]
        shapes[i] = dataclasses.replace(old, colour=colour)
        return Edit(kind, reference, Scene(tuple(shapes), bg), f"make the {old.colour} {old.shape} {colour}", (old,))
    if kind == "background":
        options = [b for b in scenes.all_backgrounds()
                   if b != bg and all(scenes.colour_fits(s.colour, b) for s in shapes)]
        new = rng.choice(options)
        return Edit(kind, reference, Scene(tuple(shapes), new), f"on {new.phrase} instead")
    if kind == "move":
        old = shapes[0]
        position = rng.choice([p for p in POSITIONS if p != old.position])
        target = Scene((dataclasses.replace(old, position=position),), bg)
        return Edit(kind, reference, target, f"move the {old.colour} {old.shape} {TO_PLACE[position]}", (old,))
    if kind == "add":
        have = shapes[0]
        position = rng.choice(_pairs_with(have.position))
        colour = rng.choice([c for c in COLOURS if c != have.colour and scenes.colour_fits(c, bg)])
        new = ShapeSpec(colour, rng.choice([s for s in SHAPES if s != have.shape]), position)
        return Edit(kind, reference, Scene((have, new), bg), f"add {new.phrase}")
    if kind == "remove":
        i = rng.randrange(2)
        gone = shapes.pop(i)
        return Edit(kind, reference, Scene(tuple(shapes), bg), f"remove the {gone.colour} {gone.shape}", (gone,))
    raise ValueError(f"unknown edit {kind!r}")


def without_colour(edit: Edit) -> str:
    """The edit's instruction with the named shape's colour left out ("remove the star")."""
    if edit.kind in ("recolour", "move", "remove"):
        old = edit.changed[0]
        return edit.instruction.replace(f" the {old.colour} {old.shape}", f" the {old.shape}", 1)
    return edit.instruction


def sample_edit(rng: random.Random, held_out: bool = False, kinds=KINDS) -> Edit:
    """A random edit of a random reference; held_out=True draws references made only of held-out
    triples (never trained on), False only of training triples whose target is one too."""
    while True:
        kind = rng.choice(kinds)
        reference = scenes.sample_scene(rng, held_out=held_out, two_shapes=0.5 if kind == "remove" else 0.3)
        if not possible(reference, kind):
            continue
        edit = make_edit(reference, kind, rng)
        if held_out or not any(scenes.is_held_out(s.colour, s.shape, edit.target.background)
                               for s in edit.target.shapes):
            return edit


def placements(edit: Edit, rng: random.Random) -> tuple[list[Placed], list[Placed]]:
    """Where the reference's shapes are drawn (jittered by ``rng``) and where the target's are: a
    kept shape exactly where it was, a moved one by the same jitter at its new place, an added one
    at its place with a jitter of its own, at the two-shape radius."""
    ref = scenes.place(edit.reference, rng)
    by_shape = {p.spec.shape: p for p in ref}
    out = []
    for spec in edit.target.shapes:
        old = by_shape.get(spec.shape)
        if old is None:  # added
            jx, jy, js = rng.uniform(-0.03, 0.03), rng.uniform(-0.03, 0.03), rng.uniform(-0.02, 0.02)
            fx, fy = POSITIONS[spec.position][1]
            out.append(Placed(spec, fx + jx, fy + jy, scenes.SHAPE_RADIUS[1] + js))
        elif spec.position != old.spec.position:  # moved
            (ox, oy), (nx, ny) = POSITIONS[old.spec.position][1], POSITIONS[spec.position][1]
            out.append(Placed(spec, old.x - ox + nx, old.y - oy + ny, old.radius))
        else:
            out.append(dataclasses.replace(old, spec=spec))
    return ref, out


def render_pair(edit: Edit, height: int, width: int, rng: random.Random,
                shape_size: str = "shorter") -> tuple[np.ndarray, np.ndarray]:
    """(reference, target) uint8 images of ``edit`` at one size, shapes sized by ``shape_size``
    (``scenes.shape_side``)."""
    ref, target = placements(edit, rng)
    side = scenes.shape_side(height, width, shape_size)
    return (scenes.draw(edit.reference.background, ref, height, width, side),
            scenes.draw(edit.target.background, target, height, width, side))


def judge_edit(image, edit: Edit) -> scenes.Verdict:
    """Is ``image`` the edit of its reference? The target's verdict, and what the edit took away gone:
    a recoloured shape's old colour and a removed shape's colour cover less than a shape's minimum;
    a moved shape's colour left near its old place covers less than that."""
    verdict = scenes.judge(image, edit.target)
    pixels = np.asarray(image, dtype=np.float32)[..., :3]
    height, width = pixels.shape[:2]
    reasons = [] if verdict.agrees else [verdict.reason]
    # what is left of a colour: its solid foreground pixels (``scenes.solid``: not a soft edge's rim)
    foreground, nearest = scenes.pixel_classes(pixels, edit.target.background)
    cores = scenes.solid(foreground)
    for old in edit.changed:
        own = cores & (nearest == list(COLOURS).index(old.colour))
        if edit.kind == "move":
            fx, fy = POSITIONS[old.position][1]
            ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
            nx, ny = POSITIONS[next(s.position for s in edit.target.shapes if s.shape == old.shape)][1]
            # near the old place, and away from the new one (top and centre are a quarter apart)
            near = (((xs / width - fx) ** 2 + (ys / height - fy) ** 2 <= 0.15 ** 2)
                    & ((xs / width - nx) ** 2 + (ys / height - ny) ** 2 > 0.25 ** 2))
            left = float((own & near).mean())
            if left >= scenes.MIN_SHAPE_FRACTION:
                reasons.append(f"the {old.shape} is still {POSITIONS[old.position][0]} ({left:.1%})")
        elif any(s.colour == old.colour for s in edit.target.shapes):
            continue  # the colour is still asked for elsewhere
        elif (frac := float(own.mean())) >= scenes.MIN_SHAPE_FRACTION:
            what = f"{old.colour} (the {old.shape}'s old colour)" if edit.kind == "recolour" else f"the {old.shape}"
            reasons.append(f"{what} still covers {frac:.1%}")
    if edit.kind == "background":  # the new background, not the old one (stripes and checkerboards share a colour)
        new, old = (np.mean(np.linalg.norm(pixels - b.render(height, width), axis=-1) < scenes.BACKGROUND_TOLERANCE)
                    for b in (edit.target.background, edit.reference.background))
        if new <= old:
            reasons.append(f"the background is more {edit.reference.background.phrase!r} ({old:.0%}) "
                           f"than asked ({new:.0%})")
    return dataclasses.replace(verdict, agrees=not reasons, reason="; ".join(reasons) or "ok")


def held_out_edits(count: int, seed: int = 2468) -> list[Edit]:
    """``count`` edits of held-out references, the kinds in turn (P12's prompts)."""
    rng = random.Random(seed)
    return [sample_edit(rng, held_out=True, kinds=(KINDS[i % len(KINDS)],)) for i in range(count)]


def instruction_words() -> tuple[str, ...]:
    """Every instruction the edits can give (the training caches their text states)."""
    named = [f"{c} {s}" for s in SHAPES for c in COLOURS] + list(SHAPES)  # with and without the colour
    out = [f"make the {n} {c}" for n in named for c in COLOURS]
    out += [f"on {b.phrase} instead" for b in scenes.all_backgrounds()]
    out += [f"move the {n} {TO_PLACE[p]}" for n in named for p in POSITIONS]
    out += [f"add {ShapeSpec(c, s, p).phrase}" for c in COLOURS for s in SHAPES for p in POSITIONS]
    out += [f"remove the {n}" for n in named]
    return tuple(out)
