"""The half of the device layer that must run before ``import torch``.

``import torch`` autoloads TorchNeuron through its device-backend entry point (unless
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), and TorchNeuron reads its cache and metrics variables when it
loads. So the app sets them here, from the settings, before anything imports torch, each unless the
user set it (doctor shows the values in force):

- ``TORCH_NEURONX_NEFF_CACHE_DIR``: the NEFF cache defaults to /tmp (lost on reboot); the app owns a
  persistent one under its cache root; ``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR`` (the cache's lock
  files, on local disk) and ``TORCHINDUCTOR_CACHE_DIR`` (cpu/cuda) likewise.
- ``TORCH_NEURONX_METRICS_ENABLED=1``: the compile counters the app reads.
- ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1``: a failed Neuron compile raises instead of silently
  running the graph eagerly (the 2.33 default; earlier releases documented otherwise).
- ``NEURON_RT_VISIBLE_CORES``: the NeuronCores this process claims when its runtime starts
  (``claim_neuron_cores``). Unset, the runtime would reserve every core.
- ``TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT``: TorchNeuron breaks another process's compile lock
  after this many seconds (default 1200, ``FileLock.h``); kept at least ``--compile-timeout``, so a
  rank compiling a long NEFF is not raced by another that decided the lock was stale.
- ``PATH``: TorchNeuron runs ``neuronx-cc`` by name (``execvp`` / ``shutil.which``); the
  interpreter's folder (a virtualenv's, where its compiler is) goes first, so an app started as
  ``/path/venv/bin/python app.py`` without activating the venv (systemd) and its workers find it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

NEFF_CACHE_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
NEFF_LOCAL_CACHE_VAR = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"
FALLBACK_VAR = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
VISIBLE_CORES_VAR = "NEURON_RT_VISIBLE_CORES"
NEURON_METRICS_VAR = "TORCH_NEURONX_METRICS_ENABLED"
INDUCTOR_CACHE_VAR = "TORCHINDUCTOR_CACHE_DIR"
LOCK_TIMEOUT_VAR = "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 1200  # seconds (FileLock.h kDefaultTimeoutSeconds; captured in neff_cache.json)

_prepared: dict[str, str] = {}


def prepare_environment(cache_root: Path, compile_timeout: float = 1800.0) -> dict[str, str]:
    """Set the variables above that the user has not set. Returns {variable: value} in force.
    Inductor reads its variable lazily, so a later call (tests, embedding programs) still takes
    effect there."""
    import math
    import sys

    cache_root = Path(cache_root).expanduser().resolve()
    wanted = {
        NEFF_CACHE_VAR: str(cache_root / "neff"),
        NEFF_LOCAL_CACHE_VAR: str(cache_root / "neff-local"),
        INDUCTOR_CACHE_VAR: str(cache_root / "inductor"),
        NEURON_METRICS_VAR: "1",
        FALLBACK_VAR: "1",
        LOCK_TIMEOUT_VAR: str(max(DEFAULT_LOCK_TIMEOUT, math.ceil(compile_timeout))),
    }
    for var, value in wanted.items():
        if not os.environ.get(var):
            os.environ[var] = value
        _prepared[var] = os.environ[var]
    folder = os.path.dirname(os.path.abspath(sys.executable))
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if folder not in path:
        os.environ["PATH"] = os.pathsep.join([folder, *path])
    for var in CACHE_VARS:
        Path(_prepared[var]).mkdir(parents=True, exist_ok=True)
    return dict(_prepared)


# The app-owned cache folders: shown with their sizes and emptied by "clear cache".
CACHE_VARS = (NEFF_CACHE_VAR, NEFF_LOCAL_CACHE_VAR, INDUCTOR_CACHE_VAR)
NEURON_CACHE_VARS = (NEFF_CACHE_VAR, NEFF_LOCAL_CACHE_VAR)


def claim_neuron_cores(app_cores: str | None, default: "Callable[[], str] | None" = None) -> str:
    """Set ``NEURON_RT_VISIBLE_CORES`` for this (the app's) process: ``app_cores`` (``--neuron-cores``),
    else an inherited value, else ``default()``, else core "0". Once set here it is not changed
    again in this process (the runtime reads it once). Returns it."""
    if VISIBLE_CORES_VAR not in _prepared:
        value = app_cores or os.environ.get(VISIBLE_CORES_VAR) or (default() if default else "0")
        os.environ[VISIBLE_CORES_VAR] = value
        _prepared[VISIBLE_CORES_VAR] = value
    return _prepared[VISIBLE_CORES_VAR]


def prepared_environment() -> dict[str, str]:
    """What prepare_environment set (empty if it has not run)."""
    return dict(_prepared)


def dir_size(path: str | Path) -> int:
    """Bytes under ``path`` (0 if it does not exist). Cheap enough for cache folders of NEFF files."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def tp_rank_environment(kind: str, cores: list[int], local_rank: int) -> dict[str, str]:
    """Variables a tensor-parallel rank sets before torch loads: on Neuron, rank r claims ``cores[r]``
    of the core plan (``backend.hardware.core_plan`` says why)."""
    if kind == "neuron":
        return {VISIBLE_CORES_VAR: str(cores[local_rank])}
    return {}
