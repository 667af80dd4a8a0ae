"""The operator's controls over the service's engines, held by ``backend.serving.manager.Manager`` as
``controls``: launched engines started and stopped by name, the slots each engine offers the job
board, the warm-only lock, warm-ups.

Every launched engine is the same here whatever it is (a worker group, a replica pool): started with
a size, stopped, its logs read, its compile ended by stopping it — each the operator's.

Warm-up compiles shapes ahead of a demo (at start with --prewarm, or from the System tab). Each shape
runs once through the manager's normal door (the warm-only lock does not apply), once on every other
process that serves the mode (replicas), and once more when the first run compiled, so the shape
shows its steady seconds too. A list is deduplicated and capped: at most as many shapes as there are
presets (a warm-up holds the device for everyone, and a shape warms once per mode).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable

from backend.errors import BackendBusy, BackendNotReady, InvalidRequest, StudioError
from backend.request.records import Phase
from backend.request.references import blank_references
from backend.serving.roles import LOCAL_OPERATOR, Caller
from backend.shapes import PRESETS, Shape

log = logging.getLogger(__name__)
MAX_SHAPES = len(PRESETS)  # one warm-up covers at most the presets of one mode
WARMUP_PROMPT = "warm-up"

if TYPE_CHECKING:
    from backend.engines.base import LaunchedEngine
    from backend.request.records import GenerationResult


class EngineControls:
    """The service's engines as the operator drives them; reads the service's public state (its
    engines by role, device, model, job board) and keeps its own: the lock that starts and stops
    engines one at a time (they claim cores) and the warm-up's progress."""

    def __init__(self, service):
        self.service = service
        self._life = threading.Lock()
        self._warmup_lock = threading.Lock()
        self._warmup: dict[str, Any] = {}

    def _named(self, name: str) -> "LaunchedEngine":
        launched = self.service.engines.launched
        engine = next((e for e in launched if e.name == name), None)
        if engine is None:
            raise InvalidRequest("engine", f"must be one of {', '.join(e.name for e in launched)}, got {name!r}")
        return engine

    def start_engine(self, name: str, size: int | None = None, wait: bool = False, *,
                     caller: Caller = LOCAL_OPERATOR) -> dict[str, Any]:
        """Start (or resize) a launched engine: ``size`` its processes (the group's degree, the
        pool's replicas; None: its setting). Checked, cores included, before anything starts;
        returns its status. The operator's."""
        caller.require_operator(f"Starting the {name} engine")
        if self.service.device is None or self.service.model_path is None:
            raise BackendNotReady("the device is not ready yet")
        engine = self._named(name)
        with self._life:
            return engine.start(size, wait=wait)

    def stop_engine(self, name: str, *, caller: Caller = LOCAL_OPERATOR) -> None:
        """Stop a launched engine (no process of it survives). The operator's."""
        caller.require_operator(f"Stopping the {name} engine")
        engine = self._named(name)
        with self._life:
            engine.stop()

    def engine_logs(self, name: str, lines: int = 20, *, caller: Caller = LOCAL_OPERATOR) -> dict[str, str]:
        """The tail of each worker's log, read now: only when someone looks at them (the operator:
        logs carry paths and the environment's traces)."""
        caller.require_operator("Reading the worker logs")
        return self._named(name).logs(lines)

    def stop_compiling_workers(self, *, caller: Caller = LOCAL_OPERATOR) -> list[str]:
        """End compiles now where they can be ended: stop each launched engine whose worker is
        compiling (a compile inside this process cannot be interrupted; a worker process can be
        killed). Its runs fail as stopped; the operator starts the engine again. The operator's."""
        caller.require_operator("Stopping a compiling worker")
        stopped = self.compiling_workers()
        for job in self.service.board.running():
            if job.engine in stopped:
                job.worker_stopped = True
                job.cancel.set()
        for name in stopped:
            self.stop_engine(name, caller=caller)
        return stopped

    def compiling_workers(self) -> list[str]:
        """The launched engines whose workers compile now: the compiles that can be ended
        (``status().compiling_workers``)."""
        launched = {e.name for e in self.service.engines.launched}
        return sorted({job.engine for job in self.service.board.running()
                       if job.phase == Phase.COMPILING and job.engine in launched})

    def capacity_changed(self) -> None:
        """A launched engine's capacity may have changed (a group became ready, died or stopped):
        the job board looks for free slots again."""
        self.service.board.capacity_changed()

    def engine_capacity(self, name: str) -> int:
        """How many runs the engine called ``name`` takes at once now (the job board's slots for it)."""
        engines = self.service.engines
        engine = engines.get(name) if engines else None
        return engine.capacity() if engine is not None else 1

    def capacity(self) -> int:
        """How many requests can run at once now: the launched engines' capacity (a pool: its ready
        replicas; a group: one), at least one (the in-process engine). Cheap: read often."""
        engines = self.service.engines
        return max(1, sum(e.capacity() for e in engines.launched)) if engines else 1

    def warmup(self, shapes: Iterable[Shape], mode: str | None = None,
               progress: Callable[[int, int, Shape | None], None] | None = None) -> list[GenerationResult]:
        """Compile (mode, shape) for each shape wherever that mode is served, and measure one steady
        run; bypasses the warm-only lock."""
        manager, mode, shapes, results = self.service, mode or self.service.settings.mode, list(shapes), []
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

    def start_warmup(self, shapes: Iterable[Shape], mode: str | None = None, *,
                     caller: Caller = LOCAL_OPERATOR) -> None:
        """Warm shapes in a background thread; ``status().warmup`` shows its progress. The operator's."""
        caller.require_operator("Warming up shapes")
        mode = mode or self.service.settings.mode
        shapes = list(dict.fromkeys(shapes))  # the same shape twice warms it once
        if not shapes:
            raise InvalidRequest("shapes", "choose at least one shape to warm up")
        if len(shapes) > MAX_SHAPES:
            raise InvalidRequest("shapes", f"at most {MAX_SHAPES} different shapes per warm-up "
                                           f"(as many as there are presets), got {len(shapes)}")
        if mode not in self.service.modes:
            raise InvalidRequest("mode", f"must be one of {', '.join(self.service.modes)}, got {mode!r}")
        with self._warmup_lock:
            if self._warmup.get("running"):
                raise BackendBusy("a warm-up is already running; wait for it to finish")
            self._warmup = {"running": True, "mode": mode, "done": 0, "total": len(shapes),
                            "current": None, "error": None}

        def progress(done: int, _total: int, shape: Shape | None) -> None:
            self._warmup.update(done=done, current=str(shape) if shape else None)

        def work() -> None:
            try:
                self.warmup(shapes, mode, progress)
            except StudioError as exc:
                self._warmup["error"] = str(exc)
            except Exception as exc:  # noqa: BLE001 - reported in status, traced in the log
                log.exception("warm-up failed")
                self._warmup["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                self._warmup["running"] = False

        threading.Thread(target=work, name="warmup", daemon=True).start()

    def warmup_status(self) -> dict[str, Any] | None:
        """The latest warm-up's progress (``status().warmup``); None before the first."""
        return dict(self._warmup) or None

    def set_warm_only(self, locked: bool, *, caller: Caller = LOCAL_OPERATOR) -> None:
        """Lock to warm shapes (or unlock). The operator's."""
        caller.require_operator("Locking to warm shapes")
        self.service.warm_only = bool(locked)
