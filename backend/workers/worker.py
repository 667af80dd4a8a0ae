"""A worker group's rank: one process, launched by torchrun, driven over a socket
(docs/tensor-parallel.md; ``backend.launch.group.WorkerGroup`` starts it). By hand::

    NEURON_STUDIO_TP_CONFIG="$(python -c 'from backend.settings import Settings; \\
      from backend.launch.protocol import WorkerConfig; import json; print(WorkerConfig( \\
      settings=Settings(device="cpu", dtype="float32").to_json(), model_path="assets/tiny-flux2-klein", \\
      cores=[], warm=[], socket="/tmp/ns/tp.sock", run_dir="/tmp/ns").to_json())')" \\
    NEURON_STUDIO_TP_TOKEN=$(openssl rand -hex 32) \\
    torchrun --standalone --nproc_per_node=2 --monitor-interval=0.5 -m backend.workers.worker

Each rank logs to ``<run_dir>/rank<N>.log``, counts up in ``<run_dir>/rank<N>.heartbeat`` from a
thread (a rank silent in a compile still beats; a stopped or frozen one does not), exits when the
app's process is gone, then runs its phases: ``init_distributed``, ``load_sharded``, ``warm_up``,
``serve`` (``job_loop``: rank 0 alone talks to the app, ``rank0_server``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from backend.hardware import env as device_env
from backend.launch import protocol as proto
from backend.request.records import GenerationRequest
from backend.settings import TP_MODE, Settings
from backend.shapes import parse_signature
from backend.workers.collectives import Rank, _gather_json, job_bytes
from backend.workers.job_loop import record_exit, serve
from backend.workers.rank0_server import Rank0Server


def _heartbeat(path: str, interval: float) -> None:
    """A compile releases the GIL, so a rank busy in one keeps counting."""
    for count in itertools.count(1):
        with contextlib.suppress(OSError):
            with open(path + ".tmp", "w", encoding="ascii") as handle:
                handle.write(str(count))
            os.replace(path + ".tmp", path)
        time.sleep(interval)


def _watch_parent(pid: int, run_dir: str = "", rank: int = 0, interval: float = 1.0,
                  exit_process=os._exit) -> threading.Thread | None:
    """Exit when the app is gone (vLLM's 'death pipe', by polling its pid), removing the group's run
    dir first: a SIGKILLed app cannot."""
    if not pid:
        return None

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print(f"app process {pid} is gone; exiting", flush=True)
                if run_dir:
                    removed = proto.remove_run_dir(run_dir, attempts=10 if rank == 0 else 2)
                    print(f"run dir {run_dir} {'removed' if removed else 'not removed'}", flush=True)
                exit_process(3)
                return
            except PermissionError:
                pass
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def init_distributed(cfg: proto.WorkerConfig, rank: int, local_rank: int, world: int) -> Rank:
    # Before torch loads: this rank's NeuronCore, and the app's cache variables.
    if cfg.settings["device"] == "neuron":  # rank r claims cores[r] of the core plan (backend.hardware.core_plan)
        os.environ[device_env.VISIBLE_CORES_VAR] = str(cfg.cores[local_rank])
    device_env.prepare_environment(os.path.expanduser(cfg.settings["cache_dir"]), cfg.settings["compile_timeout"])

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from backend.hardware.device import Device, rank_device_info

    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))  # replicas on one CPU share its cores

    settings = Settings.from_json(cfg.settings)
    info = rank_device_info(settings)  # the app's choice; asks the device nothing
    if info.kind == "cuda":
        torch.cuda.set_device(local_rank)
    # Before anything touches the device (TorchNeuron refuses a process group after that); on Neuron
    # the timeout is at least the compile allowance (Settings.collective_seconds; the group set the
    # runtime's NEURON_RT_EXEC_TIMEOUT to match). A replica has no peer: gloo, not TorchNeuron's
    # group, whose init takes a root-comm port replicas started together would race for.
    backend = "gloo" if world == 1 else info.process_group_backend
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=settings.collective_seconds(info.kind)))
    device = Device(info, max_compiled_shapes=settings.max_compiled_shapes)
    device.bind_rank(local_rank)  # the index the runtime gave this rank (neuron:LOCAL_RANK)
    # Jobs and stop votes travel over gloo; an idle group may wait days between requests.
    control = dist.new_group(backend="gloo", timeout=timedelta(days=3650))
    mesh = DeviceMesh(info.kind, list(range(world))) if cfg.role == "tp" else None  # a replica shards nothing
    return Rank(rank, local_rank, world, cfg.cores[local_rank] if cfg.cores else None, settings, device, mesh, control)


def load_sharded(cfg: proto.WorkerConfig, me: Rank):
    """An in-process engine, loaded, its transformer sharded over the mesh (a replica's whole)."""
    from backend.engines.in_process import InProcessEngine

    def sharded(device, model_path: str):
        from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel
        from diffusers.models._modeling_parallel import TensorParallelConfig

        from backend.workers.cpu_shim import cpu_tensor_parallel

        with cpu_tensor_parallel(device.kind) if device.kind == "cpu" else contextlib.nullcontext():
            transformer = Flux2Transformer2DModel.from_pretrained(
                model_path, subfolder="transformer", dtype=device.dtype,
                parallel_config=TensorParallelConfig(mesh=me.mesh))
        pipe = Flux2KleinPipeline.from_pretrained(model_path, transformer=transformer, dtype=device.dtype)
        for name in ("text_encoder", "vae"):  # the sharded transformer is already placed
            getattr(pipe, name).to(device.info.torch_device)
        return pipe

    engine = InProcessEngine(me.device, cfg.model_path, loader=None if cfg.role == "replica" else sharded)
    engine.load()
    return engine


def shard_report(module, me: Rank) -> dict[str, Any]:
    """This rank's bytes of ``module``: sharded (DTensor shards, their shapes and split dimension) and replicated."""
    from torch.distributed.tensor import DTensor, Shard

    sharded, sharded_bytes, replicated_bytes = [], 0, 0
    for name, param in module.named_parameters():
        dtensor = isinstance(param, DTensor)
        local = param.to_local() if dtensor else param.data
        dims = [p.dim for p in param.placements if isinstance(p, Shard)] if dtensor else []
        nbytes = local.numel() * local.element_size()
        if dims:
            sharded.append({"name": name, "global_shape": list(param.shape), "local_shape": list(local.shape),
                            "dim": dims[0]})
            sharded_bytes += nbytes
        else:
            replicated_bytes += nbytes
    return {"rank": me.rank, "pid": os.getpid(), "core": me.core, "device": me.device.info.torch_device,
            "transformer_bytes": sharded_bytes + replicated_bytes,
            "sharded_bytes": sharded_bytes, "replicated_bytes": replicated_bytes, "sharded": sharded}


def warm_up(cfg: proto.WorkerConfig, run, me: Rank) -> list[dict[str, Any]]:
    stats = []
    for text in cfg.warm:
        shape = parse_signature(text)
        request = GenerationRequest.warm_up(shape, me.settings.runs_as(TP_MODE), me.settings.steps,
                                            me.settings.guidance)
        out = run(request)
        stats.append({"shape": text, "compiles": out.compiles, "compile_seconds": out.compile_seconds,
                      "seconds": out.seconds})
    return stats


def main() -> None:
    cfg = proto.WorkerConfig.from_json(os.environ[proto.CONFIG_VAR])
    token = os.environ.pop(proto.TOKEN_VAR, "")
    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    log = open(os.path.join(cfg.run_dir, f"rank{rank}.log"), "a", buffering=1, encoding="utf-8")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    print(f"rank {rank}/{world} starting (pid {os.getpid()})", flush=True)
    _watch_parent(cfg.parent_pid, cfg.run_dir, rank)
    stall = float(cfg.settings.get("tp_stall_timeout") or 60.0)
    threading.Thread(target=_heartbeat, args=(os.path.join(cfg.run_dir, f"rank{rank}.heartbeat"),
                                              max(0.1, min(5.0, stall / 5))), name="heartbeat", daemon=True).start()
    max_job = job_bytes(int(cfg.settings["max_prompt_chars"]), int(cfg.settings.get("max_references", 0)))
    server = Rank0Server(cfg.socket, token.encode(), world, max_job=max_job) if rank == 0 else None
    if server:
        server.pixels = proto.PixelBuffer.attach(cfg.pixels, cfg.pixels_bytes)
    try:
        began = time.perf_counter()
        me = init_distributed(cfg, rank, local_rank, world)
        engine = load_sharded(cfg, me)
        load_seconds = time.perf_counter() - began
        report = shard_report(engine.pipe.transformer, me)
        if server:
            server.state = "warming"

        def vote_stop() -> bool:
            import torch
            import torch.distributed as dist

            flag = torch.tensor([1 if (server and server.cancel.is_set()) else 0], dtype=torch.int64)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=me.control)
            return bool(flag.item())

        def run(request, progress=lambda e: None, forbid_compile=False):
            # Every rank asks the same questions at the same points (before the run, after each
            # step), so the votes stay in step. Only rank 0 decodes; the others stop at the latents.
            return engine.run(request, progress, vote_stop, forbid_compile=forbid_compile, decode=rank == 0)

        warm_began = time.perf_counter()
        warm_stats = warm_up(cfg, run, me)
        reports = _gather_json(report, me)
        if server:
            server.timings = {"load": round(load_seconds, 3), "warm": round(time.perf_counter() - warm_began, 3),
                              "warm_shapes": warm_stats}
            server.ranks = reports
            server.state = "ready"
            server.ready.set()
        print(f"rank {rank} ready: load {load_seconds:.2f} s, {report['transformer_bytes']} transformer bytes "
              f"({len(report['sharded'])} weights sharded)", flush=True)
    except Exception as exc:
        if server:
            server.state, server.error = "failed", f"{type(exc).__name__}: {exc}"
            server.ready.set()
            time.sleep(1.0)  # let a waiting wait_ready read the error before the process ends
        raise
    serve(server, run, me)
    print(f"rank {rank} shutting down", flush=True)
    import torch.distributed as dist

    dist.barrier(group=me.control)
    # After DTensor collectives a normal interpreter exit sometimes aborts; leave at once instead.
    os._exit(0)


def run() -> None:
    """``main``, its exception written to the rank's torchelastic error file (torch's ``record``, here
    so that torch loads after the rank's NeuronCore is set; ``group.death_reason`` reads it)."""
    try:
        main()
    except Exception as exc:
        record_exit(exc)
        raise


if __name__ == "__main__":
    run()
