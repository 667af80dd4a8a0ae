"""The public API: the two named endpoints gradio_client users call, ``/generate`` and ``/status``.

The generate endpoint has hidden inputs of its own that pass values through untouched, so every bad
value is answered by the backend's validation (naming the field and the fix), not by a widget's
range check; ``view_api`` shows each input's type and a one-line description. Its handler is
``ui.handlers.ApiEndpoint``.
"""

from __future__ import annotations

import gradio as gr

from ui.constants import RUN_QUEUE, RUN_SLOTS


class RawNumber(gr.Number):
    """A number input for the API that hands its value to the backend as sent (int, float or text):
    no float conversion (seeds above 2^53 stay exact) and no range check of its own — the backend's
    validation answers every bad value, naming the field. ``api_type`` and ``api_text`` are what
    ``view_api`` shows."""

    api_type, api_text = "number", ""

    def get_block_name(self) -> str:
        return "number"

    def preprocess(self, payload):
        return payload

    def api_info(self) -> dict:
        return {"type": self.api_type, "additional_description": self.api_text}


def _api_field(component, text: str, api_type: str | None = None):
    """A hidden API input with a one-line description (and type) for view_api."""
    component.api_text = text
    if api_type:
        component.api_type = api_type
    return component


class ApiText(gr.Textbox):
    """A text input for the API whose view_api line carries a description."""

    api_text = ""

    def get_block_name(self) -> str:
        return "textbox"

    def api_info(self) -> dict:
        return {"type": "string", "additional_description": self.api_text}


class ApiFiles(gr.File):
    """The reference images of an edit; its view_api line carries a description."""

    def api_info(self) -> dict:
        info = super().api_info()
        return {**info, "additional_description": "reference images to edit from (gradio_client's handle_file), 0 to "
                                       "--max-references; each is fitted to a reference size (a new size compiles)"}


def add_api(studio, manager) -> None:
    """The API's hidden inputs and its two endpoints, inside the open Blocks."""
    s = manager.settings
    start_shape = manager.card.start_shape
    modes = ", ".join(manager.modes)
    api_inputs = [
        _api_field(ApiText(visible=False, label="prompt"), "what to draw (required)"),
        _api_field(RawNumber(start_shape.width, visible=False, label="width"),
                   f"pixels, a multiple of 16 from {s.min_size} to {s.max_size}", "integer"),
        _api_field(RawNumber(start_shape.height, visible=False, label="height"),
                   f"pixels, a multiple of 16 from {s.min_size} to {s.max_size}", "integer"),
        _api_field(ApiText(s.mode, visible=False, label="mode"), f"one of {modes}"),
        _api_field(RawNumber(s.steps, visible=False, label="steps"),
                   f"denoising steps, 1 to {s.max_steps}", "integer"),
        _api_field(RawNumber(-1, visible=False, label="seed"), "0 to 2^63-1, or -1 for a random one",
                   "integer"),
        _api_field(RawNumber(s.guidance, visible=False, label="guidance"),
                   f"guidance scale, 0 to {s.max_guidance:g} (ignored by distilled models)"),
        ApiFiles(None, file_count="multiple", type="filepath", visible=False, label="images"),
        _api_field(RawNumber(1, visible=False, label="count"),
                   "images per prompt, 1 to 4 (the image output is the batch's first; the record lists them)",
                   "integer"),
    ]
    api_image = gr.Image(type="filepath", format="png", visible=False)
    api_record = gr.JSON(visible=False)
    api_button = gr.Button(visible=False)  # never shown: the endpoint is for API clients
    api_button.click(studio.api.api_generate, api_inputs, [api_image, api_record], api_name="generate",
                     concurrency_id=RUN_QUEUE, concurrency_limit=RUN_SLOTS)

    def status(request: gr.Request) -> dict:
        """The manager's status snapshot: device, model, engine state, per-shape compile states, caches
        (a viewer's without the operator's details: ``backend.serving.status.Status.for_viewer``)."""
        return studio.status_for(request).to_json()

    gr.api(status, api_name="status", concurrency_limit=None)
