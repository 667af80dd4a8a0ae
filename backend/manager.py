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
from typing import Any, Callable, Iterable

from backend import compile_state as cs
from backend.errors import (BackendBusy, BackendNotReady, CompileFailure, GenerationCancelled, GenerationFailed,
                            InvalidRequest, ShapeLimitReached, ShapeLocked, StudioError)
from backend.records import GenerationRequest, GenerationResult, ProgressEvent
from backend.settings import MODES, TP_MODE, Settings
from backend.shapes import Shape
from backend.validation import validate_request

log = logging.getLogger(__name__)
WARMUP_PROMPT = "warm-up"
_KEEP_RECORDS = 1000

ProgressFn = Callable[[ProgressEvent], None]


class Manager:
    def __init__(self, settings: Settings, engine_factory: Callable[[Device, str], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self._engine_factory = engine_factory
        self._clock = clock
        self.table = cs.CompileTable(clock)
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
        self._warmup: dict[str, Any] = {}
        self.model_path: str | None = None
        self._count_tokens: Callable[[str], int] | None = None  # set once the model's tokenizer loads
        self.tp = None  # TPWorkerGroup, when tensor-parallel mode has been used
        self._tp_lock = threading.Lock()
        self.core_plan = None  # backend.core_plan.CorePlan, on Neuron

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
            app_cores = device_env.claim_neuron_cores(self.settings.neuron_cores)
            from backend.device import Device, resolve_device
            from backend.model_source import resolve_model

            info = resolve_device(self.settings)
            self.device = Device(info, self.settings.max_compiled_shapes)
            if info.kind == "neuron":
                from backend.core_plan import detect_instance_cores, make_plan

                instance = self.settings.neuron_instance_cores or detect_instance_cores()
                self.core_plan = make_plan(app_cores, instance)
            self.model_path, self.model_label = resolve_model(self.settings.model, self.settings.cache_dir)
            self._load_tokenizer()
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
        if self.settings.prewarm:
            self.state = "warming"
            try:
                self.warmup(self.settings.prewarm, self.settings.mode)
            except StudioError as exc:  # a shape that fails to warm leaves the app usable
                self.last_error = f"prewarm: {exc}"
                log.error("%s", self.last_error)
            finally:
                self.state = "ready"

    def _load_tokenizer(self) -> None:
        """The model's tokenizer, for checking prompts against the text encoder's limit up front."""
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.model_path, subfolder="tokenizer")

        def count(prompt: str) -> int:
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True, enable_thinking=False)
            return len(tokenizer(text)["input_ids"])

        self._count_tokens = count

    def _load_engine(self) -> None:
        from backend.engine import InProcessEngine

        # On Neuron this claims only the app's own cores (backend.core_plan): never the group's.
        engine = (self._engine_factory or InProcessEngine)(self.device, self.model_path)
        engine.load()
        self.engine = engine

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout) and self.state in ("ready", "warming")

    def close(self) -> None:
        self.cancel()
        if self.tp is not None:
            self.tp.close()
        with self._device_lock:
            if self.engine is not None:
                self.engine.close()
            self.engine = None
            self.state = "idle"

    # tensor parallel ---------------------------------------------------------------------------
    def start_tp(self, degree: int | None = None, wait: bool = False) -> dict[str, Any]:
        """Launch the torchrun worker group (replacing one of another degree). Returns its status."""
        from backend.model_source import transformer_heads
        from backend.tp_group import TPWorkerGroup

        if self.device is None:
            raise BackendNotReady("the device is not ready yet")
        degree = self.settings.tp_degree if degree is None else degree
        if isinstance(degree, bool) or not isinstance(degree, int) or not 1 <= degree <= 64:
            raise InvalidRequest("tp_degree", f"must be a whole number from 1 to 64, got {degree!r}")
        heads = transformer_heads(self.model_path)
        if heads % degree:
            divisors = [d for d in range(1, heads + 1) if heads % d == 0 and d <= 64]
            raise InvalidRequest("tp_degree", f"{degree} does not divide the model's {heads} attention heads; "
                                              f"use one of {', '.join(map(str, divisors))}")
        cores: list[int] = []
        if self.core_plan is not None:
            from backend.core_plan import CoresDoNotFit

            try:
                cores = self.core_plan.tp_cores(degree, heads)
            except CoresDoNotFit as exc:
                raise InvalidRequest("tp_degree", str(exc)) from None
        with self._tp_lock:
            group = self.tp
            if group is not None and group.degree == degree and group.state in (
                    "launching", "loading", "warming", "ready"):
                running = group
            else:
                if group is not None:
                    group.close()
                s = self.settings
                warm = [str(shape) for shape in s.prewarm] if s.mode == TP_MODE else []
                running = TPWorkerGroup(
                    model_path=self.model_path, device_kind=self.device.kind, dtype=self.device.info.dtype,
                    compile_backend=self.device.info.compile_backend, compile_mode=s.tp_compile, degree=degree,
                    cache_dir=str(s.cache_dir), warm=warm,
                    cores=cores, collective_timeout=s.tp_collective_timeout, min_size=s.min_size, max_size=s.max_size, max_steps=s.max_steps,
                    start_timeout=s.tp_start_timeout, stall_timeout=s.tp_stall_timeout,
                    torchrun_args=s.tp_torchrun_args)
                self.tp = running
                self.table.forget(TP_MODE)  # a new group has none of the old one's graphs
                running.start()
        if wait:
            running.wait_ready(self.settings.tp_start_timeout)
        return running.describe()

    def tp_logs(self, lines: int = 20) -> dict[str, str]:
        """The tail of each rank's log (and torchrun's), read now: only when someone looks at them."""
        group = self.tp
        return group.rank_logs(lines) if group is not None else {}

    def stop_tp(self) -> None:
        """Stop the worker group (no process of it survives)."""
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
        out = self.table.predict(mode, shape, steps or self.settings.steps, self._compiles_here(mode),
                                 self._exact_shapes())
        out["refused"] = None
        try:
            self._admit(mode, shape, out)
        except StudioError as exc:
            out["refused"] = str(exc)
        return out

    def _exact_shapes(self) -> bool:
        """Whether every new (height, width) compiles here, graphs aside (Neuron's eager ops do)."""
        return self.device is not None and self.device.eager_compiles

    def _compiles_here(self, mode: str) -> bool:
        """Whether a new shape in ``mode`` compiles on this device (Neuron compiles even eager ops)."""
        if self.device is not None and self.device.eager_compiles:
            return True
        how = self.settings.tp_compile if mode == TP_MODE else mode
        return how in cs.COMPILED_MODES

    def _admit(self, mode: str, shape: Shape, prediction: dict[str, Any], warming: bool = False) -> None:
        if not prediction["will_compile"]:
            return
        if self.warm_only and not warming:
            warm = ", ".join(str(s) for s in self.table.warm_shapes(mode)) or "none"
            raise ShapeLocked(f"{shape} is not warm in {mode} mode and the app is locked to warm shapes "
                              f"(warm: {warm}); unlock it or warm the shape first")
        if mode in cs.COMPILED_MODES:
            graphs = self.table.graph_tokens(mode)
            if shape.tokens not in graphs and len(graphs) >= self.settings.max_compiled_shapes:
                raise ShapeLimitReached(
                    f"{mode} mode already holds {len(graphs)} compiled shapes, the limit "
                    f"(--max-compiled-shapes {self.settings.max_compiled_shapes}); use a warm shape, "
                    "raise the limit, or restart to drop old graphs")

    # generation --------------------------------------------------------------------------------
    def generate(self, request: GenerationRequest | dict[str, Any], progress: ProgressFn | None = None,
                 _warming: bool = False):
        """Run one request; returns (PIL image, GenerationResult). Raises StudioError subclasses."""
        if isinstance(request, dict):
            request = self.validate(**request)
        if self.state == "failed":
            raise BackendNotReady(f"the model failed to load: {self.load_error}")
        if self.device is None or self.model_path is None or self.state == "loading":
            raise BackendNotReady("the model is still loading; try again in a moment")
        shape = request.shape
        with self._device_lock:
            degraded = self._degraded() if request.mode == TP_MODE else None
            requested_mode = request.mode
            if request.mode == TP_MODE and self.tp is None:
                raise BackendNotReady("the tensor-parallel group is not running; start it (the Start button "
                                      "beside the mode, the System tab, or --mode tp at launch)")
            if degraded:
                # The group is down or restarting: serve in process, the way each rank would run, and say so.
                request = dataclasses.replace(request, mode=self.settings.tp_compile)
            if request.mode == TP_MODE:
                engine = self.tp
            else:
                if self.engine is None:
                    self._load_engine()  # first in-process request after starting in tensor-parallel mode
                engine = self.engine
            prediction = self.table.predict(request.mode, shape, request.steps, self._compiles_here(request.mode),
                                            self._exact_shapes())
            self._admit(request.mode, shape, prediction, warming=_warming)
            self._cancel.clear()
            job = {"mode": request.mode, "shape": str(shape), "phase": "starting", "step": 0,
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
                out = engine.run(request, on_progress, self._cancel.is_set,
                                 forbid_compile=self.warm_only and not _warming)
            except GenerationCancelled as exc:
                # A cancel lands at a step boundary: a compile it waited for has finished; keep it —
                # unless this device also compiles the components the cancel skipped (Neuron's
                # eager VAE), where the shape is warm only after a whole run.
                if getattr(exc, "compiles", 0) and not self._exact_shapes():
                    self.table.finish(request.mode, shape, compiles=exc.compiles,
                                      compile_seconds=exc.compile_seconds, seconds=None)
                else:
                    self.table.abandon(request.mode, shape)
                raise
            except CompileFailure as exc:
                self.table.fail(request.mode, shape, str(exc))
                self.last_error = str(exc)
                raise
            except StudioError as exc:
                self.table.abandon(request.mode, shape)
                self.last_error = str(exc)
                raise
            except Exception as exc:  # an engine broke its contract: log the trace, answer plainly
                log.exception("engine error")
                self.table.abandon(request.mode, shape)
                self.last_error = f"{type(exc).__name__}: {exc}"
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
            started_at=started_at, world_size=engine.degree if request.mode == TP_MODE else 1,
            requested_mode=requested_mode if degraded else None, degraded=degraded,
        )
        self.records = (self.records + [result])[-_KEEP_RECORDS:]
        return out.image, result

    def cancel(self) -> bool:
        """Ask the running generation to stop at its next step. True if one was running."""
        with self._state_lock:
            running = self._current is not None
        self._cancel.set()
        return running

    def warmup(self, shapes: Iterable[Shape], mode: str | None = None,
               progress: Callable[[int, int, Shape], None] | None = None) -> list[GenerationResult]:
        """Compile (mode, shape) for each shape and measure one steady run; bypasses the warm-only lock."""
        mode = mode or self.settings.mode
        shapes = list(shapes)
        results = []
        for i, shape in enumerate(shapes):
            if progress:
                progress(i, len(shapes), shape)
            request = self.validate(WARMUP_PROMPT, shape.height, shape.width, seed=0, mode=mode)
            _img, first = self.generate(request, _warming=True)
            results.append(first)
            if first.compiled:  # measure the steady latency too, so the shape shows expected seconds
                results.append(self.generate(request, _warming=True)[1])
        if progress:
            progress(len(shapes), len(shapes), None)
        return results

    def start_warmup(self, shapes: Iterable[Shape], mode: str | None = None) -> None:
        """Warm shapes in a background thread; ``status()["warmup"]`` shows its progress."""
        shapes = list(shapes)
        mode = mode or self.settings.mode
        if not shapes:
            raise InvalidRequest("shapes", "choose at least one shape to warm up")
        if mode not in self.modes:
            raise InvalidRequest("mode", f"must be one of {', '.join(self.modes)}, got {mode!r}")
        with self._state_lock:
            if self._warmup.get("running"):
                raise BackendBusy("a warm-up is already running; wait for it to finish")
            self._warmup = {"running": True, "mode": mode, "done": 0, "total": len(shapes),
                            "current": None, "error": None}

        def progress(done: int, total: int, shape: Shape | None) -> None:
            self._warmup.update(done=done, current=str(shape) if shape else None)

        def run() -> None:
            try:
                self.warmup(shapes, mode, progress)
            except StudioError as exc:
                self._warmup["error"] = str(exc)
            except Exception as exc:  # noqa: BLE001 - reported in status, traced in the log
                log.exception("warm-up failed")
                self._warmup["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                self._warmup["running"] = False

        threading.Thread(target=run, name="warmup", daemon=True).start()

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
        """Write the PNG (with its parameters) to the output folder; sets and returns result.path."""
        from backend.pngmeta import save_png, unique_output_path

        result.path = str(save_png(image, result, unique_output_path(self.settings.output_dir, result)).resolve())
        return result.path

    def clear_compile_cache(self) -> int:
        """Delete the on-disk compile caches (on Neuron both NEFF caches; inductor elsewhere) between
        generations; returns bytes freed.

        Graphs already in memory stay warm; only later processes lose the head start.
        """
        import shutil
        from pathlib import Path

        if self.device is None:
            raise BackendNotReady("the device is not ready yet")
        with self._device_lock:
            info = self.device.cache_info(fresh=True)
            for cache in info["caches"]:
                folder = Path(cache["dir"]).resolve()
                if not cache["dir"] or folder == Path(folder.anchor) or folder == Path.home().resolve():
                    raise InvalidRequest("cache", f"refusing to clear {folder}")
            for cache in info["caches"]:
                folder = Path(cache["dir"]).resolve()
                for child in folder.iterdir() if folder.is_dir() else []:
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
            self.device.cache_info(fresh=True)  # the status shows the emptied folders at once
            return info["bytes"]

    def set_warm_only(self, locked: bool) -> None:
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
            return {"state": "stopped", "world_size": self.settings.tp_degree}
        if group.state in ("launching", "loading", "warming"):
            group.health(timeout=0.5)  # refreshes the phase
        return group.describe()

    def _core_plan_status(self) -> dict[str, Any] | None:
        if self.core_plan is None:
            return None
        from backend.model_source import transformer_heads

        group = self.tp
        degree = group.degree if group is not None and group.state not in ("stopped",) else self.settings.tp_degree
        return self.core_plan.describe(degree, transformer_heads(self.model_path) if self.model_path else None)

    def status(self) -> dict[str, Any]:
        with self._state_lock:
            current = dict(self._current) if self._current else None
        if current:
            current["elapsed"] = round(self._clock() - current.pop("started"), 3)
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
            "warmup": dict(self._warmup) or None,
            "tp": self._tp_status(),
            "neuron_cores": self._core_plan_status(),
            "degraded": self._degraded(),
        }
