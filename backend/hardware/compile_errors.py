"""Which errors are a compiler's rather than the model's (``is_compile_error``), and the line worth
showing from one (``compile_error_text``); ``backend.hardware.device`` re-exports these names.
"""

from __future__ import annotations

import re

import torch
import torch._dynamo

# What the app reads from TorchNeuron, each checked against a captured artefact of its source
# (tests/standin/captures/torchneuron/*.json; tests/neuron/test_captures.py):
# errors.json: a failed neuronx-cc run reaches Python as a plain RuntimeError with this text
# (ErrorHandler.cpp's HandleCompilationError, or CompilationCache.cpp's ThrowCompilationError);
# "NRT Execution error occurred ..." is the runtime failing to run a NEFF, not a compile.
COMPILE_ERROR_MARKS = ("Compilation error occurred on Neuron for operation=", "Compilation failed for cache key '")
_COMPILER_MESSAGE = re.compile(r'error message="(COMPILATION FAILED: [^\n]*?)"?$', re.M)


def is_compile_error(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) is a compiler's failure rather than the model's.

    dynamo reports a backend that fails while compiling as ``BackendCompilerFailed``. The neuron
    backend compiles later, at the graph's first execution (or the next synchronize), and eager ops
    compile as they run, so Neuron's compile errors come from the run as plain RuntimeErrors: known
    by TorchNeuron's own words for them (``COMPILE_ERROR_MARKS``, from the captured texts). This is
    the one place that knows those signs."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, torch._dynamo.exc.BackendCompilerFailed):
            return True
        if any(mark in str(seen) for mark in COMPILE_ERROR_MARKS):
            return True
        seen = getattr(seen, "inner_exception", None) or seen.__cause__
    return False


def compile_error_text(exc: BaseException) -> str:
    """The line worth showing from a compile error: TorchNeuron's ``COMPILATION FAILED: <the
    compiler's last line>`` where the text has one, else the error's first line."""
    text = str(exc)
    found = _COMPILER_MESSAGE.search(text)
    if found:
        return found.group(1)
    lines = text.strip().splitlines()
    return lines[0] if lines else type(exc).__name__
