"""What the compile stack counts: dynamo's compile events (every device) and, on Neuron,
TorchNeuron's NEFF counters, the compiler's seconds, the ops that fell back to the host and the
fields of a NEFF's cache key. ``DeviceMetrics`` is the part of ``backend.hardware.device.Device`` that reads
them; ``backend.hardware.device`` re-exports this module's names.

TorchNeuron's compile counters are ``torch_neuronx.metrics.get_counter_value("CompilationCache.*")``,
in a submodule the package does not import (its own examples write ``import torch_neuronx.metrics``;
``backend.hardware.device.load_torch_neuronx`` does), and read None before the first increment. Dynamo's own
compile callbacks count torch.compile graphs on every device.

Two counts, never added: ``graphs`` (torch.compile graphs, from dynamo, every device) and
``neff_compiles`` (Neuron only: every NEFF the Neuron compiler built — one or more per graph, plus
one per new eager op signature, since TorchNeuron's eager mode compiles too).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from typing import Any, Callable

import torch
import torch._dynamo

# What the app reads from TorchNeuron, each checked against a captured artefact of its source
# (tests/standin/captures/torchneuron/*.json; tests/neuron/test_captures.py):
NEFF_COUNTERS = {  # metrics.json: counters, None before their first increment
    "neff_compiles": "CompilationCache.TotalCompilations",
    "neff_memory_hits": "CompilationCache.InMemoryHits",
    "neff_disk_hits": "CompilationCache.PersistentHits",
}
# metrics.json: neuronx-cc's time for every NEFF built, summed in get_metric_data(...)["accumulator"],
# in NANOSECONDS (TORCH_NEURONX_TIME_METRIC stores duration_cast<nanoseconds>; TorchNeuron's own
# stats helper labels the sum "us", wrongly).
NEFF_COMPILE_TIME = "CompilationCache.CompilationTime"
NEFF_COMPILE_TIME_PER_SECOND = 1e9


class CompileEvents:
    """Counts torch.compile (dynamo) compilations and their seconds, on every device.

    Registered with dynamo's compile callbacks; ``torch._dynamo.reset()`` clears those, so
    ``ensure_registered`` is called before each measured region.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self.count = 0
        self.seconds = 0.0
        self._on_start: list[Callable[[], None]] = []

    def ensure_registered(self) -> None:
        handler = torch._dynamo.callback_handler
        if self._start not in handler.start_callbacks:
            handler.register_start_callback(self._start)
        if self._end not in handler.end_callbacks:
            handler.register_end_callback(self._end)

    def add_start_listener(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn`` when a compile starts (used to report the 'compiling' phase). Returns a remover."""
        self._on_start.append(fn)
        return lambda: self._on_start.remove(fn)

    def _start(self, args) -> None:
        with self._lock:
            self._started[args.compile_id] = time.perf_counter()
        for fn in list(self._on_start):
            fn()

    def _end(self, args) -> None:
        with self._lock:
            began = self._started.pop(args.compile_id, None)
            self.count += 1
            if began is not None:
                self.seconds += time.perf_counter() - began

    def snapshot(self) -> tuple[int, float]:
        with self._lock:
            return self.count, self.seconds


COMPILE_EVENTS = CompileEvents()


class DeviceMetrics:
    """The compile counters of a device, held by ``backend.hardware.device.Device`` as ``metrics``;
    ``neuronx``: the loaded TorchNeuron module (None off Neuron)."""

    def __init__(self, neuronx: Any = None):
        self._neuronx = neuronx

    def neff_counters(self) -> dict[str, float]:
        """TorchNeuron's NEFF compile-cache counters and the compiler's accumulated seconds (empty off
        Neuron)."""
        if self._neuronx is None:
            return {}
        metrics = importlib.import_module("torch_neuronx.metrics")
        out: dict[str, float] = {key: int(metrics.get_counter_value(name) or 0) for key, name in NEFF_COUNTERS.items()}
        data = metrics.get_metric_data(NEFF_COMPILE_TIME)  # None before the first NEFF is built
        out["neff_compile_seconds"] = float(data["accumulator"]) / NEFF_COMPILE_TIME_PER_SECOND if data else 0.0
        return out

    def fallback_ops(self) -> list[str]:
        """Ops that ran on the host instead of the NeuronCore since the last call (TorchNeuron's CPU
        fallback: unsupported or failed eager ops run on the CPU silently), read and then cleared so
        the next run starts afresh; [] off Neuron. Sorted: TorchNeuron keeps them in a set."""
        if self._neuronx is None:
            return []
        ops = sorted(str(op) for op in self._neuronx.get_fallback_ops())
        self._neuronx.clear_op_tracking()
        return ops

    def neff_key_fields(self) -> dict[str, Any]:
        """What TorchNeuron puts in every NEFF's cache key besides the program (KernelExecution.cpp,
        captured in neff_cache.json): the chip target, the logical-core config, the compiler's
        optimisation level override and NEURON_CC_FLAGS. A NEFF made with other values misses; the
        compiler's version is not in the key. None off Neuron."""
        if self._neuronx is None:
            return {"neuron_target": None, "lnc": None, "neuron_opt_level": None, "neuron_cc_flags": None}
        utils = importlib.import_module("torch_neuronx.utils")
        return {"neuron_target": str(utils.get_platform_target()), "lnc": int(utils.get_lnc_setting()),
                "neuron_opt_level": os.environ.get("NEURON_COMPILER_OPT_LEVEL") or None,
                "neuron_cc_flags": os.environ.get("NEURON_CC_FLAGS") or ""}

    def compile_snapshot(self) -> dict[str, float]:
        """Counters to diff around a region: dynamo graphs (+ their seconds) and NEFF compiles.

        ``compile_seconds`` is every second spent compiling: dynamo's (tracing, and the backend's
        own work) plus, on Neuron, neuronx-cc's. The neuron backend hands the compile to the first
        execution and returns at once, so dynamo's events leave the compiler out; TorchNeuron's
        metric has it, and the two never overlap."""
        COMPILE_EVENTS.ensure_registered()
        count, seconds = COMPILE_EVENTS.snapshot()
        neff = self.neff_counters()
        return {"graphs": count, "compile_seconds": seconds + neff.get("neff_compile_seconds", 0.0), **neff,
                **self.fxgraph_counters()}

    @staticmethod
    def fxgraph_counters() -> dict[str, int]:
        """Inductor's FX-graph cache lookups so far in this process: a hit skips inductor's compile
        (dynamo still traces the graph); a miss compiles afresh. Empty where none happened."""
        from torch._dynamo.utils import counters

        inductor = counters.get("inductor", {})
        return {"fxgraph_hits": int(inductor.get("fxgraph_cache_hit", 0)),
                "fxgraph_misses": int(inductor.get("fxgraph_cache_miss", 0))}


def diff_counters(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before.get(key, 0) for key in after}
