"""A CPU-backed TEST STAND-IN for TorchNeuron (``torch_neuronx`` 2.13, Neuron SDK 2.33). Not the AWS SDK.

Neuron Studio's tests put ``tests/standin`` on ``PYTHONPATH`` (never installed for users); then
``import torch`` autoloads this package through its ``torch.backends`` entry point, exactly as it
autoloads the real one (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``; then ``import torch_neuronx``).

It *executes* what the app asks of the device, on the CPU, and *enforces* the documented rules, so
wrong app code fails here the way it would on a Trainium instance:

- ``_device``: a real PrivateUse1 device named "neuron" (``torch.device("neuron")``,
  ``tensor.to("neuron")``, ``torch.neuron``); every aten op runs through one fallback on host
  aliases; eager ops compile once per (op, shapes, dtypes); float64 on the device is refused.
- ``_runtime``: the simulated instance's NeuronCores, ``NEURON_RT_VISIBLE_CORES``, the exclusive
  per-process claim taken when the runtime starts (first device use), the fork rule.
- ``_compile`` / ``_neff_cache``: the "neuron" torch.compile backend (no dynamic shapes, one NEFF
  per graph signature, compile failures raise or fall back per
  ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION``) and the NEFF cache on disk.
- ``_distributed``: the "neuron" process-group backend (gloo underneath) with its init rules.
- ``metrics`` (not imported here) / ``_counters``: ``CompilationCache.*`` counters and the
  compile-time metric (nanoseconds); ``get_fallback_ops`` / ``clear_op_tracking``: ops that ran
  on the host (CPU fallback); ``utils``: the chip target and LNC; ``_monitor``: what the stand-in's
  ``neuron-monitor`` reads of each process; ``_attention``: ``scaled_dot_product_attention`` by
  TorchNeuron's kernel rule (the NKI path allocates no score matrix, the fallback all of it);
  ``_memory``: a core's capacity, past which an allocation fails in TorchNeuron's words.

Every text, key and unit the app reads from it is TorchNeuron's own, captured with its source in
``tests/standin/captures/`` (``tests/neuron/test_captures.py`` holds the two to each other).

What it proves: the app drives the device through the documented API in the documented order
(environment before import/start, cores, process group before device use, no fork, no float64,
no dynamic shapes), its pipelines run on a PrivateUse1 device with correct numerics, eager and
compiled, single process and tensor-parallel, and it reads compile counters and cache state right.

What it cannot prove: anything about speed (compile or run times), memory beyond the bytes of
live tensors (the figures count host bytes against a capacity knob; fragmentation and the runtime's
own buffers are not modelled), real compiler limits or numerics of neuronx-cc, op coverage of
the real backend, NKI kernels, collectives over NeuronLink/EFA. ``torch.accelerator.device_count()``
is always 1 here (fixed by PyTorch's Python device guard); ``torch.neuron.device_count()`` is right.

Stand-in-only knobs (the app never reads them): ``NEURON_STANDIN_CORES`` (default 4),
``NEURON_STANDIN_STATE_DIR`` (claim files), ``NEURON_STANDIN_FAIL_COMPILE_DIM`` (fault injection),
``NEURON_STANDIN_FALLBACK_OPS`` (ops that run on the host), ``NEURON_STANDIN_INSTANCE`` (the
instance type, e.g. trn3.3xlarge), ``NEURON_STANDIN_HBM_BYTES`` (a core's memory).
Each module's docstring cites the vendor page for the rules it enforces.
"""

from __future__ import annotations

import os

from . import _attention, _compile, _device, _distributed, _memory, _monitor, _runtime, utils  # noqa: F401 - torch_neuronx.utils, as the real package has it

__version__ = "2.13.0+standin"


def get_fallback_ops() -> list:
    """Ops that ran on the host instead of the NeuronCore since the last ``clear_op_tracking()``
    (TorchNeuron: ``torch_neuronx/__init__.py``, a set of names such as "aten::cumsum")."""
    return _device.fallback_ops()


def get_executed_ops() -> list:
    """Ops that ran on the NeuronCore since the last ``clear_op_tracking()``."""
    return _device.executed_ops()


def clear_op_tracking() -> None:
    """Forget both lists."""
    _device.clear_op_tracking()


def get_device_properties(device):
    """TorchNeuron (``torch_neuronx/__init__.py`` 209-238): the instance type as ``name`` and the
    runtime's memory limit of the core as ``total_memory`` (``_memory.capacity``)."""
    import types

    import torch

    index = int(device.partition(":")[2] or 0) if isinstance(device, str) else int(device)
    if not 0 <= index < torch.neuron.device_count():
        raise ValueError(f"Invalid device id: {index}")
    _runtime.ensure_started()
    return types.SimpleNamespace(name=_runtime.instance_type(), total_memory=_memory.capacity())

# Under torchrun each rank gets NeuronCore LOCAL_RANK unless the launcher chose its cores already
# ("How to use torch.distributed on Neuron",
# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/guides/torch-distributed.html).
if "LOCAL_RANK" in os.environ and _runtime.VISIBLE_CORES_VAR not in os.environ:
    os.environ[_runtime.VISIBLE_CORES_VAR] = os.environ["LOCAL_RANK"]

_device.register()
_attention.register()
_monitor.register()
_compile.register()
_distributed.register()


def _autoload() -> None:
    """The ``torch.backends`` entry point: importing this package already registered everything."""
