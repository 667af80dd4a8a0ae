"""The Studio tab's handlers: Generate and Stop, the size and preset controls, the references, the
status line, cost and badges the timer refreshes, a PNG's parameters, the tensor-parallel controls."""

from __future__ import annotations

import os
from typing import Callable

import gradio as gr

from backend.errors import InvalidRequest, StudioError
from backend.images.pngmeta import read_png_parameters
from backend.request.validation import work
from backend.shapes import Shape
from ui.handlers_base import Door, Runs, _whole, toast
from ui.i18n import error_message, language, text
from ui.temp_dir import discard_upload, is_upload
from ui.views_common import CUSTOM, format_seconds, preset_label, preset_shape
from ui.views_studio import (
    badges_html,
    beyond_training_note,
    cost_markdown,
    engine_markdown,
    mode_caption,
    reading_note,
    run_markdown,
)
from ui.views_tp import tp_cost_markdown, tp_group_note, tp_state_html

HISTORY_KEEP = 24


def contact_sheet(images):
    """A batch's images side by side (two rows for four): one picture, one history entry."""
    from PIL import Image

    columns, rows = (2, 2) if len(images) == 4 else (len(images), 1)
    width, height = images[0].size
    sheet = Image.new("RGB", (columns * width + (columns - 1) * 8, rows * height + (rows - 1) * 8), "white")
    for index, image in enumerate(images):
        sheet.paste(image.convert("RGB"), ((index % columns) * (width + 8), (index // columns) * (height + 8)))
    return sheet


class StudioTab:
    """``examples``: the page's example prompts by language, each with some (a note offers the closest)."""

    def __init__(self, door: Door, runs: Runs, examples: dict[str, list[str]] | None = None):
        self.door, self.manager, self.runs = door, door.manager, runs
        self.examples = {lang: list(prompts) for lang, prompts in (examples or {}).items()}

    def page_examples(self, page: gr.Request | None = None):
        """The example sets' visibility (``ui.layout``'s, one a language) for the page's language, else
        English's; a page in another language starts its prompt box with its own first example."""
        lang = language(page)
        shown = lang if self.examples.get(lang) else "en"
        first = gr.update(value=self.examples[shown][0]) if shown != "en" else gr.skip()
        return first, *(gr.update(visible=each == shown) for each in self.examples)

    def generate_from_page(self, prompt, width, height, mode, steps, guidance, seed, randomize, history,
                           references=None, count=1, page: gr.Request | None = None,
                           progress: Callable = gr.Progress()):
        """Returns image, run line, record, used seed, gallery, history state and the run's image files."""
        lang = language(page)
        seed = -1 if randomize else seed
        try:
            fields = self.runs.fields(prompt, width, height, mode, steps, guidance, seed, references, count)
            result, seed = self.runs.run(fields, progress, lang, page)
        except gr.Error as refusal:
            # A refusal: a calm notice in the run line and a toast, the outputs left as they are (not
            # an "Error" badge over every output).
            reason = str(refusal.message).removeprefix(text(lang, "title_error") + " — ")
            toast(lang, "warning", reason)
            return gr.skip(), text(lang, "run_refused", reason=reason), *[gr.skip()] * 5
        if result is None:
            return gr.skip(), text(lang, "run_stopped", seed=seed), *[gr.skip()] * 5
        record = result.to_json()
        shown = result.path if result.count == 1 else contact_sheet(result.images)
        caption = (f"{result.width}x{result.height}{f' ×{result.count}' if result.count > 1 else ''} · "
                   f"{mode_caption(record, lang)} · {format_seconds(result.seconds)}")
        history = ([(shown, caption)] + list(history or []))[:HISTORY_KEEP]
        line = run_markdown(record, lang)
        if result.reading is not None:  # the model drew its reading of the prompt: say what it did not understand
            line += reading_note(result.reading, self.examples.get("en", []), lang, self.examples.get(lang))
        return shown, line, record, result.seed, history, history, list(result.paths)

    def history_selected(self, evt: gr.SelectData):
        """A click on a history image: Use as reference then takes that one."""
        image = evt.value.get("image") if isinstance(evt.value, dict) else None
        path = image.get("path") if isinstance(image, dict) else None
        return [path] if path else gr.skip()

    def use_as_reference(self, paths, page: gr.Request | None = None):
        """The last run's image (a batch's first), or the history image clicked last, is the one reference."""
        if not paths:
            return gr.skip()
        self.door.info(page, "info_reference_used")
        return [(paths[0], None)]

    @staticmethod
    def reference_selected(event: gr.SelectData):
        return event.index

    @staticmethod
    def remove_reference(references, selected):
        """The reference clicked last (none clicked: the last one) leaves the references."""
        current = list(references or [])
        if not current:
            return gr.skip(), None
        index = selected if isinstance(selected, int) and 0 <= selected < len(current) else len(current) - 1
        return current[:index] + current[index + 1:], None

    @staticmethod
    def references_shown(references):
        """The references' panel beside the prompt opens when it holds one, so an edit's input is in view."""
        return gr.update(open=True) if references else gr.skip()

    def add_as_reference(self, paths, references, page: gr.Request | None = None):
        """That image joins the references (once: the same image twice adds nothing; the page's copy of
        a file keeps its name, and an output's name is unique to it)."""
        lang = language(page)
        current = list(references or [])
        names = {os.path.basename(str(item[0] if isinstance(item, (tuple, list)) else item)) for item in current}
        if not paths or os.path.basename(str(paths[0])) in names:
            return gr.skip()
        limit = self.manager.settings.max_references
        if len(current) >= limit:
            toast(lang, "warning", text(lang, "warn_references_full", n=limit))
            return gr.skip()
        self.door.info(page, "info_reference_added", n=len(current) + 1)
        return current + [(paths[0], None)]

    def stop(self, page: gr.Request | None = None) -> str:
        """Stop this page's run (the operator's: every run) at its next step; a compile finishes first. The
        answer is a line on the page: Stop does not queue, and an unqueued event's toast never shows."""
        caller, lang = self.door.caller(page), language(page)
        try:
            running = self.manager.cancel(caller=caller)
        except StudioError as exc:  # another viewer's run: said on the page, nothing stopped
            return text(lang, "title_error") + " — " + error_message(exc, lang)
        if not running:
            return self.door.info(page, "info_nothing")
        status = self.manager.status()
        job = next((job for job in status.running or [] if job.get("phase") == "compiling"), None)
        if job is None:
            return self.door.info(page, "info_stopping")
        estimate = job.get("compile_estimate")
        left = format_seconds(max(0.0, estimate - (job.get("compile_elapsed") or 0.0))) if estimate else "?"
        endable = job.get("engine") in (status.compiling_workers or ())
        return self.door.info(page, "info_stopping_compile_operator" if caller.is_operator and endable
                              else "info_stopping_compile", left=left)

    def stop_compiling_worker(self, page: gr.Request | None = None) -> str:
        """The operator's: end a compile now by stopping the worker process that runs it."""
        stopped = self.door.call(page, self.manager.stop_compiling_workers)
        names = ", ".join(text(language(page), "engine_name_" + name.replace("-", "_")) for name in stopped)
        return self.door.info(page, "info_worker_stopped" if stopped else "info_no_worker_compiling", engines=names)

    def preset_changed(self, label: str):
        shape = preset_shape(label, self.manager.card.presets)
        return (gr.skip(), gr.skip()) if shape is None else (shape.width, shape.height)

    def size_changed(self, width, height) -> str:
        card = self.manager.card
        name = card.preset_name(Shape(height, width))  # the boxes may hold floats: label the preset's own
        return preset_label(name, dict(card.presets)[name]) if name else CUSTOM

    def refresh_studio(self, mode, width, height, steps, degree=None, count=None, references=None,
                       page: gr.Request | None = None):
        """Engine line, cost of the chosen (mode, signature), preset badges, TP badge, whether Generate is on."""
        return self.views(self.manager.status(), mode, width, height, steps, degree, language(page),
                          self.door.caller(page).is_operator, count, references)

    def views(self, status, mode, width, height, steps, degree=None, lang: str = "en", operator: bool = True,
              count=None, references=None):
        engine = engine_markdown(status, lang)
        tp = status.tp or {}
        tp_badge = tp_state_html(tp, lang)
        degree = _whole(degree)
        steps = steps if isinstance(steps, (int, float)) and steps >= 1 else None
        end_compile = gr.update(visible=operator and bool(status.compiling_workers))
        if mode == "tp" and tp.get("state") != "ready":
            # Not ready: a click runs in process meanwhile (and says so): Generate stays on, the badges
            # are that mode's.
            cost = tp_cost_markdown(tp, degree, operator, lang)
            badges = self._badges(status, self.manager.settings.runs_as("tp"), steps, lang)
            return engine, cost, badges, tp_badge, gr.update(interactive=True), end_compile
        bounds, shape, error = self.manager.settings, None, None
        try:  # the service's own checks of the signature (the references' headers only are read)
            shape, _steps = self.manager.signature(height, width, steps, count, self.runs.page_files(references))
        except InvalidRequest as exc:
            error = error_message(exc, lang)
        prediction = self.manager.predict(mode, shape, steps) if status.loaded and shape else None
        cost = cost_markdown(prediction, error, lang)
        if bounds.max_work and shape is not None and prediction is not None:
            cost += text(lang, "cost_work", work=f"{work(shape, int(steps or bounds.steps)):.1f}",
                         limit=f"{bounds.max_work:g}")
        card = self.manager.card
        if shape is not None and card.beyond_training(shape):
            nearest = min(((n, s) for n, s in card.presets if not card.beyond_training(s)),
                          key=lambda p: abs(p[1].width / p[1].height - shape.width / shape.height), default=None)
            cost += beyond_training_note(card.trained_pixels, nearest and preset_label(*nearest), lang)
        if mode == "tp" and prediction is not None and not prediction.get("refused"):
            cost += tp_group_note(tp, degree, lang)
        badges = self._badges(status, mode, steps, lang, shape)
        # Generate waits while the cost line says the click would be refused (a bad size, a cold
        # shape under the lock); while the model loads it stays on: the click waits for the model.
        refused = error is not None or bool(prediction and prediction.get("refused"))
        return engine, cost, badges, tp_badge, gr.update(interactive=not refused), end_compile

    def _badges(self, status, mode: str, steps, lang: str, chosen: Shape | None = None) -> str:
        """One badge per preset: its state in ``mode`` with the chosen count and references."""
        if not status.loaded:
            return badges_html([])
        count, refs = (chosen.count, chosen.refs) if chosen is not None else (1, ())
        return badges_html([(preset_label(n, s), self.manager.predict(mode, s.with_inputs(count, refs), steps))
                            for n, s in self.manager.card.presets], lang)

    def load_png(self, path, page: gr.Request | None = None):
        if not path:
            return (gr.skip(),) * 10
        lang = language(page)
        bounds = self.manager.settings  # the app's own bounds: a PNG it made at 80 of --max-steps 100 loads whole
        # A caller's malformed input is answered, not logged with a traceback (gr.Error prints one by default).
        not_png = gr.Error(text(lang, "err_not_png"), title=text(lang, "title_error"), print_exception=False)
        path = os.fspath(path) if isinstance(path, os.PathLike) else path
        if not isinstance(path, str) or "\0" in path or not is_upload(path):  # only what was uploaded
            raise not_png
        try:
            params = read_png_parameters(path, max_prompt=bounds.max_prompt_chars, max_steps=bounds.max_steps,
                                         max_guidance=bounds.max_guidance, min_size=bounds.min_size,
                                         max_size=bounds.max_size)
        except Exception:  # noqa: BLE001 - not a PNG (or a broken one): say so, change nothing
            raise not_png from None
        finally:
            discard_upload(path)  # read: the upload is not kept (web.guard bounds what is held)
        if not params:
            toast(lang, "warning", text(lang, "warn_no_params"))
            return (gr.skip(),) * 10
        if params.get("references"):  # the images themselves are not in the PNG: say which files it needs
            refs = "; ".join(f"{r['source']} (SHA-256 {r['sha256'][:12]}…)" for r in params["references"])
            toast(lang, "warning", text(lang, "warn_png_references", count=len(params["references"]), refs=refs))
        width, height = params.get("width"), params.get("height")
        return (
            params.get("prompt", gr.skip()),
            width if width else gr.skip(),
            height if height else gr.skip(),
            self.size_changed(width, height) if width and height else gr.skip(),
            params.get("steps", gr.skip()),
            params.get("guidance", gr.skip()),
            params.get("seed", gr.skip()),
            False if "seed" in params else gr.skip(),  # a loaded seed is meant to be reused
            params["mode"] if params.get("mode") in self.manager.modes else gr.skip(),
            params.get("count", 1),
        )

    def show_tp_controls(self, mode, page: gr.Request | None = None):
        """Picking a mode shows or hides the TP degree (the operator's) and the group's row; it starts nothing."""
        operator = self.door.caller(page).is_operator
        return gr.update(visible=mode == "tp" and operator), gr.update(visible=mode == "tp")
