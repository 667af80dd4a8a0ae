"""Train the embedded FLUX.2-klein on the procedural scene set (``embedded.scenes``), on the CPU.

Run: ``python -m embedded train`` (writes ``assets/scenes-flux2-klein``). Everything comes
from one seed; the same seed on the same machine (and thread count) gives the same weights.

What is trained, in order, and why:
1. The VAE, as an autoencoder on rendered scenes (L1 + MSE of the decoded posterior mean, and a
   small pull of the latents towards zero). A pixel a shape covers weighs ``VAE_SHAPE_WEIGHT``
   times more: with plain averages the shapes, a few percent of the pixels, came back in the wrong
   colour (yellow as orange, cyan as teal), and no transformer can draw a colour its VAE cannot
   decode. Afterwards the latent
   batch-norm running stats (``vae.bn``), which Flux2KleinPipeline uses to normalise the 2x2-patchified
   latents, are set to the trained encoder's latent mean and variance over the scene set.
2. The transformer, with the flow-matching objective exactly as Flux2KleinPipeline calls it:
   packed patchified bn-normalised latents, ``x_t = (1 - s) x0 + s noise``, target ``noise - x0``,
   ``timestep = s`` (the pipeline passes ``t / 1000``), position ids from the pipeline's own helpers,
   and ``s`` drawn mostly (``GRID_SHARE``) from the sigmas of the pipeline's 4-step schedule (with its
   dynamic shift ``mu`` for the image's sequence length), the rest uniformly under the same shift:
   the model only ever has to work for those 4 Euler steps. The loss of a latent token is weighted up
   by the share of it a shape covers (shapes are a small share of the pixels). Training is mostly at
   128x128 (64 image tokens) and 256x256, with a warm-up and a cosine decay of the learning rate;
   what is saved is an exponential moving average of the weights (``EMA_DECAY``).
   The text encoder stays frozen at random weights except its last three layers and final norm:
   they produce hidden state 27 (one of the three the pipeline concatenates). Frozen random layers
   alone do not let the transformer tell "a red circle on the left" from "a red circle on the
   right" in a CPU-sized training budget (tried: 0 of 16 held-out prompts). So these layers first
   learn, on their own and cheaply, to make each phrase readable at its last word: linear read-outs
   of hidden state 27 must name the colour and shape of each shape phrase at its position word and
   the background at its last word (``reading_targets``, ``Reader``; the read-outs are not part of
   the saved model). That loss stays on, at half weight, while they go on learning with the
   transformer. Layers 1-24 are run once per caption, up front. The tokenizer holds the grammar's
   words whole (``embedded.recipe.SCENES_GEOMETRY.vocab_words``), as a real BPE vocabulary holds common
   words, so a word is one token. Prompts are padded to a random length between the longest
   caption and ``SHORT_PROMPT_TOKENS``, so that the transformer meets padding tokens at many
   positions.
3. A short final phase at the pipeline's full 512-token prompt length (the main phase pads prompts
   to at most ``SHORT_PROMPT_TOKENS``, which is several times cheaper), with the text encoder frozen.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time

import numpy as np
import torch

from embedded import scenes
from embedded.components import (
    EMA_DECAY,
    FULL_PROMPT_TOKENS,
    GRID_SHARE,
    READER_WEIGHT,
    SHORT_PROMPT_TOKENS,
    Reader,
    TrainConfig,
    TrainedTextTail,
    _lr_at,
    _progress,
    _to_tensor,
    encode_patchified,
    frozen_text_states,
    normalise,
    prompt_embeds,
    prompt_length,
    reading_targets,
    set_latent_stats,
    train_vae,
    training_render,
)


def _mu(pipe, image_seq_len: int, steps: int = 4) -> float:
    from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu

    return compute_empirical_mu(image_seq_len=image_seq_len, num_steps=steps)


def _shift(mu: float, s: torch.Tensor) -> torch.Tensor:
    # FlowMatchEulerDiscreteScheduler.time_shift (exponential): exp(mu) / (exp(mu) + (1/s - 1))
    return math.exp(mu) / (math.exp(mu) + (1 / s - 1))


def sample_sigmas(pipe, batch: int, image_seq_len: int, gen: torch.Generator) -> torch.Tensor:
    mu = _mu(pipe, image_seq_len)
    grid = torch.tensor(np.linspace(1.0, 1 / 4, 4), dtype=torch.float32)
    pick = grid[torch.randint(0, 4, (batch,), generator=gen)]
    uniform = torch.rand(batch, generator=gen).clamp(1e-3, 1.0)
    use_grid = torch.rand(batch, generator=gen) < GRID_SHARE
    return _shift(mu, torch.where(use_grid, pick, uniform))


@dataclasses.dataclass
class LatentSet:
    """Training latents grouped by size: size -> (x0 packed (N, L, C), caption index (N,),
    per-token loss weight (N, L))."""

    by_size: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    ids: dict[tuple[int, int], torch.Tensor]


@torch.no_grad()
def build_latents(pipe, captions: list[str], cfg: TrainConfig) -> LatentSet:
    rng = random.Random(cfg.seed * 1000 + 3)
    sizes = [(h, w) for h, w, _ in cfg.sizes]
    weights = [f for _, _, f in cfg.sizes]
    jobs: dict[tuple[int, int], list[tuple[int, np.ndarray, np.ndarray]]] = {s: [] for s in sizes}
    for index, caption in enumerate(captions):
        scene = scenes.parse_caption(caption)
        for _ in range(cfg.images_per_caption):
            h, w = rng.choices(sizes, weights)[0]
            image, weight = training_render(scene, h, w, rng, cfg.jitter, cfg.outline_weight)
            jobs[(h, w)].append((index, image, weight))
    by_size, ids = {}, {}
    total = sum(len(v) for v in jobs.values())
    with _progress(total, "encode") as bar:
        for size, items in jobs.items():
            if not items:
                continue
            xs = []
            for start in range(0, len(items), 32):
                chunk = items[start:start + 32]
                z = normalise(pipe, encode_patchified(pipe, _to_tensor([im for _, im, _ in chunk])))
                xs.append(z)
                bar.update(len(chunk))
            z = torch.cat(xs)
            ids[size] = pipe._prepare_latent_ids(z[:1])[0]
            by_size[size] = (pipe._pack_latents(z), torch.tensor([i for i, _, _ in items]),
                             torch.from_numpy(np.stack([wt for _, _, wt in items])).float())
    return LatentSet(by_size, ids)


def flow_loss(pipe, x0, embeds, img_ids, gen, weight, reference=None, reference_ids=None) -> torch.Tensor:
    """Flow matching at a sampled sigma: the transformer's velocity against noise - x0, per latent
    token weighted by ``weight``. ``reference`` (B, R, C) and ``reference_ids`` (R, 3): an edit's
    reference latents, appended after the noisy tokens as Flux2KleinPipeline passes them; the loss
    is on the image tokens only."""
    b, seq, _ = x0.shape
    sigma = sample_sigmas(pipe, b, seq, gen)
    noise = torch.randn(x0.shape, generator=gen)
    s = sigma.view(-1, 1, 1)
    hidden = (1 - s) * x0 + s * noise
    ids = img_ids.unsqueeze(0).expand(b, -1, -1)
    if reference is not None:
        hidden = torch.cat([hidden, reference], dim=1)
        ids = torch.cat([ids, reference_ids.unsqueeze(0).expand(b, -1, -1)], dim=1)
    pred = pipe.transformer(hidden_states=hidden, timestep=sigma, guidance=None, encoder_hidden_states=embeds,
                            txt_ids=pipe._prepare_text_ids(embeds), img_ids=ids, return_dict=False)[0][:, :seq]
    per_token = (pred - (noise - x0)).pow(2).mean(-1)
    return (per_token * weight).sum() / weight.sum()


def train_transformer(pipe, captions: list[str], latents: LatentSet, cfg: TrainConfig) -> None:
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + 4)
    rng = random.Random(cfg.seed * 1000 + 5)
    shortest = prompt_length(pipe, captions)
    length = max(shortest + 8, SHORT_PROMPT_TOKENS)
    cache = frozen_text_states(pipe, captions, length)
    tail = TrainedTextTail(pipe.text_encoder)
    te = pipe.text_encoder
    te.requires_grad_(False)
    tail.tail.requires_grad_(True)
    te.model.norm.requires_grad_(True)
    text_params = list(tail.tail.parameters()) + list(te.model.norm.parameters())
    tr = pipe.transformer
    tr.train()
    opt = torch.optim.AdamW([{"params": tr.parameters(), "lr": cfg.lr, "peak": cfg.lr},
                             {"params": text_params, "lr": cfg.text_lr, "peak": cfg.text_lr}],
                            weight_decay=0.01)
    sizes = list(latents.by_size)
    weights = [dict(((h, w), f) for h, w, f in cfg.sizes)[s] * len(latents.by_size[s][1]) ** 0.5 for s in sizes]

    reader = Reader(te.config.hidden_size)
    targets = reading_targets(pipe, captions, length)
    opt.add_param_group({"params": reader.parameters(), "lr": cfg.text_lr, "peak": cfg.text_lr})

    def step_on(size, embeds_fn, step, total):
        x0_all, cap_all, w_all = latents.by_size[size]
        pick = torch.randint(0, len(cap_all), (cfg.batch,), generator=gen)
        embeds, reading = embeds_fn(cap_all[pick])
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, total, group["peak"])
        loss = flow_loss(pipe, x0_all[pick], embeds, latents.ids[size], gen, w_all[pick])
        opt.zero_grad(set_to_none=True)
        (loss + READER_WEIGHT * reading).backward()
        torch.nn.utils.clip_grad_norm_(tr.parameters(), 1.0)
        opt.step()
        return loss.item(), float(reading.detach()) if torch.is_tensor(reading) else reading

    def short_embeds(idx):
        # Padding to a random length (causal attention: the prompt's own states do not change), so
        # that the transformer meets pad tokens at many positions, as it will at 512 tokens.
        cut = rng.randint(shortest, length)
        h27 = tail(cache["h_in"][idx, :cut], cache["mask"][idx, :cut])
        return (prompt_embeds(cache["h9"][idx, :cut], cache["h18"][idx, :cut], h27),
                reader.loss(h27, targets[idx, :cut]))

    te.train()
    # First the text layers alone learn to make each phrase readable at its last word (cheap: no
    # images), so that the transformer starts from prompts it can tell apart.
    text_opt = torch.optim.AdamW(text_params + list(reader.parameters()), lr=cfg.reader_lr)
    with _progress(cfg.reader_steps, "text") as bar:
        for step in range(cfg.reader_steps):
            idx = torch.randint(0, len(captions), (64,), generator=gen)
            for group in text_opt.param_groups:
                group["lr"] = _lr_at(step, cfg.reader_steps, cfg.reader_lr)
            loss = reader.loss(tail(cache["h_in"][idx], cache["mask"][idx]), targets[idx])
            text_opt.zero_grad(set_to_none=True)
            loss.backward()
            text_opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")
            bar.update()
    # An exponential moving average of the weights (transformer and trained text layers together,
    # since one reads the other's output) is what is kept: it smooths out the last steps' noise.
    averaged = [p for group in opt.param_groups[:2] for p in group["params"]]
    shadow = [p.detach().clone() for p in averaged]
    smooth = None
    with _progress(cfg.steps, "transformer") as bar:
        for step in range(cfg.steps):
            loss, reading = step_on(rng.choices(sizes, weights)[0], short_embeds, step, cfg.steps)
            with torch.no_grad():
                decay = min(EMA_DECAY, (1 + step) / (10 + step))
                torch._foreach_lerp_(shadow, [p.detach() for p in averaged], 1 - decay)
            smooth = loss if smooth is None else 0.98 * smooth + 0.02 * loss
            bar.set_postfix(loss=f"{smooth:.4f}", text=f"{reading:.3f}")
            bar.update()
    with torch.no_grad():
        for p, avg in zip(averaged, shadow):
            p.copy_(avg)
    del shadow
    te.eval()
    te.requires_grad_(False)
    cache.clear()  # the text states go (short_embeds above keeps the dict, not them)

    if cfg.finetune_steps:
        # Full-length prompts: the image tokens now also attend to ~400 more padding tokens.
        subset = sorted(rng.sample(range(len(captions)), min(cfg.finetune_captions, len(captions))))
        with torch.no_grad():
            full = []
            for start in range(0, len(subset), 16):
                chunk = [captions[i] for i in subset[start:start + 16]]
                full.append(pipe._get_qwen3_prompt_embeds(te, pipe.tokenizer, chunk,
                                                          max_sequence_length=FULL_PROMPT_TOKENS))
            full = torch.cat(full)
        row = torch.full((len(captions),), -1, dtype=torch.long)
        row[torch.tensor(subset)] = torch.arange(len(subset))
        ft_latents = LatentSet({}, latents.ids)
        for size, (x0, cap, wt) in latents.by_size.items():
            keep = row[cap] >= 0
            if keep.any():
                ft_latents.by_size[size] = (x0[keep], row[cap[keep]], wt[keep])
        latents_saved, latents.by_size = latents.by_size, ft_latents.by_size
        sizes = list(latents.by_size)
        weights = [dict(((h, w), f) for h, w, f in cfg.sizes)[s] for s in sizes]
        for group in opt.param_groups:
            group["peak"] *= 0.3
        with _progress(cfg.finetune_steps, "transformer@512") as bar:
            for step in range(cfg.finetune_steps):
                loss, _ = step_on(rng.choices(sizes, weights)[0], lambda idx: (full[idx], 0.0), step,
                                  cfg.finetune_steps)
                smooth = 0.9 * smooth + 0.1 * loss
                bar.set_postfix(loss=f"{smooth:.4f}")
                bar.update()
        latents.by_size = latents_saved
    tr.eval()


def training_captions(cfg: TrainConfig) -> list[str]:
    rng = random.Random(cfg.seed * 1000 + 6)
    out: dict[str, None] = {}
    while len(out) < cfg.captions:
        out[scenes.sample_scene(rng, held_out=False).caption] = None
    return list(out)


def train(pipe, cfg: TrainConfig = TrainConfig(), log=print) -> dict:
    """Train ``pipe`` (a freshly built tiny pipeline) in place; returns timings in seconds."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    timings = {}
    t0 = time.perf_counter()
    train_vae(pipe.vae, cfg)
    set_latent_stats(pipe, cfg)
    timings["vae"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    captions = training_captions(cfg)
    latents = build_latents(pipe, captions, cfg)
    timings["data"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    train_transformer(pipe, captions, latents, cfg)
    timings["transformer"] = time.perf_counter() - t2
    timings["total"] = time.perf_counter() - t0
    log("training took " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items()))
    return timings
