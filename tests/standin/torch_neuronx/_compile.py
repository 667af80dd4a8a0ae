"""The "neuron" torch.compile backend (stand-in).

Rules enforced, from "torch.compile backend reference"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/compile/reference-torch-compile.html),
"How torch.compile works on Neuron"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/compile/about-torch-compile.html) and
"TorchNeuron environment variables"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html):

- Registered under the name "neuron" when the package is imported, and findable through the
  ``torch_dynamo_backends`` entry point. Only ``mode="default"``; another mode warns and is ignored.
- ``dynamic=True`` is rejected during compilation: a graph whose inputs have symbolic sizes raises.
  (Automatic dynamic shapes, dynamo's default with ``dynamic=None``, produce the same kind of
  graph and are refused the same way; compile with ``dynamic=False``.)
- Compilation is just-in-time, one NEFF per input signature (graph code + input shapes, strides
  and dtypes), in the NEFF cache shared with eager mode (``_neff_cache``): a new signature counts
  ``TotalCompilations``, a repeat in the process ``InMemoryHits``, a NEFF a previous process wrote
  ``PersistentHits``.
- Compilation is asynchronous to dynamo (DESIGN.md, "Hardware facts"; "How torch.compile works on
  Neuron": the backend lowers the captured graph and neuronx-cc builds the NEFF for the first
  execution): the backend returns at once; the NEFF is built at the graph's first execution, or at
  ``torch.neuron.synchronize()`` if that comes first. So the compile time shows up in the first
  run, not in dynamo's compile events, and is recorded in ``CompilationCache.CompilationTime``
  (nanoseconds); a compiler error surfaces there as a plain ``RuntimeError`` whose text is the one
  TorchNeuron builds (``ErrorHandler.cpp``): "Compilation error occurred on Neuron for
  operation=torch_compile;" then ``error message="COMPILATION FAILED: <the compiler's last line>"``
  (the captured texts: ``tests/standin/captures/torchneuron/errors.json``), not dynamo's
  ``BackendCompilerFailed``.
- Ops executed inside a compiled graph are part of its NEFF: no per-op eager compiles.
- ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION``: 1 (the 2.33 default, also when unset) makes a failed
  compile raise; 0 warns and runs the original graph eagerly (op by op, which compiles per op).
  The ``fallback_execution`` compile option overrides it. Read once, when the package loads.

Stand-in-only knobs: ``NEURON_STANDIN_FAIL_COMPILE_DIM=<int>`` makes the "compiler" fail, with a
compile error in TorchNeuron's format, for any graph that has an input dimension equal to that int (decided when
dynamo hands the graph over, raised at its first execution), so a test can make one shape fail;
``NEURON_STANDIN_COMPILE_SECONDS`` is the simulated neuronx-cc time per graph NEFF (default 0). What this
cannot show: real compile times, compiler limits, numerics of neuronx-cc (the graph runs on the CPU).
"""

from __future__ import annotations

import os
import threading
import time
import warnings

import torch

from . import _device, _neff_cache

FALLBACK_VAR = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
FAIL_DIM_VAR = "NEURON_STANDIN_FAIL_COMPILE_DIM"
COMPILE_SECONDS_VAR = "NEURON_STANDIN_COMPILE_SECONDS"

FALLBACK_DISABLED = os.environ.get(FALLBACK_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


class NeuronCompileError(RuntimeError):
    """Stand-in internal: neuronx-cc could not compile a graph (raised to the caller as the plain
    RuntimeError TorchNeuron raises, with its text: ``compile_error``)."""


def compile_error(operation: str, compiler_line: str) -> RuntimeError:
    """The RuntimeError TorchNeuron raises for a failed compile: ``HandleCompilationError``'s text
    around the compiler's last meaningful line (``CleanErrorMessage``), with an empty Python stack."""
    return RuntimeError(f"Compilation error occurred on Neuron for operation={operation};\n"
                        f"error message=\"COMPILATION FAILED: {compiler_line}\"\npython stack trace=\n")


_lock = threading.Lock()
_metrics = {"graphs": 0, "compiled": 0, "in_memory_hits": 0, "persistent_hits": 0, "failures": 0,
            "fallbacks": 0}


def dynamo_metrics() -> dict:
    """Counts for the neuron torch.compile backend in this process (torch.neuron.get_dynamo_metrics)."""
    with _lock:
        return dict(_metrics)


def _count(key: str) -> None:
    with _lock:
        _metrics[key] += 1


def _symbolic(value) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(d, torch.SymInt) for d in value.shape) or any(
            isinstance(s, torch.SymInt) for s in value.stride())
    return False


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return (f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
                f"/{list(value.stride())}@{value.device.type}")
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"symbolic {value}"
    return repr(value) if isinstance(value, (int, float, bool)) or value is None else type(value).__name__


