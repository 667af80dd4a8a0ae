"""Teach the trained embedded model to edit a reference image (``embedded.editing``), on the CPU.

Run: ``python -m embedded train-edits K --dest D`` on a folder K that ``python -m embedded
train-kinds`` wrote (``python -m embedded train`` ends with this phase): loads K, trains it in the
rounds of ``rounds``, saves D (``--from-round N`` goes on from a folder that holds rounds 1 to N-1,
such as the one committed after round N-1). One seed; the same seed on the same machine (and
thread count) gives the same weights.

The objective is the text-to-image one (``embedded.training``: flow matching on the pipeline's
4-step schedule) with the reference as Flux2KleinPipeline passes it: the reference's VAE latents
(posterior mode, patchified, bn-normalised, packed) appended after the noisy image tokens, with the
pipeline's own position ids for them (``_prepare_image_ids``: time coordinate 10, then the
reference's rows and columns), and the loss on the image tokens only. The instruction's text states
come from the (frozen) text encoder exactly as the pipeline computes them, at the length the app
serves the model at (``EditConfig.prompt_tokens``, the card's; the committed rounds': 64). A
latent token's loss is weighted up by the share of it a target shape covers and, more, by the share
of it the edit changes (``EditConfig.balanced``: each edit's weights scaled to a mean of 1, every
edit weighing the same in a batch). Text-to-image batches
(no reference) are mixed in, so that the model still draws a caption from nothing (P9). Only the
transformer learns; what is saved is an exponential moving average of its weights.
"""

from __future__ import annotations

import dataclasses
import random
import time

import numpy as np
import torch

from embedded import editing, scenes
from embedded.components import (
    FULL_PROMPT_TOKENS,
    PRESET_SIZES,
    SHORT_PROMPT_TOKENS,
    TrainConfig,
    _cover,
    _lr_at,
    _progress,
    _to_tensor,
    encode_patchified,
    keep_average,
    normalise,
    render_weights,
    run_rounds,
    training_render,
)
from embedded.kinds_training import PROMPT_TOKENS
from embedded.training import flow_loss

EDIT_LOSS_WEIGHT = 8.0  # extra loss weight of a latent token, times the share of it the edit changes


@dataclasses.dataclass(frozen=True)
class EditConfig:
    seed: int = 0
    threads: int = 2
    pairs: int = 4000  # (reference, target) renders
    captions: int = 1200  # text-to-image renders mixed in
    steps: int = 5000
    batch: int = 16
    lr: float = 8e-4
    text_to_image_share: float = 0.4
    uncoloured_share: float = 0.2  # instructions that name a shape without its colour ("remove the star")
    kinds: tuple[str, ...] = editing.KINDS  # the edits drawn, uniformly: a kind named twice comes twice as often
    # The phase first grows the transformer to this many single-stream blocks (``grow``): room for
    # the second job without taking the first one's.
    single_layers: int = 3
    full_prompt_share: float = 0.05  # steps at the pipeline's full 512 tokens
    ema_decay: float = 0.995
    # (height, width, relative frequency): the presets' aspect ratios at ~128x128 pixels, and 256x256
    sizes: tuple[tuple[int, int, float], ...] = (
        (128, 128, 4), (112, 144, 1), (144, 112, 1), (112, 160, 1), (160, 112, 1), (96, 176, 1), (176, 96, 1),
        (80, 192, 0.6), (192, 80, 0.6), (256, 256, 1),
    )
    # the text-to-image renders mixed in: the main phase's sizes, every preset among them (with the
    # edits' sizes only, the model forgot how to place shapes at the wide presets: 11 of 32 at 384x160)
    text_to_image_sizes: tuple[tuple[int, int, float], ...] = TrainConfig.sizes
    # Scale each edit's token weights to a mean of 1, so that every edit weighs the same in a batch
    # (unscaled, an edit that changes the whole background outweighs a recolour of one shape ~6 to 1).
    balanced: bool = False
    # Jitter each text-to-image render's shapes (place and size), as the main phase's ``jitter``.
    jitter: bool = True
    outline_weight: float = 0.0  # as the main phase's: on the targets of edits and text-to-image renders
    # what a shape's radius is a share of, in every render (``scenes.shape_side``)
    shape_size: str = "shorter"
    # 0: prompts cut at random lengths up to SHORT_PROMPT_TOKENS, full_prompt_share of the steps at
    # 512 (the pipeline's default); N: every step at exactly N tokens, the length the app serves at
    # (the folder's card, ``max_sequence_length``)
    prompt_tokens: int = 0


