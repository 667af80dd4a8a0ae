"""The NEFF cache shared by eager ops and torch.compile graphs (stand-in).

Every name, key field and path here is TorchNeuron's, as its source writes them; the captured source
lines are ``tests/standin/captures/torchneuron/neff_cache.json`` (repository
parmoham-aws/test-repo-parmoham, TorchNeuron's April 2026 snapshot), and
``tests/neuron/test_captures.py`` checks this module against that file:

- The key of a NEFF is the op's (or graph's) base key plus the compiler's extension
  ``<target>_<lnc>_<opt level>_<additional args>`` (``KernelExecution.cpp``): the chip target
  (trn2/trn3, from the instance), the logical core config (``NEURON_LOGICAL_NC_CONFIG``, else the
  target's default), the optimisation level (``NEURON_COMPILER_OPT_LEVEL``, else -O1 for eager ops,
  -O2 for torch.compile graphs) and ``--model-type transformer --auto-cast=none`` plus
  ``NEURON_CC_FLAGS``. The compiler version is not in it. On disk the key is hashed to 32 hex
  characters (XXH3_128 there; BLAKE2b-128 here: the same length and alphabet).
- C++ path: the file ``<TORCH_NEURONX_NEFF_CACHE_DIR>/ab/cd/<key>.neff``, written to a
  ``.tmp.XXXXXX`` file (mkstemp) beside it and renamed into place; its lock
  ``<TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR>/locks/<key>.lock``.
- Python path (kernels compiled by ``torch_neuronx/kernels/compiler_subprocess.py``): the file
  ``<cache dir>/<sha256>/<sha256>.neff`` (temp ``tmpXXXXXXXX.tmp`` beside it), its lock
  ``<local dir>/<sha256>/locks/compile.lock``. The stand-in sends the attention kernels down this path.
- Defaults when unset: ``/tmp/neff_cache`` and ``/tmp/local_cache`` (a reboot empties both).
- Counters: a new key is a ``CompilationCache.TotalCompilations``; a key already used in this
  process an ``InMemoryHits``; a key another (or an earlier) process wrote a ``PersistentHits``.
  ``CompilationCache.CompilationTime`` gets one sample per NEFF built, in **nanoseconds**.

The stand-in reads both directory variables once, when the package loads (set them before importing
``torch_neuronx``). Its NEFF files hold the signature text, not a program: nothing is compiled for
real. A compile takes a *simulated* time (``seconds``; the callers read the stand-in knobs
``NEURON_STANDIN_COMPILE_SECONDS`` for graphs and ``NEURON_STANDIN_EAGER_COMPILE_SECONDS`` per
eager op, default 0), spent while holding the key's lock, so the app's compile-time accounting and
its stall detection are exercised; the figure says nothing about neuronx-cc.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import random
import string
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import _counters, _runtime

CACHE_DIR_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
LOCAL_CACHE_DIR_VAR = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"
OPT_LEVEL_VAR = "NEURON_COMPILER_OPT_LEVEL"
CC_FLAGS_VAR = "NEURON_CC_FLAGS"
BASE_ARGS = "--model-type transformer --auto-cast=none"
_FORMAT = "torch-neuronx-standin-neff-v2"
_MKSTEMP_CHARS = string.ascii_letters + string.digits

CACHE_DIR = Path(os.environ.get(CACHE_DIR_VAR) or "/tmp/neff_cache")
LOCK_DIR = Path(os.environ.get(LOCAL_CACHE_DIR_VAR) or "/tmp/local_cache")

_lock = threading.Lock()
_loaded: set[str] = set()  # keys whose NEFF this process already holds


def extension(kind: str) -> str:
    """``<target>_<lnc>_<opt level>_<additional args>`` (``kind`` "eager" or "graph"), as
    ``CompilableKernelExecution::CreateCompilerExtensionHash`` builds it from the environment now."""
    level = os.environ.get(OPT_LEVEL_VAR) or ("-O1" if kind == "eager" else "-O2")
    args = BASE_ARGS + (" " + os.environ[CC_FLAGS_VAR] if os.environ.get(CC_FLAGS_VAR) else "")
    args = args.replace(" ", "_").replace("=", "-")
    return f"{_runtime.platform_target()}_{_runtime.lnc()}_{level.lstrip('-')}_{args}"


def key_for(signature: str, kind: str = "graph") -> str:
    """The on-disk key: 32 hex characters over the base key and its compiler extension."""
    return hashlib.blake2b(f"{_FORMAT}\n{signature}_{extension(kind)}".encode(), digest_size=16).hexdigest()


def python_key_for(signature: str, kind: str = "eager") -> str:
    """The Python path's key: a SHA-256 hex digest (``NEFFCacheKey.hash``)."""
    return hashlib.sha256(f"{_FORMAT}\n{signature}_{extension(kind)}".encode()).hexdigest()


def neff_path(key: str) -> Path:
    if len(key) == 64:  # the Python path
        return CACHE_DIR / key / f"{key}.neff"
    return CACHE_DIR / key[:2] / key[2:4] / f"{key}.neff"


def lock_path(key: str) -> Path:
    if len(key) == 64:
        return LOCK_DIR / key / "locks" / "compile.lock"
    return LOCK_DIR / "locks" / f"{key}.lock"


def simulated_seconds(var: str) -> float:
    try:
        return max(0.0, float(os.environ.get(var) or 0))
    except ValueError:
        return 0.0


def lookup_or_compile(signature: str, compile_fn: Callable[[], None] | None = None, seconds: float = 0.0,
                      kind: str = "graph", python_path: bool = False) -> str:
    """Make sure a NEFF for ``signature`` is loaded; return "memory", "disk" or "compiled".

    ``compile_fn`` runs only on a real miss, under the key's file lock; it may raise to fail the
    compilation (nothing is written then, and the next call tries again).
    """
    key = python_key_for(signature, kind) if python_path else key_for(signature, kind)
    with _lock:
        if key in _loaded:
            _counters.increment(_counters.IN_MEMORY_HITS)
            return "memory"
        path = neff_path(key)
        if not path.exists():
            lock = lock_path(key)
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # another rank may be compiling this key right now
                if not path.exists():
                    began = time.monotonic_ns()
                    if seconds:
                        time.sleep(seconds)  # the simulated neuronx-cc run
                    try:
                        if compile_fn is not None:
                            compile_fn()
                    finally:
                        _counters.record(_counters.COMPILATION_TIME, time.monotonic_ns() - began)
                    _write_atomically(path, f"{_FORMAT}\n{signature}\n".encode(), python_path)
                    _loaded.add(key)
                    _counters.increment(_counters.TOTAL_COMPILATIONS)
                    return "compiled"
            finally:
                os.close(fd)
        _loaded.add(key)
        _counters.increment(_counters.PERSISTENT_HITS)
        return "disk"


def _write_atomically(path: Path, data: bytes, python_path: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if python_path:  # tempfile.NamedTemporaryFile(dir=..., suffix=".tmp")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="tmp", suffix=".tmp")
    else:  # mkstemp("<dir>/.tmp.XXXXXX"): six characters from [A-Za-z0-9]
        while True:
            tmp = path.parent / (".tmp." + "".join(random.choices(_MKSTEMP_CHARS, k=6)))
            try:
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                break
            except FileExistsError:
                continue
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def forget_in_memory() -> None:
    """Drop the in-process NEFF set (a fresh process, as far as hits are concerned)."""
    with _lock:
        _loaded.clear()
