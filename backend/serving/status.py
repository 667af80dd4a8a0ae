"""The manager's status snapshot (a part of ``backend.serving.manager.Manager``): one JSON-able dict that
the page, the API and the tests all read. Cheap: it reads what the engines and the device keep."""

from __future__ import annotations

from typing import Any


class StatusView:
    """Mixed into ``Manager``: reads its state, engines, device, table, jobs and warm-ups."""

    def _core_plan_status(self) -> dict[str, Any] | None:
        plan = self.device.core_plan if self.device is not None else None
        if plan is None:
            return None
        return plan.describe(wanted={e.name: e.cores_wanted() for e in self._launched})

    def status(self) -> dict[str, Any]:
        now = self._clock()
        with self._state_lock:
            running = [{k: (str(v) if k == "shape" else v) for k, v in job.items()
                        if k not in ("owner", "cancel", "overlapped", "running", "worker_stopped")}
                       for job in self._jobs.values()]  # a page session is its own business, not the room's
            compiling_workers = self._compiling_workers()
            host_ops = {op: sorted(where) for op, where in sorted(self.fallback_ops.items())}
        for job in running:
            job["elapsed"] = round(now - job.pop("started"), 3)
            if "compile_started" in job:
                job["compile_elapsed"] = round(now - job.pop("compile_started"), 3)
        device, engines = self.device, list(self.engines.values())
        return {
            "state": self.state,
            "model": {"spec": self.settings.model, "label": self.model_label, "card": self.card.to_json()},
            "device": vars(device.info) if device else None,
            "dtype": device.info.dtype if device else None,
            "default_mode": self.settings.mode,
            "modes": list(self.modes),
            **{e.status_key: e.describe() for e in self._launched},
            "engine": self.engine.describe() if self.engine else None,
            "engines": {e.name: {"state": e.state, "modes": list(e.modes), "capacity": e.capacity()} for e in engines},
            "warm_only": self.warm_only,
            "max_compiled_shapes": self.settings.max_compiled_shapes,
            "busy": running[0] if running else None,
            "running": running,
            "compiling_workers": compiling_workers,  # compiles the operator can end now (End the compile)
            "shapes": self.table.snapshot(),
            "cache": device.cache_info() if device else None,
            "memory": device.memory() if device else None,
            "load_error": self.load_error,
            "last_error": self.last_error,
            "generations": len(self.records),
            "warmup": self._warmups.status(),
            "neuron_cores": self._core_plan_status(),
            "degraded": next((why for why in (e.degraded() for e in self._launched) if why), None),
            "bundle": self.bundle,
            "fallback_ops": host_ops,
        }


def for_viewer(status: dict[str, Any]) -> dict[str, Any]:
    """What a viewer's page and a viewer's ``/status`` get: the status without what only the
    operator needs — the worker socket's path, process ids, the cache folders' paths — and with each
    error cut to its first line. A copy; the operator's status is ``Manager.status()`` itself."""
    import copy

    seen = copy.deepcopy(status)

    def first_line(holder: dict[str, Any], *keys: str) -> None:
        for key in keys:
            if isinstance(holder.get(key), str):
                holder[key] = holder[key].splitlines()[0] if holder[key] else holder[key]

    tp = seen.get("tp") or {}
    for key in ("socket", "pids", "rank_pids"):
        tp.pop(key, None)
    for rank in tp.get("ranks") or []:
        rank.pop("pid", None)
    first_line(tp, "error", "last_request_error")
    replicas = seen.get("replicas") or {}
    for replica in replicas.get("replicas") or []:
        replica.pop("pid", None)
        first_line(replica, "error")
    first_line(replicas, "error")
    cache = seen.get("cache") or {}
    cache.pop("dir", None)
    for entry in cache.get("caches") or []:
        entry.pop("dir", None)
    first_line(seen, "load_error", "last_error", "degraded")
    return seen
