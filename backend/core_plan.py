"""The NeuronCore plan: which cores the app process claims and which the tensor-parallel ranks get.

Why a plan (Neuron Runtime configuration guide, 2.33, "NeuronCore allocation"): "By default, Neuron
Runtime initializes all the cores present in the system and reserves them for the current
process", and a reserved core "cannot be used by another process at all" until that process exits.
A process limits itself with ``NEURON_RT_VISIBLE_CORES`` ("3", "0-3", "0,2"), read when its runtime
starts. So:

- the app process claims exactly its own cores (``--neuron-cores``, default one core, "0"), set in
  its environment before torch loads (``backend.device_env``);
- tensor-parallel rank r gets one core, the r-th core the app does not hold, in its own
  ``NEURON_RT_VISIBLE_CORES`` (TorchNeuron would default a rank to core LOCAL_RANK, which may be
  the app's);
- a degree that does not fit the instance is refused before anything starts, naming what fits;
- serving in process while the group is down uses the app's cores only, so a restarted group
  finds its cores free once the dead ranks have exited.

Pure Python, no torch: the app builds the plan before torch (and TorchNeuron) load.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import Any

VISIBLE_CORES_VAR = "NEURON_RT_VISIBLE_CORES"
# Neuron driver sysfs (Neuron Sysfs User Guide): one folder per Neuron device, with its core count.
SYSFS_DEVICES = "/sys/devices/virtual/neuron_device"


def parse_cores(text: str) -> list[int]:
    """Parse a NEURON_RT_VISIBLE_CORES value: "3", "0-3", "0,2" (and mixes like "0,2-3").

    Raises ValueError naming the bad part."""
    cores: list[int] = []
    parts = [p.strip() for p in str(text).split(",")]
    if not text or not str(text).strip() or any(not p for p in parts):
        raise ValueError(f"expected NeuronCore indices like 3, 0-3 or 0,2, got {text!r}")
    for part in parts:
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"expected NeuronCore indices like 3, 0-3 or 0,2, got {text!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"bad NeuronCore range {part!r} in {text!r}")
        cores.extend(range(first, last + 1))
    if len(set(cores)) != len(cores):
        raise ValueError(f"NeuronCore listed twice in {text!r}")
    return cores


def format_cores(cores: list[int]) -> str:
    """The shortest NEURON_RT_VISIBLE_CORES value for ``cores`` ("0-3", "1,3")."""
    cores = sorted(cores)
    if cores and cores == list(range(cores[0], cores[-1] + 1)) and len(cores) > 1:
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def detect_instance_cores(sysfs: str = SYSFS_DEVICES) -> int | None:
    """NeuronCores on this instance from the Neuron driver's sysfs, or None where it is not there."""
    total = 0
    for path in glob.glob(os.path.join(sysfs, "neuron*", "core_count")):
        try:
            with open(path, encoding="ascii") as fh:
                total += int(fh.read().strip())
        except (OSError, ValueError):
            return None
    return total or None


class CoresDoNotFit(ValueError):
    """The tensor-parallel degree asks for more NeuronCores than the app leaves free."""


@dataclasses.dataclass(frozen=True)
class CorePlan:
    """Cores of the instance, the app's own, and those left for tensor-parallel ranks."""

    instance_cores: int | None  # None: unknown (no driver sysfs and no --neuron-instance-cores)
    app_cores: tuple[int, ...]

    def free_cores(self) -> list[int] | None:
        if self.instance_cores is None:
            return None
        return [c for c in range(self.instance_cores) if c not in self.app_cores]

    def tp_cores(self, degree: int, heads: int | None = None) -> list[int]:
        """Cores for ranks 0..degree-1 (one each). Raises CoresDoNotFit naming the degrees that fit."""
        free = self.free_cores()
        if free is None:
            # Unknown instance size: take the cores after the app's and let the runtime say no.
            start = max(self.app_cores) + 1 if self.app_cores else 0
            candidates = [c for c in range(start, start + degree + len(self.app_cores))
                          if c not in self.app_cores]
            return candidates[:degree]
        if degree > len(free):
            fits = [d for d in range(1, len(free) + 1) if heads is None or heads % d == 0]
            raise CoresDoNotFit(
                f"{degree} tensor-parallel ranks need {degree} NeuronCores, but the instance has "
                f"{self.instance_cores} and the app holds {format_cores(list(self.app_cores))}; "
                f"{len(free)} are free ({format_cores(free) or 'none'}), so degrees that fit are "
                f"{', '.join(map(str, fits)) or 'none'} (or give the app fewer cores with --neuron-cores)")
        return free[:degree]

    def describe(self, degree: int | None = None, heads: int | None = None) -> dict[str, Any]:
        """JSON-able view for doctor, the status and the System tab."""
        out: dict[str, Any] = {
            "instance_cores": self.instance_cores,
            "app_cores": format_cores(list(self.app_cores)),
            "free_cores": None if self.free_cores() is None else format_cores(self.free_cores()),
            "tp_degree": degree, "tp_cores": None, "tp_error": None,
        }
        if degree:
            try:
                out["tp_cores"] = format_cores(self.tp_cores(degree, heads))
            except CoresDoNotFit as exc:
                out["tp_error"] = str(exc)
        return out


def make_plan(app_cores: str, instance_cores: int | None) -> CorePlan:
    """The plan from the settings; raises ValueError for cores the instance does not have."""
    cores = parse_cores(app_cores)
    if instance_cores is not None and max(cores) >= instance_cores:
        raise ValueError(f"--neuron-cores {app_cores}: the instance has NeuronCores 0-{instance_cores - 1}")
    return CorePlan(instance_cores, tuple(cores))


def plan_text(plan: dict[str, Any]) -> str:
    """One line for a described plan (doctor, the System tab): the app's cores, the group's, what is free."""
    instance = plan.get("instance_cores")
    text = f"app {plan['app_cores']}"
    if plan.get("tp_cores"):
        text += f" · tensor-parallel ranks {plan['tp_cores']}"
    text += f" · instance {instance if instance is not None else 'size unknown'}"
    if plan.get("free_cores") is not None:
        text += f", free for the group {plan['free_cores'] or 'none'}"
    if plan.get("tp_error"):
        text += f" · {plan['tp_error']}"
    return text
