"""The benchmark suite behind ``python -m bench``: the numbers a stakeholder demo stands on.

How each row is measured and judged is in ``bench/stats.py``: the two sides of a timed ratio run
interleaved in a random order per repetition; a row reports the median with a 95 % bootstrap
interval and is *pass* only when the whole interval meets its goal, *fail* when the whole interval
misses it, and *inconclusive* otherwise (with the repetitions that would decide it). Timed rows
report wall-clock and process-CPU ratios. ``--quick`` shrinks sizes and repetitions (and uses the
fast aot_eager backend where the compiler itself is not what is measured) so CI can check the suite
runs; its figures are not the ones to quote, and most of its verdicts are inconclusive. A full run
writes ``bench/results/<date>-<device>.json``, from which ``python -m bench.report``
regenerates the README's performance section and its plot.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

from bench import BENCH_MODEL, stats

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


def _row(pid: str, name: str, summary: dict[str, Any] | None, unit: str, goal: str | None,
         cpu: dict[str, Any] | None = None, absolute: dict[str, Any] | None = None, note: str = "",
         count: float | None = None) -> dict[str, Any]:
    """One row: ``summary`` from ``stats.summarise`` (a measured median with its interval), or a
    ``count`` judged exactly (compiles: there is no noise in a count)."""
    needed = None
    if summary is None:
        value, ci, spread_ = count, None, None
        verdict = "info" if goal is None else ("pass" if stats.Goal.parse(goal).met(count) else "fail")
    else:
        value, ci = summary["value"], summary["ci"]
        spread_ = [summary["min"], summary["max"]] if "min" in summary else None
        verdict, needed = stats.verdict(summary, stats.Goal.parse(goal) if goal else None)
    return {"id": pid, "name": name, "value": value, "unit": unit, "goal": goal, "verdict": verdict,
            "ci": ci, "spread": spread_, "n": summary["n"] if summary else None, "needed_reps": needed,
            "cpu": cpu, "absolute": absolute or {}, "note": note}


def timed_ratio(measured: dict[str, Any], a: str, b: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wall and CPU summaries of the per-repetition ratio a/b from ``stats.interleaved``."""
    wall = stats.summarise(stats.ratios(measured["wall"][a], measured["wall"][b]))
    cpu = stats.summarise(stats.ratios(measured["cpu"][a], measured["cpu"][b]))
    return wall, cpu


def _manager(tmp: Path, **overrides):
    from backend.manager import Manager
    from backend.settings import Settings

    settings = Settings(**{"model": BENCH_MODEL, "device": "cpu", "dtype": "float32",
                           "compile_backend": "aot_eager", "cache_dir": tmp / "cache", "output_dir": tmp / "out",
                           **overrides})
    manager = Manager(settings)
    manager.start()
    return manager


def _shape(text: str):
    from backend.shapes import parse_shape

    return parse_shape(text)


