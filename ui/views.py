"""Pure rendering: status snapshots and predictions in, Markdown, HTML and pandas frames out.

No gradio and no torch here, so every view is unit-testable with plain dicts. Views that say words
take ``lang`` ("en" or "tr", English by default) and take them from ``ui.i18n``; numbers, sizes,
mode names and the backend's own texts are written the same in both languages.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd

from backend.core_plan import plan_text as core_plan_text
from backend.shapes import Shape
from ui.i18n import DEFAULT, MESSAGES, text

MESSAGES_EN = MESSAGES[DEFAULT]

CUSTOM = "Custom"
# The modes' display names are ui.i18n keys (the page shows them in its language).
MODE_KEYS = {"eager": "mode_eager", "compiled": "mode_compiled", "regional": "mode_regional", "tp": "mode_tp"}


def preset_choices(presets) -> list[str]:
    """``presets``: the served model's (``ModelCard.presets``), then "Custom"."""
    return [preset_label(name, shape) for name, shape in presets] + [CUSTOM]


def preset_label(name: str, shape: Shape) -> str:
    return f"{name} · {shape}"


def preset_shape(label: str, presets) -> Shape | None:
    for name, shape in presets:
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


def cost_markdown(prediction: dict[str, Any] | None, error: str | None = None, lang: str = DEFAULT) -> str:
    """What the chosen (mode, shape) will cost, in one line. ``error`` is already in ``lang``."""
    if error:
        return text(lang, "cost_invalid", error=error)
    if prediction is None:
        return text(lang, "cost_waiting")
    p = prediction
    where = text(lang, "cost_where", shape=p["shape"], mode=p["mode"])
    if p.get("refused"):
        return text(lang, "cost_refused", where=where, reason=p["refused"])
    if p["state"] == "compiling":
        est = p.get("estimate_compile_seconds")
        return (text(lang, "cost_compiling", where=where, elapsed=_seconds(p.get("elapsed_seconds")))
                + (text(lang, "cost_compiling_of", estimate=_seconds(est)) if est else ")"))
    if p["will_compile"]:
        est = p.get("estimate_compile_seconds")
        guess = (text(lang, "cost_no_estimate") if est is None
                 else text(lang, "cost_prior", estimate=_seconds(est)) if p.get("estimate_source") == "prior"
                 else text(lang, "cost_estimate", estimate=_seconds(est)))
        prefix = text(lang, "cost_failed_before") if p["state"] == "failed" else ""
        return text(lang, "cost_cold", where=where, prefix=prefix, guess=guess) + warm_on_text(p, lang)
    expected = p.get("expected_seconds")
    tail = (text(lang, "cost_expected", seconds=_seconds(expected)) if expected is not None
            else text(lang, "cost_no_timing"))
    note = p.get("note") or ""
    extra = "" if note in ("warm", "") else f" ({note})"
    return text(lang, "cost_ready", where=where, tail=tail, extra=extra) + warm_on_text(p, lang)


def warm_on_text(prediction: dict[str, Any], lang: str = DEFAULT) -> str:
    """" · warm on 2 of 4 replicas" where several processes serve the mode (nothing otherwise)."""
    warm_on = prediction.get("warm_on")
    return text(lang, "cost_warm_on", warm=warm_on[0], of=warm_on[1]) if warm_on else ""


def badge_state(prediction: dict[str, Any]) -> str:
    if prediction.get("refused"):
        return "locked"
    if prediction["state"] in ("warm", "compiling", "failed"):
        return prediction["state"]
    return "cold" if prediction["will_compile"] else "warm"


def badges_html(predictions: list[tuple[str, dict[str, Any]]], lang: str = DEFAULT) -> str:
    """One badge per preset: its state in the current mode."""
    spans = []
    for label, p in predictions:
        state = badge_state(p)
        title = html.escape(cost_markdown(p, lang=lang).replace("**", ""), quote=True)
        warm_on = p.get("warm_on")
        count = f" {warm_on[0]}/{warm_on[1]}" if warm_on else ""
        spans.append(f'<span class="ns-badge ns-{state}" data-shape="{p["shape"]}" data-state="{state}" '
                     f'title="{title}"><i></i>{html.escape(label)} · {text(lang, "badge_" + state)}{count}</span>')
    return '<div class="ns-badges">' + "".join(spans) + "</div>"


