"""Engines: what runs a request. One contract, three engines; the manager names none of them.

The contract (``Engine``): ``load`` / ``run`` / ``describe`` / ``close``, plus what it serves
(``modes``), where a request goes (``route``), the processes that may serve a mode (``places``, the
compile table's keys), how many requests it runs at once now (``capacity``), and for the engines
that launch worker processes ``start(size)`` / ``stop()`` / ``logs()``. ``run`` is safe to call
from several threads: each engine queues what it cannot run at once.

- ``in_process.InProcessEngine``: the pipeline in the app's own process (eager, compiled, regional);
  it serves a request that a launched engine cannot serve right now (``Route.degraded``).
- ``tensor_parallel.TensorParallelEngine``: a torchrun worker group, the transformer sharded over
  its ranks (mode ``tp``).
- ``replicas.ReplicaPool``: N single-rank worker groups, each a whole copy of the pipeline on its own
  device (a NeuronCore from the core plan, a CUDA device, a share of the CPU threads); serves the
  in-process modes when started, dispatching to a free replica where the shape is warm.

The two launched engines share ``worker_group.WorkerGroup`` (launch, READY, monitor, heartbeats,
stall detection, authenticated socket, stop) and the worker (``backend.tp.worker``).

``build_engines`` makes them in routing order: launched engines first, the in-process engine last.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from backend.records import EngineOutput, GenerationRequest, ProgressEvent


@dataclasses.dataclass(frozen=True)
class Route:
    """Where a request runs: ``engine`` (None: the in-process engine, because the engine that should
    serve it cannot right now), the request it runs (a degraded one may run in another mode), and
    why it is degraded (None: it is not)."""

    engine: Any
    request: "GenerationRequest"
    degraded: str | None = None


class Engine(Protocol):
    name: str  # also its key in the manager's status
    modes: tuple[str, ...]  # the modes it serves
    state: str  # ready, launching/loading/warming, dead, stopped, idle

    def load(self) -> None: ...

    def run(self, request: "GenerationRequest", on_progress: Callable[["ProgressEvent"], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False) -> "EngineOutput": ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...

    def route(self, request: "GenerationRequest") -> Route | None:
        """This engine's answer for a request: a Route, or None (not this engine's: ask the next)."""

    def places(self, mode: str) -> list[str]:
        """The processes that would serve ``mode`` now (the compile table's places)."""

    def capacity(self) -> int:
        """How many requests it runs at once now (0: none)."""

    def degraded(self) -> str | None:
        """Why this engine's requests are being served in process right now (None: they are not)."""


def build_engines(settings, device, model_path: str, table, engine_factory=None) -> dict[str, Engine]:
    """The engines for these settings, in routing order. ``table`` is the manager's compile table
    (a launched engine forgets the places it restarted); ``engine_factory(device, model_path)``
    replaces the in-process engine (the handler tests give a fake one)."""
    from backend.engines.in_process import InProcessEngine
    from backend.engines.replicas import ReplicaPool
    from backend.engines.tensor_parallel import TensorParallelEngine

    local = (engine_factory or InProcessEngine)(device, model_path)
    engines = [TensorParallelEngine(settings, device, model_path, table),
               ReplicaPool(settings, device, model_path, table), local]
    return {engine.name: engine for engine in engines}
