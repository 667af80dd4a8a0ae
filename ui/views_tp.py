"""The tensor-parallel group's views, on the Studio tab (its badge, the cost line while it is not
ready, the note on which group a run uses) and the System tab (its table, its ranks, their logs)."""

from __future__ import annotations

import functools
import html
from typing import Any

from ui.i18n import DEFAULT, text
from ui.views_common import format_seconds, markdown_table, shorten, word

TP_STARTING = ("launching", "loading", "warming")
TP_RUNNING = TP_STARTING + ("ready",)


def tp_state_name(state: str, lang: str) -> str:
    return word(lang, "tp_state_", state)


def tp_engine_text(tp: dict[str, Any], show_error: bool = True, lang: str = DEFAULT) -> str:
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    line = text(lang, "tp_engine", state=tp_state_name(state, lang))
    if state in TP_RUNNING:
        line += text(lang, "tp_engine_ranks", ranks=ranks)
    if state == "dead" and show_error and tp.get("error"):
        line += f": {shorten(tp['error'])}"
    return line


def tp_state_html(tp: dict[str, Any], lang: str = DEFAULT) -> str:
    """``data-state`` carries the state for scripts and tests."""
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    if state == "ready":
        words = text(lang, "tp_badge_ready", ranks=ranks)
    elif state == "stopping":
        words = tp_state_name(state, lang) + "…"
    elif state in ("stopped", "dead"):
        words = tp_state_name(state, lang)
    else:
        words = text(lang, "tp_badge_starting", state=tp_state_name(state, lang), ranks=ranks)
    title = html.escape(str(tp.get("error") or ""), quote=True)
    badge = html.escape(text(lang, "tp_badge", text=words))
    return (f'<span class="ns-tp ns-tp-{html.escape(state)}" data-state="{html.escape(state)}" '
            f'data-ranks="{ranks}" title="{title}"><i></i>{badge}</span>')


def _start_cost(tp: dict[str, Any], degree: int, lang: str = DEFAULT) -> str:
    """What pressing Start will cost: the load plus warm-up of the group's last start, if measured."""
    timings, last = tp.get("timings") or {}, tp.get("world_size")
    if "load" not in timings:
        return text(lang, "tp_start_unmeasured", degree=degree)
    seconds = timings["load"] + (timings.get("warm") or 0.0)
    with_ranks = "" if last == degree else text(lang, "tp_with_ranks", ranks=last)
    return text(lang, "tp_start_measured", degree=degree, with_ranks=with_ranks, seconds=format_seconds(seconds))


def tp_cost_markdown(tp: dict[str, Any], degree: int | None = None, operator: bool = True,
                     lang: str = DEFAULT) -> str:
    """The cost line while the group is not ready: a click runs in process meanwhile; for the operator,
    what starting the group costs (a viewer reads only what a viewer can do)."""
    state, ranks = tp.get("state", "stopped"), tp.get("world_size")
    degree = degree or ranks
    meanwhile = text(lang, "tp_meanwhile", mode=tp.get("compile_mode") or "eager")
    if state in TP_STARTING:
        return text(lang, "tp_cost_starting", ranks=ranks, state=tp_state_name(state, lang), meanwhile=meanwhile)
    if not operator:
        return text(lang, "tp_cost_dead_viewer" if state == "dead" else "tp_cost_stopped_viewer", meanwhile=meanwhile)
    if state == "stopping":
        return text(lang, "tp_cost_stopping") + meanwhile
    if state == "dead":
        return text(lang, "tp_cost_dead", error=shorten(tp.get("error") or text(lang, "tp_no_reason"), 300),
                    cost=_start_cost(tp, degree, lang), meanwhile=meanwhile)
    return text(lang, "tp_cost_stopped", cost=_start_cost(tp, degree, lang), meanwhile=meanwhile)


def tp_group_note(tp: dict[str, Any], degree: int | None, lang: str = DEFAULT) -> str:
    ranks = tp.get("world_size")
    if degree and ranks and degree != ranks:
        return text(lang, "tp_note_other", ranks=ranks, degree=degree, cost=_start_cost(tp, degree, lang))
    return text(lang, "tp_note", ranks=ranks)


def tp_ranks_markdown(ranks: list[dict[str, Any]], lang: str = DEFAULT) -> str:
    """One row per rank: its process, core, device, and the transformer's bytes it holds (sharded, replicated)."""
    if not ranks:
        return ""
    na = text(lang, "na")

    def mb(n: int | None) -> str:
        return na if n is None else f"{n / 2**20:.2f}"

    rows = [[r["rank"], r.get("pid") or "…", na if r.get("core") is None else r["core"], r.get("device") or "…",
             mb(r.get("transformer_bytes")), mb(r.get("sharded_bytes")), mb(r.get("replicated_bytes")),
             text(lang, "tp_ranks_sharded", n=len(r.get("sharded") or []))]
            for r in sorted(ranks, key=lambda r: r["rank"])]
    return markdown_table(text(lang, "tp_ranks_columns").split(" | "), rows)


def tp_markdown(tp: dict[str, Any], lang: str = DEFAULT) -> str:
    if not tp:
        return ""
    t = functools.partial(text, lang)
    state = tp.get("state", "stopped")
    rows = [(t("tp_row_state"), tp_state_name(state, lang)), (t("tp_row_ranks"), tp.get("world_size")),
            (t("tp_row_each"), tp.get("compile_mode", "…")),
            (t("tp_row_degrees"), ", ".join(map(str, tp.get("degrees") or [])) or "…"),
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
    table = markdown_table([t("tp_head"), ""], rows)
    ranks = tp_ranks_markdown(tp.get("ranks") or [], lang)
    return table + ("\n\n" + ranks if ranks else "")


def tp_logs_text(logs: dict[str, str], lang: str = DEFAULT) -> str:
    shown = [f"── {name} ──\n{tail.rstrip()}" for name, tail in (logs or {}).items() if tail and tail.strip()]
    return "\n".join(shown) or text(lang, "tp_no_logs")
