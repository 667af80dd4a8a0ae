"""What a signature needs of one NeuronCore's memory (HBM), planned by the model's real geometry:
its weights (a tensor-parallel rank's share), plus the largest of what each phase of a run holds at
once — the attention scores a fallback materialises (``backend.hardware.kernels``) and the widest
activations. An estimate, and a lower bound: the runtime's own buffers and NEFF programs are not in
it. Nothing here was measured on Trainium.

The geometry is read from the model folder without loading it: the configs, and the tensors' shapes
from the safetensors headers. A core's memory is the runtime's own figure where TorchNeuron gives one
(``get_device_properties(...).total_memory``), else the chip's HBM shared among its logical cores
(``CHIPS``, from AWS's architecture pages: ``tests/standin/captures/hardware/hbm.json``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import json
import math
import struct
from pathlib import Path
from typing import Any, Mapping

from backend.hardware.kernels import SEQ_MULTIPLE, Attention
from backend.shapes import MULTIPLE, Shape

GIB = 2**30
TEXT_TOKENS = 512  # Flux2KleinPipeline pads every prompt to max_sequence_length (512): captures/models
# Chip -> (physical NeuronCores, HBM GiB); a logical core (LNC) combines LNC physical cores' memory.
CHIPS = {"trn1": (2, 32), "inf2": (2, 32), "trn2": (8, 96), "trn3": (8, 144)}
MAX_HEADER = 100_000_000  # the safetensors format's own bound on a header
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ACTIVATION_COPIES = 2  # the widest tensor of a block and its input, alive at once
# Full-resolution tensors alive at once in the VAE decoder's last block, run op by op (eager, as the
# VAE always runs here): what the stand-in's allocator counted for the tiny model's decode.
DECODE_COPIES = 5


def hbm_per_core(target: str | None, lnc: int | None) -> int | None:
    """Bytes of HBM one logical NeuronCore has on ``target`` (trn2, trn3) at ``lnc``; None if unknown."""
    physical, gib = CHIPS.get(str(target or "").lower(), (None, 0))
    return None if physical is None else gib * GIB * max(1, lnc or 1) // physical


def _tensor_elements(folder: Path) -> dict[str, int]:
    """Each tensor's element count, from the headers of the folder's safetensors files."""
    out: dict[str, int] = {}
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size > MAX_HEADER:
                raise ValueError(f"{path}: a safetensors header of {size} bytes")
            header = json.loads(handle.read(size))
        for name, info in header.items():
            if name != "__metadata__":
                out[name] = math.prod(info["shape"])
    return out


@dataclasses.dataclass(frozen=True)
class Geometry:
    heads: int
    head_dim: int
    mlp_ratio: float
    text_heads: int
    text_head_dim: int
    text_width: int  # the text encoder's widest layer (its MLP)
    vae_channels: tuple[int, ...]
    vae_attention: bool  # the VAE's mid-blocks attend (one head, as wide as the last block)
    transformer_sharded: int  # parameters the tensor-parallel plan splits across ranks
    transformer_replicated: int
    other_parameters: int  # text encoder and VAE: whole on every rank
    text_tokens: int = TEXT_TOKENS  # every prompt is padded to this (the folder's card may say fewer)

    @classmethod
    def read(cls, folder: str | Path) -> "Geometry":
        from diffusers import Flux2Transformer2DModel

        from backend.models.card import read_card

        root = Path(folder)

        def config(part: str) -> dict[str, Any]:
            return json.loads((root / part / "config.json").read_text())

        t, v, te = config("transformer"), config("vae"), config("text_encoder")
        counts = _tensor_elements(root / "transformer")
        sharded = sum(count for name, count in counts.items()  # matched by the module holding the tensor
                      if any(fnmatch.fnmatchcase(name.rsplit(".", 1)[0], p)
                             for p in Flux2Transformer2DModel._tp_plan))
        replicated = sum(counts.values()) - sharded
        others = sum(sum(_tensor_elements(root / part).values()) for part in ("text_encoder", "vae"))
        tokens = read_card(root).prompt_tokens or TEXT_TOKENS
        text_heads = te["num_attention_heads"]
        return cls(t["num_attention_heads"], t["attention_head_dim"], float(t.get("mlp_ratio", 3.0)), text_heads,
                   te.get("head_dim") or te["hidden_size"] // text_heads,
                   te.get("intermediate_size", te["hidden_size"]), tuple(v["block_out_channels"]),
                   bool(v.get("mid_block_add_attention", True)), sharded, replicated, others, tokens)

    @property
    def vae_factor(self) -> int:
        return 2 ** (len(self.vae_channels) - 1)

    def weights(self, degree: int = 1) -> int:
        """Parameters one rank holds."""
        return self.transformer_replicated + math.ceil(self.transformer_sharded / degree) + self.other_parameters

    def attentions(self, shape: Shape, compiled: bool, degree: int = 1) -> dict[str, list[Attention]]:
        """Each phase's attention calls for a run at ``shape`` (``compiled``: the transformer's)."""
        sequence = self.text_tokens + shape.tokens
        phases = {"prompt": [Attention("text encoder", 1, self.text_heads, self.text_tokens, self.text_tokens,
                                       self.text_head_dim, False, bias=True)],
                  "references": [], "denoise": [Attention("transformer", shape.count, max(1, self.heads // degree),
                                                          sequence, sequence, self.head_dim, compiled)],
                  "decode": []}
        if self.vae_attention:
            width = self.vae_channels[-1]
            for number, (height, w) in enumerate(shape.refs, 1):
                tokens = (height // self.vae_factor) * (w // self.vae_factor)
                phases["references"].append(Attention(f"VAE encode, reference {number}", 1, 1, tokens, tokens,
                                                       width, False))
            tokens = (shape.height // self.vae_factor) * (shape.width // self.vae_factor)
            phases["decode"].append(Attention("VAE decode", shape.count, 1, tokens, tokens, width, False))
        return phases

    def activations(self, shape: Shape, degree: int = 1) -> dict[str, int]:
        """Elements of each phase's widest activations (times ``ACTIVATION_COPIES``)."""
        sequence = self.text_tokens + shape.tokens
        hidden = self.heads * self.head_dim
        fused = hidden * (3 + 2 * self.mlp_ratio) / degree  # a single-stream block's fused projection
        widest_image = max([shape.pixels * shape.count] + [h * w for h, w in shape.refs]) * self.vae_channels[0]
        return {"prompt": self.text_tokens * self.text_width * ACTIVATION_COPIES,
                "references": (widest_image if shape.refs else 0) * ACTIVATION_COPIES,
                "denoise": int(shape.count * sequence * fused) * ACTIVATION_COPIES,
                "decode": shape.pixels * shape.count * self.vae_channels[0] * DECODE_COPIES}


