"""P12: an edit against a text-to-image run at the same output size (issue 34).

An edit appends each reference's latent tokens to the image tokens, and encodes each reference with
the VAE first: at an output size with one reference of that size the transformer sees twice the
tokens. The row reports the edit's steady time over the text-to-image run's (interleaved, the same
seed and steps), with the extra tokens; it has no goal (it is what an edit costs, not a promise).

The row the issue also asks for — the embedded model's edit accuracy on held-out edit prompts —
needs a model that has learned to edit; the embedded model has not yet (docs/editing.md), so that
row is not measured and this module does not pretend to.
"""

from __future__ import annotations

from pathlib import Path

from bench import stats
from bench.harness import start_manager
from bench.rows import make_row, timed_ratio


def p12_edit_cost(tmp: Path, quick: bool) -> list[dict]:
    from PIL import Image

    from backend.shapes import parse_shape

    sizes = ["64x64"] if quick else ["256x256", "512x512"]
    reps = 4 if quick else 15
    rows = []
    manager = start_manager(tmp, reference_sizes=[parse_shape(s) for s in sizes])
    try:
        for i, text in enumerate(sizes):
            shape = parse_shape(text)
            reference = tmp / f"reference-{text}.png"
            Image.new("RGB", (shape.width, shape.height), "red").save(reference)
            plain = manager.validate("a red fox", shape.height, shape.width, steps=4, seed=0, mode="eager")
            edit = manager.validate("a red fox", shape.height, shape.width, steps=4, seed=0, mode="eager",
                                    images=[str(reference)])
            runs = {"edit": lambda: manager.generate(edit), "text": lambda: manager.generate(plain)}
            runs["edit"](), runs["text"]()  # once each before timing
            measured = stats.interleaved(runs, reps, seed=40 + i)
            wall, cpu = timed_ratio(measured, "edit", "text")
            steady = {side: stats.spread(v) for side, v in measured["wall"].items()}
            rows.append(make_row(
                "P12", f"edit with one {text} reference / text to image at {text}, eager, 4 steps "
                       f"(tokens {edit.shape.tokens} vs {plain.shape.tokens})", wall, "x", None, cpu, steady,
                note="edit accuracy: not measured (the embedded model has not learned to edit yet)"))
    finally:
        manager.close()
    return rows
