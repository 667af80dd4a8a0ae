"""Plain records that cross the backend's door: requests, results, progress. All JSON-able."""

from __future__ import annotations

import copy
import dataclasses
import enum
from typing import Any

from backend.shapes import Shape, parse_shape


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    """A validated request (build it with ``Manager.validate``)."""

    prompt: str
    height: int
    width: int
    steps: int
    guidance: float
    seed: int
    mode: str
    typed: str | None = None  # what the person typed, when ``prompt`` is the model's reading of it
    count: int = 1  # images per prompt (the batch)
    references: tuple[Any, ...] = ()  # backend.request.references.Reference, fitted; an edit when not empty
    tokens: int | None = None  # the prompt's tokens as the text encoder reads them (None: validated before it loaded)
    # The model's reading of what was typed (its card's prompt reader), read once, when validated;
    # the page says from it what the model did not understand. Never in the JSON.
    reading: Any = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def warm_up(cls, shape: Shape, mode: str, steps: int, guidance: float,
                pixels: bool = True) -> "GenerationRequest":
        """A run at ``shape`` that only warms it: grey references at its reference sizes (a compile
        depends on their sizes, not what they show); ``pixels=False``: sizes alone, to price it."""
        from backend.request.references import blank_references

        return cls("warm-up", shape.height, shape.width, steps, guidance, 0, mode, count=shape.count,
                   references=blank_references(shape, pixels))

    @property
    def shape(self) -> Shape:
        """The static signature: output size, batch and reference sizes (backend.shapes.Shape)."""
        return Shape(self.height, self.width).with_inputs(self.count, (r.size for r in self.references))

    def to_json(self) -> dict[str, Any]:
        """What a record or a log keeps (the references described, without pixels)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "reading"}
        out["references"] = [r.describe() for r in self.references]
        return out


@dataclasses.dataclass
class GenerationResult:
    """What one generation did and cost. ``compiled`` is measured from compile events, not assumed."""

    prompt: str
    width: int
    height: int
    mode: str
    steps: int
    guidance: float
    seed: int
    device: str
    model: str
    compiled: bool
    compiles: int  # torch.compile graphs built during this call
    compile_seconds: float
    seconds: float  # whole call, wall clock
    encode: float
    denoise: float
    decode: float
    neff_compiles: int = 0  # Neuron only: NEFF compilations during this call
    world_size: int = 1  # ranks that computed it (tensor-parallel mode: the group's size)
    requested_mode: str | None = None  # set when another mode served the request (degraded)
    degraded: str | None = None  # why, when it was served in process instead of by its engine
    path: str | None = None
    started_at: float = 0.0
    engine: str = "in-process"  # the engine that served it (its name)
    place: str = "app"  # the process that ran it: app, tp, replica N (the compile table's places)
    caption: str | None = None  # what the model drew, when it read ``prompt`` (what was typed) as a caption
    fallback_ops: list[str] = dataclasses.field(default_factory=list)  # Neuron: ops that ran on the host (CPU fallback)
    device_ops: list[str] = dataclasses.field(default_factory=list)  # Neuron: ops that ran on the NeuronCore
    peak_bytes: int | None = None  # the device memory's peak during the run (the largest rank's, tensor-parallel)
    rank_peak_bytes: list[int] | None = None  # tensor-parallel: each rank's peak
    rank_neff_compiles: list[int] | None = None  # tensor-parallel: each rank's NEFFs; neff_compiles is their sum
    overlapped: bool = False  # another run ran at the same time: its seconds are not a steady figure
    load: float | None = None  # on a CPU device: the share of the machine's CPU other work took during the run
    steady: bool = False  # kept as a steady figure (compiled nothing, not its place's first run, ran alone)
    count: int = 1  # images per prompt: ``path`` is the first, ``paths`` all of them
    references: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # sha256, source, fitted, fit
    paths: list[str] = dataclasses.field(default_factory=list)
    signature: str = ""  # the static signature it ran at (backend.shapes.Shape's spelling)
    # The run's images in order (PIL; several for a batch): held for the caller, never in the JSON.
    images: list[Any] = dataclasses.field(default_factory=list, repr=False, compare=False)
    reading: Any = dataclasses.field(default=None, repr=False, compare=False)  # the request's, never in the JSON

    @classmethod
    def of(cls, request: GenerationRequest, out: "EngineOutput", *, device: str, model: str, engine: str,
           started_at: float, requested_mode: str | None = None, degraded: str | None = None) -> "GenerationResult":
        """The record of a run: the request, what the engine measured, where it ran. Built here only."""
        return cls(prompt=request.typed or request.prompt, caption=request.prompt if request.typed else None,
                   width=request.width, height=request.height, mode=request.mode, steps=request.steps,
                   guidance=request.guidance, seed=request.seed, device=device, model=model, engine=engine,
                   compiled=bool(out.compiles or out.neff_compiles), started_at=started_at, count=request.count,
                   requested_mode=requested_mode if degraded else None, degraded=degraded, reading=request.reading,
                   references=[r.describe() for r in request.references], signature=str(request.shape), **out.to_json())

    @property
    def shape(self) -> Shape:
        """The signature it ran at (the compile table's key)."""
        fitted = [parse_shape(r["fitted"]) for r in self.references]
        return Shape(self.height, self.width).with_inputs(self.count, ((f.height, f.width) for f in fitted))

    def to_json(self) -> dict[str, Any]:
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)
               if f.name not in ("images", "reading")}
        for key in ("compile_seconds", "seconds", "encode", "denoise", "decode"):
            out[key] = round(out[key], 4)
        return out


