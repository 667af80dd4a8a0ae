"""Regenerate the README's performance section and its plot from the latest benchmark results.

    python -m bench.report

Reads the newest full run in ``bench/results/*-cpu.json`` (and a ``*-cuda-realistic.json`` if a GPU
run was committed), draws ``assets/bench_latency.png`` (steady latency against image size per mode,
plus compile time per shape), and rewrites the README between the ``bench:start``/``bench:end``
markers. Nothing in that section is typed by hand, and nothing explains a verdict away: a row that
fails or is inconclusive is listed as such, with its interval and the repetitions it would need.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bench import RESULTS, ROOT
from bench.table import cpu_text, fmt, verdict_text

README = ROOT / "docs" / "performance.md"  # the page the section lives in (the README links to it)
PLOT = ROOT / "assets" / "bench_latency.png"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"

def latest(pattern: str) -> Path | None:
    files = sorted(p for p in RESULTS.glob(pattern) if p.is_file())
    for path in reversed(files):
        if not json.loads(path.read_text()).get("quick"):
            return path
    return None


def plotted_on(result: dict) -> str:
    """The date(s) the plotted rows were measured (a merged result's date is its newest rows')."""
    dates = sorted({row.get("measured", result["date"]) for row in result["rows"] if row.get("points")})
    return ", ".join(dates) or result["date"]


def draw(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for row in result["rows"] for p in row.get("points", [])]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for mode in ("eager", "compiled", "regional"):
        pts = sorted((p["pixels"] / 1e6, p["seconds"]) for p in points if p["mode"] == mode)
        if pts:
            left.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=mode)
    left.set_xlabel("megapixels")
    left.set_ylabel("seconds per image (4 steps, steady)")
    left.set_title("Latency vs image size")
    left.legend()
    left.grid(alpha=0.3)
    labels = [f"{p['shape']}\n{p['mode']}" for p in points if p["mode"] != "eager"]
    values = [p["compile_seconds"] for p in points if p["mode"] != "eager"]
    colors = ["tab:orange" if label.endswith("compiled") else "tab:green" for label in labels]
    right.bar(range(len(values)), values, color=colors)
    right.set_xticks(range(len(values)), labels, fontsize=8)
    right.set_ylabel("compile seconds (first call)")
    right.set_title("Compile time per shape and mode")
    right.grid(alpha=0.3, axis="y")
    m = result["machine"]
    fig.suptitle(f"Embedded model on CPU ({m['cores']} cores), torch {m['torch']}, {plotted_on(result)}", fontsize=9)
    fig.tight_layout()
    PLOT.parent.mkdir(exist_ok=True)
    fig.savefig(PLOT, dpi=110)


METHOD = (
    "How to read it: each timed ratio (P1, P2, P8) runs its two sides interleaved, every repetition in a "
    "random order, and the value is the median of the per-repetition ratios (wall clock; the process-CPU "
    "ratio is given beside it). P3, P5, P6 and P7 repeat whole measurements in fresh processes, P4 repeats "
    "calls; P12's cost rows are timed ratios too. The interval is a 95 % percentile bootstrap interval of "
    "the median; for P9 and P12's accuracy, a share of held-out prompts or edits whose image agrees with "
    "it, it is the 95 % Wilson score interval of that share. A row passes only when "
    "the whole interval meets its goal, fails when the whole interval misses it, and is inconclusive "
    "otherwise or with fewer than 3 repetitions (with a rough count of the repetitions that would decide "
    "it). Counts (compiles) are exact. Absolute seconds are this machine's.")


def section(result: dict, source: Path, gpu: dict | None, gpu_source: Path | None) -> str:
    m = result["machine"]
    lines = [START, "",
             f"From `{source.relative_to(ROOT)}` ({result['date']}; CPU {m['cpu']}, {m['cores']} cores, "
             f"torch {m['torch']}, {result.get('model', 'the embedded model')} unless a row says "
             "otherwise), made by `python -m bench` and "
             "written here by `python -m bench.report`." + (f" {result['note']}" if result.get("note") else ""),
             "", METHOD, "",
             "| id | measure | value | 95 % interval | n | goal | verdict | process CPU |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    undecided = []
    for row in result["rows"]:
        interval = "" if not row.get("ci") else f"{fmt(row['ci'][0])}–{fmt(row['ci'][1])}"
        n = "" if row.get("n") is None else row["n"]
        lines.append(f"| {row['id']} | {row['name']} | {fmt(row['value'])} {row['unit']} | {interval} | {n} "
                     f"| {row['goal'] or '—'} | {verdict_text(row)} | {cpu_text(row)} |")
        if row["verdict"] in ("fail", "inconclusive"):
            undecided.append(row)
    for pid, error in result.get("errors", {}).items():
        lines.append(f"| {pid} | did not run: {error.splitlines()[0]} | | | | | error | |")
    plot = Path(os.path.relpath(PLOT, README.parent)).as_posix()
    lines += ["", f"![Latency and compile time per mode]({plot})", ""]
    if undecided:
        lines.append("Not passed in this run: " + "; ".join(
            f"**{row['id']}** {row['name']} — {verdict_text(row)}" for row in undecided) + ".")
        lines.append("")
    if gpu:
        modes = gpu["modes"]
        lines += [f"GPU, realistic size (`{gpu_source.relative_to(ROOT)}`: {gpu['gpu']}, random weights with "
                  f"FLUX.2-klein-4B's transformer and VAE geometry, {gpu['size']}, {gpu['steps']} steps, "
                  f"{gpu['dtype']}); public reference {gpu['reference']['seconds']} s on one "
                  f"{gpu['reference']['gpu']}:", "",
                  "| mode | steady s/image | compile s |", "| --- | --- | --- |"]
        lines += [f"| {mode} | {v['steady_s']:.3f} "
                  f"(95 % interval {v['steady']['ci'][0]:.3f}–{v['steady']['ci'][1]:.3f}) "
                  f"| {v['compile_s']:.1f} |" for mode, v in modes.items()]
        p1, p2 = gpu["P1"], gpu["P2"]
        lines += ["", f"P1 app / direct {p1['median']:.3f} (interval {p1['ci'][0]:.3f}–{p1['ci'][1]:.3f}, "
                  f"{p1['verdict']}); P2 compiles {gpu['P2_compiles']}, after another shape / after itself "
                  f"{p2['median']:.3f} (interval {p2['ci'][0]:.3f}–{p2['ci'][1]:.3f}, {p2['verdict']}); P3 device "
                  f"memory ratio {fmt(gpu['P3_device_memory_ratio'])}, peak "
                  f"{gpu['peak_device_bytes'] / 2**30:.1f} GiB.", ""]
    else:
        lines += ["No GPU run is committed yet: no session of this project has had a GPU machine. "
                  "`python -m bench.gpu_realistic` is ready for one (FLUX.2-klein-4B geometry with random "
                  "weights, 1024x1024, 4 steps, bf16; the public reference is about 0.57 s on one H100); "
                  "`python -m bench.gpu_realistic --device cpu --quick` checks it on a CPU and runs in the "
                  "tests.", ""]
    lines.append(END)
    return "\n".join(lines)


def main() -> int:
    source = latest("*-cpu.json")
    if source is None:
        print("no full benchmark run in bench/results; run `python -m bench` first", file=sys.stderr)
        return 1
    result = json.loads(source.read_text())
    gpu_source = latest("*-cuda-realistic.json")
    gpu = json.loads(gpu_source.read_text()) if gpu_source else None
    draw(result)
    text = README.read_text()
    if START not in text or END not in text:
        print(f"{README.relative_to(ROOT)} has no {START} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = text.split(START, 1)
    _old, tail = rest.split(END, 1)
    README.write_text(head + section(result, source, gpu, gpu_source) + tail)
    print(f"updated {README.relative_to(ROOT)} and {PLOT.relative_to(ROOT)} from {source.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
