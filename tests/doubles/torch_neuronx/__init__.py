"""TEST DOUBLE of TorchNeuron (``torch_neuronx``) for machines without Trainium. Not the real SDK.

It exists because nothing here has a NeuronCore or the Neuron SDK. It imitates, on the CPU, the
parts of TorchNeuron's documented API that the app's device layer touches, and records every call
so tests can check the wiring:

- importing it registers ``torch.neuron`` (``is_available``, ``device_count``, ``current_device``,
  ``synchronize``, ``memory_allocated``, ``max_memory_allocated``, ``empty_cache``,
  ``get_dynamo_metrics``) and a torch.compile backend named ``"neuron"`` (which runs the captured
  graph eagerly on the CPU, counting each graph as one NEFF compilation);
- ``metrics.get_counter_value(name)`` returns None before a counter's first increment, as the
  real one does;
- ``IMPORT_ENV`` holds the cache/metrics variables as they were when the module was imported, so a
  test can prove the app set them *before* the backend loaded.

What it cannot imitate: ``torch.device("neuron")`` and moving tensors there (that needs the real
runtime). Tests spy on ``pipe.to`` instead of moving anything.
"""

from __future__ import annotations

import os
import types

import torch
import torch._dynamo

WATCHED_ENV = ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_METRICS_ENABLED", "TORCH_DEVICE_BACKEND_AUTOLOAD")
IMPORT_ENV = {name: os.environ.get(name) for name in WATCHED_ENV}
CALLS: list[tuple] = []
_COUNTERS: dict[str, int] = {}
CORES = int(os.environ.get("FAKE_NEURON_CORES", "2"))


def _record(name: str, *args) -> None:
    CALLS.append((name, *args))


class _Metrics:
    @staticmethod
    def get_counter_value(name: str):
        _record("metrics.get_counter_value", name)
        return _COUNTERS.get(name)

    @staticmethod
    def increment(name: str) -> None:
        _COUNTERS[name] = _COUNTERS.get(name, 0) + 1


metrics = _Metrics()


def _neuron_namespace() -> types.SimpleNamespace:
    def record(name, value=None):
        def fn(*args, **kwargs):
            _record(f"torch.neuron.{name}", *args)
            return value
        return fn

    return types.SimpleNamespace(
        is_available=record("is_available", CORES > 0),
        device_count=record("device_count", CORES),
        current_device=record("current_device", 0),
        synchronize=record("synchronize"),
        memory_allocated=record("memory_allocated", 123_000),
        max_memory_allocated=record("max_memory_allocated", 456_000),
        empty_cache=record("empty_cache"),
        get_dynamo_metrics=record("get_dynamo_metrics", {}),
    )


def _neuron_backend(gm: torch.fx.GraphModule, example_inputs):
    _record("compile_backend.neuron", len(list(gm.graph.nodes)))
    metrics.increment("CompilationCache.TotalCompilations")
    return gm.forward


torch.neuron = _neuron_namespace()
if "neuron" not in torch._dynamo.list_backends(exclude_tags=()):
    torch._dynamo.register_backend(_neuron_backend, name="neuron")
_record("import", dict(IMPORT_ENV))
