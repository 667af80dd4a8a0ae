"""What the compile stack says: dynamo's compile events (every device), TorchNeuron's NEFF counters
and the compiler's seconds, and which errors are a compiler's. ``graphs`` (dynamo) and
``neff_compiles`` (every NEFF built, eager ops' included) are two counts, never added.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Callable, Iterator

import torch
import torch._dynamo

# What the app reads from TorchNeuron, each checked against a captured artefact of its source
# (tests/standin/captures/torchneuron/*.json; tests/neuron/test_captures.py):
NEFF_COUNTERS = {  # metrics.json: torch_neuronx.metrics.get_counter_value, None before their first increment
    "neff_compiles": "CompilationCache.TotalCompilations",
    "neff_memory_hits": "CompilationCache.InMemoryHits",
    "neff_disk_hits": "CompilationCache.PersistentHits",
}
# metrics.json: neuronx-cc's time for every NEFF built, summed in get_metric_data(...)["accumulator"],
# in NANOSECONDS (TORCH_NEURONX_TIME_METRIC stores duration_cast<nanoseconds>; TorchNeuron's own
# stats helper labels the sum "us", wrongly).
NEFF_COMPILE_TIME = "CompilationCache.CompilationTime"
NEFF_COMPILE_TIME_PER_SECOND = 1e9
# errors.json: a failed neuronx-cc run reaches Python as a plain RuntimeError with this text
# (ErrorHandler.cpp's HandleCompilationError, or CompilationCache.cpp's ThrowCompilationError);
# "NRT Execution error occurred ..." is the runtime failing to run a NEFF, not a compile.
COMPILE_ERROR_MARKS = ("Compilation error occurred on Neuron for operation=", "Compilation failed for cache key '")
# attention.json: TorchNeuron's caching allocator when the core's memory is full (NeuronCachingAllocator.cpp).
OUT_OF_MEMORY = re.compile(r"NRT allocation failed for size (\d+) \(OOM\)")
_COMPILER_MESSAGE = re.compile(r'error message="(COMPILATION FAILED: [^\n]*?)"?$', re.M)


def _wrapped(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and what it wraps (an ``inner_exception``, else its ``__cause__``), outermost first."""
    while exc is not None:
        yield exc
        exc = getattr(exc, "inner_exception", None) or exc.__cause__


def is_compile_error(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) is a compiler's failure rather than the model's: dynamo's
    ``BackendCompilerFailed``, or (Neuron compiles at a graph's first execution, eager ops as they
    run) a plain RuntimeError in TorchNeuron's words (``COMPILE_ERROR_MARKS``)."""
    return any(isinstance(seen, torch._dynamo.exc.BackendCompilerFailed)
               or any(mark in str(seen) for mark in COMPILE_ERROR_MARKS) for seen in _wrapped(exc))


def out_of_memory(exc: BaseException) -> int | None:
    """The bytes of the allocation that did not fit a NeuronCore, when ``exc`` (or what it wraps) says so."""
    found = next(filter(None, (OUT_OF_MEMORY.search(str(seen)) for seen in _wrapped(exc))), None)
    return int(found.group(1)) if found else None


def compile_error_text(exc: BaseException) -> str:
    """TorchNeuron's ``COMPILATION FAILED: <the compiler's last line>`` where the text has one, else
    the error's first line."""
    text = str(exc)
    if found := _COMPILER_MESSAGE.search(text):
        return found.group(1)
    lines = text.strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class CompileEvents:
    """Counts dynamo's compilations and their seconds. ``torch._dynamo.reset()`` clears its
    callbacks, so ``ensure_registered`` runs before each measured region."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self.count, self.seconds = 0, 0.0
        self._on_start: list[Callable[[], None]] = []

    def ensure_registered(self) -> None:
        handler = torch._dynamo.callback_handler
        if self._start not in handler.start_callbacks:
            handler.register_start_callback(self._start)
        if self._end not in handler.end_callbacks:
            handler.register_end_callback(self._end)

    def add_start_listener(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn`` when a compile starts; returns a remover."""
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


def diff_counters(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before.get(key, 0) for key in after}
