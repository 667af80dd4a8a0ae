"""The manager's status snapshot (a part of ``backend.serving.manager.Manager``): one JSON-able dict that
the page, the API and the tests all read. Cheap: it reads what the engines and the device keep. And
whether the manager is ready: for a run (``_check_ready``, ``_await_ready``) and for a load
balancer (``readiness``: ``/readyz``)."""

from __future__ import annotations

import enum
from typing import Any, Callable

from backend.errors import BackendNotReady
from backend.request.records import ProgressEvent
from backend.serving.compile_state import CompileState
from backend.serving.jobs import JobState


class ServiceState(enum.StrEnum):
    """The service's own state (``Manager.state``); each member is its name in the status JSON."""

    IDLE = "idle"
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"
    FAILED = "failed"


class StatusView:
    """Mixed into ``Manager``: reads its state, engines, device, table, jobs and warm-ups."""

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): ready once the model is loaded and every ``--prewarm`` shape is warm in the
        default mode — what a load balancer asks before it sends traffic (``/readyz``)."""
        if self._closing.is_set():
            return False, "the app is shutting down"
        if self.state is ServiceState.FAILED:
            return False, "the model failed to load: " + (self.load_error or "").split("\n", 1)[0]
        if self.state in (ServiceState.IDLE, ServiceState.LOADING) or not self.engines:
            return False, "the model is loading"
        mode = self.settings.mode
        states = {str(shape): self.table.state(mode, shape) for shape in self.settings.prewarm}
        failed = [shape for shape, state in states.items() if state == CompileState.FAILED]
        if failed:
            return False, f"{', '.join(failed)} failed to warm in {mode} mode (the System tab says why)"
        cold = [shape for shape, state in states.items() if state != CompileState.WARM]
        if self.state is ServiceState.WARMING or cold:
            return False, f"warming the configured shapes in {mode} mode" + (f" ({', '.join(cold)} not warm yet)"
                                                                             if cold else "")
        return True, "ready"

    def receipt(self, price_per_hour: float | None = None, reference=None) -> dict[str, Any]:
        """The cost receipt (``backend.serving.cost``) of what is warm now; ``reference``: a
        ``cost.Reference`` to set beside it."""
        from backend.serving.cost import receipt

        capacity = {mode: max((e.capacity() for e in self._launched if mode in e.modes), default=1) or 1
                    for mode in self.modes}
        seen = {"device": vars(self.device.info) if self.device else None, "neuron_cores": self._core_plan_status(),
                "shapes": self.table.snapshot(), "model": self.model_label}
        price = self.settings.price_per_hour if price_per_hour is None else price_per_hour
        return receipt(seen, capacity, price, reference)

    def engine_load(self) -> dict[str, tuple[int, int]]:
        """Per engine: (requests waiting for it, requests it is running)."""
        load: dict[str, list[int]] = {}
        for job in self.board.jobs():
            counts = load.setdefault(job.engine, [0, 0])
            counts[1 if job.state is JobState.RUNNING else 0] += 1
        return {name: (waiting, running) for name, (waiting, running) in load.items()}

    def _check_ready(self) -> None:
        if self.state is ServiceState.FAILED:
            raise BackendNotReady(f"the model failed to load: {self.load_error}")
        if self.device is None or self.model_path is None or self.state is ServiceState.LOADING or not self.engines:
            raise BackendNotReady("the model is still loading; try again in a moment")
        if self._closing.is_set():
            raise BackendNotReady("the app is shutting down")

    def _await_ready(self, progress: Callable[[ProgressEvent], None] | None, still_wanted: Callable[[], bool] | None) -> bool:
        """A request that comes while the model loads waits for it, saying so ("loading", with the
        seconds waited as its step), and runs once it is ready: a click or an API call made right
        after the start gets its image, not "try again". Returns whether it waited. A manager
        never started, a failed load, a closing app or a caller gone away end the wait."""
        if self._ready.is_set() or self._loader is None:
            return False
        began = self._clock()
        while not self._ready.wait(0.25):
            if self._closing.is_set() or (still_wanted is not None and not still_wanted()):
                raise BackendNotReady("the app is shutting down" if self._closing.is_set()
                                      else "nobody waits for this image any more")
            if progress is not None:
                progress(ProgressEvent("loading", int(self._clock() - began), 0, "", ""))
        return True


    def _core_plan_status(self) -> dict[str, Any] | None:
        plan = self.device.core_plan if self.device is not None else None
        if plan is None:
            return None
        return plan.describe(wanted={e.name: e.cores_wanted() for e in self._launched})

    def status(self) -> dict[str, Any]:
        jobs = self.board.snapshot()  # without owners: a page session is its own business, not the room's
        running = [job for job in jobs if job["state"] == "running"]
        compiling_workers = self._compiling_workers()
        with self._state_lock:
            host_ops = {op: sorted(where) for op, where in sorted(self.fallback_ops.items())}
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
            "waiting": [job for job in jobs if job["state"] == "waiting"],
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