# The phase's rounds (``rounds``), on the kinds phase's transformer (``embedded.kinds_training``): the
# text-to-image renders mixed in at the presets only and drawn as that phase drew them (exactly at
# their places, the outline weighed up), shapes one size in pixels, prompts at the served 64 tokens;
# recolour and remove drawn twice as often as the others, the wide presets' sizes among the edits'
# and every edit weighing the same in a batch (what the earlier edit phase, on the first phases'
# transformer, found its ten rounds: docs/embedded-model.md). One thread, as they were trained.
# Seeds 12 on: that earlier phase's rounds had 0 to 11.
_ON_KINDS = {"threads": 1, "pairs": 3000, "captions": 3000, "batch": 8, "balanced": True,
             "kinds": ("recolour",) * 2 + ("background", "move", "add") + ("remove",) * 2,
             "sizes": EditConfig.sizes + ((160, 384, 2), (384, 160, 2), (192, 336, 1), (336, 192, 1)),
             "text_to_image_sizes": PRESET_SIZES, "jitter": False, "outline_weight": 8.0, "shape_size": "area",
             "prompt_tokens": PROMPT_TOKENS}
# The first: 6,000 steps, 40 % text to image (after it, at the presets: 12 to 16 of 40 held-out edits,
# and the kinds phase's 40 to 44 of 48 prompts became 35 to 43).
FIRST_ROUND = {**_ON_KINDS, "seed": 12, "steps": 6000, "lr": 5e-4, "text_to_image_share": 0.4}
# The second: 6,000 more at a lower rate, half of them text to image (after it, 40 to 45 of 48 prompts
# at every preset, and 20 to 22 of 40 edits, as many as the earlier edit phase's ten rounds drew with
# the outlines judged; 35 % text to image at lr 4e-4 drew as many edits and 38 of 48 at 21:9).
SECOND_ROUND = {**_ON_KINDS, "seed": 13, "steps": 6000, "lr": 3e-4, "text_to_image_share": 0.5}
ROUNDS = (FIRST_ROUND, SECOND_ROUND)


def rounds(seed: int = 0, **overrides) -> tuple[EditConfig, ...]:
    """The edit phase's rounds (``ROUNDS``), each from where the one before ended, seeds offset by
    ``seed``; ``overrides`` (steps, pairs, batch, threads, ...) apply to every round."""
    return tuple(EditConfig(**{**r, "seed": seed + r["seed"], **overrides}) for r in ROUNDS)


@dataclasses.dataclass
class Batchable:
    """Samples of one size: target latents (N, L, C), reference latents (N, L, C) or None, text row
    (N,), token weights (N, L); and the position ids of both."""

    x0: torch.Tensor
    ref: torch.Tensor | None
    text: torch.Tensor
    weight: torch.Tensor
    ids: torch.Tensor
    ref_ids: torch.Tensor | None


@torch.no_grad()
def _encode(pipe, images: list[np.ndarray]) -> torch.Tensor:
    out = []
    for start in range(0, len(images), 32):
        out.append(normalise(pipe, encode_patchified(pipe, _to_tensor(images[start:start + 32]))))
    return torch.cat(out)


