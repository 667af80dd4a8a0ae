"""The "neuron" device: PrivateUse1 registration, device tensors, the one op fallback, ``torch.neuron``.

How it works (PyTorch's own recipe for a Python-only backend: ``test/test_privateuseone_python_backend.py``
and ``torch.utils.backend_registration._setup_privateuseone_for_python_backend``):

- PrivateUse1 is renamed "neuron", so ``torch.device("neuron")``, ``tensor.to("neuron")``,
  ``module.to("neuron")`` and ``torch.neuron`` exist.
- A neuron tensor is a real PrivateUse1 tensor whose storage points at host memory; the host
  storage that owns that memory hangs off the neuron storage's Python object, which PyTorch keeps
  alive exactly as long as the storage lives (views made in C++ included).
- ONE fallback kernel, registered for every aten op on PrivateUse1, runs the op on CPU aliases of
  its neuron arguments (same memory, no copy) and hands back neuron tensors: fresh results adopt
  the CPU result's memory, views and in-place results keep the input's neuron storage. It is
  wrapped in ``torch._dynamo.disable`` so dynamo never traces into it; under torch.compile the
  FakeTensor/meta path never reaches it.

Rules enforced here:

- Device use starts the runtime (``_runtime.ensure_started``): claims, the fork rule.
- Eager mode compiles (TorchNeuron "What is TorchNeuron?", eager mode / Adaptive Eager Execution,
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/about-pytorch-neuron.html, and
  "Best practices for TorchNeuron": "ATen op -> ... -> neuronx-cc -> NEFF (cached)",
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/best-practices-pytorch-neuron.html):
  each new (op, input shapes, dtypes) is one NEFF compile in the shared cache (``_neff_cache``);
  a repeat is an in-memory hit. It is silent: no Python code of the caller runs meanwhile, so a
  cold shape can go a long time without finishing a step (``NEURON_STANDIN_EAGER_COMPILE_SECONDS``
  makes each such compile take that long). Metadata-only ops (views, allocation, host<->device copies) do not
  compile. Ops running inside a compiled graph belong to that graph's NEFF and do not compile.
- float64 is refused on the device (creating or computing one raises ``TypeError`` naming
  float64): NeuronCores have no FP64 datapath (Neuron "Data Types",
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/data-types.html;
  NeuronCore-v3 engines list cFP8/FP16/BF16/TF32/FP32,
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/neuron-core-v3.html),
  and diffusers itself lists "neuron" among its FP64-unsupported devices
  (``diffusers/utils/torch_utils.py``, ``_FP64_UNSUPPORTED_DEVICES``). Consequence worth knowing:
  ``print(neuron_tensor)`` raises too, because torch's tensor formatter casts to float64 on the
  tensor's device (it special-cases only MPS and XPU); print ``tensor.cpu()`` instead.
- Under torchrun, after ``init_process_group``, a rank's device is ``neuron:LOCAL_RANK``
  (``_runtime``): ``tensor.to`` / ``module.to`` / ``set_device`` / a factory naming another index
  fails, so a hard-coded ``neuron:0`` breaks rank 1 here as it would on Trainium; ``"neuron"``
  without an index means the rank's own core. Limitation: PyTorch's Python device guard cannot
  report a current device other than 0, so the stand-in's tensors *read* ``neuron:0`` on every
  rank, and an index 0 that torch fills in (below ``Tensor.to``, or in a ``torch.device`` read off
  such a tensor, as diffusers' ``pipe.device`` is) cannot be told from one the caller wrote. So
  index 0 is refused where it is written as text (``"neuron:0"`` given to ``Tensor.to`` or
  ``Module.to``) or given to ``set_device``, any other foreign index everywhere.
- One device per op, as on every PyTorch accelerator: a CPU tensor with dimensions next to a
  neuron tensor raises "Expected all tensors to be on the same device" (0-dim CPU scalars, index
  tensors and copies are allowed), so a component left on the CPU fails here as it would on Trainium.
"""

from __future__ import annotations

import functools
import os
import threading
import types

import torch
from torch.utils._pytree import tree_map

from . import _memory, _neff_cache, _runtime

NEURON: torch.device  # torch.device("neuron", 0), set by register() (the name exists only after the rename)
_CPU = torch.device("cpu")
_CPU_KEY = torch._C.DispatchKey.CPU
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset
_FLOAT64 = (torch.float64, torch.complex128)

