"""The public API's handler: ``/generate`` for gradio_client users (the page's hidden inputs and the
endpoint itself are ``ui.api``). Refusals reach the client in the backend's own words."""

from __future__ import annotations

from typing import Callable

import gradio as gr

from ui.handlers_base import Runs


class ApiEndpoint:
    """The API's events: the same run through the service as the Generate button, no page around them."""

    def __init__(self, runs: Runs):
        self.runs = runs

    def api_generate(self, prompt, width, height, mode, steps, seed, guidance, images=None, count=1,
                     page: gr.Request | None = None, progress: Callable = gr.Progress()):
        """Generate one image (or a batch of ``count``: the first is returned); returns the PNG (with
        its parameters inside) and the run's record as JSON. ``images``: reference images for an
        edit (gradio_client's ``handle_file``). Every value is checked by the backend: a bad one is
        refused naming the field (and, for a size, the nearest valid one)."""
        result, _seed = self.runs.run(self.runs.fields(prompt, width, height, mode, steps, guidance, seed, images, count), progress,
                           page=page)  # owned by the API client's session
        if result is None:
            raise gr.Error("the generation was stopped")
        # The PNG itself is the first output; the server-side path means nothing to a remote
        # client (and gradio_client would mistake a dict with a "path" key for a file).
        record = result.to_json()
        record.pop("path")
        record.pop("paths")
        return result.path, record
