"""Memory with one vs three warm compiled shapes (issue 2's target: three within 10 % of one).

    python -m bench.memory_shapes                       # tiny + bigger config, inductor
    python -m bench.memory_shapes --backend aot_eager   # faster, no generated kernels

Each configuration runs in a fresh subprocess (so neither inherits the other's allocations): load
the pipeline in compiled mode, warm one ~1 MP preset and read RSS, warm two more presets (new
token counts, so new graphs) and read RSS again. RSS is read after gc and malloc_trim so allocator
slack does not count. It also checks that no weight was copied (parameter data pointers unchanged).
Prints one line per configuration and the ratio (one measurement: ``python -m bench --only P3``
repeats it, ``p3_memory``, and gives the interval and the verdict); exits 0 whatever the ratio.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS = {
    "tiny": {},
    # several blocks and wider layers, still CPU-friendly
    "bigger": {"num_layers": 2, "num_single_layers": 6, "attention_head_dim": 32, "num_attention_heads": 8,
               "text_hidden_size": 64, "text_intermediate": 128},
}
SHAPES = ("1024x1024", "1152x896", "1216x832")


def _rss_settled() -> int:
    import psutil

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    return psutil.Process().memory_info().rss


def measure(config: str, backend: str, steps: int, shapes: tuple[str, ...] = SHAPES) -> dict:
    from backend.hardware.env import prepare_environment
    from backend.settings import Settings
    from embedded.recipe import TinyFluxConfig, save_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        from bench import BENCH_MODEL

        model = BENCH_MODEL
        if CONFIGS[config]:
            model = str(save_pipeline(Path(tmp) / config, TinyFluxConfig(**CONFIGS[config])))
        settings = Settings(model=model, device="cpu", dtype="float32", compile_backend=backend,
                            cache_dir=Path(tmp) / "cache")
        prepare_environment(settings.cache_dir)
        from backend.serving.manager import Manager
        from backend.shapes import parse_shape

        mgr = Manager(settings)
        mgr.start()
        params = {n: p.data_ptr() for n, p in mgr.engine.pipe.transformer.named_parameters()}
        n_params = sum(p.numel() for p in mgr.engine.pipe.transformer.parameters())
        rss_loaded = _rss_settled()
        rows = []
        for text in shapes:
            shape = parse_shape(text)
            req = mgr.validate("memory probe", shape.height, shape.width, steps=steps, seed=0, mode="compiled")
            _img, first = mgr.generate(req)
            mgr.generate(req)  # warm run: the shape's steady state
            rows.append({"shape": text, "compiled": first.compiled, "compile_seconds": round(first.compile_seconds, 2),
                         "rss_bytes": _rss_settled()})
        same = params == {n: p.data_ptr() for n, p in mgr.engine.pipe.transformer.named_parameters()}
        one, three = rows[0]["rss_bytes"], rows[-1]["rss_bytes"]
        return {"config": config, "backend": backend, "transformer_params": n_params,
                "rss_loaded_bytes": rss_loaded, "rss_one_warm_bytes": one, "rss_three_warm_bytes": three,
                "ratio_three_to_one": round(three / one, 4), "weights_shared": same, "shapes": rows}


def run_isolated(configs: list[str], backend: str, steps: int, shapes: tuple[str, ...] = SHAPES) -> list[dict]:
    """Measure each config in a fresh subprocess; raises RuntimeError with its stderr on failure."""
    results = []
    for config in configs:
        proc = subprocess.run([sys.executable, "-m", "bench.memory_shapes", "--_child", config, "--backend", backend,
                               "--steps", str(steps), "--shapes", ",".join(shapes)],
                              capture_output=True, text=True, check=False)
        if proc.returncode:
            raise RuntimeError(proc.stderr[-2000:])
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return results


def p3_memory(tmp: Path, quick: bool) -> list[dict]:
    """The suite's P3 rows: RSS with one warm compiled shape, then with three, each repetition in a
    fresh process (``run_isolated``)."""
    from bench import stats
    from bench.rows import make_row

    configs = ["tiny"] if quick else ["tiny", "bigger"]
    shapes = ("256x256", "320x256", "384x256") if quick else SHAPES
    reps = 2 if quick else 3
    rows = []
    for config in configs:
        runs = [run_isolated([config], "aot_eager" if quick else "inductor", 2, shapes)[0] for _ in range(reps)]
        ratio = stats.summarise([r["ratio_three_to_one"] for r in runs])
        growth = stats.summarise([(r["rss_three_warm_bytes"] - r["rss_one_warm_bytes"]) / 2 / 2**20 for r in runs])
        shared = all(r["weights_shared"] for r in runs)
        absolute = {"rss_one_MiB": stats.spread([r["rss_one_warm_bytes"] / 2**20 for r in runs]),
                    "rss_three_MiB": stats.spread([r["rss_three_warm_bytes"] / 2**20 for r in runs]),
                    "weights_shared": shared, "shapes": list(shapes)}
        ratio_row = make_row("P3", f"memory, {config} model: RSS with 3 / 1 warm compiled shapes", ratio, "x",
                             "<= 1.10", None, absolute)
        if not shared:  # a copied weight fails the row whatever the ratio
            ratio_row.update(verdict="fail", note="weights were copied between compiled shapes")
        rows += [ratio_row,
                 make_row("P3", f"memory, {config} model: RSS growth per extra warm compiled shape", growth, "MiB",
                          None, None, {"rss_one_MiB": absolute["rss_one_MiB"]})]
    return rows

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--config", choices=sorted(CONFIGS), action="append")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="three WxH shapes, comma-separated")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        print(json.dumps(measure(args._child, args.backend, args.steps, tuple(args.shapes.split(",")))))
        return 0
    results = run_isolated(args.config or list(CONFIGS), args.backend, args.steps, tuple(args.shapes.split(",")))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'config':<8} {'backend':<10} {'params':>9} {'RSS 1 warm':>11} {'RSS 3 warm':>11} {'ratio':>7} "
          f"{'goal':>6} weights")
    for r in results:
        verdict = "within" if r["ratio_three_to_one"] <= 1.10 else "above"
        print(f"{r['config']:<8} {r['backend']:<10} {r['transformer_params']:>9} "
              f"{r['rss_one_warm_bytes'] / 2**20:>9.1f}Mi {r['rss_three_warm_bytes'] / 2**20:>9.1f}Mi "
              f"{r['ratio_three_to_one']:>7.3f} {'<=1.10':>6} {'shared' if r['weights_shared'] else 'COPIED'} "
              f"[{verdict}]  shapes {', '.join(s['shape'] for s in r['shapes'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
