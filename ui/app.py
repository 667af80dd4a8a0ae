"""The studio page: ``build_ui`` puts the layout (``ui.layout``), its events (``ui.wiring``) and the
public API (``ui.api``) together around one ``ui.handlers.Studio``. Gradio only; no torch.

Panels: Studio (controls, cost of the chosen shape, badges, image, history), Compare (one prompt
through two or three modes), System (device, caches, per-shape table, warm-up, lock, the
tensor-parallel group, replicas, bundles) and Performance (latency and compile-time plots). Every
static word is an ``I18N(key)`` from ``ui.i18n.MESSAGES``, which the browser translates (Turkish for
``tr``, else English); the handlers render what they return in the same language on the server.
The server around it (the clients' routes, the guard, uvicorn, the process's life) is ``server.py``'s.
"""

from __future__ import annotations

import gradio as gr

from ui.api import add_api
from ui.constants import ASSETS
from ui.handlers import Studio
from ui.layout import build_page
from ui.views_common import load_example_prompts
from ui.wiring import wire


def build_ui(manager, operator_key=None) -> gr.Blocks:
    """The page. ``operator_key`` (``backend.serving.roles.OperatorKey``) tells each event's caller: the
    operator's controls show only on the operator's page, and the manager refuses them for viewers."""
    studio = Studio(manager, operator_key, examples=load_example_prompts(ASSETS / "prompts.txt"))
    # Gradio's temporary copies (images, uploads) older than an hour are deleted every 10 minutes.
    with gr.Blocks(title="Neuron Studio", delete_cache=(600, 3600)) as demo:
        page = build_page(manager)
        wire(studio, page, demo)
        add_api(studio, manager)
    studio.operator_controls = len(page.operator_only)
    return demo
