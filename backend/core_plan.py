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

How big the instance is, in the cores ``NEURON_RT_VISIBLE_CORES`` counts (``detect_instance_cores``):
Trainium2 and Trainium3 devices have 8 *physical* NeuronCores, and by default the runtime groups two
into one *logical* core (LNC=2, ``NEURON_LOGICAL_NC_CONFIG``; "Logical NeuronCore configuration" in
the Neuron docs). Every core index a process sees is logical: a trn2.3xlarge shows 4, a trn2.48xlarge
64. The driver's sysfs ``core_count`` is the physical count and readable by root only, so the app
asks, in order: ``--neuron-instance-cores`` (logical); ``neuron-ls``, which any user may run and
which prints both counts per device (its "NEURON CORES" and "LOGICAL NC" columns, Neuron-LS user
guide); the sysfs count divided by the LNC in force, where it is readable. Unknown, tensor
parallelism is refused up front with a message naming ``--neuron-instance-cores``, rather than a
rank dying at runtime start on a core that does not exist.

Pure Python, no torch: the app builds the plan before torch (and TorchNeuron) load.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shutil
import subprocess
from typing import Any, Callable, Mapping

VISIBLE_CORES_VAR = "NEURON_RT_VISIBLE_CORES"
LNC_VAR = "NEURON_LOGICAL_NC_CONFIG"
DEFAULT_LNC = 2  # Trn2/Trn3, the only instances TorchNeuron runs on
# Neuron driver sysfs (Neuron Sysfs User Guide): one folder per Neuron device, with its physical core count.
SYSFS_DEVICES = "/sys/devices/virtual/neuron_device"
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
class InstanceCores:
    """The instance's NeuronCores: ``logical`` (what core indices count; None: unknown), the
    ``physical`` cores and the ``lnc`` behind them where known, and where the figures came from."""

    logical: int | None
    physical: int | None = None
    lnc: int | None = None
    source: str = "unknown"


def _lnc_in_force(environ: Mapping[str, str]) -> int | None:
    text = environ.get(LNC_VAR, "").strip()
    if not text:
        return DEFAULT_LNC
    return int(text) if text in ("1", "2") else None


