"""The replica pool: N worker groups of one rank each, every one a whole pipeline, serving requests
side by side (docs/replicas.md): on Neuron one NeuronCore each, on CUDA one device, on the CPU
``cpu_count // N`` threads.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable

from backend.engines.base import PlaceBook, Route
from backend.engines.in_process import in_signature_order
from backend.errors import BackendNotReady, GenerationCancelled, GroupDead, InvalidRequest, StudioError
from backend.hardware.core_plan import CoresDoNotFit
from backend.launch.group import STARTING, GroupState, WorkerGroup, whole_between
from backend.request.records import EngineOutput, GenerationRequest, ProgressEvent
from backend.settings import IN_PROCESS_MODES, Settings

log = logging.getLogger(__name__)
MAX_REPLICAS = 64  # a trn2.48xlarge's NeuronCores at LNC 2


class ReplicaPool:
    name = "replicas"
    status_key = "replicas"
    modes = IN_PROCESS_MODES

    def __init__(self, settings: Settings, device, model_path: str, book: PlaceBook):
        self.settings, self.device, self.model_path, self.book = settings, device, model_path, book
        self._group_factory = WorkerGroup  # a UI test's double replaces it (tests/ui/fake_engines.py)
        self.replicas: list[WorkerGroup] = []
        self._busy: set[int] = set()
        self._free, self._life = threading.Condition(), threading.Lock()
        self.restarts, self._closing = 0, False
        self.served: list[int] = []  # requests each replica has answered
        self.last_error: str | None = None

    @property
    def state(self) -> str:
        states = {r.state for r in self.replicas}
        order = (GroupState.READY, *STARTING, GroupState.STOPPING, GroupState.DEAD)
        return next((s for s in order if s in states), GroupState.STOPPED)

    @property
    def configured(self) -> bool:
        return self.settings.replicas > 0

    def route(self, request: GenerationRequest) -> Route | None:
        if request.mode not in self.modes or not self.replicas \
                or self.state in (GroupState.STOPPED, GroupState.STOPPING):
            return None  # not started: the in-process engine serves, as without replicas
        why = self.degraded()
        # Each replica's in-process engine runs the references in the signature's order: the record says so.
        return Route(in_signature_order(request), None if why else self, why)

    def degraded(self) -> str | None:
        if not self.replicas or self.state in (GroupState.READY, GroupState.STOPPED, GroupState.STOPPING):
            return None
        errors = "; ".join(r.error for r in self.replicas if r.error)
        return f"no replica is ready (the pool is {self.state}{f': {errors}' if errors else ''})"

    def places(self, mode: str) -> list[str]:
        return [r.place for r in self.replicas]

    def capacity(self) -> int:
        return sum(r.state == GroupState.READY for r in self.replicas)

    def cores_wanted(self) -> tuple[int, None]:
        return (len(self.replicas) or self.settings.replicas), None

    def busy_with_cache(self) -> str | None:
        running = [r for r in self.replicas if r.state in STARTING + (GroupState.READY, GroupState.STOPPING)]
        if running:
            return (f"{len(running)} replica(s) are running: they hold lock files in the compile cache and "
                    f"compile into it; stop the replicas first (System tab), then clear the cache")
        return None

    def describe(self) -> dict[str, Any]:
        replicas, warm = [], self.book.warm_by_place()
        for i, group in enumerate(self.replicas):
            info = group.describe()
            replicas.append({"index": i, "place": group.place, "state": info["state"],
                             "core": group.cores[0] if group.cores else None,
                             "pid": (info.get("rank_pids") or {}).get("0"), "busy": i in self._busy,
                             "error": info.get("error"), "served": self.served[i] if i < len(self.served) else 0,
                             "warm": warm.get(group.place, []), "timings": info.get("timings") or {}})
        return {"state": self.state, "size": len(self.replicas), "configured": self.settings.replicas,
                "ready": self.capacity(), "busy": len(self._busy), "restarts": self.restarts,
                "device": self.device.info.kind, "replicas": replicas, "error": self.last_error}

    def load(self) -> None:
        self.start(wait=True)
        if self.capacity() < len(self.replicas):
            raise BackendNotReady("the replicas did not all start: "
                                  + "; ".join(f"{r.place}: {r.error or r.state}" for r in self.replicas
                                              if r.state != GroupState.READY))

    def _plan(self, count: int) -> tuple[list[list[int]], list[dict[str, str]], int]:
        """Per replica its NeuronCores, environment and CPU threads; a count that does not fit is refused."""
        whole_between("replicas", count, MAX_REPLICAS)
        kind = self.device.info.kind
        if kind == "neuron":
            try:
                cores = self.device.core_plan.cores_for(self.name, count)
            except CoresDoNotFit as exc:
                raise InvalidRequest("replicas", str(exc)) from None
            return [[c] for c in cores], [{} for _ in cores], 0
        if kind == "cuda":
            visible = self.device.info.cuda_devices
            if count > visible:
                raise InvalidRequest("replicas", f"{count} replicas need {count} CUDA devices, this machine "
                                                 f"has {visible}; use at most {visible}")
            return [[] for _ in range(count)], [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(count)], 0
        threads = max(1, (os.cpu_count() or 1) // count)
        return [[] for _ in range(count)], [{} for _ in range(count)], threads

    def start(self, size: int | None = None, wait: bool = False) -> dict[str, Any]:
        count = self.settings.replicas if size is None else size
        with self._life:
            cores, envs, threads = self._plan(count)  # refused here, before the old pool is touched
            if len(self.replicas) != count or any(r.state not in STARTING + (GroupState.READY,) for r in self.replicas):
                self._end(lambda group: group.close())  # not already running at this size
                if self.device.info.kind == "neuron":
                    self.device.core_plan.claim(self.name, count)
                self._closing = False
                self.replicas = [self._group(i, cores[i], envs[i], threads) for i in range(count)]
                self.served = [0] * count
                for group in self.replicas:
                    group.start()
        if wait:
            for group in list(self.replicas):
                group.wait_ready(self.settings.tp_start_timeout)
        return self.describe()

    def _group(self, index: int, cores: list[int], env: dict[str, str], threads: int) -> WorkerGroup:
        warm = [str(s) for s in self.settings.prewarm] if self.settings.mode in self.modes else []
        return self._group_factory(self.settings, self.model_path, self.device, 1, cores, role="replica",
                                   place=f"replica {index}", warm=warm, env=env, threads=threads,
                                   on_dead=lambda group: self._replace(index, group),
                                   on_change=self.book.capacity_changed)

    def stop(self) -> None:
        with self._life:
            self._end(lambda group: group.stop())

    def close(self) -> None:
        with self._life:
            self._end(lambda group: group.close())

    def _end(self, how: Callable[[WorkerGroup], None]) -> None:
        """End every replica ``how``; requests waiting for one are told."""
        self._closing = True
        for group in self.replicas:
            how(group)
            self.book.lost_place(group.place)
        if self.device.core_plan is not None:
            self.device.core_plan.release(self.name)
        self.replicas = []
        with self._free:
            self._free.notify_all()

    def logs(self, lines: int = 20) -> dict[str, str]:
        return {f"{group.place} · {'worker' if name == 'rank 0' else name}": text
                for group in self.replicas for name, text in group.rank_logs(lines).items()}

    def _pick(self, request: GenerationRequest, warming: bool) -> int | None:
        """The replica to run ``request`` on now, preferring one where it is warm (None: wait for one).
        Where a new shape compiles, a request warm somewhere waits for a warm replica rather than
        compile again, so the cost line's "warm on 2 of 4" is what it gets."""
        ready = [i for i, r in enumerate(self.replicas) if r.state == GroupState.READY]
        if not ready:
            raise BackendNotReady("no replica is ready: " + "; ".join(
                f"{r.place} {r.state}" + (f" ({r.error})" if r.error else "") for r in self.replicas))
        warm_at = self.book.warm_places(request.mode, request.shape)
        warm = [i for i in ready if self.replicas[i].place in warm_at]
        free = [i for i in ready if i not in self._busy]
        if warming:  # a warm-up goes where the shape is still cold
            return ([i for i in free if i not in warm] or free or [None])[0]
        if free_warm := [i for i in free if i in warm]:
            return free_warm[0]
        if warm and self.book.compiles_here(request.mode):
            return None  # a warm replica frees up sooner than a cold one compiles
        return free[0] if free else None

    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False,
            warming: bool = False) -> EngineOutput:
        retries = 2  # for a request whose replica froze under it
        while True:
            with self._free:
                while True:
                    if should_stop():
                        raise GenerationCancelled("stopped while waiting for a free replica")
                    if self._closing:
                        raise BackendNotReady("the replicas are stopping")
                    index = self._pick(request, warming)
                    if index is not None:
                        self._busy.add(index)
                        group = self.replicas[index]
                        break
                    self._free.wait(0.1)
            try:
                out = group.run(request, on_progress, should_stop, forbid_compile)
                if index < len(self.served) and self.replicas[index] is group:
                    self.served[index] += 1
                return out
            except GroupDead as exc:  # its restart is under way (on_dead)
                why = str(exc).splitlines()[0]  # the rank's log tail stays in the System tab's logs
                if group.froze and retries and not should_stop():
                    retries -= 1
                    # Stopped or frozen (its heartbeat stood still), not crashed: it made nothing of this
                    # request, which another ready replica serves (or waits for one, as any request does).
                    log.warning("%s froze under a request (%s); another replica serves it", group.place, why)
                    continue
                raise exc.evolve(f"{group.place} died while serving this request ({why}); it is restarting, and "
                                 f"the other replicas keep serving — try again") from None
            finally:
                with self._free:
                    self._busy.discard(index)
                    self._free.notify_all()

    def _replace(self, index: int, group: WorkerGroup) -> None:
        """``on_dead`` of a replica that was ready: a fresh one on the same core (one that never became
        ready would fail the same way: it is not restarted)."""
        self.book.lost_place(group.place)
        with self._life:
            if self._closing or index >= len(self.replicas) or self.replicas[index] is not group:
                return
            try:
                group.close()  # its run dir, kept for the logs until now
                fresh = self._group(index, group.cores, group.env, group.threads)
                self.replicas[index] = fresh
                self.restarts += 1
                self.last_error = f"{group.place} was restarted: {group.error}"
                log.warning("%s died (%s); restarting it", group.place, group.error)
                fresh.start()
            except StudioError as exc:
                self.last_error = f"restarting {group.place}: {exc}"
                log.error("%s", self.last_error)
        with self._free:
            self._free.notify_all()
