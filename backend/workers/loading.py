"""Phases 2 and 3 of a rank: ``load_sharded`` (the pipeline, its transformer sharded over the mesh;
whole for a replica), ``shard_report`` (what this rank holds, for READY) and ``warm_up`` (the shapes
the app asked for, run before READY)."""

from __future__ import annotations

import os
from typing import Any

from backend.launch import protocol as proto
from backend.workers.distributed import Rank


def load_sharded(cfg: proto.WorkerConfig, me: Rank):
    """The pipeline with its transformer sharded across the mesh (an in-process engine, loaded); a
    replica (``role`` replica, one rank) loads it whole, as the app would in process."""
    from backend.engines.in_process import InProcessEngine

    if cfg.role == "replica":
        engine = InProcessEngine(me.device, cfg.model_path)
        engine.load()
        return engine

    def loader(device, model_path: str):
        import contextlib

        from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel
        from diffusers.models._modeling_parallel import TensorParallelConfig

        from backend.workers.cpu_shim import cpu_tensor_parallel

        shim = cpu_tensor_parallel(device.kind) if device.kind == "cpu" else contextlib.nullcontext()
        with shim:
            transformer = Flux2Transformer2DModel.from_pretrained(
                model_path, subfolder="transformer", dtype=device.dtype,
                parallel_config=TensorParallelConfig(mesh=me.mesh))
        pipe = Flux2KleinPipeline.from_pretrained(model_path, transformer=transformer, dtype=device.dtype)
        for name in ("text_encoder", "vae"):  # the sharded transformer is already placed
            getattr(pipe, name).to(device.info.torch_device)
        return pipe

    engine = InProcessEngine(me.device, cfg.model_path, loader=loader)
    engine.load()
    return engine


def shard_report(module, me: Rank) -> dict[str, Any]:
    """What this rank holds of ``module``: bytes of its local parameters, split into sharded (DTensor
    shards, with global and local shapes and the split dimension) and replicated."""
    from torch.distributed.tensor import DTensor, Shard

    sharded, sharded_bytes, replicated_bytes = [], 0, 0
    for name, param in module.named_parameters():
        if isinstance(param.data, DTensor) or isinstance(param, DTensor):
            tensor = param if isinstance(param, DTensor) else param.data
            local = tensor.to_local()
            dims = [p.dim for p in tensor.placements if isinstance(p, Shard)]
            nbytes = local.numel() * local.element_size()
            if dims:
                sharded.append({"name": name, "global_shape": list(tensor.shape), "local_shape": list(local.shape),
                                "dim": dims[0]})
                sharded_bytes += nbytes
                continue
            replicated_bytes += nbytes
        else:
            replicated_bytes += param.numel() * param.element_size()
    return {"rank": me.rank, "pid": os.getpid(), "core": me.core, "device": me.device.info.torch_device,
            "transformer_bytes": sharded_bytes + replicated_bytes,
            "sharded_bytes": sharded_bytes, "replicated_bytes": replicated_bytes, "sharded": sharded}


def warm_up(cfg: proto.WorkerConfig, run, me: Rank) -> list[dict[str, Any]]:
    """The shapes the app asked the group to warm before READY (settings the app checked)."""
    from backend.request.records import GenerationRequest
    from backend.request.references import blank_references
    from backend.settings import TP_MODE
    from backend.shapes import parse_signature

    stats = []
    for text in cfg.warm:
        shape = parse_signature(text)
        request = GenerationRequest("warm-up", shape.height, shape.width, me.settings.steps, me.settings.guidance,
                                    0, me.settings.runs_as(TP_MODE), count=shape.count,
                                    references=blank_references(shape))
        out = run(request)
        stats.append({"shape": text, "compiles": out.compiles, "compile_seconds": out.compile_seconds,
                      "seconds": out.seconds})
    return stats
