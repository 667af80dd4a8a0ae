"""What every tab's handlers share: the door to the service (the manager, an event's caller), a run as
the page starts it, the toasts, and ``refusals``: the one place a backend refusal becomes the page's
notice or an API client's. A handler that says something takes the ``gr.Request`` (None in tests:
English) before ``progress``: Gradio inserts the request at its position among the inputs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable, Iterator

import gradio as gr
from starlette.requests import cookie_parser

from backend.errors import GenerationCancelled, InvalidRequest, StudioError
from backend.images.folder import is_app_output
from backend.request.records import Phase
from backend.request.references import reference_files
from backend.serving.roles import COOKIE, LOCAL_OPERATOR, Caller, page_caller
from backend.shapes import whole_number
from ui.i18n import error_message, language, text
from ui.temp_dir import is_upload
from ui.views_common import format_seconds

log = logging.getLogger("neuron_studio.ui")
TP_ENGINE, REPLICA_ENGINE = "tensor-parallel", "replicas"  # the manager's names for them
PHASE_BAR = {Phase.ENCODING: 0.0, Phase.COMPILING: None, Phase.DECODING: 1.0}  # None: no share known, it spins


def toast(lang: str, kind: str, message: str, **options):
    """A toast (``kind``: info, warning, error) led by its title in the page's language: Gradio 6.31 heads
    a toast with its type in English ("Warning"), whatever title it is given; the page's CSS hides that."""
    title = text(lang, f"title_{kind}")
    return {"info": gr.Info, "warning": gr.Warning, "error": gr.Error}[kind](f"{title} — {message}", title=title,
                                                                             **options)


def _page_error(exc: StudioError, lang: str) -> gr.Error:
    """A refusal is no bug: one line in the terminal, no traceback."""
    log.info("refused (%s): %s", exc.code, exc)
    return toast(lang, "error", error_message(exc, lang), print_exception=False)


@contextlib.contextmanager
def refusals(lang: str | None) -> Iterator[None]:
    """A backend refusal becomes the page's notice in ``lang``, or without one (an API call) the backend's words."""
    try:
        yield
    except StudioError as exc:
        if lang:
            raise _page_error(exc, lang) from None
        log.info("refused an API call (%s): %s", exc.code, exc)
        raise gr.Error(str(exc), print_exception=False) from None


def _whole(value, strict: bool = False, lang: str = "en", field: str = "tp_degree") -> int | None:
    """A TP degree or replica count from a Number box, or None; a bad one: a page error if ``strict``, else None."""
    if value is None or value == "":
        return None
    try:
        return whole_number(field, value, allow_point=True)  # the backend's one rule for whole numbers
    except InvalidRequest as exc:
        if strict:
            raise _page_error(exc, lang) from None
        return None


class Door:
    """The page's door to the service: the manager and who sends each event. ``operator_key``
    (``backend.serving.roles.OperatorKey``) tells the operator from viewers by the page's cookie;
    without one (handlers driven directly) the caller is the local operator."""

    def __init__(self, manager, operator_key=None):
        self.manager, self.key = manager, operator_key

    def caller(self, page: gr.Request | None) -> Caller:
        session = getattr(page, "session_hash", None)
        if self.key is None:
            return page_caller(True, session) if session else LOCAL_OPERATOR
        cookies = getattr(page, "cookies", None)
        if cookies is None:  # a request that has none parsed: its header
            cookies = cookie_parser((getattr(page, "headers", None) or {}).get("cookie") or "")
        return self.key.caller(cookies.get(COOKIE), session)

    def call(self, page: gr.Request | None, action: Callable, *args, **kwargs):
        """``action(*args, caller=`` the event's caller ``)``; a refusal becomes the page's notice."""
        with refusals(language(page)):
            return action(*args, caller=self.caller(page), **kwargs)

    def require_operator(self, page: gr.Request | None, action: str) -> None:
        with refusals(language(page)):
            self.caller(page).require_operator(action)

    @staticmethod
    def info(page: gr.Request | None, key: str, **values) -> str:
        """A toast in the page's language; its words are also the line Stop's buttons answer with."""
        said = text(language(page), key, **values)
        toast(language(page), "info", said)
        return said

    def page_closed(self, page: gr.Request | None = None) -> None:
        """Gradio's unload: the page's runs leave the board (the running one at its next step)."""
        if session := getattr(page, "session_hash", None):
            self.manager.abandon(page_caller(False, session).owner)


