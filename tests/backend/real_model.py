"""FLUX.2-klein-4B's folder as far as planning needs it, built from the captured geometry
(``tests/standin/captures/models/flux2-klein-4b.json``): each component's config.json and a
safetensors file whose header lists the real tensors' names and shapes — and holds no data. A test
double only where the real thing cannot be had here (no hub): the app reads it with the same code
it reads a real download with (``backend.hardware.memory.Geometry.read``)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from tests.neuron.captures import load


def _write_header(path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)  # the header alone: no weights


def build(folder: Path) -> Path:
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLFlux2, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    geometry = load("models/flux2-klein-4b.json")
    with init_empty_weights():
        parts = {"transformer": Flux2Transformer2DModel.from_config(geometry["transformer"]["config"]),
                 "vae": AutoencoderKLFlux2(**geometry["vae"]["config"]),
                 "text_encoder": Qwen3ForCausalLM(Qwen3Config(**geometry["text_encoder"]["config"]))}
    for name, module in parts.items():
        (folder / name).mkdir(parents=True)
        config = dict(module.config) if name != "text_encoder" else module.config.to_dict()
        (folder / name / "config.json").write_text(json.dumps(config, default=list))
        shapes = {key: tuple(t.shape) for key, t in module.state_dict().items()}
        if name == "text_encoder":
            shapes.pop("lm_head.weight")  # tied to the embeddings: stored once
        _write_header(folder / name / "model.safetensors", shapes)
    return folder
