"""The web server's door, below Gradio (pure ASGI, so it runs before every Gradio route):

- **DNS rebinding**: while the app listens on a loopback address, a ``Host`` that is not a loopback
  name is refused (421); with another ``--host``, ``allowed_hosts`` (any for ``0.0.0.0``/``::``).
- **The output folder serves images only**: under it only the PNGs the app wrote (``APP_PNG``) are
  answered, not a user's file beside them nor an HTML page (404).
- **Uploads are bounded** (Gradio caps each file, not their number): per address
  ``UPLOAD_BYTES_PER_CALLER`` in ``UPLOAD_WINDOW_S`` (429), all held under ``UPLOADS_TOTAL_BYTES``
  (413), none from another site's page (403). The handlers delete an upload once read.
- **The operator's login** (``backend.serving.roles``): ``/operator?token=T``, or HTTP Basic with
  ``--operator-auth``, sets the operator cookie (HttpOnly, SameSite=Strict); ``LOGIN_FAILURES`` wrong
  ones from an address within ``LOGIN_WINDOW_S`` make it wait out the window (429).
"""

from __future__ import annotations

import base64
import collections
import os
import time
from urllib.parse import unquote, urlsplit

from starlette.datastructures import Headers, QueryParams
from starlette.responses import PlainTextResponse, RedirectResponse

from backend.hardware.env import dir_size
from backend.images.folder import APP_PNG
from backend.serving.roles import COOKIE, OperatorKey

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


def host_name(value: str) -> str:
    """A Host header's name: [::1]:7860 -> ::1, localhost:7860 -> localhost."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_hosts(bind: str) -> frozenset[str] | None:
    bind = bind.strip().lower().strip("[]")
    return None if bind in ANY_ADDRESS else LOOPBACK_NAMES | {bind}


FILE_ROUTE = "/gradio_api/file="
UPLOAD_ROUTE = "/gradio_api/upload"
LOGIN_FAILURES = 5
LOGIN_WINDOW_S = 60.0
UPLOAD_BYTES_PER_CALLER = 100 * 2**20  # five of the largest uploads; thousands of parameter PNGs
UPLOAD_WINDOW_S = 600.0
UNKNOWN_LENGTH = 20 * 2**20  # a body without a Content-Length counts as the largest upload (MAX_UPLOAD)
UPLOADS_TOTAL_BYTES = 200 * 2**20


def foreign_origin(headers) -> str | None:
    """The request's ``Origin`` when it names another site than its ``Host`` (a page elsewhere made
    the browser send it), else None."""
    origin = headers.get("origin")
    if origin and host_name(urlsplit(origin).netloc) != host_name(headers.get("host", "")):
        return origin
    return None


def content_length(headers) -> int | None:
    text = headers.get("content-length") or ""
    return int(text) if text.isdigit() and len(text) < 16 else None


class Window:
    """What each caller (its address) spent in the last ``seconds``; one whose entries aged out is forgotten."""

    def __init__(self, seconds: float, clock):
        self.seconds, self._clock = seconds, clock
        self._spent: dict[str, collections.deque] = {}  # caller -> (when, amount), oldest first

    def _recent(self, caller: str) -> collections.deque:
        now, recent = self._clock(), self._spent.get(caller, collections.deque())
        while recent and now - recent[0][0] > self.seconds:
            recent.popleft()
        if not recent:
            self._spent.pop(caller, None)
        return recent

    def spent(self, caller: str) -> float:
        return sum(amount for _when, amount in self._recent(caller))

    def wait(self, caller: str) -> int:
        """Whole seconds until the caller's oldest entry ages out (the whole window when it has none)."""
        recent = self._recent(caller)
        return int(self.seconds - (self._clock() - recent[0][0])) + 1 if recent else int(self.seconds)

    def add(self, caller: str, amount: float = 1) -> None:
        self._spent.setdefault(caller, collections.deque()).append((self._clock(), amount))


def _address(scope) -> str:
    return (scope.get("client") or ("unknown",))[0]


