"""The chip, read live: ``neuron-monitor`` (aws-neuronx-tools) as a child process while the app runs on
Neuron, its latest report kept, and who holds which NeuronCore (the app, each tensor-parallel rank, each
replica) read from it by pid. Off Neuron nothing starts and the status says why.

The format is the tool's, as captured from real runs (``tests/standin/captures/neuron-monitor/``,
sources in its SOURCES.md; the user guide, ``neuron-monitor-user-guide.rst``, documents the fields):
one JSON report per line and per period; ``neuron_runtime_data[]`` holds one entry per Neuron process
(``pid``, ``neuron_runtime_tag``, ``error``, ``report``); in ``report``, ``neuroncore_counters.
neuroncores_in_use[core].neuroncore_utilization`` is a percent over the period, ``memory_used.
neuron_runtime_used_bytes`` the process's bytes on the host and the device with ``usage_breakdown.
neuroncore_memory_usage[core]`` by category, and ``execution_stats`` the period's outcome counts and
``latency_stats.total_latency`` percentiles in seconds (null when nothing ran). Core indices are the
instance's, so they are the core plan's. A metric group whose ``error`` is not empty is skipped, as
``neuron-monitor-prometheus.py`` skips it.

The stream is read bounded: a line over ``LINE_CAP`` bytes is dropped whole, anything that is not a
report is dropped, numbers must be finite and not negative, indices whole and below ``MAX_INDEX``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any, Callable

EXECUTABLE = "neuron-monitor"
PERIOD_SECONDS = 5.0  # the tool's own default (user guide, "Using neuron-monitor")
# One report. Each model a process loaded is listed in it (``loaded_models``), and eager mode loads a
# NEFF per op signature: a long-running eager process's report can reach megabytes.
LINE_CAP = 32 * 2**20
MAX_INDEX = 4096  # cores and pids per report; a trn2.48xlarge has 128 physical cores
GROUPS = ("neuroncore_counters", "memory_used", "execution_stats")
MEMORY_CATEGORIES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")
STATUS_TYPES = ("completed", "completed_with_err", "completed_with_num_err", "timed_out", "incorrect_input",
                "failed_to_queue")
PERCENTILES = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")
# The exporter's instance labels (its name, instance_info's key), as neuron-monitor-prometheus.py names them.
INSTANCE_LABELS = (("instance_name", "instance_name"), ("instance_id", "instance_id"),
                   ("instance_type", "instance_type"), ("availability_zone", "instance_availability_zone"),
                   ("region", "instance_region"), ("subnet_id", "subnet_id"))


def config(period: float) -> dict[str, Any]:
    """The configuration file: the three groups the panel shows, for every Neuron process."""
    return {"period": f"{period:g}s",
            "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": group} for group in GROUPS]}]}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _index(key: Any) -> int | None:
    text = str(key)
    return int(text) if text.isdigit() and int(text) < MAX_INDEX else None


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _group(report: dict, name: str) -> dict:
    group = _dict(report.get(name))
    return group if group.get("error", "") == "" else {}


def _process(entry: Any) -> dict[str, Any] | None:
    entry = _dict(entry)
    pid = entry.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    report = _dict(entry.get("report"))
    cores: dict[int, dict[str, Any]] = {}
    in_use = _dict(_group(report, "neuroncore_counters").get("neuroncores_in_use"))
    for key, counters in list(in_use.items())[:MAX_INDEX]:
        percent = _number(_dict(counters).get("neuroncore_utilization"))
        if _index(key) is not None and percent is not None:
            cores.setdefault(_index(key), {})["utilization"] = min(percent, 100.0) / 100.0
    used = _dict(_group(report, "memory_used").get("neuron_runtime_used_bytes"))
    by_core = _dict(_dict(used.get("usage_breakdown")).get("neuroncore_memory_usage"))
    for key, categories in list(by_core.items())[:MAX_INDEX]:
        if _index(key) is not None:
            memory = {c: int(_number(_dict(categories).get(c)) or 0) for c in MEMORY_CATEGORIES}
            cores.setdefault(_index(key), {})["memory"] = memory
    stats = _group(report, "execution_stats")
    latency = _dict(_dict(stats.get("latency_stats")).get("total_latency"))
    summary = _dict(stats.get("execution_summary"))
    return {
        "pid": pid, "tag": str(entry.get("neuron_runtime_tag", ""))[:255], "error": str(entry.get("error") or "")[:500],
        "host_bytes": int(_number(used.get("host")) or 0), "device_bytes": int(_number(used.get("neuron_device")) or 0),
        "cores": [{"core": i, "utilization": c.get("utilization", 0.0),
                   "memory": c.get("memory", dict.fromkeys(MEMORY_CATEGORIES, 0)),
                   "memory_bytes": sum(c.get("memory", {}).values())} for i, c in sorted(cores.items())],
        "latency": {p: _number(latency.get(p)) for p in PERCENTILES if _number(latency.get(p)) is not None},
        "status": {s: int(_number(summary.get(s)) or 0) for s in STATUS_TYPES},
    }


def parse_report(line: str | bytes) -> dict[str, Any]:
    """One report: its processes, the hardware and the instance. ValueError for anything else."""
    try:
        data = json.loads(line)
    except RecursionError:
        raise ValueError("nested too deep") from None
    if not isinstance(data, dict) or not isinstance(data.get("neuron_runtime_data"), list):
        raise ValueError("not a neuron-monitor report")
    processes = [p for p in map(_process, data["neuron_runtime_data"][:MAX_INDEX]) if p]
    hardware = _dict(data.get("neuron_hardware_info"))
    instance = _dict(data.get("instance_info"))
    return {"processes": processes,
            "hardware": {key: int(_number(hardware.get(key)) or 0) or None
                         for key in ("neuron_device_count", "neuroncore_per_device_count",
                                     "neuron_device_memory_size", "logical_neuroncore_config")},
            "instance": {label: str(instance.get(key) or "")[:128] for label, key in INSTANCE_LABELS}}


def process_owners(app_pid: int, tp: dict[str, Any] | None, replicas: dict[str, Any] | None) -> dict[int, str]:
    """pid -> who it is (``app``, ``tp-rank-N``, ``replica-N``), from the engines' ``describe()``."""
    owners = {app_pid: "app"}
    for rank, pid in ((tp or {}).get("rank_pids") or {}).items():
        owners[int(pid)] = f"tp-rank-{int(rank)}"
    for replica in (replicas or {}).get("replicas") or []:
        if replica.get("pid"):
            owners[int(replica["pid"])] = f"replica-{int(replica['index'])}"
    return owners


