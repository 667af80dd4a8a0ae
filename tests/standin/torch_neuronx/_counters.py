"""Private store behind ``torch_neuronx.metrics``: named integer counters, off unless enabled at load.

Rule enforced (TorchNeuron environment variables, metrics section,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html):
counters are collected only when ``TORCH_NEURONX_METRICS_ENABLED`` is truthy. The stand-in reads the
variable once, when the package loads, so an app that sets it after importing ``torch_neuronx`` sees
no counters at all (always None) - the strict reading of "set it before the backend loads".

A counter that was never incremented does not exist: reading it gives None, not 0. Metrics (timed
samples, e.g. ``CompilationCache.CompilationTime`` in nanoseconds: the neuronx-cc time of every
NEFF built, as ``TORCH_NEURONX_TIME_METRIC`` stores it) likewise: None until their first sample.
``metric`` returns what ``_neuron_metric_data`` returns (NeuronBindings.cpp): a dict with
``accumulator``, ``total_samples``, ``repr`` and ``samples`` (``timestamp_ns``, ``value`` each);
see ``tests/standin/captures/torchneuron/metrics.json``.
"""

from __future__ import annotations

import os
import threading
import time

TOTAL_COMPILATIONS = "CompilationCache.TotalCompilations"
IN_MEMORY_HITS = "CompilationCache.InMemoryHits"
PERSISTENT_HITS = "CompilationCache.PersistentHits"
COMPILATION_TIME = "CompilationCache.CompilationTime"  # metric, nanoseconds per NEFF compiled

_TRUTHY = {"1", "true", "yes", "on"}
ENABLED = os.environ.get("TORCH_NEURONX_METRICS_ENABLED", "").strip().lower() in _TRUTHY

_lock = threading.Lock()
_values: dict[str, int] = {}
_metrics: dict[str, list[tuple[int, float]]] = {}  # name -> (timestamp_ns, value) samples


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
        _metrics.setdefault(name, []).append((time.time_ns(), float(sample)))


def _time_repr(ns: float) -> str:
    """``MetricFnTime``'s kind of text for a nanosecond figure (for people; the app reads numbers)."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= size:
            return f"{ns / size:.3f}{unit}"
    return f"{ns:.0f}ns"


def metric(name: str) -> dict | None:
    """``{"accumulator", "total_samples", "repr", "samples": [{"timestamp_ns", "value"}]}`` or None
    before the first sample."""
    with _lock:
        samples = _metrics.get(name)
        if samples is None:
            return None
        total = sum(value for _stamp, value in samples)
        return {"accumulator": total, "total_samples": len(samples), "repr": _time_repr(total),
                "samples": [{"timestamp_ns": stamp, "value": value} for stamp, value in samples]}
