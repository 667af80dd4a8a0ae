"""The Performance tab's handler: its two plots, redrawn from the manager's records and compile table."""

from __future__ import annotations

import gradio as gr

from ui.handlers_base import Handlers
from ui.i18n import language
from ui.views_performance import compile_frame, latency_frame, plot_axes


class PerformanceHandlers(Handlers):
    """The Performance tab's events."""

    def refresh_plots(self, page: gr.Request | None = None):
        """Steady latency against megapixels, compile seconds per shape: on the tab's timer and its button."""
        latency, compiles = latency_frame(self.manager.records), compile_frame(self.manager.status())
        latency_axes, compile_axes = plot_axes(language(page), latency.empty, compiles.empty)
        return gr.ScatterPlot(latency, **latency_axes), gr.BarPlot(compiles, **compile_axes)
