"""The Studio tab's views (the engine line, the cost of the chosen shape, the preset badges, the run
line) and the Compare tab's timings table. Views (every ``ui.views_*``) take plain values and return
Markdown, HTML or frames: no gradio, no torch."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import pandas as pd

from ui.i18n import DEFAULT, text
from ui.views_common import column_names, format_bytes, format_seconds, word
from ui.views_tp import tp_engine_text

if TYPE_CHECKING:
    from backend.serving.status import Status


def hint_html(help_text: str | None, lang: str = DEFAULT) -> str:
    """What the model's grammar understands: one short line, the whole sentence behind its (i)."""
    if not help_text:
        return ""
    return (f'<details class="ns-hint"><summary>{html.escape(text(lang, "prompt_hint"))} '
            f'<span class="ns-i" title="{html.escape(help_text)}">(i)</span></summary>'
            f'{html.escape(help_text)}</details>')


LOADED = 0.15  # the share of the CPU other work takes from which the cost line says so


def cost_markdown(prediction: dict[str, Any] | None, error: str | None = None, lang: str = DEFAULT) -> str:
    """``error`` is already in ``lang``."""
    if error:
        return text(lang, "cost_invalid", error=error)
    if prediction is None:
        return text(lang, "cost_waiting")
    p, est = prediction, prediction.get("estimate_compile_seconds")
    where = text(lang, "cost_where", shape=p["shape"], mode=p["mode"])
    if p.get("refused"):
        return text(lang, "cost_refused", where=where, reason=p["refused"])
    if p["state"] == "compiling":
        return (text(lang, "cost_compiling", where=where, elapsed=format_seconds(p.get("elapsed_seconds")))
                + (text(lang, "cost_compiling_of", estimate=format_seconds(est)) if est else ")"))
    if p["will_compile"]:
        guess = (text(lang, "cost_no_estimate") if est is None
                 else text(lang, "cost_prior", estimate=format_seconds(est)) if p.get("estimate_source") == "prior"
                 else text(lang, "cost_estimate_one" if p.get("estimate_compiles") == 1 else "cost_estimate",
                          estimate=format_seconds(est), count=p.get("estimate_compiles")))
        prefix = text(lang, "cost_failed_before") if p["state"] == "failed" else ""
        nearest = (text(lang, "cost_nearest_warm", signature=p["nearest_warm"])
                   if p.get("nearest_warm") and p["nearest_warm"] != p["shape"] else "")
        return (text(lang, "cost_cold", where=where, prefix=prefix, guess=guess) + warm_on_text(p, lang) + nearest
                + chip_text(p, lang))
    expected = p.get("expected_seconds")
    tail = (text(lang, "cost_expected", seconds=format_seconds(expected)) if expected is not None
            else text(lang, "cost_no_timing"))
    if expected is not None and (p.get("load") or 0) >= LOADED:  # the machine is busy: say it, and the quiet figure
        tail += text(lang, "cost_loaded", quiet=format_seconds(p["quiet_seconds"]), load=round(p["load"] * 100))
    # The backend's note in English, or one the page knows (``note_key``) in the page's language.
    note = (text(lang, "note_" + p["note_key"], **p.get("note_args", {})) if p.get("note_key")
            else p.get("note") or "")
    extra = "" if note in ("warm", "") else f" ({note})"
    return text(lang, "cost_ready", where=where, tail=tail, extra=extra) + warm_on_text(p, lang) + chip_text(p, lang)


def chip_text(prediction: dict[str, Any], lang: str = DEFAULT) -> str:
    """On Neuron: the transformer's attention path and what the signature needs of a NeuronCore."""
    needs = prediction.get("memory") or {}
    attention = next((a for a in needs.get("attentions", ()) if a["name"] == "transformer"), None)
    if attention is None:
        return ""
    out = (text(lang, "cost_attention_fast") if attention["fast"]
           else text(lang, "cost_attention_slow", size=format_bytes(attention["score_bytes"]), why=attention["why"]))
    if needs.get("hbm"):
        out += text(lang, "cost_memory", total=format_bytes(needs["total"]), hbm=format_bytes(needs["hbm"]))
    return out + "."


