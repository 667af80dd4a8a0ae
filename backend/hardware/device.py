"""The device layer: everything that differs between neuron, cuda and cpu lives here.

It picks the device (``--device auto``: neuron if TorchNeuron is installed and a NeuronCore is
visible, else cuda, else cpu, and says why), the default dtype, the torch.compile backend, the
process-group backend; it synchronises, reads memory and the compile counters
(``backend.hardware.metrics``), and shows and clears the compile caches
(``backend.hardware.cache_layout``). No module outside these names ``torch_neuronx`` or ``torch.neuron``.

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
import time
from pathlib import Path
from typing import Any

import psutil
import torch
import torch._dynamo

from backend.errors import DeviceUnavailable
from backend.hardware import cache_layout
from backend.hardware import env as device_env
from backend.hardware.metrics import (  # the last three: importers take them from here
    COMPILE_EVENTS,
    NEFF_COMPILE_TIME,
    NEFF_COMPILE_TIME_PER_SECOND,
    NEFF_COUNTERS,
    compile_error_text,  # noqa: F401
    diff_counters,  # noqa: F401
    is_compile_error,  # noqa: F401
)
from backend.settings import Settings

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
    else:
        why = "TorchNeuron not installed" if not installed else "no NeuronCore visible"
        kind, reason = ("cuda", f"auto: {why}; {cuda} CUDA device(s)") if cuda else ("cpu", f"auto: {why}, no CUDA device")

    dtype = settings.dtype if settings.dtype != "auto" else "float32" if kind == "cpu" else "bfloat16"
    info = _info(settings, kind, reason, dtype, installed, cores, cuda)
    known = torch._dynamo.list_backends(exclude_tags=())
    if info.compile_backend not in known:
        raise DeviceUnavailable(f"--compile-backend {info.compile_backend}: not a registered torch.compile backend "
                                f"(available: {', '.join(sorted(known))})")
    return info


def _info(settings: Settings, kind: str, reason: str, dtype: str, installed: bool, cores: int,
          cuda: int) -> DeviceInfo:
    neuron = kind == "neuron"
    return DeviceInfo(
        kind=kind, reason=reason, torch_device=kind, dtype=dtype,
        compile_backend=settings.compile_backend or ("neuron" if neuron else "inductor"),
        process_group_backend=PROCESS_GROUP_BACKENDS[kind], neuron_installed=installed, neuron_cores=cores,
        cuda_devices=cuda, neuron_visible_cores=os.environ.get(device_env.VISIBLE_CORES_VAR) if neuron else None,
        neuron_fallback=os.environ.get(device_env.FALLBACK_VAR) if neuron else None)


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
    neuron = kind == "neuron"
    return _info(settings, kind, "tensor-parallel rank: the device the app chose", settings.dtype, neuron,
                 1 if neuron else 0, 0)


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
    """The chosen device and the operations that differ per device: its compile counters and its
    compile caches included."""

    CACHE_SIZE_TTL = 10.0  # seconds; every open page asks for the status each second

    def __init__(self, info: DeviceInfo, max_compiled_shapes: int = 32, instance_cores: int | None = None):
        """``instance_cores``: NeuronCores on the instance (None: ask neuron-ls)."""
        self.info = info
        self._instance_cores = instance_cores
        self._core_plan = None
        self._cache_size: tuple | None = None  # ((var, dir) pairs, read at, [bytes])
        self.dtype = _DTYPES[info.dtype]
        self._neuronx = load_torch_neuronx() if info.kind == "neuron" else None
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
            from backend.core_lists import parse_cores
            from backend.hardware.core_plan import CorePlan, default_app_cores, make_plan
            from backend.hardware.neuron_ls import InstanceCores, detect_instance_cores

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

    def neff_counters(self) -> dict[str, float]:
        """TorchNeuron's NEFF compile-cache counters and the compiler's accumulated seconds (empty off
        Neuron)."""
        if self._neuronx is None:
            return {}
        metrics = importlib.import_module("torch_neuronx.metrics")
        out: dict[str, float] = {key: int(metrics.get_counter_value(name) or 0) for key, name in NEFF_COUNTERS.items()}
        data = metrics.get_metric_data(NEFF_COMPILE_TIME)  # None before the first NEFF is built
        out["neff_compile_seconds"] = float(data["accumulator"]) / NEFF_COMPILE_TIME_PER_SECOND if data else 0.0
        return out

    def fallback_ops(self) -> list[str]:
        """Ops that ran on the host instead of the NeuronCore since the last call (TorchNeuron's CPU
        fallback: unsupported or failed eager ops run on the CPU silently), read and then cleared so
        the next run starts afresh; [] off Neuron. Sorted: TorchNeuron keeps them in a set."""
        if self._neuronx is None:
            return []
        ops = sorted(str(op) for op in self._neuronx.get_fallback_ops())
        self._neuronx.clear_op_tracking()
        return ops

    def neff_key_fields(self) -> dict[str, Any]:
        """What TorchNeuron puts in every NEFF's cache key besides the program (KernelExecution.cpp,
        captured in neff_cache.json): the chip target, the logical-core config, the compiler's
        optimisation level override and NEURON_CC_FLAGS. A NEFF made with other values misses; the
        compiler's version is not in the key. None off Neuron."""
        if self._neuronx is None:
            return {"neuron_target": None, "lnc": None, "neuron_opt_level": None, "neuron_cc_flags": None}
        utils = importlib.import_module("torch_neuronx.utils")
        return {"neuron_target": str(utils.get_platform_target()), "lnc": int(utils.get_lnc_setting()),
                "neuron_opt_level": os.environ.get("NEURON_COMPILER_OPT_LEVEL") or None,
                "neuron_cc_flags": os.environ.get("NEURON_CC_FLAGS") or ""}

    def compile_snapshot(self) -> dict[str, float]:
        """Counters to diff around a region: dynamo graphs (+ their seconds) and NEFF compiles.

        ``compile_seconds`` is every second spent compiling: dynamo's (tracing, and the backend's
        own work) plus, on Neuron, neuronx-cc's. The neuron backend hands the compile to the first
        execution and returns at once, so dynamo's events leave the compiler out; TorchNeuron's
        metric has it, and the two never overlap."""
        COMPILE_EVENTS.ensure_registered()
        count, seconds = COMPILE_EVENTS.snapshot()
        neff = self.neff_counters()
        return {"graphs": count, "compile_seconds": seconds + neff.get("neff_compile_seconds", 0.0), **neff,
                **self.fxgraph_counters()}

    @staticmethod
    def fxgraph_counters() -> dict[str, int]:
        """Inductor's FX-graph cache lookups so far in this process: a hit skips inductor's compile
        (dynamo still traces the graph); a miss compiles afresh."""
        from torch._dynamo.utils import counters

        inductor = counters.get("inductor", {})
        return {"fxgraph_hits": int(inductor.get("fxgraph_cache_hit", 0)),
                "fxgraph_misses": int(inductor.get("fxgraph_cache_miss", 0))}

    def cache_vars(self) -> tuple[str, ...]:
        """The app-owned compile caches this device uses (both NEFF caches on Neuron)."""
        return device_env.NEURON_CACHE_VARS if self.kind == "neuron" else (device_env.INDUCTOR_CACHE_VAR,)

    def cache_info(self, fresh: bool = False) -> dict[str, Any]:
        """The compile cache folders and their sizes (re-read at most every CACHE_SIZE_TTL s:
        walking a large NEFF cache on every status request would cost more than the status).

        Returns {"bytes": total, "caches": [{"variable", "dir", "bytes"}, ...]} plus the first
        cache's "variable" and "dir" for one-line displays."""
        env = device_env.prepared_environment()
        paths = tuple((var, env.get(var, "")) for var in self.cache_vars())
        now = time.monotonic()
        cached = self._cache_size
        if fresh or cached is None or cached[0] != paths or now - cached[1] > self.CACHE_SIZE_TTL:
            sizes = [device_env.dir_size(path) if path else 0 for _var, path in paths]
            self._cache_size = cached = (paths, now, sizes)
        caches = [{"variable": var, "dir": path, "bytes": size} for (var, path), size in zip(paths, cached[2])]
        return {"variable": caches[0]["variable"], "dir": caches[0]["dir"],
                "bytes": sum(c["bytes"] for c in caches), "caches": caches}

    def cache_plan(self) -> list[dict[str, Any]]:
        """What "clear compile cache" would remove, per cache: its folder, how many entries the
        compile stack wrote there and their bytes. Nothing else is touched."""
        plan = []
        for cache in self.cache_info(fresh=True)["caches"]:
            found = cache_layout.entries(cache_layout.KIND_BY_VARIABLE[cache["variable"]], cache["dir"]) \
                if cache["dir"] else []
            plan.append({**cache, "entries": len(found), "remove_bytes": cache_layout.size(found)})
        return plan

    def clear_caches(self) -> int:
        """Delete what the compile stack wrote in this device's cache folders (its own layout, never
        other files a user keeps there); returns the bytes it removed."""
        removed = 0
        for cache in self.cache_info(fresh=True)["caches"]:
            folder = Path(cache["dir"]).resolve() if cache["dir"] else None
            if folder is None or not folder.is_dir():
                continue
            kind = cache_layout.KIND_BY_VARIABLE[cache["variable"]]
            removed += cache_layout.remove(folder, cache_layout.entries(kind, folder))
        self.cache_info(fresh=True)  # the status shows the emptied folders at once
        return removed
