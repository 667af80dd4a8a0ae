"""Private store behind ``torch_neuronx.metrics``: named integer counters, off unless enabled at load.

Rule enforced (TorchNeuron environment variables, metrics section,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html):
counters are collected only when ``TORCH_NEURONX_METRICS_ENABLED`` is truthy. The stand-in reads the
variable once, when the package loads, so an app that sets it after importing ``torch_neuronx`` sees
no counters at all (always None) - the strict reading of "set it before the backend loads".

A counter that was never incremented does not exist: reading it gives None, not 0. Metrics (timed
samples, e.g. ``CompilationCache.CompilationTime`` in microseconds: the neuronx-cc time of every
NEFF built) likewise: None until their first sample.
"""

from __future__ import annotations

import os
import threading

TOTAL_COMPILATIONS = "CompilationCache.TotalCompilations"
IN_MEMORY_HITS = "CompilationCache.InMemoryHits"
PERSISTENT_HITS = "CompilationCache.PersistentHits"
COMPILATION_TIME = "CompilationCache.CompilationTime"  # metric, microseconds per NEFF compiled

_TRUTHY = {"1", "true", "yes", "on"}
ENABLED = os.environ.get("TORCH_NEURONX_METRICS_ENABLED", "").strip().lower() in _TRUTHY

_lock = threading.Lock()
_values: dict[str, int] = {}
_metrics: dict[str, list[float]] = {}  # name -> samples


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


def record(name: str, sample: float) -> None:
    if not ENABLED:
        return
    with _lock:
        _metrics.setdefault(name, []).append(float(sample))


def metric(name: str) -> tuple[int, float, list[float]] | None:
    """(total samples, accumulated value, the samples) or None before the first sample."""
    with _lock:
        samples = _metrics.get(name)
        return None if samples is None else (len(samples), sum(samples), list(samples))
