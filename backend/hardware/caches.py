"""The compile caches a device uses: their folders and sizes (re-read at most every
``CACHE_SIZE_TTL`` seconds), what clearing them would remove, and clearing them — only the entries
the compile stack wrote there (``backend.hardware.cache_layout``). ``backend.hardware.device.Device``
holds a ``DeviceCaches`` as ``caches``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from backend.hardware import env as device_env


class DeviceCaches:
    """The compile caches of a device of ``kind`` (neuron, cuda, cpu)."""

    CACHE_SIZE_TTL = 10.0  # seconds; every open page asks for the status each second

    def __init__(self, kind: str):
        self.kind = kind
        self._cache_size: tuple | None = None  # ((var, dir) pairs, read at, [bytes])

    def cache_vars(self) -> tuple[str, ...]:
        """The app-owned compile caches this device uses (both NEFF caches on Neuron)."""
        return device_env.NEURON_CACHE_VARS if self.kind == "neuron" else (device_env.INDUCTOR_CACHE_VAR,)

    def cache_info(self, fresh: bool = False) -> dict[str, Any]:
        """The compile cache folders and their sizes (re-read at most every CACHE_SIZE_TTL s:
        walking a large NEFF cache on every status request would cost more than the status).

        Returns {"bytes": total, "caches": [{"variable", "dir", "bytes"}, ...]} plus the first
        cache's "variable" and "dir" for one-line displays."""
        env = device_env.prepared_environment()
        paths = tuple((var, env.get(var, "")) for var in self.cache_vars())
        now = time.monotonic()
        cached = self._cache_size
        if fresh or cached is None or cached[0] != paths or now - cached[1] > self.CACHE_SIZE_TTL:
            sizes = [device_env.dir_size(path) if path else 0 for _var, path in paths]
            self._cache_size = cached = (paths, now, sizes)
        caches = [{"variable": var, "dir": path, "bytes": size} for (var, path), size in zip(paths, cached[2])]
        return {"variable": caches[0]["variable"], "dir": caches[0]["dir"],
                "bytes": sum(c["bytes"] for c in caches), "caches": caches}

    def cache_plan(self) -> list[dict[str, Any]]:
        """What "clear compile cache" would remove, per cache: its folder, how many entries the
        compile stack wrote there (``backend.hardware.cache_layout``) and their bytes. Nothing else is touched."""
        from backend.hardware import cache_layout

        plan = []
        for cache in self.cache_info(fresh=True)["caches"]:
            found = cache_layout.entries(cache_layout.KIND_BY_VARIABLE[cache["variable"]], cache["dir"]) \
                if cache["dir"] else []
            plan.append({**cache, "entries": len(found), "remove_bytes": cache_layout.size(found)})
        return plan

    def clear_caches(self) -> int:
        """Delete what the compile stack wrote in this device's cache folders (its own layout, never
        other files a user keeps there); returns the bytes it removed."""
        from backend.hardware import cache_layout

        info = self.cache_info(fresh=True)
        removed = 0
        for cache in info["caches"]:
            folder = Path(cache["dir"]).resolve() if cache["dir"] else None
            if folder is None or not folder.is_dir():
                continue
            kind = cache_layout.KIND_BY_VARIABLE[cache["variable"]]
            removed += cache_layout.remove(folder, cache_layout.entries(kind, folder))
        self.cache_info(fresh=True)  # the status shows the emptied folders at once
        return removed
