"""The NeuronCore plan: which cores the app process claims, and which each tensor-parallel rank and
each replica gets (docs/trainium.md, "The NeuronCore plan").

Why: "By default, Neuron Runtime initializes all the cores present in the system and reserves them
for the current process", and a reserved core "cannot be used by another process at all" until that
process exits (Neuron Runtime configuration guide, 2.33, "NeuronCore allocation"): no two processes
share a core, and an engine holds its ``claim`` until its processes exit. At LNC=1 two cores share
one 24 GB HBM bank and FLUX.2-klein-4B in bf16 needs about 16 GB: one process per bank. A
tensor-parallel group stays on one chip ("Keep TP4 within a chip", Best practices for training on
AWS Neuron, https://awsdocs-neuron.readthedocs-hosted.com/en/latest/training/best-practices.html).
Pure Python, no torch: built before TorchNeuron loads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from backend.core_lists import NO_CORES, check_on_instance, format_cores
from backend.hardware import env as device_env
from backend.hardware.neuron_ls import INSTANCE_FLAG, InstanceCores, detect_instance_cores


def claim_app_cores(neuron_cores: str | None, instance_cores: int | None) -> str:
    """Set the app's NeuronCores before its runtime starts (``env.claim_neuron_cores``)."""
    return device_env.claim_neuron_cores(neuron_cores, lambda: default_app_cores(detect_instance_cores(instance_cores)))


