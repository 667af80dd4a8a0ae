"""Warm-up: compile shapes ahead of a demo (at start with --prewarm, or from the System tab).

Each shape runs once through the manager's normal door (the warm-only lock does not apply), once
on every other process that serves the mode (replicas), and once more when the first run compiled,
so the shape shows its steady seconds too. A list is
deduplicated and capped: at most as many shapes as there are presets (a warm-up holds the device
for everyone, and a shape warms once per mode).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from backend.errors import BackendBusy, InvalidRequest, StudioError
from backend.request.references import blank_references
from backend.shapes import PRESETS, Shape

MAX_SHAPES = len(PRESETS)  # one warm-up covers at most the presets of one mode

log = logging.getLogger(__name__)
WARMUP_PROMPT = "warm-up"


class Warmups:
    def __init__(self, manager):
        self.manager = manager
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {}

    def run(self, shapes: list[Shape], mode: str,
            progress: Callable[[int, int, Shape | None], None] | None = None) -> list:
        manager, results = self.manager, []
        for i, shape in enumerate(shapes):
            if progress:
                progress(i, len(shapes), shape)
            request = manager.validate(WARMUP_PROMPT, shape.height, shape.width, seed=0, mode=mode,
                                       images=blank_references(shape), count=shape.count)
            _img, first = manager.generate(request, _warming=True)
            results.append(first)
            # Served by several processes (replicas), it runs until it is warm on each of them.
            warm_on, tries = manager.predict(mode, shape).get("warm_on"), 0
            # at most once more per other process (a dead one never warms)
            while warm_on and warm_on[0] < warm_on[1] and tries < warm_on[1] - 1:
                results.append(manager.generate(request, _warming=True)[1])
                warm_on, tries = manager.predict(mode, shape).get("warm_on"), tries + 1
            if first.compiled:  # measure the steady latency too, so the shape shows expected seconds
                results.append(manager.generate(request, _warming=True)[1])
        if progress:
            progress(len(shapes), len(shapes), None)
        return results

    def start(self, shapes: list[Shape], mode: str) -> None:
        """Warm ``shapes`` in a background thread; ``status()`` shows its progress."""
        shapes = list(dict.fromkeys(shapes))  # the same shape twice warms it once
        if not shapes:
            raise InvalidRequest("shapes", "choose at least one shape to warm up")
        if len(shapes) > MAX_SHAPES:
            raise InvalidRequest("shapes", f"at most {MAX_SHAPES} different shapes per warm-up "
                                           f"(as many as there are presets), got {len(shapes)}")
        if mode not in self.manager.modes:
            raise InvalidRequest("mode", f"must be one of {', '.join(self.manager.modes)}, got {mode!r}")
        with self._lock:
            if self._state.get("running"):
                raise BackendBusy("a warm-up is already running; wait for it to finish")
            self._state = {"running": True, "mode": mode, "done": 0, "total": len(shapes),
                           "current": None, "error": None}

        def progress(done: int, _total: int, shape: Shape | None) -> None:
            self._state.update(done=done, current=str(shape) if shape else None)

        def work() -> None:
            try:
                self.run(shapes, mode, progress)
            except StudioError as exc:
                self._state["error"] = str(exc)
            except Exception as exc:  # noqa: BLE001 - reported in status, traced in the log
                log.exception("warm-up failed")
                self._state["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                self._state["running"] = False

        threading.Thread(target=work, name="warmup", daemon=True).start()

    def status(self) -> dict[str, Any] | None:
        return dict(self._state) or None
