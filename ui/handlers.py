"""The page's event handlers, gathered in one class: ``Studio``. They talk to the backend only through
the manager's public methods.

Each tab's handlers live in their own module, and ``Studio`` is composed of them; what belongs to the
whole page (the timer's refresh, the page opening, its role, the device queue's width) is here:

- ``ui.handlers_base``: the base class (manager, caller), refusals into page notices, the toasts;
- ``ui.handlers_studio``: Generate, Stop, the controls, the cost line and badges, a PNG's parameters;
- ``ui.handlers_compare``: Compare;
- ``ui.handlers_system``: the operator's controls (group, replicas, cache, lock, warm-up, bundles);
- ``ui.handlers_performance``: the plots;
- ``ui.handlers_api``: the public ``/generate`` endpoint.
"""

from __future__ import annotations

import gradio as gr

from backend.serving.status import for_viewer
from ui.handlers_api import ApiHandlers
from ui.handlers_compare import CompareHandlers
from ui.handlers_performance import PerformanceHandlers
from ui.handlers_system import SystemHandlers
from ui.i18n import language, text
from ui.views_tp import TP_RUNNING


class Studio(CompareHandlers, ApiHandlers, SystemHandlers, PerformanceHandlers):
    """Every handler of the page, bound to one manager (real or fake): ``Studio(manager, operator_key)``
    (``ui.handlers_base.Handlers`` says how the key decides each event's caller)."""

    def refresh_all(self, mode, width, height, steps, degree=None, count=None, references=None,
                    page: gr.Request | None = None):
        """The timer's tick: one status read for both the studio line and the system panel. It reads
        no rank logs: those are read only when someone presses "Show rank logs"."""
        lang, operator = language(page), self._caller(page).is_operator
        status = self.status_for(page)
        return (self._studio_views(status, mode, width, height, steps, degree, lang, operator, count, references)
                + self._system_views(status, lang, operator))

    def status_for(self, page: gr.Request | None = None) -> dict:
        """The status as this caller may read it: whole for the operator, ``for_viewer`` otherwise."""
        status = self.manager.status()
        return status if self._caller(page).is_operator else for_viewer(status)

    def page_opened(self):
        """A new page's TP degree: the running group's, so its Start does not replace it by accident."""
        tp = self.manager.status().get("tp") or {}
        if tp.get("state") in TP_RUNNING and tp.get("world_size"):
            return tp["world_size"], tp["world_size"]
        return gr.skip(), gr.skip()

    def page_role(self, page: gr.Request | None = None):
        """This page's role line, and whether its operator controls show (the backend refuses a
        viewer's operator events whatever the page shows). Returns the line, then one visibility
        update per operator control."""
        lang = language(page)
        operator = self._caller(page).is_operator
        line = text(lang, "role_operator" if operator else "role_viewer")
        return (line, *[gr.update(visible=operator) for _ in range(self.operator_controls)])

    def page_labels(self, page: gr.Request | None = None):
        """Words the browser's translation does not reach, set when the page opens, in its language:
        the image's label (gr.Image's block label shows "[object Object]" for an ``I18N`` key in
        Gradio 6.31) and, for a model with a prompt grammar, what it understands and what it can edit
        (from its card)."""
        lang = language(page)
        card = self.manager.card
        helps, edits = card.prompt_help(lang), card.edit_help(lang)
        return (gr.update(label=text(lang, "image")), (gr.update(info=helps) if helps else gr.skip()),
                (gr.update(value=edits) if edits else gr.skip()))
