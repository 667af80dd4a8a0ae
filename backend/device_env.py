"""The half of the device layer that must run before ``import torch``.

``import torch`` autoloads TorchNeuron through its device-backend entry point (unless
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), and TorchNeuron reads its cache and metrics variables when it
loads. So the app sets them here, from the settings, before anything imports torch:

- ``TORCH_NEURONX_NEFF_CACHE_DIR``: the NEFF cache defaults to /tmp (lost on reboot); the app owns a
  persistent one under its cache root unless the user set one.
- ``TORCH_NEURONX_METRICS_ENABLED=1``: the compile counters the app reads (unless the user set it).
- ``TORCHINDUCTOR_CACHE_DIR``: the persistent inductor cache for cpu/cuda, likewise.

This module imports no torch; ``backend.device`` checks that it ran.
"""

from __future__ import annotations

import os
from pathlib import Path

NEFF_CACHE_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
NEURON_METRICS_VAR = "TORCH_NEURONX_METRICS_ENABLED"
INDUCTOR_CACHE_VAR = "TORCHINDUCTOR_CACHE_DIR"
AUTOLOAD_VAR = "TORCH_DEVICE_BACKEND_AUTOLOAD"

_prepared: dict[str, str] = {}


def prepare_environment(cache_root: Path) -> dict[str, str]:
    """Set the app-owned cache variables the user has not set. Returns {variable: value} in force.

    Call it before torch is imported; the CLI and app.py do. Inductor reads its variable lazily, so
    a later call (tests, embedding programs) still takes effect there.
    """
    cache_root = Path(cache_root).expanduser().resolve()
    wanted = {
        NEFF_CACHE_VAR: str(cache_root / "neff"),
        INDUCTOR_CACHE_VAR: str(cache_root / "inductor"),
        NEURON_METRICS_VAR: "1",
    }
    for var, value in wanted.items():
        if not os.environ.get(var):
            os.environ[var] = value
        _prepared[var] = os.environ[var]
    for var in (NEFF_CACHE_VAR, INDUCTOR_CACHE_VAR):
        Path(_prepared[var]).mkdir(parents=True, exist_ok=True)
    return dict(_prepared)


def prepared_environment() -> dict[str, str]:
    """What prepare_environment set (empty if it has not run)."""
    return dict(_prepared)


def autoload_disabled() -> bool:
    """True when torch will not autoload device backends, so torch_neuronx must be imported by us."""
    return os.environ.get(AUTOLOAD_VAR, "1").strip().lower() in ("0", "false", "no", "off")


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


def tp_rank_environment(kind: str, core_base: int, local_rank: int) -> dict[str, str]:
    """Variables a tensor-parallel rank sets before torch loads.

    On Neuron a process owns its NeuronCore until it exits and TorchNeuron defaults to core
    LOCAL_RANK, which the app process may already hold; so rank r claims core ``core_base + r``.
    """
    if kind == "neuron":
        return {"NEURON_RT_VISIBLE_CORES": str(core_base + local_rank)}
    return {}
