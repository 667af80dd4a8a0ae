"""The engine contract, by role: what the manager may ask of an engine, and what an engine may ask back.

Two roles (the manager holds each engine by its role, never by its type or position):

- ``InProcessEngine`` role: the pipeline in the app's own process. It serves every mode that no
  launched engine takes, and what a launched engine cannot serve right now. Exactly one.
- ``LaunchedEngine`` role: worker processes the operator starts and stops (a tensor-parallel
  group, a pool of replicas). Zero or more, asked in order; the first whose ``route`` answers
  serves the request.

An engine never writes the manager's compile table: it reads where a shape is warm and reports a
lost place through the ``PlaceBook`` it is given (``backend.serving.admission.PlaceBook``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from backend.request.records import EngineOutput, GenerationRequest, ProgressEvent
    from backend.shapes import Shape


@dataclasses.dataclass(frozen=True)
class Route:
    """Where a request runs: on ``engine``, or — ``in_process`` — on the in-process engine because
    the engine that should serve it cannot right now (``degraded``: why, in a clause the page words
    as "degraded: …"; the record's ``mode`` and ``requested_mode`` say the rest). ``request`` is what
    runs there (a tp request served in process runs in ``--tp-compile``'s mode)."""

    request: "GenerationRequest"
    engine: Any = None
    degraded: str | None = None

    @property
    def in_process(self) -> bool:
        return self.engine is None


class PlaceBook(Protocol):
    """What an engine may read of the compile table and report to it (the manager's, per engine)."""

    def warm_places(self, mode: str, shape: "Shape") -> set[str]: ...

    def warm_by_place(self) -> dict[str, list[str]]:
        """The "mode shape"s warm at each place (one read of the table for all of them)."""

    def compiles_here(self, mode: str) -> bool:
        """Whether a new shape in ``mode`` compiles on this device at all."""

    def lost_place(self, place: str) -> None:
        """A process that held graphs is gone (a replica restarted): nothing is warm there now."""

    def capacity_changed(self) -> None:
        """A worker group became ready, died or stopped: how many requests can run at once may differ."""

    def lost_mode(self, mode: str) -> None:
        """Every graph of ``mode`` is gone (its worker group was replaced)."""


class Engine(Protocol):
    """What every engine answers."""

    name: str  # how the operator and the status name it
    status_key: str  # its key in the manager's status
    modes: tuple[str, ...]  # the modes it serves
    state: str  # ready, launching/loading/warming, dead, stopped, idle

    def route(self, request: "GenerationRequest") -> Route | None:
        """This engine's answer for a request: a Route, or None (not this engine's: ask the next)."""

    def places(self, mode: str) -> list[str]:
        """The processes that would serve ``mode`` now (the compile table's places)."""

    def capacity(self) -> int:
        """How many requests it runs at once now (0: none)."""

    def degraded(self) -> str | None:
        """Why this engine's requests are being served in process right now (None: they are not)."""

    def run(self, request: "GenerationRequest", on_progress: Callable[["ProgressEvent"], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False,
            warming: bool = False) -> "EngineOutput":
        """Generate; safe from several threads (it queues what it cannot run at once)."""

    def load(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class InProcessEngine(Engine, Protocol):
    """The in-process role: also held exclusively for work that must not overlap a run."""

    def exclusive(self):
        """A lock: while held, no run starts (clearing caches, bundles)."""


class LaunchedEngine(Engine, Protocol):
    """The launched role: worker processes, started and stopped by the operator."""

    configured: bool  # started at launch by the settings

    def start(self, size: int | None = None, wait: bool = False) -> dict[str, Any]: ...

    def stop(self) -> None: ...

    def logs(self, lines: int = 20) -> dict[str, str]: ...

    def cores_wanted(self) -> tuple[int, int | None]:
        """(cores, attention heads) it starts with: the core plan's view of it."""

    def busy_with_cache(self) -> str | None:
        """Why the compile cache must not be cleared now (None: it may be)."""


class Engines(dict[str, Engine]):
    """The engines by role: ``local`` (the in-process engine) and ``launched`` (asked in order). As
    a mapping, every engine by name, in routing order (launched first); empty before the model
    loads."""

    def __init__(self, local: InProcessEngine | None = None, launched: tuple[LaunchedEngine, ...] = ()):
        self.local = local
        self.launched = tuple(launched)
        super().__init__((e.name, e) for e in (*self.launched, *((local,) if local is not None else ())))