# Ops that only touch metadata or move bytes: no NEFF on the real device.
_NO_COMPILE = {
    "aten::empty.memory_format", "aten::empty_strided", "aten::_copy_from", "aten::_copy_from_and_resize",
    "aten::resize_", "aten::_local_scalar_dense", "aten::alias", "aten::detach", "aten::lift_fresh",
    "aten::set_.source_Storage", "aten::set_.source_Storage_storage_offset", "aten::set_.source_Tensor",
    "aten::set_", "aten::is_pinned", "aten::_has_same_storage_numel",
}

# Ops whose default (composite) kernel only raises "not implemented for this backend": the device
# kernel is ours (registered in register()), and the CPU runs the ordinary op.
_HOST_OP = {torch.ops.aten.convolution_overrideable.default: torch.ops.aten.convolution.default}

# Ops (any overload) that accept CPU tensors next to device tensors, as on CUDA: copies and indices.
_MIXED_DEVICES_OK = {"aten::_copy_from", "aten::_copy_from_and_resize", "aten::index", "aten::index_put_",
                     "aten::index_put", "aten::_index_put_impl_"}

EAGER_COMPILE_SECONDS_VAR = "NEURON_STANDIN_EAGER_COMPILE_SECONDS"  # simulated neuronx-cc time per eager op
# Stand-in knob: ops (TorchNeuron's names, "aten::cumsum") that run on the host instead of the device,
# as an unsupported or failed eager op does (CPU fallback), e.g. "aten::cumsum,aten::softmax".
HOST_OPS_VAR = "NEURON_STANDIN_FALLBACK_OPS"
# Ops whose kernels the stand-in builds through TorchNeuron's Python compile path (its
# ``kernels/compiler_subprocess.py``, as for an NKI kernel): the attention's softmax, which every
# attention of the pipeline runs (SDPA decomposes to bmm / _softmax on this device). Their NEFFs
# use the Python path's cache layout (``_neff_cache``), so the app's cache clearing and bundles meet both.
_PYTHON_PATH_OPS = {"aten::_softmax"}
_local = threading.local()
_tracking_lock = threading.Lock()
_fallback_ops: set[str] = set()  # torch_neuronx.get_fallback_ops(): a set in TorchNeuron (NeuronOpTracking.h)
_executed_ops: set[str] = set()


def host_ops() -> set[str]:
    text = os.environ.get(HOST_OPS_VAR, "")
    return {name.strip() for name in text.split(",") if name.strip()}


def _track(ops: set[str], name: str) -> None:
    with _tracking_lock:
        ops.add(name)


def fallback_ops() -> list[str]:
    with _tracking_lock:
        return list(_fallback_ops)


def executed_ops() -> list[str]:
    with _tracking_lock:
        return list(_executed_ops)


def clear_op_tracking() -> None:
    with _tracking_lock:
        _fallback_ops.clear()
        _executed_ops.clear()


def in_compiled_graph() -> bool:
    return getattr(_local, "graph_depth", 0) > 0


class compiled_graph_region:
    """While active, ops are part of a compiled graph's NEFF: no per-op compiles."""

    def __enter__(self):
        _local.graph_depth = getattr(_local, "graph_depth", 0) + 1

    def __exit__(self, *exc):
        _local.graph_depth -= 1


# ---------------------------------------------------------------------------------------------
# Neuron tensors over host memory


def _float64_error(op_name: str) -> TypeError:
    return TypeError(
        f"the neuron device does not support float64 (torch.double): {op_name} would put a float64 "
        f"tensor on the device. NeuronCores have no float64 datapath; keep float64 on the CPU or use "
        f"float32/bfloat16 on the device.")


def _tensor_on(storage, dtype, offset, size, stride) -> torch.Tensor:
    tensor = torch._C._acc.create_empty_tensor([0], dtype)
    _SET_STORAGE._op_dk(_CPU_KEY, tensor, storage, offset, size, stride)
    return tensor


def _check_index(device: torch.device, allow_zero: bool = False) -> None:
    """A bound rank may name only its own index (``allow_zero``: below Tensor.to, where torch's
    own guard writes 0 for an index-less device)."""
    binding = _runtime.rank_binding()
    if binding is not None and device.index is not None and device.index != binding[0] \
            and not (allow_zero and device.index == 0):
        raise _runtime.NeuronRuntimeError(
            f"{device} is not this rank's NeuronCore: after init_process_group, rank LOCAL_RANK={binding[0]} "
            f"owns neuron:{binding[0]} (torch.neuron.current_device()); use that index, or \"neuron\"")


