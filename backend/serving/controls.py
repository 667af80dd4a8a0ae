"""The operator's controls, held by the Manager: ``controls`` (``EngineControls``: launched engines
started and stopped by name, their slots on the job board, the warm-only lock, warm-ups) and
``caches`` (``CacheOps``: warm-start bundles and the compile caches).

A warm-up runs each shape once through the manager's door (bypassing the warm-only lock), once on
every other process serving the mode (replicas), and once more when the first run compiled, so the
shape shows its steady seconds too. A warm-up holds the device for everyone, so a list is capped at
as many shapes as there are presets.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable

from backend.engines.base import LaunchedEngine
from backend.errors import BackendBusy, BackendNotReady, InvalidRequest, StudioError
from backend.request.records import GenerationResult, Phase
from backend.request.references import blank_references
from backend.serving.roles import LOCAL_OPERATOR, Caller
from backend.shapes import PRESETS, Shape, parse_signature

log = logging.getLogger(__name__)
MAX_SHAPES = len(PRESETS)  # one warm-up covers at most the presets of one mode
WARMUP_PROMPT = "warm-up"


class EngineControls:
    """Keeps the lock that starts and stops engines one at a time (they claim cores) and the
    warm-up's progress."""

    def __init__(self, service):
        self.service = service
        self._life = threading.Lock()
        self._warmup_lock = threading.Lock()
        self.warmup_state: dict[str, Any] = {}

    def _named(self, name: str) -> LaunchedEngine:
        launched = self.service.engines.launched
        engine = next((e for e in launched if e.name == name), None)
        if engine is None:
            raise InvalidRequest("engine", f"must be one of {', '.join(e.name for e in launched)}, got {name!r}")
        return engine

    def start_engine(self, name: str, size: int | None = None, wait: bool = False, *,
                     caller: Caller = LOCAL_OPERATOR) -> dict[str, Any]:
        """Start (or resize) a launched engine to ``size`` processes (None: its setting); checked,
        cores included, before anything starts. Returns its status."""
        caller.require_operator(f"Starting the {name} engine")
        if self.service.device is None or self.service.model_path is None:
            raise BackendNotReady("the device is not ready yet")
        engine = self._named(name)
        with self._life:
            return engine.start(size, wait=wait)

    def stop_engine(self, name: str, *, caller: Caller = LOCAL_OPERATOR) -> None:
        caller.require_operator(f"Stopping the {name} engine")
        engine = self._named(name)
        with self._life:
            engine.stop()

    def engine_logs(self, name: str, lines: int = 20, *, caller: Caller = LOCAL_OPERATOR) -> dict[str, str]:
        """The tail of each worker's log (the operator's: logs carry paths and traces)."""
        caller.require_operator("Reading the worker logs")
        return self._named(name).logs(lines)

    def stop_compiling_workers(self, *, caller: Caller = LOCAL_OPERATOR) -> list[str]:
        """Stop each launched engine whose worker compiles (a compile in this process cannot be
        interrupted; a worker can be killed). Its runs end as stopped."""
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
        launched = {e.name for e in self.service.engines.launched}
        return sorted({job.engine for job in self.service.board.running()
                       if job.phase == Phase.COMPILING and job.engine in launched})

    def engine_capacity(self, name: str) -> int:
        engine = self.service.engines.get(name)
        return engine.capacity() if engine is not None else 1

    def capacity(self) -> int:
        """Requests that can run at once now: the launched engines' capacity, at least one."""
        return max(1, sum(e.capacity() for e in self.service.engines.launched))

    def warmup(self, shapes: Iterable[Shape], mode: str | None = None,
               progress: Callable[[int, int, Shape | None], None] | None = None) -> list[GenerationResult]:
        manager, mode, shapes, results = self.service, mode or self.service.settings.mode, list(shapes), []
        for i, shape in enumerate(shapes):
            if progress:
                progress(i, len(shapes), shape)
            request = manager.validate(WARMUP_PROMPT, shape.height, shape.width, seed=0, mode=mode,
                                       images=blank_references(shape), count=shape.count)
            results.append(manager.generate(request, _warming=True)[1])
            # Served by several processes (replicas): once more per other process (a dead one never warms).
            warm_on, tries = manager.predict(mode, shape).get("warm_on"), 0
            while warm_on and warm_on[0] < warm_on[1] and tries < warm_on[1] - 1:
                results.append(manager.generate(request, _warming=True)[1])
                warm_on, tries = manager.predict(mode, shape).get("warm_on"), tries + 1
            # Once more for a steady figure, so the shape shows expected seconds (a first run at a place
            # is not one: it compiled, or paid first-time costs).
            results.append(manager.generate(request, _warming=True)[1])
        if progress:
            progress(len(shapes), len(shapes), None)
        return results

    def start_warmup(self, shapes: Iterable[Shape], mode: str | None = None, *,
                     caller: Caller = LOCAL_OPERATOR) -> None:
        """Warm shapes in a background thread; ``status().warmup`` shows its progress."""
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
            if self.warmup_state.get("running"):
                raise BackendBusy("a warm-up is already running; wait for it to finish")
            self.warmup_state = {"running": True, "mode": mode, "done": 0, "total": len(shapes),
                                 "current": None, "error": None}

        def progress(done: int, _total: int, shape: Shape | None) -> None:
            self.warmup_state.update(done=done, current=str(shape) if shape else None)

        def work() -> None:
            try:
                self.warmup(shapes, mode, progress)
            except StudioError as exc:
                self.warmup_state["error"] = str(exc)
            except Exception as exc:  # noqa: BLE001 - reported in status, traced in the log
                log.exception("warm-up failed")
                self.warmup_state["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                self.warmup_state["running"] = False

        threading.Thread(target=work, name="warmup", daemon=True).start()

    def set_warm_only(self, locked: bool, *, caller: Caller = LOCAL_OPERATOR) -> None:
        caller.require_operator("Locking to warm shapes")
        self.service.warm_only = bool(locked)


class CacheOps:
    """Bundles and caches; the in-process engine is held while the caches change."""

    def __init__(self, service):
        self.service = service

    def bundle_manifest(self, entries: list[dict[str, Any]] | None = None):
        from backend.caches import bundles

        service = self.service
        if service.device is None or service.model_path is None:
            raise BackendNotReady("the device is not ready yet")
        return bundles.describe_install(service.device, service.settings, service.model_path,
                                        service.model_label or "", entries)

    def export_bundle(self, path, pairs: Iterable[tuple[str, Shape]] | None = None, *,
                      caller: Caller = LOCAL_OPERATOR):
        """Write a bundle that warms ``pairs`` of (mode, shape) (None: every warm in-process shape),
        running each first if it is not warm yet. Returns the manifest."""
        from backend.caches import bundles

        caller.require_operator("Exporting a warm-start bundle")
        service, table = self.service, self.service.table
        if pairs is None:
            pairs = [(r["mode"], parse_signature(r["shape"])) for r in table.snapshot()
                     if r["state"] == "warm" and r["mode"] in service.local.modes]
        pairs = list(dict.fromkeys(pairs))
        if not pairs:
            raise InvalidRequest("shapes", "no warm shape to export: warm some first (System tab) or name them")
        for mode in dict.fromkeys(m for m, _s in pairs):
            cold = [s for m, s in pairs if m == mode and table.state(m, s) != "warm"]
            if cold:
                service.warmup(cold, mode)
        rows = {(r["mode"], parse_signature(r["shape"])): r for r in table.snapshot()}
        entries = []
        for mode, shape in pairs:
            row = rows.get((mode, shape)) or {}
            seconds = row.get("bundle_compile_seconds") or row.get("compile_seconds")
            entries.append({"mode": mode, "shape": str(shape), "compile_seconds": seconds})
        with service.local.exclusive():
            return bundles.export(path, self.bundle_manifest(entries), service.device)

    def import_bundle(self, path, *, caller: Caller = LOCAL_OPERATOR) -> dict[str, Any]:
        from backend.caches import bundles

        caller.require_operator("Importing a warm-start bundle")
        with self.service.local.exclusive():
            return bundles.import_bundle(path, self.service.device, self.bundle_manifest())

    def import_at_start(self):
        source = self.service.settings.cache_from
        result = self.import_bundle(source)
        log.info("imported %s: %d files (%d already there)", source, result["written"],
                 result["already_there"])
        return result["manifest"]

    def warm_from_bundle(self, manifest) -> None:
        """Run a bundle's shapes once, so they are warm and the table says they came from the bundle."""
        from backend.hardware.metrics import diff_counters

        service = self.service
        entries = [(entry["mode"], parse_signature(str(entry["shape"])), entry.get("compile_seconds"))
                   for entry in manifest.entries if entry.get("mode") in service.modes]
        by_mode: dict[str, list[Shape]] = {}
        for mode, shape, _seconds in entries:
            by_mode.setdefault(mode, []).append(shape)
        before = service.device.compile_snapshot()
        for mode, shapes in list(by_mode.items()):
            try:
                service.warmup(shapes, mode)
            except BackendNotReady:  # its engine is not running here (a tensor-parallel group)
                del by_mode[mode]
        done = diff_counters(before, service.device.compile_snapshot())
        # What the warm pass still compiled afresh: inductor graphs that missed its cache (CPU/CUDA),
        # NEFFs the Neuron compiler built (Neuron); dynamo traces every graph either way.
        service.bundle = {"source": str(service.settings.cache_from), "model": manifest.model,
                          "entries": manifest.entries, "graphs_traced": int(done.get("graphs", 0)),
                          "fxgraph_hits": int(done.get("fxgraph_hits", 0)),
                          "fresh_compiles": int(done.get("fxgraph_misses", 0) + done.get("neff_compiles", 0)),
                          "neff_disk_hits": int(done.get("neff_disk_hits", 0))}
        for mode, shape, seconds in entries:
            if mode in by_mode:
                service.table.mark_bundled(mode, shape, seconds)

    def clear_compile_cache(self, *, caller: Caller = LOCAL_OPERATOR) -> int:
        """Empty the on-disk compile caches; returns bytes freed. Graphs in memory stay warm. Refused
        while a launched engine runs: its workers hold lock files in the NEFF cache."""
        caller.require_operator("Clearing the compile cache")
        service = self.service
        if service.device is None:
            raise BackendNotReady("the device is not ready yet")
        for engine in service.engines.launched:
            why = engine.busy_with_cache()
            if why:
                raise BackendBusy(why)
        with service.local.exclusive():
            return service.device.clear_caches()

    def cache_plan(self, *, caller: Caller = LOCAL_OPERATOR) -> list[dict[str, Any]]:
        caller.require_operator("Clearing the compile cache")
        if self.service.device is None:
            raise BackendNotReady("the device is not ready yet")
        return self.service.device.cache_plan()
