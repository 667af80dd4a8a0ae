"""What every tab's handlers share: the handlers' base class (the manager, the caller of an event),
the one way a backend refusal becomes what the page (or an API client) reads, and the page's toasts.

Each handler turns the backend's StudioError into ``gr.Error`` (a message in the page, never a
generic "Error") with ``refusals``, and returns plain values, so tests can drive the handlers against
the real manager with a fake engine behind it (``tests/ui/fake_engines.py``).

Words follow the browser: a handler that says something takes the ``gr.Request`` Gradio passes
in (None in tests: English), and renders in ``i18n.language(request)``. ``request`` always comes
before ``progress``: Gradio inserts the request at its position among the inputs.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import gradio as gr

from backend.errors import InvalidRequest, StudioError
from backend.serving.roles import COOKIE, LOCAL_OPERATOR, Caller, page_caller
from backend.shapes import whole_number
from ui.i18n import error_message, text

log = logging.getLogger("neuron_studio.ui")
TP_ENGINE, REPLICA_ENGINE = "tensor-parallel", "replicas"  # the manager's names for them


def _page_error(exc: StudioError, lang: str) -> gr.Error:
    """The one place a backend error becomes a page error: the translated sentence for its code, then
    the backend's own detail. A refusal is no bug: one line in the terminal, no traceback."""
    log.info("refused (%s): %s", exc.code, exc)
    return gr.Error(_titled(lang, "title_error", error_message(exc, lang)), title=text(lang, "title_error"),
                    print_exception=False)


def _api_error(exc: StudioError) -> gr.Error:
    """An API client's error: the backend's own words; one line in the terminal, no traceback."""
    log.info("refused an API call (%s): %s", exc.code, exc)
    return gr.Error(str(exc), print_exception=False)


@contextlib.contextmanager
def refusals(lang: str | None) -> Iterator[None]:
    """Around a backend call: its refusal (a StudioError) becomes the page's notice in ``lang``
    (``_page_error``) or, without a language (an API call), the backend's own words (``_api_error``).
    Anything else passes through untouched."""
    try:
        yield
    except StudioError as exc:
        raise (_page_error(exc, lang) if lang else _api_error(exc)) from None


def _titled(lang: str, title: str, message: str) -> str:
    """A toast's message led by its title in the page's language: Gradio 6.31 heads a toast with its
    type in English ("Warning"), whatever title it is given; the page's CSS hides that heading."""
    return f"{text(lang, title)} — {message}"


def _info(lang: str, message: str) -> None:
    gr.Info(_titled(lang, "title_info", message), title=text(lang, "title_info"))


def _warning(lang: str, message: str) -> None:
    gr.Warning(_titled(lang, "title_warning", message), title=text(lang, "title_warning"))


def _whole(value, strict: bool = False, lang: str = "en", field: str = "tp_degree") -> int | None:
    """A TP degree (or a replica count: ``field``) from a Number box: a whole number, or None (the
    default). With ``strict`` anything else is a page error naming the field; without, it is
    ignored (for the status views)."""
    if value is None or value == "":
        return None
    try:
        return whole_number(field, value, allow_point=True)  # the backend's one rule for whole numbers
    except InvalidRequest as exc:
        if strict:
            raise _page_error(exc, lang) from None
        return None


def _cookie(page, name: str) -> str | None:
    cookies = getattr(page, "cookies", None)
    if cookies is not None and hasattr(cookies, "get"):
        return cookies.get(name)
    header = (getattr(page, "headers", None) or {}).get("cookie") or ""
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


class Handlers:
    """Handlers bound to one manager (real or fake); each tab's handlers (``ui.handlers_*``) build on
    this, and ``ui.handlers.Studio`` gathers them.

    ``operator_key`` (``backend.serving.roles.OperatorKey``) decides each event's caller from the page's
    cookie: the operator or a viewer; the manager refuses a viewer's operator actions. Without a
    key (handlers driven directly, as the handler tests do) there is no room: the caller is the
    local operator."""

    def __init__(self, manager, operator_key=None):
        self.manager = manager
        self.key = operator_key
        self.examples: list[str] = []  # the page's example prompts (ui.app sets them): a note offers the closest
        self.operator_controls = 0  # how many groups the page shows only to the operator (ui.app counts them)

    def _caller(self, page: gr.Request | None) -> Caller:
        """Who sent this event: its role (the operator's cookie) and its owner, the page session.
        Without a key (handlers driven directly) the local operator, owning the page session's runs."""
        session = getattr(page, "session_hash", None)
        if self.key is None:
            return page_caller(True, session) if session else LOCAL_OPERATOR
        return self.key.caller(_cookie(page, COOKIE) if page is not None else None, session)

    def page_closed(self, page: gr.Request | None = None) -> None:
        """The page has gone (Gradio's unload event): its waiting runs leave the board and its running
        one stops at its next step — nobody is left to see them."""
        session = getattr(page, "session_hash", None)
        if session:
            self.manager.abandon(page_caller(False, session).owner)
