"""Two-rank tensor-parallel run of the tiny FLUX.2-klein pipeline on the stand-in "neuron" device.

    torchrun --standalone --nproc_per_node=2 tests/neuron/tp_check.py OUT_DIR

(with ``tests/standin`` on PYTHONPATH; ``tests/neuron/standin.py:standin_env`` builds that
environment). Each rank: ``init_process_group("neuron")`` before touching the device, a
``DeviceMesh("neuron", [0, 1])``, the transformer loaded with diffusers'
``TensorParallelConfig(mesh=mesh)`` (weights sliced on the CPU, then moved), the other components
moved to "neuron", one generation. Rank 0 also runs the same call in one process on the CPU and
writes both images and what each rank saw to ``OUT_DIR/rank<N>.json`` / ``images.npz``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

MODEL = Path(__file__).resolve().parents[2] / "assets" / "tiny-flux2-klein"
CALL = dict(prompt="a lighthouse at dusk", height=64, width=64, num_inference_steps=2, output_type="np")


def generate(pipe) -> np.ndarray:
    return pipe(**CALL, generator=torch.Generator("cpu").manual_seed(0)).images[0]


def main(out_dir: Path) -> None:
    from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel
    from diffusers.models._modeling_parallel import TensorParallelConfig
    from torch.distributed.tensor import DTensor

    import torch_neuronx.metrics as metrics  # torch autoloaded the package; metrics is imported apart

    rank = int(os.environ["RANK"])
    report = {"rank": rank, "visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
              "runtime_started_before_init": torch.neuron.is_initialized()}
    dist.init_process_group(backend="neuron")
    report["device_count"] = torch.neuron.device_count()
    mesh = DeviceMesh("neuron", [0, 1])

    transformer = Flux2Transformer2DModel.from_pretrained(
        MODEL, subfolder="transformer", dtype=torch.float32, parallel_config=TensorParallelConfig(mesh=mesh))
    sharded = {name: tuple(p.to_local().shape) for name, p in transformer.named_parameters()
               if isinstance(p, DTensor)}
    report["sharded_params"] = len(sharded)
    report["param_devices"] = sorted({str(p.device) for p in transformer.parameters()})
    pipe = Flux2KleinPipeline.from_pretrained(MODEL, transformer=transformer, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    for name in ("text_encoder", "vae"):
        getattr(pipe, name).to("neuron")
    image = generate(pipe)
    report["neff_compilations"] = metrics.get_counter_value("CompilationCache.TotalCompilations")

    if rank == 0:
        reference = Flux2KleinPipeline.from_pretrained(MODEL, dtype=torch.float32)
        reference.set_progress_bar_config(disable=True)
        np.savez(out_dir / "images.npz", tp=image, single=generate(reference))
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    os._exit(0)  # after DTensor collectives a normal interpreter exit can abort (DESIGN.md)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
