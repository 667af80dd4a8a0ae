"""The engine contract, by role: the manager holds each engine by its role, never by its type. The
in-process engine (exactly one) serves every mode no launched engine takes, and what a launched one
cannot serve now; launched engines (worker processes the operator starts and stops) are asked in
order, the first whose ``route`` answers serves. An engine never writes the manager's compile table:
it reads it and reports to it through its ``PlaceBook`` (``backend.serving.admission``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from backend.request.records import EngineOutput, GenerationRequest, ProgressEvent
    from backend.shapes import Shape


@dataclasses.dataclass(frozen=True)
class Route:
    """Where ``request`` runs: on ``engine``, or (``in_process``) on the in-process engine because
    the engine that should serve it cannot now (``degraded``: why, a clause the page words as
    "degraded: …"). A tp request served in process runs in ``--tp-compile``'s mode."""

    request: "GenerationRequest"
    engine: Any = None
    degraded: str | None = None

    @property
    def in_process(self) -> bool:
        return self.engine is None


class PlaceBook(Protocol):
    """What an engine may read of the compile table and report to it."""

    def warm_places(self, mode: str, shape: "Shape") -> set[str]: ...
    def warm_by_place(self) -> dict[str, list[str]]: ...  # the "mode shape"s warm at each place
    def compiles_here(self, mode: str) -> bool: ...  # whether a new shape in ``mode`` compiles at all
    def lost_place(self, place: str) -> None: ...  # a process that held graphs is gone
    # ``place`` ran (mode, signature) outside the manager's runs (a Ray replica's warm set): its compile counts
    def warmed(self, place: str, mode: str, signature: str, counts: dict[str, Any]) -> None: ...
    def capacity_changed(self) -> None: ...  # a worker group became ready, died or stopped
    def lost_mode(self, mode: str) -> None: ...  # every graph of ``mode`` is gone (its group replaced)


class Engine(Protocol):
    name: str  # how the operator and the status name it
    status_key: str  # its key in the manager's status
    modes: tuple[str, ...]
    state: str  # ready, launching/loading/warming, dead, stopped, idle

    def route(self, request: "GenerationRequest") -> Route | None: ...  # None: ask the next engine
    def places(self, mode: str) -> list[str]: ...  # the processes that would serve ``mode`` now
    def capacity(self) -> int: ...  # how many requests it runs at once now
    def degraded(self) -> str | None: ...  # why its requests are served in process now

    def run(self, request: "GenerationRequest", on_progress: Callable[["ProgressEvent"], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False,
            warming: bool = False) -> "EngineOutput":
        """Generate; safe from several threads (it queues what it cannot run at once)."""

    def load(self) -> None: ...
    def describe(self) -> dict[str, Any]: ...
    # Optional: ``admission_device()``, the device its processes run on where it is not the app's
    # (Ray's replicas on Neuron nodes beside a head without Neuron); admission predicts by it.
    def close(self) -> None: ...


class InProcessEngine(Engine, Protocol):
    def exclusive(self):
        """A lock: while held, no run starts (clearing caches, bundles)."""


class LaunchedEngine(Engine, Protocol):
    configured: bool  # started at launch by the settings

    def start(self, size: int | None = None, wait: bool = False) -> dict[str, Any]: ...
    def stop(self) -> None: ...
    def logs(self, lines: int = 20) -> dict[str, str]: ...
    def cores_wanted(self) -> tuple[int, int | None]: ...  # (cores, attention heads) it starts with
    def busy_with_cache(self) -> str | None: ...  # why the compile cache must not be cleared now


class Engines(dict[str, Engine]):
    """``local`` and ``launched``; as a mapping, every engine by name in routing order (launched first)."""

    def __init__(self, local: InProcessEngine | None = None, launched: tuple[LaunchedEngine, ...] = ()):
        self.local = local
        self.launched = tuple(launched)
        super().__init__((e.name, e) for e in (*self.launched, *((local,) if local is not None else ())))
