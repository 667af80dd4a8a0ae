"""The manager's Prometheus metrics (``/metrics``), in a registry of its own: counted where every
request ends (``ended``), and read from the manager at scrape time (``ScrapeCollector``). Every label
takes values from a bounded set: a mode or shape outside the app's modes or presets is ``other``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from backend.errors import (
    BackendBusy,
    BackendNotReady,
    DoesNotFit,
    GenerationCancelled,
    InvalidRequest,
    NotAllowed,
    ShapeLimitReached,
    ShapeLocked,
    Unauthorized,
)
from backend.hardware.monitor import INSTANCE_LABELS, MEMORY_CATEGORIES
from backend.serving.status import ServiceState
from backend.settings import MODES

PREFIX = "neuron_studio"
# Seconds: from a warm CPU run of the embedded model (under a second) to a cold Neuron compile (tens of minutes).
LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800)
OUTCOMES = ("ok", "invalid", "refused", "not_ready", "cancelled", "failed")
# The ``outcome`` label of a request that ended with an error: the first kind it is, else "failed".
_ERROR_OUTCOMES = ((InvalidRequest, "invalid"),
                   ((ShapeLocked, ShapeLimitReached, DoesNotFit, NotAllowed, Unauthorized, BackendBusy), "refused"),
                   (BackendNotReady, "not_ready"), (GenerationCancelled, "cancelled"))


def outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    return next((label for kinds, label in _ERROR_OUTCOMES if isinstance(error, kinds)), "failed")


class RunMetrics:
    def __init__(self, manager):
        self.registry = CollectorRegistry()
        self._presets = frozenset(str(shape) for _name, shape in manager.card.presets)
        self.requests = Counter(f"{PREFIX}_requests", "Generation requests, by requested mode and outcome "
                                f"({', '.join(OUTCOMES)})", ["mode", "outcome"], registry=self.registry)
        self.latency = Histogram(f"{PREFIX}_request_seconds", "Seconds from admission to the image, by the mode it "
                                 "ran in and its shape (a preset, else other)", ["mode", "shape"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.compiles = Counter(f"{PREFIX}_compiles", "Runs that compiled (torch.compile graphs or NEFFs), by mode",
                                ["mode"], registry=self.registry)
        self.compile_seconds = Counter(f"{PREFIX}_compile_seconds", "Seconds spent compiling, by mode", ["mode"],
                                       registry=self.registry)
        self.registry.register(ScrapeCollector(manager))

    @staticmethod
    def mode_label(mode: Any) -> str:
        return mode if isinstance(mode, str) and mode in MODES else "other"

    def ended(self, mode: Any, result=None, error: BaseException | None = None) -> None:
        self.requests.labels(self.mode_label(mode), outcome(error)).inc()
        if result is None:
            return
        ran, shape = self.mode_label(result.mode), str(result.shape)
        self.latency.labels(ran, shape if shape in self._presets else "other").observe(result.seconds)
        if result.compiled:
            self.compiles.labels(ran).inc()
            self.compile_seconds.labels(ran).inc(result.compile_seconds or 0.0)


class ScrapeCollector:
    """Read from the manager at each scrape (cheap: no status snapshot, no disk)."""

    def __init__(self, manager):
        self._manager = manager

    def describe(self):
        return []  # the families vary with the engines; describe nothing so registration does not collect

    def collect(self):
        m = self._manager
        state = GaugeMetricFamily(f"{PREFIX}_state", "The app's state (1 for the current one)", labels=["state"])
        for name in ServiceState:
            state.add_metric([name], 1.0 if m.state == name else 0.0)
        yield state
        engine_state = GaugeMetricFamily(f"{PREFIX}_engine_state", "Each engine's state (1 for its current one)",
                                         labels=["engine", "state"])
        capacity = GaugeMetricFamily(f"{PREFIX}_engine_capacity", "Requests each engine can run at once now",
                                     labels=["engine"])
        queued = GaugeMetricFamily(f"{PREFIX}_queue_depth", "Requests waiting for each engine", labels=["engine"])
        busy = GaugeMetricFamily(f"{PREFIX}_busy_workers", "Requests each engine is running now", labels=["engine"])
        load = m.engine_load()
        for name, engine in m.engines.items():
            engine_state.add_metric([name, str(engine.state)], 1.0)
            capacity.add_metric([name], float(engine.capacity()))
            waiting, running = load.get(name, (0, 0))
            queued.add_metric([name], float(waiting))
            busy.add_metric([name], float(running))
        yield from (engine_state, capacity, queued, busy)
        warm = GaugeMetricFamily(f"{PREFIX}_warm_signatures", "Compiled signatures warm now, by mode", labels=["mode"])
        for mode in MODES:
            warm.add_metric([mode], float(len(m.table.warm_shapes(mode))))
        yield warm
        yield from _cores(m)
        yield from _cluster(m.engines.get("ray"))
        yield from chip_families(m.view.chip({e.status_key: e.describe() for e in m.engines.launched}))


def _cores(manager):
    plan = manager.device.core_plan if manager.device is not None else None
    planned = GaugeMetricFamily(f"{PREFIX}_neuron_cores_planned", "NeuronCores planned, by owner", labels=["owner"])
    held = GaugeMetricFamily(f"{PREFIX}_neuron_cores_in_use", "NeuronCores held now, by owner", labels=["owner"])
    if plan is not None:
        app = len(plan.app_cores)
        planned.add_metric(["app"], float(app))
        held.add_metric(["app"], float(app if manager.engine is not None else 0))
        for engine in manager.engines.launched:
            planned.add_metric([engine.name], float(engine.cores_wanted()[0]))
            held.add_metric([engine.name], float(len(plan.claims.get(engine.name, ()))))
    yield planned
    yield held


def _cluster(engine):
    """The Ray Serve engine's cluster (backend.engines.ray_serve); its queue is queue_depth{engine="ray"}."""
    if engine is None:
        return
    seen = engine.describe()
    nodes = GaugeMetricFamily(f"{PREFIX}_ray_nodes", "Alive nodes of the Ray cluster")
    nodes.add_metric([], float(seen["nodes"]))
    cores = GaugeMetricFamily(f"{PREFIX}_ray_neuron_cores", "NeuronCores the Ray cluster's alive nodes offer")
    cores.add_metric([], float(seen["cluster_neuron_cores"]))
    replicas = GaugeMetricFamily(f"{PREFIX}_ray_replicas", "Serve replicas of the studio, by state", labels=["state"])
    for state in sorted({r["state"] for r in seen["replicas"]}):
        replicas.add_metric([state], float(sum(r["state"] == state for r in seen["replicas"])))
    restarts = CounterMetricFamily(f"{PREFIX}_ray_replica_restarts", "Serve replicas the app saw replaced")
    restarts.add_metric([], float(seen["restarts"]))
    yield from (nodes, cores, replicas, restarts)


