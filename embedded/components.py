"""The parts the embedded model's training builds on: its configuration and constants, the VAE's
training and latent statistics, and the text encoder's trained tail with the read-outs that teach it
(``embedded.training`` explains the whole recipe and runs it)."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import torch
import torch.nn.functional as F

from embedded import scenes

TRAINED_TEXT_LAYERS = 3  # the last layers of the text encoder that learn
READER_WEIGHT = 0.5  # weight of the text read-out loss next to the flow-matching loss
FULL_PROMPT_TOKENS = 512  # Flux2KleinPipeline's default max_sequence_length
SHORT_PROMPT_TOKENS = 96  # the main phase pads prompts to a random length up to this
GRID_SHARE = 0.85  # share of training sigmas on the pipeline's 4-step schedule (the rest uniform)
SHAPE_LOSS_WEIGHT = 4.0  # extra loss weight of a latent token, times the share of it a shape covers
VAE_SHAPE_WEIGHT = 10.0  # extra VAE loss weight of a pixel a shape covers
EMA_DECAY = 0.998  # the saved weights are this moving average of the main phase's weights
# (height, width, relative frequency): the page's presets for the embedded model (its card: the ~1 MP
# buckets at ~256x256), 1:1 twice as often; every phase trains at them
PRESET_SIZES = ((256, 256, 2), (224, 288, 1), (288, 224, 1), (208, 304, 1), (304, 208, 1), (192, 336, 1),
                (336, 192, 1), (160, 384, 1), (384, 160, 1))



@dataclasses.dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    threads: int = 2  # torch threads; results are reproducible for a given seed and thread count
    vae_steps: int = 1800
    vae_batch: int = 8
    vae_lr: float = 1e-3
    captions: int = 1200  # distinct training captions
    images_per_caption: int = 6  # renders (sizes, jitter) per caption
    # Each render moves a shape by up to 3 % of the side and resizes it by 2 % (the committed weights').
    # False: one outline per caption and size (the jitter blurs the first step's target, a caption's
    # mean image, towards a blob; what turning it off did: docs/embedded-model.md).
    jitter: bool = True
    # Extra loss weight of a latent token, times the share of it where the shape's kind shows
    # (``scenes.outline_pixels``); 0 for the committed weights (docs/embedded-model.md).
    outline_weight: float = 0.0
    steps: int = 6000  # transformer steps at the short prompt length
    finetune_steps: int = 200  # transformer steps at the full 512-token prompt length
    finetune_captions: int = 192
    batch: int = 16
    lr: float = 2e-3
    text_lr: float = 5e-4
    reader_steps: int = 600  # text layers alone, before the transformer (batches of 64 prompts)
    reader_lr: float = 3e-3
    # (height, width, relative frequency) in training, sides multiples of 16: the page's presets for
    # this model (the real model's ~1 MP aspect-ratio buckets at ~256x256 pixels: 1:1, 4:3, 3:2,
    # 16:9, 21:9 and their portraits), the same ratios at ~128x128 (64 image tokens: cheap), and a
    # few squares between 64 and 192.
    sizes: tuple[tuple[int, int, float], ...] = PRESET_SIZES + (
        (128, 128, 4), (112, 144, 0.6), (144, 112, 0.6), (112, 160, 0.6), (160, 112, 0.6), (96, 176, 0.6),
        (176, 96, 0.6), (80, 192, 0.6), (192, 80, 0.6),
        (64, 64, 0.5), (96, 96, 0.5), (160, 160, 0.5), (192, 192, 0.5),
    )


def _progress(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True)


@torch.no_grad()
def keep_average(module: torch.nn.Module, params: list, shadow: list) -> None:
    """End a round: ``params`` take their moving average ``shadow``; ``module`` to eval, frozen."""
    for p, average in zip(params, shadow):
        p.copy_(average)
    module.eval()
    module.requires_grad_(False)


def run_rounds(train_round, pipe, cfgs, keys: tuple[str, ...], log=print) -> dict:
    """``train_round(pipe, cfg, log)`` for every round of ``cfgs``, one after the other, on ``pipe`` in
    place; its timings (``keys``, seconds) summed."""
    timings = dict.fromkeys(keys, 0.0)
    for cfg in cfgs:
        for key, seconds in train_round(pipe, cfg, log).items():
            timings[key] += seconds
    return timings


def _to_tensor(images: list[np.ndarray]) -> torch.Tensor:
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float()
    return x / 127.5 - 1.0


# --- 1. VAE -----------------------------------------------------------------------------------------

def _shape_pixels(scene: scenes.Scene, image: np.ndarray) -> np.ndarray:
    """(H, W) bool: the pixels of a rendered scene that its shapes cover (not its background)."""
    height, width = image.shape[:2]
    return np.any(image != scene.background.render(height, width).astype(np.uint8), axis=-1)


def _cover(mask: np.ndarray) -> np.ndarray:
    """(H, W) bool -> the share of each 16x16 patch (a packed latent token) it covers, row-major."""
    h, w = mask.shape
    return mask.reshape(h // 16, 16, w // 16, 16).mean(axis=(1, 3)).reshape(-1)


def render_weights(scene: scenes.Scene, placed: list[scenes.Placed], image: np.ndarray,
                   outline_weight: float, side: float | None = None) -> np.ndarray:
    """A render's loss weight per latent token: 1, plus SHAPE_LOSS_WEIGHT times the share of it a shape
    covers, plus ``outline_weight`` times the share where a shape's kind shows (``scenes.outline_pixels``)."""
    weight = 1.0 + SHAPE_LOSS_WEIGHT * _cover(_shape_pixels(scene, image))
    if outline_weight:
        weight = weight + outline_weight * _cover(scenes.outline_pixels(placed, *image.shape[:2], side))
    return weight


