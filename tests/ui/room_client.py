"""An outside caller of a running app, as the room's probe was: it posts a page event by its
``fn_index`` to ``/gradio_api/queue/join`` (hidden events included: hiding an event from the API
docs hides nothing) and reads the answer from the event stream. Test tooling only."""

from __future__ import annotations

import json
import secrets
import urllib.request

from backend.roles import COOKIE


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


def operator_cookie(url: str, token: str) -> str:
    """Log in at /operator with the printed token; returns the session key the app set as its cookie."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(url + f"operator?token={token}", timeout=10)
    except urllib.error.HTTPError as answer:  # the 303 to the page
        cookie = answer.headers.get("set-cookie", "")
        assert answer.code == 303 and "HttpOnly" in cookie and "SameSite=Strict" in cookie, (answer.code, cookie)
        return cookie.split(";")[0].split("=", 1)[1]
    raise AssertionError("no redirect from /operator")
