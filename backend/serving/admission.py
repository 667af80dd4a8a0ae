"""Admission: what a run at (mode, shape) will cost now, and whether it may run at all.

A run is refused up front when it would compile while the app is locked to warm shapes, when a
compiled mode already holds ``--max-compiled-shapes`` graphs (past dynamo's recompile limit a new
shape would raise or silently run eagerly), or on Neuron when it would not fit one NeuronCore's
memory (``backend.hardware.memory``). On Neuron every new shape compiles something, even in eager
mode (TorchNeuron compiles each new eager op signature), and per exact (height, width).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from backend.errors import DoesNotFit, ShapeLimitReached, ShapeLocked, StudioError
from backend.hardware import memory
from backend.serving import compile_state as cs
from backend.settings import Settings
from backend.shapes import Shape, parse_signature

# Seconds a first compile takes before the machine has measured one, by compile backend and mode: a
# prior, said to be one wherever it is shown. From this project's CPU runs (bench P5/P7: inductor 20-100 s
# on 2 cores, regional a third, aot_eager a few); none for the neuron backend, never timed here.
PRIOR_COMPILE_SECONDS = {"inductor": {"compiled": 60.0, "regional": 25.0},
                         "aot_eager": {"compiled": 5.0, "regional": 5.0}}


class Admission:
    def __init__(self, settings: Settings, table: cs.CompileTable, tp_degree: Callable[[], int] | None = None):
        self.settings, self.table = settings, table
        # The ranks a tp request runs on: the running group's (started from the page at any degree),
        # else the one it would start with.
        self.tp_degree = tp_degree or (lambda: settings.tp_degree)
        self.geometry: memory.Geometry | None = None  # read from the model folder once it is known
        self.cpu_load = None  # backend.hardware.load.CpuLoad, once the device is known: the load now

    @staticmethod
    def exact_shapes(device) -> bool:
        """Every new (height, width) compiles on ``device``, graphs aside (Neuron's eager ops)."""
        return device is not None and device.eager_compiles

    def compiles_here(self, device, mode: str) -> bool:
        return self.exact_shapes(device) or self.settings.runs_as(mode) in cs.COMPILED_MODES

    def decide(self, device, mode: str, shape: Shape, steps: int | None, locked: bool,
               places: list[str] | None = None) -> "Decision":
        """The prediction for a run at (mode, shape) in ``places``, its ``refused`` saying why it may not start."""
        backend = device.info.compile_backend if device is not None else None
        out = self.table.predict(mode, shape, steps or self.settings.steps, self.compiles_here(device, mode),
                                 self.exact_shapes(device), places,
                                 prior=PRIOR_COMPILE_SECONDS.get(backend, {}).get(self.settings.runs_as(mode)),
                                 load=self.cpu_load.now if self.cpu_load is not None else None)
        refusal = self._refusal(mode, shape, out["will_compile"], locked, places,
                                steps_note=out["note"] if out["state"] == cs.WARM else None)
        needs = self.memory_plan(device, mode, shape)
        if needs is not None:
            out["memory"] = needs.to_json()
            refusal = refusal or self._too_large(device, mode, shape, needs)
        out["refused"] = str(refusal) if refusal else None
        return Decision(out, refusal)

    def memory_plan(self, device, mode: str, shape: Shape) -> memory.Plan | None:
        """What (mode, shape) needs of each NeuronCore it runs on (None off Neuron, or unread)."""
        if self.geometry is None or device is None or device.kind != "neuron":
            return None
        return memory.plan(self.geometry, shape, compiled=self.settings.runs_as(mode) in cs.COMPILED_MODES,
                           dtype=device.info.dtype, degree=self.tp_degree() if mode == "tp" else 1,
                           hbm=device.hbm_bytes())

    def _too_large(self, device, mode: str, shape: Shape, needs: memory.Plan) -> DoesNotFit | None:
        if needs.fits:
            return None
        gib = memory.GIB
        phase = needs.peak_phase
        slow = [a for a in needs.attentions if a["phase"] == phase and not a["fast"]]
        held = f"{needs.phases[phase] / gib:.1f} GiB while {phase}" + "".join(
            f"; {a['name']}: slow attention, {a['score_bytes'] / gib:.1f} GiB of scores ({a['why']})" for a in slow)
        fixes = []
        if shape.refs:
            fixes.append("fewer or smaller references")
        if needs.slow() is not None:  # a fast-attention size that would also fit, if one is near
            near = next((size for size in memory.fast_sizes(shape, self.settings.max_size,
                                                            text_tokens=self.geometry.text_tokens)
                         if self.memory_plan(device, mode, size.with_inputs(shape.count, shape.refs)).fits), None)
            if near is not None:
                fixes.append(f"a fast-attention size such as {near}")
        if phase == "decode" or not fixes:
            fixes.append("a smaller size")
        if mode != "tp":
            tp = self.memory_plan(device, "tp", shape)
            if tp is not None and tp.fits:
                fixes.append(f"tensor-parallel mode (each of {self.tp_degree()} ranks holds its share)")
        return DoesNotFit(f"{shape} in {mode} mode needs about {needs.total / gib:.1f} GiB of one NeuronCore's "
                          f"{needs.hbm / gib:.1f} GiB ({needs.weights / gib:.1f} GiB of weights, {held}); "
                          f"try {' or '.join(fixes)}")

    def _refusal(self, mode: str, shape: Shape, will_compile: bool, locked: bool,
                 places: list[str] | None, steps_note: str | None = None) -> StudioError | None:
        if not will_compile:
            return None
        if locked and steps_note:  # a warm size at a step count it has not run at (Neuron)
            return ShapeLocked(f"{shape} in {mode} mode is {steps_note}, and the app is locked to warm "
                               "shapes; use a step count it is warm at, or unlock it")
        if locked:
            warm_shapes = self.table.warm_shapes(mode, places)
            warm = ", ".join(str(s) for s in warm_shapes) or "none"
            nearest = cs.nearest_signature(shape, warm_shapes) if warm_shapes else None
            return ShapeLocked(f"{shape} is not warm in {mode} mode and the app is locked to warm shapes "
                               f"(warm: {warm}{f'; nearest: {nearest}' if nearest else ''}); pick a warm one, "
                               "or the operator unlocks the app or warms it")
        if mode in cs.COMPILED_MODES:
            graphs = self.table.graph_keys(mode, places)
            if shape.graph_key not in graphs and len(graphs) >= self.settings.max_compiled_shapes:
                return ShapeLimitReached(
                    f"{mode} mode already holds {len(graphs)} compiled shapes, the limit "
                    f"(--max-compiled-shapes {self.settings.max_compiled_shapes}); use a warm shape, "
                    "raise the limit, or restart to drop old graphs")
        return None


@dataclasses.dataclass(frozen=True)
class Decision:
    prediction: dict[str, Any]
    refusal: StudioError | None

    def enforce(self) -> None:
        if self.refusal is not None:
            raise self.refusal


class PlaceBook:
    """The compile table as the engines read and report to it (``backend.engines.base.PlaceBook``)."""

    def __init__(self, admission: Admission, device, capacity_changed: Callable[[], None]):
        self._admission, self._table, self._device = admission, admission.table, device
        self.capacity_changed = capacity_changed

    def warm_places(self, mode: str, shape: Shape) -> set[str]:
        return self._table.warm_places(mode, shape)

    def warm_by_place(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for row in self._table.snapshot():
            for place in row.get("warm_at", ()):
                found.setdefault(place, []).append(f"{row['mode']} {row['shape']}")
        return found

    def compiles_here(self, mode: str) -> bool:
        return self._admission.compiles_here(self._device, mode)

    def lost_place(self, place: str) -> None:
        self._table.forget_place(place)

    def warmed(self, place: str, mode: str, signature: str, counts: dict[str, Any]) -> None:
        self._table.finish(mode, parse_signature(signature), compiles=int(counts.get("compiles") or 0),
                           compile_seconds=float(counts.get("compile_seconds") or 0.0), seconds=None,
                           neff_compiles=int(counts.get("neff_compiles") or 0), place=place)

    def lost_mode(self, mode: str) -> None:
        self._table.forget(mode)
