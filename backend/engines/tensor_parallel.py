"""The tensor-parallel engine: one torchrun worker group, the transformer sharded over its ranks
(mode ``tp``; docs/tensor-parallel.md). While the group is not ready its requests run in process as
each rank would, saying why: a viewer, who cannot start the group, gets an image, never a refusal
naming a button only the operator has. A group whose ranks ended themselves restarts once its
processes are gone: on Neuron a core is held until the process that reserved it exits.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable

from backend.engines.base import PlaceBook, Route
from backend.engines.in_process import in_signature_order
from backend.errors import BackendNotReady, GenerationFailed, StudioError
from backend.launch.group import STARTING, GroupState, WorkerGroup, check_degree, tp_degrees
from backend.models.source import transformer_heads
from backend.request.records import EngineOutput, GenerationRequest, ProgressEvent
from backend.settings import TP_MODE, Settings

log = logging.getLogger(__name__)
PLACE = "tp"


class TensorParallelEngine:
    name = "tensor-parallel"
    status_key = "tp"
    modes = (TP_MODE,)

    def __init__(self, settings: Settings, device, model_path: str, book: PlaceBook):
        self.settings, self.device, self.model_path, self.book = settings, device, model_path, book
        self._group_factory = WorkerGroup  # a UI test's double replaces it (tests/ui/fake_engines.py)
        self.group: WorkerGroup | None = None
        self._lock = threading.Lock()  # one request at a time: rank 0 serves its jobs in order
        self._life = threading.Lock()  # start, stop and restart, one at a time
        # The two signs that a group's ranks ended themselves, in either order, both awaited by the
        # restart: rank 0's reply, and the death reported once its processes are gone.
        self._ending_said: WorkerGroup | None = None
        self._death_reported: WorkerGroup | None = None
        self._signs, self._closed = threading.Lock(), False

    @property
    def state(self) -> str:
        return self.group.state if self.group is not None else GroupState.STOPPED

    @property
    def ready(self) -> bool:
        return self.group is not None and self.group.state == GroupState.READY

    @property
    def configured(self) -> bool:
        return self.settings.mode == TP_MODE

    def route(self, request: GenerationRequest) -> Route | None:
        if request.mode not in self.modes:
            return None
        request = in_signature_order(request)  # as each rank runs it: the record lists that order
        if self.ready:
            return Route(request, self)
        return Route(dataclasses.replace(request, mode=self.settings.runs_as(request.mode)), None,
                     self._in_process_why())

    def _in_process_why(self) -> str:
        group = self.group
        if group is None:
            return "the operator has not started the tensor-parallel group"
        if group.state in (GroupState.STOPPED, GroupState.STOPPING):
            return f"the tensor-parallel group is {group.state} (the operator stopped it)"
        return f"the tensor-parallel group is {group.state}" + (f" ({group.error})" if group.state == GroupState.DEAD
                                                                else "")

    def degraded(self) -> str | None:
        """Only a dead group is an alarm (a start or a stop is not)."""
        return self._in_process_why() if self.state == GroupState.DEAD else None

    def places(self, mode: str) -> list[str]:
        return [PLACE]

    def capacity(self) -> int:
        return 1 if self.ready else 0

    def cores_wanted(self) -> tuple[int, int | None]:
        degree = self.group.degree if self.group is not None else self.settings.tp_degree
        return degree, transformer_heads(self.model_path)

    def busy_with_cache(self) -> str | None:
        group = self.group
        if group is not None and group.state in STARTING + (GroupState.READY, GroupState.STOPPING):
            return (f"the tensor-parallel group is {group.state}: its ranks hold lock files in the compile "
                    f"cache and compile into it; stop the group first (System tab), then clear the cache")
        return None

    def describe(self) -> dict[str, Any]:
        group = self.group
        out = group.describe() if group is not None else {
            "state": GroupState.STOPPED, "world_size": self.settings.tp_degree, "ranks": [], "error": None}
        return {**out, "degrees": tp_degrees(transformer_heads(self.model_path), self.device.core_plan)}

    def load(self) -> None:
        self.start(wait=True)
        if not self.ready:
            raise BackendNotReady(f"the tensor-parallel group did not start: {self.group.error or self.state}")

    def start(self, size: int | None = None, wait: bool = False) -> dict[str, Any]:
        degree = self.settings.tp_degree if size is None else size
        with self._life:
            running = self._launch(degree)
        if wait:
            running.wait_ready(self.settings.tp_start_timeout)
        return running.describe()

    def _launch(self, degree: int) -> WorkerGroup:
        """(``_life`` held) The group of ``degree`` ranks: the one running, or a new one."""
        group = self.group
        if group is not None and group.degree == degree and group.state in STARTING + (GroupState.READY,):
            return group
        # Checked (its cores claimed) before the old group, whose cores count as free, is closed.
        cores = check_degree(degree, transformer_heads(self.model_path), self.device.core_plan)
        if group is not None:
            group.close()
        warm = [str(s) for s in self.settings.prewarm] if self.settings.mode == TP_MODE else []
        running = self._group_factory(self.settings, self.model_path, self.device, degree, cores,
                                      role="tp", place=PLACE, warm=warm,
                                      on_dead=lambda group: self._sign(group, said=group.ended_itself, died=True),
                                      on_change=self.book.capacity_changed)
        self.group = running
        self.book.lost_mode(TP_MODE)  # a new group has none of the old one's graphs
        running.start()
        return running

    def stop(self) -> None:
        self._end(lambda group: group.stop())

    def close(self) -> None:
        self._end(lambda group: group.close(), closed=True)

    def _end(self, how: Callable[[WorkerGroup], None], closed: bool = False) -> None:
        with self._life:
            self._closed = self._closed or closed
            if self.group is not None:
                how(self.group)
            if self.device.core_plan is not None:
                self.device.core_plan.release(self.name)

    def logs(self, lines: int = 20) -> dict[str, str]:
        return self.group.rank_logs(lines) if self.group is not None else {}

    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False, warming: bool = False) -> EngineOutput:
        group = self.group
        if group is None:
            raise BackendNotReady("the tensor-parallel group is not running")
        with self._lock:
            try:
                return group.run(request, on_progress, should_stop, forbid_compile)
            except GenerationFailed as exc:
                if exc.group_ending:
                    self._sign(group, said=True)
                raise

    def _sign(self, group: WorkerGroup, said: bool = False, died: bool = False) -> None:
        with self._signs:
            if said:
                self._ending_said = group
            if died:
                self._death_reported = group
            due = self._ending_said is group and self._death_reported is group
        if not due:
            return
        if died:  # the group's own thread: start the new one from another, not under its feet
            threading.Thread(target=self._restart, args=(group,), name="tp-restart", daemon=True).start()
        else:
            self._restart(group)

    def _restart(self, group: WorkerGroup) -> None:
        """A new group of the same degree, unless this one was stopped, replaced or closed meanwhile."""
        try:
            with self._life:
                if self.group is group and group.state == GroupState.DEAD and not self._closed:
                    self._launch(group.degree)
        except StudioError as exc:
            log.error("restarting the tensor-parallel group: %s", exc)