def warm_on_text(prediction: dict[str, Any], lang: str = DEFAULT) -> str:
    """ " · warm on 2 of 4 replicas" where several processes serve the mode."""
    warm_on = prediction.get("warm_on")
    return text(lang, "cost_warm_on", warm=warm_on[0], of=warm_on[1]) if warm_on else ""


def badge_state(prediction: dict[str, Any]) -> str:
    if prediction.get("refused"):
        return "locked"
    if prediction["state"] in ("warm", "compiling", "failed"):
        return prediction["state"]
    return "cold" if prediction["will_compile"] else "warm"


def badges_html(predictions: list[tuple[str, dict[str, Any]]], lang: str = DEFAULT) -> str:
    spans = []
    for label, p in predictions:
        state = badge_state(p)
        title = html.escape(cost_markdown(p, lang=lang).replace("**", ""), quote=True)
        warm_on = p.get("warm_on")
        word = text(lang, "badge_" + state)
        if warm_on and state == "warm":  # several processes serve the mode: warm only where it has run
            word = text(lang, "badge_warm_on", warm=warm_on[0], of=warm_on[1])
            state = "warm" if warm_on[0] else "cold"  # no green dot for "warm on 0 of 2"
        spans.append(f'<span class="ns-badge ns-{state}" data-shape="{p["shape"]}" data-state="{state}" '
                     f'title="{title}"><i></i>{html.escape(label)} · {word}</span>')
    return '<div class="ns-badges">' + "".join(spans) + "</div>"


def engine_markdown(status: Status, lang: str = DEFAULT) -> str:
    model = status.model.get("label") or status.model["spec"]
    dev = status.device or {}
    where = f"{dev.get('kind', '…')} ({status.dtype or '…'})"
    state = status.state
    if state == "failed":
        return text(lang, "engine_failed", model=model, error=status.load_error)
    tp = status.tp
    if state in ("idle", "loading"):
        starting = tp and tp.get("state", "stopped") != "stopped"  # --mode tp starts the group at launch
        return (text(lang, "engine_loading", model=model, where=where)
                + (f" · {tp_engine_text(tp, lang=lang)}" if starting else ""))
    line = text(lang, "engine_ready", model=model, where=where, state=word(lang, "engine_state_", state))
    if status.warm_only:
        line += text(lang, "engine_locked")
    if busy := status.busy:
        phase = busy["phase"]
        step = text(lang, "engine_step", step=busy["step"], steps=busy["steps"]) if phase == "denoising" else ""
        line += text(lang, "engine_busy", mode=busy["mode"], shape=busy["shape"], phase=word(lang, "phase_", phase),
                     step=step, elapsed=f"{busy['elapsed']:.1f} s")
    if tp:
        line += " · " + tp_engine_text(tp, show_error=not status.degraded, lang=lang)
    pool = status.replicas or {}
    if pool.get("size"):
        line += text(lang, "engine_replicas", ready=pool["ready"], size=pool["size"], busy=pool["busy"])
    if status.degraded:  # something is wrong (a group died); an ordinary start says "starting" above
        line += text(lang, "engine_degraded", why=status.degraded)
    warmup = status.warmup
    if warmup and warmup.get("running"):
        line += text(lang, "engine_warming", done=warmup["done"], total=warmup["total"], mode=warmup["mode"])
    return line


def compile_text(result: dict[str, Any], lang: str = DEFAULT) -> str:
    """What a run compiled: torch.compile graphs and (on Neuron) NEFFs, counted apart — every graph
    is also at least one NEFF, and eager ops compile NEFFs of their own."""
    if not result["compiled"]:
        return text(lang, "run_warm")
    parts = []
    if result["compiles"]:
        parts.append(text(lang, "run_graphs", count=result["compiles"],
                          seconds=format_seconds(result["compile_seconds"])))
    if result.get("neff_compiles"):
        parts.append(text(lang, "run_neffs", count=result["neff_compiles"]))
    return text(lang, "run_compiled", parts=text(lang, "run_and").join(parts))