@dataclasses.dataclass(frozen=True)
class Plan:
    """One signature's needs of one core, in bytes."""

    weights: int
    phases: dict[str, int]  # what each phase holds besides the weights
    attentions: list[dict[str, Any]]  # each call: name, fast, why, score_bytes
    hbm: int | None

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def total(self) -> int:
        return self.weights + self.phases[self.peak_phase]

    @property
    def fits(self) -> bool:
        return self.hbm is None or self.total <= self.hbm

    def slow(self) -> dict[str, Any] | None:
        return next((a for a in self.attentions if a["name"] == "transformer" and not a["fast"]), None)

    def to_json(self) -> dict[str, Any]:
        return {"weights": self.weights, "phases": dict(self.phases), "peak_phase": self.peak_phase,
                "total": self.total, "hbm": self.hbm, "fits": self.fits, "attentions": list(self.attentions)}


def plan(geometry: Geometry, shape: Shape, *, compiled: bool, dtype: str, degree: int = 1,
         hbm: int | None = None, environ: Mapping[str, str] | None = None) -> Plan:
    """What a run at ``shape`` needs of each core it runs on (``degree``: a tensor-parallel rank's)."""
    size = DTYPE_BYTES.get(dtype, 4)
    activations = geometry.activations(shape, degree)
    phases, calls = {}, []
    for phase, attentions in geometry.attentions(shape, compiled, degree).items():
        scores = 0
        for attention in attentions:
            why = attention.why_slow(environ)
            score = attention.score_bytes(size, environ)
            scores = max(scores, score)
            calls.append({"name": attention.name, "phase": phase, "fast": why is None, "why": why,
                          "score_bytes": score, "sequence": attention.q_len})
        phases[phase] = scores + activations[phase] * size
    return Plan(geometry.weights(degree) * size, phases, calls, hbm)


@functools.lru_cache(maxsize=256)
def fast_sizes(near: Shape, max_side: int, slack: float = 0.35,
               text_tokens: int = TEXT_TOKENS) -> tuple[Shape, ...]:
    """Output sizes near ``near`` (area within ``slack``, sides at most ``max_side``) whose sequence,
    with the text (``text_tokens``) and the same references, takes the fast path (a multiple of the NKI kernel's 512),
    nearest aspect first. Cached: a refused badge asks again every second."""
    refs = sum((h // MULTIPLE) * (w // MULTIPLE) for h, w in near.refs)
    found = []
    for height in range(MULTIPLE * 8, max_side + 1, MULTIPLE):
        # only the widths whose area is within the slack: one short range per height
        low = max(MULTIPLE * 8, math.ceil((1 - slack) * near.pixels / height / MULTIPLE) * MULTIPLE)
        for width in range(low, min(max_side, int((1 + slack) * near.pixels / height)) + 1, MULTIPLE):
            if (text_tokens + refs + (height // MULTIPLE) * (width // MULTIPLE)) % SEQ_MULTIPLE == 0:
                found.append(Shape(height, width))
    aspect = math.log(near.width / near.height)
    return tuple(sorted(found, key=lambda s: (abs(math.log(s.width / s.height) - aspect),
                                              abs(s.pixels - near.pixels))))
