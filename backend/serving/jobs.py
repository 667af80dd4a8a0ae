"""The job board: every run the service takes, from every door, waits and runs here.

A job's ``Owner`` is typed: no string a client sends can stand for another kind's owner (a page that
sends ``"api key alice"`` as its session owns ``Owner(PAGE, "api key alice")``, never Alice's runs).

Fairness is round robin between owners: when a slot frees, the waiting owner served least recently
goes next, with its oldest job. Each owner may hold ``cap`` jobs (the operator's and the app's own
are not capped). Each engine runs ``capacity(engine)`` jobs at once, read each time a slot is looked
for; a job waits only behind the jobs bound for its own engine.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import threading
import time
from typing import Any, Callable

from backend.errors import BackendNotReady, GenerationCancelled, QueueFull
from backend.request.records import Phase
from backend.shapes import Shape


class OwnerKind(enum.Enum):
    PAGE = "page"  # a browser page or a gradio_client session (Gradio's session hash)
    API_KEY = "api key"  # the Images API with --api-keys: the key's name
    API_ADDRESS = "api address"  # the Images API without keys: the loopback caller's address
    OPERATOR = "operator"  # the operator's own work (a warm-up started from the System tab)
    LOCAL = "local"  # the CLI and the app's start-up passes (prewarm, a bundle's shapes)


@dataclasses.dataclass(frozen=True)
class Owner:
    kind: OwnerKind
    ident: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value} {self.ident}".strip()


LOCAL = Owner(OwnerKind.LOCAL)


class JobState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"


@dataclasses.dataclass(eq=False)
class Job:
    id: int
    owner: Owner
    mode: str
    shape: Shape
    steps: int
    engine: str
    arrived: float
    state: JobState = JobState.WAITING
    phase: Phase = Phase.QUEUED
    step: int = 0
    started: float | None = None
    compile_started: float | None = None
    compile_estimate: float | None = None
    overlapped: bool = False  # ran beside another job: not a steady figure for its shape
    worker_stopped: bool = False  # the operator ended its compile by stopping its worker
    cancel: threading.Event = dataclasses.field(default_factory=threading.Event)

    def public(self, now: float) -> dict[str, Any]:
        """What the status shows: no owner (a page session is its own business)."""
        out = {"id": self.id, "mode": self.mode, "shape": str(self.shape), "phase": self.phase, "step": self.step,
               "steps": self.steps, "engine": self.engine, "state": self.state.value,
               "elapsed": round(now - (self.started if self.started is not None else self.arrived), 3)}
        if self.compile_started is not None:
            out["compile_elapsed"] = round(now - self.compile_started, 3)
            out["compile_estimate"] = self.compile_estimate
        return out


class JobBoard:
    def __init__(self, capacity: Callable[[str], int], clock: Callable[[], float] = time.monotonic):
        self._capacity = capacity
        self._clock = clock
        self._cond = threading.Condition()
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._turns = itertools.count(1)
        self._served: dict[Owner, int] = {}  # the turn each owner was last served at
        self._closed = False

    def enter(self, owner: Owner, mode: str, shape: Shape, steps: int, engine: str, cap: int | None) -> Job:
        with self._cond:
            if self._closed:
                raise BackendNotReady("the app is shutting down")
            held = [j for j in self._jobs.values() if j.owner == owner]
            if cap is not None and len(held) >= cap:
                waiting = [j for j in held if j.state is JobState.WAITING]
                raise QueueFull(f"this caller has {len(held)} runs waiting or running already; at most {cap} "
                                f"(one running, {cap - 1} waiting) so that others get a turn"
                                + (f" (the first waits at place {self._place(waiting[0])})" if waiting else ""))
            job = Job(next(self._ids), owner, mode, shape, steps, engine, self._clock())
            self._jobs[job.id] = job
            self._cond.notify_all()
            return job

    def wait_turn(self, job: Job, should_stop: Callable[[], bool],
                  on_wait: Callable[[int, int], None] | None = None, poll: float = 0.25) -> None:
        """Block until ``job`` is next and a slot is free, then mark it running. ``on_wait(place,
        waiting)`` hears each change of place; a stop raises GenerationCancelled."""
        seen = None
        with self._cond:
            while True:
                if job.cancel.is_set() or should_stop() or self._closed:
                    self._remove(job)
                    raise GenerationCancelled("stopped while waiting for its turn")
                order, running = self._lines(job.engine)
                if order and order[0] is job and len(running) < max(1, self._capacity(job.engine)):
                    job.state, job.started, job.phase = JobState.RUNNING, self._clock(), Phase.STARTING
                    # Runs side by side share the machine: none is a steady figure for its shape.
                    for other in self._jobs.values():
                        if other is not job and other.state is JobState.RUNNING:
                            other.overlapped = job.overlapped = True
                    self._served[job.owner] = next(self._turns)
                    self._cond.notify_all()
                    return
                place = order.index(job) + 1  # among the jobs bound for its engine
                if on_wait is not None and (place, len(order)) != seen:
                    seen = (place, len(order))
                    self._cond.release()
                    try:
                        on_wait(place, len(order))
                    finally:
                        self._cond.acquire()
                    continue
                self._cond.wait(poll)

    def ahead(self, job: Job) -> tuple[list[Job], int]:
        """The jobs ``job`` waits behind (its engine's running ones, then those before it) and how
        many its engine runs at once."""
        with self._cond:
            order, running = self._lines(job.engine)
            return running + order[:order.index(job) if job in order else len(order)], self._capacity(job.engine)

    def leave(self, job: Job) -> None:
        with self._cond:
            self._remove(job)

    def _remove(self, job: Job) -> None:
        if self._jobs.pop(job.id, None) is not None:
            if not any(j.owner == job.owner for j in self._jobs.values()):
                # Forgotten (page sessions come and go): round robin would reach a newcomer next anyway.
                self._served.pop(job.owner, None)
            self._cond.notify_all()

    def capacity_changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Refuse new jobs and end the waiting ones; running ones are cancelled by their owner's stop."""
        with self._cond:
            self._closed = True
            for job in self._jobs.values():
                job.cancel.set()
            self._cond.notify_all()

    def _order(self) -> list[Job]:
        """(lock held) The waiting jobs in the order they will run."""
        queues: dict[Owner, list[Job]] = {}
        for job in sorted(self._jobs.values(), key=lambda j: j.id):
            if job.state is JobState.WAITING:
                queues.setdefault(job.owner, []).append(job)
        served = dict(self._served)
        order: list[Job] = []
        while queues:
            owner = min(queues, key=lambda o: (served.get(o, 0), queues[o][0].id))
            order.append(queues[owner].pop(0))
            served[owner] = 10**12 + len(order)  # in this projection, served after every real turn
            if not queues[owner]:
                del queues[owner]
        return order

    def jobs(self) -> list[Job]:
        with self._cond:
            return sorted(self._jobs.values(), key=lambda j: j.id)

    def running(self) -> list[Job]:
        return [j for j in self.jobs() if j.state is JobState.RUNNING]

    def place(self, job: Job) -> int | None:
        """1: next among its engine's; None when it runs or has left."""
        with self._cond:
            return self._place(job)

    def _place(self, job: Job) -> int | None:
        order, _running = self._lines(job.engine)
        return order.index(job) + 1 if job in order else None

    def _lines(self, engine: str) -> tuple[list[Job], list[Job]]:
        """(lock held) ``engine``'s jobs: those waiting, in order, and those running."""
        order = [j for j in self._order() if j.engine == engine]
        return order, [j for j in self._jobs.values() if j.state is JobState.RUNNING and j.engine == engine]

    def cancel(self, owner: Owner | None, everyone: bool) -> list[Job]:
        """Ask ``owner``'s jobs (``everyone``: all) to stop; returns those asked."""
        with self._cond:
            mine = [j for j in self._jobs.values() if everyone or (owner is not None and j.owner == owner)]
            for job in mine:
                job.cancel.set()
            self._cond.notify_all()
            return mine

    def snapshot(self) -> list[dict[str, Any]]:
        now = self._clock()
        with self._cond:
            order = self._order()
            out = []
            for job in sorted(self._jobs.values(), key=lambda j: j.id):
                entry = job.public(now)
                if job.state is JobState.WAITING:
                    entry["place"] = [j for j in order if j.engine == job.engine].index(job) + 1
                out.append(entry)
            return out
