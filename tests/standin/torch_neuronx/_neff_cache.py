"""The NEFF cache shared by eager ops and torch.compile graphs.

Rules enforced (TorchNeuron environment variables, caching section,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html, and the
torch.compile backend reference, caching configuration,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/compile/reference-torch-compile.html):

- A compiled artifact is a file ``<TORCH_NEURONX_NEFF_CACHE_DIR>/ab/cd/<hash>.neff`` (``ab``/``cd``:
  the first two byte pairs of the hash). Unset, the directory is under the temp dir (/tmp), which a
  reboot empties.
- Per-key lock files live in ``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR`` (local disk); writes are atomic
  (temp file + rename), so concurrent processes (tensor-parallel ranks) compile a key once and
  never read a half-written NEFF.
- Counters: a new key is a ``CompilationCache.TotalCompilations``; a key already used in this
  process is an ``InMemoryHits``; a key another (or an earlier) process wrote is a
  ``PersistentHits`` and no compilation.

The stand-in reads both variables once, when the package loads (set them before importing
``torch_neuronx``). Its NEFF files hold the signature text, not a program: nothing is compiled for
real. A compile takes a *simulated* time (``seconds``; the callers read the stand-in knobs
``NEURON_STANDIN_COMPILE_SECONDS`` for graphs and ``NEURON_STANDIN_EAGER_COMPILE_SECONDS`` per
eager op, default 0), spent while holding the key's lock, and recorded in the
``CompilationCache.CompilationTime`` metric (microseconds), so the app's compile-time accounting and
its stall detection are exercised; the figure says nothing about neuronx-cc.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import _counters

CACHE_DIR_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
LOCAL_CACHE_DIR_VAR = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"
_FORMAT = "torch-neuronx-standin-neff-v1"

CACHE_DIR = Path(os.environ.get(CACHE_DIR_VAR) or Path(tempfile.gettempdir()) / "neuron-neff-cache")
LOCK_DIR = Path(os.environ.get(LOCAL_CACHE_DIR_VAR) or Path(tempfile.gettempdir()) / "neuron-neff-locks")

_lock = threading.Lock()
_loaded_signatures: set[str] = set()  # signatures whose NEFF this process already holds


def key_for(signature: str) -> str:
    return hashlib.sha256(f"{_FORMAT}\n{signature}".encode()).hexdigest()


def neff_path(key: str) -> Path:
    return CACHE_DIR / key[:2] / key[2:4] / f"{key}.neff"


def simulated_seconds(var: str) -> float:
    try:
        return max(0.0, float(os.environ.get(var) or 0))
    except ValueError:
        return 0.0


def lookup_or_compile(signature: str, compile_fn: Callable[[], None] | None = None, seconds: float = 0.0) -> str:
    """Make sure a NEFF for ``signature`` is loaded; return "memory", "disk" or "compiled".

    ``compile_fn`` runs only on a real miss, under the key's file lock; it may raise to fail the
    compilation (nothing is written then, and the next call tries again).
    """
    with _lock:
        if signature in _loaded_signatures:
            _counters.increment(_counters.IN_MEMORY_HITS)
            return "memory"
        key = key_for(signature)
        path = neff_path(key)
        if not path.exists():
            lock_path = LOCK_DIR / key[:2] / key[2:4] / f"{key}.lock"
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # another rank may be compiling this key right now
                if not path.exists():
                    began = time.perf_counter()
                    if seconds:
                        time.sleep(seconds)  # the simulated neuronx-cc run
                    try:
                        if compile_fn is not None:
                            compile_fn()
                    finally:
                        _counters.record(_counters.COMPILATION_TIME, (time.perf_counter() - began) * 1e6)
                    _write_atomically(path, f"{_FORMAT}\n{signature}\n".encode())
                    _loaded_signatures.add(signature)
                    _counters.increment(_counters.TOTAL_COMPILATIONS)
                    return "compiled"
            finally:
                os.close(fd)
        _loaded_signatures.add(signature)
        _counters.increment(_counters.PERSISTENT_HITS)
        return "disk"


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def forget_in_memory() -> None:
    """Drop the in-process NEFF set (a fresh process, as far as hits are concerned)."""
    with _lock:
        _loaded_signatures.clear()
