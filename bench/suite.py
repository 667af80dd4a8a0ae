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

This module owns the command: which rows there are and in what order (``BENCHMARKS``; each row's
code lives with its topic), running them (``run``) and saving the result; ``bench.table`` prints it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench import BENCH_MODEL, RESULTS, ROOT
from bench.agreement import p9_prompt_agreement
from bench.api import p13_api
from bench.cluster import p15_ray_serve
from bench.editing import p12_edits
from bench.estimates import p16_estimates
from bench.latency import p1_app_overhead, p2_warm_shape_reuse, p8_modes
from bench.memory_shapes import p3_memory
from bench.room import p11_replicas, p14_fair_turn
from bench.startup import p6_time_to_ui
from bench.table import format_table
from bench.tp_transport import p4_tp_transport
from bench.warmup import p5_regional_warmup, p7_persistent_cache, p10_bundle_start

BENCHMARKS: dict[str, Callable[[Path, bool], list[dict]]] = {
    "P1": p1_app_overhead, "P2": p2_warm_shape_reuse, "P3": p3_memory, "P4": p4_tp_transport,
    "P5": p5_regional_warmup, "P6": p6_time_to_ui, "P7": p7_persistent_cache, "P8": p8_modes,
    "P9": p9_prompt_agreement, "P10": p10_bundle_start, "P11": p11_replicas, "P12": p12_edits,
    "P13": p13_api, "P14": p14_fair_turn, "P15": p15_ray_serve, "P16": p16_estimates,
}


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


def merge_into_latest(result: dict[str, Any], only: list[str]) -> dict[str, Any]:
    """Some rows measured again (``--only ... --save``), put into this device's latest full result:
    those rows replace theirs (or join, in ``BENCHMARKS``' order), the others are kept; every row
    says the day it was measured (``measured``) and the note names the file the others come from.
    A quick run, or no earlier full result, is saved as it is."""
    from bench.report import latest

    source = None if result["quick"] else latest(f"*-{result['machine']['device']}.json")
    if source is None:
        return result
    old = json.loads(source.read_text())
    for row in old["rows"]:
        row.setdefault("measured", old["date"])
    for row in result["rows"]:
        row["measured"] = result["date"]
    order = list(BENCHMARKS)
    rows = sorted([r for r in old["rows"] if r["id"] not in only] + result["rows"], key=lambda r: order.index(r["id"]))
    errors = {**{k: v for k, v in old.get("errors", {}).items() if k not in only}, **result["errors"]}
    # Each earlier merge whose rows are still here keeps its sentence (its rows, day and command); a
    # row measured again leaves it. The full run's own note and file are kept apart.
    merges = [{**m, "ids": [i for i in m["ids"] if i not in only]} for m in old.get("merges", [])]
    merges = [m for m in merges if m["ids"]] + [
        {"ids": only, "date": result["date"], "command": f"python -m bench --only {','.join(only)} --save"}]
    merged_ids = {i for m in merges for i in m["ids"]}
    kept = sorted({r["measured"] for r in rows if r["id"] not in merged_ids})
    full_note, full_source = old.get("full_note", old.get("note") or ""), old.get("full_source", source.name)
    note = "; ".join(f"{', '.join(m['ids'])} measured {m['date']} (`{m['command']}`)" for m in merges)
    note += f"; the other rows as measured {', '.join(kept)} (kept from `{full_source}`)."
    return {**old, "date": result["date"], "machine": result["machine"], "rows": rows, "errors": errors,
            "note": f"{full_note} {note}".strip(), "full_note": full_note, "full_source": full_source, "merges": merges}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Neuron Studio benchmark suite")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (CI)")
    parser.add_argument("--only", help="comma-separated ids, e.g. P1,P4")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--save", action="store_true",
                        help="write bench/results/<date>-cpu.json (default for a full run of every row); "
                             "with --only, the rows run replace theirs in the latest full result")
    args = parser.parse_args(argv)
    only = [p.strip().upper() for p in args.only.split(",")] if args.only else None
    if only and not set(only) <= set(BENCHMARKS):
        parser.error(f"--only: unknown ids {sorted(set(only) - set(BENCHMARKS))}; known: {', '.join(BENCHMARKS)}")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    result = run(only, args.quick, lambda s: print(f"[bench] {s}", file=sys.stderr, flush=True))
    if args.save or (not args.quick and not only):
        if only:
            result = merge_into_latest(result, only)
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{result['date']}-{result['machine']['device']}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"[bench] wrote {path.relative_to(ROOT)}", file=sys.stderr)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