class RoomGuard:
    def __init__(self, app, key: OperatorKey, hosts: frozenset[str] | None, output_dir: str | None = None,
                 upload_dir: str | None = None, clock=time.monotonic):
        self.app, self.key, self.hosts = app, key, hosts
        self.output_dir = os.path.realpath(output_dir) if output_dir else None
        self.upload_dir = upload_dir
        self._uploads = Window(UPLOAD_WINDOW_S, clock)  # bytes each address uploaded
        self._failures = Window(LOGIN_WINDOW_S, clock)  # wrong operator logins from each address

    def _upload_refusal(self, scope, headers) -> PlainTextResponse | None:
        """None lets the upload through (and counts it)."""
        origin = foreign_origin(headers)
        if origin:
            return _reply(403, f"Uploads come only from this app's own page; {origin!r} is another site.")
        caller = _address(scope)
        declared = content_length(headers)
        length = UNKNOWN_LENGTH if declared is None else declared
        if self._uploads.spent(caller) + length > UPLOAD_BYTES_PER_CALLER:
            return _reply(429, f"Too much uploaded from this address: at most {UPLOAD_BYTES_PER_CALLER / 2**20:.0f} "
                               f"MB every {UPLOAD_WINDOW_S / 60:g} minutes; try again in {self._uploads.wait(caller)} s.")
        held = dir_size(self.upload_dir) if self.upload_dir else 0
        if held + length > UPLOADS_TOTAL_BYTES:
            return _reply(413, f"The app holds {held / 2**20:.0f} MB of uploads; at most "
                               f"{UPLOADS_TOTAL_BYTES / 2**20:.0f} MB are kept at once. Try again when they have been read.")
        self._uploads.add(caller, length)
        return None

    def _foreign_output(self, path: str) -> bool:
        if self.output_dir is None or not path.startswith(FILE_ROUTE):
            return False
        target = os.path.realpath(unquote(path[len(FILE_ROUTE):]))
        inside = os.path.commonpath([target, self.output_dir]) == self.output_dir
        return inside and (os.path.dirname(target) != self.output_dir
                           or not APP_PNG.match(os.path.basename(target)))

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers, path, answer = Headers(scope=scope), scope.get("path", ""), None
        if self.hosts is not None and host_name(headers.get("host", "")) not in self.hosts:
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008})
            answer = _reply(421, f"This server answers only for its own address ({', '.join(sorted(self.hosts))}); "
                                 f"Host {headers.get('host')!r} is refused (DNS rebinding protection).")
        elif scope["type"] == "http" and path == "/operator":
            answer = self._login(scope, headers)
        elif scope["type"] == "http" and self._foreign_output(path):
            answer = _reply(404, "Not found: the output folder serves only the images the app made.")
        elif scope["type"] == "http" and path == UPLOAD_ROUTE and scope.get("method") == "POST":
            answer = self._upload_refusal(scope, headers)
        await (answer or self.app)(scope, receive, send)

    def _login(self, scope, headers):
        caller = _address(scope)
        if self._failures.spent(caller) >= LOGIN_FAILURES:
            wait = self._failures.wait(caller)
            return _reply(429, f"Too many wrong operator logins from this address; try again in {wait} s.",
                          {"retry-after": str(wait)})
        query = QueryParams(scope.get("query_string", b""))
        ok = self.key.check_token(query.get("token"))
        if not ok and self.key.pairs:
            auth = headers.get("authorization", "")
            if auth.lower().startswith("basic "):
                try:
                    user, _, password = base64.b64decode(auth[6:]).decode("utf-8").partition(":")
                except (ValueError, UnicodeDecodeError):
                    user = password = None
                ok = self.key.check_login(user, password)
            if not ok:
                if auth or query.get("token"):
                    self._failures.add(caller)
                return _reply(401, "Operator login required.",
                              {"www-authenticate": 'Basic realm="Neuron Studio operator"'})
        if not ok:
            self._failures.add(caller)
            return _reply(403, "That is not this run's operator token: the page stays a viewer's.")
        cookie = f"{COOKIE}={self.key.session_key}; Path=/; HttpOnly; SameSite=Strict"
        return RedirectResponse("/", 303, headers={"set-cookie": cookie, "cache-control": "no-store"})


def _reply(status: int, message: str, headers: dict[str, str] | None = None) -> PlainTextResponse:
    return PlainTextResponse(message + "\n", status, headers)
