"""The service's status snapshot (``Status``; ``to_json()`` is ``/status``), made cheaply by
``StatusView`` from what the engines and the device keep, and ``readiness`` for ``/readyz``."""

from __future__ import annotations

import copy
import dataclasses
import enum
import os
from typing import Any

from backend.hardware.monitor import process_owners
from backend.serving import cost
from backend.serving.compile_state import CompileState
from backend.serving.jobs import JobState
from backend.shapes import parse_signature

# What anyone hears of a failed load: the error itself may name --model's folder (the operator's status has it).
LOAD_FAILED = "the model failed to load (the System tab and the app's log say why)"


class ServiceState(enum.StrEnum):
    IDLE = "idle"
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True)
class Status:
    """One snapshot. The engines' ``describe()``, the table's rows, the jobs and the device's readings
    stay JSON objects: they are shown as they are."""

    state: ServiceState
    model: dict[str, Any]  # spec, label, card
    device: dict[str, Any] | None
    dtype: str | None
    default_mode: str
    modes: list[str]
    engine: dict[str, Any] | None  # the in-process engine
    engines: dict[str, dict[str, Any]]  # every engine by name: state, modes, capacity
    warm_only: bool
    max_compiled_shapes: int
    busy: dict[str, Any] | None  # the first running job
    running: list[dict[str, Any]]
    waiting: list[dict[str, Any]]
    compiling_workers: list[str]  # compiles the operator can end now (End the compile)
    shapes: list[dict[str, Any]]
    cache: dict[str, Any] | None
    memory: dict[str, Any] | None
    load_error: str | None
    last_error: str | None
    generations: int
    warmup: dict[str, Any]
    neuron_cores: dict[str, Any] | None
    degraded: str | None
    bundle: dict[str, Any] | None
    fallback_ops: dict[str, Any]
    tp: dict[str, Any] | None = None  # the launched engines, by their status key, when the app has them
    replicas: dict[str, Any] | None = None
    ray: dict[str, Any] | None = None  # the Ray Serve engine (backend.engines.ray_serve): nodes, replicas, cores
    chip: dict[str, Any] | None = None  # neuron-monitor's reading (backend.hardware.monitor), once loaded

    @property
    def loaded(self) -> bool:
        return self.state not in (ServiceState.IDLE, ServiceState.LOADING, ServiceState.FAILED)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)  # the launched engines' keys only when the app has them
        return {k: v for k, v in out.items() if v is not None or k not in ("tp", "replicas", "ray")}

    def for_viewer(self) -> Status:
        """A copy without what only the operator needs (the worker socket, process ids, cache paths),
        each error cut to its first line."""
        seen = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}

        def first_line(holder: dict[str, Any], *keys: str) -> None:
            for key in keys:
                if isinstance(holder.get(key), str):
                    holder[key] = holder[key].splitlines()[0] if holder[key] else holder[key]

        tp = seen["tp"] or {}
        for key in ("socket", "pids", "rank_pids"):
            tp.pop(key, None)
        for rank in tp.get("ranks") or []:
            rank.pop("pid", None)
        first_line(tp, "error", "last_request_error")
        replicas = seen["replicas"] or {}
        for replica in replicas.get("replicas") or []:
            replica.pop("pid", None)
            first_line(replica, "error")
        first_line(replicas, "error")
        for replica in (seen["ray"] or {}).get("replicas") or []:
            for key in ("pid", "log", "bundle", "node_ip"):
                replica.pop(key, None)
        for node in (seen["ray"] or {}).get("node_list") or []:
            node.pop("ip", None)  # the cluster's addresses are the operator's
        chip = seen["chip"] or {}
        for row in (chip.get("processes") or []) + (chip.get("cores") or []):
            row.pop("pid", None)
            row.pop("tag", None)  # neuron-monitor's tag is the pid unless NEURON_PROCESS_TAG is set
        cache = seen["cache"] or {}
        cache.pop("dir", None)
        for entry in cache.get("caches") or []:
            entry.pop("dir", None)
        first_line(seen, "last_error", "degraded")
        if seen["load_error"]:  # it may name --model's folder: the operator's page and the log say it whole
            seen["load_error"] = "the model failed to load (the operator's System tab says why)"
        return Status(**seen)