def training_render(scene: scenes.Scene, height: int, width: int, rng: random.Random, jitter: bool,
                    outline_weight: float, shape_size: str | int = "shorter") -> tuple[np.ndarray, np.ndarray]:
    """(image, its tokens' loss weights) of a caption's scene, its shapes jittered by ``rng`` if ``jitter``,
    sized by ``shape_size`` (``scenes.shape_side``)."""
    placed = scenes.place(scene, rng if jitter else None)
    side = scenes.shape_side(height, width, shape_size)
    image = scenes.draw(scene.background, placed, height, width, side)
    return image, render_weights(scene, placed, image, outline_weight, side)


def train_vae(vae, cfg: TrainConfig) -> None:
    rng = random.Random(cfg.seed * 1000 + 1)
    opt = torch.optim.Adam(vae.parameters(), lr=cfg.vae_lr)
    vae.train()
    small = [(64, 64), (64, 96), (96, 64), (96, 96)]
    with _progress(cfg.vae_steps, "vae") as bar:
        for step in range(cfg.vae_steps):
            h, w = rng.choice(small)
            batch, masks = [], []
            for _ in range(cfg.vae_batch):
                scene = scenes.sample_scene(rng, held_out=None)
                batch.append(scenes.render(scene, h, w, rng))
                masks.append(_shape_pixels(scene, batch[-1]))
            x = _to_tensor(batch)
            # Shapes are a small share of the pixels, but their colours are what a prompt names.
            weight = 1.0 + VAE_SHAPE_WEIGHT * torch.from_numpy(np.stack(masks)).float().unsqueeze(1)
            for group in opt.param_groups:
                group["lr"] = _lr_at(step, cfg.vae_steps, cfg.vae_lr, warmup=50)
            # The posterior mean (not a sample: the posterior's unit initial variance drowns the signal
            # and the decoder learns to ignore the latents), and a small pull of it towards zero
            # instead of the KL term.
            z = vae.encode(x).latent_dist.mode()
            recon = vae.decode(z).sample
            err = (recon - x).abs() + (recon - x).pow(2)
            loss = (err * weight).sum() / (weight.sum() * 3) + 1e-4 * z.pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.4f}")
            bar.update()
    vae.eval()
    with torch.no_grad():
        x = _to_tensor([scenes.render(scenes.sample_scene(rng, held_out=True), 128, 128) for _ in range(8)])
        recon = vae.decode(vae.encode(x).latent_dist.mode()).sample
    print(f"vae: held-out reconstruction L1 {F.l1_loss(recon, x).item():.3f} (images in -1..1)", flush=True)


@torch.no_grad()
def encode_patchified(pipe, x: torch.Tensor) -> torch.Tensor:
    """Images in -1..1 -> the pipeline's patchified latents (B, 4C, H/16, W/16), before bn."""
    return pipe._patchify_latents(pipe.vae.encode(x).latent_dist.mode())


@torch.no_grad()
def set_latent_stats(pipe, cfg: TrainConfig) -> None:
    """Set vae.bn running stats from the trained encoder's patchified latents over the scene set."""
    rng = random.Random(cfg.seed * 1000 + 2)
    feats = []
    for _ in range(16):
        batch = [scenes.render(scenes.sample_scene(rng, held_out=None), 128, 128, rng) for _ in range(16)]
        z = encode_patchified(pipe, _to_tensor(batch))
        feats.append(z.permute(0, 2, 3, 1).reshape(-1, z.shape[1]))
    feats = torch.cat(feats)
    bn = pipe.vae.bn
    bn.running_mean.copy_(feats.mean(0))
    bn.running_var.copy_(feats.var(0))
    bn.num_batches_tracked.fill_(1)


def normalise(pipe, z: torch.Tensor) -> torch.Tensor:
    bn = pipe.vae.bn
    mean = bn.running_mean.view(1, -1, 1, 1)
    std = torch.sqrt(bn.running_var.view(1, -1, 1, 1) + pipe.vae.config.batch_norm_eps)
    return (z - mean) / std


# --- 2. text --------------------------------------------------------------------------------------

