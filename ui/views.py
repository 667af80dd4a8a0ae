"""Pure rendering: status snapshots and predictions in, Markdown, HTML and pandas frames out.

No gradio and no torch here, so every view is unit-testable with plain dicts.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd

from backend.core_plan import plan_text as core_plan_text
from backend.shapes import PRESETS, Shape

CUSTOM = "Custom"
MODE_LABELS = {
    "eager": "eager",
    "compiled": "compiled (whole transformer)",
    "regional": "regional (repeated blocks)",
    "tp": "tensor-parallel (torchrun worker group)",
}
STATE_WORDS = {"warm": "Ready", "cold": "Cold", "compiling": "Compiling", "failed": "Failed", "locked": "Refused"}


def preset_choices() -> list[str]:
    return [preset_label(name, shape) for name, shape in PRESETS] + [CUSTOM]


def preset_label(name: str, shape: Shape) -> str:
    return f"{name} · {shape}"


def preset_shape(label: str) -> Shape | None:
    for name, shape in PRESETS:
        if preset_label(name, shape) == label:
            return shape
    return None


def load_example_prompts(path: Path) -> list[str]:
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _seconds(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def cost_markdown(prediction: dict[str, Any] | None, error: str | None = None) -> str:
    """What the chosen (mode, shape) will cost, in one line."""
    if error:
        return f"**Invalid** — {error}"
    if prediction is None:
        return "Waiting for the model to load…"
    p = prediction
    where = f"**{p['shape']}** in **{p['mode']}** mode"
    if p.get("refused"):
        return f"**Refused** — {where}: {p['refused']}"
    if p["state"] == "compiling":
        est = p.get("estimate_compile_seconds")
        return (f"**Compiling** — {where} is compiling now "
                f"({_seconds(p.get('elapsed_seconds'))} elapsed" + (f" of ~{_seconds(est)})" if est else ")"))
    if p["will_compile"]:
        est = p.get("estimate_compile_seconds")
        guess = (f"estimated {_seconds(est)} from past compiles" if est is not None
                 else "no compile measured yet in this mode to estimate from")
        prefix = "failed before; " if p["state"] == "failed" else ""
        return f"**Cold** — {where}: {prefix}it will compile first ({guess})."
    expected = p.get("expected_seconds")
    tail = f"expected {_seconds(expected)}" if expected is not None else "no steady timing yet"
    note = p.get("note") or ""
    extra = "" if note in ("warm", "") else f" ({note})"
    return f"**Ready** — {where}: {tail}{extra}."


def badge_state(prediction: dict[str, Any]) -> str:
    if prediction.get("refused"):
        return "locked"
    if prediction["state"] in ("warm", "compiling", "failed"):
        return prediction["state"]
    return "cold" if prediction["will_compile"] else "warm"


def badges_html(predictions: list[tuple[str, dict[str, Any]]]) -> str:
    """One badge per preset: its state in the current mode."""
    spans = []
    for label, p in predictions:
        state = badge_state(p)
        title = html.escape(cost_markdown(p).replace("**", ""), quote=True)
        spans.append(f'<span class="ns-badge ns-{state}" data-shape="{p["shape"]}" data-state="{state}" '
                     f'title="{title}"><i></i>{html.escape(label)} · {state}</span>')
    return '<div class="ns-badges">' + "".join(spans) + "</div>"


def engine_markdown(status: dict[str, Any]) -> str:
    """The line under the title: model, device, state, and what is running right now."""
    model = status["model"].get("label") or status["model"]["spec"]
    dev = status.get("device") or {}
    where = f"{dev.get('kind', '…')} ({status.get('dtype') or '…'})"
    state = status["state"]
    if state == "failed":
        return f"**Model failed to load** — {model}: {status.get('load_error')}"
    if state in ("idle", "loading"):
        return f"Loading **{model}** on {where}…"
    line = f"**{model}** on **{where}** · {state}"
    if status.get("warm_only"):
        line += " · locked to warm shapes"
    busy = status.get("busy")
    if busy:
        phase = busy["phase"]
        step = f" step {busy['step']}/{busy['steps']}" if phase == "denoising" else ""
        line += f" · **busy**: {busy['mode']} {busy['shape']} {phase}{step} ({busy['elapsed']:.1f} s)"
    if status.get("degraded"):
        line += f" · **{status['degraded']}**"
    warmup = status.get("warmup")
    if warmup and warmup.get("running"):
        line += f" · warming up {warmup['done']}/{warmup['total']} in {warmup['mode']}"
    return line


def _bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def system_markdown(status: dict[str, Any]) -> str:
    dev = status.get("device") or {}
    cache = status.get("cache") or {}
    mem = status.get("memory") or {}
    engine = status.get("engine") or {}
    rows = [
        ("Device", f"{dev.get('kind', '…')} — {dev.get('reason', 'resolving')}"),
        ("Model", status["model"].get("label") or status["model"]["spec"]),
        ("Dtype", status.get("dtype") or "…"),
        ("Default mode", status.get("default_mode")),
        ("Engine", f"{engine.get('engine', '…')} · {status['state']}"
                   + (f" · active mode {engine['active_mode']}" if engine.get("active_mode") else "")),
        ("Compile backend", dev.get("compile_backend", "…")),
        *[("Compile cache", f"`{c['dir']}` ({_bytes(c['bytes'])}, {c['variable']})")
          for c in cache.get("caches") or [{"dir": "…", "bytes": None, "variable": ""}]],
        *([("NeuronCores", core_plan_text(status["neuron_cores"]))] if status.get("neuron_cores") else []),
        ("Memory", f"RSS {_bytes(mem.get('rss_bytes'))}, device {_bytes(mem.get('device_allocated_bytes'))}"),
        ("Warm-only lock", "on" if status.get("warm_only") else "off"),
        ("Last error", status.get("last_error") or "none"),
    ]
    return "\n".join(["| System | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows])


SHAPE_COLUMNS = ["mode", "shape", "state", "compile s", "steady s", "runs", "error"]


def shapes_frame(status: dict[str, Any]) -> pd.DataFrame:
    rows = [[r["mode"], r["shape"], r["state"],
             None if r["compile_seconds"] is None else round(r["compile_seconds"], 2),
             None if r["steady_seconds"] is None else round(r["steady_seconds"], 3),
             r["runs"], r["error"] or ""] for r in status.get("shapes", [])]
    return pd.DataFrame(rows, columns=SHAPE_COLUMNS)


def warmup_markdown(status: dict[str, Any]) -> str:
    w = status.get("warmup")
    if not w:
        return ""
    if w.get("running"):
        return f"Warming up {w['mode']}: {w['done']}/{w['total']} done, now {w.get('current') or '…'}"
    if w.get("error"):
        return f"**Warm-up stopped** — {w['error']}"
    return f"Warm-up finished: {w['total']} shape(s) in {w['mode']} mode"


def latency_frame(records: list[Any]) -> pd.DataFrame:
    """Steady-state seconds per image (median over runs) against megapixels, per mode."""
    rows = [{"mode": r.mode, "megapixels": r.width * r.height / 1e6, "shape": f"{r.width}x{r.height}",
             "seconds": r.seconds} for r in records if not r.compiled]
    if not rows:
        return pd.DataFrame({"mode": [], "megapixels": [], "shape": [], "seconds": []})
    frame = pd.DataFrame(rows).groupby(["mode", "shape", "megapixels"], as_index=False)["seconds"].median()
    return frame.sort_values(["mode", "megapixels"]).reset_index(drop=True)


def compile_frame(status: dict[str, Any]) -> pd.DataFrame:
    """Measured compile seconds per (shape, mode); shapes that reused a graph are left out."""
    rows = [{"shape · mode": f"{r['shape']} · {r['mode']}", "mode": r["mode"],
             "compile seconds": r["compile_seconds"]}
            for r in status.get("shapes", []) if r["compiles"] and r["compile_seconds"]]
    return pd.DataFrame(rows, columns=["shape · mode", "mode", "compile seconds"])


def compile_text(result: dict[str, Any]) -> str:
    """What a run compiled: torch.compile graphs and (on Neuron) NEFFs, counted apart — every graph
    is also at least one NEFF, and eager ops compile NEFFs of their own."""
    if not result["compiled"]:
        return "no compile (warm)"
    parts = []
    if result["compiles"]:
        parts.append(f"{result['compiles']} graph(s) in {_seconds(result['compile_seconds'])}")
    if result.get("neff_compiles"):
        parts.append(f"{result['neff_compiles']} NEFF(s)")
    return "compiled " + " and ".join(parts)


def run_markdown(result: dict[str, Any]) -> str:
    compiled = compile_text(result)
    return (f"**{result['width']}x{result['height']}**, {result['mode']}, {result['steps']} steps, "
            f"seed `{result['seed']}` — **{_seconds(result['seconds'])}** total: "
            f"encode {_seconds(result['encode'])}, denoise {_seconds(result['denoise'])}, "
            f"decode {_seconds(result['decode'])}; {compiled}.")


def compare_frame(entries: list[dict[str, Any]]) -> pd.DataFrame:
    rows = [{"mode": e["mode"], "seconds": round(e["result"]["seconds"], 3),
             "compiled": e["result"]["compiled"], "compile s": round(e["result"]["compile_seconds"], 2),
             "max |Δ| vs first (0-255)": e["max_diff"]} for e in entries]
    return pd.DataFrame(rows, columns=["mode", "seconds", "compiled", "compile s", "max |Δ| vs first (0-255)"])


def tp_cost_markdown(tp: dict[str, Any]) -> str:
    """The cost line while tensor-parallel mode is selected but its group is not ready."""
    state = tp.get("state", "stopped")
    if state in ("launching", "loading", "warming"):
        return f"**Starting** — the tensor-parallel group ({tp.get('world_size')} ranks) is {state}…"
    if state == "dead":
        return f"**Down** — the tensor-parallel group died: {tp.get('error')}. Restart it in the System tab."
    return "**Stopped** — select tensor-parallel mode to start its worker group."


def tp_markdown(tp: dict[str, Any]) -> str:
    if not tp:
        return ""
    rows = [("State", tp.get("state")), ("Ranks", tp.get("world_size")),
            ("Each rank runs", tp.get("compile_mode", "…")),
            ("NeuronCores", ", ".join(map(str, tp["cores"])) if tp.get("cores") else "n/a on this device"),
            ("Rank pids", ", ".join(f"{r}: {p}" for r, p in sorted((tp.get("rank_pids") or {}).items())) or "…"),
            ("Group error", tp.get("error") or "none"),
            ("Last failed request", tp.get("last_request_error") or "none")]
    timings = tp.get("timings") or {}
    if "load" in timings:
        rows.append(("Load / warm-up", f"{timings['load']:.1f} s / {timings.get('warm', 0):.1f} s"))
    if "last_round_trip" in timings:
        overhead = (timings["last_round_trip"] - timings["last_worker_seconds"]) * 1000
        rows.append(("Last call", f"{timings['last_round_trip']:.3f} s round trip, {overhead:.1f} ms over the "
                                  "workers' own time"))
    return "\n".join(["| Tensor parallel | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows])


def tp_logs(tp: dict[str, Any]) -> str:
    logs = tp.get("logs") or {}
    return "\n".join(f"── {name} ──\n{text.rstrip()}" for name, text in logs.items() if text.strip())