class Runs:
    def __init__(self, door: Door):
        self.door = door

    @staticmethod
    def fields(prompt, width, height, mode, steps, guidance, seed, references=None, count=None) -> dict:
        return dict(prompt=prompt, height=height, width=width, steps=steps, guidance=guidance, seed=seed, mode=mode,
                    images=references, count=count)

    def page_files(self, references) -> list:
        """The reference files an event names, each an upload or an image this app wrote: an event's
        paths are the caller's word, and a file elsewhere on the server is never read on it."""
        files = reference_files(references)
        for number, path in enumerate(files, 1):
            if not (is_upload(path) or is_app_output(path, self.door.manager.settings.output_dir)):
                raise InvalidRequest("images", f"reference {number} is not a file uploaded to this app")
        return files

    @staticmethod
    def progress_adapter(progress: Callable, lang: str = "en") -> Callable:
        """Step progress for the page's bar; while a shape compiles (no step for minutes on Neuron) it
        ticks every second with the time so far. ``close()`` ends the ticking however the run ends."""
        ticking: list[threading.Event] = []  # the running compile's ticker, while one runs

        def tick(since: float, estimate: float | None, stop: threading.Event) -> None:
            while not stop.wait(1.0):
                progress(None, desc=text(lang, "progress_compiling", elapsed=format_seconds(time.monotonic() - since),
                                         estimate=format_seconds(estimate) if estimate else "?"))

        def close() -> None:
            while ticking:
                ticking.pop().set()

        def on_progress(event) -> None:
            if event.phase != Phase.COMPILING:
                close()
            elif not ticking:
                ticking.append(threading.Event())
                threading.Thread(target=tick, args=(time.monotonic(), event.estimate, ticking[0]),
                                 name="compile-progress", daemon=True).start()
            if event.phase == Phase.DENOISING:
                progress((event.step, event.steps),
                         desc=text(lang, "progress_step", step=event.step, steps=event.steps))
            elif event.phase == Phase.QUEUED:  # waiting for its turn on the job board
                about = format_seconds(event.estimate) if event.estimate is not None else None
                progress(0.0, desc=text(lang, "progress_queued_about" if about else "progress_queued", place=event.step,
                                        waiting=event.steps, seconds=about))
            elif event.phase == Phase.REPLICA:  # in Ray Serve's queue until a replica is free
                progress(None, desc=text(lang, "progress_replica"))
            elif event.phase == Phase.LOADING:  # the model is still loading: the request waits for it
                progress(None, desc=text(lang, "progress_loading", seconds=event.step))
            elif event.phase in PHASE_BAR:
                progress(PHASE_BAR[event.phase], desc=text(lang, f"phase_{event.phase}") + "…")

        on_progress.close = close
        return on_progress

    def run(self, fields: dict, progress: Callable, lang: str | None = None, page: gr.Request | None = None,
            modes: list[str] | None = None):
        """The result and its seed, or None and the seed it had for a stopped run; with ``modes``, Compare's
        entries (one run per mode). ``lang``: the page's (None: an API call, refused in the backend's words)."""
        said = lang or "en"
        adapter = self.progress_adapter(progress, said)
        with contextlib.closing(adapter), refusals(lang):
            fields = {**fields, "images": self.page_files(fields.get("images"))}
            try:
                if modes is not None:
                    return self.door.manager.compare(fields, modes, adapter, caller=self.door.caller(page)), None
                _image, result = self.door.manager.run(fields, self.door.caller(page), adapter)
            except GenerationCancelled as exc:
                toast(said, "info", text(said, "info_stopped", detail=exc))
                return None, getattr(exc, "seed", fields.get("seed"))
        if result.degraded:
            toast(said, "warning", text(said, "warn_degraded", mode=result.mode, why=result.degraded))
        return result, result.seed
