"""Does the embedded model draw what it is told? Prompt agreement on held-out scene prompts.

    python -m bench.agreement                      # 128, 256, 512, 1024; 24 prompts each
    python -m bench.agreement --sizes 128x128 --prompts 8

The prompts are captions from ``embedded.scenes``'s grammar made only of (colour, shape, background)
triples that training never drew (``scenes.is_held_out``). Each is generated the way the app does
by default for this model (4 steps, guidance 1.0, a fixed seed per prompt) and judged by
``scenes.judge``: shape colours dominant, centroids in the named places, each shape's outline the
kind named (circle, square, triangle, star, ring: ``scenes.classify_shape``), background as named.
Training used sizes 64..256 px, so 512 and 1024 measure extrapolation. Prints one row per size.
``p9_prompt_agreement`` is the suite's P9 (``python -m bench --only P9``): the trained model at
every preset of its card, and on prompts as people write them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

DEFAULT_SIZES = ((128, 128), (256, 256), (512, 512), (1024, 1024))
STEPS = 4
GUIDANCE = 1.0


def load_pipeline(model_dir: str | Path | None = None):
    from diffusers import Flux2KleinPipeline

    from embedded.recipe import SCENES_MODEL_DIR

    pipe = Flux2KleinPipeline.from_pretrained(model_dir or SCENES_MODEL_DIR)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def served_tokens(model_dir: str | Path | None = None) -> int:
    """The prompt length the app calls the model with: its card's ``prompt_tokens`` (else 512)."""
    from backend.models.card import DEFAULT_PROMPT_TOKENS, read_card
    from embedded.recipe import SCENES_MODEL_DIR

    return read_card(model_dir or SCENES_MODEL_DIR).prompt_tokens or DEFAULT_PROMPT_TOKENS


def generate(pipe, prompts: list[str], height: int, width: int, seed: int = 0, batch: int = 8,
             tokens: int = 512) -> list:
    """One PIL image per prompt, prompts padded to ``tokens`` as the app does (``served_tokens``);
    prompt i uses generator seed ``seed + i`` whatever the batching."""
    import torch

    images = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start:start + batch]
        gens = [torch.Generator().manual_seed(seed + start + i) for i in range(len(chunk))]
        with torch.no_grad():
            images += pipe(prompt=chunk, height=height, width=width, num_inference_steps=STEPS,
                           guidance_scale=GUIDANCE, generator=gens, max_sequence_length=tokens).images
    return images


def by_shape(prompts: list[str], verdicts: list) -> dict[str, dict]:
    """Per shape kind the prompts name: how many of them were drawn as that kind (``right``) of those
    named, and what the others were drawn as (``drawn``; "colour or place" where the judge found
    no shape of its colour at its place to look at)."""
    from embedded import scenes

    out = {kind: {"right": 0, "named": 0, "drawn": {}} for kind in scenes.SHAPES}
    for prompt, verdict in zip(prompts, verdicts):
        for spec, entry in zip(scenes.parse_caption(prompt).shapes, verdict.shapes):
            kind = out[spec.shape]
            kind["named"] += 1
            drawn = entry.get("drawn") or "colour or place"
            if drawn == spec.shape:
                kind["right"] += 1
            else:
                kind["drawn"][drawn] = kind["drawn"].get(drawn, 0) + 1
    return out


