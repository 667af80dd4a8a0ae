"""Tensor-parallel worker: one process per rank, launched by torchrun, driven over a socket.

The app starts it for you (``backend.launch.group.WorkerGroup``: a tensor-parallel group,
or with ``role`` replica one rank of the replica pool that loads the whole pipeline); by hand it is::

    NEURON_STUDIO_TP_CONFIG="$(python -c 'from backend.settings import Settings; \\
      from backend.launch.protocol import WorkerConfig; import json; print(WorkerConfig( \\
      settings=Settings(device="cpu", dtype="float32").to_json(), model_path="assets/tiny-flux2-klein", \\
      cores=[], warm=[], socket="/tmp/ns/tp.sock", run_dir="/tmp/ns").to_json())')" \\
    NEURON_STUDIO_TP_TOKEN=$(openssl rand -hex 32) \\
    torchrun --standalone --nproc_per_node=2 --monitor-interval=0.5 -m backend.workers.worker

Phases, as vLLM's worker names them:

1. ``init_distributed`` — before torch loads, (on Neuron) claim NeuronCore ``cores[LOCAL_RANK]`` from
   the app's core plan and set the app's cache variables; then initialise the process group
   (neuron / nccl / gloo, the device the app chose, with the collective timeout from the settings)
   before anything asks the device anything (under torchrun any ``torch.neuron`` query starts the
   Neuron runtime, and the init would then fail); only then the rank's device index (on Neuron
   ``torch.neuron.current_device()``, which TorchNeuron has made LOCAL_RANK), a gloo control
   group, and ``DeviceMesh(device, range(N))``;
2. ``load_sharded`` — the transformer with ``from_pretrained(..., parallel_config=
   TensorParallelConfig(mesh=mesh))``, the other components whole on the rank's device; each rank
   then reports what it holds (``shard_report``: parameter bytes, which weights are DTensor shards
   and their global and local shapes);
3. ``warm_up`` — compile (eager / compiled / regional, the in-process engine's modes) and run the
   configured shapes;
4. ``serve`` — rank 0 alone talks to the outside: it serves the Unix socket (0600 in a private
   directory; ``backend.launch.protocol``), answers health/cancel at once from a connection thread, and
   hands generate/shutdown jobs to its main loop, which broadcasts each job to every rank as JSON
   bytes over the control group (nothing is pickled). All ranks run the same pipeline call; at
   every step they agree (an all-reduce) on whether to stop, so a cancel never leaves a rank behind
   in a collective. Rank 0 streams step progress and returns the pixels.

Each rank writes its output to ``<run_dir>/rank<N>.log``, beats a heartbeat counter into
``<run_dir>/rank<N>.heartbeat`` from a thread (so the app can tell a rank that is silent because it
compiles from one that is stopped or frozen), and exits when the app's process is gone.

A failed request is answered and the group serves on, except where the failure may have left a
collective half done: a broken gloo/NCCL collective, and on Neuron any exception raised after the
job reached every rank (a Neuron collective error does not say it is one). Then the rank answers
with ``group_ending`` and exits; the app restarts the group. A cancel (agreed by every rank at a
step boundary) and a warm-only refusal (the same graphs on every rank) are not such failures.

This module is the entry point (``main`` strings the phases together); each phase is a module of
its own: ``rank_process`` (the log, heartbeat and parent watch), ``distributed`` (1), ``loading``
(2 and 3), ``job_loop`` (4) with ``rank0_server`` (rank 0's socket) and ``collectives`` (the
control group's broadcasts and gathers).
"""

from __future__ import annotations

import os
import time

from backend.launch import protocol as proto
from backend.workers.collectives import _gather_json, job_bytes
from backend.workers.distributed import init_distributed
from backend.workers.job_loop import record_exit, serve
from backend.workers.loading import load_sharded, shard_report, warm_up
from backend.workers.rank0_server import Rank0Server
from backend.workers.rank_process import _heartbeat, _redirect_output, _watch_parent


def main() -> None:
    cfg = proto.WorkerConfig.from_json(os.environ[proto.CONFIG_VAR])
    token = os.environ.pop(proto.TOKEN_VAR, "")
    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    _redirect_output(cfg.run_dir, rank)
    print(f"rank {rank}/{world} starting (pid {os.getpid()})", flush=True)
    _watch_parent(cfg.parent_pid, cfg.run_dir, rank)
    stall = float(cfg.settings.get("tp_stall_timeout") or 60.0)
    _heartbeat(cfg.run_dir, rank, max(0.1, min(5.0, stall / 5)))
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
    """``main``, with an exception that ends the rank written to its torchelastic error file (what
    torch's ``record`` decorator does; applied here so that torch loads only after the rank's
    NeuronCore is set): the app tells why a rank died from it (``backend.launch.deaths``)."""
    try:
        main()
    except Exception as exc:
        record_exit(exc)
        raise


if __name__ == "__main__":
    run()