def _reject_dynamic(gm: torch.fx.GraphModule, example_inputs) -> None:
    symbolic = [value for value in example_inputs if _symbolic(value)]
    for node in gm.graph.nodes:
        if node.op == "placeholder" and _symbolic(node.meta.get("example_value")):
            symbolic.append(node.meta["example_value"])
    if symbolic:  # DynamicShapeAnalysis raises a plain RuntimeError, inside dynamo's compile
        raise RuntimeError(
            "The neuron backend does not support dynamic shapes: this graph has symbolic sizes "
            f"({', '.join(_describe(v) for v in symbolic[:3])}). Compile with dynamic=False; each new "
            "shape then compiles its own graph.")


def _injected_failure(signature: str, example_inputs) -> NeuronCompileError | None:
    text = os.environ.get(FAIL_DIM_VAR)
    if not text:
        return None
    dim = int(text)
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and dim in tuple(value.shape):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            return NeuronCompileError(
                "StableHLO to NEFF compilation failed for torch.compile: Command failed (neuronx-cc "
                f"compilation) with exit code 70: {stamp} [INTERNAL_ERROR] [NCC_ITEN404] Internal tensorizer "
                f"error: input {_describe(value)} (stand-in fault injected by {FAIL_DIM_VAR}={dim})")
    return None


class _PendingNeff:
    """A graph dynamo handed over whose NEFF is not built yet: built at first execution or synchronize."""

    def __init__(self, gm: torch.fx.GraphModule, signature: str, failure: NeuronCompileError | None,
                 fallback_disabled: bool):
        self.gm, self.signature, self.failure = gm, signature, failure
        self.fallback_disabled = fallback_disabled
        self.ready = False  # the NEFF is loaded
        self.eager = False  # the compile failed and fallback execution runs the graph eagerly
        self.lock = threading.Lock()

    def complete(self) -> None:
        with self.lock:
            if self.ready or self.eager:
                return

            def compile_fn():
                if self.failure is not None:
                    raise self.failure

            try:
                where = _neff_cache.lookup_or_compile(
                    self.signature, compile_fn, seconds=_neff_cache.simulated_seconds(COMPILE_SECONDS_VAR))
            except NeuronCompileError as exc:
                _count("failures")
                if self.fallback_disabled:
                    raise compile_error("torch_compile", str(exc)) from None
                _count("fallbacks")
                warnings.warn(f"{exc}. Fallback execution is on ({FALLBACK_VAR}=0 or the fallback_execution "
                              f"option): running this graph eagerly instead.", RuntimeWarning, stacklevel=3)
                self.eager = True
                return
            finally:
                _pending.discard(self)
            _count({"compiled": "compiled", "memory": "in_memory_hits", "disk": "persistent_hits"}[where])
            self.ready = True

    def __call__(self, *args):
        self.complete()
        if self.eager:
            return self.gm.forward(*args)
        with _device.compiled_graph_region():
            return self.gm(*args)


_pending: set[_PendingNeff] = set()


def complete_pending() -> None:
    """``torch.neuron.synchronize()``: every NEFF still pending is built now (its error raised here)."""
    for neff in list(_pending):
        neff.complete()


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """torch.compile(backend="neuron"): returns at once; the NEFF is built when the graph first runs."""
    _count("graphs")
    _reject_dynamic(gm, example_inputs)
    signature = "graph\n" + gm.code + "\n" + "\n".join(_describe(v) for v in example_inputs)
    if kwargs.get("mode") not in (None, "default"):
        warnings.warn(f"the neuron backend supports only mode='default'; mode={kwargs['mode']!r} is ignored",
                      stacklevel=2)
    options = kwargs.get("options") or {}
    fallback_disabled = not options["fallback_execution"] if "fallback_execution" in options else FALLBACK_DISABLED
    neff = _PendingNeff(gm, signature, _injected_failure(signature, example_inputs), fallback_disabled)
    _pending.add(neff)

    def run_neff(*args):
        return neff(*args)

    return run_neff


_registered = False


def register() -> None:
    """Register "neuron" with dynamo unless its entry point will (loading it would then clash)."""
    global _registered
    if _registered:
        return
    from torch._dynamo.backends import registry

    if "neuron" not in registry._COMPILER_FNS and registry._BACKENDS.get("neuron") is None:
        registry.register_backend(neuron_backend, name="neuron")
    _registered = True