@dataclasses.dataclass
class EngineOutput:
    """What an engine's ``run`` returns (in process, from a worker group, from a replica). A worker
    sends it as its result header (``to_json``) and the app reads it back (``from_json``)."""

    image: Any  # PIL.Image.Image; a uint8 (height, width, 3) array for image_as="array"; None: latents only
    # (several images per prompt: ``image`` is the first, ``more_images`` the rest, in order)
    compiles: int  # torch.compile graphs built during the run
    compile_seconds: float
    neff_compiles: int  # Neuron only: NEFFs built during the run (graphs and eager ops alike)
    seconds: float
    encode: float
    denoise: float
    decode: float
    world_size: int = 1  # ranks that computed it
    place: str = "app"  # the process that ran it
    fallback_ops: list[str] = dataclasses.field(default_factory=list)  # Neuron: ops that ran on the host
    device_ops: list[str] = dataclasses.field(default_factory=list)  # Neuron: ops that ran on the NeuronCore
    peak_bytes: int | None = None  # device memory's peak during the run (torch.neuron, reset per run)
    rank_peak_bytes: list[int] | None = None  # tensor-parallel: each rank's peak (peak_bytes is the largest)
    rank_neff_compiles: list[int] | None = None  # tensor-parallel: each rank's NEFFs (neff_compiles is their sum)
    more_images: list[Any] = dataclasses.field(default_factory=list)

    @property
    def images(self) -> list[Any]:
        return [self.image, *self.more_images]

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _PIXELS}

    @classmethod
    def from_json(cls, data: dict[str, Any], image: Any, **overrides: Any) -> "EngineOutput":
        fields = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name not in _PIXELS and f.name in data}
        return cls(image=image, **{**fields, **overrides})


_PIXELS = ("image", "more_images")


class Phase(enum.StrEnum):
    """Where a run is (a ``ProgressEvent``'s phase, a job's on the board); each member is its name in
    the JSON and on the worker wire."""

    QUEUED = "queued"  # waiting for its turn on the job board (step: its place, steps: how many wait)
    STARTING = "starting"  # its turn came; the engine has said nothing yet
    REPLICA = "replica"  # handed to Ray Serve, waiting in its queue for a free replica (RayServeEngine.run)
    LOADING = "loading"  # waiting for the model (step: the seconds waited)
    COMPILING = "compiling"
    ENCODING = "encoding"
    DENOISING = "denoising"
    DECODING = "decoding"
    DONE = "done"


@dataclasses.dataclass(frozen=True)
class ProgressEvent:
    """Where a running generation is (``Phase``; a phase sent as text, from a worker, is read as one)."""

    phase: Phase
    step: int = 0
    steps: int = 0
    mode: str = ""
    shape: str = ""
    # compiling: the seconds admission expected it to take; queued: about how long until its turn (None: unknown)
    estimate: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase", Phase(self.phase))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
