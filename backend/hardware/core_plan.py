"""The NeuronCore plan: which cores the app process claims, which the tensor-parallel ranks get,
and which each replica gets.

Why a plan (Neuron Runtime configuration guide, 2.33, "NeuronCore allocation"): "By default, Neuron
Runtime initializes all the cores present in the system and reserves them for the current
process", and a reserved core "cannot be used by another process at all" until that process exits.
A process limits itself with ``NEURON_RT_VISIBLE_CORES``, read when its runtime starts. So the app
claims exactly its own cores before torch loads (``--neuron-cores``), each tensor-parallel rank and
each replica gets one core of the rest in its own ``NEURON_RT_VISIBLE_CORES`` (TorchNeuron would
default a rank to core LOCAL_RANK, which may be the app's), no two of them share a core (each
engine holds its ``claim`` until its processes exit), and a count that does not fit is refused
before anything starts, naming what fits. Serving in process while the group is down uses the
app's cores only, so a restarted group finds its cores free once the dead ranks have exited.

The instance's size comes from ``backend.hardware.neuron_ls``; unknown, tensor parallelism is
refused up front naming ``--neuron-instance-cores``. With the devices known, a launched engine's
cores stay on one device where they fit (a tensor-parallel group then talks over one chip), and the
app's default core is the instance's last, so the groups start from core 0. At LNC=1 two
NeuronCores share one HBM bank (a Trainium2 device has four 24 GB banks for its 8 physical cores)
and FLUX.2-klein-4B in bf16 needs about 16 GB: each process then gets a whole bank — the first core
of a pair, the second left idle.

Pure Python, no torch: the app builds the plan before torch (and TorchNeuron) load.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from backend.core_lists import check_on_instance, format_cores
from backend.hardware.neuron_ls import INSTANCE_FLAG, InstanceCores, detect_instance_cores

VISIBLE_CORES_VAR = "NEURON_RT_VISIBLE_CORES"


def claim_app_cores(neuron_cores: str | None, instance_cores: int | None) -> str:
    """Set this (the app's) process's NeuronCores before its runtime starts: ``--neuron-cores``,
    else an inherited ``NEURON_RT_VISIBLE_CORES``, else ``default_app_cores`` of the instance."""
    from backend.hardware import env as device_env

    return device_env.claim_neuron_cores(neuron_cores, lambda: default_app_cores(detect_instance_cores(instance_cores)))


def default_app_cores(instance: InstanceCores) -> str:
    """The app's own core when nothing names one: the instance's last (at LNC=1 the first core of
    the last HBM bank), so launched engines take cores from 0 up and a tensor-parallel group stays
    on one chip; "0" where the instance is unknown."""
    if not instance.logical:
        return "0"
    last = instance.logical - 1
    return str(last - last % 2 if instance.lnc == 1 else last)


class CoresDoNotFit(ValueError):
    """An engine asks for more NeuronCores than the app and the other engines leave free."""


# What each engine's cores are called in messages: (one, many, how a count that fits is named).
_OWNER_WORDS = {"tensor-parallel": ("tensor-parallel rank", "tensor-parallel ranks", "degrees"),
                "replicas": ("replica", "replicas", "replica counts")}


@dataclasses.dataclass(frozen=True)
class CorePlan:
    """Cores of the instance (logical, as core indices count them), the app's own, and what each
    launched engine holds (``claims``: owner -> cores; the tensor-parallel group's ranks, the
    replicas). Every claim is disjoint from the app's cores and from every other claim."""

    instance: InstanceCores
    app_cores: tuple[int, ...]
    claims: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def instance_cores(self) -> int | None:
        return self.instance.logical

    @property
    def whole_banks(self) -> bool:
        return self.instance.lnc == 1

    def _bank(self, core: int) -> int:
        return core // 2 if self.whole_banks else core

    def free_cores(self, ignoring: str | None = None) -> list[int] | None:
        """Cores neither the app nor any engine holds (``ignoring`` one owner's own claim); at LNC=1
        the first core of each bank no process holds a core of."""
        if self.instance_cores is None:
            return None
        held = {c for owner, cores in self.claims.items() if owner != ignoring for c in cores}
        taken = {self._bank(c) for c in (*self.app_cores, *held)}
        return [c for c in range(self.instance_cores) if self._bank(c) not in taken
                and (not self.whole_banks or c % 2 == 0)]

    def _pick(self, free: list[int], count: int) -> list[int]:
        for device in self.instance.devices:
            here = [c for c in free if c in device.cores]
            if len(here) >= count:
                return here[:count]
        return free[:count]

    def cores_for(self, owner: str, count: int, heads: int | None = None) -> list[int]:
        """The cores ``owner`` would get for ``count`` processes (one core each), without claiming
        them. Raises CoresDoNotFit naming the counts that fit, or, when the instance size is
        unknown, the flag that gives it."""
        one, many, counts = _OWNER_WORDS.get(owner, (owner, owner, "counts"))
        free = self.free_cores(ignoring=owner)
        what = f"{count} {one if count == 1 else many}"
        if free is None:
            raise CoresDoNotFit(
                f"{what} need {count} free NeuronCores, but this instance's "
                f"NeuronCore count is unknown ({self.instance.source.removeprefix('unknown: ')}); give it "
                f"with {INSTANCE_FLAG} N: logical cores, as NEURON_RT_VISIBLE_CORES counts them "
                f"(neuron-ls's NEURON CORES; 4 on a trn2.3xlarge, 64 on a trn2.48xlarge at LNC=2)")
        if count > len(free):
            fits = [d for d in range(1, len(free) + 1) if heads is None or heads % d == 0]
            others = "".join(f", the {_OWNER_WORDS.get(o, (o, o))[1]} hold {format_cores(list(c))}"
                             for o, c in sorted(self.claims.items()) if o != owner and c)
            raise CoresDoNotFit(
                f"{what} need {count} NeuronCores, but the instance has "
                f"{self.instance_cores}{self._physical_note()} and the app holds "
                f"{format_cores(list(self.app_cores))}{others}; {len(free)} are free "
                f"({format_cores(free) or 'none'}{self._bank_note()}), so {counts} that fit are "
                f"{', '.join(map(str, fits)) or 'none'} (or give the app fewer cores with --neuron-cores)")
        return self._pick(free, count)

    def _bank_note(self) -> str:
        if not self.whole_banks:
            return ""
        return ("; at LNC=1 two NeuronCores share one HBM bank and a pipeline needs most of one, so each "
                "process gets a whole bank: its first core, the second left idle")

    def claim(self, owner: str, count: int, heads: int | None = None) -> list[int]:
        """Claim cores for ``owner`` (replacing its earlier claim); CoresDoNotFit as ``cores_for``."""
        cores = self.cores_for(owner, count, heads)
        self.claims[owner] = tuple(cores)
        return cores

    def release(self, owner: str) -> None:
        self.claims.pop(owner, None)

    def _physical_note(self) -> str:
        if self.instance.physical and self.instance.lnc:
            return f" (logical; {self.instance.physical} physical at LNC {self.instance.lnc})"
        return ""

    def describe(self, wanted: dict[str, tuple[int, int | None]]) -> dict[str, Any]:
        """JSON-able view for doctor, the status and the System tab. ``wanted``: owner -> (count,
        heads) that each engine would start with; ``engines`` says per owner which cores it holds or
        would get, or why it does not fit."""
        free = self.free_cores()
        engines: dict[str, dict[str, Any]] = {}
        for owner, (count, owner_heads) in wanted.items():
            entry: dict[str, Any] = {"count": count, "cores": None, "error": None,
                                     "held": owner in self.claims}
            try:
                held = self.claims.get(owner)
                cores = list(held) if held and len(held) == count else self.cores_for(owner, count, owner_heads)
                entry["cores"] = format_cores(cores)
            except CoresDoNotFit as exc:
                entry["error"] = str(exc)
            engines[owner] = entry
        return {
            "instance_cores": self.instance_cores,
            "physical_cores": self.instance.physical,
            "lnc": self.instance.lnc,
            "source": self.instance.source,
            "app_cores": format_cores(list(self.app_cores)),
            "free_cores": None if free is None else format_cores(free),
            "engines": engines,
            "devices": [{"device": d.index, "cores": format_cores(list(d.cores)), "memory_bytes": d.memory_bytes}
                        for d in self.instance.devices],
            "hbm_per_core_bytes": self.instance.hbm_per_core(),
            "whole_banks": self.whole_banks,
            "instance_type": self.instance.instance_type,
        }


def make_plan(app_cores: str, instance: InstanceCores | int | None) -> CorePlan:
    """The plan from the settings; raises ValueError for cores the instance does not have."""
    if not isinstance(instance, InstanceCores):
        instance = InstanceCores(instance, source=INSTANCE_FLAG) if instance is not None else InstanceCores(None)
    return CorePlan(instance, tuple(check_on_instance(app_cores, instance.logical)))


def plan_text(plan: dict[str, Any]) -> str:
    """One line for a described plan (``describe``'s), for doctor and the System tab."""
    instance = plan.get("instance_cores")
    text = f"app {plan['app_cores']}"
    engines = plan.get("engines") or {}
    for owner, entry in engines.items():
        if entry.get("cores"):
            text += f" · {_OWNER_WORDS.get(owner, (owner, owner))[1]} {entry['cores']}"
    if instance is None:
        text += " · instance size unknown"
        if not any(entry.get("error") for entry in engines.values()):
            text += f" ({str(plan.get('source', '')).removeprefix('unknown: ')})"
    else:
        text += f" · instance {instance} logical"
        if plan.get("physical_cores") and plan.get("lnc"):
            text += f" = {plan['physical_cores']} physical / LNC {plan['lnc']}"
        if plan.get("devices"):
            text += f" on {len(plan['devices'])} device{'s' if len(plan['devices']) > 1 else ''}"
        text += f" (from {plan.get('source')}" + (f", {plan['instance_type']}" if plan.get("instance_type") else "") + ")"
        if plan.get("hbm_per_core_bytes"):
            text += f", HBM {plan['hbm_per_core_bytes'] / 2**30:g} GiB per core" + (
                " (two cores share a bank: one process per bank)" if plan.get("whole_banks") else "")
    if plan.get("free_cores") is not None:
        text += f", free {plan['free_cores'] or 'none'}"
    for entry in engines.values():
        if entry.get("error"):
            text += f" · {entry['error']}"
    return text
