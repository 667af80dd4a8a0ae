"""The half of the device layer that runs before ``import torch``.

``import torch`` autoloads TorchNeuron (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), which reads its
cache and metrics variables as it loads; so the app sets them here first, each unless the user set it:

- ``TORCH_NEURONX_NEFF_CACHE_DIR`` (default /tmp, lost on reboot), ``..._NEFF_LOCAL_CACHE_DIR`` (the
  lock files, on local disk), ``TORCHINDUCTOR_CACHE_DIR``: persistent folders under the cache root;
- ``TORCH_NEURONX_METRICS_ENABLED=1``: the compile counters the app reads;
- ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1``: a failed compile raises instead of running eagerly;
- ``NEURON_RT_VISIBLE_CORES``: the cores this process claims (unset, the runtime reserves every core);
  ``--neuron-cores none`` leaves it alone and claims nothing: that process must never start its runtime;
- ``TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT`` (default 1200 s, ``FileLock.h``): at least
  ``--compile-timeout``, so a rank compiling a long NEFF is not raced by one that thinks its lock stale;
- a tensor-parallel rank's ``NEURON_RT_EXEC_TIMEOUT`` (``rank_exec_timeout``): at least the collective timeout;
- ``PATH``: TorchNeuron runs ``neuronx-cc`` by name (``execvp``), so the interpreter's folder (a venv's)
  goes first, for an app started as ``/path/venv/bin/python app.py`` without activating the venv.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path
from typing import Callable

from backend.core_lists import NO_CORES

NEFF_CACHE_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
NEFF_LOCAL_CACHE_VAR = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"
FALLBACK_VAR = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
VISIBLE_CORES_VAR = "NEURON_RT_VISIBLE_CORES"
NEURON_METRICS_VAR = "TORCH_NEURONX_METRICS_ENABLED"
INDUCTOR_CACHE_VAR = "TORCHINDUCTOR_CACHE_DIR"
LOCK_TIMEOUT_VAR = "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 1200  # seconds (FileLock.h kDefaultTimeoutSeconds; captured in neff_cache.json)
EXEC_TIMEOUT_VAR = "NEURON_RT_EXEC_TIMEOUT"  # seconds one execution may run (captures/neuron-runtime/exec_timeout.json)
# The app-owned cache folders: shown with their sizes and emptied by "clear cache".
CACHE_VARS = (NEFF_CACHE_VAR, NEFF_LOCAL_CACHE_VAR, INDUCTOR_CACHE_VAR)
NEURON_CACHE_VARS = (NEFF_CACHE_VAR, NEFF_LOCAL_CACHE_VAR)

_prepared: dict[str, str] = {}


def prepare_environment(cache_root: Path, compile_timeout: float = 1800.0) -> dict[str, str]:
    """Set the variables above that the user has not set; returns those in force. Inductor reads
    its variable lazily, so a later call still takes effect there."""
    cache_root = Path(cache_root).expanduser().resolve()
    wanted = {NEFF_CACHE_VAR: str(cache_root / "neff"), NEFF_LOCAL_CACHE_VAR: str(cache_root / "neff-local"),
              INDUCTOR_CACHE_VAR: str(cache_root / "inductor"), NEURON_METRICS_VAR: "1", FALLBACK_VAR: "1",
              LOCK_TIMEOUT_VAR: str(max(DEFAULT_LOCK_TIMEOUT, math.ceil(compile_timeout)))}
    for var, value in wanted.items():
        _prepared[var] = os.environ[var] = os.environ.get(var) or value
    folder = os.path.dirname(os.path.abspath(sys.executable))
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if folder not in path:
        os.environ["PATH"] = os.pathsep.join([folder, *path])
    for var in CACHE_VARS:
        Path(_prepared[var]).mkdir(parents=True, exist_ok=True)
    return dict(_prepared)


def claim_neuron_cores(app_cores: str | None, default: "Callable[[], str] | None" = None) -> str:
    """Set this process's ``NEURON_RT_VISIBLE_CORES``: ``app_cores``, else an inherited value, else
    ``default()``, else "0"; once set here never changed (the runtime reads it once). Returns it.
    ``none`` is recorded (``app_cores()``), not set: no value of the variable means "no core"."""
    if VISIBLE_CORES_VAR not in _prepared:
        if app_cores == NO_CORES:
            _prepared[VISIBLE_CORES_VAR] = NO_CORES
        else:
            value = app_cores or os.environ.get(VISIBLE_CORES_VAR) or (default() if default else "0")
            _prepared[VISIBLE_CORES_VAR] = os.environ[VISIBLE_CORES_VAR] = value
    return _prepared[VISIBLE_CORES_VAR]


def app_cores() -> str | None:
    """This process's NeuronCores: ``none`` where it claimed none, else its variable (None: unset)."""
    return NO_CORES if _prepared.get(VISIBLE_CORES_VAR) == NO_CORES else os.environ.get(VISIBLE_CORES_VAR)


def rank_exec_timeout(collective_timeout: float) -> dict[str, str]:
    """``NEURON_RT_EXEC_TIMEOUT`` for a tensor-parallel rank: at least ``collective_timeout`` (a larger
    value of the user's is kept). A TorchNeuron collective is an XLA op run as a NEFF, one execution of
    the runtime's; a rank waiting in it for a peer that still compiles (eager ops compile one at a time)
    would be failed by the runtime with NRT_TIMEOUT at its default (30 s in the configuration guide's
    table, 600 s on trn1 in the developer guide), long before the process group's raised timeout."""
    seconds = math.ceil(collective_timeout)
    with contextlib.suppress(ValueError):  # unset or not a number: ours
        seconds = max(seconds, int(os.environ.get(EXEC_TIMEOUT_VAR, "")))
    return {EXEC_TIMEOUT_VAR: str(seconds)}


def prepared_environment() -> dict[str, str]:
    return dict(_prepared)


def dir_size(path: str | Path) -> int:
    """Bytes under ``path`` (0 if it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # gone since the walk listed it
                total += os.lstat(os.path.join(root, name)).st_size
    return total
