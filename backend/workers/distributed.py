"""Phase 1 of a rank, ``init_distributed``: its NeuronCore and the app's cache variables before
torch loads, then the process group, the rank's device, a gloo control group and the device mesh;
``Rank`` is what the rank knows about itself afterwards (every later phase takes it)."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from typing import Any

from backend.launch import protocol as proto


@dataclasses.dataclass
class Rank:
    """What one rank knows about itself after ``init_distributed``."""

    rank: int
    local_rank: int
    world: int
    core: int | None
    settings: Any  # backend.settings.Settings
    device: Any  # backend.hardware.device.Device
    mesh: Any  # DeviceMesh
    control: Any  # the gloo process group for jobs and stop votes


def init_distributed(cfg: proto.WorkerConfig, rank: int, local_rank: int, world: int) -> Rank:
    from backend.hardware import env as device_env

    # Before torch loads: this rank's NeuronCore, and the app's cache variables.
    kind = cfg.settings["device"]
    cores = [int(c) for c in cfg.cores]
    os.environ.update(device_env.tp_rank_environment(kind, cores, local_rank))
    device_env.prepare_environment(os.path.expanduser(cfg.settings["cache_dir"]), cfg.settings["compile_timeout"])

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from backend.hardware.device import Device, rank_device_info
    from backend.settings import Settings

    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))  # replicas on one CPU share its cores

    settings = Settings.from_json(cfg.settings)
    info = rank_device_info(settings)  # the app's choice; asks the device nothing
    if info.kind == "cuda":
        torch.cuda.set_device(local_rank)
    # Before anything touches the device (TorchNeuron refuses a process group after that), with a
    # timeout of minutes: a rank stuck in a collective fails the request, not the demo. On Neuron
    # the watchdog's clock starts when a collective is enqueued and eager ops compile one at a time
    # ahead of it, so a cold shape may hold a collective for a whole compile: the timeout is at
    # least the compile allowance there. A replica (one rank) has no peer to talk to: gloo, not
    # TorchNeuron's process group (whose init takes a root-comm port and an NRT barrier, and
    # replicas started together would race for the port).
    timeout = settings.tp_collective_timeout
    if info.kind == "neuron":
        timeout = max(timeout, settings.compile_timeout)
    backend = "gloo" if world == 1 else info.process_group_backend
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
    device = Device(info, max_compiled_shapes=settings.max_compiled_shapes)
    device.bind_rank(local_rank)  # the index the runtime gave this rank (neuron:LOCAL_RANK)
    # Jobs and the per-step stop vote travel over gloo on CPU tensors; an idle group may wait for
    # days between requests.
    control = dist.new_group(backend="gloo", timeout=timedelta(days=3650))
    mesh = DeviceMesh(info.kind, list(range(world))) if cfg.role == "tp" else None  # a replica shards nothing
    return Rank(rank, local_rank, world, cores[local_rank] if cores else None, settings, device, mesh, control)
