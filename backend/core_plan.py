"""The NeuronCore plan: which cores the app process claims, which the tensor-parallel ranks get,
and which each replica gets.

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
- replica i (``--replicas N``) gets one core, after the app's and the group's: app, ranks and
  replicas never share a core (``claim``; each engine holds its claim until its processes exit);
- a degree or a replica count that does not fit the instance is refused before anything starts,
  naming what fits;
- serving in process while the group is down uses the app's cores only, so a restarted group
  finds its cores free once the dead ranks have exited.

How big the instance is, in the cores ``NEURON_RT_VISIBLE_CORES`` counts (``detect_instance_cores``),
read from what the Neuron tools really print (captured on trn1/trn2 instances, with their sources, in
``tests/standin/captures/neuron-ls/``): ``neuron-ls --json-output`` gives one object per Neuron
device with ``nc_count`` (the *logical* NeuronCores at the LNC in force: 4 per Trainium2 device at
LNC=2), ``neuroncore_ids``, ``memory_size`` (bytes) and, on newer tools, ``logical_neuroncore_config``
and ``instance_type``. The text table (the fallback) has the same counts: its NEURON CORES column is
already the logical count, with a NEURON CORE IDS range (tools 2.25+); a 2.21 beta printed the
physical count there and a LOGICAL NC column beside it; 2.21-2.24 printed no id column (ids are then
counted up device by device). ``--neuron-instance-cores`` overrides it all. Unknown, tensor
parallelism is refused up front with a message naming ``--neuron-instance-cores``, rather than a
rank dying at runtime start on a core that does not exist. The driver's sysfs is not read: its
``core_count`` is undocumented as to physical or logical, and driver 2.31 moved its nodes.

With the devices known, the plan keeps a launched engine's cores on one device where they fit
(a tensor-parallel group then talks over one chip), and the app's own default core is the last one
of the instance, so the groups start from core 0. At LNC=1 two NeuronCores share one HBM bank (a
Trainium2 device has four 24 GB banks for its 8 physical cores) and FLUX.2-klein-4B in bf16 needs
about 16 GB: each process then gets a whole bank — the first core of a pair, the second left idle.

Pure Python, no torch: the app builds the plan before torch (and TorchNeuron) load.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from typing import Any, Callable, Mapping

VISIBLE_CORES_VAR = "NEURON_RT_VISIBLE_CORES"
LNC_VAR = "NEURON_LOGICAL_NC_CONFIG"
INSTANCE_FLAG = "--neuron-instance-cores"


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


@dataclasses.dataclass(frozen=True)
class NeuronDevice:
    """One Neuron device (chip) as neuron-ls lists it: its logical core ids and its HBM."""

    index: int
    cores: tuple[int, ...]
    memory_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class InstanceCores:
    """The instance's NeuronCores: ``logical`` (what core indices count; None: unknown), the
    ``physical`` cores and the ``lnc`` behind them where known, the ``devices`` (chips) with their
    core ids where neuron-ls listed them, and where the figures came from."""

    logical: int | None
    physical: int | None = None
    lnc: int | None = None
    source: str = "unknown"
    devices: tuple[NeuronDevice, ...] = ()
    instance_type: str | None = None

    def hbm_per_core(self) -> int | None:
        """HBM bytes per logical core (a device's memory over its cores); None where unknown."""
        sized = [d for d in self.devices if d.memory_bytes and d.cores]
        return sized[0].memory_bytes // len(sized[0].cores) if sized else None


def _instance(devices: list[NeuronDevice], reported_lnc: int, source: str, instance_type: str | None,
              environ: Mapping[str, str] | None) -> InstanceCores | None:
    """The instance at the LNC in force (``NEURON_LOGICAL_NC_CONFIG``, else what neuron-ls reported):
    neuron-ls reports the instance's configuration, which a process may override for itself (the
    reading of TorchNeuron's own test harness, which doubles neuron-ls's ``nc_count`` on trn2 at
    ``NEURON_LOGICAL_NC_CONFIG=1``: ``conftest.py``, ``utils.get_worker_multiplier``)."""
    devices = _number_cores(devices)
    environ = os.environ if environ is None else environ
    wanted = environ.get(LNC_VAR, "").strip()
    lnc = int(wanted) if wanted in ("1", "2") else reported_lnc
    if lnc != reported_lnc:  # the same physical cores, grouped otherwise
        devices = [dataclasses.replace(d, cores=tuple(range(d.cores[0] * reported_lnc // lnc,
                                                            (d.cores[-1] + 1) * reported_lnc // lnc)))
                   for d in devices]
    logical = sum(len(d.cores) for d in devices)
    if not logical:
        return None
    return InstanceCores(logical, logical * lnc, lnc, source, tuple(devices), instance_type)


def parse_neuron_ls_json(text: str, environ: Mapping[str, str] | None = None) -> InstanceCores | None:
    """Counts from ``neuron-ls --json-output``: one object per device with ``nc_count`` (logical),
    ``neuroncore_ids``, ``memory_size`` (bytes), and on newer tools ``logical_neuroncore_config`` and
    ``instance_type`` (without ``logical_neuroncore_config``, as on trn1: LNC 1); the counts are then
    taken to the LNC in force (``_instance``). None if unreadable."""
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        return None
    devices, lncs, types = [], set(), set()
    try:
        for entry in data:
            ids = entry.get("neuroncore_ids")  # where the ids and nc_count disagree, the ids are the cores
            cores = tuple(int(i) for i in ids) if isinstance(ids, list) else (None,) * int(entry["nc_count"])
            devices.append(NeuronDevice(int(entry["neuron_device"]), cores,
                                        int(entry["memory_size"]) if entry.get("memory_size") else None))
            if entry.get("logical_neuroncore_config") is not None:
                lncs.add(int(entry["logical_neuroncore_config"]))
            if entry.get("instance_type"):
                types.add(str(entry["instance_type"]))
    except (KeyError, TypeError, ValueError):
        return None
    if len(lncs) > 1:
        return None
    # No logical_neuroncore_config (trn1, whose cores are not grouped): LNC 1.
    return _instance(devices, lncs.pop() if lncs else 1, "neuron-ls", types.pop() if len(types) == 1 else None, environ)


def _number_cores(devices: list[NeuronDevice]) -> list[NeuronDevice]:
    """Devices listed without core ids get theirs counted up in device order (as the runtime numbers them)."""
    out, next_core = [], 0
    for device in sorted(devices, key=lambda d: d.index):
        cores = device.cores if None not in device.cores else tuple(range(next_core, next_core + len(device.cores)))
        out.append(dataclasses.replace(device, cores=cores))
        next_core = max(cores, default=next_core - 1) + 1
    return out


def _memory_bytes(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)\s*GB", text.strip())
    return int(match.group(1)) * 2**30 if match else None  # "96 GB" is memory_size 103079215104 in the JSON


def parse_neuron_ls(text: str, environ: Mapping[str, str] | None = None) -> InstanceCores | None:
    """Counts from ``neuron-ls``'s text table (tools 2.21 to 2.34, as captured): per device its
    NEURON CORES (logical), NEURON CORE IDS and NEURON MEMORY; a 2.21 beta's LOGICAL NC column (its
    NEURON CORES then physical); the ``logical-neuroncore-config:`` header line gives the LNC (absent
    on trn1, whose LNC is 1). None if no table."""
    header_lnc = re.search(r"^logical-neuroncore-config:\s*(\d+)", text, re.M)
    header_type = re.search(r"^instance-type:\s*(\S+)", text, re.M)
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.strip().startswith("|")]
    names: list[str] = []
    devices: list[NeuronDevice] = []
    grouped: int | None = None  # physical per logical, where a column says it
    for cells in rows:
        if cells and cells[0].isdigit():
            if not names:
                return None
            column = dict(zip(names, cells))
            try:
                if "LOGICAL NC" in column:  # the 2.21 beta: NEURON CORES is physical there
                    count = int(column["LOGICAL NC"])
                    grouped = int(column["NEURON CORES"]) // count
                else:
                    count = int(column["NEURON CORES"])
                ids = column.get("NEURON CORE IDS")
                cores = tuple(parse_cores(ids)) if ids else (None,) * count
            except (KeyError, ValueError):
                return None
            if len(cores) != count:
                return None
            devices.append(NeuronDevice(int(cells[0]), cores, _memory_bytes(column.get("NEURON MEMORY", ""))))
        elif cells and not cells[0] and names:
            continue  # a device's second process line: nothing about cores
        elif not any(cell.isdigit() for cell in cells):  # a header line: join it onto the column names
            names = [f"{old} {new}".strip() for old, new in zip(names, cells)] if names else cells
    if not devices:
        return None
    # The line is printed "only on trn2 instances" (the Neuron-LS guide): without it, LNC 1 (trn1).
    lnc = int(header_lnc.group(1)) if header_lnc else (grouped or 1)
    return _instance(devices, lnc, "neuron-ls", header_type.group(1) if header_type else None, environ)


_DETECTED: dict[tuple, InstanceCores] = {}


def detect_instance_cores(override: int | None = None, *, neuron_ls: str | None = "neuron-ls",
                          environ: Mapping[str, str] | None = None,
                          run: Callable[..., Any] = subprocess.run) -> InstanceCores:
    """The instance's logical NeuronCores: the override (``--neuron-instance-cores``), else
    ``neuron-ls --json-output``, else its text table. Never needs root. Asked once per process (the
    instance does not change under it)."""
    environ = os.environ if environ is None else environ
    if override is not None:
        return InstanceCores(int(override), source=INSTANCE_FLAG)
    tool = shutil.which(neuron_ls, path=environ.get("PATH")) if neuron_ls else None
    key = (tool, frozenset(environ.items()), run)
    if key in _DETECTED:
        return _DETECTED[key]
    why = []
    if not tool:
        why.append("neuron-ls is not on PATH")
    for flags, parse in ((["--json-output"], parse_neuron_ls_json), ([], parse_neuron_ls)) if tool else ():
        what = " ".join(["neuron-ls", *flags])
        try:
            proc = run([tool, *flags], capture_output=True, text=True, timeout=20, env=dict(environ))
        except (OSError, subprocess.SubprocessError) as exc:
            why.append(f"{what} failed: {exc}")
            continue
        found = parse(proc.stdout, environ) if proc.returncode == 0 else None
        if found is not None and found.logical:
            _DETECTED[key] = found
            return found
        why.append(f"{what} gave no device table (exit {proc.returncode}: "
                   f"{(proc.stderr or proc.stdout).strip()[:200]})")
    found = InstanceCores(None, source="unknown: " + "; ".join(why))
    _DETECTED[key] = found
    return found


def claim_app_cores(neuron_cores: str | None, instance_cores: int | None) -> str:
    """Set this (the app's) process's NeuronCores before its runtime starts: ``--neuron-cores``,
    else an inherited ``NEURON_RT_VISIBLE_CORES``, else ``default_app_cores`` of the instance."""
    from backend import device_env

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
        """At LNC=1 two cores share one HBM bank: each process gets a bank (its first core)."""
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
        """``count`` of the free cores, on one device where one has room (the first such device),
        else in order across devices."""
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
        """``owner``'s processes are gone: its cores are free again."""
        self.claims.pop(owner, None)

    def _physical_note(self) -> str:
        if self.instance.physical and self.instance.lnc:
            return f" (logical; {self.instance.physical} physical at LNC {self.instance.lnc})"
        return ""

    def describe(self, degree: int | None = None, heads: int | None = None,
                 wanted: dict[str, tuple[int, int | None]] | None = None) -> dict[str, Any]:
        """JSON-able view for doctor, the status and the System tab. ``wanted``: owner -> (count,
        heads) that each engine would start with (``degree``/``heads``: the tensor-parallel one's);
        ``engines`` says per owner which cores it holds or would get, or why it does not fit."""
        free = self.free_cores()
        wanted = dict(wanted or {})
        if degree and "tensor-parallel" not in wanted:
            wanted["tensor-parallel"] = (degree, heads)
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
        tp = engines.get("tensor-parallel") or {}
        return {
            "instance_cores": self.instance_cores,
            "physical_cores": self.instance.physical,
            "lnc": self.instance.lnc,
            "source": self.instance.source,
            "app_cores": format_cores(list(self.app_cores)),
            "free_cores": None if free is None else format_cores(free),
            "tp_degree": tp.get("count"), "tp_cores": tp.get("cores"), "tp_error": tp.get("error"),
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
    cores = parse_cores(app_cores)
    if instance.logical is not None and max(cores) >= instance.logical:
        raise ValueError(f"--neuron-cores {app_cores}: the instance has NeuronCores 0-{instance.logical - 1}")
    return CorePlan(instance, tuple(cores))


def plan_text(plan: dict[str, Any]) -> str:
    """One line for a described plan (doctor, the System tab): the app's cores, the group's, the
    instance as logical / physical / LNC and where that came from, what is free."""
    instance = plan.get("instance_cores")
    text = f"app {plan['app_cores']}"
    engines = plan.get("engines") or ({"tensor-parallel": {"cores": plan.get("tp_cores"), "error": plan.get("tp_error")}}
                                      if plan.get("tp_cores") or plan.get("tp_error") else {})
    for owner, entry in engines.items():
        if entry.get("cores"):
            text += f" · {_OWNER_WORDS.get(owner, (owner, owner))[1]} {entry['cores']}"
    if instance is None:
        text += " · instance size unknown"
        if not plan.get("tp_error"):
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
