"""The page's event handlers: ``Studio`` holds one object per tab and answers for the whole page (the
timer, the page opening, its role); here too Compare's, Performance's and the public ``/generate``."""

from __future__ import annotations

import math
import re
from typing import Callable

import gradio as gr

from backend.serving.cost import WORDS, Reference, format_receipt
from ui.handlers_base import Door, Runs
from ui.handlers_studio import StudioTab
from ui.handlers_system import SystemTab
from ui.i18n import language, text
from ui.views_common import format_seconds
from ui.views_performance import compile_frame, latency_frame, latency_limits, plot_labels, plots_note, plotted
from ui.views_studio import compare_frame, hint_html, mode_caption
from ui.views_tp import TP_RUNNING

MAX_PRICE = 10_000.0  # USD per hour: beyond any instance
_LABEL = re.compile(r"[^\w .()/-]+")  # the reference's name, shown as code in Markdown: no markup, no links


class Studio:
    """Every handler of the page, bound to one manager (real or fake)."""

    def __init__(self, manager, operator_key=None, examples: dict[str, list[str]] | None = None):
        self.manager = manager
        self.door = Door(manager, operator_key)
        runs = Runs(self.door)
        self.studio_tab = StudioTab(self.door, runs, examples)
        self.compare_tab = CompareTab(runs)
        self.system_tab = SystemTab(self.door)
        self.performance_tab = PerformanceTab(manager)
        self.api = ApiEndpoint(runs)
        self.operator_controls = 0  # how many groups only the operator's page shows (``ui.app.build_ui`` counts)
        self.page_closed = self.door.page_closed

    def refresh_all(self, mode, width, height, steps, degree=None, count=None, references=None,
                    page: gr.Request | None = None):
        """The timer's tick: one status read for both tabs (no rank logs: those only on "Show rank logs")."""
        lang, operator = language(page), self.door.caller(page).is_operator
        status = self.status_for(page)
        return (self.studio_tab.views(status, mode, width, height, steps, degree, lang, operator, count, references)
                + self.system_tab.views(status, lang, operator))

    def status_for(self, page: gr.Request | None = None):
        status = self.manager.status()
        return status if self.door.caller(page).is_operator else status.for_viewer()

    def page_opened(self):
        """A new page's TP degree: the running group's, so its Start does not replace it by accident."""
        tp = self.manager.status().tp or {}
        if tp.get("state") in TP_RUNNING and tp.get("world_size"):
            return tp["world_size"], tp["world_size"]
        return gr.skip(), gr.skip()

    def page_role(self, page: gr.Request | None = None):
        """This page's role line, then whether each operator control shows (the backend refuses a
        viewer's operator events whatever the page shows)."""
        operator = self.door.caller(page).is_operator
        line = text(language(page), "role_operator" if operator else "role_viewer")
        return (line, *[gr.update(visible=operator) for _ in range(self.operator_controls)])

    def device_notes(self):
        """On a CPU, Compare and Performance say what the modes show here and what they are for on Trainium."""
        shown = gr.update(visible=self.manager.device is not None and self.manager.device.kind == "cpu")
        return shown, shown

    def page_labels(self, page: gr.Request | None = None):
        """Words the browser's translation does not reach: the image's label (gr.Image's block label shows
        "[object Object]" for an ``I18N`` key in Gradio 6.31) and the card's prompt and edit help."""
        lang = language(page)
        card = self.manager.card
        helps, edits = card.prompt_help(lang), card.edit_help(lang)
        return (gr.update(label=text(lang, "image")), (hint_html(helps, lang) if helps else gr.skip()),
                (gr.update(value=edits) if edits else gr.skip()))