def engine_markdown(status: dict[str, Any], lang: str = DEFAULT) -> str:
    """The line under the title: model, device, state, and what is running right now."""
    model = status["model"].get("label") or status["model"]["spec"]
    dev = status.get("device") or {}
    where = f"{dev.get('kind', '…')} ({status.get('dtype') or '…'})"
    state = status["state"]
    if state == "failed":
        return text(lang, "engine_failed", model=model, error=status.get("load_error"))
    tp = status.get("tp")
    if state in ("idle", "loading"):
        starting = tp and tp.get("state", "stopped") != "stopped"  # --mode tp starts the group at launch
        return (text(lang, "engine_loading", model=model, where=where)
                + (f" · {tp_engine_text(tp, lang=lang)}" if starting else ""))
    state_key = f"engine_state_{state}"
    line = text(lang, "engine_ready", model=model, where=where,
                state=text(lang, state_key) if state_key in MESSAGES_EN else state)
    if status.get("warm_only"):
        line += text(lang, "engine_locked")
    busy = status.get("busy")
    if busy:
        phase = busy["phase"]
        step = text(lang, "engine_step", step=busy["step"], steps=busy["steps"]) if phase == "denoising" else ""
        line += text(lang, "engine_busy", mode=busy["mode"], shape=busy["shape"], phase=_phase(phase, lang),
                     step=step, elapsed=f"{busy['elapsed']:.1f} s")
    if tp:
        line += " · " + tp_engine_text(tp, show_error=not status.get("degraded"), lang=lang)
    pool = status.get("replicas") or {}
    if pool.get("size"):
        line += text(lang, "engine_replicas", ready=pool["ready"], size=pool["size"], busy=pool["busy"])
    if status.get("degraded"):  # something is wrong (a group died); an ordinary start says "starting" above
        line += f" · **{status['degraded']}**"
    warmup = status.get("warmup")
    if warmup and warmup.get("running"):
        line += text(lang, "engine_warming", done=warmup["done"], total=warmup["total"], mode=warmup["mode"])
    return line


def _phase(phase: str, lang: str) -> str:
    """A pipeline phase's name (encoding, compiling, denoising, decoding) in ``lang``."""
    key = f"phase_{phase}"
    return text(lang, key) if key in MESSAGES_EN else phase


def _bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


# The device layer's reason for its choice is English; its fragments, in the page's language.
_REASON_WORDS = {"tr": (("TorchNeuron not installed", "TorchNeuron kurulu değil"), ("no CUDA device", "CUDA aygıtı yok"),
                        ("no NeuronCore visible", "görünür NeuronCore yok"),
                        ("TorchNeuron installed and", "TorchNeuron kurulu ve"),
                        ("NeuronCore(s) visible", "NeuronCore görünüyor"), ("CUDA device(s)", "CUDA aygıtı"),
                        ("requested", "istendi"), ("auto:", "otomatik:"))}


def device_reason(reason: str, lang: str = DEFAULT) -> str:
    """Why the device was chosen, in the page's language (the numbers as they are)."""
    for english, local in _REASON_WORDS.get(lang, ()):
        reason = reason.replace(english, local)
    return reason