class StatusView:
    def __init__(self, service):
        self.service = service

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): the model loaded, every ``--prewarm`` shape warm in the default mode and ``demo``'s
        warm set done. ``why`` is public (``/readyz``): it holds no path (the load error, naming
        ``--model``'s folder, is the operator's, in ``status().load_error``)."""
        s = self.service
        if s.closing:
            return False, "the app is shutting down"
        if s.state is ServiceState.FAILED:
            return False, LOAD_FAILED
        if s.state in (ServiceState.IDLE, ServiceState.LOADING) or not s.engines:
            return False, "the model is loading"
        if s.preparing:
            return False, s.preparing
        mode = s.settings.mode
        states = {str(shape): s.table.state(mode, shape) for shape in s.settings.prewarm}
        failed = [shape for shape, state in states.items() if state == CompileState.FAILED]
        if failed:
            return False, f"{', '.join(failed)} failed to warm in {mode} mode (the System tab says why)"
        cold = [shape for shape, state in states.items() if state != CompileState.WARM]
        if s.state is ServiceState.WARMING or cold:
            return False, f"warming the configured shapes in {mode} mode" + (f" ({', '.join(cold)} not warm yet)"
                                                                             if cold else "")
        return True, "ready"

    def receipt(self, price_per_hour: float | None = None, reference=None) -> dict[str, Any]:
        """The cost receipt of what is warm now, ``reference`` (a ``cost.Reference``) beside it."""
        s = self.service
        capacity = {mode: max((e.capacity() for e in s.engines.launched if mode in e.modes), default=1) or 1
                    for mode in s.modes}
        seen = {"device": vars(s.device.info) if s.device else None, "neuron_cores": self.core_plan_status(),
                "shapes": s.table.snapshot(), "model": s.model_label}
        price = s.settings.price_per_hour if price_per_hour is None else price_per_hour
        return cost.receipt(seen, capacity, price, reference)

    def engine_load(self) -> dict[str, tuple[int, int]]:
        """Per engine: (waiting, running)."""
        load: dict[str, tuple[int, int]] = {}
        for job in self.service.board.jobs():
            waiting, running = load.get(job.engine, (0, 0))
            load[job.engine] = (waiting, running + 1) if job.state is JobState.RUNNING else (waiting + 1, running)
        return load

    def shapes(self) -> list[dict[str, Any]]:
        """The compile table's rows; on Neuron each with its transformer's attention path and what it
        needs of a core (``backend.hardware.memory``)."""
        s = self.service
        rows, devices = s.table.snapshot(), {}
        for row in rows:
            if row["mode"] not in devices:  # the device of the engine serving a mode: looked up once a mode
                devices[row["mode"]] = s.device_for(row["mode"])
            needs = s.admission.memory_plan(devices[row["mode"]], row["mode"], parse_signature(row["shape"]))
            if needs is not None:
                row["attention"] = needs.slow() or {"fast": True, "score_bytes": 0}
                row["memory_bytes"] = needs.total
        return rows

    def core_plan_status(self) -> dict[str, Any] | None:
        s = self.service
        plan = s.device.core_plan if s.device is not None else None
        return None if plan is None else plan.describe(wanted={e.name: e.cores_wanted() for e in s.engines.launched})

    def chip(self, launched: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """neuron-monitor's reading, each process named from the engines' ``describe()`` (``launched``)."""
        monitor = self.service.monitor
        return None if monitor is None else monitor.reading(
            process_owners(os.getpid(), launched.get("tp"), launched.get("replicas")))

    def status(self) -> Status:
        s = self.service
        jobs = s.board.snapshot()
        launched = {e.status_key: e.describe() for e in s.engines.launched}
        running = [job for job in jobs if job["state"] == "running"]
        device, engines = s.device, list(s.engines.values())
        return Status(
            state=s.state, model={"spec": s.settings.model, "label": s.model_label, "card": s.card.to_json()},
            device=vars(device.info) if device else None, dtype=device.info.dtype if device else None,
            default_mode=s.settings.mode, modes=list(s.modes),
            **launched, chip=self.chip(launched),
            engine=s.engine.describe() if s.engine else None,
            engines={e.name: {"state": e.state, "modes": list(e.modes), "capacity": e.capacity()} for e in engines},
            warm_only=s.warm_only, max_compiled_shapes=s.settings.max_compiled_shapes,
            busy=running[0] if running else None, running=running,
            waiting=[job for job in jobs if job["state"] == "waiting"],
            compiling_workers=s.controls.compiling_workers(), shapes=self.shapes(),
            cache=device.cache_info() if device else None, memory=device.memory() if device else None,
            load_error=s.load_error, last_error=s.last_error, generations=len(s.records),
            warmup=dict(s.controls.warmup_state) or None, neuron_cores=self.core_plan_status(),
            degraded=next((why for why in (e.degraded() for e in s.engines.launched) if why), None),
            bundle=s.bundle, fallback_ops=s.host_ops(),
        )

