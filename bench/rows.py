"""A row of the benchmark suite: how one is built from its measurements and judged.

``make_row`` turns a summary from ``bench/stats.py`` (a measured median with its interval) or an
exact count into the row every module of the suite returns, with its verdict; ``timed_ratio``
summarises both clocks of an interleaved measurement as the per-repetition ratio of two sides.
"""

from __future__ import annotations

from typing import Any

from bench import stats


def make_row(pid: str, name: str, summary: dict[str, Any] | None, unit: str, goal: str | None,
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
