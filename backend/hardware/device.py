"""The device layer: everything that differs between neuron, cuda and cpu lives here.

It picks the device (``--device auto``: neuron if TorchNeuron is installed and a NeuronCore is
visible, else cuda, else cpu, and says why), the default dtype, the torch.compile backend, the
process-group backend, and synchronises and reads memory. Its parts, each in its own module and
re-exported here: compile counters (``backend.hardware.metrics``), compile-error classification
(``backend.hardware.compile_errors``) and the compile caches (``backend.hardware.caches``). No module outside
these names ``torch_neuronx`` or ``torch.neuron``.

TorchNeuron facts this module respects (DESIGN.md): importing ``torch_neuronx`` registers the
``"neuron"`` device, the ``"neuron"`` torch.compile backend and ``torch.neuron``; with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` it must be imported explicitly; its NEFF cache variable must be
set before it loads (``backend.hardware.env`` does that); its compile counters live in
``torch_neuronx.metrics``, a submodule the package does not import (``load_torch_neuronx`` does).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import shutil
import subprocess
from typing import Any

import psutil
import torch
import torch._dynamo

from backend.errors import DeviceUnavailable
from backend.hardware import env as device_env
from backend.hardware.caches import DeviceCaches
from backend.hardware.compile_errors import COMPILE_ERROR_MARKS, compile_error_text, is_compile_error
from backend.hardware.metrics import (
    COMPILE_EVENTS,
    NEFF_COMPILE_TIME,
    NEFF_COMPILE_TIME_PER_SECOND,
    NEFF_COUNTERS,
    CompileEvents,
    DeviceMetrics,
    diff_counters,
)
from backend.settings import Settings

__all__ = [  # this module's own names, then those of its parts that importers take from here
    "PROCESS_GROUP_BACKENDS", "Device", "DeviceInfo", "DeviceUnavailable", "compiler_on_path",
    "load_torch_neuronx", "neuron_installed", "rank_device_info", "resolve_device",
    "COMPILE_ERROR_MARKS", "compile_error_text", "is_compile_error",
    "COMPILE_EVENTS", "NEFF_COMPILE_TIME", "NEFF_COMPILE_TIME_PER_SECOND", "NEFF_COUNTERS", "CompileEvents",
    "DeviceCaches", "DeviceMetrics", "diff_counters",
]

PROCESS_GROUP_BACKENDS = {"neuron": "neuron", "cuda": "nccl", "cpu": "gloo"}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def neuron_installed() -> bool:
    return importlib.util.find_spec("torch_neuronx") is not None


def load_torch_neuronx():
    """Import TorchNeuron (after the cache variables are set). Returns the module or None."""
    if not neuron_installed():
        return None
    if not device_env.prepared_environment():
        raise RuntimeError("backend.hardware.env.prepare_environment() must run before TorchNeuron loads")
    # With autoload on, `import torch` already imported it and this is a lookup; with
    # TORCH_DEVICE_BACKEND_AUTOLOAD=0 this import is what registers the backend.
    module = importlib.import_module("torch_neuronx")
    importlib.import_module("torch_neuronx.metrics")  # not imported by the package itself
    return module


def _neuron_cores(neuronx) -> int:
    neuron = getattr(torch, "neuron", None)
    if neuronx is None or neuron is None or not neuron.is_available():
        return 0
    return int(neuron.device_count())


@dataclasses.dataclass
class DeviceInfo:
    """What was chosen and why; JSON-able for status, doctor and the UI."""

    kind: str  # "neuron" | "cuda" | "cpu"
    reason: str
    torch_device: str
    dtype: str
    compile_backend: str
    process_group_backend: str
    neuron_installed: bool
    neuron_cores: int  # NeuronCores visible to this process (its NEURON_RT_VISIBLE_CORES)
    cuda_devices: int
    neuron_visible_cores: str | None = None  # this process's NEURON_RT_VISIBLE_CORES
    neuron_fallback: str | None = None  # TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION in force


def resolve_device(settings: Settings) -> DeviceInfo:
    """Pick the device per settings.device; raise DeviceUnavailable when an explicit one is missing."""
    device_env.prepare_environment(settings.cache_dir, settings.compile_timeout)
    installed = neuron_installed()
    neuronx = load_torch_neuronx() if installed and settings.device in ("auto", "neuron") else None
    cores = _neuron_cores(neuronx)
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0

    wanted = settings.device
    if wanted == "neuron":
        if not installed:
            raise DeviceUnavailable(
                "--device neuron: TorchNeuron (torch-neuronx) is not installed; "
                "see the README section 'Running on Trainium'"
            )
        if cores == 0:
            raise DeviceUnavailable("--device neuron: TorchNeuron is installed but no NeuronCore is visible")
        kind, reason = "neuron", f"requested; {cores} NeuronCore(s) visible"
    elif wanted == "cuda":
        if cuda == 0:
            raise DeviceUnavailable("--device cuda: no CUDA device is available to this torch build")
        kind, reason = "cuda", f"requested; {cuda} CUDA device(s)"
    elif wanted == "cpu":
        kind, reason = "cpu", "requested"
    elif cores:
        kind, reason = "neuron", f"auto: TorchNeuron installed and {cores} NeuronCore(s) visible"
    elif cuda:
        why = "TorchNeuron not installed" if not installed else "no NeuronCore visible"
        kind, reason = "cuda", f"auto: {why}; {cuda} CUDA device(s)"
    else:
        why = "TorchNeuron not installed" if not installed else "no NeuronCore visible"
        kind, reason = "cpu", f"auto: {why}, no CUDA device"

    if settings.dtype != "auto":
        dtype = settings.dtype
    else:
        dtype = "float32" if kind == "cpu" else "bfloat16"
    backend = settings.compile_backend or ("neuron" if kind == "neuron" else "inductor")
    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise DeviceUnavailable(
            f"--compile-backend {backend}: not a registered torch.compile backend "
            f"(available: {', '.join(sorted(known))})"
        )
    return DeviceInfo(
        kind=kind,
        reason=reason,
        torch_device=kind,
        dtype=dtype,
        compile_backend=backend,
        process_group_backend=PROCESS_GROUP_BACKENDS[kind],
        neuron_installed=installed,
        neuron_cores=cores,
        cuda_devices=cuda,
        neuron_visible_cores=os.environ.get(device_env.VISIBLE_CORES_VAR) if kind == "neuron" else None,
        neuron_fallback=os.environ.get(device_env.FALLBACK_VAR) if kind == "neuron" else None,
    )


def rank_device_info(settings: Settings) -> DeviceInfo:
    """A tensor-parallel rank's device, as the app already resolved it (``settings.device`` is its
    kind, ``dtype`` and ``compile_backend`` are set), built without asking the device anything.

    Under torchrun, any ``torch.neuron`` query before ``init_process_group("neuron")`` starts the
    Neuron runtime, and the init then fails (diffusers' own Neuron TP worker touches nothing
    before it); the rank learns its device index after the init (``Device.bind_rank``)."""
    device_env.prepare_environment(settings.cache_dir, settings.compile_timeout)
    kind = settings.device
    if kind not in ("neuron", "cuda", "cpu"):
        raise DeviceUnavailable(f"a tensor-parallel rank needs the app's resolved device, got {kind!r}")
    if kind == "neuron":
        load_torch_neuronx()  # an import registers the backend; it starts nothing
    return DeviceInfo(
        kind=kind, reason="tensor-parallel rank: the device the app chose", torch_device=kind,
        dtype=settings.dtype, compile_backend=settings.compile_backend or ("neuron" if kind == "neuron" else "inductor"),
        process_group_backend=PROCESS_GROUP_BACKENDS[kind],
        neuron_installed=kind == "neuron", neuron_cores=1 if kind == "neuron" else 0, cuda_devices=0,
        neuron_visible_cores=os.environ.get(device_env.VISIBLE_CORES_VAR) if kind == "neuron" else None,
        neuron_fallback=os.environ.get(device_env.FALLBACK_VAR) if kind == "neuron" else None,
    )


def compiler_on_path(environ=None) -> dict[str, Any]:
    """Where ``neuronx-cc`` is found on PATH (TorchNeuron runs it by name: execvp / shutil.which) and
    its version: ``{"path": str | None, "version": str | None}``."""
    path = shutil.which("neuronx-cc", path=(environ or os.environ).get("PATH"))
    version = None
    if path:
        try:
            proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
            lines = (proc.stdout or proc.stderr).strip().splitlines()
            version = lines[0] if lines else None
        except (OSError, subprocess.SubprocessError) as exc:
            version = f"unknown ({exc})"
    return {"path": path, "version": version}


class Device:
    """The chosen device and the operations that differ per device. It holds its compile counters
    (``metrics``: ``DeviceMetrics``) and its compile caches (``caches``: ``DeviceCaches``); their
    calls are also the device's own."""

    def __init__(self, info: DeviceInfo, max_compiled_shapes: int = 32, instance_cores: int | None = None):
        """``instance_cores``: NeuronCores on the instance (None: ask the Neuron driver)."""
        self.info = info
        self._instance_cores = instance_cores
        self._core_plan = None
        self.dtype = _DTYPES[info.dtype]
        neuronx = load_torch_neuronx() if info.kind == "neuron" else None
        self.metrics, self.caches = DeviceMetrics(neuronx), DeviceCaches(info.kind)
        m, c = self.metrics, self.caches
        self.neff_counters, self.fallback_ops, self.neff_key_fields = m.neff_counters, m.fallback_ops, m.neff_key_fields
        self.compile_snapshot, self.fxgraph_counters = m.compile_snapshot, m.fxgraph_counters
        self.cache_vars, self.cache_info, self.cache_plan, self.clear_caches = (c.cache_vars, c.cache_info,
                                                                                c.cache_plan, c.clear_caches)
        self.configure_dynamo(max_compiled_shapes)

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def core_plan(self):
        """On Neuron, which NeuronCores this process holds and which are left for tensor-parallel
        ranks (``backend.hardware.core_plan``); None elsewhere. This process's cores are its
        NEURON_RT_VISIBLE_CORES, set before torch loaded (``device_env.claim_neuron_cores``)."""
        if self.kind != "neuron":
            return None
        if self._core_plan is None:
            from backend.hardware.core_plan import (
                CorePlan,
                InstanceCores,
                default_app_cores,
                detect_instance_cores,
                make_plan,
                parse_cores,
            )

            instance = detect_instance_cores(self._instance_cores)
            own = os.environ.get(device_env.VISIBLE_CORES_VAR) or default_app_cores(instance)
            try:
                self._core_plan = make_plan(own, instance)
            except ValueError as exc:
                # Kept, not raised again on every status poll: the plan is then of unknown size and
                # every engine's start is refused with this reason.
                self._core_plan = CorePlan(InstanceCores(None, source=f"unknown: {exc}"), tuple(parse_cores(own)))
        return self._core_plan

    def bind_rank(self, local_rank: int) -> None:
        """After ``init_process_group``: this rank's own device. On Neuron TorchNeuron has bound the
        rank to NeuronCore LOCAL_RANK (``torch.neuron.current_device()``); the rank uses that index,
        never a hard-coded 0."""
        if self.kind == "neuron":
            index = int(torch.neuron.current_device())
            if index != local_rank:
                raise DeviceUnavailable(
                    f"rank with LOCAL_RANK {local_rank} is bound to neuron:{index} after init_process_group; "
                    f"expected neuron:{local_rank}")
            self.info.torch_device = f"neuron:{index}"
        elif self.kind == "cuda":
            self.info.torch_device = f"cuda:{local_rank}"

    @property
    def eager_compiles(self) -> bool:
        """On Neuron even eager mode compiles each new (op, shape, dtype) once; elsewhere it never does."""
        return self.kind == "neuron"

    def place(self, pipe) -> None:
        """Move a whole pipeline (loaded in ``self.dtype``) to the device: one copy of the weights."""
        pipe.to(self.info.torch_device)

    def compile_kwargs(self) -> dict[str, Any]:
        # dynamic=False: Neuron rejects dynamic shapes; one graph per image-token count.
        # fullgraph=True: a graph break would split work between device graphs and the host.
        return {"backend": self.info.compile_backend, "fullgraph": True, "dynamic": False}

    @staticmethod
    def configure_dynamo(max_graphs: int) -> None:
        """Raise dynamo's recompile limit so every allowed shape gets a graph.

        With dynamic=False each new token count is a recompile; at the default limit of 8 the ninth
        shape raises (fullgraph) or silently runs eager. The manager refuses shapes past
        ``max_graphs`` itself, so the limit here is never the one that bites.
        """
        torch._dynamo.config.recompile_limit = max(max_graphs + 1, torch._dynamo.config.recompile_limit)
        torch._dynamo.config.accumulated_recompile_limit = max(
            4 * (max_graphs + 1), torch._dynamo.config.accumulated_recompile_limit
        )

    @staticmethod
    def reset_compiled() -> None:
        """Drop every in-memory compiled graph (one in-process engine per process relies on this)."""
        torch._dynamo.reset()
        COMPILE_EVENTS.ensure_registered()

    def synchronize(self) -> None:
        if self.kind == "cuda":
            torch.cuda.synchronize()
        elif self.kind == "neuron":
            torch.neuron.synchronize()

    def memory(self) -> dict[str, int | None]:
        rss = psutil.Process().memory_info().rss
        allocated = peak = None
        if self.kind == "cuda":
            allocated, peak = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        elif self.kind == "neuron":
            allocated, peak = torch.neuron.memory_allocated(), torch.neuron.max_memory_allocated()
        return {"rss_bytes": rss, "device_allocated_bytes": allocated, "device_peak_bytes": peak}
