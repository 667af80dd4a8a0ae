"""How big the instance is, in the cores ``NEURON_RT_VISIBLE_CORES`` counts (``detect_instance_cores``;
``--neuron-instance-cores`` overrides it), read from what the Neuron tools print (captured on trn1/trn2,
with their sources, in ``tests/standin/captures/neuron-ls/``): ``neuron-ls --json-output``, else its
text table. The driver's sysfs is not read: its ``core_count`` is undocumented as to physical or
logical, and driver 2.31 moved its nodes. Pure Python, no torch: read before TorchNeuron loads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from typing import Any, Callable, Mapping

from backend.core_lists import parse_cores

LNC_VAR = "NEURON_LOGICAL_NC_CONFIG"
INSTANCE_FLAG = "--neuron-instance-cores"


@dataclasses.dataclass(frozen=True)
class NeuronDevice:
    """One Neuron device (chip): its logical core ids and its HBM."""

    index: int
    cores: tuple[int, ...]
    memory_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class InstanceCores:
    """The instance's NeuronCores: ``logical`` (what core indices count; None: unknown), the
    ``physical`` ones and the ``lnc`` where known, its devices, and where the figures came from."""

    logical: int | None
    physical: int | None = None
    lnc: int | None = None
    source: str = "unknown"
    devices: tuple[NeuronDevice, ...] = ()
    instance_type: str | None = None

    def hbm_per_core(self) -> int | None:
        sized = [d for d in self.devices if d.memory_bytes and d.cores]
        return sized[0].memory_bytes // len(sized[0].cores) if sized else None


def _instance(devices: list[NeuronDevice], reported_lnc: int, source: str, instance_type: str | None,
              environ: Mapping[str, str] | None) -> InstanceCores | None:
    """The instance at the LNC in force (``NEURON_LOGICAL_NC_CONFIG``, else neuron-ls's): a process
    may override the instance's LNC for itself, as TorchNeuron's test harness reads it (it doubles
    ``nc_count`` on trn2 at LNC=1: ``conftest.py``, ``utils.get_worker_multiplier``)."""
    devices = _number_cores(devices)
    environ = os.environ if environ is None else environ
    wanted = environ.get(LNC_VAR, "").strip()
    lnc = int(wanted) if wanted in ("1", "2") else reported_lnc
    if lnc != reported_lnc:  # the same physical cores, grouped otherwise
        devices = [dataclasses.replace(d, cores=tuple(range(d.cores[0] * reported_lnc // lnc,
                                                            (d.cores[-1] + 1) * reported_lnc // lnc)))
                   for d in devices]
    logical = sum(len(d.cores) for d in devices)
    return InstanceCores(logical, logical * lnc, lnc, source, tuple(devices), instance_type) if logical else None


def parse_neuron_ls_json(text: str, environ: Mapping[str, str] | None = None) -> InstanceCores | None:
    """Counts from ``neuron-ls --json-output``: per device ``nc_count`` (logical: 4 per Trainium2 at
    LNC=2), ``neuroncore_ids``, ``memory_size`` (bytes), on newer tools ``logical_neuroncore_config``
    (absent on trn1: LNC 1) and ``instance_type``. None if unreadable."""
    devices, lncs, types = [], set(), set()
    try:
        data = json.loads(text)
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            return None
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
    return _instance(devices, lncs.pop() if lncs else 1, "neuron-ls", types.pop() if len(types) == 1 else None, environ)


def _number_cores(devices: list[NeuronDevice]) -> list[NeuronDevice]:
    """Devices listed without core ids get theirs counted up in device order, as the runtime does."""
    out, next_core = [], 0
    for device in sorted(devices, key=lambda d: d.index):
        cores = device.cores if None not in device.cores else tuple(range(next_core, next_core + len(device.cores)))
        out.append(dataclasses.replace(device, cores=cores))
        next_core = max(cores, default=next_core - 1) + 1
    return out


def parse_neuron_ls(text: str, environ: Mapping[str, str] | None = None) -> InstanceCores | None:
    """Counts from ``neuron-ls``'s text table (tools 2.21 to 2.34, as captured): per device NEURON
    CORES (logical), NEURON CORE IDS (2.25+; before, ids are counted up) and NEURON MEMORY; a 2.21
    beta's LOGICAL NC column (its NEURON CORES then physical); the LNC from the
    ``logical-neuroncore-config:`` line. None if no table."""
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
            memory = re.fullmatch(r"(\d+)\s*GB", column.get("NEURON MEMORY", "").strip())
            # "96 GB" is memory_size 103079215104 in the JSON
            devices.append(NeuronDevice(int(cells[0]), cores, int(memory.group(1)) * 2**30 if memory else None))
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


def detect_instance_cores(override: int | None = None, *, environ: Mapping[str, str] | None = None,
                          run: Callable[..., Any] = subprocess.run) -> InstanceCores:
    """The override, else ``neuron-ls --json-output``, else its text table; never needs root. Asked
    once per process (the instance does not change under it)."""
    environ = os.environ if environ is None else environ
    if override is not None:
        return InstanceCores(int(override), source=INSTANCE_FLAG)
    tool = shutil.which("neuron-ls", path=environ.get("PATH"))
    key = (tool, frozenset(environ.items()), run)
    if key in _DETECTED:
        return _DETECTED[key]
    why = [] if tool else ["neuron-ls is not on PATH"]
    for flags, parse in ((["--json-output"], parse_neuron_ls_json), ([], parse_neuron_ls)) if tool else ():
        what = " ".join(["neuron-ls", *flags])
        try:
            proc = run([tool, *flags], capture_output=True, text=True, timeout=20, env=dict(environ))
        except (OSError, subprocess.SubprocessError) as exc:
            why.append(f"{what} failed: {exc}")
            continue
        found = parse(proc.stdout, environ) if proc.returncode == 0 else None
        if found is not None and found.logical:
            return _DETECTED.setdefault(key, found)
        why.append(f"{what} gave no device table (exit {proc.returncode}: "
                   f"{(proc.stderr or proc.stdout).strip()[:200]})")
    return _DETECTED.setdefault(key, InstanceCores(None, source="unknown: " + "; ".join(why)))
