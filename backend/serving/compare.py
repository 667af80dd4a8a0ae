"""Compare: one request through two or three modes, side by side, with each image's largest pixel
difference from the first mode's."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from backend.errors import InvalidRequest
from backend.serving.roles import LOCAL_OPERATOR


def compare(manager, request, modes: Iterable[str], progress=None, caller=LOCAL_OPERATOR,
            save: bool = True) -> list[dict[str, Any]]:
    """Each entry has image, result, and the max pixel difference (0-255) from the first mode's image.
    ``request``: validated, or its raw fields (validated once, here). Each mode is one run through
    ``Manager.run`` for ``caller``: its own job on the board."""
    import numpy as np

    if isinstance(request, dict):
        request = manager.validate(**request)
    modes = list(dict.fromkeys(modes))
    if not 2 <= len(modes) <= 3:
        raise InvalidRequest("modes", f"choose two or three modes to compare, got {len(modes)}")
    entries, first = [], None
    for mode in modes:
        if mode not in manager.modes:
            raise InvalidRequest("mode", f"must be one of {', '.join(manager.modes)}, got {mode!r}")
        image, result = manager.run(dataclasses.replace(request, mode=mode), caller, progress, save=save)
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
        first = pixels if first is None else first
        entries.append({"mode": mode, "image": image, "result": result,
                        "max_diff": int(np.abs(pixels - first).max())})
    return entries
