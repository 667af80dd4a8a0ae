"""The Performance tab's handlers: its two plots, redrawn from the manager's records and compile
table, and the cost receipt (``backend.serving.cost``) in the page's language."""

from __future__ import annotations

import math
import re

import gradio as gr

from backend.serving.cost import WORDS, Reference, format_receipt
from ui.i18n import language, text
from ui.views_performance import compile_frame, latency_frame, plot_axes

MAX_PRICE = 10_000.0  # USD per hour: beyond any instance
_LABEL = re.compile(r"[^\w .()/-]+")  # the reference's name, shown as code in Markdown: no markup, no links


def _amount(value) -> float | None:
    """A price or seconds from a page field: a finite number in (0, MAX_PRICE], else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and 0 < number <= MAX_PRICE else None


class PerformanceTab:
    """The Performance tab's events (all of them a viewer's: they read, never change)."""

    def __init__(self, manager):
        self.manager = manager

    def refresh_plots(self, page: gr.Request | None = None):
        """Steady latency against megapixels, compile seconds per shape: on the tab's timer and its button."""
        latency, compiles = latency_frame(self.manager.records), compile_frame(self.manager.status().shapes)
        latency_axes, compile_axes = plot_axes(language(page), latency.empty, compiles.empty)
        return gr.ScatterPlot(latency, **latency_axes), gr.BarPlot(compiles, **compile_axes)

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