class NeuronMonitor:
    """``neuron-monitor -c <config>`` while the app runs, its latest report in memory. Started only on
    Neuron (``start``); ``close`` ends the child and its reader (a child whose app died ends at its next
    write, on the closed pipe)."""

    def __init__(self, device_kind: str, period: float | None = None, executable: str = EXECUTABLE,
                 clock: Callable[[], float] = time.monotonic):
        self.device_kind, self.period, self.executable, self._clock = device_kind, period or PERIOD_SECONDS, \
            executable, clock
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._config_dir: str | None = None
        self._closing = False
        self._latest: dict[str, Any] | None = None
        self._at: float | None = None
        self._reports = self._dropped = 0
        self._totals: dict[tuple[int, str], dict[str, int]] = {}  # (pid, tag) -> status counts since start
        self.why: str | None = None if device_kind == "neuron" else "off_neuron"

    def start(self) -> None:
        if self.device_kind != "neuron" or self._proc is not None:
            return
        path = shutil.which(self.executable)
        if path is None:
            self.why = f"{self.executable} is not on PATH (aws-neuronx-tools installs it in /opt/aws/neuron/bin)"
            return
        self._config_dir = tempfile.mkdtemp(prefix="neuron-monitor-")
        conf = os.path.join(self._config_dir, "monitor.conf")
        with open(conf, "w") as f:
            json.dump(config(self.period), f)
        self._proc = subprocess.Popen([path, "-c", conf], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, args=(self._proc,), name="neuron-monitor", daemon=True)
        self._reader.start()

    def _read(self, proc: subprocess.Popen) -> None:
        stream = proc.stdout
        for line in iter(lambda: stream.readline(LINE_CAP + 1), b""):
            if len(line) > LINE_CAP:  # dropped whole: the rest of it too
                while line and not line.endswith(b"\n"):
                    line = stream.readline(LINE_CAP + 1)
                self._dropped += 1
                continue
            try:
                report = parse_report(line)
            except ValueError:
                self._dropped += 1
            else:
                self.take(report)
        code = proc.wait()
        if not self._closing:
            self.why = f"{self.executable} exited (code {code})"

    def take(self, report: dict[str, Any]) -> None:
        """Keep ``report`` as the latest; add its periods' outcome counts to the totals."""
        with self._lock:
            self._latest, self._at, self._reports = report, self._clock(), self._reports + 1
            for p in report["processes"]:
                totals = self._totals.setdefault((p["pid"], p["tag"]), dict.fromkeys(STATUS_TYPES, 0))
                for kind, count in p["status"].items():
                    totals[kind] += count

    def close(self, timeout: float = 5.0) -> None:
        self._closing = True
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        if self._reader is not None:
            self._reader.join(timeout)
        if self._config_dir:
            shutil.rmtree(self._config_dir, ignore_errors=True)

    def reading(self, owners: dict[int, str]) -> dict[str, Any]:
        """JSON-able, for the status, the System tab and ``/metrics``: the latest report's processes
        (each with its owner and the outcome counts since the monitor started) and ``cores``, one row per
        core a process holds memory on or used (the instance's core index)."""
        with self._lock:
            latest, at, reports = self._latest, self._at, self._reports
            totals = {key: dict(value) for key, value in self._totals.items()}
        out: dict[str, Any] = {"device": self.device_kind, "running": self._proc is not None and self.why is None,
                               "why": self.why, "period": self.period, "reports": reports, "dropped": self._dropped,
                               "age_seconds": None if at is None else round(self._clock() - at, 1),
                               "processes": [], "cores": [], "hardware": None, "instance": None}
        if latest is None:
            return out
        out["hardware"], out["instance"] = latest["hardware"], latest["instance"]
        for p in latest["processes"]:
            owner = owners.get(p["pid"], "other")
            out["processes"].append({**{k: v for k, v in p.items() if k != "cores"}, "owner": owner,
                                     "status_total": totals.get((p["pid"], p["tag"]), {})})
            out["cores"] += [{**core, "owner": owner, "pid": p["pid"], "tag": p["tag"]} for core in p["cores"]
                             if core["memory_bytes"] or core["utilization"]]
        out["cores"].sort(key=lambda c: (c["core"], c["owner"]))
        return out
