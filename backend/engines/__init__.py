"""Engines: what runs a request. One contract (``backend.engines.base``), three engines; the manager
names none of them.

- ``in_process.InProcessEngine``: the pipeline in the app's own process (eager, compiled, regional);
  it also serves what a launched engine cannot serve right now (``Route.degraded``).
- ``tensor_parallel.TensorParallelEngine``: a torchrun worker group, the transformer sharded over
  its ranks (mode ``tp``).
- ``replicas.ReplicaPool``: N single-rank worker groups, each a whole copy of the pipeline.

The two launched engines share ``backend.launch.group.WorkerGroup`` and the worker
(``backend.workers.worker``).
"""

from __future__ import annotations

from backend.engines.base import Engines, PlaceBook


def build_engines(settings, device, model_path: str, book: PlaceBook, engine_factory=None) -> Engines:
    """The engines for these settings, by role. ``book``: what they read of the manager's compile
    table and report to it; ``engine_factory(device, model_path)`` replaces the in-process engine
    (the handler tests give a fake one)."""
    from backend.engines.in_process import InProcessEngine
    from backend.engines.replicas import ReplicaPool
    from backend.engines.tensor_parallel import TensorParallelEngine

    local = (engine_factory or InProcessEngine)(device, model_path)
    return Engines(local, (TensorParallelEngine(settings, device, model_path, book),
                           ReplicaPool(settings, device, model_path, book)))
