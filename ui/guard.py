"""The web server's door, below Gradio: which Host names it answers, and the operator's login.

- **DNS rebinding.** A page on another site can make the operator's browser send requests to a
  loopback-only app under a name the attacker controls. So while the app listens on a loopback
  address, a request whose ``Host`` is not a loopback name (``127.0.0.1``, ``localhost``, ``::1``)
  is refused (421). With ``--host`` set to another address, the names in ``allowed_hosts`` (that
  address, and any when it is ``0.0.0.0`` or ``::``) are answered.
- **The output folder serves images only.** Gradio serves files under its allowed paths, the
  output folder among them, to anyone who knows a name; there only the PNGs the app wrote (its own
  file names, ``backend.images.folder.APP_PNG``) are answered — not a user's own file kept beside them,
  nor an HTML file that would be served as a page from the app's address (404).
- **The operator's login** (``backend.serving.roles``): ``GET /operator?token=T`` with the token the app
  printed, or ``/operator`` with HTTP Basic credentials from ``--operator-auth``, sets this run's
  operator session key as an HttpOnly, SameSite=Strict cookie and redirects to the page. A wrong
  token or login changes nothing and says so.

Pure ASGI (no Gradio), so it runs before any of Gradio's routes, the API and the queue included.
"""

from __future__ import annotations

import base64
import os
from urllib.parse import parse_qs, unquote

from backend.images.folder import APP_PNG
from backend.serving.roles import COOKIE, OperatorKey

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


def host_name(value: str) -> str:
    """The name part of a Host header: "[::1]:7860" -> "::1", "localhost:7860" -> "localhost"."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_hosts(bind: str) -> frozenset[str] | None:
    """The Host names to answer when listening on ``bind`` (None: any)."""
    bind = bind.strip().lower().strip("[]")
    return None if bind in ANY_ADDRESS else LOOPBACK_NAMES | {bind}


FILE_ROUTE = "/gradio_api/file="


class RoomGuard:
    def __init__(self, app, key: OperatorKey, hosts: frozenset[str] | None, output_dir: str | None = None):
        self.app, self.key, self.hosts = app, key, hosts
        self.output_dir = os.path.realpath(output_dir) if output_dir else None

    def _foreign_output(self, path: str) -> bool:
        """A file route into the output folder for a file the app did not write there."""
        if self.output_dir is None or not path.startswith(FILE_ROUTE):
            return False
        target = os.path.realpath(unquote(path[len(FILE_ROUTE):]))
        inside = os.path.commonpath([target, self.output_dir]) == self.output_dir
        return inside and (os.path.dirname(target) != self.output_dir
                           or not APP_PNG.match(os.path.basename(target)))

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.hosts is not None and host_name(headers.get("host", "")) not in self.hosts:
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008})
            return await _reply(send, 421, "This server answers only for its own address "
                                           f"({', '.join(sorted(self.hosts))}); Host {headers.get('host')!r} "
                                           "is refused (DNS rebinding protection).")
        if scope["type"] == "http" and scope.get("path") == "/operator":
            return await self._login(scope, headers, send)
        if scope["type"] == "http" and self._foreign_output(scope.get("path", "")):
            return await _reply(send, 404, "Not found: the output folder serves only the images the app made.")
        return await self.app(scope, receive, send)

    async def _login(self, scope, headers, send):
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        ok = self.key.check_token((query.get("token") or [None])[0])
        if not ok and self.key.pairs:
            auth = headers.get("authorization", "")
            if auth.lower().startswith("basic "):
                try:
                    user, _, password = base64.b64decode(auth[6:]).decode("utf-8").partition(":")
                except (ValueError, UnicodeDecodeError):
                    user = password = None
                ok = self.key.check_login(user, password)
            if not ok:
                return await _reply(send, 401, "Operator login required.",
                                    [(b"www-authenticate", b'Basic realm="Neuron Studio operator"')])
        if not ok:
            return await _reply(send, 403, "That is not this run's operator token: the page stays a viewer's.")
        cookie = f"{COOKIE}={self.key.session_key}; Path=/; HttpOnly; SameSite=Strict"
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", b"/"), (b"set-cookie", cookie.encode()),
                                (b"cache-control", b"no-store"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


async def _reply(send, status: int, message: str, extra: list | None = None) -> None:
    body = (message + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})