def adopt(cpu: torch.Tensor) -> torch.Tensor:
    """A neuron tensor that takes over ``cpu``'s memory (no copy); ``cpu`` must not be reused."""
    if cpu.dtype in _FLOAT64:
        raise _float64_error("this operation")
    host = cpu.untyped_storage()
    storage = torch._C._construct_storage_from_data_pointer(host.data_ptr(), NEURON, host.nbytes())
    storage._standin_block = _memory.HostBlock(host)
    return _tensor_on(storage, cpu.dtype, cpu.storage_offset(), cpu.shape, cpu.stride())


def host_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same memory as the neuron ``tensor`` (non-owning; not resizable)."""
    storage = tensor.untyped_storage()
    host = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), _CPU, storage.nbytes())
    return torch.empty((0,), dtype=tensor.dtype).set_(host, tensor.storage_offset(), tensor.shape, tensor.stride())


def _resize(tensor: torch.Tensor, size, memory_format=None) -> torch.Tensor:
    size = tuple(size)
    stride = torch.empty(size, device="meta").stride() if size else ()
    numel = 1
    for dim in size:
        numel *= dim
    needed = (tensor.storage_offset() + numel) * tensor.element_size()
    storage = tensor.untyped_storage()
    if needed > storage.nbytes():  # grow: a new host block that keeps the old bytes
        grown = torch.zeros(needed, dtype=torch.uint8)
        old = storage.nbytes()
        if old:
            before = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), _CPU, old)
            grown[:old].copy_(torch.empty((0,), dtype=torch.uint8).set_(before))
        host = grown.untyped_storage()
        storage = torch._C._construct_storage_from_data_pointer(host.data_ptr(), NEURON, host.nbytes())
        storage._standin_block = _memory.HostBlock(host)
    _SET_STORAGE._op_dk(_CPU_KEY, tensor, storage, tensor.storage_offset(), size, stride)
    return tensor


# ---------------------------------------------------------------------------------------------
# The fallback


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}@{value.device.type}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_describe(v) for v in value) + "]"
    if isinstance(value, (bool, int, torch.dtype, torch.memory_format, torch.layout, str)) or value is None:
        return repr(value)  # shape-like and structural arguments are baked into a kernel
    return type(value).__name__  # float scalars and the like are runtime inputs


def _signature(op, args, kwargs) -> str:
    parts = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in sorted(kwargs.items())]
    return f"eager {op.name()}({', '.join(parts)})"


def _check_same_device(name: str, tree) -> None:
    """PyTorch's rule for accelerators: one device per op; only 0-dim CPU tensors (scalars) may join."""
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves(tree):
        if isinstance(leaf, torch.Tensor) and leaf.device.type == "cpu" and leaf.dim() > 0:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, "
                f"neuron:0 and cpu! (when checking arguments for {name})")


def _mutated_inputs(op, args, kwargs) -> list:
    """For each return that aliases a written input (in-place / out=), that input; else None."""
    schema = op._schema
    found = []
    for ret in schema.returns:
        info = ret.alias_info
        match = None
        if info is not None and info.is_write:
            for index, arg in enumerate(schema.arguments):
                if arg.alias_info is not None and arg.alias_info.before_set == info.before_set:
                    match = args[index] if index < len(args) else kwargs.get(arg.name)
                    break
        found.append(match)
    return found


