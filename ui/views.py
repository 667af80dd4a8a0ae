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
    tp = status.get("tp")
    if state in ("idle", "loading"):
        starting = tp and tp.get("state", "stopped") != "stopped"  # --mode tp starts the group at launch
        return f"Loading **{model}** on {where}…" + (f" · {tp_engine_text(tp)}" if starting else "")
    line = f"**{model}** on **{where}** · {state}"
    if status.get("warm_only"):
        line += " · locked to warm shapes"
    busy = status.get("busy")
    if busy:
        phase = busy["phase"]
        step = f" step {busy['step']}/{busy['steps']}" if phase == "denoising" else ""
        line += f" · **busy**: {busy['mode']} {busy['shape']} {phase}{step} ({busy['elapsed']:.1f} s)"
    if tp:
        line += " · " + tp_engine_text(tp, show_error=not status.get("degraded"))
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


def _degraded_reason(result: dict[str, Any]) -> str:
    why = result["degraded"].removeprefix("degraded: ")
    return why.split("; tensor-parallel requests run in process")[0]  # the run line says that already


def mode_text(result: dict[str, Any]) -> str:
    """Which mode served a run, as it was: a TP request served in process says so, never "tp"."""
    mode = result["mode"]
    if result.get("degraded"):
        return f"served in process ({mode}) instead of {result.get('requested_mode') or 'tp'}"
    if mode == "tp":
        return f"tp ({result.get('world_size', 1)} ranks)"
    return mode


def mode_caption(result: dict[str, Any]) -> str:
    """The short form of ``mode_text`` for gallery captions."""
    if result.get("degraded"):
        return f"{result['mode']} in process ({result.get('requested_mode') or 'tp'} down)"
    if result["mode"] == "tp":
        return f"tp ×{result.get('world_size', 1)}"
    return result["mode"]


def run_markdown(result: dict[str, Any]) -> str:
    compiled = compile_text(result)
    line = (f"**{result['width']}x{result['height']}**, {mode_text(result)}, {result['steps']} steps, "
            f"seed `{result['seed']}` — **{_seconds(result['seconds'])}** total: "
            f"encode {_seconds(result['encode'])}, denoise {_seconds(result['denoise'])}, "
            f"decode {_seconds(result['decode'])}; {compiled}.")
    if result.get("degraded"):
        line += f" **Degraded** — {_degraded_reason(result)}."
    return line


def compare_frame(entries: list[dict[str, Any]]) -> pd.DataFrame:
    rows = [{"mode": mode_caption(e["result"]) if e["result"].get("degraded") else e["mode"],
             "seconds": round(e["result"]["seconds"], 3),
             "compiled": e["result"]["compiled"], "compile s": round(e["result"]["compile_seconds"], 2),
             "max |Δ| vs first (0-255)": e["max_diff"]} for e in entries]
    return pd.DataFrame(rows, columns=["mode", "seconds", "compiled", "compile s", "max |Δ| vs first (0-255)"])


TP_STARTING = ("launching", "loading", "warming")
TP_RUNNING = TP_STARTING + ("ready",)


def _tp_start_seconds(tp: dict[str, Any]) -> float | None:
    """Load plus warm-up of the group's last start, if one was measured."""
    timings = tp.get("timings") or {}
    if "load" not in timings:
        return None
    return timings["load"] + (timings.get("warm") or 0.0)


