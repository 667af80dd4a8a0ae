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
    validation answers every bad value, naming the field."""

    def get_block_name(self) -> str:
        return "number"

    def preprocess(self, payload):
        return payload


def _api_field(component, text: str, api_type: str | None = None):
    """A hidden API input whose ``view_api`` line carries a one-line description (and its type)."""
    info = {**component.api_info(), "additional_description": text, **({"type": api_type} if api_type else {})}
    component.api_info = lambda: info
    return component


def add_api(studio, manager) -> None:
    """The API's hidden inputs and its two endpoints, inside the open Blocks."""
    s = manager.settings
    start_shape = manager.card.start_shape
    modes = ", ".join(manager.modes)
    api_inputs = [
        _api_field(gr.Textbox(visible=False, label="prompt"), "what to draw (required)"),
        _api_field(RawNumber(start_shape.width, visible=False, label="width"),
                   f"pixels, a multiple of 16 from {s.min_size} to {s.max_size}", "integer"),
        _api_field(RawNumber(start_shape.height, visible=False, label="height"),
                   f"pixels, a multiple of 16 from {s.min_size} to {s.max_size}", "integer"),
        _api_field(gr.Textbox(s.mode, visible=False, label="mode"), f"one of {modes}"),
        _api_field(RawNumber(s.steps, visible=False, label="steps"),
                   f"denoising steps, 1 to {s.max_steps}", "integer"),
        _api_field(RawNumber(-1, visible=False, label="seed"), "0 to 2^63-1, or -1 for a random one",
                   "integer"),
        _api_field(RawNumber(s.guidance, visible=False, label="guidance"),
                   f"guidance scale, 0 to {s.max_guidance:g} (ignored by distilled models)"),
        _api_field(gr.File(None, file_count="multiple", type="filepath", visible=False, label="images"),
                   "reference images to edit from (gradio_client's handle_file), 0 to --max-references; each is "
                   "fitted to a reference size (a new size compiles)"),
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