def measure(sizes=DEFAULT_SIZES, prompts: int | list[str] = 24, seed: int = 0, pipe=None,
            model_dir: str | Path | None = None, keep_images: bool = False) -> dict:
    """Agreement per size: {"prompts": [...], "sizes": {"HxW": {"agree", "total", "fraction",
    "seconds", "agree_without_outlines", "by_shape", "failures": [(prompt, reason)], "images"?}}}.
    ``prompts``: a count of held-out prompts or the list itself."""
    from embedded import scenes

    prompt_list = scenes.held_out_prompts(prompts) if isinstance(prompts, int) else list(prompts)
    pipe = pipe or load_pipeline(model_dir)
    tokens = served_tokens(model_dir)
    out = {"prompts": prompt_list, "steps": STEPS, "guidance": GUIDANCE, "seed": seed, "sizes": {}}
    for height, width in sizes:
        t0 = time.perf_counter()
        batch = max(1, min(8, (256 * 256 * 8) // (height * width)))
        images = generate(pipe, prompt_list, height, width, seed=seed, batch=batch, tokens=tokens)
        verdicts = [scenes.judge(image, prompt) for image, prompt in zip(images, prompt_list)]
        agree = sum(v.agrees for v in verdicts)
        # the judge before issue 54 (colours, places, background; not the outlines), for comparison
        colour_place = sum(scenes.agrees(image, prompt, shapes=False) for image, prompt in zip(images, prompt_list))
        row = {"agree": agree, "total": len(verdicts), "fraction": agree / len(verdicts),
               "agree_without_outlines": colour_place,
               "seconds": round(time.perf_counter() - t0, 1), "by_shape": by_shape(prompt_list, verdicts),
               "failures": [(p, v.reason) for p, v in zip(prompt_list, verdicts) if not v.agrees]}
        if keep_images:
            row["images"] = images
        out["sizes"][f"{height}x{width}"] = row
    return out


# The suite's P9 rows ---------------------------------------------------------------------------
P9_PROMPTS = (48, 16)  # held-out prompts per preset and for the place-less set (full run, quick run)
P9_QUICK_PRESETS = ("1:1", "16:9", "9:21")  # the quick run: the square and the two ends of the ratios
P9_BEYOND = ("512x512", 24)  # twice the trained scale: reported, not judged


def p9_prompt_agreement(tmp: Path, quick: bool) -> list[dict]:
    """Does the trained embedded model (the app's default) draw what it is told, at every preset
    the page offers for it? Held-out grammar prompts, judged by image statistics
    (``measure``, ``embedded.scenes.judge``); the share that agrees, with its Wilson
    interval. One row per preset of the model's card, one for prompts written as people write
    them (place left out, synonyms; read by ``embedded.grammar``), an info row at twice the
    trained scale, and an info row per shape kind: how many of the shapes of that kind the judged
    rows' prompts name were drawn as that kind (with what the others were drawn as)."""
    from backend.models.card import read_card
    from backend.shapes import parse_shape
    from bench import stats
    from bench.rows import make_row
    from embedded import SCENES_MODEL_DIR, grammar

    pipe = load_pipeline()
    card = read_card(SCENES_MODEL_DIR)
    count = P9_PROMPTS[quick]
    name = "prompt agreement of the trained embedded model (assets/scenes-flux2-klein)"
    cases = [(f"at the {label} preset {shape}, 4 steps (held-out prompts)", shape, count, None)
             for label, shape in card.presets if not quick or label in P9_QUICK_PRESETS]
    people = grammar.people_prompts(count)
    start = card.start_shape
    cases.append((f"at {start}, prompts as people write them (place left out, synonyms; held-out)", start, count,
                  people))
    if not quick:
        beyond = parse_shape(P9_BEYOND[0])
        cases.append((f"at {beyond}, twice the trained scale (held-out prompts; beyond training)", beyond,
                      P9_BEYOND[1], None))
    rows, shapes_seen = [], {}
    for text, shape, n, pairs in cases:
        # People's prompts: each read once, and it must read as the caption it was made from (two
        # prompts may read alike: "gray" and "grey"); ``typed`` names a failure as it was written.
        for prompt, caption in pairs or ():
            if grammar.read(prompt).caption != caption:
                raise RuntimeError(f"embedded.grammar reads {prompt!r} as another scene than it was made from")
        typed = {caption: prompt for prompt, caption in pairs or ()}
        measured = measure([(shape.height, shape.width)], [c for _, c in pairs] if pairs else n, pipe=pipe)
        got = measured["sizes"][f"{shape.height}x{shape.width}"]
        outcomes = [True] * got["agree"] + [False] * (got["total"] - got["agree"])
        judged = card.trained_pixels is None or shape.pixels <= card.trained_pixels
        # People's prompts are judged against the caption they were read as; named as typed.
        failures = [f"{typed[p]} (read as {p}): {why}" if p in typed else f"{p}: {why}" for p, why in got["failures"]]
        rows.append(make_row("P9", f"{name} {text}", stats.proportion(outcomes), "share",
                             ">= 0.8" if judged else None,
                             absolute={"agree": got["agree"], "total": got["total"], "seconds": got["seconds"],
                                       "agree_without_outlines": got["agree_without_outlines"],
                                       "by_shape": got["by_shape"], "failures": failures}))
        if judged:
            for kind, seen in got["by_shape"].items():
                sums = shapes_seen.setdefault(kind, {"right": 0, "named": 0, "drawn": {}})
                sums["right"] += seen["right"]
                sums["named"] += seen["named"]
                for other, times in seen["drawn"].items():
                    sums["drawn"][other] = sums["drawn"].get(other, 0) + times
    # Per shape kind over every judged row: is each kind drawn as itself? (info: the rows above hold the goal)
    for kind, seen in shapes_seen.items():
        if seen["named"]:
            outcomes = [True] * seen["right"] + [False] * (seen["named"] - seen["right"])
            rows.append(make_row("P9", f"{name}: each {kind} the prompts name, drawn as a {kind} (every judged row)",
                                 stats.proportion(outcomes), "share", None,
                                 absolute={"right": seen["right"], "named": seen["named"], "drawn": seen["drawn"]}))
    return rows

def _size(text: str) -> tuple[int, int]:
    h, w = text.lower().split("x")
    return int(h), int(w)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=_size, default=list(DEFAULT_SIZES), help="HxW ...")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", type=Path, default=None, help="pipeline folder (default: the embedded one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--save-images", type=Path, default=None, help="write each image here as PNG")
    args = parser.parse_args(argv)
    result = measure(args.sizes, args.prompts, args.seed, model_dir=args.model,
                     keep_images=args.save_images is not None)
    print(f"{'size':>10}  {'agree':>9}  {'seconds':>8}")
    for size, row in result["sizes"].items():
        print(f"{size:>10}  {row['agree']:>3}/{row['total']:<3} {row['fraction']:>4.0%}  {row['seconds']:>8}")
        print(f"{'':>12}" + ", ".join(f"{kind} {seen['right']}/{seen['named']}"
                                      for kind, seen in row["by_shape"].items()))
        for prompt, reason in row["failures"]:
            print(f"{'':>12}x {prompt}: {reason}")
        if args.save_images:
            args.save_images.mkdir(parents=True, exist_ok=True)
            for i, image in enumerate(row.pop("images")):
                image.save(args.save_images / f"{size}-{i:02d}.png")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