# P1 -------------------------------------------------------------------------------------------
def measure_app_overhead(manager, request, reps: int, seed: int = 0,
                         synchronize: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """manager.generate against a direct call of the pipeline it holds, same shape and seed,
    interleaved; returns ``stats.interleaved``'s measurements (sides "app" and "direct")."""
    import torch

    pipe = manager.engine.pipe

    def direct():
        pipe(prompt=request.prompt, height=request.height, width=request.width,
             num_inference_steps=request.steps, guidance_scale=request.guidance,
             generator=torch.Generator("cpu").manual_seed(request.seed))
        synchronize()

    def app():
        manager.generate(request)

    direct(), app()  # warm both paths once
    return stats.interleaved({"app": app, "direct": direct}, reps, seed=seed)


def p1_app_overhead(tmp: Path, quick: bool) -> list[dict]:
    """The app's manager.generate against the pipeline call it wraps, at the same shape and seed."""
    sizes = ["128x128", "256x256"] if quick else ["256x256", "1024x1024"]
    reps = 4 if quick else 25
    manager = _manager(tmp)
    rows = []
    try:
        for i, text in enumerate(sizes):
            shape = _shape(text)
            request = manager.validate("a red fox", shape.height, shape.width, steps=4, seed=0, mode="eager")
            measured = measure_app_overhead(manager, request, reps, seed=i)
            wall, cpu = timed_ratio(measured, "app", "direct")
            rows.append(_row("P1", f"app overhead at {text}: manager.generate / direct pipeline call", wall, "x",
                             "<= 1.01", cpu, {"direct_s": stats.spread(measured["wall"]["direct"]),
                                              "manager_s": stats.spread(measured["wall"]["app"])}))
    finally:
        manager.close()
    return rows


# P2 -------------------------------------------------------------------------------------------
def measure_shape_switch(manager, requests: list, reps: int) -> tuple[dict[str, Any], int, int]:
    """Each repetition takes one warm shape in turn and times it called right after another warm shape
    and right after itself, the two in a random order. Returns the measurements (sides "after_other"
    and "after_itself"), the compiles counted over every call, and the number of calls."""
    compiles = calls = 0

    def second_call(first, second) -> tuple[float, float]:
        """Wall and CPU seconds of ``second``, called right after ``first``."""
        nonlocal compiles, calls
        compiles += manager.generate(first)[1].compiles
        began_wall, began_cpu = time.perf_counter(), time.process_time()
        compiles += manager.generate(second)[1].compiles
        calls += 2
        return time.perf_counter() - began_wall, time.process_time() - began_cpu

    measured: dict[str, Any] = {"wall": {"after_other": [], "after_itself": []},
                                "cpu": {"after_other": [], "after_itself": []}}
    for rep in range(reps):
        this, other = requests[rep % len(requests)], requests[(rep + 1) % len(requests)]
        before = {"after_other": other, "after_itself": this}
        for side in random.Random(rep).sample(list(before), 2):
            wall, cpu = second_call(before[side], this)
            measured["wall"][side].append(wall)
            measured["cpu"][side].append(cpu)
    return measured, compiles, calls


def p2_warm_shape_reuse(tmp: Path, quick: bool) -> list[dict]:
    """A warm shape called right after another warm shape, against the same shape called right after
    itself: switching shapes must neither compile nor slow the call down."""
    shapes = ["128x128", "160x128", "192x128"] if quick else ["512x512", "640x512", "768x512"]
    reps = 6 if quick else 30
    manager = _manager(tmp, compile_backend="aot_eager" if quick else "inductor")
    try:
        requests = [manager.validate("a red fox", _shape(t).height, _shape(t).width, steps=4, seed=0,
                                     mode="compiled") for t in shapes]
        for request in requests:
            manager.generate(request)  # warm
            manager.generate(request)
        measured, compiles, calls = measure_shape_switch(manager, requests, reps)
        wall, cpu = timed_ratio(measured, "after_other", "after_itself")
    finally:
        manager.close()
    return [
        _row("P2", f"warm-shape reuse: compiles in {calls} calls switching among 3 warm shapes", None, "compiles",
             "= 0", count=compiles),
        _row("P2", "warm-shape reuse: latency of a warm shape after another / after itself", wall, "x",
             "<= 1.05", cpu, {"shapes": shapes, "after_other_s": stats.spread(measured["wall"]["after_other"]),
                              "after_itself_s": stats.spread(measured["wall"]["after_itself"])}),
    ]


# P3 -------------------------------------------------------------------------------------------
def p3_memory(tmp: Path, quick: bool) -> list[dict]:
    """RSS with one warm compiled shape, then with three, each repetition in a fresh process."""
    from bench.memory_shapes import SHAPES, run_isolated

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
        ratio_row = _row("P3", f"memory, {config} model: RSS with 3 / 1 warm compiled shapes", ratio, "x", "<= 1.10",
                         None, absolute)
        if not shared:  # a copied weight fails the row whatever the ratio
            ratio_row.update(verdict="fail", note="weights were copied between compiled shapes")
        rows += [ratio_row,
                 _row("P3", f"memory, {config} model: RSS growth per extra warm compiled shape", growth, "MiB",
                      None, None, {"rss_one_MiB": absolute["rss_one_MiB"]})]
    return rows


# P4 -------------------------------------------------------------------------------------------
def p4_tp_transport(tmp: Path, quick: bool) -> list[dict]:
    """Measured in a fresh process (``python -m bench.tp_transport --json``), as the app runs: in
    the suite's own process, after the rows before it, the same code read 9.7 ms against 4.4 ms
    alone (2026-12-01), its ranks' and its own parts all slower."""
    size = "512x512" if quick else "1024x1024"
    proc = subprocess.run([sys.executable, "-m", "bench.tp_transport", "--json", "--size", size,
                           "--reps", str(4 if quick else 15), "--ranks", "2", "--steps", "1"],
                          capture_output=True, text=True, cwd=ROOT, env=_clean_env())
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    r = json.loads(proc.stdout)
    overhead = stats.summarise(r["overheads_ms"])
    return [_row("P4", f"TP transport at {size}: socket round trip above the workers' own time", overhead,
                 "ms", "<= 2", None,
                 {"round_trip_s": r["round_trip_median_s"], "worker_s": r["worker_median_s"],
                  "ratio": r["ratio_round_trip_to_worker"], "payload_bytes": r["payload_bytes"],
                  "parts_median_ms": r["parts_median_ms"]})]


# P5 -------------------------------------------------------------------------------------------
REAL_BLOCKS = {"num_layers": 5, "num_single_layers": 20}  # FLUX.2-klein-4B's block counts


def _clean_env() -> dict[str, str]:
    """The environment for a child app process whose caches are exactly its --cache-dir.

    Importing torch here sets TORCHINDUCTOR_CACHE_DIR in this process's environment (inductor
    records its default), which a child would inherit and prefer over --cache-dir."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCHINDUCTOR_CACHE_DIR", "TORCH_NEURONX_NEFF_CACHE_DIR")}
    return {**env, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}


def _child_compile(model: str, mode: str, backend: str, size: str, cache: Path) -> tuple[float, float]:
    """Compile seconds of one generation in a fresh app process (its record's ``compile_seconds``) and
    that process's whole CPU time (user + system, from the kernel's accounting of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "generate", "warm-up", "--size", size, "--mode", mode, "--steps", "1",
         "--seed", "0", "--json", "--no-save", "--model", model, "--device", "cpu", "--dtype", "float32",
         "--compile-backend", backend, "--cache-dir", str(cache)],
        capture_output=True, text=True, cwd=cache.parent, env=_clean_env())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    child_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(proc.stdout.strip().splitlines()[-1])["compile_seconds"], child_cpu


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
            compile_s, child_cpu = _child_compile(model, mode, backend, "256x256", tmp / f"c-{mode}-{i}")
            seconds[mode].append(compile_s)
            cpu[mode].append(child_cpu)
    ratio = stats.summarise(stats.ratios(seconds["regional"], seconds["compiled"]))
    return [_row("P5", f"warm-up, real block counts (5+20), {backend}: regional / whole-transformer compile time",
                 ratio, "x", "<= 0.5", None,
                 {"whole_s": stats.spread(seconds["compiled"]), "regional_s": stats.spread(seconds["regional"]),
                  "whole_process_cpu_s": stats.spread(cpu["compiled"]),
                  "regional_process_cpu_s": stats.spread(cpu["regional"])})]


