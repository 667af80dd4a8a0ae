"""The service's warm-start bundles and compile caches, held by ``backend.serving.manager.Manager`` as
``caches``.

Export a bundle of what is warm, import one (checked against this install first), warm a bundle's
shapes at start, and clear the on-disk compile caches — each the operator's, each holding the
in-process engine so no run overlaps it, and clearing refused while a launched engine's workers
use the caches.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from backend.errors import BackendBusy, BackendNotReady, InvalidRequest
from backend.serving.roles import LOCAL_OPERATOR, Caller
from backend.shapes import Shape

log = logging.getLogger("backend.serving.manager")


class CacheOps:
    """Bundles and caches over the service's public state: its device, settings, model, compile table,
    engines (the in-process one held while the caches change) and warm-ups."""

    def __init__(self, service):
        self.service = service

    def bundle_manifest(self, entries: list[dict[str, Any]] | None = None):
        """This install's manifest fields (``backend.caches.bundles``): what a bundle must match to apply."""
        from backend.caches import bundles

        service = self.service
        if service.device is None or service.model_path is None:
            raise BackendNotReady("the device is not ready yet")
        return bundles.describe_install(service.device, service.settings, service.model_path,
                                        service.model_label or "", entries)

    def export_bundle(self, path, pairs: Iterable[tuple[str, Shape]] | None = None, *,
                      caller: Caller = LOCAL_OPERATOR):
        """Write a bundle of the compile caches that warms ``pairs`` ((mode, shape); None: every warm
        in-process shape). Each pair runs first if it is not warm yet. Returns the manifest."""
        from backend.caches import bundles

        caller.require_operator("Exporting a warm-start bundle")
        service, table = self.service, self.service.table
        if pairs is None:
            pairs = [(r["mode"], Shape(r["height"], r["width"])) for r in table.snapshot()
                     if r["state"] == "warm" and r["mode"] in service.local.modes]
        pairs = list(dict.fromkeys(pairs))
        if not pairs:
            raise InvalidRequest("shapes", "no warm shape to export: warm some first (System tab) or name them")
        for mode in dict.fromkeys(m for m, _s in pairs):
            cold = [s for m, s in pairs if m == mode and table.state(m, s) != "warm"]
            if cold:
                service.warmup(cold, mode)
        rows = {(r["mode"], Shape(r["height"], r["width"])): r for r in table.snapshot()}
        entries = []
        for mode, shape in pairs:
            row = rows.get((mode, shape)) or {}
            seconds = row.get("bundle_compile_seconds") or row.get("compile_seconds")
            entries.append({"mode": mode, "shape": str(shape), "compile_seconds": seconds})
        with service.local.exclusive():
            return bundles.export(path, self.bundle_manifest(entries), service.device)

    def import_bundle(self, path, *, caller: Caller = LOCAL_OPERATOR) -> dict[str, Any]:
        """Check a bundle against this install and put its files in the compile caches (nothing on a
        mismatch: ``bundles.BundleRefused`` names the field). Returns the manifest and counts."""
        from backend.caches import bundles

        caller.require_operator("Importing a warm-start bundle")
        with self.service.local.exclusive():
            return bundles.import_bundle(path, self.service.device, self.bundle_manifest())

    def import_at_start(self):
        """``--cache-from``'s bundle, imported as the service starts; returns its manifest."""
        source = self.service.settings.cache_from
        result = self.import_bundle(source)
        log.info("imported %s: %d files (%d already there)", source, result["written"],
                 result["already_there"])
        return result["manifest"]

    def warm_from_bundle(self, manifest) -> None:
        """Run a bundle's shapes once (each mode the engines here serve), so they are warm and the
        table says their compile came from the bundle."""
        from backend.shapes import parse_signature

        service = self.service
        by_mode: dict[str, list[Shape]] = {}
        for entry in manifest.entries:
            if entry.get("mode") in service.modes:
                by_mode.setdefault(entry["mode"], []).append(parse_signature(str(entry["shape"])))
        from backend.hardware.device import diff_counters

        before = service.device.compile_snapshot()
        for mode, shapes in list(by_mode.items()):
            try:
                service.warmup(shapes, mode)
            except BackendNotReady:  # its engine is not running here (a tensor-parallel group)
                del by_mode[mode]
        done = diff_counters(before, service.device.compile_snapshot())
        # What the warm pass still compiled afresh: inductor graphs that missed its cache (CPU/CUDA),
        # NEFFs the Neuron compiler built (Neuron); dynamo traces every graph either way.
        service.bundle = {"source": str(service.settings.cache_from), "model": manifest.model, "entries": manifest.entries,
                       "graphs_traced": int(done.get("graphs", 0)), "fxgraph_hits": int(done.get("fxgraph_hits", 0)),
                       "fresh_compiles": int(done.get("fxgraph_misses", 0) + done.get("neff_compiles", 0)),
                       "neff_disk_hits": int(done.get("neff_disk_hits", 0))}
        for entry in manifest.entries:
            if entry.get("mode") in by_mode:
                service.table.mark_bundled(entry["mode"], parse_signature(str(entry["shape"])), entry.get("compile_seconds"))

    def clear_compile_cache(self, *, caller: Caller = LOCAL_OPERATOR) -> int:
        """Empty the on-disk compile caches between generations; returns bytes freed. Graphs already
        in memory stay warm; only later processes lose the head start. Refused while a launched
        engine runs: its workers hold lock files in the local NEFF cache (and read the caches while
        they compile)."""
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
        """What clearing the compile cache would remove (per folder: entries and bytes). The operator's."""
        caller.require_operator("Clearing the compile cache")
        if self.service.device is None:
            raise BackendNotReady("the device is not ready yet")
        return self.service.device.cache_plan()
