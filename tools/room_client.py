"""An outside caller of a running app, as the room's probe was: it posts a page event by its
``fn_index`` to ``/gradio_api/queue/join`` (hidden events included: hiding an event from the API
docs hides nothing) and reads the answer from the event stream. Used by the room tests
(tests/ui/test_api.py) and ``python -m bench.hardening``."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request

from backend.serving.roles import COOKIE

FIRST_CHOICE = object()  # in an event's data: the first choice of that input (the model's first preset)

# Every operator event of the page, as an outside caller would post it: (elem_id, trigger, data).
OPERATOR_EVENTS = [
    ("tp-start", "click", [2]), ("tp-system-start", "click", [2]), ("tp-stop", "click", []),
    ("tp-system-stop", "click", []), ("tp-logs-show", "click", []), ("clear-cache", "click", []),
    ("confirm-clear", "click", []), ("warm-only", "input", [True]),
    ("warm-up", "click", [[FIRST_CHOICE], "compiled"]), ("bundle-export", "click", []),
    ("bundle-in", "upload", [None]), ("bundle-import", "click", [None]),
    ("replica-start", "click", [2]), ("replica-stop", "click", []),
]


def config(url: str) -> dict:
    with urllib.request.urlopen(url + "config", timeout=10) as response:
        return json.load(response)


def event_index(cfg: dict, elem_id: str, trigger: str) -> int:
    """The fn_index of the event ``trigger`` ("click", "input", ...) of the component ``elem_id``."""
    ids = {c["id"] for c in cfg["components"] if (c.get("props") or {}).get("elem_id") == elem_id}
    for dep in cfg["dependencies"]:
        if any(target[0] in ids and target[1] == trigger for target in dep["targets"]):
            return dep["id"]
    raise KeyError(f"no {trigger} event on #{elem_id}")


def _filled(cfg: dict, fn_index: int, data: list) -> list:
    """``data`` with each FIRST_CHOICE replaced by its input's first choice (a value Gradio's own
    check of the choices lets through, so that the role check is what answers)."""
    dep = next(d for d in cfg["dependencies"] if d["id"] == fn_index)
    props = {c["id"]: c.get("props") or {} for c in cfg["components"]}

    def fill(value, component):
        if value is FIRST_CHOICE:
            return props[component]["choices"][0][1]
        return [fill(v, component) for v in value] if isinstance(value, list) else value

    return [fill(value, component) for value, component in zip(data, dep["inputs"])]


def post_event(url: str, fn_index: int, data: list, cookie: str | None = None, timeout: float = 60) -> dict:
    """Join the queue with one event and return its process_completed message."""
    session = secrets.token_hex(8)
    headers = {"Content-Type": "application/json"}
    if cookie:
        headers["Cookie"] = f"{COOKIE}={cookie}"
    body = json.dumps({"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None,
                       "trigger_id": None}).encode()
    urllib.request.urlopen(urllib.request.Request(url + "gradio_api/queue/join", body, headers), timeout=10).read()
    stream = urllib.request.Request(url + f"gradio_api/queue/data?session_hash={session}", headers=headers)
    with urllib.request.urlopen(stream, timeout=timeout) as response:
        for line in response:
            if line.startswith(b"data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    return message
    raise AssertionError("the event stream ended without an answer")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def no_redirect_opener() -> urllib.request.OpenerDirector:
    """An opener that hands a redirect back as the answer (the login's 303 carries the cookie)."""
    return urllib.request.build_opener(_NoRedirect)


def operator_cookie(url: str, token: str) -> str:
    """Log in at /operator with the printed token; returns the session key the app set as its cookie."""
    opener = no_redirect_opener()
    try:
        opener.open(url + f"operator?token={token}", timeout=10)
    except urllib.error.HTTPError as answer:  # the 303 to the page
        cookie = answer.headers.get("set-cookie", "")
        assert answer.code == 303 and "HttpOnly" in cookie and "SameSite=Strict" in cookie, (answer.code, cookie)
        return cookie.split(";")[0].split("=", 1)[1]
    raise AssertionError("no redirect from /operator")


def upload(url: str, path: str) -> dict:
    """Upload a file as the page's file box does; returns the FileData an event takes."""
    import mimetypes
    import os

    boundary = secrets.token_hex(12)
    name = os.path.basename(path)
    with open(path, "rb") as handle:
        data = handle.read()
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
            f"Content-Type: {mimetypes.guess_type(name)[0] or 'application/octet-stream'}\r\n\r\n").encode() + \
        data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(url + "gradio_api/upload", body,
                                     {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        stored = json.load(response)[0]
    return {"path": stored, "orig_name": name, "meta": {"_type": "gradio.FileData"}}


def refused_operator_events(url: str, cookie: str | None = None) -> list[tuple[str, bool, str]]:
    """Post every operator event as a caller with ``cookie``; (event, refused as not allowed, answer)."""
    cfg = config(url)
    rows = []
    for elem_id, trigger, data in OPERATOR_EVENTS:
        fn_index = event_index(cfg, elem_id, trigger)
        answer = post_event(url, fn_index, _filled(cfg, fn_index, data), cookie=cookie)
        error = str((answer.get("output") or {}).get("error") or "")
        rows.append((f"{elem_id} {trigger}", answer.get("success") is False and "Not allowed for a viewer" in error,
                     error[:160]))
    return rows
