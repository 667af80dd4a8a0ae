"""The one service every door calls (the page, Compare, ``/generate``, the Images API, the CLI,
warm-ups): ``run(request, caller)`` validates, admits, waits its turn on the job board, runs, records
and saves. Importing it does not import torch: the device and engines load in ``start``.

Routing: the launched engines (a worker group, a replica pool) are asked in order whether a request
is theirs (``Engine.route``); the first that answers serves it or sends it to the in-process engine
with the reason (degraded); the rest run in process.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from backend.engines.base import Engine, Engines, Route
from backend.errors import (
    BackendNotReady,
    GenerationCancelled,
    GenerationFailed,
    InvalidRequest,
    NotAllowed,
    StudioError,
)
from backend.hardware.load import CpuLoad
from backend.hardware.monitor import NeuronMonitor
from backend.request.records import GenerationRequest, GenerationResult, Phase, ProgressEvent
from backend.request.references import load_references, planned_references
from backend.request.validation import check_signature, validate_request
from backend.serving import compile_state as cs
from backend.serving.admission import Admission, PlaceBook
from backend.serving.controls import CacheOps, EngineControls
from backend.serving.jobs import JobBoard
from backend.serving.metrics import RunMetrics
from backend.serving.roles import LOCAL_OPERATOR, Caller
from backend.serving.status import LOAD_FAILED, ServiceState, StatusView
from backend.settings import MODES, Settings
from backend.shapes import Shape

if TYPE_CHECKING:
    from backend.hardware.device import Device

log = logging.getLogger(__name__)
_KEEP_RECORDS = 1000

ProgressFn = Callable[[ProgressEvent], None]


class Manager:
    """Holds its parts as objects: the job board, the compile table, admission, the operator's
    ``controls`` and warm-ups, ``caches`` and bundles, the status ``view``. Their calls are also its own."""

    modes: tuple[str, ...] = MODES

    def __init__(self, settings: Settings, engine_factory: Callable[[Device, str], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self._engine_factory = engine_factory
        self._clock = clock
        self.table = cs.CompileTable(clock)
        self.admission = Admission(settings, self.table, tp_degree=self._tp_degree)
        self.device: Device | None = None
        self.monitor: NeuronMonitor | None = None  # neuron-monitor, once the device is known
        self.engines = Engines()  # by role: .local (in process) and .launched; none before the load
        self.model_label: str | None = None
        self.state = ServiceState.IDLE
        self.load_error: str | None = None
        self.last_error: str | None = None
        self.warm_only = settings.warm_only
        self.preparing: str | None = None  # what readiness waits for besides --prewarm (``app.py demo``'s warm set)
        self.fallback_ops: dict[str, set[str]] = {}  # op that ran on the host -> the "mode shape"s it ran in
        self.records: list[GenerationResult] = []
        self._state_lock = threading.Lock()
        self._closing = threading.Event()
        self._ready = threading.Event()
        self._loader: threading.Thread | None = None
        self.controls, self.caches, self.view = EngineControls(self), CacheOps(self), StatusView(self)
        self.board = JobBoard(self.controls.engine_capacity, clock)  # every run from every door waits here
        c, k, v = self.controls, self.caches, self.view
        self.start_engine, self.stop_engine, self.engine_logs = c.start_engine, c.stop_engine, c.engine_logs
        self.stop_compiling_workers, self.capacity, self.set_warm_only = c.stop_compiling_workers, c.capacity, \
            c.set_warm_only
        self.warmup, self.start_warmup = c.warmup, c.start_warmup
        self.bundle_manifest, self.export_bundle, self.import_bundle = k.bundle_manifest, k.export_bundle, \
            k.import_bundle
        self.clear_compile_cache, self.cache_plan = k.clear_compile_cache, k.cache_plan
        self.readiness, self.receipt, self.engine_load, self.status = v.readiness, v.receipt, v.engine_load, v.status
        self.model_path: str | None = None
        self._count_tokens: Callable[[str], int] | None = None  # set once the model's tokenizer loads
        self.bundle: dict[str, Any] | None = None  # what --cache-from imported and warmed
        # Read before anything loads: the page is built from the card. A bad card fails the start.
        from backend.hardware.kernels import expects_neuron
        from backend.models.card import ModelCard, card_for

        self._card_error: StudioError | None = None
        try:
            self.card = card_for(settings.model, settings.cache_dir, neuron=expects_neuron(settings.device))
        except StudioError as exc:
            self.card, self._card_error = ModelCard(), exc
        tokens = self.card.prompt_tokens
        if tokens and tokens < settings.max_prompt_tokens and not self.card.reader:
            # the model reads its prompts at that length: a longer one would be cut off. A model with
            # a prompt reader is given the reading's caption instead, which its grammar keeps short
            # (the embedded grammar's: at most 35 tokens of its 64, tests/backend/test_prompt_reading.py)
            self.settings = dataclasses.replace(settings, max_prompt_tokens=tokens)
        self.metrics = RunMetrics(self)

    def _tp_degree(self) -> int:
        """The cores a tp request runs on: those of the launched engine that serves tp mode."""
        engine = next((e for e in self.engines.launched if "tp" in e.modes), None)
        return engine.cores_wanted()[0] if engine is not None else self.settings.tp_degree

    def start(self, background: bool = False) -> None:
        """Load the model and prewarm; in the background, errors go to status."""
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
        self.state = ServiceState.LOADING
        try:
            if self._card_error is not None:
                raise self._card_error
            from backend.hardware.core_plan import claim_app_cores

            # Before the device layer loads torch (and TorchNeuron): this process's own NeuronCores.
            claim_app_cores(self.settings.neuron_cores, self.settings.neuron_instance_cores)
            from backend.caches.bundles import sweep_leftovers
            from backend.engines import build_engines
            from backend.hardware.device import Device, resolve_device
            from backend.hardware.memory import Geometry
            from backend.models.source import prompt_token_counter, resolve_model

            info = resolve_device(self.settings)
            self.device = Device(info, self.settings.max_compiled_shapes, self.settings.neuron_instance_cores)
            sweep_leftovers(self.device)  # what an import killed outright left (staging, temp copies)
            self.monitor = NeuronMonitor(info.kind)
            self.monitor.start()  # on Neuron only: the System tab's live view of the chip
            # On a CPU a run's seconds depend on the machine's other work: the meter reads it (elsewhere
            # the device's time does not, and nothing walks /proc).
            self.table.cpu_bound = info.kind == "cpu"
            if self.table.cpu_bound:
                self.admission.cpu_load = CpuLoad()
                self.admission.cpu_load.start()
            self.model_path, self.model_label = resolve_model(self.settings.model, self.settings.cache_dir)
            self._count_tokens = prompt_token_counter(self.model_path)
            self.table.history.open(self.settings.cache_dir / "compile-history.json",
                                    f"{info.kind} {info.compile_backend} {self.model_label}")
            # What each signature needs of a NeuronCore (admission plans by it); under --ray the replicas'
            # device may be Neuron where the app's is not.
            if info.kind == "neuron" or self.settings.ray:
                self.admission.geometry = Geometry.read(self.model_path)
            self.engines = build_engines(self.settings, self.device, self.model_path,
                                         PlaceBook(self.admission, self.device, self.board.capacity_changed),
                                         self._engine_factory)
            # Under --ray each replica imports the bundle into its own node's caches (backend.engines.ray_serve).
            bundled = self.caches.import_at_start() if self.settings.cache_from and not self.settings.ray else None
            launched = [e for e in self.engines.launched if e.configured]
            for engine in launched:  # each starts and waits for READY, or raises with the reason
                engine.load()
            served_launched = any(self.settings.mode in e.modes for e in launched)
            if not served_launched:
                self.local.load()  # on Neuron this claims only the app's own cores (backend.hardware.core_plan)
        except Exception as exc:
            self.state = ServiceState.FAILED
            self.load_error = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
            self.last_error = self.load_error
            self._ready.set()
            raise
        self.state = ServiceState.READY
        self._ready.set()
        if bundled is not None:
            self._warm_at_start("warming the bundle's shapes", lambda: self.caches.warm_from_bundle(bundled))
        if self.settings.prewarm and not served_launched:  # (a launched engine warms its own before READY)
            self._warm_at_start("prewarm", lambda: self.warmup(self.settings.prewarm, self.settings.mode))

    def _warm_at_start(self, what: str, warm: Callable[[], Any]) -> None:
        self.state = ServiceState.WARMING
        try:
            warm()
        except StudioError as exc:
            self.last_error = f"{what}: {exc}"
            log.error("%s", self.last_error)
        finally:
            self.state = ServiceState.READY

    @property
    def local(self) -> Engine:
        if self.engines.local is None:
            raise BackendNotReady("the device is not ready yet")
        return self.engines.local

    @property
    def engine(self):  # the in-process engine once it is loaded (None before)
        return self.local if self.engines and self.local.state == "ready" else None

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def host_ops(self) -> dict[str, list[str]]:
        with self._state_lock:
            return {op: sorted(where) for op, where in sorted(self.fallback_ops.items())}

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout) and self.state in (ServiceState.READY, ServiceState.WARMING)

    def close(self, wait: float | None = None) -> bool:
        """Cancel the runs, stop the launched engines, release the in-process one. A compile cannot be
        interrupted: ``wait`` bounds the wait for it (None: no bound). False when it still runs."""
        self._closing.set()
        self.board.close()
        for watcher in (self.monitor, self.admission.cpu_load):
            if watcher is not None:
                watcher.close()
        if not self.engines:
            return True
        for engine in self.engines.launched:
            engine.close()
        local = self.local
        if not local.exclusive().acquire(timeout=-1 if wait is None else wait):
            log.warning("a generation is still running (a compile cannot be interrupted); not waiting for it")
            return False
        try:
            local.close()
            self.state = ServiceState.IDLE
        finally:
            local.exclusive().release()
        return True

    def _check_ready(self) -> None:
        if self.state is ServiceState.FAILED:
            raise BackendNotReady(LOAD_FAILED)
        if self.device is None or self.model_path is None or self.state is ServiceState.LOADING or not self.engines:
            raise BackendNotReady("the model is still loading; try again in a moment")
        if self._closing.is_set():
            raise BackendNotReady("the app is shutting down")

    def _await_ready(self, progress: ProgressFn | None, still_wanted: Callable[[], bool] | None) -> None:
        """A request made during the load waits for it (progress "loading", the seconds as its step)
        rather than being told to try again; closing, or the caller gone away, ends the wait."""
        if self._ready.is_set() or self._loader is None:
            return
        began = self._clock()
        while not self._ready.wait(0.25):
            if self._closing.is_set() or (still_wanted is not None and not still_wanted()):
                raise BackendNotReady("the app is shutting down" if self._closing.is_set()
                                      else "nobody waits for this image any more")
            if progress is not None:
                progress(ProgressEvent(Phase.LOADING, int(self._clock() - began), 0, "", ""))

    def validate(self, prompt: Any, height: Any = None, width: Any = None, steps: Any = None, guidance: Any = None,
                 seed: Any = None, mode: Any = None, images: Any = None, count: Any = None,
                 nearest_warm: bool = False) -> GenerationRequest:
        """Raw inputs to a GenerationRequest, or InvalidRequest naming the field. References are
        decoded only after every cheap check passed on their header sizes. ``nearest_warm`` (``size:
        auto``): the nearest warm signature to the given size (default: the first reference's, else
        the model's start size)."""
        sizes, fit, most = self.reference_sizes, self.settings.reference_fit, self.settings.max_references
        try:
            planned = planned_references(images, sizes, fit, most)
            if nearest_warm and height is None and width is None:
                start = self.card.start_shape
                height, width = planned[0].size if planned else (start.height, start.width)

            def checked(height, width) -> GenerationRequest:
                return validate_request(self.settings, self.modes, prompt, height, width, steps, guidance, seed, mode,
                                        count_tokens=self._count_tokens, count=count, references=planned,
                                        budget=self.sequence_budget)

            request = checked(height, width)
            warm = self.table.warm_shapes(request.mode) if nearest_warm else []
            nearest = cs.nearest_signature(request.shape, warm) if warm else None
            if nearest is not None and (nearest.height, nearest.width) != (request.height, request.width):
                request = dataclasses.replace(checked(nearest.height, nearest.width), seed=request.seed)
            # Read before any reference is decoded: a prompt the model cannot draw is refused first.
            reading = self.card.read_prompt(request.prompt, editing=bool(request.references))
            if reading is not None and getattr(reading, "refusal", None):  # asks what the model cannot draw
                raise InvalidRequest("prompt", str(reading.refusal), why=(("cannot", {"reason": reading.refusal}),))
            if planned and not planned[0].rgb:
                request = dataclasses.replace(request, references=load_references(images, sizes, fit, most))
        except InvalidRequest as exc:
            self.metrics.ended(mode if mode is not None else self.settings.mode, error=exc)
            raise
        if reading is not None and reading.caption != request.prompt:
            # A model with a prompt grammar is given the caption it understands; the record keeps both.
            request = dataclasses.replace(request, prompt=reading.caption, typed=request.prompt, reading=reading)
        return request

    def signature(self, height: Any, width: Any, steps: Any = None, count: Any = None,
                  images: Any = None) -> tuple[Shape, int]:
        """The cost line's question: the (signature, steps) these fields would run as, checked as
        ``validate`` checks them but without a prompt and with nothing decoded."""
        planned = planned_references(images, self.reference_sizes, self.settings.reference_fit,
                                     self.settings.max_references)
        return check_signature(self.settings, height, width, steps, count, planned, self.sequence_budget)

    def plan(self, fields: dict[str, Any]) -> tuple[GenerationRequest, dict[str, Any]]:
        """Raw ``fields`` validated and priced before they run (the Images API, the CLI)."""
        request = self.validate(**fields)
        return request, self.predict(request.mode, request.shape, request.steps)

    @property
    def reference_sizes(self) -> list[Shape]:
        return list(self.settings.reference_sizes) or [shape for _name, shape in self.card.presets]

    @property
    def sequence_budget(self) -> int:
        """``--max-sequence-tokens``, else the output and three references at the largest preset."""
        return self.settings.max_sequence_tokens or 4 * max(shape.tokens for _name, shape in self.card.presets)

    def _route(self, request: GenerationRequest) -> Route:
        for engine in self.engines.launched:
            route = engine.route(request)
            if route is not None:
                return Route(route.request, self.local, route.degraded) if route.in_process else route
        route = self.local.route(request)
        if route is None:
            raise InvalidRequest("mode", f"must be one of {', '.join(self.modes)}, got {request.mode!r}")
        return route

    def device_of(self, engine) -> Any:
        """The device ``engine``'s processes run on: the app's, unless it says (Ray's replicas report theirs)."""
        return getattr(engine, "admission_device", lambda: None)() or self.device

    def device_for(self, mode: str) -> Any:
        """The device a run in ``mode`` would run on now: that of the first launched engine serving it."""
        return self.device_of(next((e for e in self.engines.launched if e.configured and mode in e.modes), None))

    def _admit(self, request: GenerationRequest, locked: bool):
        route = self._route(request)
        run = route.request
        places = route.engine.places(run.mode)
        return route, places, self.admission.decide(self.device_of(route.engine), run.mode, run.shape, run.steps,
                                                    locked, places)

    def predict(self, mode: str, shape: Shape, steps: int | None = None) -> dict[str, Any]:
        """What a run at (mode, shape) would cost now, refusal included."""
        if self.engines:
            try:
                request = GenerationRequest.warm_up(shape, mode, steps or self.settings.steps,
                                                    self.settings.guidance, pixels=False)
                return self._admit(request, self.warm_only)[2].prediction
            except StudioError:
                pass  # no engine serves it now: what the table alone says
        return self.admission.decide(self.device, mode, shape, steps, self.warm_only).prediction

    def run(self, request: GenerationRequest | dict[str, Any], caller: Caller = LOCAL_OPERATOR,
            progress: ProgressFn | None = None, still_wanted: Callable[[], bool] | None = None,
            save: bool | Callable = True):
        """The entry every door uses; returns (image, result). ``save``: True to the output folder, a
        callable ``name(result, index)`` to the paths it gives, False not at all."""
        request = self.validate(**request) if isinstance(request, dict) else request
        try:
            image, result = self.generate(request, progress, caller=caller, still_wanted=still_wanted)
        except GenerationCancelled as exc:
            exc.seed = request.seed  # what a stopped run's page says (a random seed was drawn here)
            raise
        if save:
            self.save_image(image, result, None if save is True else save)
        return image, result

    def generate(self, request: GenerationRequest | dict[str, Any], progress: ProgressFn | None = None,
                 _warming: bool = False, caller: Caller = LOCAL_OPERATOR,
                 still_wanted: Callable[[], bool] | None = None):
        """``run`` without saving. ``still_wanted`` turns False once nobody waits for the image: the
        run leaves the board, or stops at its next step."""
        request = self.validate(**request) if isinstance(request, dict) else request
        self._await_ready(progress, still_wanted)
        if request.tokens is None and self._count_tokens is not None:
            # Validated before the tokenizer loaded (during the load, the CLI): count its tokens now.
            request = self.validate(request.typed or request.prompt, request.height, request.width, request.steps,
                                    request.guidance, request.seed, request.mode, images=request.references,
                                    count=request.count)
        if caller.owner is None:
            raise NotAllowed("a run needs an owner (a page session, an API caller); this call has none")

        def should_stop() -> bool:
            return job.cancel.is_set() or self._closing.is_set() or (still_wanted is not None and not still_wanted())

        def waiting(place: int, total: int) -> None:
            job.phase, job.step = Phase.QUEUED, place
            if progress is not None:
                progress(ProgressEvent(Phase.QUEUED, place, total, run.mode, str(run.shape),
                                       estimate=self._wait_seconds(job)))

        try:
            self._check_ready()
            locked = self.warm_only and not _warming
            route, places, decision = self._admit(request, locked)
            decision.enforce()
            run = route.request
            cap = None if caller.is_operator else self.settings.max_queued_per_viewer + 1
            job = self.board.enter(caller.owner, run.mode, run.shape, run.steps, route.engine.name, cap)
            self.board.wait_turn(job, should_stop, waiting)
        except StudioError as exc:
            self.metrics.ended(request.mode, error=exc)
            raise
        engine = route.engine

        def on_progress(event: ProgressEvent) -> None:
            job.phase, job.step = event.phase, event.step
            if event.phase == Phase.COMPILING:
                self.table.mark_compiling(run.mode, run.shape)
                if job.compile_started is None:
                    job.compile_started = self._clock()
                job.compile_estimate = decision.prediction.get("estimate_compile_seconds")
                event = dataclasses.replace(event, estimate=job.compile_estimate)
            if progress is not None:
                progress(event)

        started_at, ticks = time.time(), CpuLoad.mark() if self.table.cpu_bound else None
        try:
            out = engine.run(run, on_progress, should_stop, forbid_compile=locked, warming=_warming)
        except Exception as exc:
            if job.worker_stopped and not isinstance(exc, GenerationCancelled):
                # The operator ended its compile by stopping the worker: a stop, not a failure.
                exc = GenerationCancelled(f"the operator stopped the {engine.name} workers while they compiled")
            # On Neuron the components a cancel skipped (the eager VAE) compile too: a shape is
            # warm there only after a whole run, so a cancelled run keeps no compile.
            self.table.failed_run(run.mode, run.shape, exc, place=places[0] if len(places) == 1 else None,
                                  keep_compiles=len(places) == 1
                                  and not self.admission.exact_shapes(self.device_of(engine)))
            if not isinstance(exc, GenerationCancelled):
                self.last_error = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
            self.metrics.ended(request.mode, error=exc)
            if isinstance(exc, StudioError):
                raise exc
            log.exception("engine error")  # an engine broke its contract: log the trace, answer plainly
            raise GenerationFailed(self.last_error) from exc
        finally:
            self.board.leave(job)
        result = GenerationResult.of(run, out, device=self.device.kind, model=self.model_label or "",
                                     engine=engine.name, started_at=started_at, requested_mode=request.mode,
                                     degraded=route.degraded)
        result.overlapped, result.load = job.overlapped, CpuLoad.during(ticks)
        result.images = out.images
        self.table.record(result)
        self.metrics.ended(request.mode, result)
        with self._state_lock:
            self.records = (self.records + [result])[-_KEEP_RECORDS:]
            for op in result.fallback_ops:  # Neuron's silent CPU fallback, for the System tab and doctor
                self.fallback_ops.setdefault(op, set()).add(f"{result.mode} {result.shape}")
        return out.image, result

    def _wait_seconds(self, job) -> float | None:
        """Seconds until ``job``'s turn: what the runs ahead on its engine should still take, shared by
        its slots. None while a run ahead has no figure yet (the page then says the place alone)."""
        ahead, slots = self.board.ahead(job)
        now, total, guesses = self._clock(), 0.0, {}
        for other in ahead:  # a viewer's many runs share one signature: each is predicted once
            key = (other.mode, other.shape, other.steps)
            guess = guesses[key] = guesses.get(key) or self.predict(*key)
            seconds = guess.get("expected_seconds")
            if guess.get("will_compile"):
                compile_seconds = guess.get("estimate_compile_seconds")
                seconds = None if seconds is None or compile_seconds is None else seconds + compile_seconds
            if seconds is None:
                return None
            total += max(0.0, seconds - (now - other.started)) if other.started is not None else seconds
        return total / max(1, slots)

    def cancel(self, *, caller: Caller = LOCAL_OPERATOR) -> bool:
        """Stop the caller's runs (the operator's: every run). True if one was asked. A viewer ends
        only its own owner's jobs: no string a client sends names another's."""
        jobs = self.board.jobs()
        mine = self.board.cancel(caller.owner, everyone=caller.is_operator)
        if jobs and not mine:
            raise NotAllowed("the running generation is another viewer's; you can stop only your own")
        return bool(mine)

    def abandon(self, owner) -> int:
        """Its page closed: end that owner's jobs. Returns how many."""
        return len(self.board.cancel(owner, everyone=False)) if owner is not None else 0

    def compare(self, request: GenerationRequest | dict[str, Any], modes: Iterable[str],
                progress: ProgressFn | None = None, caller: Caller = LOCAL_OPERATOR,
                save: bool = True) -> list[dict[str, Any]]:
        """One request through two or three modes, each its own job. Each entry: mode, image, result,
        and the largest pixel difference (0-255) from the first mode's image."""
        import numpy as np

        request = self.validate(**request) if isinstance(request, dict) else request
        modes = list(dict.fromkeys(modes))
        if not 2 <= len(modes) <= 3:
            raise InvalidRequest("modes", f"choose two or three modes to compare, got {len(modes)}")
        entries, first = [], None
        for mode in modes:
            if mode not in self.modes:
                raise InvalidRequest("mode", f"must be one of {', '.join(self.modes)}, got {mode!r}")
            image, result = self.run(dataclasses.replace(request, mode=mode), caller, progress, save=save)
            pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
            first = pixels if first is None else first
            entries.append({"mode": mode, "image": image, "result": result,
                            "max_diff": int(np.abs(pixels - first).max())})
        return entries

    def save_image(self, image, result: GenerationResult, name=None) -> str:
        from backend.images.folder import save_outputs
        return save_outputs(self.settings.output_dir, self.settings.keep_outputs, image, result, name)