def _short(text: Any, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def tp_engine_text(tp: dict[str, Any], show_error: bool = True) -> str:
    """The group's state for the engine line under the title (every page shows it)."""
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    text = f"tensor-parallel group **{state}**"
    if state in TP_RUNNING:
        text += f" ({ranks} ranks)"
    if state == "dead" and show_error and tp.get("error"):
        text += f": {_short(tp['error'])}"
    return text


def tp_state_html(tp: dict[str, Any]) -> str:
    """A badge with the group's state; ``data-state`` carries it for scripts and tests."""
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    text = {"ready": f"ready · {ranks} ranks", "stopping": "stopping…", "stopped": "stopped",
            "dead": "dead"}.get(state, f"{state}… · {ranks} ranks")
    title = html.escape(str(tp.get("error") or ""), quote=True)
    return (f'<span class="ns-tp ns-tp-{html.escape(state)}" data-state="{html.escape(state)}" '
            f'data-ranks="{ranks}" title="{title}"><i></i>Tensor-parallel group: {html.escape(text)}</span>')


def _start_cost(tp: dict[str, Any], degree: int) -> str:
    """What pressing Start will cost, to follow "press **Start group**"."""
    seconds, last = _tp_start_seconds(tp), tp.get("world_size")
    if seconds is None:
        return (f": it launches {degree} processes that each load the model (no start measured yet to "
                "estimate the time)")
    with_ranks = "" if last == degree else f", with {last} ranks,"
    return f" ({degree} ranks; its last start{with_ranks} took {_seconds(seconds)} to load and warm up)"


def tp_cost_markdown(tp: dict[str, Any], degree: int | None = None, degraded: str | None = None) -> str:
    """The cost line while tensor-parallel mode is picked and its group is not ready: what to do
    before Generate and what it will cost. ``degree`` is this page's TP degree; ``degraded`` the
    status's sentence when TP requests are being served in process meanwhile."""
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    degree = degree or ranks
    meanwhile = (f' Meanwhile requests are served in process ({tp.get("compile_mode") or "in process"}, '
                 '"degraded").' if degraded else "")
    if state in TP_STARTING:
        return f"**Starting** — the tensor-parallel group ({ranks} ranks) is {state}…{meanwhile}"
    if state == "stopping":
        return "**Stopping** — the tensor-parallel group is stopping; press **Start group** once it has stopped."
    if state == "dead":
        return (f"**Down** — the tensor-parallel group died: {_short(tp.get('error') or 'no reason given', 300)}. "
                f"Press **Start group** to launch it again{_start_cost(tp, degree)}.{meanwhile}")
    return (f"**Stopped** — the tensor-parallel group is stopped — press **Start group**{_start_cost(tp, degree)}. "
            "Generate in this mode needs it.")


def tp_group_note(tp: dict[str, Any], degree: int | None) -> str:
    """Appended to the cost line when the group is ready: which group Generate will run on."""
    ranks = tp.get("world_size")
    if degree and ranks and degree != ranks:
        return (f" Runs on the ready group of {ranks} ranks, not {degree}: **Start group** replaces "
                f"it{_start_cost(tp, degree)}.")
    return f" Runs on the ready group of {ranks} ranks."


def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.2f}"


def tp_ranks_markdown(ranks: list[dict[str, Any]]) -> str:
    """One row per rank (known once the group is ready): where it runs and what it holds."""
    if not ranks:
        return ""
    head = ["| Rank | pid | NeuronCore | transformer MB | sharded MB | replicated MB | weights |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    rows = [f"| {r['rank']} | {r.get('pid') or '…'} | {'n/a' if r.get('core') is None else r['core']} | "
            f"{_mb(r.get('transformer_bytes'))} | {_mb(r.get('sharded_bytes'))} | {_mb(r.get('replicated_bytes'))} | "
            f"{len(r.get('sharded') or [])} weights sharded |" for r in sorted(ranks, key=lambda r: r["rank"])]
    return "\n".join(head + rows)


def tp_markdown(tp: dict[str, Any]) -> str:
    """The System tab's tensor-parallel panel: the group, its last start, its ranks."""
    if not tp:
        return ""
    state = tp.get("state", "stopped")
    rows = [("State", state), ("Ranks", tp.get("world_size")),
            ("Each rank runs", tp.get("compile_mode", "…")),
            ("NeuronCores", ", ".join(map(str, tp["cores"])) if tp.get("cores") else "n/a on this device"),
            ("Rank pids", ", ".join(f"{r}: {p}" for r, p in sorted((tp.get("rank_pids") or {}).items())) or "…"),
            ("Group error", tp.get("error") or "none"),
            ("Last failed request", tp.get("last_request_error") or "none")]
    timings = tp.get("timings") or {}
    if "load" in timings:
        rows.append(("Load / warm-up", f"{timings['load']:.1f} s / {timings.get('warm') or 0:.1f} s"))
    if "last_round_trip" in timings and "last_worker_seconds" in timings:
        overhead = (timings["last_round_trip"] - timings["last_worker_seconds"]) * 1000
        rows.append(("Last call", f"{timings['last_round_trip']:.3f} s round trip, {overhead:.1f} ms over the "
                                  "workers' own time"))
    table = "\n".join(["| Tensor parallel | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows])
    ranks = tp_ranks_markdown(tp.get("ranks") or [])
    return table + ("\n\n" + ranks if ranks else "")


def tp_logs_text(logs: dict[str, str]) -> str:
    """``Manager.tp_logs`` rendered for the Rank logs box."""
    shown = [f"── {name} ──\n{text.rstrip()}" for name, text in (logs or {}).items() if text and text.strip()]
    return "\n".join(shown) or "No rank logs: the tensor-parallel group has not been started."
