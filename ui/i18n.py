"""The page's words in English and Turkish, the language of a request, and error codes.

One table (``MESSAGES``, gathered from one module per language: ``ui.i18n_en``, ``ui.i18n_tr``)
serves both sides: ``ui.constants`` hands it whole to ``gr.I18n``, so the browser translates the
static labels itself (Gradio picks the table from ``navigator.language``: ``tr-TR`` finds ``tr``,
anything else falls back to ``en``); handlers and views render their Markdown and messages on the
server with ``text(lang, key)``, ``lang`` coming from the request's ``Accept-Language`` header by
the same rule. Numbers and sizes are written the same way in both languages (``1024x1024``,
``2.3 s``, dot decimals): only words are translated.

Backend errors carry no translation of their own: ``error_code`` is the exception class's own code
(``backend.errors``; for ``InvalidRequest``, with its field), ``error_message`` puts the translated
sentence for that code before the backend's own English detail, which names the specifics (such as
the nearest valid size). No gradio and no torch here.
"""

from __future__ import annotations

from typing import Any

from backend.errors import InvalidRequest, StudioError
from ui.i18n_en import EN
from ui.i18n_tr import TR

LANGUAGES = ("en", "tr")
DEFAULT = "en"

# InvalidRequest fields the backend names (validation, shapes, the TP degree, compare, warm-up).
INVALID_FIELDS = ("prompt", "width", "height", "size", "steps", "guidance", "seed", "mode", "modes", "shapes",
                  "tp_degree", "replicas", "work", "images", "count")

MESSAGES: dict[str, dict[str, str]] = {"en": EN, "tr": TR}


def language(request: Any = None) -> str:
    """``tr`` when the browser's first language is Turkish (``Accept-Language: tr-TR,…``), else ``en``.
    ``request`` is a ``gr.Request`` (or anything with ``headers``); None means English."""
    headers = getattr(request, "headers", None) or {}
    accept = headers.get("accept-language") or ""
    first = accept.split(",")[0].split(";")[0].strip().lower()
    return "tr" if first.split("-")[0] == "tr" else DEFAULT


def text(lang: str, key: str, **values: Any) -> str:
    """The sentence for ``key`` in ``lang`` (English when the language is unknown), filled in."""
    table = MESSAGES.get(lang) or MESSAGES[DEFAULT]
    template = table.get(key) or MESSAGES[DEFAULT][key]
    return template.format(**values) if values else template


def error_code(exc: BaseException) -> str:
    """The error class's own code (``backend.errors``: ``locked``, ``not_ready``, ``group_dead``, ...),
    ``invalid.<field>`` for InvalidRequest naming a field the page knows; ``error`` for anything else."""
    if isinstance(exc, InvalidRequest):
        return f"invalid.{exc.field}" if exc.field in INVALID_FIELDS else "invalid"
    return exc.code if isinstance(exc, StudioError) else "error"


def error_message(exc: BaseException, lang: str = DEFAULT) -> str:
    """The translated sentence for the error's code, then the backend's own words (English; for
    InvalidRequest without the field, which the code names)."""
    sentence = text(lang, "err_" + error_code(exc).replace(".", "_"))
    detail = exc.message if isinstance(exc, InvalidRequest) else str(exc)
    return f"{sentence}: {detail}" if detail else sentence
