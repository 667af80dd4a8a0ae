"""Rows timed in this process, two or three sides interleaved: the app's overhead over the pipeline
it wraps (P1), a warm shape after another warm shape against after itself (P2), and the steady
seconds per image of each mode (P8). ``measure_app_overhead`` and ``measure_shape_switch`` are also
what ``bench.gpu_realistic`` measures on a GPU."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable

from bench import stats
from bench.harness import start_manager
from bench.rows import make_row, timed_ratio


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
    from backend.shapes import parse_shape

    sizes = ["128x128", "256x256"] if quick else ["256x256", "1024x1024"]
    reps = 4 if quick else 25
    manager = start_manager(tmp)
    rows = []
    try:
        for i, text in enumerate(sizes):
            shape = parse_shape(text)
            request = manager.validate("a red fox", shape.height, shape.width, steps=4, seed=0, mode="eager")
            measured = measure_app_overhead(manager, request, reps, seed=i)
            wall, cpu = timed_ratio(measured, "app", "direct")
            rows.append(make_row("P1", f"app overhead at {text}: manager.generate / direct pipeline call", wall, "x",
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
        results = []
        wall, cpu = stats.timed(lambda: results.append(manager.generate(second)[1]))
        compiles += results[0].compiles
        calls += 2
        return wall, cpu

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
    from backend.shapes import parse_shape

    shapes = ["128x128", "160x128", "192x128"] if quick else ["512x512", "640x512", "768x512"]
    reps = 6 if quick else 30
    manager = start_manager(tmp, compile_backend="aot_eager" if quick else "inductor")
    try:
        requests = [manager.validate("a red fox", parse_shape(t).height, parse_shape(t).width, steps=4, seed=0,
                                     mode="compiled") for t in shapes]
        for request in requests:
            manager.generate(request)  # warm
            manager.generate(request)
        measured, compiles, calls = measure_shape_switch(manager, requests, reps)
        wall, cpu = timed_ratio(measured, "after_other", "after_itself")
    finally:
        manager.close()
    return [
        make_row("P2", f"warm-shape reuse: compiles in {calls} calls switching among 3 warm shapes", None,
                 "compiles", "= 0", count=compiles),
        make_row("P2", "warm-shape reuse: latency of a warm shape after another / after itself", wall, "x",
                 "<= 1.05", cpu, {"shapes": shapes, "after_other_s": stats.spread(measured["wall"]["after_other"]),
                                  "after_itself_s": stats.spread(measured["wall"]["after_itself"])}),
    ]


# P8 -------------------------------------------------------------------------------------------
def p8_modes(tmp: Path, quick: bool) -> list[dict]:
    """Steady seconds per image of eager, compiled and regional at the same shape, the three modes in
    a random order in each repetition (every shape warm in every mode first)."""
    from backend.shapes import parse_shape

    sizes = ["128x128", "256x256"] if quick else ["512x512", "1024x1024"]
    reps = 4 if quick else 12
    manager = start_manager(tmp, compile_backend="aot_eager" if quick else "inductor")
    rows, points = [], []
    try:
        for i, text in enumerate(sizes):
            shape = parse_shape(text)
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
                rows.append(make_row("P8", f"modes at {text}, 4 steps (steady s/image: {text_row}): {mode} / eager",
                                     wall, "x", None, cpu, steady))
    finally:
        manager.close()
    rows[-1]["points"] = points
    return rows