def _token_ids(pipe, captions: list[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids, masks = [], []
    for caption in captions:
        text = pipe.tokenizer.apply_chat_template([{"role": "user", "content": caption}], tokenize=False,
                                                  add_generation_prompt=True, enable_thinking=False)
        enc = pipe.tokenizer(text, return_tensors="pt", padding="max_length", truncation=True, max_length=length)
        ids.append(enc["input_ids"])
        masks.append(enc["attention_mask"])
    return torch.cat(ids), torch.cat(masks)


def prompt_length(pipe, captions: list[str]) -> int:
    ids, mask = _token_ids(pipe, captions, FULL_PROMPT_TOKENS)
    return int(mask.sum(1).max())


@torch.no_grad()
def frozen_text_states(pipe, captions: list[str], length: int) -> dict[str, torch.Tensor]:
    """Hidden states 9 and 18 (frozen layers) and the input of the trained layers, per caption."""
    te = pipe.text_encoder
    n_layers = te.config.num_hidden_layers
    h9, h18, h_in, masks = [], [], [], []
    for start in range(0, len(captions), 32):
        ids, mask = _token_ids(pipe, captions[start:start + 32], length)
        out = te(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
        h9.append(out.hidden_states[9])
        h18.append(out.hidden_states[18])
        h_in.append(out.hidden_states[n_layers - TRAINED_TEXT_LAYERS])
        masks.append(mask)
    return {"h9": torch.cat(h9), "h18": torch.cat(h18), "h_in": torch.cat(h_in), "mask": torch.cat(masks)}


class TrainedTextTail(torch.nn.Module):
    """The text encoder's last layers + final norm, run on cached inputs: gives hidden state 27."""

    def __init__(self, text_encoder):
        super().__init__()
        self.model = text_encoder.model
        self.tail = torch.nn.ModuleList(list(self.model.layers)[-TRAINED_TEXT_LAYERS:])

    def forward(self, h_in: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_causal_mask

        model = self.model
        position_ids = torch.arange(h_in.shape[1]).unsqueeze(0)
        causal = create_causal_mask(config=model.config, inputs_embeds=h_in, attention_mask=mask,
                                    cache=None, position_ids=position_ids)
        pos = model.rotary_emb(h_in, position_ids)
        hidden = h_in
        for layer in self.tail:
            hidden = layer(hidden, attention_mask=causal, position_embeddings=pos, position_ids=position_ids)
        return model.norm(hidden)


_BACKGROUNDS = scenes.all_backgrounds()
_COLOURS, _SHAPES = list(scenes.COLOURS), list(scenes.SHAPES)
_POSITION_TOKENS = {" " + name for name in scenes.POSITIONS}
_BACKGROUND_TOKENS = {" " + b.phrase.split()[-1] for b in _BACKGROUNDS}


def reading_targets(pipe, captions: list[str], length: int) -> torch.Tensor:
    """What the trained text layers must make readable, per token: (N, length, 3) class indices,
    -1 where nothing is asked. At each position word ("left", ...): the colour and the shape of its
    phrase; at the background's last word ("stripes", ...): which background it is. The causal
    text encoder sees a phrase's colour and shape only from its last word, so that word is where
    the whole phrase can be read, and where the transformer's image tokens can look for it."""
    ids, _mask = _token_ids(pipe, captions, length)
    out = torch.full((len(captions), length, 3), -1, dtype=torch.long)
    for row, caption in enumerate(captions):
        scene = scenes.parse_caption(caption)
        words = [pipe.tokenizer.decode([i]) for i in ids[row].tolist()]
        positions = [j for j, w in enumerate(words) if w in _POSITION_TOKENS]
        backgrounds = [j for j, w in enumerate(words) if w in _BACKGROUND_TOKENS]
        if len(positions) != len(scene.shapes) or len(backgrounds) != 1:
            raise ValueError(f"tokenizer does not hold the grammar's words whole: {caption!r} -> {words}")
        for j, spec in zip(positions, scene.shapes):
            out[row, j, 0] = _COLOURS.index(spec.colour)
            out[row, j, 1] = _SHAPES.index(spec.shape)
        out[row, backgrounds[0], 2] = _BACKGROUNDS.index(scene.background)
    return out


class Reader(torch.nn.Module):
    """Linear read-outs of hidden state 27, used only in training (not saved with the model)."""

    def __init__(self, width: int):
        super().__init__()
        self.heads = torch.nn.ModuleList(torch.nn.Linear(width, n) for n in
                                         (len(_COLOURS), len(_SHAPES), len(_BACKGROUNDS)))

    def loss(self, h27: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        total = h27.new_zeros(())
        for k, head in enumerate(self.heads):
            keep = targets[..., k] >= 0
            total = total + F.cross_entropy(head(h27[keep]), targets[..., k][keep])
        return total


def prompt_embeds(h9, h18, h27) -> torch.Tensor:
    """The pipeline's layout: hidden states (9, 18, 27) stacked, then interleaved per token."""
    out = torch.stack([h9, h18, h27], dim=1)
    b, c, t, d = out.shape
    return out.permute(0, 2, 1, 3).reshape(b, t, c * d)


# --- 3. transformer ---------------------------------------------------------------------------------

def _lr_at(step: int, total: int, peak: float, warmup: int = 40) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))
