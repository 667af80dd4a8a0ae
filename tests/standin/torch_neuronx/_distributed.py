"""The "neuron" torch.distributed backend (stand-in): a Python ProcessGroup over gloo.

Neuron tensors share memory with host aliases, so gloo runs each collective on the aliases and the
results land in the device tensors. Collectives complete before they return (a Work that is
already done), and gloo is built with the ``timeout`` given to ``init_process_group``, so a rank
left waiting raises after that timeout. The methods are the ones PyTorch's Python-ProcessGroup
trampoline dispatches to (``torch/testing/_internal/distributed/multi_threaded_pg.py`` is the model),
which covers ``dist.*`` collectives, DeviceMesh/DTensor and the ``_c10d_functional`` ops.

Rules enforced, from "How to use torch.distributed on Neuron"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/guides/torch-distributed.html) and the
Neuron Runtime configuration guide 2.33
(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/neuron-runtime/guides/configuration-guide.html):

- ``init_process_group(backend="neuron")`` must come before the process touches the device: if
  this process's runtime already started, it raises.
- Under torchrun, TorchNeuron sets ``NEURON_RT_VISIBLE_CORES=LOCAL_RANK`` when it is unset (done at
  package import, in ``__init__``), and each rank must see exactly one NeuronCore: more is an error.
- Creating the world group starts the rank's runtime, which reserves its core (so a core another
  process holds fails here, naming the holder), and binds the rank: afterwards
  ``torch.neuron.current_device()`` is LOCAL_RANK and ``device_count()`` the local world size.
- A collective can fail on the device (a NeuronLink/EFA or runtime error, reported by the Neuron
  collectives library, not by gloo or NCCL): the communicator is then suspect and the rank must not
  serve on. Stand-in knob ``NEURON_STANDIN_FAIL_COLLECTIVE=<path>``: when that file exists and holds
  this process's rank, the next collective removes it and raises ``NeuronCollectiveError``.
- Under torchrun, a ``torch.neuron`` query before ``init_process_group`` (``device_count``,
  ``current_device``, ``set_device``, ``synchronize``, memory) starts the runtime, so the init that
  follows fails (diffusers' own Neuron TP example touches nothing before it). ``is_available`` is
  the exception: diffusers' import calls it (``torch.accelerator.is_available()``) before that
  example's init, so it cannot start anything.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from . import _device, _runtime

FAIL_COLLECTIVE_VAR = "NEURON_STANDIN_FAIL_COLLECTIVE"


class NeuronCollectiveError(RuntimeError):
    """A collective failed on the Neuron device (injected by NEURON_STANDIN_FAIL_COLLECTIVE)."""


def _host(value):
    """Host aliases for neuron tensors, through lists; everything else unchanged."""
    if isinstance(value, torch.Tensor):
        return _device.host_alias(value) if value.device.type == "neuron" else value
    if isinstance(value, (list, tuple)):
        return type(value)(_host(v) for v in value)
    return value


class NeuronProcessGroup(dist.ProcessGroup):
    """A process group for "neuron" tensors, carried by gloo on their host memory."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self._rank, self._size, self.timeout = rank, size, timeout
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._group_name = self._group_desc = ""

    def _run(self, name: str, *args):
        self._maybe_fail(name)
        work = getattr(self._gloo, name)(*(_host(a) for a in args))
        work.wait()  # raises when a peer does not join within the group's timeout
        return work

    def _maybe_fail(self, name: str) -> None:
        path = os.environ.get(FAIL_COLLECTIVE_VAR)
        if not path:
            return
        try:
            with open(path, encoding="ascii") as handle:
                target = handle.read().strip()
        except OSError:
            return
        if target == str(self._rank):
            os.unlink(path)
            raise NeuronCollectiveError(
                f"NRT: collective {name} failed on rank {self._rank} of {self._size}: NCCOM_ERR_TIMEOUT waiting "
                f"for peers over NeuronLink (stand-in fault injected by {FAIL_COLLECTIVE_VAR})")

    # collectives (C++ passes the options object; the defaults serve direct Python calls)
    def allreduce(self, tensors, opts=None):
        return self._run("allreduce", tensors, opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors, opts=None):
        return self._run("allreduce_coalesced", tensors, opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors, opts=None):
        return self._run("broadcast", tensors, opts or dist.BroadcastOptions())

    def allgather(self, output_lists, inputs, opts=None):
        return self._run("allgather", output_lists, inputs, opts or dist.AllgatherOptions())

    def _allgather_base(self, output, input, opts=None):
        return self._run("_allgather_base", output, input, opts or dist.AllgatherOptions())

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        work = None
        for output, input in zip(outputs, inputs):
            work = self._allgather_base(output, input, opts)
        return work

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        return self._run("reduce_scatter", outputs, input_lists, opts or dist.ReduceScatterOptions())

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._run("_reduce_scatter_base", output, input, opts or dist.ReduceScatterOptions())

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        work = None
        for output, input in zip(outputs, inputs):
            work = self._reduce_scatter_base(output, input, opts)
        return work

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def reduce(self, tensors, opts=None):
        return self._run("reduce", tensors, opts or dist.ReduceOptions())

    def gather(self, output_lists, inputs, opts=None):
        return self._run("gather", output_lists, inputs, opts or dist.GatherOptions())

    def scatter(self, outputs, input_lists, opts=None):
        return self._run("scatter", outputs, input_lists, opts or dist.ScatterOptions())

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._run("alltoall_base", output, input, output_split_sizes, input_split_sizes,
                         opts or dist.AllToAllOptions())

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def barrier(self, opts=None):
        return self._run("barrier", opts or dist.BarrierOptions())

    def send(self, tensors, dst, tag):
        return self._run("send", tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self._run("recv", tensors, src, tag)

    # identity
    def size(self) -> int:
        return self._size

    def getSize(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank

    def getRank(self) -> int:
        return self._rank

    def getBackendName(self) -> str:
        return "neuron"

    def name(self) -> str:
        return "neuron"

    def setGroupName(self, name: str) -> None:
        self._group_name = name

    def getGroupName(self) -> str:
        return self._group_name

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc = desc

    def getGroupDesc(self) -> str:
        return self._group_desc

    def __repr__(self) -> str:
        return f"NeuronProcessGroup(rank={self._rank}, size={self._size}, timeout={self.timeout})"


def _create(store, rank: int, size: int, timeout: datetime.timedelta) -> NeuronProcessGroup:
    if not dist.is_initialized():  # the world group, made by init_process_group
        if _runtime.is_started() and not _runtime.started_for_process_group():
            raise _runtime.NeuronRuntimeError(
                "init_process_group(backend='neuron') was called after this process had already used "
                "the Neuron device (its runtime started before the process group existed). Under "
                "torchrun, call init_process_group(backend='neuron') before touching the device.")
        cores = _runtime.requested_cores()
        if len(cores) != 1:
            text = f"{_runtime.VISIBLE_CORES_VAR}={os.environ.get(_runtime.VISIBLE_CORES_VAR)!r}"
            raise _runtime.NeuronRuntimeError(
                f"init_process_group(backend='neuron'): rank {rank} sees {len(cores)} NeuronCores "
                f"({_runtime.describe(cores)}; {text}), but each rank must own exactly one NeuronCore. "
                f"Give each rank its own core in {_runtime.VISIBLE_CORES_VAR} (TorchNeuron sets it to "
                f"LOCAL_RANK under torchrun when it is unset).")
        _runtime.ensure_started(for_process_group=True)
        _runtime.bind_rank(size)
    return NeuronProcessGroup(store, rank, size, timeout)


_registered = False


def register() -> None:
    global _registered
    if _registered or "NEURON" in dist.Backend._plugins:
        _registered = True
        return
    dist.Backend.register_backend("neuron", _create, devices=["neuron"])
    _registered = True
