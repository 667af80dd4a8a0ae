"""Per (mode, shape) compile state: cold, compiling, warm, failed — from measured compile events.

A shape becomes warm when a whole run at it finishes (on Neuron the text encoder and the VAE compile
NEFFs for a new shape too). Dynamo's graphs (``compiles``) and Neuron's NEFFs (``neff_compiles``) are
kept apart: every graph is also a NEFF. A shape not yet run that shares a warm graph (same batch and
token count) is said to "probably" share it — except where the device compiles per exact shape
(Neuron's eager ops).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import statistics
import threading
import time
import typing
from pathlib import Path
from typing import Any, Callable

from backend.errors import CompileFailure, GenerationCancelled
from backend.shapes import Shape


class CompileState(enum.StrEnum):
    COLD = "cold"
    COMPILING = "compiling"
    WARM = "warm"
    FAILED = "failed"


COLD, COMPILING, WARM, FAILED = CompileState
COMPILED_MODES = ("compiled", "regional")
# The notes a page says in its own language (ui/i18n: ``note_<key>``), here in English for /status.
NOTES = {"no_compile": "{mode} mode does not compile on this device",
         "shares_graph": "probably reuses the graph of {shape} (same batch and token count)"}
_STEADY_KEEP = 20


class Steady(typing.NamedTuple):
    """A run that compiled nothing, was not the first at its place and ran beside no other run."""

    seconds: float
    per_step: float | None  # denoise seconds per step
    overhead: float  # encode + decode seconds
    load: float | None  # the share of the CPU other work took meanwhile (backend.hardware.load)


def low(values: list[float]) -> float:
    """The lower quartile (the least of up to four): a run is slowed by other work, never sped up."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 4]


@dataclasses.dataclass
class ShapeRecord:
    mode: str
    shape: Shape
    state: str = COLD
    compile_seconds: float | None = None  # measured during the run that made it warm
    compiles: int = 0  # torch.compile graphs built for it (0: it shared an existing graph)
    neff_compiles: int = 0  # Neuron only: NEFFs built for it (graphs and eager ops alike)
    compiling_since: float | None = None
    runs: int = 0
    error: str | None = None
    steady: list[Steady] = dataclasses.field(default_factory=list)  # the latest steady runs
    bundle_compile_seconds: float | None = None  # warmed from a bundle: its compile seconds, made elsewhere
    warm_at: set[str] = dataclasses.field(default_factory=set)  # the places (engines' processes) it is warm in
    warm_steps: set[int] = dataclasses.field(default_factory=set)  # step counts that ran to the end here


class CompileHistory:
    """The compile seconds this install measured, per (mode, signature): this run's, a bundle's (made
    on a machine of the same kind) and, once ``open``, earlier runs' from a file in the app's cache
    folder, kept for the same device, compile backend and model only. A cold shape's compile is
    estimated from it before this run has compiled anything."""

    KEEP = 200  # entries per file; the oldest go
    MAX_BYTES = 256 * 1024  # a longer file is not ours to read
    NEAREST = 5  # an estimate is the median of this many compiles nearest in token count

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: list[dict[str, Any]] = []  # {"mode", "tokens", "seconds"}
        self._path: Path | None = None
        self._key = ""

    def open(self, path: Path, key: str) -> None:
        """Read the entries measured for ``key`` at ``path`` (an unreadable or foreign file: none)."""
        entries = [e for e in self._read(path).get(key, []) if isinstance(e, dict) and isinstance(e.get("mode"), str)
                   and isinstance(e.get("tokens"), int) and isinstance(e.get("seconds"), (int, float))
                   and 0 < e["seconds"] < 1e6 and e["tokens"] > 0]
        with self._lock:
            self._path, self._key = path, key
            self._entries = entries[-self.KEEP:]

    def add(self, mode: str, shape: Shape, seconds: float | None, keep: bool = True) -> None:
        """A compile of ``seconds`` at (mode, shape); ``keep``: written to the file (a bundle's are not)."""
        if not seconds or seconds <= 0:
            return
        with self._lock:
            self._entries = (self._entries + [{"mode": mode, "tokens": shape.tokens * shape.count,
                                               "seconds": round(seconds, 3)}])[-self.KEEP:]
            if keep and self._path is not None:
                self._save()

    def _read(self, path: Path) -> dict[str, Any]:
        """The file's object (an unreadable, overlong or foreign file: empty)."""
        try:
            data = json.loads(path.read_text()) if path.stat().st_size <= self.MAX_BYTES else {}
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self) -> None:
        others = self._read(self._path)
        others[self._key] = self._entries
        tmp = self._path.with_name(f".{self._path.name}.{os.getpid()}.tmp")
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(others))
            os.replace(tmp, self._path)
        except OSError:  # a read-only cache folder: the estimates still learn in memory
            tmp.unlink(missing_ok=True)

    def estimate(self, mode: str, shape: Shape) -> tuple[float, int] | None:
        """(median seconds of the compiles in ``mode`` nearest in token count, how many), or None."""
        tokens = shape.tokens * shape.count
        with self._lock:
            past = [e for e in self._entries if e["mode"] == mode]
        if not past:
            return None
        nearest = sorted(past, key=lambda e: abs(math.log(e["tokens"] / tokens)))[:self.NEAREST]
        return statistics.median(e["seconds"] for e in nearest), len(nearest)


