"""The operator's controls over the service's engines, held by ``backend.serving.manager.Manager`` as
``controls``: launched engines started and stopped by name, the slots each engine offers the job
board, the warm-only lock, warm-ups.

Every launched engine is the same here whatever it is (a worker group, a replica pool): started with
a size, stopped, its logs read, its compile ended by stopping it — each the operator's.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable

from backend.errors import BackendNotReady, InvalidRequest
from backend.request.records import Phase
from backend.serving.roles import LOCAL_OPERATOR, Caller
from backend.serving.warmup import Warmups
from backend.shapes import Shape

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from backend.engines.base import LaunchedEngine
    from backend.request.records import GenerationResult


class EngineControls:
    """The service's engines as the operator drives them; reads the service's public state (its
    engines by role, device, model, job board) and keeps its own: the lock that starts and stops
    engines one at a time (they claim cores) and the warm-ups."""

    def __init__(self, service):
        self.service = service
        self._life = threading.Lock()
        self.warmups = Warmups(service)

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
               progress: Callable[[int, int, Shape], None] | None = None) -> list[GenerationResult]:
        """Compile (mode, shape) for each shape wherever that mode is served, and measure one steady
        run; bypasses the warm-only lock."""
        return self.warmups.run(list(shapes), mode or self.service.settings.mode, progress)

    def start_warmup(self, shapes: Iterable[Shape], mode: str | None = None, *,
                     caller: Caller = LOCAL_OPERATOR) -> None:
        """Warm shapes in a background thread; ``status().warmup`` shows its progress. The operator's."""
        caller.require_operator("Warming up shapes")
        self.warmups.start(list(shapes), mode or self.service.settings.mode)

    def set_warm_only(self, locked: bool, *, caller: Caller = LOCAL_OPERATOR) -> None:
        """Lock to warm shapes (or unlock). The operator's."""
        caller.require_operator("Locking to warm shapes")
        self.service.warm_only = bool(locked)
