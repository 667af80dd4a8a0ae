"""Engines: what runs a request, under one contract (``backend.engines.base``): ``in_process`` (the
pipeline in the app's process), ``tensor_parallel`` (a torchrun group, mode ``tp``), ``replicas`` (N
one-rank groups) and, where ``--ray`` names a cluster, ``ray_serve`` (a Ray Serve deployment).
"""

from __future__ import annotations

from backend.engines.base import Engines, PlaceBook


def build_engines(settings, device, model_path: str, book: PlaceBook, engine_factory=None) -> Engines:
    """The engines for these settings, by role. ``engine_factory(device, model_path)`` replaces the
    in-process engine (the handler tests give a fake one)."""
    from backend.engines.in_process import InProcessEngine
    from backend.engines.ray_serve import RayServeEngine
    from backend.engines.replicas import ReplicaPool
    from backend.engines.tensor_parallel import TensorParallelEngine

    local = (engine_factory or InProcessEngine)(device, model_path)
    ray = (RayServeEngine(settings, device, model_path, book),) if settings.ray else ()
    return Engines(local, (TensorParallelEngine(settings, device, model_path, book),
                           ReplicaPool(settings, device, model_path, book), *ray))
