"""The captured TorchNeuron / Neuron tools artefacts in ``tests/standin/captures/``, for tests.

Every format the app parses, error text it classifies, unit it converts and key it relies on is
kept there with its source (``SOURCES.md``). Tests read them from here, so no test invents a format:
the stand-in is checked against them (``tests/neuron/test_captures.py``) and the app parses them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[1] / "standin" / "captures"


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict:
    """A JSON capture, e.g. ``load("torchneuron/errors.json")``."""
    return json.loads((CAPTURES / name).read_text())


def text(name: str) -> str:
    """A text capture as published, e.g. ``text("neuron-ls/trn2.3xlarge-lnc2.txt")``."""
    return (CAPTURES / name).read_text()


# Sample values for the placeholders of the captured layout (neff_cache.json "layout"): a 32-hex
# XXH3_128 key, a SHA-256 hex digest, mkstemp's six and NamedTemporaryFile's eight characters.
_SAMPLES = {"<key[0:2]>": "0a", "<key[2:4]>": "1b", "<key>": "0a1b" + "c" * 28, "<sha256>": "0a1b" + "d" * 60,
            "XXXXXXXX": "a1b2c3d4", "XXXXXX": "Ab3xY9"}


def neff_layout_paths(*names: str) -> list[str]:
    """The captured layout's paths (``neff``, ``neff_temp``, ``lock``, ``python_neff``, ...) with
    sample values, relative to their cache folder."""
    layout = load("torchneuron/neff_cache.json")["layout"]
    out = []
    for name in names:
        path = layout[name].split(">/", 1)[1]  # drop "<TORCH_NEURONX_NEFF_..._DIR>/"
        for placeholder, value in _SAMPLES.items():
            path = path.replace(placeholder, value)
        out.append(path)
    return out