def chip_families(chip):
    """neuron-monitor's figures under the names and labels ``neuron-monitor-prometheus.py`` exports
    (``tests/standin/captures/neuron-monitor/``), so AWS's Grafana dashboard for it reads them; ``owner``
    (app, tp-rank-N, replica-N, other) is ours. Only the cores a process holds memory on or used. The
    labels come from the monitor's latest report: its processes now, no history kept."""
    if not chip or not chip.get("instance"):
        return
    instance = [chip["instance"][label] for label, _key in INSTANCE_LABELS]
    names = [label for label, _key in INSTANCE_LABELS] + ["runtime_tag", "owner"]
    util = GaugeMetricFamily("neuroncore_utilization_ratio", "NeuronCore utilization ratio",
                             labels=names + ["neuroncore"])
    memory = {c: GaugeMetricFamily(f"neuroncore_memory_usage_{c}", f"NeuronCore memory utilization for {c}",
                                   labels=names + ["memory_location", "neuroncore"]) for c in MEMORY_CATEGORIES}
    used = GaugeMetricFamily("neuron_runtime_memory_used_bytes", "Runtime memory used bytes",
                             labels=names + ["memory_location"])
    latency = GaugeMetricFamily("execution_latency_seconds", "Execution latency in seconds",
                                labels=names + ["percentile"])
    status = CounterMetricFamily("execution_status", "Execution status total", labels=names + ["status_type"])
    for core in chip["cores"]:
        labels = [*instance, core["tag"], core["owner"]]
        util.add_metric([*labels, str(core["core"])], core["utilization"])
        for category, family in memory.items():  # the script leaves memory_location None on these
            family.add_metric([*labels, "None", str(core["core"])], float(core["memory"][category]))
    for p in chip["processes"]:
        labels = [*instance, p["tag"], p["owner"]]
        used.add_metric([*labels, "host"], float(p["host_bytes"]))
        used.add_metric([*labels, "neuron_device"], float(p["device_bytes"]))
        for percentile, seconds in p["latency"].items():
            latency.add_metric([*labels, percentile], seconds)
        for kind, count in p["status_total"].items():
            status.add_metric([*labels, kind], float(count))
    yield from (util, *memory.values(), used, latency, status)