# P6 -------------------------------------------------------------------------------------------
def _time_to_ui(tmp: Path, bare: bool = False) -> tuple[float, float | None]:
    """Seconds from process start to the page's first HTTP 200, and to the model being ready (the
    app), for the app or (``bare``) a bare Gradio Blocks app launched the same way."""
    from tools.app_process import free_port

    port = free_port()
    env = _clean_env()
    cmd = ([sys.executable, "-m", "bench.bare_gradio", str(port)] if bare else
           [sys.executable, str(ROOT / "app.py"), "--model", BENCH_MODEL, "--port", str(port),
            "--cache-dir", str(tmp / "cache"), "--output-dir", str(tmp / "out")])
    began = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT if bare else tmp, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        page = ready = client = None
        while (page is None or (ready is None and not bare)) and time.monotonic() - began < 120:
            try:
                if page is None:
                    with urllib.request.urlopen(url, timeout=1):
                        page = time.monotonic() - began
                if not bare:
                    from gradio_client import Client

                    # One client, asking every 0.1 s: a new client each time fetched the page's
                    # whole config, and that load on the 2 cores slowed the very start it timed.
                    client = client or Client(url, verbose=False)
                    if client.predict(api_name="/status")["state"] == "ready":
                        ready = time.monotonic() - began
                        break
                    time.sleep(0.08)
            except OSError:
                pass
            time.sleep(0.02)
        if page is None or (ready is None and not bare):
            raise RuntimeError("the app did not come up")
        return page, ready
    finally:
        proc.terminate()
        proc.wait(30)


