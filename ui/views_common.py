"""What every tab's views share: the words table's English keys, presets and modes by name, Markdown
tables, and numbers, sizes and long texts written the same way in every language."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.shapes import Shape
from ui.i18n import DEFAULT, MESSAGES, text

MESSAGES_EN = MESSAGES[DEFAULT]

CUSTOM = "Custom"
# The modes' display names are ui.i18n keys (the page shows them in its language).
MODE_KEYS = {"eager": "mode_eager", "compiled": "mode_compiled", "regional": "mode_regional", "tp": "mode_tp"}


def preset_label(name: str, shape: Shape) -> str:
    return f"{name} · {shape}"


def preset_shape(label: str, presets) -> Shape | None:
    return next((shape for name, shape in presets if preset_label(name, shape) == label), None)


def load_example_prompts(path: Path) -> list[str]:
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def format_seconds(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def format_bytes(n: int | None, lang: str = DEFAULT) -> str:
    if n is None:
        return text(lang, "na")
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def shorten(text: Any, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def word(lang: str, prefix: str, name: str) -> str:
    """The word for ``name`` (a state, a phase) in ``lang``; ``name`` itself where the table has none."""
    return text(lang, prefix + name) if prefix + name in MESSAGES_EN else name


def column_names(keys: list[str], lang: str) -> list[str]:
    return [text(lang, key) for key in keys]


def markdown_table(head: list, rows: list) -> str:
    """The head, its rule and the rows, one line each; an empty cell is written ``| |``."""
    return "\n".join(" ".join("|" if cell == "" else f"| {cell}" for cell in line) + " |"
                     for line in [head, ["---"] * len(head), *rows])
