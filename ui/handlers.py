"""The page's event handlers: ``Studio`` holds one object per tab over the one door to the service,
and answers for the whole page (the timer's refresh, the page opening and closing, its role):

- ``ui.handlers_base``: the door (manager, caller of an event), a run as the page starts it,
  refusals into page notices, the toasts;
- ``ui.handlers_studio``: Generate, Stop, the controls, the cost line and badges, a PNG's parameters;
- ``ui.handlers_compare``: Compare;
- ``ui.handlers_system``: the operator's controls (group, replicas, cache, lock, warm-up, bundles);
- ``ui.handlers_performance``: the plots and the cost receipt;
- ``ui.handlers_api``: the public ``/generate`` endpoint.
"""

from __future__ import annotations

import gradio as gr

from ui.handlers_api import ApiEndpoint
from ui.handlers_base import Door, Runs
from ui.handlers_compare import CompareTab
from ui.handlers_performance import PerformanceTab
from ui.handlers_studio import StudioTab
from ui.handlers_system import SystemTab
from ui.i18n import language, text
from ui.views_tp import TP_RUNNING


class Studio:
    """Every handler of the page, bound to one manager (real or fake): ``Studio(manager, operator_key)``
    (``ui.handlers_base.Door`` says how the key decides each event's caller). ``examples``: the page's
    example prompts; ``operator_controls``: how many groups the page shows only to the operator."""

    def __init__(self, manager, operator_key=None, examples: list[str] | None = None, operator_controls: int = 0):
        self.manager = manager
        self.door = Door(manager, operator_key)
        runs = Runs(self.door)
        self.studio_tab = StudioTab(self.door, runs, examples)
        self.compare_tab = CompareTab(self.door, runs)
        self.system_tab = SystemTab(self.door)
        self.performance_tab = PerformanceTab(manager)
        self.api = ApiEndpoint(runs)
        self.operator_controls = operator_controls
        self.page_closed = self.door.page_closed

    def refresh_all(self, mode, width, height, steps, degree=None, count=None, references=None,
                    page: gr.Request | None = None):
        """The timer's tick: one status read for both the studio line and the system panel. It reads
        no rank logs: those are read only when someone presses "Show rank logs"."""
        lang, operator = language(page), self.door.caller(page).is_operator
        status = self.status_for(page)
        return (self.studio_tab.views(status, mode, width, height, steps, degree, lang, operator, count, references)
                + self.system_tab.views(status, lang, operator))

    def status_for(self, page: gr.Request | None = None):
        """The status (``backend.serving.status.Status``) as this caller may read it: whole for the
        operator, ``for_viewer()`` otherwise."""
        status = self.manager.status()
        return status if self.door.caller(page).is_operator else status.for_viewer()

    def page_opened(self):
        """A new page's TP degree: the running group's, so its Start does not replace it by accident."""
        tp = self.manager.status().tp or {}
        if tp.get("state") in TP_RUNNING and tp.get("world_size"):
            return tp["world_size"], tp["world_size"]
        return gr.skip(), gr.skip()

    def page_role(self, page: gr.Request | None = None):
        """This page's role line, and whether its operator controls show (the backend refuses a
        viewer's operator events whatever the page shows). Returns the line, then one visibility
        update per operator control."""
        lang = language(page)
        operator = self.door.caller(page).is_operator
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
