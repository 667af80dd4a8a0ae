"""How a run of the suite reads as text: the table ``python -m bench`` prints, and the pieces of it
(a figure, a verdict, the process-CPU ratio) that ``bench.report`` and ``bench.compare`` print too."""

from __future__ import annotations

from typing import Any


def fmt(value) -> str:
    """A figure to four significant digits; a dash for none."""
    return "—" if value is None else f"{value:.4g}"


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
        value = fmt(r["value"])
        n = "" if r.get("n") is None else str(r["n"])
        extra = "; ".join(x for x in (cpu_text(r), r.get("note") or "") if x)
        lines.append(f"{r['id']:<4} {value:>10} {r['unit']:<9} {_interval(r):<21} {n:>3} {r['goal'] or '—':<8} "
                     f"{verdict_text(r):<13} {r['name']}" + (f"  ({extra})" if extra else ""))
    for pid, error in result["errors"].items():
        lines.append(f"{pid:<4} ERROR: {error.splitlines()[0] if error else ''}")
    return "\n".join(lines)
