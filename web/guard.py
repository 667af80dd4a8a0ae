"""The web server's door, below Gradio (pure ASGI, so it runs before every Gradio route). SECURITY.md
states what it promises: a ``Host`` that is not this server's is refused (421: DNS rebinding); an
``Origin`` that is not exactly this server's scheme, host and port, on a request that changes state or
carries a credential (cookies ignore ports), 403; in the output folder only the PNGs the app wrote
(``APP_PNG``) are served (404); uploads are counted as they arrive (``_upload``); wrong credentials of
every kind share one window (``Failures``); ``/operator`` is the operator's login. The address is the
peer's: uvicorn rewrites it from ``X-Forwarded-For`` only for ``--forwarded-allow-ips`` (``server.Served``).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import errno
import os
import time
from urllib.parse import parse_qs, unquote, urlsplit

from starlette.datastructures import Headers, QueryParams
from starlette.formparsers import MultiPartException
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.websockets import WebSocketClose

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
UPLOAD_ROUTES = frozenset({UPLOAD_ROUTE, "/v1/images/edits"})
VIEWER_LOGIN_ROUTES = frozenset({"/login", "/login/"})  # Gradio's, with --auth
LOGIN_FAILURES = 5
LOGIN_WINDOW_S = 60.0
MAX_LOGIN_BODY = 16 * 2**10
UPLOAD_BYTES_PER_CALLER = 100 * 2**20  # five of the largest uploads; thousands of parameter PNGs
UPLOAD_WINDOW_S = 600.0
UPLOADS_TOTAL_BYTES = 200 * 2**20
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _origin_tuple(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    scheme = {"ws": "http", "wss": "https"}.get(scheme.lower(), scheme.lower())
    return (scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme, 0))


def foreign_origin(headers, scheme: str = "http") -> str | None:
    """The request's ``Origin`` when it is not exactly this server's scheme, host and port (the
    ``Host`` the request was sent to, over ``scheme``): a page elsewhere made the browser send it."""
    origin = headers.get("origin")
    if origin is None:
        return None
    parts = urlsplit(origin)
    theirs = _origin_tuple(parts.scheme, parts.netloc) if parts.scheme and parts.netloc else None
    ours = _origin_tuple(scheme, headers.get("host", ""))
    return None if theirs is not None and theirs == ours else origin


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


class Failures:
    """The one window of wrong credentials, for every door that takes one: an address and the
    credential it tried (``"operator"``, ``"api key"``, ``"metrics key"``, ``"viewer alice"``) is
    one entry, so wrong guesses at one name or key do not close another's."""

    def __init__(self, clock=time.monotonic):
        self._window = Window(LOGIN_WINDOW_S, clock)

    def wait(self, address: str, credential: str) -> int | None:
        """Seconds to wait before trying ``credential`` again from ``address`` (None: it may try now)."""
        caller = f"{address} {credential}"
        return self._window.wait(caller) if self._window.spent(caller) >= LOGIN_FAILURES else None

    def failed(self, address: str, credential: str) -> None:
        self._window.add(f"{address} {credential}")


def _top_files(folder: str | None) -> set[str]:
    """The regular files at the top of the upload folder: Gradio's uploads in progress (a finished one
    is moved into a folder of its own)."""
    if not folder or not os.path.isdir(folder):
        return set()
    return {entry.name for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False)}


def _address(scope) -> str:
    return (scope.get("client") or ("unknown",))[0]


class UploadCut(MultiPartException):
    """An upload past its bound, raised to the parser reading it (Gradio's and Starlette's delete their
    part files on a ``MultiPartException``)."""