def _fallback(op, *args, **kwargs):
    _runtime.ensure_started()
    name = op.name()  # "aten::add_.Tensor"

    if name.startswith("aten::set_"):
        return op._op_dk(_CPU_KEY, *args, **kwargs)
    if name == "aten::resize_":
        return _resize(*args, **kwargs)
    if kwargs.get("dtype") in _FLOAT64:
        raise _float64_error(name)

    storages = {}  # host data_ptr -> neuron storage: results that alias a device input, or adopted
    host_inputs = set()  # data_ptrs of genuine CPU inputs (never adopted as device memory)
    targets_device = False

    def unwrap(value):
        nonlocal targets_device
        if isinstance(value, torch.Tensor):
            if value.device.type != "neuron":
                host_inputs.add(value.untyped_storage().data_ptr())
                return value
            targets_device = True
            alias = host_alias(value)
            pointer = alias.untyped_storage().data_ptr()
            if pointer:
                storages[pointer] = value.untyped_storage()
            return alias
        if isinstance(value, torch.device) and value.type == "neuron":
            _check_index(value, allow_zero=True)
            targets_device = True
            return _CPU
        return value

    host_args, host_kwargs = tree_map(unwrap, (args, kwargs))
    if targets_device and name.split(".")[0] not in _MIXED_DEVICES_OK:
        _check_same_device(name, (args, kwargs))

    if name in ("aten::_copy_from", "aten::_copy_from_and_resize"):
        src, dst = host_args[0], host_args[1]
        if name.endswith("and_resize") and dst.shape != src.shape:
            _resize(args[1], src.shape)
            dst = host_alias(args[1])
        dst.copy_(src, non_blocking=False)
        return args[1]

    if not in_compiled_graph() and name not in _NO_COMPILE and not op.is_view:
        base = name.split(".")[0]  # "aten::add", as TorchNeuron's op tracking names ops
        if base in host_ops():
            _track(_fallback_ops, base)  # runs on the host below, silently: nothing compiles
        else:
            _track(_executed_ops, base)
            _neff_cache.lookup_or_compile(_signature(op, args, kwargs), kind="eager",
                                          python_path=base in _PYTHON_PATH_OPS,
                                          seconds=_neff_cache.simulated_seconds(EAGER_COMPILE_SECONDS_VAR))

    # out= arguments: the CPU kernel may resize them, which an alias of device memory cannot do.
    # Give it a fresh host tensor, then copy the result into the device tensor (resized to fit).
    outs = {}
    for arg in op._schema.arguments:
        value = kwargs.get(arg.name)
        if (arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write
                and isinstance(value, torch.Tensor) and value.device.type == "neuron"):
            outs[arg.name] = host_kwargs[arg.name] = torch.empty((0,), dtype=value.dtype)

    with torch._C._AutoDispatchBelowAutograd():
        result = _HOST_OP.get(op, op)(*host_args, **host_kwargs)

    for arg_name, produced in outs.items():
        target = kwargs[arg_name]
        if produced.dtype in _FLOAT64:
            raise _float64_error(name)
        if target.shape != produced.shape:
            _resize(target, produced.shape)
        host_alias(target).copy_(produced)

    mutated = _mutated_inputs(op, args, kwargs)

    def rewrap(value):
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu" or not targets_device:
            return value
        if value.dtype in _FLOAT64:
            raise _float64_error(name)
        pointer = value.untyped_storage().data_ptr()
        storage = storages.get(pointer) if pointer else None
        if storage is not None:  # a view of a device input, or a second result over adopted memory
            return _tensor_on(storage, value.dtype, value.storage_offset(), value.shape, value.stride())
        if pointer in host_inputs:  # a CPU argument handed back: copy it to the device
            value = value.clone()
        device_tensor = adopt(value)
        if pointer:
            storages[value.untyped_storage().data_ptr()] = device_tensor.untyped_storage()
        return device_tensor

    if isinstance(result, torch.Tensor) and mutated and mutated[0] is not None:
        return mutated[0]
    if isinstance(result, (tuple, list)) and any(m is not None for m in mutated):
        return type(result)(m if m is not None else rewrap(r) for m, r in zip(mutated, result))
    return tree_map(rewrap, result)


# ---------------------------------------------------------------------------------------------
# torch.neuron and registration