def p6_time_to_ui(tmp: Path, quick: bool) -> list[dict]:
    """Process start -> the page's first HTTP 200, the app against its floor: a bare Gradio Blocks
    app with the same launch options (``bench.bare_gradio``), in a random order per repetition."""
    import random

    rng = random.Random(6)
    app, bare, ready = [], [], []
    for _ in range(3 if quick else 9):
        for side in rng.sample(["app", "bare"], 2):
            page, model_ready = _time_to_ui(tmp, bare=side == "bare")
            (bare if side == "bare" else app).append(page)
            if side == "app":
                ready.append(model_ready)
    ratio = stats.summarise(stats.ratios(app, bare))
    return [
        _row("P6", "time to UI: process start -> HTTP 200 from the page, app / bare Gradio Blocks app "
                   "(same Gradio, same launch options)", ratio, "x", "<= 1.10", None,
             {"app_s": stats.spread(app), "bare_s": stats.spread(bare)}),
        _row("P6", "time to UI: process start -> model ready (tiny model)", stats.summarise(ready), "s", None),
    ]


# P7 -------------------------------------------------------------------------------------------
def p7_persistent_cache(tmp: Path, quick: bool) -> list[dict]:
    """A cold compile in a fresh process and cache, then the same shape in a second process that
    finds the first one's cache; repeated with a new cache each time."""
    cold, warm, cold_cpu, warm_cpu = [], [], [], []
    for i in range(2 if quick else 3):
        cache = tmp / f"p7-cache-{i}"
        for seconds, cpu in ((cold, cold_cpu), (warm, warm_cpu)):
            compile_s, child_cpu = _child_compile(BENCH_MODEL, "compiled", "inductor", "256x256", cache)
            seconds.append(compile_s)
            cpu.append(child_cpu)
    speedup = stats.summarise(stats.ratios(cold, warm))
    return [_row("P7", "persistent cache: cold compile / second-process compile (inductor, same shape)", speedup,
                 "x faster", ">= 3", None,
                 {"cold_s": stats.spread(cold), "warm_s": stats.spread(warm),
                  "cold_process_cpu_s": stats.spread(cold_cpu), "warm_process_cpu_s": stats.spread(warm_cpu)})]


# P10 ------------------------------------------------------------------------------------------
def _app_cli(*argv: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), *argv], capture_output=True, text=True, cwd=cwd,
                          env=_clean_env())
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return proc.stdout