class CompileTable:
    """Thread-safe table of ShapeRecords. ``clock`` is injectable so tests need no sleeps."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[tuple[str, Shape], ShapeRecord] = {}
        self.history = CompileHistory()
        # On a CPU a run's seconds scale with the CPU it got: a steady run's figures are read as on a
        # quiet machine (times the share other work left it), and an estimate as under the load now.
        self.cpu_bound = False

    def _get(self, mode: str, shape: Shape) -> ShapeRecord:
        return self._records.setdefault((mode, shape), ShapeRecord(mode, shape))

    def state(self, mode: str, shape: Shape) -> str:
        with self._lock:
            rec = self._records.get((mode, shape))
            return rec.state if rec else COLD

    def mark_compiling(self, mode: str, shape: Shape) -> None:
        with self._lock:
            rec = self._get(mode, shape)
            rec.state, rec.compiling_since, rec.error = COMPILING, self._clock(), None

    def record(self, result) -> None:
        """``result.steady`` says whether its seconds were kept as a steady figure."""
        result.steady = self.finish(
            result.mode, result.shape, compiles=result.compiles, compile_seconds=result.compile_seconds,
            seconds=result.seconds, encode=result.encode, denoise=result.denoise, decode=result.decode,
            steps=result.steps, neff_compiles=result.neff_compiles, place=result.place,
            steady=not result.overlapped, load=result.load)

    def finish(self, mode: str, shape: Shape, *, compiles: int, compile_seconds: float,
               seconds: float | None, encode: float = 0.0, denoise: float = 0.0,
               decode: float = 0.0, steps: int = 0, neff_compiles: int = 0, place: str = "app",
               steady: bool = True, load: float | None = None) -> bool:
        """A run that completed (``seconds`` None: cancelled after its compile) in ``place`` (``app``,
        ``tp``, ``replica 1``). ``steady`` False: it overlapped another run, so it is kept out of the
        steady figures, as is the first run at a place (its first-time costs); ``load``: the share of
        the CPU other work took meanwhile."""
        if compiles or neff_compiles:  # the history writes its file: not under the table's lock
            self.history.add(mode, shape, compile_seconds)
        with self._lock:
            rec = self._get(mode, shape)
            was_warm = place in rec.warm_at
            rec.state, rec.compiling_since, rec.error = WARM, None, None
            rec.warm_at.add(place)
            rec.bundle_compile_seconds = None  # it has run here now
            if steps:
                rec.warm_steps.add(steps)
            if compiles or neff_compiles or not was_warm:
                rec.compiles, rec.compile_seconds, rec.neff_compiles = compiles, compile_seconds, neff_compiles
            if seconds is None:
                return False
            rec.runs += 1
            steady = compiles == 0 and neff_compiles == 0 and steady and was_warm
            if steady:
                run = Steady(seconds, denoise / steps if steps else None, encode + decode, load)
                rec.steady = (rec.steady + [run])[-_STEADY_KEEP:]
            return steady

    def failed_run(self, mode: str, shape: Shape, exc: BaseException, keep_compiles: bool = True,
                   place: str = "app") -> None:
        """A run that raised: a compiler error fails the shape; a cancel after a finished compile keeps
        it when ``keep_compiles``; anything else returns a 'compiling' shape to what it was."""
        if isinstance(exc, CompileFailure):
            self.fail(mode, shape, str(exc))
        elif isinstance(exc, GenerationCancelled) and exc.compiles and keep_compiles:
            self.finish(mode, shape, compiles=exc.compiles, compile_seconds=exc.compile_seconds or 0.0, seconds=None,
                        neff_compiles=exc.neff_compiles or 0, place=place)
        else:
            with self._lock:
                rec = self._records.get((mode, shape))
                if rec and rec.state == COMPILING:
                    rec.state, rec.compiling_since = (WARM if rec.warm_at else COLD), None

    def fail(self, mode: str, shape: Shape, error: str) -> None:
        with self._lock:
            rec = self._get(mode, shape)
            rec.state, rec.compiling_since, rec.error = FAILED, None, error
            rec.warm_at.clear()

    def forget_place(self, place: str) -> None:
        """A process that held graphs is gone (a replica restarted)."""
        with self._lock:
            for rec in self._records.values():
                rec.warm_at.discard(place)
                if rec.state == WARM and not rec.warm_at:
                    rec.state = COLD

    def mark_bundled(self, mode: str, shape: Shape, compile_seconds: float | None) -> None:
        """A warm shape's compile came from a bundle: its seconds are the bundle's until it runs here."""
        self.history.add(mode, shape, compile_seconds, keep=False)
        with self._lock:
            rec = self._records.get((mode, shape))
            if rec is not None and rec.state == WARM:
                rec.bundle_compile_seconds = compile_seconds

    def forget(self, mode: str) -> None:
        """Drop ``mode``'s records (its worker group was replaced). A failure stays: the same compiler
        fails the same graph in the new group too."""
        with self._lock:
            for key in [k for k, rec in self._records.items() if k[0] == mode and rec.state != FAILED]:
                del self._records[key]

    @staticmethod
    def _warm(rec: ShapeRecord, places: list[str] | None) -> bool:
        return rec.state == WARM and (places is None or bool(rec.warm_at.intersection(places)))

    def graph_keys(self, mode: str, places: list[str] | None = None) -> set[tuple[int, int]]:
        """(batch, image tokens) warm in ``mode`` (in one of ``places``; None: anywhere)."""
        with self._lock:
            return {s.graph_key for (m, s), r in self._records.items() if m == mode and self._warm(r, places)}

    def _warm_signatures(self, mode: str, places: list[str] | None) -> list[Shape]:
        return sorted(s for (m, s), r in self._records.items() if m == mode and self._warm(r, places))

    def warm_shapes(self, mode: str, places: list[str] | None = None) -> list[Shape]:
        with self._lock:
            return self._warm_signatures(mode, places)

    def warm_places(self, mode: str, shape: Shape) -> set[str]:
        with self._lock:
            rec = self._records.get((mode, shape))
            return set(rec.warm_at) if rec and rec.state == WARM else set()

    def _estimate_into(self, out: dict[str, Any], mode: str, shape: Shape, prior: float | None) -> None:
        """From the compiles this install measured in ``mode`` (``CompileHistory``), else the prior."""
        seconds, count = self.history.estimate(mode, shape) or (prior, 0)  # a measured estimate counts one at least
        out.update(estimate_compile_seconds=seconds, estimate_compiles=count,
                   estimate_source="measured" if count else ("prior" if prior is not None else None))

    def _expect_into(self, out: dict[str, Any], rec: ShapeRecord | None, steps: int, load: float | None) -> None:
        """``quiet_seconds``: a run's seconds on a quiet machine, from the lower quartile of the steady
        runs; ``expected_seconds``: under ``load`` (the share of the CPU other work takes now, with this
        app idle). The scheduler shares the cores between the run's threads (as many as cores) and
        the other work's, so the run takes (1 + load) times as long; other work that fills the
        machine while the app idles yields half of it to a run (seen: 0.13 s quiet, 0.28 s at 97 %)."""
        quiet = self._quiet_seconds(rec, steps)
        load = load if self.cpu_bound else None
        out.update(quiet_seconds=quiet, load=load, expected_seconds=None if quiet is None
                   else quiet * (1.0 + load) if load else quiet)

    def _quiet_seconds(self, rec: ShapeRecord | None, steps: int) -> float | None:
        runs = [r for r in rec.steady if r.per_step is not None] if rec else []
        if not runs:
            return None
        overhead = low([self._quiet(r.overhead, r.load) for r in runs])
        return overhead + low([self._quiet(r.per_step, r.load) for r in runs]) * steps

    def _quiet(self, seconds: float, load: float | None) -> float:
        return seconds * (1.0 - load) if self.cpu_bound and load is not None else seconds

    def predict(self, mode: str, shape: Shape, steps: int, compiles_here: bool,
                exact_shapes: bool = False, places: list[str] | None = None,
                prior: float | None = None, load: float | None = None) -> dict[str, Any]:
        """What a run at (mode, shape) will cost, from what was measured so far. ``exact_shapes``: the
        device compiles per exact (height, width) (Neuron's eager ops); ``places``: the processes
        that may serve it (None: anywhere), ``warm_on`` [2, 4] being "warm on 2 of 4"; ``prior``:
        the compile seconds to expect before any was measured in this mode."""
        with self._lock:
            rec = self._records.get((mode, shape))
            state = rec.state if rec else COLD
            if state == WARM and not self._warm(rec, places):
                state = COLD  # warm elsewhere (in process, or on replicas since restarted)
            out: dict[str, Any] = {"mode": mode, "shape": str(shape), "state": state,
                                   "will_compile": False, "estimate_compile_seconds": None,
                                   "note": "", "warm_on": None, "estimate_source": None}
            if places is not None and len(places) > 1:
                out["warm_on"] = [len(rec.warm_at.intersection(places)) if rec else 0, len(places)]
            self._expect_into(out, rec, steps, load)
            if state == WARM and exact_shapes and steps and rec.warm_steps and steps not in rec.warm_steps:
                # On Neuron every eager op compiles per shape, and the scheduler's per-step tensors
                # (its sigmas, one per step plus one) change length with the step count: a warm size
                # at a new step count still compiles those ops.
                out["will_compile"] = True  # (no estimate: these ops' compiles are not measured apart)
                out["note"] = (f"warm at {', '.join(map(str, sorted(rec.warm_steps)))} steps; {steps} steps "
                               "compiles the scheduler's per-step ops first")
            elif state == WARM:
                out["note"] = "warm"
            elif state == COMPILING:
                out.update(will_compile=True, elapsed_seconds=self._clock() - rec.compiling_since)
                self._estimate_into(out, mode, shape, prior)
                out["note"] = "compiling now"
            elif not compiles_here:
                _note(out, "no_compile", mode=mode)
            else:
                sharing = [] if exact_shapes else [
                    s for (m, s), r in self._records.items()
                    if m == mode and self._warm(r, places) and s.graph_key == shape.graph_key]
                if sharing:
                    _note(out, "shares_graph", shape=str(sharing[0]))
                    self._expect_into(out, self._records[(mode, sharing[0])], steps, load)
                else:
                    out["will_compile"] = True
                    self._estimate_into(out, mode, shape, prior)
                    out["note"] = "will compile first" + (
                        f" (last error: {rec.error})" if state == FAILED and rec and rec.error else "")
            if out["will_compile"]:
                warm = self._warm_signatures(mode, places)
                out["nearest_warm"] = str(nearest_signature(shape, warm)) if warm else None
            return out

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            now = self._clock()
            records = sorted(self._records.items(), key=lambda kv: (kv[0][0], kv[0][1].pixels))
            return [{
                "mode": mode, "shape": str(shape), "width": shape.width, "height": shape.height,
                "tokens": shape.tokens, "state": rec.state, "compile_seconds": rec.compile_seconds,
                "compiles": rec.compiles, "neff_compiles": rec.neff_compiles,
                # The median of the runs that compiled nothing and overlapped no other run, and how many.
                "steady_seconds": statistics.median(r.seconds for r in rec.steady) if rec.steady else None,
                "steady_runs": len(rec.steady), "runs": rec.runs,
                # Read as on a quiet machine, and the median share other work took meanwhile.
                "steady_quiet_seconds": low([self._quiet(r.seconds, r.load) for r in rec.steady])
                if rec.steady else None,
                "steady_load": statistics.median(r.load for r in rec.steady if r.load is not None)
                if self.cpu_bound and any(r.load is not None for r in rec.steady) else None,
                "compiling_elapsed": now - rec.compiling_since if rec.compiling_since else None,
                "error": rec.error, "bundle_compile_seconds": rec.bundle_compile_seconds,
                "warm_at": sorted(rec.warm_at),
            } for (mode, shape), rec in records]


def nearest_signature(shape: Shape, warm: list[Shape]) -> Shape:
    """Of ``warm``, the nearest ``shape``: same batch, same references, then aspect (log scale), area."""
    return min(warm, key=lambda s: (s.count != shape.count, s.refs != shape.refs,
                                    round(abs(math.log(s.width / s.height) - math.log(shape.width / shape.height)), 6),
                                    abs(s.pixels - shape.pixels), str(s)))


def _note(out: dict[str, Any], key: str, **args: str) -> None:
    out.update(note=NOTES[key].format(**args), note_key=key, note_args=args)
