"""``torch_neuronx.metrics`` (stand-in): read TorchNeuron's compile-cache counters.

Rules enforced:

- This is a submodule the package does not import: ``torch_neuronx.metrics`` is an AttributeError
  until ``import torch_neuronx.metrics`` (the TorchNeuron examples import it explicitly).
- ``get_counter_value(name)`` returns None before a counter's first increment, and always None
  unless ``TORCH_NEURONX_METRICS_ENABLED`` was truthy when the package loaded
  (TorchNeuron environment variables, metrics section,
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html).
- The counter names are TorchNeuron's: ``CompilationCache.TotalCompilations`` (a NEFF was compiled),
  ``CompilationCache.InMemoryHits`` (reused within the process), ``CompilationCache.PersistentHits``
  (found in ``TORCH_NEURONX_NEFF_CACHE_DIR`` on disk). Eager ops and torch.compile graphs count alike.
- ``get_metric_data(name)``: a timed metric as ``_neuron_metric_data`` returns it (NeuronBindings.cpp):
  ``{"accumulator", "total_samples", "repr", "samples": [{"timestamp_ns", "value"}]}``, or None
  before its first sample. ``CompilationCache.CompilationTime`` holds the compiler time of each NEFF
  built in **nanoseconds** (``TORCH_NEURONX_TIME_METRIC`` stores ``duration_cast<nanoseconds>``;
  TorchNeuron's own stats helper calls the sum "us", wrongly). Captured in
  ``tests/standin/captures/torchneuron/metrics.json``.
"""

from __future__ import annotations

from . import _counters


def get_counter_value(name: str) -> int | None:
    """The counter's value, or None if it was never incremented (or metrics are off)."""
    return _counters.value(name)


def get_counter_names() -> list[str]:
    """Names of the counters incremented so far."""
    return _counters.names()


def get_metric_data(name: str) -> dict | None:
    """The metric's accumulator, sample count, text and samples, or None before its first sample."""
    return _counters.metric(name)
