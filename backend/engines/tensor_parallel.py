"""The tensor-parallel engine: one torchrun worker group, the transformer sharded over its ranks.

It serves mode ``tp``. What only this module knows:

- the degree (``--tp-degree``, or the one given to ``start``): it must divide the transformer's
  attention heads, and on Neuron its ranks get cores from the core plan (``claim``, after the
  app's and beside the replicas'); a degree that does not fit is refused before anything starts,
  naming the ones that do;
- a start with another degree replaces the running group (its graphs go with it: the compile
  table forgets the place ``tp``); the same degree leaves a starting or ready group as it is;
- while the group is not ready — never started or stopped by the operator, launching, loading,
  warming or dead — its requests are served in process the way each rank would run them
  (``--tp-compile``), and the record says so and why (``Route.degraded``): a viewer, who cannot
  start the group, still gets an image, never a refusal that names a button only the operator has;
- when the ranks end themselves after a failed request (on Neuron: the reply says
  ``group_ending``, or a rank's exit status says it), a new group of the same degree starts once
  the old one's processes are gone (its ``on_dead``): not before, since on Neuron a core is held
  until the process that reserved it exits.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable

from backend.engines.base import PlaceBook, Route
from backend.errors import BackendNotReady, GenerationFailed, StudioError
from backend.launch.group import STARTING, GroupState, WorkerGroup, check_degree
from backend.request.records import EngineOutput, GenerationRequest, ProgressEvent
from backend.settings import TP_MODE, Settings

log = logging.getLogger(__name__)
PLACE = "tp"


class TensorParallelEngine:
    name = "tensor-parallel"
    status_key = "tp"
    modes = (TP_MODE,)

    def __init__(self, settings: Settings, device, model_path: str, book: PlaceBook, *,
                 group_factory: Callable[..., WorkerGroup] = WorkerGroup):
        self.settings, self.device, self.model_path, self.book = settings, device, model_path, book
        self._group_factory = group_factory
        self.group: WorkerGroup | None = None
        self._lock = threading.Lock()  # one request at a time: rank 0 serves its jobs in order
        self._life = threading.Lock()  # start, stop and restart, one at a time
        self.last_error: str | None = None
        # The two signs that a group's ranks ended themselves: each may come first (rank 0's reply,
        # or the death the group reports once its processes are gone); the restart happens once
        # both are known, or at the death when an exit status says it. A second restart of the same
        # group finds it replaced (``_restart``) and does nothing.
        self._ending_said: WorkerGroup | None = None
        self._death_reported: WorkerGroup | None = None
        self._signs = threading.Lock()
        self._closed = False

    # what the manager asks ------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self.group.state if self.group is not None else GroupState.STOPPED

    @property
    def ready(self) -> bool:
        """Whether the group serves requests now (the one place that decides it)."""
        return self.group is not None and self.group.state == GroupState.READY

    @property
    def configured(self) -> bool:
        """Started at launch (``--mode tp``)."""
        return self.settings.mode == TP_MODE

    @property
    def degree(self) -> int:
        return self.group.degree if self.group is not None else self.settings.tp_degree

    def route(self, request: GenerationRequest) -> Route | None:
        if request.mode not in self.modes:
            return None
        if self.ready:
            return Route(request, self)
        return Route(dataclasses.replace(request, mode=self.settings.runs_as(request.mode)), None,
                     self._in_process_why())

    def _in_process_why(self) -> str:
        """Why requests run in process (the record says in which mode; the page words it)."""
        group = self.group
        if group is None:
            return "the operator has not started the tensor-parallel group"
        if group.state in (GroupState.STOPPED, GroupState.STOPPING):
            return f"the tensor-parallel group is {group.state} (the operator stopped it)"
        return f"the tensor-parallel group is {group.state}" + (f" ({group.error})" if group.state == GroupState.DEAD
                                                                else "")

    def degraded(self) -> str | None:
        """Something is wrong with the group (it died) while tensor-parallel requests run in process;
        None while it is ready, starting (an ordinary start is no alarm) or simply not running."""
        group = self.group
        return self._in_process_why() if group is not None and group.state == GroupState.DEAD else None

    def places(self, mode: str) -> list[str]:
        return [PLACE]

    def capacity(self) -> int:
        return 1 if self.ready else 0

    def cores_wanted(self) -> tuple[int, int | None]:
        """(cores, attention heads) this engine starts with: the core plan's view of it."""
        from backend.models.source import transformer_heads

        return self.degree, transformer_heads(self.model_path)

    def busy_with_cache(self) -> str | None:
        """Why the compile cache must not be cleared now (None: it may be)."""
        group = self.group
        if group is not None and group.state in STARTING + (GroupState.READY, GroupState.STOPPING):
            return (f"the tensor-parallel group is {group.state}: its ranks hold lock files in the compile "
                    f"cache and compile into it; stop the group first (System tab), then clear the cache")
        return None

    def describe(self) -> dict[str, Any]:
        group = self.group
        if group is None:
            return {"state": GroupState.STOPPED, "world_size": self.settings.tp_degree, "ranks": [], "error": None}
        return group.describe()

    # lifecycle ------------------------------------------------------------------------------------
    def load(self) -> None:
        """Start the group of the configured degree and wait for READY."""
        self.start(wait=True)
        if not self.ready:
            raise BackendNotReady(f"the tensor-parallel group did not start: {self.group.error or self.state}")

    def start(self, size: int | None = None, wait: bool = False) -> dict[str, Any]:
        """Launch a group of ``size`` ranks (default ``--tp-degree``), replacing one of another degree."""
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
        from backend.models.source import transformer_heads

        # Checked (and on Neuron its cores claimed) before the old group is touched; the old
        # group's own cores count as free: it is closed before the new one launches.
        cores = check_degree(degree, transformer_heads(self.model_path), self.device.core_plan,
                             owner=self.name)
        if group is not None:
            group.close()
        warm = [str(s) for s in self.settings.prewarm] if self.settings.mode == TP_MODE else []
        running = self._group_factory(self.settings, self.model_path, self.device, degree, cores,
                                      role="tp", place=PLACE, warm=warm, on_dead=self._died,
                                      on_change=self.book.capacity_changed)
        self.group = running
        self.book.lost_mode(TP_MODE)  # a new group has none of the old one's graphs
        running.start()
        return running

    def stop(self) -> None:
        with self._life:
            if self.group is not None:
                self.group.stop()
            self._release_cores()

    def close(self) -> None:
        with self._life:
            self._closed = True
            if self.group is not None:
                self.group.close()
            self._release_cores()

    def _release_cores(self) -> None:
        if self.device.core_plan is not None:
            self.device.core_plan.release(self.name)

    def logs(self, lines: int = 20) -> dict[str, str]:
        return self.group.rank_logs(lines) if self.group is not None else {}

    # requests -------------------------------------------------------------------------------------
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

    def _died(self, group: WorkerGroup) -> None:
        """The group's ``on_dead``: it was ready, it died, and its processes are gone."""
        self._sign(group, said=group.ended_itself, died=True)

    def _sign(self, group: WorkerGroup, said: bool = False, died: bool = False) -> None:
        """Restart a group whose ranks ended themselves, once its processes are gone."""
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
        """A new group of the same degree (its requests run in process meanwhile), unless the group
        was stopped, replaced or closed meanwhile."""
        try:
            with self._life:
                if self.group is group and group.state == GroupState.DEAD and not self._closed:
                    self._launch(group.degree)
        except StudioError as exc:
            self.last_error = f"restarting the tensor-parallel group: {exc}"
            log.error("%s", self.last_error)
