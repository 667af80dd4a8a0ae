"""The page's words in English and Turkish (``MESSAGES``, from ``ui/locales/*.json``: one sentence per
key, no dot in a key, which the browser's translation would read as nested), the language of a request
and error codes. The browser translates the static labels (``gr.I18n``); handlers and views render with
``text(lang, key)``, ``lang`` from ``Accept-Language`` by the same rule (``tr-TR`` finds ``tr``, anything
else ``en``). A backend error reads as the sentence for its code, then its detail. No gradio, no torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.errors import InvalidRequest, StudioError

LANGUAGES = ("en", "tr")
DEFAULT = "en"

# InvalidRequest fields the backend names (validation, shapes, the TP degree, compare, warm-up).
INVALID_FIELDS = ("prompt", "width", "height", "size", "steps", "guidance", "seed", "mode", "modes", "shapes",
                  "tp_degree", "replicas", "work", "images", "count")

def _unique(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """A key written twice would silently keep the last: the first meaning lost without a trace."""
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"a key written twice: {sorted({k for k in keys if keys.count(k) > 1})}")
    return dict(pairs)


def load_table(path: Path) -> dict[str, str]:
    return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique)


LOCALES = Path(__file__).with_name("locales")
MESSAGES: dict[str, dict[str, str]] = {lang: load_table(LOCALES / f"{lang}.json") for lang in LANGUAGES}


def language(request: Any = None) -> str:
    """``tr`` when the browser's first language is Turkish, else ``en`` (also for no request)."""
    headers = getattr(request, "headers", None) or {}
    accept = headers.get("accept-language") or ""
    first = accept.split(",")[0].split(";")[0].strip().lower()
    return "tr" if first.split("-")[0] == "tr" else DEFAULT


def text(lang: str, key: str, **values: Any) -> str:
    table = MESSAGES.get(lang) or MESSAGES[DEFAULT]
    template = table.get(key) or MESSAGES[DEFAULT][key]
    return template.format(**values) if values else template


def error_code(exc: BaseException) -> str:
    """The error class's own code (``backend.errors``); ``invalid.<field>`` for a field the page knows."""
    if isinstance(exc, InvalidRequest):
        return f"invalid.{exc.field}" if exc.field in INVALID_FIELDS else "invalid"
    return exc.code if isinstance(exc, StudioError) else "error"


def error_message(exc: BaseException, lang: str = DEFAULT) -> str:
    """The translated sentence for the error's code, then the backend's words (less the field the code names)."""
    sentence = text(lang, "err_" + error_code(exc).replace(".", "_"))
    detail = exc.message if isinstance(exc, InvalidRequest) else str(exc)
    if isinstance(exc, InvalidRequest) and exc.why and lang != DEFAULT:  # the reason in the page's language
        def said(k: str, v: Any) -> Any:  # a field's name, or a model's own note (which says itself)
            return text(lang, "field_" + v) if k == "field" else v.said(lang) if hasattr(v, "said") else v

        detail = "; ".join(text(lang, "why_" + key, **{k: said(k, v) for k, v in values.items()})
                           for key, values in exc.why)
    return f"{sentence}: {detail}" if detail else sentence