@torch.no_grad()
def build_data(pipe, cfg: EditConfig, texts: list[str]) -> tuple[dict, dict]:
    """(edit samples by size, text-to-image samples by size), as ``Batchable``; the text rows index
    ``texts``, to which each instruction and caption is appended as it is first drawn."""
    rng = random.Random(cfg.seed * 1000 + 11)
    row = {t: i for i, t in enumerate(texts)}

    def text_row(text: str) -> int:
        if text not in row:
            row[text] = len(texts)
            texts.append(text)
        return row[text]

    sizes, freq = [(h, w) for h, w, _ in cfg.sizes], [f for _, _, f in cfg.sizes]
    edits: dict = {s: [] for s in sizes}
    for _ in range(cfg.pairs):
        edit = editing.sample_edit(rng, kinds=cfg.kinds)
        h, w = rng.choices(sizes, freq)[0]
        ref_placed, target_placed = editing.placements(edit, rng)
        side = scenes.shape_side(h, w, cfg.shape_size)
        ref = scenes.draw(edit.reference.background, ref_placed, h, w, side)
        target = scenes.draw(edit.target.background, target_placed, h, w, side)
        changed = np.any(ref != target, axis=-1)
        weight = (render_weights(edit.target, target_placed, target, cfg.outline_weight, side)
                  + EDIT_LOSS_WEIGHT * _cover(changed))
        if cfg.balanced:
            weight = weight / weight.mean()
        words = editing.without_colour(edit) if rng.random() < cfg.uncoloured_share else edit.instruction
        edits[(h, w)].append((ref, target, text_row(words), weight))
    t2i_sizes, t2i_freq = [(h, w) for h, w, _ in cfg.text_to_image_sizes], [f for *_, f in cfg.text_to_image_sizes]
    t2i: dict = {s: [] for s in t2i_sizes}
    for _ in range(cfg.captions):
        scene = scenes.sample_scene(rng)
        h, w = rng.choices(t2i_sizes, t2i_freq)[0]
        image, weight = training_render(scene, h, w, rng, cfg.jitter, cfg.outline_weight, cfg.shape_size)
        t2i[(h, w)].append((None, image, text_row(scene.caption), weight))
    out = []
    with _progress(cfg.pairs * 2 + cfg.captions, "encode") as bar:
        for group in (edits, t2i):
            done = {}
            for size, items in group.items():
                if not items:
                    continue
                x0 = _encode(pipe, [t for _, t, _, _ in items])
                ref = _encode(pipe, [r for r, _, _, _ in items]) if items[0][0] is not None else None
                bar.update(len(items) * (2 if ref is not None else 1))
                ids = pipe._prepare_latent_ids(x0[:1])[0]
                ref_ids = pipe._prepare_image_ids([ref[:1]])[0] if ref is not None else None
                done[size] = Batchable(pipe._pack_latents(x0), pipe._pack_latents(ref) if ref is not None else None,
                                       torch.tensor([i for _, _, i, _ in items]),
                                       torch.from_numpy(np.stack([wt for *_, wt in items])).float(), ids, ref_ids)
            out.append(done)
    return out[0], out[1]


@torch.no_grad()
def text_states(pipe, texts: list[str], length: int = FULL_PROMPT_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt embeds at ``length`` tokens (N, length, D), each text's token count (N,)). Causal
    attention: a prompt's first n states are the same at any length of n or more."""
    embeds, lengths = [], []
    for start in range(0, len(texts), 32):
        chunk = texts[start:start + 32]
        embeds.append(pipe._get_qwen3_prompt_embeds(pipe.text_encoder, pipe.tokenizer, chunk,
                                                   max_sequence_length=length))
        for text in chunk:
            templ = pipe.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                       add_generation_prompt=True, enable_thinking=False)
            lengths.append(len(pipe.tokenizer(templ)["input_ids"]))
    return torch.cat(embeds), torch.tensor(lengths)