def system_markdown(status: dict[str, Any], lang: str = DEFAULT) -> str:
    dev = status.get("device") or {}
    cache = status.get("cache") or {}
    mem = status.get("memory") or {}
    engine = status.get("engine") or {}
    def t(key: str, **values: Any) -> str:
        return text(lang, key, **values)

    state_key = f"engine_state_{status['state']}"
    rows = [
        (t("sys_device"), f"{dev.get('kind', '…')} — "
                          + (device_reason(dev["reason"], lang) if dev.get("reason") else t("resolving"))),
        (t("sys_model"), status["model"].get("label") or status["model"]["spec"]),
        (t("sys_dtype"), status.get("dtype") or "…"),
        (t("sys_default_mode"), status.get("default_mode")),
        (t("sys_engine"), f"{t('engine_name_' + engine['engine'].replace('-', '_')) if engine.get('engine') else '…'} · "
                          f"{t(state_key) if state_key in MESSAGES_EN else status['state']}"
                          + (t("sys_active_mode", mode=engine["active_mode"]) if engine.get("active_mode") else "")),
        (t("sys_compile_backend"), dev.get("compile_backend", "…")),
        *[(t("sys_cache"), f"`{c['dir']}` ({_bytes(c['bytes'])}, {c['variable']})")
          for c in cache.get("caches") or [{"dir": "…", "bytes": None, "variable": ""}]],
        *([(t("sys_cores"), core_plan_text(status["neuron_cores"]))] if status.get("neuron_cores") else []),
        (t("sys_memory"), t("sys_memory_value", rss=_bytes(mem.get("rss_bytes")),
                            device=_bytes(mem.get("device_allocated_bytes")))),
        (t("sys_lock"), t("on") if status.get("warm_only") else t("off")),
        *([(t("sys_host_ops"), "; ".join(f"`{op}` ({', '.join(where)})" for op, where in status["fallback_ops"].items()))]
          if status.get("fallback_ops") else []),
        (t("sys_last_error"), status.get("last_error") or t("none")),
    ]
    return "\n".join([f"| {t('sys_head')} | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows])


SHAPE_COLUMNS = ["col_mode", "col_shape", "col_state", "col_compile_s", "col_steady_s", "col_runs", "col_error"]
COMPARE_COLUMNS = ["col_mode", "col_seconds", "col_compiled", "col_compile_s", "col_max_diff"]


def _columns(keys: list[str], lang: str) -> list[str]:
    return [text(lang, key) for key in keys]


def shapes_frame(status: dict[str, Any], lang: str = DEFAULT) -> pd.DataFrame:
    # A shape warmed from a bundle shows the bundle's compile seconds, labelled so, until it runs here.
    rows = [[r["mode"], r["shape"], text(lang, f"badge_{r['state']}") + (
                 f" ({text(lang, 'from_bundle')})" if r.get("bundle_compile_seconds") is not None else ""),
             (f"{r['bundle_compile_seconds']:.2f} ({text(lang, 'from_bundle')})"
              if r.get("bundle_compile_seconds") is not None else
              None if r["compile_seconds"] is None else round(r["compile_seconds"], 2)),
             None if r["steady_seconds"] is None else text(lang, "steady_of", seconds=f"{r['steady_seconds']:.3f}",
                                                           count=r.get("steady_runs", 1)),
             r["runs"], r["error"] or ""] for r in status.get("shapes", [])]
    return pd.DataFrame(rows, columns=_columns(SHAPE_COLUMNS, lang))


def warmup_markdown(status: dict[str, Any], lang: str = DEFAULT) -> str:
    w = status.get("warmup")
    if not w:
        return ""
    if w.get("running"):
        return text(lang, "warmup_running", mode=w["mode"], done=w["done"], total=w["total"],
                    current=w.get("current") or "…")
    if w.get("error"):
        return text(lang, "warmup_stopped", error=w["error"])
    return text(lang, "warmup_done", total=w["total"], mode=w["mode"])


def latency_frame(records: list[Any]) -> pd.DataFrame:
    """Steady-state seconds per image (median over runs) against megapixels, per mode."""
    rows = [{"mode": r.mode, "megapixels": r.width * r.height / 1e6, "shape": f"{r.width}x{r.height}",
             "seconds": r.seconds} for r in records if not r.compiled and not r.overlapped]
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


# One colour per mode in both Performance plots (the plots' own palettes assign colours by order).
MODE_COLORS = {"eager": "#4c78a8", "compiled": "#f58518", "regional": "#54a24b", "tp": "#e45756"}


def plot_axes(lang: str = DEFAULT, latency_empty: bool = False,
              compile_empty: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """Titles and axis and legend titles of the latency and compile plots in ``lang`` (the frames'
    column names stay the same in every language). An empty plot's title says what will appear."""
    latency = {"title": text(lang, "latency_empty" if latency_empty else "latency_title"),
               "x_title": text(lang, "axis_megapixels"), "y_title": text(lang, "axis_seconds"),
               "color_title": text(lang, "axis_mode"), "color_map": MODE_COLORS}
    compile_ = {"title": text(lang, "compile_empty" if compile_empty else "compile_title"),
                "x_title": text(lang, "axis_shape_mode"), "y_title": text(lang, "axis_compile_seconds"),
                "color_title": text(lang, "axis_mode"), "color_map": MODE_COLORS}
    return latency, compile_


def compile_text(result: dict[str, Any], lang: str = DEFAULT) -> str:
    """What a run compiled: torch.compile graphs and (on Neuron) NEFFs, counted apart — every graph
    is also at least one NEFF, and eager ops compile NEFFs of their own."""
    if not result["compiled"]:
        return text(lang, "run_warm")
    parts = []
    if result["compiles"]:
        parts.append(text(lang, "run_graphs", count=result["compiles"], seconds=_seconds(result["compile_seconds"])))
    if result.get("neff_compiles"):
        parts.append(text(lang, "run_neffs", count=result["neff_compiles"]))
    return text(lang, "run_compiled", parts=text(lang, "run_and").join(parts))


def _degraded_reason(result: dict[str, Any]) -> str:
    why = result["degraded"].removeprefix("degraded: ")
    return why.split("; tensor-parallel requests run in process")[0]  # the run line says that already


def mode_text(result: dict[str, Any], lang: str = DEFAULT) -> str:
    """Which mode served a run, as it was: a TP request served in process says so, never "tp"."""
    mode = result["mode"]
    if result.get("degraded"):
        return text(lang, "run_in_process", mode=mode, requested=result.get("requested_mode") or "tp")
    if mode == "tp":
        return text(lang, "run_tp", ranks=result.get("world_size", 1))
    return mode


def mode_caption(result: dict[str, Any], lang: str = DEFAULT) -> str:
    """The short form of ``mode_text`` for gallery captions and the compare table."""
    if result.get("degraded"):
        return text(lang, "caption_degraded", mode=result["mode"], requested=result.get("requested_mode") or "tp")
    if result["mode"] == "tp":
        return f"tp ×{result.get('world_size', 1)}"
    return result["mode"]


def run_markdown(result: dict[str, Any], lang: str = DEFAULT) -> str:
    line = text(lang, "run_line", size=f"{result['width']}x{result['height']}", mode=mode_text(result, lang),
                steps=result["steps"], seed=result["seed"], total=_seconds(result["seconds"]),
                encode=_seconds(result["encode"]), denoise=_seconds(result["denoise"]),
                decode=_seconds(result["decode"]), compiled=compile_text(result, lang))
    if result.get("degraded"):
        line += text(lang, "run_degraded", reason=_degraded_reason(result))
    if result.get("typed"):  # the model read the prompt as a caption of its grammar
        line += text(lang, "run_drawn_as", caption=result["prompt"])
    if result.get("fallback_ops"):  # Neuron ran these on the CPU, silently: say so
        line += text(lang, "run_host_ops", count=len(result["fallback_ops"]), ops=", ".join(result["fallback_ops"]))
    return line


def beyond_training_note(trained_pixels: int, nearest: str | None = None, lang: str = DEFAULT) -> str:
    """Said before the click: what the model really does at a size past its training, and the
    nearest preset it draws well."""
    side = int(trained_pixels ** 0.5)
    note = text(lang, "cost_beyond_training", pixels=f"{trained_pixels:,}", side=f"{side}x{side}")
    return note + (text(lang, "cost_nearest_preset", preset=nearest) if nearest else "")


def reading_note(reading, examples: list[str], lang: str = DEFAULT) -> str:
    """After a run whose prompt the model's grammar only partly understood: the words it did not
    understand, what it made up, and the example prompt closest to what was asked."""
    parts = []
    if reading.ignored:
        parts.append(text(lang, "read_ignored", words=", ".join(f"“{w}”" for w in reading.ignored)))
    if reading.guessed:
        parts.append(text(lang, "read_guessed", what=", ".join(reading.guessed)))
    if not parts:
        return ""
    asked = set(reading.caption.replace(",", " ").split())
    closest = max(examples, key=lambda e: len(asked & set(e.replace(",", " ").split())), default=None)
    return " " + "; ".join(parts) + "." + (text(lang, "read_try", example=closest) if closest else "")


def compare_frame(entries: list[dict[str, Any]], lang: str = DEFAULT) -> pd.DataFrame:
    rows = [[mode_caption(e["result"], lang) if e["result"].get("degraded") else e["mode"],
             round(e["result"]["seconds"], 3), e["result"]["compiled"], round(e["result"]["compile_seconds"], 2),
             e["max_diff"]] for e in entries]
    return pd.DataFrame(rows, columns=_columns(COMPARE_COLUMNS, lang))


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


def _tp_state(state: str, lang: str) -> str:
    key = f"tp_state_{state}"
    return text(lang, key) if key in MESSAGES_EN else state


def tp_engine_text(tp: dict[str, Any], show_error: bool = True, lang: str = DEFAULT) -> str:
    """The group's state for the engine line under the title (every page shows it)."""
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    line = text(lang, "tp_engine", state=_tp_state(state, lang))
    if state in TP_RUNNING:
        line += text(lang, "tp_engine_ranks", ranks=ranks)
    if state == "dead" and show_error and tp.get("error"):
        line += f": {_short(tp['error'])}"
    return line


def tp_state_html(tp: dict[str, Any], lang: str = DEFAULT) -> str:
    """A badge with the group's state; ``data-state`` carries it for scripts and tests."""
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    if state == "ready":
        words = text(lang, "tp_badge_ready", ranks=ranks)
    elif state == "stopping":
        words = _tp_state(state, lang) + "…"
    elif state in ("stopped", "dead"):
        words = _tp_state(state, lang)
    else:
        words = text(lang, "tp_badge_starting", state=_tp_state(state, lang), ranks=ranks)
    title = html.escape(str(tp.get("error") or ""), quote=True)
    badge = html.escape(text(lang, "tp_badge", text=words))
    return (f'<span class="ns-tp ns-tp-{html.escape(state)}" data-state="{html.escape(state)}" '
            f'data-ranks="{ranks}" title="{title}"><i></i>{badge}</span>')


def _start_cost(tp: dict[str, Any], degree: int, lang: str = DEFAULT) -> str:
    """What pressing Start will cost, to follow "press **Start group**"."""
    seconds, last = _tp_start_seconds(tp), tp.get("world_size")
    if seconds is None:
        return text(lang, "tp_start_unmeasured", degree=degree)
    with_ranks = "" if last == degree else text(lang, "tp_with_ranks", ranks=last)
    return text(lang, "tp_start_measured", degree=degree, with_ranks=with_ranks, seconds=_seconds(seconds))


def tp_cost_markdown(tp: dict[str, Any], degree: int | None = None, operator: bool = True,
                     lang: str = DEFAULT) -> str:
    """The cost line while tensor-parallel mode is picked and its group is not ready: what happens to
    a click now (it runs in process meanwhile) and, for the operator, what starting the group costs.
    A viewer reads only what a viewer can do: the operator starts and stops the group."""
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    degree = degree or ranks
    meanwhile = text(lang, "tp_meanwhile", mode=tp.get("compile_mode") or "eager")
    if state in TP_STARTING:
        return text(lang, "tp_cost_starting", ranks=ranks, state=_tp_state(state, lang), meanwhile=meanwhile)
    if not operator:
        key = "tp_cost_dead_viewer" if state == "dead" else "tp_cost_stopped_viewer"
        return text(lang, key, meanwhile=meanwhile)
    if state == "stopping":
        return text(lang, "tp_cost_stopping") + meanwhile
    if state == "dead":
        return text(lang, "tp_cost_dead", error=_short(tp.get("error") or text(lang, "tp_no_reason"), 300),
                    cost=_start_cost(tp, degree, lang), meanwhile=meanwhile)
    return text(lang, "tp_cost_stopped", cost=_start_cost(tp, degree, lang), meanwhile=meanwhile)


def tp_group_note(tp: dict[str, Any], degree: int | None, lang: str = DEFAULT) -> str:
    """Appended to the cost line when the group is ready: which group Generate will run on."""
    ranks = tp.get("world_size")
    if degree and ranks and degree != ranks:
        return text(lang, "tp_note_other", ranks=ranks, degree=degree, cost=_start_cost(tp, degree, lang))
    return text(lang, "tp_note", ranks=ranks)


def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.2f}"


def tp_ranks_markdown(ranks: list[dict[str, Any]]) -> str:
    """One row per rank (known once the group is ready): where it runs and what it holds."""
    if not ranks:
        return ""
    head = ["| Rank | pid | NeuronCore | device | transformer MB | sharded MB | replicated MB | weights |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = [f"| {r['rank']} | {r.get('pid') or '…'} | {'n/a' if r.get('core') is None else r['core']} | "
            f"{r.get('device') or '…'} | "
            f"{_mb(r.get('transformer_bytes'))} | {_mb(r.get('sharded_bytes'))} | {_mb(r.get('replicated_bytes'))} | "
            f"{len(r.get('sharded') or [])} weights sharded |" for r in sorted(ranks, key=lambda r: r["rank"])]
    return "\n".join(head + rows)


def tp_markdown(tp: dict[str, Any], lang: str = DEFAULT) -> str:
    """The System tab's tensor-parallel panel: the group, its last start, its ranks."""
    if not tp:
        return ""
    def t(key: str, **values: Any) -> str:
        return text(lang, key, **values)

    state = tp.get("state", "stopped")
    rows = [(t("tp_row_state"), _tp_state(state, lang)), (t("tp_row_ranks"), tp.get("world_size")),
            (t("tp_row_each"), tp.get("compile_mode", "…")),
            (t("tp_row_cores"), ", ".join(map(str, tp["cores"])) if tp.get("cores") else t("tp_no_cores")),
            (t("tp_row_pids"), ", ".join(f"{r}: {p}" for r, p in sorted((tp.get("rank_pids") or {}).items()))
             or "…"),
            (t("tp_row_error"), tp.get("error") or t("none")),
            (t("tp_row_request"), tp.get("last_request_error") or t("none"))]
    timings = tp.get("timings") or {}
    if "load" in timings:
        rows.append((t("tp_row_load"), f"{timings['load']:.1f} s / {timings.get('warm') or 0:.1f} s"))
    if "last_round_trip" in timings and "last_worker_seconds" in timings:
        overhead = (timings["last_round_trip"] - timings["last_worker_seconds"]) * 1000
        rows.append((t("tp_row_call"), t("tp_call_value", round_trip=f"{timings['last_round_trip']:.3f} s",
                                         overhead=f"{overhead:.1f} ms")))
    table = "\n".join([f"| {t('tp_head')} | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows])
    ranks = tp_ranks_markdown(tp.get("ranks") or [])
    return table + ("\n\n" + ranks if ranks else "")


def tp_logs_text(logs: dict[str, str], lang: str = DEFAULT) -> str:
    """``Manager.engine_logs("tensor-parallel")`` rendered for the Rank logs box."""
    shown = [f"── {name} ──\n{tail.rstrip()}" for name, tail in (logs or {}).items() if tail and tail.strip()]
    return "\n".join(shown) or text(lang, "tp_no_logs")


def bundle_markdown(manifest: dict[str, Any], mismatch: str | None, lang: str = DEFAULT) -> str:
    """An uploaded bundle before it is imported: what it warms, what it was made with, whether it
    applies here, and that importing runs its author's code."""
    rows = [f"| {key} | {manifest.get(key)} |" for key in ("created", "model", "device", "neuron_target", "lnc",
                                                            "neuron_opt_level", "neuron_cc_flags", "dtype",
                                                            "compile_backend", "torch", "torch_neuronx", "tp_degree")]
    entries = ", ".join(f"{e.get('mode')} {e.get('shape')}" for e in manifest.get("entries") or []) or "—"
    size = sum(f.get("bytes", 0) for f in manifest.get("files") or [])
    verdict = text(lang, "bundle_applies") if mismatch is None else text(lang, "bundle_mismatch", why=mismatch)
    return "\n".join([f"**{text(lang, 'bundle_entries')}:** {entries} · {len(manifest.get('files') or [])} "
                      f"files, {size / 1e6:.1f} MB", "", "| | |", "| --- | --- |", *rows, "", verdict, "",
                      text(lang, "bundle_trust")])


def replicas_markdown(status: dict[str, Any], lang: str = DEFAULT, operator: bool = True) -> str:
    """The System tab's replica table: per replica its state, core, pid, whether it is busy, the
    requests it served and the shapes warm on it."""
    pool = status.get("replicas") or {}
    if not pool.get("size"):
        return text(lang, "replicas_none" if operator else "replicas_none_viewer")
    head = text(lang, "replicas_head", ready=pool["ready"], size=pool["size"], busy=pool["busy"],
                restarts=pool.get("restarts", 0))
    rows = [f"| {text(lang, 'col_replica')} | {text(lang, 'col_state')} | {text(lang, 'col_core')} | pid | "
            f"{text(lang, 'col_served')} | {text(lang, 'col_warm')} |", "| --- | --- | --- | --- | --- | --- |"]
    for r in pool["replicas"]:
        state = _tp_state(r["state"], lang) + (f" · {text(lang, 'replica_busy')}" if r.get("busy") else "")
        if r.get("error") and r["state"] == "dead":
            state += f" ({_short(r['error'], 80)})"
        core = r["core"] if r.get("core") is not None else "—"
        rows.append(f"| {r['index']} | {state} | {core} | {r.get('pid') or '—'} | {r.get('served', 0)} | "
                    f"{', '.join(r.get('warm') or []) or '—'} |")
    error = f"\n\n{pool['error']}" if pool.get("error") else ""
    return head + "\n\n" + "\n".join(rows) + error
