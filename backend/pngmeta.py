"""PNG files that carry their generation parameters, written atomically, and read back safely.

Two text chunks: ``parameters`` in the A1111 infotext form other tools read::

    a red fox
    Steps: 4, Sampler: FlowMatchEuler, CFG scale: 1.0, Seed: 42, Size: 256x256, Model: ..., Mode: compiled, Device: cpu

and ``neuron_studio``, the whole GenerationResult as JSON. Reading parses text only: nothing from a
PNG is evaluated or unpickled, and unknown or malformed fields are ignored.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image, PngImagePlugin

from backend.records import GenerationResult

PARAMS_KEY = "parameters"
JSON_KEY = "neuron_studio"
_MAX_TEXT = 64 * 1024  # ignore absurd chunks rather than parse them


def infotext(result: GenerationResult) -> str:
    fields = [
        ("Steps", result.steps),
        ("Sampler", "FlowMatchEuler"),
        ("CFG scale", result.guidance),
        ("Seed", result.seed),
        ("Size", f"{result.width}x{result.height}"),
        ("Model", result.model),
        ("Mode", result.mode),
        ("Device", result.device),
    ]
    return result.prompt + "\n" + ", ".join(f"{k}: {v}" for k, v in fields)


def save_png(image: Image.Image, result: GenerationResult, path: str | Path) -> Path:
    """Write ``image`` with its metadata to ``path`` atomically (a temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    info = PngImagePlugin.PngInfo()
    info.add_text(PARAMS_KEY, infotext(result))
    info.add_text(JSON_KEY, json.dumps(result.to_json(), ensure_ascii=False))
    fd, tmp = tempfile.mkstemp(prefix=".partial-", suffix=".png", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            image.save(handle, format="PNG", pnginfo=info)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def unique_output_path(folder: str | Path, result: GenerationResult) -> Path:
    """A new file name in ``folder`` that says when, what size, which mode and seed."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{stamp}-{result.width}x{result.height}-{result.mode}-{result.seed}"
    folder = Path(folder)
    candidate, n = folder / f"{base}.png", 1
    while candidate.exists():
        candidate, n = folder / f"{base}-{n}.png", n + 1
    return candidate


def parse_infotext(text: str) -> dict[str, Any]:
    """Parse A1111 infotext into {prompt, steps, guidance, seed, width, height, mode, model}; skips junk."""
    if not isinstance(text, str) or len(text) > _MAX_TEXT:
        return {}
    lines = text.strip().split("\n")
    if not lines:
        return {}
    params_line = lines[-1] if re.search(r"\bSteps:\s*\d", lines[-1]) else ""
    prompt_lines = lines[:-1] if params_line else lines
    out: dict[str, Any] = {}
    prompt = "\n".join(prompt_lines).strip()
    if prompt:
        out["prompt"] = prompt
    for key, value in re.findall(r"([A-Za-z][A-Za-z ]*):\s*([^,]*)", params_line):
        key, value = key.strip().lower(), value.strip()
        if key == "steps" and value.isdigit():
            out["steps"] = int(value)
        elif key == "seed" and value.isdigit():
            out["seed"] = int(value)
        elif key == "cfg scale":
            try:
                out["guidance"] = float(value)
            except ValueError:
                pass
        elif key == "size":
            m = re.fullmatch(r"(\d{1,5})x(\d{1,5})", value)
            if m:
                out["width"], out["height"] = int(m.group(1)), int(m.group(2))
        elif key in ("mode", "model", "device"):
            out[key] = value[:200]
    return out


def read_png_parameters(path: str | Path) -> dict[str, Any]:
    """Generation parameters stored in a PNG ({} when it carries none)."""
    with Image.open(path) as image:
        text = image.info.get(PARAMS_KEY) if hasattr(image, "info") else None
    return parse_infotext(text) if isinstance(text, str) else {}