class RoomGuard:
    def __init__(self, app, key: OperatorKey, hosts: frozenset[str] | None, output_dir: str | None = None,
                 upload_dir: str | None = None, clock=time.monotonic, failures: Failures | None = None,
                 viewer_login: bool = False):
        self.app, self.key, self.hosts = app, key, hosts
        self.output_dir = os.path.realpath(output_dir) if output_dir else None
        self.upload_dir = upload_dir
        self.viewer_login = viewer_login  # --auth: Gradio's /login takes the viewers' passwords
        self._uploads = Window(UPLOAD_WINDOW_S, clock)  # bytes each address uploaded
        self._arriving: collections.Counter = collections.Counter()  # bytes of bodies still arriving, by address
        self.failures = failures or Failures(clock)

    def _upload_refusal(self, caller: str, more: int, held: int) -> PlainTextResponse | None:
        """None lets ``more`` bytes from ``caller`` through, on top of what it sent and is sending."""
        if self._uploads.spent(caller) + self._arriving[caller] + more > UPLOAD_BYTES_PER_CALLER:
            return _reply(429, f"Too much uploaded from this address: at most {UPLOAD_BYTES_PER_CALLER / 2**20:.0f} "
                               f"MB every {UPLOAD_WINDOW_S / 60:g} minutes; "
                               f"try again in {self._uploads.wait(caller)} s.")
        if held + sum(self._arriving.values()) + more > UPLOADS_TOTAL_BYTES:
            return _reply(413, f"The app holds {held / 2**20:.0f} MB of uploads; at most "
                               f"{UPLOADS_TOTAL_BYTES / 2**20:.0f} MB are kept at once. "
                               "Try again when they have been read.")
        return None

    async def _upload(self, scope, receive, send, headers):
        """The upload handed on with its body counted chunk by chunk (a body without a Content-Length is
        bounded by what it sends), cut at the first bound it passes: an address's bytes sent and arriving
        (429), everything held and arriving (413); a full disk answers 507."""
        caller, declared = _address(scope), content_length(headers) or 0
        held = dir_size(self.upload_dir) if self.upload_dir else 0
        if refusal := self._upload_refusal(caller, declared, held):  # a declared length: refused before the body
            return await refusal(scope, receive, send)
        state = {"got": 0, "answer": None}
        before = _top_files(self.upload_dir)

        async def counted():
            message = await receive()
            if message["type"] == "http.request" and message.get("body"):
                size = len(message["body"])
                answer = self._upload_refusal(caller, size, held)
                state["got"] += size
                self._arriving[caller] += size
                if answer is not None:
                    state["answer"] = answer
                    raise UploadCut("the upload was cut at its bound; File size exceeded maximum allowed size")
            return message

        async def until_cut(message):
            if state["answer"] is None:
                await send(message)

        try:
            await self.app(scope, counted, until_cut)
        except UploadCut:
            pass
        except OSError as exc:  # a full disk while a part was written
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # Gradio's parser leaves its part file (a temporary file at the folder's top) on this error:
            # those made meanwhile go (an upload arriving beside this one on the full disk goes with it).
            for name in _top_files(self.upload_dir) - before:
                os.unlink(os.path.join(self.upload_dir, name))
            state["answer"] = _reply(507, "The server's disk is full: the upload was not kept. Try again later.")
        finally:
            self._arriving[caller] -= state["got"]
            if self._arriving[caller] <= 0:
                del self._arriving[caller]
            self._uploads.add(caller, max(state["got"], declared))
        if state["answer"] is not None:
            await state["answer"](scope, receive, send)

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
        headers, path, http, answer = Headers(scope=scope), scope.get("path", ""), scope["type"] == "http", None
        method = scope.get("method", "GET") if http else "WEBSOCKET"
        origin = foreign_origin(headers, scope.get("scheme", "http"))
        if self.hosts is not None and host_name(headers.get("host", "")) not in self.hosts:
            answer = _reply(421, f"This server answers only for its own address ({', '.join(sorted(self.hosts))}); "
                                 f"Host {headers.get('host')!r} is refused (DNS rebinding protection).")
        elif origin and (method not in SAFE_METHODS or "cookie" in headers or "authorization" in headers):
            answer = _reply(403, f"Requests from another site's page ({origin!r}) are refused: only this app's own "
                                 "page (its scheme, host and port) may send them. Behind a proxy, name it with "
                                 "--forwarded-allow-ips so the scheme it was reached by is known.")
        elif "\0" in path or "%00" in path:
            answer = _reply(400, "A path with a NUL byte is refused.")
        elif http and path == "/operator":
            answer = self._login(scope, headers)
        elif http and self._foreign_output(path):
            answer = _reply(404, "Not found: the output folder serves only the images the app made.")
        elif http and path in UPLOAD_ROUTES and method == "POST":
            return await self._upload(scope, receive, send, headers)
        elif self.viewer_login and http and path in VIEWER_LOGIN_ROUTES and method == "POST":
            return await self._viewer_login(scope, receive, send)
        if answer is not None and not http:  # a refused websocket is closed at its handshake
            answer = WebSocketClose(1008)
        await (answer or self.app)(scope, receive, send)

    async def _viewer_login(self, scope, receive, send):
        """Gradio's ``/login`` behind the failure window of the address and the user name claimed."""
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_LOGIN_BODY:
                return await _reply(413, "A login is a user name and a password.")(scope, receive, send)
        fields = parse_qs(body.decode("latin-1"))
        caller, credential = _address(scope), f"viewer {(fields.get('username') or [''])[0].strip()[:64]}"
        wait = self.failures.wait(caller, credential)
        if wait is not None:
            return await _reply(429, f"Too many wrong logins for this user from this address; try again in {wait} s.",
                                {"retry-after": str(wait)})(scope, receive, send)
        read = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay():
            return read.pop() if read else await receive()

        async def watch(message):
            if message["type"] == "http.response.start" and message["status"] != 200:
                self.failures.failed(caller, credential)
            await send(message)

        await self.app(scope, replay, watch)

    def _login(self, scope, headers):
        caller, query = _address(scope), QueryParams(scope.get("query_string", b""))
        token, auth = query.get("token"), headers.get("authorization", "")
        if self.key.check_token(token):  # a key (long, random): checked before the window, never locked out
            return self._operator_cookie()
        user = password = None
        if self.key.pairs and auth.lower().startswith("basic "):
            with contextlib.suppress(ValueError):  # a bad base64 or UTF-8 (a UnicodeDecodeError) is no login
                user, _, password = base64.b64decode(auth[6:]).decode("utf-8").partition(":")
        credential = "operator" if user is None else f"operator {user[:64]}"  # a password: its own window
        wait = self.failures.wait(caller, credential)
        if wait is not None:
            return _reply(429, f"Too many wrong operator logins from this address; try again in {wait} s.",
                          {"retry-after": str(wait)})
        if user is not None and self.key.check_login(user, password):
            return self._operator_cookie()
        if token or auth or not self.key.pairs:
            self.failures.failed(caller, credential)
        if self.key.pairs:
            return _reply(401, "Operator login required.", {"www-authenticate": 'Basic realm="Neuron Studio operator"'})
        return _reply(403, "That is not this run's operator token: the page stays a viewer's.")

    def _operator_cookie(self) -> RedirectResponse:
        cookie = f"{COOKIE}={self.key.session_key}; Path=/; HttpOnly; SameSite=Strict"
        return RedirectResponse("/", 303, headers={"set-cookie": cookie, "cache-control": "no-store"})


def _reply(status: int, message: str, headers: dict[str, str] | None = None) -> PlainTextResponse:
    return PlainTextResponse(message + "\n", status, headers)
