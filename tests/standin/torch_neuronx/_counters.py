"""Private store behind ``torch_neuronx.metrics``: named integer counters, off unless enabled at load.

Rule enforced (TorchNeuron environment variables, metrics section,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html):
counters are collected only when ``TORCH_NEURONX_METRICS_ENABLED`` is truthy. The stand-in reads the
variable once, when the package loads, so an app that sets it after importing ``torch_neuronx`` sees
no counters at all (always None) - the strict reading of "set it before the backend loads".

A counter that was never incremented does not exist: reading it gives None, not 0.
"""

from __future__ import annotations

import os
import threading

TOTAL_COMPILATIONS = "CompilationCache.TotalCompilations"
IN_MEMORY_HITS = "CompilationCache.InMemoryHits"
PERSISTENT_HITS = "CompilationCache.PersistentHits"

_TRUTHY = {"1", "true", "yes", "on"}
ENABLED = os.environ.get("TORCH_NEURONX_METRICS_ENABLED", "").strip().lower() in _TRUTHY

_lock = threading.Lock()
_values: dict[str, int] = {}


def increment(name: str, by: int = 1) -> None:
    if not ENABLED:
        return
    with _lock:
        _values[name] = _values.get(name, 0) + by


def value(name: str) -> int | None:
    with _lock:
        return _values.get(name)


def names() -> list[str]:
    with _lock:
        return sorted(_values)
