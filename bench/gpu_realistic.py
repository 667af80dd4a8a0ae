"""FLUX.2-klein-4B at realistic size on one CUDA GPU, with random weights (no download anywhere).

    python -m bench.gpu_realistic                       # on a CUDA machine: 1024x1024, 4 steps, bf16
    python -m bench.gpu_realistic --device cpu --quick  # checks the script itself on a CPU, tiny sizes

Builds the real transformer and VAE geometry (``embedded.recipe.KLEIN_4B_GEOMETRY``; the text
encoder keeps the real output width but is a narrow stand-in, so its cost is not measured) directly
on the device, runs it through the app's own manager and engine, and measures side by side:
eager, compiled and regional latency (interleaved, median with a 95 % bootstrap interval) and
compile times, peak device memory, and P1 (manager vs a direct pipeline call), P2 (a warm shape
after another vs after itself: compiles and latency) and P3 (device memory with 3 warm compiled
shapes vs 1), with the same method as ``python -m bench`` (``bench/stats.py``). Writes
``bench/results/<date>-<device>-realistic.json``.
Published reference: FLUX.2-klein-4B ~0.57 s at 1024x1024, 4 steps, one H100.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
from pathlib import Path

from bench import RESULTS

REFERENCE = {"model": "FLUX.2-klein-4B", "seconds": 0.57, "size": "1024x1024", "steps": 4, "gpu": "H100"}


def run(device: str, quick: bool, reps: int) -> dict:
    import torch

    from backend.engines.in_process import InProcessEngine
    from backend.hardware.env import prepare_environment
    from backend.serving.manager import Manager
    from backend.settings import Settings
    from backend.shapes import parse_shape
    from bench import stats
    from bench.latency import measure_app_overhead, measure_shape_switch
    from bench.rows import timed_ratio
    from embedded.recipe import KLEIN_4B_GEOMETRY, TinyFluxConfig, build_pipeline

    # --quick checks the script itself: two blocks of each kind (still "repeated" for regional).
    geometry = TinyFluxConfig(num_layers=2, num_single_layers=2) if quick else KLEIN_4B_GEOMETRY
    size, shapes = ("128x128", ["128x128", "160x128", "192x128"]) if quick else \
        ("1024x1024", ["1024x1024", "1152x896", "1216x832"])
    steps = 2 if quick else 4
    with tempfile.TemporaryDirectory(prefix="gpu-realistic-") as name:  # its caches and images, removed after
        tmp = Path(name)
        settings = Settings(device=device, dtype="float32" if device == "cpu" else "bfloat16",
                            compile_backend="aot_eager" if quick else "inductor", cache_dir=tmp / "cache",
                            output_dir=tmp / "out")
        prepare_environment(settings.cache_dir)

        def loader(dev, _path):
            return build_pipeline(geometry, device=dev.info.torch_device, dtype=dev.dtype)

        manager = Manager(settings, engine_factory=lambda dev, path: InProcessEngine(dev, path, loader=loader))
        manager.start()
        try:
            dev = manager.device
            cuda = dev.kind == "cuda"

            def mem() -> int | None:
                return torch.cuda.memory_allocated() if cuda else None

            def request(mode: str, text: str = size):
                shape = parse_shape(text)
                return manager.validate("a red fox in the snow", shape.height, shape.width, steps=steps, seed=0,
                                        mode=mode)

            out: dict = {"date": datetime.date.today().isoformat(), "quick": quick, "size": size, "steps": steps,
                         "dtype": dev.info.dtype, "device": dev.kind,
                         "gpu": torch.cuda.get_device_name() if cuda else None, "torch": torch.__version__,
                         "machine": platform.platform(), "reference": REFERENCE,
                         "transformer_params": sum(p.numel() for p in manager.engine.pipe.transformer.parameters()),
                         "modes": {}}
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            # Steady seconds per mode: each mode compiled first, then the three interleaved (random order).
            runs, first = {}, {}
            for mode in ("eager", "compiled", "regional"):
                req = request(mode)
                first[mode] = manager.generate(req)[1]
                runs[mode] = lambda req=req: (manager.generate(req), dev.synchronize())
            measured = stats.interleaved(runs, reps, seed=0)
            for mode in runs:
                steady = stats.summarise(measured["wall"][mode])
                out["modes"][mode] = {"first_call_s": first[mode].seconds, "compile_s": first[mode].compile_seconds,
                                      "compiles": first[mode].compiles, "steady": steady, "steady_s": steady["median"]}
            out["peak_device_bytes"] = torch.cuda.max_memory_allocated() if cuda else None

            # P1: the app's generate vs a direct call of the same loaded pipeline, interleaved.
            p1 = measure_app_overhead(manager, request("eager"), reps, synchronize=dev.synchronize)
            out["P1"] = timed_ratio(p1, "app", "direct")[0]
            out["P1"]["verdict"] = stats.verdict(out["P1"], stats.Goal.parse("<= 1.01"))[0]

            # P2 and P3: three warm compiled shapes.
            mem_one = None
            requests = [request("compiled", text) for text in shapes]
            for i, req in enumerate(requests):
                manager.generate(req)
                manager.generate(req)
                if i == 0:
                    mem_one = mem()
            mem_three = mem()
            p2, compiles, _calls = measure_shape_switch(manager, requests, reps)
            out["P2_compiles"] = compiles
            out["P2"] = timed_ratio(p2, "after_other", "after_itself")[0]
            out["P2"]["verdict"] = stats.verdict(out["P2"], stats.Goal.parse("<= 1.05"))[0]
            out["P3_device_memory_ratio"] = (mem_three / mem_one) if cuda else None
            out["P3_device_bytes"] = {"one_warm": mem_one, "three_warm": mem_three}
            return out
        finally:
            manager.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the script, not the GPU")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None, help="result file (default bench/results/...)")
    args = parser.parse_args(argv)
    result = run(args.device, args.quick, 3 if args.quick else args.reps)
    path = args.out or RESULTS / f"{result['date']}-{result['device']}-realistic{'-quick' if args.quick else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("device", "gpu", "size", "modes", "P1", "P2_compiles", "P2",
                                              "P3_device_memory_ratio")}, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
