"""The device: everything that differs between neuron, cuda and cpu (choice, dtype, compile and
process-group backends, synchronising, memory, compile counters, host fallbacks, compile caches). No
module outside ``backend.hardware`` names ``torch_neuronx`` or ``torch.neuron``.

TorchNeuron facts it respects: importing ``torch_neuronx`` registers the ``"neuron"`` device, compile
backend and ``torch.neuron``; with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` it must be imported explicitly,
after its cache variables are set (``backend.hardware.env``); ``torch_neuronx.metrics`` is a
submodule the package does not import (``load_torch_neuronx`` does).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import torch
import torch._dynamo

from backend.core_lists import NO_CORES, check_on_instance
from backend.errors import DeviceUnavailable
from backend.hardware import cache_layout
from backend.hardware import env as device_env
from backend.hardware.core_plan import CorePlan, default_app_cores, make_plan
from backend.hardware.kernels import neuron_installed
from backend.hardware.memory import hbm_per_core
from backend.hardware.metrics import COMPILE_EVENTS, NEFF_COMPILE_TIME, NEFF_COMPILE_TIME_PER_SECOND, NEFF_COUNTERS
from backend.hardware.neuron_ls import InstanceCores, detect_instance_cores
from backend.settings import Settings

PROCESS_GROUP_BACKENDS = {"neuron": "neuron", "cuda": "nccl", "cpu": "gloo"}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_torch_neuronx():
    if not neuron_installed():
        return None
    if not device_env.prepared_environment():
        raise RuntimeError("backend.hardware.env.prepare_environment() must run before TorchNeuron loads")
    module = importlib.import_module("torch_neuronx")  # with autoload on, a lookup
    importlib.import_module("torch_neuronx.metrics")
    return module


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
    """``--device`` (auto: neuron if a NeuronCore is visible, else cuda, else cpu, saying why);
    DeviceUnavailable when an explicit one is missing."""
    device_env.prepare_environment(settings.cache_dir, settings.compile_timeout)
    installed = neuron_installed()
    neuronx = load_torch_neuronx() if installed and settings.device in ("auto", "neuron") else None
    neuron = getattr(torch, "neuron", None)
    cores = int(neuron.device_count()) if neuronx is not None and neuron is not None and neuron.is_available() else 0
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0

    wanted = settings.device
    if wanted == "neuron":
        if not installed:
            raise DeviceUnavailable("--device neuron: TorchNeuron (torch-neuronx) is not installed; "
                                    "see the README section 'Running on Trainium'")
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
        kind, reason = (("cuda", f"auto: {why}; {cuda} CUDA device(s)") if cuda
                        else ("cpu", f"auto: {why}, no CUDA device"))

    dtype = settings.dtype if settings.dtype != "auto" else "float32" if kind == "cpu" else "bfloat16"
    info = _info(settings, kind, reason, dtype, installed, cores, cuda)
    known = torch._dynamo.list_backends(exclude_tags=())
    if info.compile_backend not in known:
        raise DeviceUnavailable(f"--compile-backend {info.compile_backend}: not a registered torch.compile backend "
                                f"(available: {', '.join(sorted(known))})")
    return info


def _info(settings: Settings, kind: str, reason: str, dtype: str, installed: bool, cores: int, cuda: int) -> DeviceInfo:
    neuron = kind == "neuron"
    return DeviceInfo(
        kind=kind, reason=reason, torch_device=kind, dtype=dtype,
        compile_backend=settings.compile_backend or ("neuron" if neuron else "inductor"),
        process_group_backend=PROCESS_GROUP_BACKENDS[kind], neuron_installed=installed, neuron_cores=cores,
        cuda_devices=cuda, neuron_visible_cores=os.environ.get(device_env.VISIBLE_CORES_VAR) if neuron else None,
        neuron_fallback=os.environ.get(device_env.FALLBACK_VAR) if neuron else None)


def rank_device_info(settings: Settings) -> DeviceInfo:
    """A rank's device as the app resolved it (in ``settings``), asking the device nothing: under
    torchrun any ``torch.neuron`` query before ``init_process_group("neuron")`` starts the runtime
    and the init then fails; the rank learns its index after it (``Device.bind_rank``)."""
    device_env.prepare_environment(settings.cache_dir, settings.compile_timeout)
    kind = settings.device
    if kind not in ("neuron", "cuda", "cpu"):
        raise DeviceUnavailable(f"a tensor-parallel rank needs the app's resolved device, got {kind!r}")
    neuron = kind == "neuron"
    if neuron:
        load_torch_neuronx()  # registers the backend; starts nothing
    return _info(settings, kind, "tensor-parallel rank: the device the app chose", settings.dtype, neuron,
                 1 if neuron else 0, 0)


def compiler_on_path() -> dict[str, Any]:
    """``{"path", "version"}`` of the ``neuronx-cc`` on PATH (TorchNeuron runs it by name: execvp)."""
    path = shutil.which("neuronx-cc")
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
    """The chosen device and the operations that differ per device."""

    CACHE_SIZE_TTL = 10.0  # seconds; every open page asks for the status each second

    def __init__(self, info: DeviceInfo, max_compiled_shapes: int = 32, instance_cores: int | None = None):
        self.info = info
        self._instance_cores = instance_cores
        self._core_plan = None
        self._cache_size: tuple | None = None  # ((var, dir) pairs, read at, [bytes])
        self._hbm: int | None = None
        self.dtype = _DTYPES[info.dtype]
        self._neuronx = load_torch_neuronx() if info.kind == "neuron" else None
        # With dynamic=False each new token count recompiles, and past dynamo's limit (8) a shape raises
        # or runs eager: the limit is raised past ``max_compiled_shapes``, which the manager enforces.
        config = torch._dynamo.config
        config.recompile_limit = max(max_compiled_shapes + 1, config.recompile_limit)
        config.accumulated_recompile_limit = max(4 * (max_compiled_shapes + 1), config.accumulated_recompile_limit)

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def core_plan(self):
        """On Neuron, the NeuronCore plan (this process's cores are its NEURON_RT_VISIBLE_CORES,
        set before torch loaded); None elsewhere."""
        if self.kind != "neuron":
            return None
        if self._core_plan is None:
            instance = detect_instance_cores(self._instance_cores)
            own = device_env.app_cores() or default_app_cores(instance)
            try:
                self._core_plan = make_plan(own, instance)
            except ValueError as exc:
                # Kept, not raised on every status poll: every engine's start is refused with it.
                self._core_plan = CorePlan(InstanceCores(None, source=f"unknown: {exc}"),
                                           tuple(check_on_instance(own, None)))
        return self._core_plan

    @property
    def holds_cores(self) -> bool:
        """False where this process claimed no NeuronCore (``--neuron-cores none``): it must never
        start its runtime, which would then reserve every core, the engines' included."""
        return self.kind != "neuron" or device_env.app_cores() != NO_CORES

    def bind_rank(self, local_rank: int) -> None:
        """After ``init_process_group``: on Neuron the index TorchNeuron bound the rank to (LOCAL_RANK),
        never a hard-coded 0."""
        if self.kind == "neuron":
            index = int(torch.neuron.current_device())
            if index != local_rank:
                raise DeviceUnavailable(f"rank with LOCAL_RANK {local_rank} is bound to neuron:{index} after "
                                        f"init_process_group; expected neuron:{local_rank}")
            self.info.torch_device = f"neuron:{index}"
        elif self.kind == "cuda":
            self.info.torch_device = f"cuda:{local_rank}"

    @property
    def eager_compiles(self) -> bool:
        """On Neuron even eager mode compiles each new (op, shape, dtype) once."""
        return self.kind == "neuron"

    def compile_kwargs(self) -> dict[str, Any]:
        # dynamic=False: Neuron rejects dynamic shapes; one graph per image-token count.
        # fullgraph=True: a graph break would split work between device graphs and the host.
        return {"backend": self.info.compile_backend, "fullgraph": True, "dynamic": False}

    @staticmethod
    def reset_compiled() -> None:
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
        elif self.kind == "neuron" and self.holds_cores:
            allocated, peak = torch.neuron.memory_allocated(), torch.neuron.max_memory_allocated()
        return {"rss_bytes": rss, "device_allocated_bytes": allocated, "device_peak_bytes": peak}

    def hbm_bytes(self) -> int | None:
        """One NeuronCore's memory: the runtime's limit for this process's core
        (``get_device_properties(...).total_memory``: attention.json), else the chip's share
        (``backend.hardware.memory.CHIPS``); None off Neuron."""
        if self.kind != "neuron":
            return None
        if self._hbm is None:
            index = self.info.torch_device.partition(":")[2] or "0"
            total = int(self._neuronx.get_device_properties(int(index)).total_memory or 0) if self.holds_cores else 0
            key = self.neff_key_fields()
            self._hbm = total or hbm_per_core(key["neuron_target"], key["lnc"])
        return self._hbm

    def executed_ops(self) -> list[str]:
        """Ops TorchNeuron ran on the NeuronCore since the last ``fallback_ops()``, which clears both
        lists (read this first); [] off Neuron (``torchneuron/executed_ops_and_peak.json``)."""
        return [] if self._neuronx is None else sorted(str(op) for op in self._neuronx.get_executed_ops())

    def reset_peak(self) -> None:
        """Start a run's peak device memory afresh (``torch.neuron.reset_peak_memory_stats``)."""
        if self.kind in ("cuda", "neuron"):
            getattr(torch, self.kind).reset_peak_memory_stats()

    def peak_bytes(self) -> int | None:
        """The device memory's peak since ``reset_peak`` (None off an accelerator)."""
        return int(getattr(torch, self.kind).max_memory_allocated()) if self.kind in ("cuda", "neuron") else None

    def fallback_ops(self) -> list[str]:
        """Ops TorchNeuron ran on the host (silently) since the last call, which clears them; [] off
        Neuron. Sorted: TorchNeuron keeps a set."""
        if self._neuronx is None:
            return []
        ops = sorted(str(op) for op in self._neuronx.get_fallback_ops())
        self._neuronx.clear_op_tracking()
        return ops

    def neff_key_fields(self) -> dict[str, Any]:
        """What TorchNeuron puts in every NEFF's cache key besides the program (KernelExecution.cpp,
        captured in neff_cache.json); the compiler's version is not in it. None off Neuron."""
        if self._neuronx is None:
            return {"neuron_target": None, "lnc": None, "neuron_opt_level": None, "neuron_cc_flags": None}
        utils = importlib.import_module("torch_neuronx.utils")
        return {"neuron_target": str(utils.get_platform_target()), "lnc": int(utils.get_lnc_setting()),
                "neuron_opt_level": os.environ.get("NEURON_COMPILER_OPT_LEVEL") or None,
                "neuron_cc_flags": os.environ.get("NEURON_CC_FLAGS") or ""}

    def compile_snapshot(self) -> dict[str, float]:
        """Counters to diff around a region. ``compile_seconds`` is dynamo's plus neuronx-cc's: the
        neuron backend compiles at the first execution, outside dynamo's events, so they never overlap."""
        COMPILE_EVENTS.ensure_registered()
        count, seconds = COMPILE_EVENTS.snapshot()
        neff: dict[str, float] = {}  # TorchNeuron's NEFF cache counters and the compiler's seconds
        if self._neuronx is not None:
            metrics = importlib.import_module("torch_neuronx.metrics")
            neff = {key: int(metrics.get_counter_value(name) or 0) for key, name in NEFF_COUNTERS.items()}
            data = metrics.get_metric_data(NEFF_COMPILE_TIME)  # None before the first NEFF is built
            neff["neff_compile_seconds"] = float(data["accumulator"]) / NEFF_COMPILE_TIME_PER_SECOND if data else 0.0
        inductor = torch._dynamo.utils.counters.get("inductor", {})  # FX-graph cache lookups in this process
        return {"graphs": count, "compile_seconds": seconds + neff.get("neff_compile_seconds", 0.0), **neff,
                "fxgraph_hits": int(inductor.get("fxgraph_cache_hit", 0)),
                "fxgraph_misses": int(inductor.get("fxgraph_cache_miss", 0))}

    def cache_vars(self) -> tuple[str, ...]:
        return device_env.NEURON_CACHE_VARS if self.kind == "neuron" else (device_env.INDUCTOR_CACHE_VAR,)

    def cache_info(self, fresh: bool = False) -> dict[str, Any]:
        """{"bytes", "caches": [{"variable", "dir", "bytes"}], and the first's "variable" and "dir"},
        walked at most every CACHE_SIZE_TTL s (a large NEFF cache costs more than the status)."""
        env = device_env.prepared_environment()
        paths = tuple((var, env.get(var, "")) for var in self.cache_vars())
        now = time.monotonic()
        cached = self._cache_size
        if fresh or cached is None or cached[0] != paths or now - cached[1] > self.CACHE_SIZE_TTL:
            self._cache_size = cached = (paths, now, [device_env.dir_size(path) if path else 0 for _var, path in paths])
        caches = [{"variable": var, "dir": path, "bytes": size} for (var, path), size in zip(paths, cached[2])]
        return {"variable": caches[0]["variable"], "dir": caches[0]["dir"],
                "bytes": sum(c["bytes"] for c in caches), "caches": caches}

    def cache_plan(self) -> list[dict[str, Any]]:
        """What "clear compile cache" would remove, per cache: its entries and their bytes."""
        plan = []
        for cache in self.cache_info(fresh=True)["caches"]:
            found = cache_layout.entries(cache_layout.KIND_BY_VARIABLE[cache["variable"]], cache["dir"]) \
                if cache["dir"] else []
            plan.append({**cache, "entries": len(found), "remove_bytes": cache_layout.size(found)})
        return plan

    def clear_caches(self) -> int:
        """Delete what the compile stack wrote in the cache folders (``cache_layout``); returns bytes."""
        removed = 0
        for cache in self.cache_info(fresh=True)["caches"]:
            if cache["dir"]:
                folder = Path(cache["dir"]).resolve()
                removed += cache_layout.remove(folder, cache_layout.entries(
                    cache_layout.KIND_BY_VARIABLE[cache["variable"]], folder))
        self.cache_info(fresh=True)  # the status shows the emptied folders at once
        return removed
