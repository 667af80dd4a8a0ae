"""The clients' door, below Gradio on the same server: the OpenAI-compatible Images API
(``web.openai_images``), the probes and the metrics. Pure ASGI (no Gradio): it answers its own
paths before any of Gradio's routes and passes every other request through.

- ``GET /healthz``: the process answers (200). ``GET /readyz`` and ``GET /ping`` (SageMaker's):
  200 once the model is loaded and the ``--prewarm`` shapes are warm, else 503 with the reason
  (``Manager.readiness``). Anyone may ask; they say no more than the page's status line.
- ``GET /metrics``: Prometheus' text format (``backend.serving.metrics``), to loopback scrapers or
  with ``Authorization: Bearer <--metrics-key>``.
- ``POST /v1/images/generations`` and ``/v1/images/edits``: with ``--api-keys``, each call needs
  ``Authorization: Bearer <key>`` and runs as that key's viewer; without, only loopback callers
  may call (the start says so). Wrong keys from one address are slowed down as wrong operator
  logins are (``web.guard``). A request whose ``Origin`` names another site is refused: a page
  elsewhere cannot make a visitor's browser spend this app's device.
"""

from __future__ import annotations

import hmac
import logging
import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web.guard import LOGIN_FAILURES, LOGIN_WINDOW_S, LOOPBACK_NAMES, Window, foreign_origin, host_name
from web.replies import ApiError

log = logging.getLogger(__name__)
IMAGES = ("/v1/images/generations", "/v1/images/edits")
PROBES = ("/healthz", "/readyz", "/ping")
METRICS = "/metrics"
MIN_KEY_CHARS = 16


def read_secret(spec: str) -> str:
    """A key given as itself, or as a file holding it (its first line)."""
    path = Path(spec).expanduser()
    return path.read_text().strip().splitlines()[0].strip() if path.is_file() else spec.strip()


class ApiKeys:
    """The keys of ``--api-keys FILE``: one per line, ``name:key`` or a bare key (named by its line);
    blank lines and ``#`` comments skipped. No file: no keys, loopback callers only."""

    def __init__(self, keys: dict[str, str] | None = None):
        self.keys = dict(keys or {})  # name -> key

    @classmethod
    def load(cls, path: Path | None) -> "ApiKeys":
        if path is None:
            return cls()
        keys: dict[str, str] = {}
        for number, line in enumerate(Path(path).expanduser().read_text().splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, key = line.rpartition(":")
            name = name.strip() or f"key-{number}"
            key = key.strip()
            if len(key) < MIN_KEY_CHARS or any(c.isspace() for c in key):
                raise ValueError(f"--api-keys {path}: line {number}: a key is at least {MIN_KEY_CHARS} characters "
                                 "without spaces")
            if name in keys:
                raise ValueError(f"--api-keys {path}: line {number}: the name {name!r} is used twice")
            keys[name] = key
        if not keys:
            raise ValueError(f"--api-keys {path}: the file holds no key")
        return cls(keys)

    def name_of(self, token: str) -> str | None:
        """The key's name, compared in constant time against every key; None for a wrong one."""
        found = None
        for name, key in self.keys.items():
            if hmac.compare_digest(token.encode(), key.encode()):
                found = name
        return found

    def describe(self) -> str:
        return (f"the Images API (/v1/images) takes {len(self.keys)} API key(s) from --api-keys" if self.keys else
                "the Images API (/v1/images) answers loopback callers only (no --api-keys)")


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def _loopback(request: Request) -> bool:
    return request.client is not None and host_name(request.client.host) in LOOPBACK_NAMES | {"::ffff:127.0.0.1"}


class ApiDoor:
    """ASGI middleware: answers ``IMAGES``, ``PROBES`` and ``METRICS``; passes the rest to ``app``."""

    def __init__(self, app, manager, keys: ApiKeys, metrics_key: str | None = None, clock=time.monotonic):
        from web.openai_images import ImagesApi

        self.app, self.manager, self.keys = app, manager, keys
        self.metrics_key = read_secret(metrics_key) if metrics_key else None
        self._failures = Window(LOGIN_WINDOW_S, clock)  # wrong API keys from each address
        self.images = ImagesApi(manager)

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or path not in (*IMAGES, *PROBES, METRICS):
            return await self.app(scope, receive, send)
        request = Request(scope, receive)
        try:
            response = await self._answer(path, request)
        except ApiError as refusal:
            response = refusal.response()
        except Exception:  # a bug here: logged with its trace, answered in the clients' shape
            log.exception("the clients' door failed on %s", path)
            response = ApiError(500, "the server failed on this request (its log has the details)",
                                code="internal_error", kind="server_error").response()
        await response(scope, receive, send)

    async def _answer(self, path: str, request: Request) -> Response:
        if path in PROBES:
            self._method(request, "GET", "HEAD")
            if path == "/healthz":
                return JSONResponse({"status": "ok", "state": self.manager.state})
            ready, why = self.manager.readiness()
            return JSONResponse({"status": "ready" if ready else "not ready", "reason": why},
                                status_code=200 if ready else 503)
        if path == METRICS:
            self._method(request, "GET")
            self._metrics_caller(request)
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            return Response(generate_latest(self.manager.metrics.registry), media_type=CONTENT_TYPE_LATEST)
        self._method(request, "POST")
        self._same_site(request)
        caller = self._api_caller(request)
        return await self.images.answer(path, request, caller)

    @staticmethod
    def _method(request: Request, *allowed: str) -> None:
        if request.method not in allowed:
            raise ApiError(405, f"{request.url.path} takes {' or '.join(allowed)}, not {request.method}",
                           code="method_not_allowed", headers={"allow": ", ".join(allowed)})

    @staticmethod
    def _same_site(request: Request) -> None:
        origin = foreign_origin(request.headers)
        if origin:
            raise ApiError(403, f"requests from another site's page ({origin!r}) are refused", code="cross_origin",
                           kind="permission_error")

    def _metrics_caller(self, request: Request) -> None:
        token = _bearer(request)
        if self.metrics_key and token is not None and hmac.compare_digest(token.encode(), self.metrics_key.encode()):
            return
        if not _loopback(request):
            raise ApiError(403, "/metrics answers loopback scrapers, or others with the --metrics-key as a Bearer "
                                "token", code="metrics_key_required", kind="permission_error")

    def _api_caller(self, request: Request):
        """The caller (``backend.serving.roles.api_caller``: its key's, or its loopback address'), or
        ApiError 401/403/429."""
        from backend.serving.roles import api_caller

        address = request.client.host if request.client else "unknown"
        if not self.keys.keys:
            if not _loopback(request):
                raise ApiError(403, "this app's Images API answers loopback callers only (start it with --api-keys "
                                    "to let others in)", code="loopback_only", kind="permission_error")
            return api_caller(None, address)
        if self._failures.spent(address) >= LOGIN_FAILURES:
            wait = self._failures.wait(address)
            raise ApiError(429, f"too many wrong API keys from this address; try again in {wait} s",
                           code="rate_limit_exceeded", kind="rate_limit_error", headers={"retry-after": str(wait)})
        token = _bearer(request)
        if not token:
            raise ApiError(401, "an API key is required: send Authorization: Bearer <key> (--api-keys)",
                           param="authorization", code="missing_api_key", kind="authentication_error")
        name = self.keys.name_of(token)
        if name is None:
            self._failures.add(address)
            raise ApiError(401, "that API key is not one of this app's (--api-keys)", param="authorization",
                           code="invalid_api_key", kind="authentication_error")
        return api_caller(name, address)

