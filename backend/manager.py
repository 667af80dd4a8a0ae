"""The manager: the one door through which the UI, the CLI and the tests reach the device.

Importing this module does not import torch: the device layer and the engine load in ``start``
(in the background for the web app), so the page is served before the model stack has loaded.

It owns the active engine, validates requests up front, serialises device work, reports progress,
cancels cooperatively, keeps the per (mode, shape) compile table from measured compile events,
refuses shapes past the recompile limit or outside the warm set when locked, and publishes a
JSON-able status snapshot.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from backend import compile_state as cs
from backend.admission import Admission
from backend.errors import (BackendBusy, BackendNotReady, GenerationCancelled, GenerationFailed, InvalidRequest,
                            NotAllowed, StudioError)
from backend.records import GenerationRequest, GenerationResult, ProgressEvent
from backend.roles import LOCAL_OPERATOR, Caller
from backend.settings import MODES, TP_MODE, Settings
from backend.shapes import Shape
from backend.validation import validate_request
from backend.warmup import Warmups

if TYPE_CHECKING:
    from backend.device import Device

log = logging.getLogger(__name__)
_KEEP_RECORDS = 1000

ProgressFn = Callable[[ProgressEvent], None]


class Manager:
    def __init__(self, settings: Settings, engine_factory: Callable[[Device, str], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self._engine_factory = engine_factory
        self._clock = clock
        self.table = cs.CompileTable(clock)
        self.admission = Admission(settings, self.table)
        self.device: Device | None = None
        self.engine = None
        self.model_label: str | None = None
        self.state = "idle"  # idle | loading | warming | ready | failed
        self.load_error: str | None = None
        self.last_error: str | None = None
        self.warm_only = settings.warm_only
        self.records: list[GenerationResult] = []
        self._device_lock = threading.Lock()  # one generation on the device at a time
        self._state_lock = threading.Lock()
        self._cancel = threading.Event()
        self._current: dict[str, Any] | None = None
        self._ready = threading.Event()
        self._loader: threading.Thread | None = None
        self._warmups = Warmups(self)
        self.model_path: str | None = None
        self._count_tokens: Callable[[str], int] | None = None  # set once the model's tokenizer loads
        self.tp = None  # TPWorkerGroup, when tensor-parallel mode has been used
        self.bundle: dict[str, Any] | None = None  # what --cache-from imported and warmed
        self._tp_lock = threading.Lock()

    # lifecycle ---------------------------------------------------------------------------------
    def start(self, background: bool = False) -> None:
        """Load the model (and prewarm shapes from settings). In the background, errors go to status."""
        if background:
            self._loader = threading.Thread(target=self._start_logged, name="model-loader", daemon=True)
            self._loader.start()
        else:
            self._start()

    def _start_logged(self) -> None:
        try:
            self._start()
        except Exception:  # noqa: BLE001 - the status carries the message; the log keeps the trace
            log.exception("model load failed: %s", self.load_error)

    def _start(self) -> None:
        self.state = "loading"
        try:
            from backend import device_env

            # Before the device layer loads torch (and TorchNeuron): this process's own NeuronCores.
            device_env.claim_neuron_cores(self.settings.neuron_cores)
            from backend.device import Device, resolve_device
            from backend.model_source import prompt_token_counter, resolve_model

            info = resolve_device(self.settings)
            self.device = Device(info, self.settings.max_compiled_shapes, self.settings.neuron_instance_cores)
            self.model_path, self.model_label = resolve_model(self.settings.model, self.settings.cache_dir)
            self._count_tokens = prompt_token_counter(self.model_path)
            bundled = self._import_at_start() if self.settings.cache_from else None
            if self.settings.mode == TP_MODE:
                # The app process keeps off the device; the in-process engine loads on first use.
                self.start_tp(wait=True)
                if self.tp.state != "ready":
                    raise BackendNotReady(f"the tensor-parallel group did not start: {self.tp.error}")
            else:
                self._load_engine()
        except Exception as exc:
            self.state = "failed"
            self.load_error = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
            self.last_error = self.load_error
            self._ready.set()
            raise
        self.state = "ready"
        self._ready.set()
        if bundled is not None:
            self.state = "warming"
            try:
                self.warm_from_bundle(bundled)
            except StudioError as exc:
                self.last_error = f"warming the bundle's shapes: {exc}"
                log.error("%s", self.last_error)
            finally:
                self.state = "ready"
        if self.settings.prewarm:
            self.state = "warming"
            try:
                self.warmup(self.settings.prewarm, self.settings.mode)
            except StudioError as exc:  # a shape that fails to warm leaves the app usable
                self.last_error = f"prewarm: {exc}"
                log.error("%s", self.last_error)
            finally:
                self.state = "ready"

    # warm-start bundles ----------------------------------------------------------------------
    def bundle_manifest(self, entries: list[dict[str, Any]] | None = None):
        """This install's manifest fields (``backend.bundles``): what a bundle must match to apply."""
        from backend import bundles

        if self.device is None or self.model_path is None:
            raise BackendNotReady("the device is not ready yet")
        return bundles.describe_install(self.device, self.settings, self.model_path, self.model_label or "",
                                        entries)

    def export_bundle(self, path, pairs: Iterable[tuple[str, Shape]] | None = None, *,
                      caller: Caller = LOCAL_OPERATOR):
        """Write a bundle of the compile caches that warms ``pairs`` ((mode, shape); None: every warm
        in-process shape). Each pair runs first if it is not warm yet. Returns the manifest."""
        from backend import bundles
        from backend.settings import IN_PROCESS_MODES

        caller.require_operator("Exporting a warm-start bundle")
        if pairs is None:
            pairs = [(r["mode"], Shape(r["height"], r["width"])) for r in self.table.snapshot()
                     if r["state"] == "warm" and r["mode"] in IN_PROCESS_MODES]
        pairs = list(dict.fromkeys(pairs))
        if not pairs:
            raise InvalidRequest("shapes", "no warm shape to export: warm some first (System tab) or name them")
        for mode in dict.fromkeys(m for m, _s in pairs):
            cold = [s for m, s in pairs if m == mode and self.table.state(m, s) != "warm"]
            if cold:
                self.warmup(cold, mode)
        rows = {(r["mode"], r["shape"]): r for r in self.table.snapshot()}
        entries = []
        for mode, shape in pairs:
            row = rows.get((mode, str(shape))) or {}
            seconds = row.get("bundle_compile_seconds") or row.get("compile_seconds")
            entries.append({"mode": mode, "shape": str(shape), "compile_seconds": seconds})
        with self._device_lock:
            return bundles.export(path, self.bundle_manifest(entries), self.device)

    def import_bundle(self, path, *, caller: Caller = LOCAL_OPERATOR) -> dict[str, Any]:
        """Check a bundle against this install and put its files in the compile caches (nothing on a
        mismatch: ``bundles.BundleRefused`` names the field). Returns the manifest and counts."""
        from backend import bundles

        caller.require_operator("Importing a warm-start bundle")
        with self._device_lock:
            return bundles.import_bundle(path, self.device, self.bundle_manifest())

    def _import_at_start(self):
        result = self.import_bundle(self.settings.cache_from)
        log.info("imported %s: %d files (%d already there)", self.settings.cache_from, result["written"],
                 result["already_there"])
        return result["manifest"]

    def warm_from_bundle(self, manifest) -> None:
        """Run a bundle's shapes once (each mode the engines here serve), so they are warm and the
        table says their compile came from the bundle."""
        from backend.shapes import parse_shape

        by_mode: dict[str, list[Shape]] = {}
        for entry in manifest.entries:
            if entry.get("mode") in self.modes:
                by_mode.setdefault(entry["mode"], []).append(parse_shape(str(entry["shape"])))
        from backend.device import diff_counters

        before = self.device.compile_snapshot()
        for mode, shapes in by_mode.items():
            if mode == TP_MODE and (self.tp is None or self.tp.state != "ready"):
                continue
            self.warmup(shapes, mode)
        done = diff_counters(before, self.device.compile_snapshot())
        # What the warm pass still compiled afresh: inductor graphs that missed its cache (CPU/CUDA),
        # NEFFs the Neuron compiler built (Neuron); dynamo traces every graph either way.
        self.bundle = {"source": str(self.settings.cache_from), "model": manifest.model, "entries": manifest.entries,
                       "graphs_traced": int(done.get("graphs", 0)), "fxgraph_hits": int(done.get("fxgraph_hits", 0)),
                       "fresh_compiles": int(done.get("fxgraph_misses", 0) + done.get("neff_compiles", 0)),
                       "neff_disk_hits": int(done.get("neff_disk_hits", 0))}
        for entry in manifest.entries:
            if entry.get("mode") in by_mode:
                self.table.mark_bundled(entry["mode"], parse_shape(str(entry["shape"])), entry.get("compile_seconds"))

    def _load_engine(self) -> None:
        from backend.engine import InProcessEngine

        # On Neuron this claims only the app's own cores (backend.core_plan): never the group's.
        engine = (self._engine_factory or InProcessEngine)(self.device, self.model_path)
        engine.load()
        self.engine = engine

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout) and self.state in ("ready", "warming")

    def close(self, wait: float | None = None) -> bool:
        """Cancel the running generation, stop the worker group, release the engine. A generation
        stops at its next step boundary, but a compile cannot be interrupted: ``wait`` bounds how
        long to wait for it (None: as long as it takes). False when it was still running."""
        self._cancel.set()
        if self.tp is not None:
            self.tp.close()
        if not self._device_lock.acquire(timeout=-1 if wait is None else wait):
            log.warning("a generation is still running (a compile cannot be interrupted); not waiting for it")
            return False
        try:
            if self.engine is not None:
                self.engine.close()
            self.engine = None
            self.state = "idle"
        finally:
            self._device_lock.release()
        return True

    # tensor parallel ---------------------------------------------------------------------------
    def start_tp(self, degree: int | None = None, wait: bool = False, *,
                 caller: Caller = LOCAL_OPERATOR) -> dict[str, Any]:
        """Launch the tensor-parallel engine (replacing one of another degree). Returns its status.
        The operator's (``caller``).

        The group checks the degree (and on Neuron its cores) before anything starts."""
        from backend.tp.group import STARTING, TPWorkerGroup

        caller.require_operator("Starting the tensor-parallel group")
        if self.device is None or self.model_path is None:
            raise BackendNotReady("the device is not ready yet")
        with self._tp_lock:
            group = self.tp
            if group is not None and group.degree == (degree or self.settings.tp_degree) \
                    and group.state in STARTING + ("ready",):
                running = group
            else:
                running = TPWorkerGroup(self.settings, self.model_path, self.device, degree)
                if group is not None:
                    group.close()
                self.tp = running
                self.table.forget(TP_MODE)  # a new group has none of the old one's graphs
                running.start()
        if wait:
            running.wait_ready(self.settings.tp_start_timeout)
        return running.describe()

    def _restart_tp(self, group) -> None:
        """The ranks ended themselves after a failed request: start a new group of the same degree
        in the background once the old one is down (its requests run in process meanwhile)."""
        def restart() -> None:
            deadline = time.monotonic() + 30
            while group.state not in ("dead", "stopped") and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.tp is group and group.state == "dead":
                try:
                    self.start_tp(group.degree)
                except StudioError as exc:
                    self.last_error = f"restarting the tensor-parallel group: {exc}"

        threading.Thread(target=restart, name="tp-restart", daemon=True).start()

    def tp_logs(self, lines: int = 20, *, caller: Caller = LOCAL_OPERATOR) -> dict[str, str]:
        """The tail of each rank's log (and torchrun's), read now: only when someone looks at them
        (the operator: logs carry paths and the environment's traces)."""
        caller.require_operator("Reading the rank logs")
        group = self.tp
        return group.rank_logs(lines) if group is not None else {}

    def stop_tp(self, *, caller: Caller = LOCAL_OPERATOR) -> None:
        """Stop the worker group (no process of it survives). The operator's."""
        caller.require_operator("Stopping the tensor-parallel group")
        with self._tp_lock:
            if self.tp is not None:
                self.tp.stop()

    @property
    def modes(self) -> tuple[str, ...]:
        return MODES

    # validation --------------------------------------------------------------------------------
    def validate(self, prompt: Any, height: Any, width: Any, steps: Any = None, guidance: Any = None,
                 seed: Any = None, mode: Any = None) -> GenerationRequest:
        """Turn raw inputs into a GenerationRequest, or raise InvalidRequest naming the field."""
        return validate_request(self.settings, self.modes, prompt, height, width, steps, guidance, seed, mode,
                                count_tokens=self._count_tokens)

    # admission ---------------------------------------------------------------------------------
    def predict(self, mode: str, shape: Shape, steps: int | None = None) -> dict[str, Any]:
        """What a run at (mode, shape) will cost now, including whether it would be refused."""
        return self.admission.predict(self.device, mode, shape, steps, self.warm_only)

    # generation --------------------------------------------------------------------------------
    def generate(self, request: GenerationRequest | dict[str, Any], progress: ProgressFn | None = None,
                 _warming: bool = False, owner: str | None = None, still_wanted: Callable[[], bool] | None = None):
        """Run one request; returns (PIL image, GenerationResult). Raises StudioError subclasses.

        ``owner``: the page session it runs for (a viewer may stop only its own run). ``still_wanted``:
        False once nobody waits for the image any more (the page closed); the run stops at its next
        step as if cancelled."""
        if isinstance(request, dict):
            request = self.validate(**request)
        if self.state == "failed":
            raise BackendNotReady(f"the model failed to load: {self.load_error}")
        if self.device is None or self.model_path is None or self.state == "loading":
            raise BackendNotReady("the model is still loading; try again in a moment")
        shape = request.shape
        with self._device_lock:
            engine, run_request, degraded = self._route(request)
            requested_mode, request = request.mode, run_request
            prediction = self.admission.predict(self.device, request.mode, shape, request.steps, False)
            self.admission.check(prediction, locked=self.warm_only and not _warming)
            self._cancel.clear()
            job = {"mode": request.mode, "shape": str(shape), "phase": "starting", "step": 0, "owner": owner,
                   "steps": request.steps, "started": self._clock()}
            with self._state_lock:
                self._current = job

            def on_progress(event: ProgressEvent) -> None:
                job["phase"], job["step"] = event.phase, event.step
                if event.phase == "compiling":
                    self.table.mark_compiling(request.mode, shape)
                if progress is not None:
                    progress(event)

            started_at = time.time()
            try:
                def should_stop() -> bool:
                    return self._cancel.is_set() or (still_wanted is not None and not still_wanted())

                out = engine.run(request, on_progress, should_stop,
                                 forbid_compile=self.warm_only and not _warming)
            except Exception as exc:
                # On Neuron the components a cancel skipped (the eager VAE) compile too: a shape is
                # warm there only after a whole run, so a cancelled run keeps no compile.
                self.table.failed_run(request.mode, shape, exc, keep_compiles=not self.admission.exact_shapes(self.device))
                if not isinstance(exc, GenerationCancelled):
                    self.last_error = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
                if getattr(exc, "group_ending", False) and engine is self.tp:
                    self._restart_tp(engine)
                if isinstance(exc, StudioError):
                    raise
                log.exception("engine error")  # an engine broke its contract: log the trace, answer plainly
                raise GenerationFailed(self.last_error) from exc
            finally:
                with self._state_lock:
                    self._current = None
            self.table.finish(request.mode, shape, compiles=out.compiles, neff_compiles=out.neff_compiles,
                              compile_seconds=out.compile_seconds, seconds=out.seconds,
                              encode=out.encode, denoise=out.denoise, decode=out.decode,
                              steps=request.steps)
        result = GenerationResult(
            prompt=request.prompt, width=request.width, height=request.height, mode=request.mode,
            steps=request.steps, guidance=request.guidance, seed=request.seed,
            device=self.device.kind, model=self.model_label or "", compiled=bool(out.compiles or out.neff_compiles),
            compiles=out.compiles, compile_seconds=out.compile_seconds, seconds=out.seconds,
            encode=out.encode, denoise=out.denoise, decode=out.decode, neff_compiles=out.neff_compiles,
            started_at=started_at, world_size=out.world_size,
            requested_mode=requested_mode if degraded else None, degraded=degraded,
        )
        self.records = (self.records + [result])[-_KEEP_RECORDS:]
        return out.image, result

    def _route(self, request: GenerationRequest):
        """The engine for a request's mode: (engine, the request it runs, why it is degraded or None).

        While the tensor-parallel engine is down or restarting, its requests run in process the way
        each rank would run (``--tp-compile``), and the record says so."""
        if request.mode != TP_MODE:
            if self.engine is None:
                self._load_engine()  # first in-process request after starting in tensor-parallel mode
            return self.engine, request, None
        if self.tp is None:
            raise BackendNotReady("the tensor-parallel group is not running; start it (the Start button "
                                  "beside the mode, the System tab, or --mode tp at launch)")
        degraded = self._degraded()
        if not degraded:
            return self.tp, request, None
        if self.engine is None:
            self._load_engine()
        return self.engine, dataclasses.replace(request, mode=self.settings.tp_compile), degraded

    def cancel(self, *, caller: Caller = LOCAL_OPERATOR) -> bool:
        """Ask the running generation to stop at its next step. True if one was running. A viewer
        may stop only its own run (``owner`` of ``generate`` is its page session)."""
        with self._state_lock:
            current = self._current
            if current is not None and not caller.is_operator and current.get("owner") != caller.session:
                raise NotAllowed("the running generation is another viewer's; you can stop only your own")
            if current is not None or caller.is_operator:
                self._cancel.set()
        return current is not None

    def warmup(self, shapes: Iterable[Shape], mode: str | None = None,
               progress: Callable[[int, int, Shape], None] | None = None) -> list[GenerationResult]:
        """Compile (mode, shape) for each shape and measure one steady run; bypasses the warm-only lock."""
        return self._warmups.run(list(shapes), mode or self.settings.mode, progress)

    def start_warmup(self, shapes: Iterable[Shape], mode: str | None = None, *,
                     caller: Caller = LOCAL_OPERATOR) -> None:
        """Warm shapes in a background thread; ``status()["warmup"]`` shows its progress. The operator's."""
        caller.require_operator("Warming up shapes")
        self._warmups.start(list(shapes), mode or self.settings.mode)

    def compare(self, request: GenerationRequest, modes: Iterable[str],
                progress: ProgressFn | None = None) -> list[dict[str, Any]]:
        """Run one request through several modes; each entry has image, result, and the max pixel
        difference (0-255) from the first mode's image."""
        import numpy as np

        modes = list(dict.fromkeys(modes))
        if not 2 <= len(modes) <= 3:
            raise InvalidRequest("modes", f"choose two or three modes to compare, got {len(modes)}")
        entries, first = [], None
        for mode in modes:
            if mode not in self.modes:
                raise InvalidRequest("mode", f"must be one of {', '.join(self.modes)}, got {mode!r}")
            image, result = self.generate(dataclasses.replace(request, mode=mode), progress)
            pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
            first = pixels if first is None else first
            entries.append({"mode": mode, "image": image, "result": result,
                            "max_diff": int(np.abs(pixels - first).max())})
        return entries

    def save_image(self, image, result: GenerationResult) -> str:
        """Write the PNG (with its parameters) to the output folder; sets and returns result.path.
        The folder keeps the app's newest ``--keep-outputs`` images (``backend.outputs``)."""
        from backend.outputs import prune
        from backend.pngmeta import save_png, unique_output_path

        result.path = str(save_png(image, result, unique_output_path(self.settings.output_dir, result)).resolve())
        prune(self.settings.output_dir, self.settings.keep_outputs)
        return result.path

    def clear_compile_cache(self, *, caller: Caller = LOCAL_OPERATOR) -> int:
        """Empty the on-disk compile caches between generations; returns bytes freed. Graphs already
        in memory stay warm; only later processes lose the head start. Refused while a
        tensor-parallel group runs: its ranks hold lock files in the local NEFF cache (and read the
        caches while they compile)."""
        caller.require_operator("Clearing the compile cache")
        if self.device is None:
            raise BackendNotReady("the device is not ready yet")
        from backend.tp.group import STARTING

        group = self.tp
        if group is not None and group.state in STARTING + ("ready", "stopping"):
            raise BackendBusy(
                f"the tensor-parallel group is {group.state}: its ranks hold lock files in the compile "
                f"cache and compile into it; stop the group first (System tab), then clear the cache")
        with self._device_lock:
            return self.device.clear_caches()

    def cache_plan(self, *, caller: Caller = LOCAL_OPERATOR) -> list[dict[str, Any]]:
        """What clearing the compile cache would remove (per folder: entries and bytes). The operator's."""
        caller.require_operator("Clearing the compile cache")
        if self.device is None:
            raise BackendNotReady("the device is not ready yet")
        return self.device.cache_plan()

    def set_warm_only(self, locked: bool, *, caller: Caller = LOCAL_OPERATOR) -> None:
        """Lock to warm shapes (or unlock). The operator's."""
        caller.require_operator("Locking to warm shapes")
        self.warm_only = bool(locked)

    def _degraded(self) -> str | None:
        """Why tensor-parallel requests are being served in process right now (None: they are not)."""
        group = self.tp
        if group is None or group.state not in ("dead", "launching", "loading", "warming"):
            return None
        why = f"the tensor-parallel group is {group.state}" + (f" ({group.error})" if group.state == "dead" else "")
        return f"degraded: {why}; tensor-parallel requests run in process ({self.settings.tp_compile}) meanwhile"

    # status ------------------------------------------------------------------------------------
    def _tp_status(self) -> dict[str, Any]:
        group = self.tp
        if group is None:
            return {"state": "stopped", "world_size": self.settings.tp_degree, "ranks": [], "error": None}
        return group.describe()

    def _core_plan_status(self) -> dict[str, Any] | None:
        plan = self.device.core_plan if self.device is not None else None
        if plan is None:
            return None
        from backend.model_source import transformer_heads

        group = self.tp
        degree = group.degree if group is not None else self.settings.tp_degree
        return plan.describe(degree, transformer_heads(self.model_path) if self.model_path else None)

    def status(self) -> dict[str, Any]:
        with self._state_lock:
            current = dict(self._current) if self._current else None
        if current:
            current["elapsed"] = round(self._clock() - current.pop("started"), 3)
            current.pop("owner", None)  # a page session is its own business, not the room's
        device = self.device
        return {
            "state": self.state,
            "model": {"spec": self.settings.model, "label": self.model_label},
            "device": vars(device.info) if device else None,
            "dtype": device.info.dtype if device else None,
            "default_mode": self.settings.mode,
            "modes": list(self.modes),
            "engine": self.engine.describe() if self.engine else None,
            "warm_only": self.warm_only,
            "max_compiled_shapes": self.settings.max_compiled_shapes,
            "busy": current,
            "shapes": self.table.snapshot(),
            "cache": device.cache_info() if device else None,
            "memory": device.memory() if device else None,
            "load_error": self.load_error,
            "last_error": self.last_error,
            "generations": len(self.records),
            "warmup": self._warmups.status(),
            "tp": self._tp_status(),
            "neuron_cores": self._core_plan_status(),
            "degraded": self._degraded(),
            "bundle": self.bundle,
        }
