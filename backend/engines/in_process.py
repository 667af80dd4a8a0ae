"""The in-process engine: one loaded Flux2KleinPipeline, run eager, compiled or regionally compiled.

Modes share one set of weights: ``torch.nn.Module.compile`` stores its compiled callable in the
module's ``_compiled_call_impl``, so the engine builds each mode's callables once (the transformer
for ``compiled``, each repeated block for ``regional``) and switches mode by setting or clearing
those attributes; each mode keeps its graphs across switches. One per process: loading resets
dynamo, so compile events and graph counts are this engine's alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Callable

import torch

from backend.engines.base import Route
from backend.errors import BackendNotReady, CompileFailure, GenerationCancelled, GenerationFailed, ShapeLocked
from backend.hardware.device import Device
from backend.hardware.metrics import COMPILE_EVENTS, compile_error_text, diff_counters, is_compile_error, out_of_memory
from backend.models.card import DEFAULT_PROMPT_TOKENS, read_card
from backend.request.records import EngineOutput, GenerationRequest, Phase, ProgressEvent
from backend.settings import IN_PROCESS_MODES as MODES


def load_pipeline(device: Device, model_path: str):
    from diffusers import Flux2KleinPipeline

    return Flux2KleinPipeline.from_pretrained(model_path, dtype=device.dtype).to(device.info.torch_device)


# What a run refused by the warm-only lock's compile safety net says (torch's fail_on_recompile).
WOULD_COMPILE = "this shape would compile, and the app is locked to warm shapes"
# What every run in the app's process says where it holds no NeuronCore (backend.hardware.core_plan).
NO_APP_CORE = ("the app holds no NeuronCore (--neuron-cores none), so it runs nothing on the device itself: "
               "use the tensor-parallel group or the replicas (System tab), or start the app with --neuron-cores "
               "naming a core of its own")

class InProcessEngine:
    """One request at a time (``run`` queues on the lock ``exclusive`` gives out); loaded on first
    use when the app started with another engine."""

    name = "in-process"
    status_key = "engine"
    modes = MODES
    place = "app"

    def __init__(self, device: Device, model_path: str, loader: Callable | None = None):
        """``loader(device, model_path)``: the pipeline, placed (a rank's shards the transformer)."""
        self.device, self.model_path, self._loader = device, model_path, loader or load_pipeline
        self.pipe = None
        self.load_seconds: float | None = None
        self.prompt_tokens = DEFAULT_PROMPT_TOKENS
        self._variants: dict[str, list[tuple[torch.nn.Module, Callable]]] = {}
        self.active_mode: str | None = None
        self._lock = threading.RLock()

    @property
    def state(self) -> str:
        return "ready" if self.pipe is not None else "idle"

    def route(self, request: GenerationRequest):
        return Route(in_signature_order(request), self) if request.mode in self.modes else None

    def places(self, mode: str) -> list[str]:
        return [self.place]

    def capacity(self) -> int:
        return 1

    def degraded(self) -> None:
        return None

    def exclusive(self):
        return self._lock

    def load(self) -> None:
        """Nothing where the app holds no NeuronCore: loading would start its runtime, which would then
        reserve every core, the engines' included."""
        with self._lock:
            if self.pipe is not None or not self.device.holds_cores:
                return
            import diffusers
            import transformers

            began = time.perf_counter()
            for library in (diffusers, transformers):  # no loading bars or notices on the app's stderr
                library.utils.logging.disable_progress_bar()
                library.utils.logging.set_verbosity_error()
            pipe = self._loader(self.device, self.model_path)
            pipe.set_progress_bar_config(disable=True)
            # the prompt length the model was trained at (its card), in every process that runs it
            self.prompt_tokens = read_card(self.model_path).prompt_tokens or DEFAULT_PROMPT_TOKENS
            dense_references(pipe)
            self.device.reset_compiled()
            self.pipe, self._variants = pipe, {"eager": []}
            self._activate("eager")
            self.load_seconds = time.perf_counter() - began

    def close(self) -> None:
        with self._lock:
            self.pipe, self._variants = None, {}

    def describe(self) -> dict:
        return {"engine": self.name, "state": self.state, "active_mode": self.active_mode,
                "compiled_modes": sorted(m for m in self._variants if m != "eager"),
                "load_seconds": self.load_seconds}

    def _build_variant(self, mode: str) -> list[tuple[torch.nn.Module, Callable]]:
        transformer = self.pipe.transformer
        kwargs = self.device.compile_kwargs()
        if mode == "compiled":
            transformer.compile(**kwargs)
            modules = [transformer]
        else:  # regional
            transformer.compile_repeated_blocks(**kwargs)
            modules = [m for m in transformer.modules() if m is not transformer
                       and getattr(m, "_compiled_call_impl", None) is not None]
        return [(m, m._compiled_call_impl) for m in modules]  # switched off and on by _activate

    def _drop_variant(self, mode: str) -> None:
        """After a failed compile in ``mode``: its next request compiles afresh, not with the failed callable."""
        for module, _impl in self._variants.pop(mode, []) if mode != "eager" else []:
            module._compiled_call_impl = None
        if self.active_mode == mode:
            self.active_mode = None

    def _activate(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        if mode not in self._variants:
            self._variants[mode] = self._build_variant(mode)
        for variant in self._variants.values():
            for module, _impl in variant:
                module._compiled_call_impl = None
        for module, impl in self._variants[mode]:
            module._compiled_call_impl = impl
        self.active_mode = mode

    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None] = lambda e: None,
            should_stop: Callable[[], bool] = lambda: False, forbid_compile: bool = False,
            warming: bool = False, decode: bool = True) -> EngineOutput:
        """Generate (GenerationCancelled, ShapeLocked, CompileFailure or GenerationFailed), loading
        first if need be. ``decode=False`` stops at the latents: ranks other than 0 skip the VAE."""
        if not self.device.holds_cores:
            raise BackendNotReady(NO_APP_CORE)
        with self._lock:
            if self.pipe is None:
                on_progress(ProgressEvent(Phase.LOADING, 0, request.steps, request.mode, str(request.shape)))
                self.load()
            return self._run(in_signature_order(request), on_progress, should_stop, forbid_compile, decode)

    def _run(self, request, on_progress, should_stop, forbid_compile, decode) -> EngineOutput:
        pipe, device = self.pipe, self.device
        shape = str(request.shape)

        def emit(phase: Phase, step: int = 0) -> None:
            on_progress(ProgressEvent(phase, step, request.steps, request.mode, shape))

        marks: dict[str, float] = {}
        compiling = {"active": False}

        def encoder_done(_module, _args, _output):
            device.synchronize()
            marks["encoded"] = time.perf_counter()
            emit(Phase.DENOISING, 0)

        def step_done(_pipe, i, _t, _kwargs):
            device.synchronize()
            marks["last_step"] = time.perf_counter()
            compiling["active"] = False
            emit(Phase.DENOISING, i + 1)
            if should_stop():
                raise GenerationCancelled(f"stopped after step {i + 1} of {request.steps}")
            if i + 1 == request.steps:
                emit(Phase.DECODING, request.steps)
            return {}

        def compile_started() -> None:
            compiling["active"] = True
            emit(Phase.COMPILING)

        def compiled() -> dict:
            counters = diff_counters(before, device.compile_snapshot())
            return {"compiles": int(counters["graphs"]), "neff_compiles": int(counters.get("neff_compiles", 0)),
                    "compile_seconds": float(counters["compile_seconds"])}

        if should_stop():
            raise GenerationCancelled("stopped before it started")
        hook = pipe.text_encoder.register_forward_hook(encoder_done)
        remove_listener = COMPILE_EVENTS.add_start_listener(compile_started)
        stance = torch.compiler.set_stance("fail_on_recompile") if forbid_compile else contextlib.nullcontext()
        before = device.compile_snapshot()
        device.fallback_ops()  # starts this run's lists (host and device ops) afresh
        device.reset_peak()
        emit(Phase.ENCODING)
        began = time.perf_counter()
        try:
            self._activate(request.mode)
            with stance:
                # each reference is already at a reference size, which the pipeline keeps (backend.request.references)
                output = pipe(prompt=request.prompt, height=request.height, width=request.width,
                              num_inference_steps=request.steps, guidance_scale=request.guidance,
                              generator=torch.Generator("cpu").manual_seed(request.seed),
                              callback_on_step_end=step_done, output_type="pil" if decode else "latent",
                              num_images_per_prompt=request.count, max_sequence_length=self.prompt_tokens,
                              image=[r.image() for r in request.references] or None)
            device.synchronize()
            images = list(output.images) if decode else [None]
        except GenerationCancelled as exc:
            raise exc.evolve(**compiled()) from None
        except Exception as exc:  # noqa: BLE001 - classified here, the one place that does
            error = self._classify(exc, compiling["active"])
            if isinstance(error, CompileFailure):
                self._drop_variant(request.mode)
            raise error from exc
        finally:
            hook.remove()
            remove_listener()
        ended = time.perf_counter()
        counts, executed = compiled(), device.executed_ops()
        fallback, peak = device.fallback_ops(), device.peak_bytes()
        encoded = marks.get("encoded", began)
        last_step = marks.get("last_step", encoded)
        emit(Phase.DONE, request.steps)
        return EngineOutput(image=images[0], more_images=images[1:], seconds=ended - began, encode=encoded - began,
                            denoise=last_step - encoded, decode=ended - last_step, fallback_ops=fallback,
                            device_ops=executed, peak_bytes=peak, **counts)

    @staticmethod
    def _classify(exc: Exception, during_compile: bool) -> Exception:
        # The compiler's own words (TorchNeuron's "COMPILATION FAILED: ..." line), from under dynamo's wrapper.
        root = getattr(exc, "inner_exception", None) or exc
        text = compile_error_text(root)
        if isinstance(root, torch._dynamo.exc.FailOnRecompileLimitHit):
            return CompileFailure(f"dynamo's recompile limit was hit; the shape was refused rather than run eagerly "
                                  f"({text})")
        # A compile the fail_on_recompile stance forbids is a plain RuntimeError: its words say it
        # (torch/_dynamo/eval_frame).
        if "stance is 'fail_on_recompile'" in str(exc):
            return ShapeLocked(WOULD_COMPILE)
        size = out_of_memory(exc)
        if size is not None:
            return GenerationFailed(f"the NeuronCore's memory is full: an allocation of {size / 2**30:.2f} GiB did not "
                                    f"fit ({text}); a smaller size, fewer references or a fast-attention size "
                                    "needs less")
        # Neuron compiles at a graph's first execution: the device layer knows those errors, whatever the phase.
        compiler = during_compile or is_compile_error(exc)
        cls = CompileFailure if compiler else GenerationFailed
        where = "while compiling" if compiler else "in the pipeline"
        return cls(f"{type(root).__name__} {where}: {text}")


def in_signature_order(request: GenerationRequest) -> GenerationRequest:
    """``request`` with its references in its signature's order (``Shape.with_inputs``: by fitted
    (height, width); equal sizes keep the caller's order). The pipeline concatenates references in
    the order it gets them, and on Neuron each eager op compiles per input shapes: the same sizes in
    another order would be a cold run at a warm signature. The routes give the record this order too,
    so it lists the references as they ran."""
    ordered = tuple(sorted(request.references, key=lambda r: r.size))
    return request if ordered == tuple(request.references) else dataclasses.replace(request, references=ordered)


def dense_references(pipe) -> None:
    """Dense reference tensors for the VAE: diffusers' ``numpy_to_pt`` leaves channels-last strides,
    which a device whose group norm falls back to ATen's ``math_group_norm`` (built on ``view``)
    refuses. Elsewhere it costs a copy of each reference."""
    processor = getattr(pipe, "image_processor", None)
    if processor is None or getattr(processor, "_dense", False):
        return
    preprocess = processor.preprocess

    def dense(*args, **kwargs):
        out = preprocess(*args, **kwargs)
        return out.contiguous() if isinstance(out, torch.Tensor) else out

    processor.preprocess, processor._dense = dense, True