def mode_text(result: dict[str, Any], lang: str = DEFAULT) -> str:
    """Which mode served a run: a TP request served in process says so, never "tp"."""
    mode = result["mode"]
    if result.get("degraded"):
        requested = result.get("requested_mode") or "tp"
        return (text(lang, "run_own_core", mode=mode) if requested == mode
                else text(lang, "run_in_process", mode=mode, requested=requested))
    return text(lang, "run_tp", ranks=result.get("world_size", 1)) if mode == "tp" else mode


def mode_caption(result: dict[str, Any], lang: str = DEFAULT) -> str:
    if result.get("degraded"):
        return text(lang, "caption_degraded", mode=result["mode"], requested=result.get("requested_mode") or "tp")
    return f"tp ×{result.get('world_size', 1)}" if result["mode"] == "tp" else result["mode"]


COMPARE_COLUMNS = ["col_mode", "col_seconds", "col_compiled", "col_compile_s", "col_max_diff"]


def compare_frame(entries: list[dict[str, Any]], lang: str = DEFAULT) -> pd.DataFrame:
    rows = [[mode_caption(e["result"], lang) if e["result"].get("degraded") else e["mode"],
             round(e["result"]["seconds"], 3), text(lang, "word_yes" if e["result"]["compiled"] else "word_no"),
             round(e["result"]["compile_seconds"], 2),
             e["max_diff"]] for e in entries]
    return pd.DataFrame(rows, columns=column_names(COMPARE_COLUMNS, lang))


def run_markdown(result: dict[str, Any], lang: str = DEFAULT) -> str:
    size = result.get("signature") or f"{result['width']}x{result['height']}"
    line = text(lang, "run_line", size=size, mode=mode_text(result, lang),
                steps=result["steps"], seed=result["seed"], total=format_seconds(result["seconds"]),
                encode=format_seconds(result["encode"]), denoise=format_seconds(result["denoise"]),
                decode=format_seconds(result["decode"]), compiled=compile_text(result, lang))
    if result.get("count", 1) > 1:
        line += text(lang, "run_batch", count=result["count"])
    if result.get("references"):  # each reference's fit: a new reference size is a new compile
        refs = "; ".join(f"{r['source']} → {r['fitted']} ({text(lang, 'fit_' + r['fit'].replace(' ', '_'))})"
                         for r in result["references"])
        line += text(lang, "run_references", refs=refs)
    if result.get("degraded"):
        line += text(lang, "run_degraded", reason=result["degraded"])
    if result.get("caption"):  # the model read the prompt as a caption of its grammar
        line += text(lang, "run_drawn_as", caption=result["caption"])
    if result.get("fallback_ops"):  # Neuron ran these on the CPU, silently: say so
        line += text(lang, "run_host_ops", count=len(result["fallback_ops"]), ops=", ".join(result["fallback_ops"]))
    return line


def beyond_training_note(trained_pixels: int, nearest: str | None = None, lang: str = DEFAULT) -> str:
    """Said before the click: what the model does past its training size, and the nearest preset it draws well."""
    side = int(trained_pixels ** 0.5)
    note = text(lang, "cost_beyond_training", pixels=f"{trained_pixels:,}", side=f"{side}x{side}")
    return note + (text(lang, "cost_nearest_preset", preset=nearest) if nearest else "")


def reading_note(reading, examples: list[str], lang: str = DEFAULT, shown: list[str] | None = None) -> str:
    """What the model's grammar did not understand of the prompt, what it made up, and the closest
    example: the closest of ``examples`` (its words against the caption's), said as the same line of
    ``shown`` (the examples in the page's language, line for line) where given."""
    parts = []
    # a reader that speaks the page's languages says its notes in them ("bir şekil: daire")
    ignored, guessed = reading.said(lang) if hasattr(reading, "said") else (reading.ignored, reading.guessed)
    if ignored:
        parts.append(text(lang, "read_ignored", words=", ".join(f"“{w}”" for w in ignored)))
    if guessed:
        parts.append(text(lang, "read_guessed", what=", ".join(guessed)))
    if not parts:
        return ""
    asked = set(reading.caption.replace(",", " ").split())
    at = max(range(len(examples)), key=lambda i: len(asked & set(examples[i].replace(",", " ").split())), default=None)
    closest = None if at is None else (shown or examples)[at]
    return " " + "; ".join(parts) + "." + (text(lang, "read_try", example=closest) if closest else "")
