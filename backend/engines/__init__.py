"""Engines: what runs a request. One contract, three engines; the manager names none of them.

The contract, by role, is ``backend.engines.base``: every engine answers ``route`` / ``places`` /
``capacity`` / ``degraded`` / ``run`` / ``load`` / ``describe`` / ``close``; the in-process role
adds ``exclusive``; the launched role adds ``start(size)`` / ``stop()`` / ``logs()`` /
``cores_wanted()`` / ``busy_with_cache()``. ``run`` is safe to call from several threads: each
engine queues what it cannot run at once.

- ``in_process.InProcessEngine``: the pipeline in the app's own process (eager, compiled, regional);
  it serves a request that a launched engine cannot serve right now (``Route.degraded``).
- ``tensor_parallel.TensorParallelEngine``: a torchrun worker group, the transformer sharded over
  its ranks (mode ``tp``).
- ``replicas.ReplicaPool``: N single-rank worker groups, each a whole copy of the pipeline on its own
  device (a NeuronCore from the core plan, a CUDA device, a share of the CPU threads); serves the
  in-process modes when started, dispatching to a free replica where the shape is warm.

The two launched engines share ``worker_group.WorkerGroup`` (launch, READY, monitor, heartbeats,
stall detection, authenticated socket, stop) and the worker (``backend.workers.worker``).

``build_engines`` makes them, held by role (``base.Engines``).
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