def parse_neuron_ls(text: str) -> InstanceCores | None:
    """Counts from ``neuron-ls``'s table: per device "NEURON CORES" (physical) and, on Trn2/Trn3,
    "LOGICAL NC"; the ``logical-neuroncore-config:`` header line gives the LNC. None if no table."""
    header_lnc = re.search(r"^logical-neuroncore-config:\s*(\d+)", text, re.M)
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.strip().startswith("|")]
    names: list[str] = []
    physical = logical = 0
    for cells in rows:
        if cells and cells[0].isdigit():
            if not names:
                return None
            column = dict(zip(names, cells))
            try:
                physical += int(column["NEURON CORES"])
                if "LOGICAL NC" in column:
                    logical += int(column["LOGICAL NC"])
            except (KeyError, ValueError):
                return None
        elif not any(cell.isdigit() for cell in cells):  # a header line: join it onto the column names
            names = [f"{old} {new}".strip() for old, new in zip(names, cells)] if names else cells
    if not physical:
        return None
    lnc = int(header_lnc.group(1)) if header_lnc else (physical // logical if logical else None)
    if not logical:
        logical = physical // lnc if lnc else None
    return InstanceCores(logical, physical, lnc, "neuron-ls")


def _read_sysfs(sysfs: str) -> tuple[int | None, str]:
    total, paths = 0, glob.glob(os.path.join(sysfs, "neuron*", "core_count"))
    for path in paths:
        try:
            with open(path, encoding="ascii") as fh:
                total += int(fh.read().strip())
        except PermissionError:
            return None, f"{path} is readable by root only"
        except (OSError, ValueError) as exc:
            return None, f"{path}: {exc}"
    return (total or None), ("" if paths else f"no Neuron driver sysfs at {sysfs}")


def detect_instance_cores(override: int | None = None, *, sysfs: str = SYSFS_DEVICES,
                          neuron_ls: str | None = "neuron-ls",
                          environ: Mapping[str, str] | None = None,
                          run: Callable[..., Any] = subprocess.run) -> InstanceCores:
    """The instance's logical NeuronCores: the override (``--neuron-instance-cores``), else
    ``neuron-ls``, else the driver's sysfs (physical) divided by the LNC in force. Never needs root."""
    environ = os.environ if environ is None else environ
    if override is not None:
        return InstanceCores(int(override), source=INSTANCE_FLAG)
    why = []
    tool = shutil.which(neuron_ls, path=environ.get("PATH")) if neuron_ls else None
    if tool:
        try:
            proc = run([tool], capture_output=True, text=True, timeout=20, env=dict(environ))
            found = parse_neuron_ls(proc.stdout) if proc.returncode == 0 else None
            if found is not None and found.logical:
                return found
            why.append(f"neuron-ls gave no device table (exit {proc.returncode}: "
                       f"{(proc.stderr or proc.stdout).strip()[:200]})")
        except (OSError, subprocess.SubprocessError) as exc:
            why.append(f"neuron-ls failed: {exc}")
    else:
        why.append("neuron-ls is not on PATH")
    physical, sysfs_why = _read_sysfs(sysfs)
    if physical:
        lnc = _lnc_in_force(environ)
        if lnc is None:
            return InstanceCores(None, physical, None, f"unknown: {LNC_VAR}={environ.get(LNC_VAR)!r} is not 1 or 2")
        return InstanceCores(physical // lnc, physical, lnc, "sysfs")
    why.append(sysfs_why)
    return InstanceCores(None, source="unknown: " + "; ".join(w for w in why if w))


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

    def free_cores(self, ignoring: str | None = None) -> list[int] | None:
        """Cores neither the app nor any engine holds (``ignoring`` one owner's own claim)."""
        if self.instance_cores is None:
            return None
        held = {c for owner, cores in self.claims.items() if owner != ignoring for c in cores}
        return [c for c in range(self.instance_cores) if c not in self.app_cores and c not in held]

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
                f"(neuron-ls shows them as LOGICAL NC; 4 on a trn2.3xlarge, 64 on a trn2.48xlarge)")
        if count > len(free):
            fits = [d for d in range(1, len(free) + 1) if heads is None or heads % d == 0]
            others = "".join(f", the {_OWNER_WORDS.get(o, (o, o))[1]} hold {format_cores(list(c))}"
                             for o, c in sorted(self.claims.items()) if o != owner and c)
            raise CoresDoNotFit(
                f"{what} need {count} NeuronCores, but the instance has "
                f"{self.instance_cores}{self._physical_note()} and the app holds "
                f"{format_cores(list(self.app_cores))}{others}; {len(free)} are free "
                f"({format_cores(free) or 'none'}), so {counts} that fit are {', '.join(map(str, fits)) or 'none'} "
                f"(or give the app fewer cores with --neuron-cores)")
        return free[:count]

    def claim(self, owner: str, count: int, heads: int | None = None) -> list[int]:
        """Claim cores for ``owner`` (replacing its earlier claim); CoresDoNotFit as ``cores_for``."""
        cores = self.cores_for(owner, count, heads)
        self.claims[owner] = tuple(cores)
        return cores

    def release(self, owner: str) -> None:
        """``owner``'s processes are gone: its cores are free again."""
        self.claims.pop(owner, None)

    def tp_cores(self, degree: int, heads: int | None = None) -> list[int]:
        """Cores for tensor-parallel ranks 0..degree-1 (``cores_for`` the tensor-parallel owner)."""
        return self.cores_for("tensor-parallel", degree, heads)

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
        text += f" (from {plan.get('source')})"
    if plan.get("free_cores") is not None:
        text += f", free {plan['free_cores'] or 'none'}"
    for entry in engines.values():
        if entry.get("error"):
            text += f" · {entry['error']}"
    return text