def _make_device_module() -> types.ModuleType:
    from . import _compile  # imported here: _compile imports this module

    module = types.ModuleType("torch.neuron", "TorchNeuron device module (torch_neuronx stand-in).")

    def is_available() -> bool:
        """Whether the instance has NeuronCores for this process. Never starts the runtime, even under
        torchrun: importing diffusers calls ``torch.accelerator.is_available()``, and diffusers' own
        Neuron TP example imports it before ``init_process_group``, which would fail otherwise."""
        if _runtime.rank_binding() is not None:
            return True
        return len(_runtime.visible_cores()) > 0

    def device_count() -> int:
        """NeuronCores this process sees (NEURON_RT_VISIBLE_CORES), or the local world size for a
        bound torchrun rank. Outside torchrun it does not start the runtime; under torchrun before
        init_process_group it does (``_runtime.query``)."""
        _runtime.query()
        binding = _runtime.rank_binding()
        return binding[1] if binding else len(_runtime.visible_cores())

    def current_device() -> int:
        _runtime.query()
        return _runtime.current_index()

    def set_device(device) -> None:
        _runtime.query()
        index = torch.device("neuron", device).index if isinstance(device, int) else torch.device(device).index
        count = device_count()
        if index is not None and not 0 <= index < count:
            raise _runtime.NeuronRuntimeError(
                f"torch.neuron.set_device({device!r}): this process sees {count} NeuronCore(s) "
                f"(indices 0-{count - 1}); NEURON_RT_VISIBLE_CORES decides which")
        if index is not None:
            _check_index(torch.device("neuron", index))

    def synchronize(device=None) -> None:
        _runtime.ensure_started()
        _compile.complete_pending()  # an asynchronous compile finishes (or fails) here at the latest

    def memory_allocated(device=None) -> int:
        _runtime.query()
        return _memory.allocated()

    def max_memory_allocated(device=None) -> int:
        return _memory.peak()

    def reset_peak_memory_stats(device=None) -> None:
        _memory.reset_peak()

    def empty_cache() -> None:
        """Nothing is cached: freed neuron storages return their host memory at once."""

    def get_dynamo_metrics() -> dict:
        return _compile.dynamo_metrics()

    def is_initialized() -> bool:  # a state check, not a device query: it starts nothing
        return _runtime.is_started()

    def get_device_name(device=None) -> str:
        return "NeuronCore (torch_neuronx CPU stand-in)"

    def get_amp_supported_dtype() -> list:
        return [torch.bfloat16, torch.float16]

    def manual_seed_all(seed: int) -> None:
        """Random ops on "neuron" draw from the CPU generator here; torch.manual_seed seeds it."""

    for fn in (is_available, device_count, current_device, set_device, synchronize, memory_allocated,
               max_memory_allocated, reset_peak_memory_stats, empty_cache, get_dynamo_metrics,
               is_initialized, get_device_name, get_amp_supported_dtype, manual_seed_all):
        setattr(module, fn.__name__, fn)
    module.manual_seed = manual_seed_all
    module.is_bf16_supported = lambda including_emulation=True: True
    module._is_in_bad_fork = _runtime.is_bad_fork
    module._lazy_init = _runtime.ensure_started
    return module


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return _runtime.instance_cores() > 0

    def has_primary_context(self, dev_id) -> bool:
        return _runtime.is_started()

    def is_built(self) -> bool:
        return True


_registered = False
_libraries: list = []


def register() -> None:
    global _registered, NEURON
    if _registered:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend("neuron", backend_module=_make_device_module(), hook=_Hooks())
    NEURON = torch.device("neuron", 0)
    from torch import _dynamo

    kernel = _dynamo.disable(_fallback, reason="the neuron stand-in's op fallback")
    every_op = torch.library.Library("_", "IMPL")
    every_op.fallback(kernel, "PrivateUse1")
    overrides = torch.library.Library("aten", "IMPL")
    for op in _HOST_OP:
        overrides.impl(op, functools.partial(kernel, op), "PrivateUse1")
    _libraries.extend([every_op, overrides])
    _check_index_in_to()
    _registered = True


def _check_index_in_to() -> None:
    """``tensor.to("neuron:N")`` on a bound rank must name the rank's own index (see the docstring)."""
    original = torch.Tensor.to

    def to(self, *args, **kwargs):
        if _runtime.rank_binding() is not None and not torch.compiler.is_compiling():
            for value in (*args, *kwargs.values()):
                if isinstance(value, (str, torch.device)) and str(value).startswith("neuron"):
                    _check_index(torch.device(value), allow_zero=not isinstance(value, str))
        return original(self, *args, **kwargs)

    to.__doc__ = original.__doc__
    torch.Tensor.to = to
    module_to = torch.nn.Module.to

    def to_module(self, *args, **kwargs):  # Module.to parses a string to a torch.device first
        if _runtime.rank_binding() is not None:
            for value in (*args, *kwargs.values()):
                if isinstance(value, str) and value.startswith("neuron"):
                    _check_index(torch.device(value))
        return module_to(self, *args, **kwargs)

    to_module.__doc__ = module_to.__doc__
    torch.nn.Module.to = to_module
