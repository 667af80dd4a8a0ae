"""Rows on the first image's wait, each side in a fresh app process: the cold compile of the
repeated blocks against the whole transformer at FLUX.2-klein-4B's block counts (P5), a second
process finding the first one's compile cache (P7), and a process starting from an imported cache
bundle against one with none (P10)."""

from __future__ import annotations

import random
from pathlib import Path

from bench import BENCH_MODEL, stats
from bench.harness import app_cli, child_compile, child_first_image
from bench.rows import make_row

REAL_BLOCKS = {"num_layers": 5, "num_single_layers": 20}  # FLUX.2-klein-4B's block counts


# P5 -------------------------------------------------------------------------------------------
def p5_regional_warmup(tmp: Path, quick: bool) -> list[dict]:
    """Cold compile time of the whole transformer and of its repeated blocks, at FLUX.2-klein-4B's
    block counts, each in a fresh process with a fresh cache; the pairs in a random order."""
    from embedded.recipe import TinyFluxConfig, save_pipeline

    model = str(save_pipeline(tmp / "real-blocks", TinyFluxConfig(**REAL_BLOCKS)))
    backend, reps = "aot_eager" if quick else "inductor", 3
    seconds: dict[str, list[float]] = {"compiled": [], "regional": []}
    cpu: dict[str, list[float]] = {"compiled": [], "regional": []}
    for i in range(reps):
        for mode in random.Random(i).sample(["compiled", "regional"], 2):
            compile_s, child_cpu = child_compile(model, mode, backend, "256x256", tmp / f"c-{mode}-{i}")
            seconds[mode].append(compile_s)
            cpu[mode].append(child_cpu)
    ratio = stats.summarise(stats.ratios(seconds["regional"], seconds["compiled"]))
    return [make_row("P5", f"warm-up, real block counts (5+20), {backend}: regional / whole-transformer compile "
                           "time", ratio, "x", "<= 0.5", None,
                     {"whole_s": stats.spread(seconds["compiled"]), "regional_s": stats.spread(seconds["regional"]),
                      "whole_process_cpu_s": stats.spread(cpu["compiled"]),
                      "regional_process_cpu_s": stats.spread(cpu["regional"])})]


# P7 -------------------------------------------------------------------------------------------
def p7_persistent_cache(tmp: Path, quick: bool) -> list[dict]:
    """A cold compile in a fresh process and cache, then the same shape in a second process that
    finds the first one's cache; repeated with a new cache each time."""
    cold, warm, cold_cpu, warm_cpu = [], [], [], []
    for i in range(2 if quick else 3):
        cache = tmp / f"p7-cache-{i}"
        for seconds, cpu in ((cold, cold_cpu), (warm, warm_cpu)):
            compile_s, child_cpu = child_compile(BENCH_MODEL, "compiled", "inductor", "256x256", cache)
            seconds.append(compile_s)
            cpu.append(child_cpu)
    speedup = stats.summarise(stats.ratios(cold, warm))
    return [make_row("P7", "persistent cache: cold compile / second-process compile (inductor, same shape)", speedup,
                     "x faster", ">= 3", None,
                     {"cold_s": stats.spread(cold), "warm_s": stats.spread(warm),
                      "cold_process_cpu_s": stats.spread(cold_cpu), "warm_process_cpu_s": stats.spread(warm_cpu)})]


# P10 ------------------------------------------------------------------------------------------
def _fxgraph_entries(cache: Path) -> set[str]:
    root = cache / "inductor" / "fxgraph"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def p10_bundle_start(tmp: Path, quick: bool) -> list[dict]:
    """A fresh process with an empty cache dir and an imported bundle against one with no bundle, in a
    random order per repetition: seconds to the first image at the bundled shape, per mode, and the
    inductor graphs the bundled side still compiled afresh (new FX-graph cache entries)."""
    size, reps = ("128x128", 2) if quick else ("256x256", 3)
    made = tmp / "p10-made"
    made.mkdir(parents=True, exist_ok=True)
    bundle = tmp / "p10.bundle"
    app_cli("cache", "export", str(bundle), "--modes", "compiled,regional", "--sizes", size, "--model", BENCH_MODEL,
            "--device", "cpu", "--dtype", "float32", "--compile-backend", "inductor", "--cache-dir", str(made / "c"),
            cwd=made)
    rows = []
    for mode in ("compiled", "regional"):
        seconds: dict[str, list[float]] = {"bundle": [], "none": []}
        fresh: list[int] = []
        for i in range(reps):
            for side in random.Random(i).sample(["bundle", "none"], 2):
                cache = tmp / f"p10-{mode}-{side}-{i}" / "cache"
                cache.parent.mkdir(parents=True, exist_ok=True)
                if side == "bundle":
                    app_cli("cache", "import", str(bundle), "--model", BENCH_MODEL, "--device", "cpu", "--dtype",
                            "float32", "--compile-backend", "inductor", "--cache-dir", str(cache), cwd=cache.parent)
                before = _fxgraph_entries(cache)
                seconds[side].append(child_first_image(mode, size, cache))
                if side == "bundle":
                    fresh.append(len(_fxgraph_entries(cache) - before))
        speedup = stats.summarise(stats.ratios(seconds["none"], seconds["bundle"]))
        rows.append(make_row("P10", f"warm start from a bundle, {mode} at {size} (inductor): first image in a fresh "
                                    f"process, no bundle / imported bundle", speedup, "x faster",
                             ">= 5" if mode == "compiled" else None, None,
                             {"no_bundle_s": stats.spread(seconds["none"]),
                              "bundle_s": stats.spread(seconds["bundle"])},
                             note="dynamo still traces every graph and the pipeline loads in both"))
        rows.append(make_row("P10", f"warm start from a bundle, {mode}: inductor graphs compiled afresh at the "
                                    "bundled shape (new FX-graph cache entries, most over the repetitions)", None,
                             "graphs", "<= 0", count=max(fresh)))
    return rows