def grow(pipe, single_layers: int) -> int:
    """Give ``pipe``'s transformer ``single_layers`` single-stream blocks by putting new ones first;
    returns how many were added (none when it has that many already). A new block starts as a copy
    of the first one with its output projection at zero: its residual adds nothing, so the grown
    model draws exactly what it drew before, and training gives the block its own job."""
    from diffusers import Flux2Transformer2DModel

    old = pipe.transformer
    add = single_layers - len(old.single_transformer_blocks)
    if add <= 0:
        return 0
    grown = Flux2Transformer2DModel.from_config({**old.config, "num_single_layers": single_layers})
    state = {}
    for key, value in old.state_dict().items():
        if key.startswith("single_transformer_blocks."):
            _, index, rest = key.split(".", 2)
            state[f"single_transformer_blocks.{int(index) + add}.{rest}"] = value
            if index == "0":
                for new in range(add):
                    state[f"single_transformer_blocks.{new}.{rest}"] = (
                        torch.zeros_like(value) if rest.startswith("attn.to_out.") else value.clone())
        else:
            state[key] = value
    grown.load_state_dict(state, strict=True)
    pipe.register_modules(transformer=(grown if grown.dtype == old.dtype else grown.to(old.dtype)).eval())
    return add


def train_rounds(pipe, cfgs, log=print) -> dict:
    """Every round of ``cfgs`` (``rounds``), one after the other, on ``pipe`` in place; summed timings."""
    return run_rounds(train_edits, pipe, cfgs, ("edit_data", "edits"), log)


def train_edits(pipe, cfg: EditConfig = EditConfig(), log=print) -> dict:
    """One round: train ``pipe`` (the trained scene model) to edit, in place; returns timings in
    seconds (none spent when ``cfg.steps`` is 0)."""
    if not cfg.steps:
        return {"edit_data": 0.0, "edits": 0.0}
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    grow(pipe, cfg.single_layers)
    pipe.text_encoder.requires_grad_(False)
    pipe.vae.requires_grad_(False)
    rng = random.Random(cfg.seed * 1000 + 12)
    texts: list[str] = []
    edits, t2i = build_data(pipe, cfg, texts)  # fills texts with the instructions and captions drawn
    embeds, lengths = text_states(pipe, texts, cfg.prompt_tokens or FULL_PROMPT_TOKENS)
    t1 = time.perf_counter()
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + 13)
    tr = pipe.transformer
    tr.requires_grad_(True)
    tr.train()
    params = list(tr.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01)
    shadow = [p.detach().clone() for p in params]
    groups = [(edits, {(h, w): f for h, w, f in cfg.sizes}), (t2i, {(h, w): f for h, w, f in cfg.text_to_image_sizes})]
    smooth = None
    with _progress(cfg.steps, "edits") as bar:
        for step in range(cfg.steps):
            data_by_size, freq = groups[rng.random() < cfg.text_to_image_share]
            sizes = list(data_by_size)
            size = rng.choices(sizes, [freq[s] * len(data_by_size[s].text) ** 0.5 for s in sizes])[0]
            data = data_by_size[size]
            pick = torch.randint(0, len(data.text), (cfg.batch,), generator=gen)
            rows = data.text[pick]
            if cfg.prompt_tokens:
                cut = cfg.prompt_tokens
            else:
                cut = (FULL_PROMPT_TOKENS if rng.random() < cfg.full_prompt_share
                       else rng.randint(int(lengths[rows].max()), SHORT_PROMPT_TOKENS))
            for group in opt.param_groups:
                group["lr"] = _lr_at(step, cfg.steps, cfg.lr)
            loss = flow_loss(pipe, data.x0[pick], embeds[rows, :cut], data.ids, gen, data.weight[pick],
                             None if data.ref is None else data.ref[pick], data.ref_ids)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            with torch.no_grad():
                decay = min(cfg.ema_decay, (1 + step) / (10 + step))
                torch._foreach_lerp_(shadow, [p.detach() for p in params], 1 - decay)
            smooth = loss.item() if smooth is None else 0.98 * smooth + 0.02 * loss.item()
            bar.set_postfix(loss=f"{smooth:.4f}")
            bar.update()
    keep_average(tr, params, shadow)
    timings = {"edit_data": t1 - t0, "edits": time.perf_counter() - t1}
    log("edit training took " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items()))
    return timings