def default_app_cores(instance: InstanceCores) -> str:
    """The instance's last core (at LNC=1 the first of the last HBM bank), so launched engines take
    cores from 0 up and a tensor-parallel group stays on one chip; "0" where the instance is unknown."""
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
    """The instance, the app's own cores, and what each launched engine holds (``claims``: owner ->
    cores), every claim disjoint from the app's cores and from every other claim."""

    instance: InstanceCores
    app_cores: tuple[int, ...]
    claims: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def whole_banks(self) -> bool:
        return self.instance.lnc == 1

    def _bank(self, core: int) -> int:
        return core // 2 if self.whole_banks else core

    def free_cores(self, ignoring: str | None = None) -> list[int] | None:
        """Cores neither the app nor any engine (but ``ignoring``) holds; at LNC=1 the first core of
        each bank no process holds a core of."""
        if self.instance.logical is None:
            return None
        held = {c for owner, cores in self.claims.items() if owner != ignoring for c in cores}
        taken = {self._bank(c) for c in (*self.app_cores, *held)}
        return [c for c in range(self.instance.logical) if self._bank(c) not in taken
                and (not self.whole_banks or c % 2 == 0)]

    def chip_room(self) -> int | None:
        """The most processes one chip holds (its logical cores; at LNC=1 one per HBM bank); None
        where neuron-ls did not say which core is on which chip."""
        sizes = [len(d.cores) // (2 if self.whole_banks else 1) for d in self.instance.devices if d.cores]
        return min(sizes) if sizes else None

    def tp_degrees(self, heads: int) -> list[int]:
        """The tensor-parallel degrees this instance offers: they divide ``heads`` and fit one chip."""
        room = self.chip_room()
        return [d for d in range(1, min(heads, 64) + 1) if heads % d == 0 and (room is None or d <= room)]

    def cores_for(self, owner: str, count: int, heads: int | None = None) -> list[int]:
        """The cores ``owner`` would get for ``count`` processes, unclaimed; with ``heads`` (a
        tensor-parallel group) all on one chip. CoresDoNotFit names the counts that fit, or the flag
        that gives an unknown instance size."""
        one, many, counts = _OWNER_WORDS.get(owner, (owner, owner, "counts"))
        free = self.free_cores(ignoring=owner)
        what = f"{count} {one if count == 1 else many}"
        if free is None:
            raise CoresDoNotFit(f"{what} need {count} free NeuronCores, but this instance's NeuronCore count is "
                                f"unknown ({self.instance.source.removeprefix('unknown: ')}); give it with "
                                f"{INSTANCE_FLAG} N: logical cores, as NEURON_RT_VISIBLE_CORES counts them "
                                "(neuron-ls's NEURON CORES; 4 on a trn2.3xlarge, 64 on a trn2.48xlarge at LNC=2)")
        chips = [[c for c in free if c in device.cores] for device in self.instance.devices]
        group = heads is not None and bool(chips)  # a tensor-parallel group, on one chip
        room = max(map(len, chips)) if group else len(free)
        if count > room:
            fits = [d for d in range(1, room + 1) if heads is None or d in self.tp_degrees(heads)]
            others = "".join(f", the {_OWNER_WORDS.get(o, (o, o))[1]} hold {format_cores(list(c))}"
                             for o, c in sorted(self.claims.items()) if o != owner and c)
            physical = (f" (logical; {self.instance.physical} physical at LNC {self.instance.lnc})"
                        if self.instance.physical and self.instance.lnc else "")
            banks = ("; at LNC=1 two NeuronCores share one HBM bank and a pipeline needs most of one, so each "
                     "process gets a whole bank: its first core, the second left idle") if self.whole_banks else ""
            chip = (f"; a tensor-parallel group stays on one chip, whose {self.chip_room()} NeuronCores "
                    f"leave {room} free at most" if group else "")
            fewer = (" (or give the app fewer cores: --neuron-cores none leaves every core to the engines)"
                     if self.app_cores else "")
            raise CoresDoNotFit(f"{what} need {count} NeuronCores, but the instance has {self.instance.logical}"
                                f"{physical} and the app holds {format_cores(list(self.app_cores)) or 'none'}{others}; "
                                f"{len(free)} are free ({format_cores(free) or 'none'}{banks}{chip}), so {counts} "
                                f"that fit are {', '.join(map(str, fits)) or 'none'}{fewer}")
        return next((here[:count] for here in chips if len(here) >= count), free[:count])  # on one chip where they fit

    def claim(self, owner: str, count: int, heads: int | None = None) -> list[int]:
        """``cores_for``, claimed (replacing ``owner``'s earlier claim)."""
        cores = self.cores_for(owner, count, heads)
        self.claims[owner] = tuple(cores)
        return cores

    def release(self, owner: str) -> None:
        self.claims.pop(owner, None)

    def describe(self, wanted: dict[str, tuple[int, int | None]]) -> dict[str, Any]:
        """JSON-able, for doctor, the status and the System tab. ``wanted``: owner -> (count, heads)
        it would start with; ``engines``: the cores each holds or would get, or why they do not fit."""
        free = self.free_cores()
        engines: dict[str, dict[str, Any]] = {}
        for owner, (count, owner_heads) in wanted.items():
            entry: dict[str, Any] = {"count": count, "cores": None, "error": None, "held": owner in self.claims}
            if owner_heads is not None:
                entry["degrees"] = self.tp_degrees(owner_heads)
            try:
                held = self.claims.get(owner)
                cores = list(held) if held and len(held) == count else self.cores_for(owner, count, owner_heads)
                entry["cores"] = format_cores(cores)
            except CoresDoNotFit as exc:
                entry["error"] = str(exc)
            engines[owner] = entry
        return {"instance_cores": self.instance.logical, "physical_cores": self.instance.physical,
                "lnc": self.instance.lnc, "source": self.instance.source,
                "app_cores": format_cores(list(self.app_cores)) or NO_CORES,
                "free_cores": None if free is None else format_cores(free), "engines": engines,
                "devices": [{"device": d.index, "cores": format_cores(list(d.cores)), "memory_bytes": d.memory_bytes}
                            for d in self.instance.devices],
                "hbm_per_core_bytes": self.instance.hbm_per_core(), "whole_banks": self.whole_banks,
                "instance_type": self.instance.instance_type}


def make_plan(app_cores: str, instance: InstanceCores | int | None) -> CorePlan:
    """ValueError for cores the instance does not have."""
    if not isinstance(instance, InstanceCores):
        instance = InstanceCores(instance, source=INSTANCE_FLAG) if instance is not None else InstanceCores(None)
    return CorePlan(instance, tuple(check_on_instance(app_cores, instance.logical)))


def plan_text(plan: dict[str, Any]) -> str:
    """One line for ``describe``'s plan, for doctor and the System tab."""
    instance = plan.get("instance_cores")
    text = f"app {plan['app_cores']}"
    engines = plan.get("engines") or {}
    text += "".join(f" · {_OWNER_WORDS.get(owner, (owner, owner))[1]} {entry['cores']}"
                    for owner, entry in engines.items() if entry.get("cores"))
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
        text += f" (from {plan.get('source')}{', ' + plan['instance_type'] if plan.get('instance_type') else ''})"
        if plan.get("hbm_per_core_bytes"):
            text += f", HBM {plan['hbm_per_core_bytes'] / 2**30:g} GiB per core" + (
                " (two cores share a bank: one process per bank)" if plan.get("whole_banks") else "")
    if plan.get("free_cores") is not None:
        text += f", free {plan['free_cores'] or 'none'}"
    return text + "".join(f" · {entry['error']}" for entry in engines.values() if entry.get("error"))
