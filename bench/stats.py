"""How the benchmark suite measures a ratio and decides whether it meets its goal.

A timed ratio compares two sides, A and B (the app and the pipeline it wraps; one shape after
another shape and after itself; compiled and eager). ``interleaved`` runs every side once per
repetition, in an order drawn at random for each repetition (ABAB with A or B first by chance), so
drift and warm caches hit both sides alike and neither always goes first; each call is timed in
wall-clock seconds and in this process's CPU seconds (all its threads).

``summarise`` turns the repetitions into the median of the per-repetition ratios A/B and a 95 %
percentile bootstrap interval for that median (repetitions resampled with replacement, a fixed
seed, so the same figures give the same interval); ``proportion`` gives a share of successes with
its Wilson interval. ``verdict`` then says:

- ``pass`` when the whole interval meets the goal,
- ``fail`` when the whole interval misses it,
- ``inconclusive`` otherwise, or with fewer than ``MIN_REPS`` repetitions, with a rough count of
  the repetitions that would decide it: an interval's width shrinks about as 1/sqrt(n), so the
  width must fall below the value's distance from the goal (``needed_pairs``).

Rows measured in separate processes (P3, P5, P7) use the same ``summarise`` and ``verdict`` over
their repetitions. With few repetitions the interval is wide and the verdict is honest about it.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

CONFIDENCE = 0.95
# Fewer repetitions than this say nothing about the spread: such a row is never pass or fail.
MIN_REPS = 3
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Goal:
    """``op`` is "<=", ">=" or "=": the value must be at most / at least / exactly ``threshold``
    ("=" is for counts, which have no noise)."""

    op: str
    threshold: float

    @classmethod
    def parse(cls, text: str) -> "Goal":
        op, value = text.split()
        if op not in ("<=", ">=", "="):
            raise ValueError(f"a goal is '<= x', '>= x' or '= x', not {text!r}")
        return cls(op, float(value))

    def met(self, value: float) -> bool:
        if self.op == "=":
            return value == self.threshold
        return value <= self.threshold if self.op == "<=" else value >= self.threshold

    def __str__(self) -> str:
        return f"{self.op} {self.threshold:g}"


def timed(call: Callable[[], Any]) -> tuple[float, float]:
    """Wall-clock and process CPU seconds (all threads of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def interleaved(runs: dict[str, Callable[[], Any]], reps: int, seed: int = 0,
                measure: Callable[[Callable[[], Any]], tuple[float, float]] = timed) -> dict[str, Any]:
    """Run every side once per repetition, in an order drawn at random (from ``seed``) for each
    repetition; time every call. Returns ``{"wall": {side: [s, ...]}, "cpu": {...}, "orders": [...]}``."""
    rng = random.Random(seed)
    out: dict[str, Any] = {"wall": {k: [] for k in runs}, "cpu": {k: [] for k in runs}, "orders": []}
    for _ in range(reps):
        order = list(runs)
        rng.shuffle(order)
        for side in order:
            wall, cpu = measure(runs[side])
            out["wall"][side].append(wall)
            out["cpu"][side].append(cpu)
        out["orders"].append(order)
    return out


def bootstrap_interval(ratios: list[float], confidence: float = CONFIDENCE,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of ``ratios``."""
    if not ratios:
        raise ValueError("no ratios to summarise")
    if len(ratios) == 1:
        return ratios[0], ratios[0]
    rng = random.Random(seed)
    n = len(ratios)
    medians = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    low = medians[int(math.floor(tail * (resamples - 1)))]
    high = medians[int(math.ceil((1.0 - tail) * (resamples - 1)))]
    return low, high


def summarise(ratios: list[float]) -> dict[str, Any]:
    """Median ratio, its 95 % bootstrap interval, the range and n."""
    low, high = bootstrap_interval(ratios)
    median = statistics.median(ratios)
    return {"value": median, "median": median, "ci": [low, high], "min": min(ratios), "max": max(ratios),
            "n": len(ratios)}


def proportion(outcomes: list[bool], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The share of successes with its Wilson score interval (a median of 0/1 outcomes would say
    nothing; the Wilson interval stays inside [0, 1] and is honest at small n)."""
    n = len(outcomes)
    if not n:
        raise ValueError("no outcomes to summarise")
    p = sum(bool(o) for o in outcomes) / n
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"value": p, "ci": [max(0.0, centre - half), min(1.0, centre + half)], "n": n,
            "successes": sum(bool(o) for o in outcomes)}


def needed_pairs(summary: dict[str, Any], goal: Goal) -> int | None:
    """Roughly how many repetitions would make the interval clear the goal (None: the median sits on
    the goal, so no number of repetitions is enough to promise a decision)."""
    low, high = summary["ci"]
    value = summary["value"]
    distance = abs(value - goal.threshold)
    half_width = max(value - low, high - value)
    if distance == 0:
        return None
    if half_width <= distance:
        return summary["n"]
    return math.ceil(summary["n"] * (half_width / distance) ** 2)


def verdict(summary: dict[str, Any], goal: Goal | None) -> tuple[str, int | None]:
    """("pass" | "fail" | "inconclusive" | "info", repetitions needed when inconclusive)."""
    if goal is None:
        return "info", None
    low, high = summary["ci"]
    if summary["n"] < MIN_REPS:
        return "inconclusive", max(MIN_REPS, needed_pairs(summary, goal) or MIN_REPS)
    if goal.met(low) and goal.met(high):
        return "pass", None
    if not goal.met(low) and not goal.met(high):
        return "fail", None
    return "inconclusive", needed_pairs(summary, goal)


def ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def spread(values: list[float]) -> dict[str, float]:
    """Median, range and n of plain measurements (seconds, MiB)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
