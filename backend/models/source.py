"""Where the pipeline comes from: a model a package provides by name (the embedded ones), a local
folder, or a hub id.

Every failure to find a model is a ``ModelNotFound`` whose one-line message says what to do.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

from backend.errors import ModelNotFound
from backend.models.plugins import MODELS, find

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def local_folder(spec: str, cache_root: Path) -> Path | None:
    """The folder ``--model spec`` is read from, when it is local (None: a hub id); checks nothing."""
    if (named := find(MODELS, spec)) is not None:  # a model a package provides by name (the embedded ones)
        return named.folder(cache_root)
    path = Path(spec).expanduser()
    return path if path.is_dir() else None


def resolve_model(spec: str, cache_root: Path) -> tuple[str, str]:
    """Return (what to pass to from_pretrained, a short label for status and PNG metadata)."""
    if (named := find(MODELS, spec)) is not None:
        try:
            return named.resolve(cache_root)
        except FileNotFoundError as exc:
            raise ModelNotFound(str(exc)) from None

    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").is_file():
            raise ModelNotFound(f"--model {spec}: the folder has no model_index.json; point it at a diffusers "
                                "pipeline folder (e.g. a download of black-forest-labs/FLUX.2-klein-4B)")
        return str(path.resolve()), path.resolve().name
    looks_like_path = spec.startswith((".", "/", "~")) or spec.count("/") != 1
    if looks_like_path or not _HUB_ID.fullmatch(spec):
        raise ModelNotFound(f"--model {spec}: no such folder; pass a diffusers pipeline folder, a hub id such as "
                            "black-forest-labs/FLUX.2-klein-4B, or leave --model out for the embedded tiny model")

    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(spec, local_files_only=True), spec
    except Exception:  # noqa: BLE001 - any miss means "not cached"; the message below says what to do
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0"):
        raise ModelNotFound(f"--model {spec}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set; run "
                            f"`hf download {spec}` where the hub is reachable, or pass a local folder")
    try:
        local = snapshot_download(spec)
    except Exception as exc:  # noqa: BLE001 - network, auth and gating errors all end the same way
        raise ModelNotFound(f"--model {spec}: could not download it ({type(exc).__name__}); check the network "
                            "and `hf auth login` for gated models, or pass a local folder") from None
    return local, spec


@functools.lru_cache(maxsize=8)
def transformer_heads(model_path: str) -> int:
    """Attention heads of the pipeline's transformer (a tensor-parallel degree must divide it)."""
    return int(json.loads((Path(model_path) / "transformer" / "config.json").read_text())["num_attention_heads"])


def prompt_token_counter(model_path: str):
    """A function counting a prompt's tokens as the text encoder sees them (with the chat
    template), for checking prompts against its limit up front."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, subfolder="tokenizer")

    def count(prompt: str) -> int:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=False)
        return len(tokenizer(text)["input_ids"])

    return count
