"""The Compare tab's handlers: one prompt, size, step count and seed through several modes, side by
side with their timings and the largest pixel difference from the first mode."""

from __future__ import annotations

import contextlib
from typing import Callable

import gradio as gr

from backend.errors import GenerationCancelled
from ui.handlers_base import Door, Runs, _info, refusals
from ui.i18n import language, text
from ui.views_common import format_seconds
from ui.views_compare import compare_frame
from ui.views_studio import mode_caption


class CompareTab:
    """The Compare tab's events (its runs go through the service like the Studio tab's)."""

    def __init__(self, door: Door, runs: Runs):
        self.door, self.runs = door, runs

    @staticmethod
    def empty_compare_table(page: gr.Request | None = None):
        """The Compare tab's timings table before any comparison: its column names in the page's
        language, no rows (a bare Dataframe shows headers "1 2 3")."""
        return compare_frame([], language(page))

    def compare(self, prompt, width, height, steps, guidance, seed, randomize, modes, references=None,
                page: gr.Request | None = None, progress: Callable = gr.Progress()):
        """The Compare button: the gallery (one image per mode, captioned) and the timings table.
        With the Studio tab's reference images, each mode runs the same edit."""
        lang = language(page)
        fields = self.runs.fields(prompt, width, height, (modes or ["eager"])[0], steps, guidance, -1 if randomize else seed,
                              references)
        adapter = self.runs.progress_adapter(progress, lang)
        with contextlib.closing(adapter), refusals(lang):
            fields["images"] = self.runs.page_files(fields["images"])
            try:
                entries = self.door.manager.compare(fields, modes or [], adapter, caller=self.door.caller(page))
            except GenerationCancelled as exc:
                _info(lang, text(lang, "info_stopped", detail=exc))
                return gr.skip(), gr.skip()
        gallery, table = [], []
        for e in entries:
            r = e["result"]
            gallery.append((r.path, f"{mode_caption(r.to_json(), lang)} · {format_seconds(r.seconds)} · "
                                    f"max |Δ| {e['max_diff']}"))
            table.append({**e, "result": r.to_json()})
        return gallery, compare_frame(table, lang)