def _child_first_image(mode: str, size: str, cache: Path) -> float:
    """Seconds of the first image in a fresh app process (its record's ``seconds``: compile included)."""
    out = _app_cli("generate", "warm-up", "--size", size, "--mode", mode, "--seed", "0", "--json", "--no-save",
                   "--model", BENCH_MODEL, "--device", "cpu", "--dtype", "float32", "--compile-backend", "inductor",
                   "--cache-dir", str(cache), cwd=cache.parent)
    return json.loads(out.strip().splitlines()[-1])["seconds"]


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
    _app_cli("cache", "export", str(bundle), "--modes", "compiled,regional", "--sizes", size, "--model", BENCH_MODEL,
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
                    _app_cli("cache", "import", str(bundle), "--model", BENCH_MODEL, "--device", "cpu", "--dtype",
                             "float32", "--compile-backend", "inductor", "--cache-dir", str(cache), cwd=cache.parent)
                before = _fxgraph_entries(cache)
                seconds[side].append(_child_first_image(mode, size, cache))
                if side == "bundle":
                    fresh.append(len(_fxgraph_entries(cache) - before))
        speedup = stats.summarise(stats.ratios(seconds["none"], seconds["bundle"]))
        rows.append(_row("P10", f"warm start from a bundle, {mode} at {size} (inductor): first image in a fresh "
                                f"process, no bundle / imported bundle", speedup, "x faster",
                         ">= 5" if mode == "compiled" else None, None,
                         {"no_bundle_s": stats.spread(seconds["none"]), "bundle_s": stats.spread(seconds["bundle"])},
                         note="dynamo still traces every graph and the pipeline loads in both"))
        rows.append(_row("P10", f"warm start from a bundle, {mode}: inductor graphs compiled afresh at the bundled "
                                "shape (new FX-graph cache entries, most over the repetitions)", None, "graphs",
                         "<= 0", count=max(fresh)))
    return rows


# P8 -------------------------------------------------------------------------------------------
def p8_modes(tmp: Path, quick: bool) -> list[dict]:
    """Steady seconds per image of eager, compiled and regional at the same shape, the three modes in
    a random order in each repetition (every shape warm in every mode first)."""
    sizes = ["128x128", "256x256"] if quick else ["512x512", "1024x1024"]
    reps = 4 if quick else 12
    manager = _manager(tmp, compile_backend="aot_eager" if quick else "inductor")
    rows, points = [], []
    try:
        for i, text in enumerate(sizes):
            shape = _shape(text)
            runs, first = {}, {}
            for mode in ("eager", "compiled", "regional"):
                request = manager.validate("a red fox", shape.height, shape.width, steps=4, seed=0, mode=mode)
                first[mode] = manager.generate(request)[1]
                runs[mode] = lambda request=request: manager.generate(request)
            measured = stats.interleaved(runs, reps, seed=10 + i)
            steady = {m: stats.spread(v) for m, v in measured["wall"].items()}
            for mode in runs:
                points.append({"mode": mode, "shape": text, "pixels": shape.pixels,
                               "seconds": steady[mode]["median"], "compile_seconds": first[mode].compile_seconds})
            text_row = ", ".join(f"{m} {v['median']:.3f} s" for m, v in steady.items())
            for mode in ("compiled", "regional"):
                wall, cpu = timed_ratio(measured, mode, "eager")
                rows.append(_row("P8", f"modes at {text}, 4 steps (steady s/image: {text_row}): {mode} / eager",
                                 wall, "x", None, cpu, steady))
    finally:
        manager.close()
    rows[-1]["points"] = points
    return rows


# P9 -------------------------------------------------------------------------------------------
P9_PROMPTS = (48, 16)  # held-out prompts per preset and for the place-less set (full run, quick run)
P9_QUICK_PRESETS = ("1:1", "16:9", "9:21")  # the quick run: the square and the two ends of the ratios
P9_BEYOND = ("512x512", 24)  # twice the trained scale: reported, not judged


def p9_prompt_agreement(tmp: Path, quick: bool) -> list[dict]:
    """Does the trained embedded model (the app's default) draw what it is told, at every preset
    the page offers for it? Held-out grammar prompts, judged by image statistics
    (``bench.agreement``, ``embedded.scenes.judge``); the share that agrees, with its Wilson
    interval. One row per preset of the model's card, one for prompts written as people write
    them (place left out, synonyms; read by ``embedded.grammar``), and an info row at twice the
    trained scale."""
    from backend.model_card import read_card
    from bench import agreement
    from embedded import SCENES_MODEL_DIR, grammar

    pipe = agreement.load_pipeline()
    card = read_card(SCENES_MODEL_DIR)
    count = P9_PROMPTS[quick]
    name = "prompt agreement of the trained embedded model (assets/scenes-flux2-klein)"
    cases = [(f"at the {label} preset {shape}, 4 steps (held-out prompts)", shape, count, None)
             for label, shape in card.presets if not quick or label in P9_QUICK_PRESETS]
    people = grammar.people_prompts(count)
    start = card.start_shape
    cases.append((f"at {start}, prompts as people write them (place left out, synonyms; held-out)", start, count,
                  people))
    if not quick:
        beyond = _shape(P9_BEYOND[0])
        cases.append((f"at {beyond}, twice the trained scale (held-out prompts; beyond training)", beyond,
                      P9_BEYOND[1], None))
    rows = []
    for text, shape, n, pairs in cases:
        # People's prompts: each read once, and it must read as the caption it was made from (two
        # prompts may read alike: "gray" and "grey"); ``typed`` names a failure as it was written.
        for prompt, caption in pairs or ():
            if grammar.read(prompt).caption != caption:
                raise RuntimeError(f"embedded.grammar reads {prompt!r} as another scene than it was made from")
        typed = {caption: prompt for prompt, caption in pairs or ()}
        measured = agreement.measure([(shape.height, shape.width)], [c for _, c in pairs] if pairs else n, pipe=pipe)
        got = measured["sizes"][f"{shape.height}x{shape.width}"]
        outcomes = [True] * got["agree"] + [False] * (got["total"] - got["agree"])
        judged = card.trained_pixels is None or shape.pixels <= card.trained_pixels
        # People's prompts are judged against the caption they were read as; named as typed.
        failures = [f"{typed[p]} (read as {p}): {why}" if p in typed else f"{p}: {why}" for p, why in got["failures"]]
        rows.append(_row("P9", f"{name} {text}", stats.proportion(outcomes), "share", ">= 0.8" if judged else None,
                         absolute={"agree": got["agree"], "total": got["total"], "seconds": got["seconds"],
                                   "failures": failures}))
    return rows


BENCHMARKS: dict[str, Callable[[Path, bool], list[dict]]] = {
    "P1": p1_app_overhead, "P2": p2_warm_shape_reuse, "P3": p3_memory, "P4": p4_tp_transport,
    "P5": p5_regional_warmup, "P6": p6_time_to_ui, "P7": p7_persistent_cache, "P8": p8_modes,
    "P9": p9_prompt_agreement, "P10": p10_bundle_start, "P11": lambda tmp, quick: _p11(tmp, quick),
}


def _p11(tmp: Path, quick: bool) -> list[dict]:
    from bench.room import p11_replicas

    return p11_replicas(tmp, quick)


def machine() -> dict[str, Any]:
    import torch

    return {"device": "cpu", "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform()}


def run(only: list[str] | None, quick: bool, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    rows, errors = [], {}
    for pid, fn in BENCHMARKS.items():
        if only and pid not in only:
            continue
        progress(pid)
        with tempfile.TemporaryDirectory(prefix=f"bench-{pid}-") as tmp:
            began = time.monotonic()
            saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            # Each benchmark starts from a cold compile cache of its own (inductor reads this lazily).
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor")
            try:
                rows.extend(fn(Path(tmp), quick))
            except Exception as exc:  # noqa: BLE001 - a broken benchmark is reported, and fails the run
                errors[pid] = f"{type(exc).__name__}: {exc}"
            finally:
                if saved is None:
                    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
                else:
                    os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved
            progress(f"{pid} done in {time.monotonic() - began:.0f} s")
    model = f"the random-weight tiny model ({Path(BENCH_MODEL).relative_to(ROOT)})"
    return {"date": datetime.date.today().isoformat(), "quick": quick, "machine": machine(), "model": model,
            "rows": rows, "errors": errors}


def _interval(row: dict[str, Any]) -> str:
    return "" if not row.get("ci") else f"[{row['ci'][0]:.4g}, {row['ci'][1]:.4g}]"


def verdict_text(row: dict[str, Any]) -> str:
    """The verdict, with the repetitions an inconclusive row would need."""
    if row["verdict"] == "inconclusive" and row.get("needed_reps"):
        return f"inconclusive (n={row['n']}; ~{row['needed_reps']} reps would decide)"
    return row["verdict"]


def cpu_text(row: dict[str, Any]) -> str:
    cpu = row.get("cpu")
    return "" if not cpu else f"cpu {cpu['median']:.4g} [{cpu['ci'][0]:.4g}, {cpu['ci'][1]:.4g}]"


def format_table(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [f"Neuron Studio benchmarks — {result['date']} — {m['device']} ({m['cpu']}, {m['cores']} cores), "
             f"torch {m['torch']}" + (" — QUICK (sizes and repetitions reduced)" if result["quick"] else ""),
             "value: median (wall clock); 95 % CI: bootstrap interval of the median; pass/fail only when the "
             "whole interval meets/misses the goal",
             f"{'id':<4} {'value':>10} {'unit':<9} {'95 % CI':<21} {'n':>3} {'goal':<8} {'verdict':<13} what"]
    for r in result["rows"]:
        value = "—" if r["value"] is None else f"{r['value']:.4g}"
        n = "" if r.get("n") is None else str(r["n"])
        extra = "; ".join(x for x in (cpu_text(r), r.get("note") or "") if x)
        lines.append(f"{r['id']:<4} {value:>10} {r['unit']:<9} {_interval(r):<21} {n:>3} {r['goal'] or '—':<8} "
                     f"{verdict_text(r):<13} {r['name']}" + (f"  ({extra})" if extra else ""))
    for pid, error in result["errors"].items():
        lines.append(f"{pid:<4} ERROR: {error.splitlines()[0] if error else ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Neuron Studio benchmark suite")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (CI)")
    parser.add_argument("--only", help="comma-separated ids, e.g. P1,P4")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--save", action="store_true",
                        help="write bench/results/<date>-cpu.json (default for a full run of every row)")
    args = parser.parse_args(argv)
    only = [p.strip().upper() for p in args.only.split(",")] if args.only else None
    if only and not set(only) <= set(BENCHMARKS):
        parser.error(f"--only: unknown ids {sorted(set(only) - set(BENCHMARKS))}; known: {', '.join(BENCHMARKS)}")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    result = run(only, args.quick, lambda s: print(f"[bench] {s}", file=sys.stderr, flush=True))
    if args.save or (not args.quick and not only):
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{result['date']}-{result['machine']['device']}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"[bench] wrote {path.relative_to(ROOT)}", file=sys.stderr)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
