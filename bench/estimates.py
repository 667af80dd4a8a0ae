"""P16: does the cost line's "expected N s" after a warm-up (what ``demo`` does for every preset)
predict the next warm run, on a quiet machine and on one that ``tools.cpu_load`` keeps busy?

Each repetition warms a fresh shape, reads the prediction the cost line shows, runs the shape, and
takes the miss factor max(actual / expected, expected / actual): 1 is exact, 2 is the goal's edge.
The loaded side starts ``tools.cpu_load`` on every core and waits until the app's load meter sees
it (a state, not a delay) before it reads the prediction. Beside each figure, what the old figure
(the median of every run at the shape, a warm-up's included) would have said.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from backend.serving.controls import WARMUP_PROMPT
from backend.shapes import Shape
from bench import ROOT, stats
from bench.harness import start_manager
from bench.rows import make_row


def _miss(actual: float, expected: float) -> float:
    return max(actual / expected, expected / actual)


def _settled(manager) -> None:
    """Wait until the app's load meter has read two whole periods since now (a load just started or
    stopped is in its reading)."""
    meter = manager.admission.cpu_load
    seen = meter.samples
    while meter.samples < seen + 2:
        time.sleep(0.1)


def p16_estimates(tmp: Path, quick: bool) -> list[dict]:
    manager = start_manager(tmp)
    reps, sides = (3 if quick else 6), {"quiet": [], "loaded": []}
    old, loads = {"quiet": [], "loaded": []}, {"quiet": [], "loaded": []}
    try:
        for i in range(reps):
            for side in ("quiet", "loaded"):
                shape = Shape(128 + 16 * i, 128 + 32 * (side == "loaded"))  # a fresh shape each time
                manager.warmup([shape], "eager")
                load = None
                if side == "loaded":
                    # Started through a shell that exits at once: not this process's child, so the app's
                    # meter counts it as other work, as it would a load started from another terminal.
                    load = int(subprocess.run(
                        ["sh", "-c", f"{sys.executable} -m tools.cpu_load --seconds 300 >/dev/null 2>&1 & echo $!"],
                        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
                    _settled(manager)
                try:
                    expected = manager.predict("eager", shape)["expected_seconds"]
                    seen = manager.admission.cpu_load.now
                    request = manager.validate(WARMUP_PROMPT, shape.height, shape.width, seed=1, mode="eager")
                    _img, result = manager.generate(request)
                finally:
                    if load is not None:  # its spinners end with it (tools.cpu_load)
                        os.kill(load, signal.SIGKILL)
                        _settled(manager)
                every = [r.seconds for r in manager.records if r.signature == str(shape)][:-1]
                print(f"P16 {side} {shape}: expected {expected:.3f} s (load {seen}), ran {result.seconds:.3f} s "
                      f"(load {result.load}), earlier runs {every}", file=sys.stderr)
                sides[side].append(_miss(result.seconds, expected))
                old[side].append(_miss(result.seconds, statistics.median(every)))
                loads[side].append(seen or 0.0)
    finally:
        manager.close()
    return [make_row("P16", f"cost line after a warm-up, {side} machine: miss factor of the expected seconds "
                            "(max of actual/expected and expected/actual)", stats.summarise(sides[side]), "x",
                     "<= 2", None, {"old_median_miss": stats.spread(old[side]), "load_seen": stats.spread(loads[side])})
            for side in ("quiet", "loaded")]