class CompareTab:
    def __init__(self, runs: Runs):
        self.runs = runs

    @staticmethod
    def empty_compare_table(page: gr.Request | None = None):
        """The column names in the page's language (a bare Dataframe shows headers "1 2 3")."""
        return compare_frame([], language(page))

    def compare(self, prompt, width, height, steps, guidance, seed, randomize, modes, references=None,
                page: gr.Request | None = None, progress: Callable = gr.Progress()):
        """The gallery (one image per mode) and the timings table; with references, each mode runs the edit."""
        lang = language(page)
        fields = self.runs.fields(prompt, width, height, (modes or ["eager"])[0], steps, guidance,
                                  -1 if randomize else seed, references)
        entries, _seed = self.runs.run(fields, progress, lang, page, modes=modes or [])
        if entries is None:
            return gr.skip(), gr.skip()
        gallery, table = [], []
        for e in entries:
            r = e["result"]
            gallery.append((r.path, f"{mode_caption(r.to_json(), lang)} · {format_seconds(r.seconds)} · "
                                    f"max |Δ| {e['max_diff']}"))
            table.append({**e, "result": r.to_json()})
        return gallery, compare_frame(table, lang)


def _amount(value) -> float | None:
    """A finite number in (0, MAX_PRICE], else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and 0 < number <= MAX_PRICE else None


class PerformanceTab:
    """The Performance tab's events: all a viewer's (they read, never change)."""

    def __init__(self, manager):
        self.manager = manager

    @staticmethod
    def plot_labels(page: gr.Request | None = None):
        """The plots' words in the page's language, sent as the page opens, before any value (``plotted``)."""
        latency, compiles = plot_labels(language(page))
        return gr.ScatterPlot(**latency), gr.BarPlot(**compiles)

    def refresh_plots(self, page: gr.Request | None = None):
        """The plots' values (each with every mode: ``plotted``), the latency axes' ends (in steps:
        they seldom change) and what will fill a plot still empty."""
        latency, compiles = latency_frame(self.manager.records), compile_frame(self.manager.status().shapes)
        return (gr.ScatterPlot(plotted(latency), **latency_limits(latency, self.manager.card.presets)),
                plotted(compiles), plots_note(latency, compiles, language(page)))

    def cost_receipt(self, price, ref_label, ref_price, ref_seconds, page: gr.Request | None = None):
        """The receipt of what is warm now: this instance's price (0 or empty: the settings' or the
        dated table's), and a reference machine when both its figures are given."""
        lang = language(page)
        reference = None
        if ref_price not in (None, "", 0) or ref_seconds not in (None, "", 0):
            price_in, seconds_in = _amount(ref_price), _amount(ref_seconds)
            if price_in is None or seconds_in is None:
                return text(lang, "receipt_bad", reason=f"{ref_price!r}, {ref_seconds!r}"[:80])
            label = _LABEL.sub("", str(ref_label or ""))[:40].strip() or text(lang, "receipt_ref_label")
            reference = Reference(f"`{label}`", price_in, seconds_in)
        data = self.manager.receipt(price_per_hour=_amount(price), reference=reference)
        words = {key: text(lang, "receipt_price_unit" if key == "price" else f"receipt_{key}") for key in WORDS}
        return format_receipt(data, words)


class ApiEndpoint:
    def __init__(self, runs: Runs):
        self.runs = runs

    def api_generate(self, prompt, width, height, mode, steps, seed, guidance, images=None, count=1,
                     page: gr.Request | None = None, progress: Callable = gr.Progress()):
        """Generate one image (or a batch of ``count``: the first is returned): the PNG (its parameters
        inside) and the run's record. ``images``: references for an edit (gradio_client's ``handle_file``)."""
        fields = self.runs.fields(prompt, width, height, mode, steps, guidance, seed, images, count)
        result, _seed = self.runs.run(fields, progress, page=page)  # owned by the API client's session
        if result is None:
            raise gr.Error("the generation was stopped")
        # The PNG itself is the first output; the server-side path means nothing to a remote
        # client (and gradio_client would mistake a dict with a "path" key for a file).
        return result.path, {k: v for k, v in result.to_json().items() if k not in ("path", "paths")}
