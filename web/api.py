"""The clients' routes, on FastAPI: the probes (``/healthz``; ``/readyz`` and SageMaker's ``/ping``,
503 with the reason until the ``--prewarm`` shapes are warm), ``/metrics``, ``/v1/models`` and the
Images API (``web.images``); who may call them: ``Callers``. docs/api.md is the manual.
"""

from __future__ import annotations

import hmac
import time
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from backend.serving.roles import api_caller
from web.guard import LOOPBACK_NAMES, Failures, foreign_origin, host_name
from web.images import FILES_ROUTE, ApiError, Images

MIN_KEY_CHARS = 16
WEAK_KEY = f"a key is at least {MIN_KEY_CHARS} characters without spaces"


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
            name, key = name.strip() or f"key-{number}", key.strip()
            if _weak(key):
                raise ValueError(f"--api-keys {path}: line {number}: {WEAK_KEY}")
            if name in keys:
                raise ValueError(f"--api-keys {path}: line {number}: the name {name!r} is used twice")
            keys[name] = key
        if not keys:
            raise ValueError(f"--api-keys {path}: the file holds no key")
        return cls(keys)

    def name_of(self, token: str) -> str | None:
        """The key's name (None for a wrong one): compared in constant time against every key."""
        found = [name for name, key in self.keys.items() if hmac.compare_digest(token.encode(), key.encode())]
        return found[-1] if found else None

    def describe(self) -> str:
        return (f"the Images API (/v1/images) takes {len(self.keys)} API key(s) from --api-keys" if self.keys else
                "the Images API (/v1/images) answers loopback callers only (no --api-keys)")


def _weak(key: str) -> bool:
    return len(key) < MIN_KEY_CHARS or any(c.isspace() for c in key)


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _loopback(request: Request) -> bool:
    return host_name(_address(request)) in LOOPBACK_NAMES | {"::ffff:127.0.0.1"}


class Callers:
    """Who calls the clients' routes (``caller``: with ``--api-keys`` a key's viewer, else a loopback
    caller; never another site's page) and ``/metrics`` (``scraper``: loopback, or the ``--metrics-key``
    (a file or the key) as a Bearer token). A right key is taken before the failure window
    (``web.guard.Failures``, shared with the page's logins), so wrong ones never lock out its holder."""

    def __init__(self, keys: ApiKeys, metrics_key: str | None = None, failures: Failures | None = None):
        self.keys, self.metrics_key = keys, None
        if metrics_key:  # the key, or a file holding it
            path = Path(metrics_key).expanduser()
            self.metrics_key = (path.read_text().strip().splitlines()[0] if path.is_file() else metrics_key).strip()
        if self.metrics_key is not None and _weak(self.metrics_key):
            raise ValueError(f"--metrics-key: {WEAK_KEY}")
        self.failures = failures or Failures()

    def _wrong(self, address: str, credential: str, refusal: ApiError) -> ApiError:
        wait = self.failures.wait(address, credential)
        if wait is not None:
            return ApiError(429, f"too many wrong {credential}s from this address; try again in {wait} s",
                            code="rate_limit_exceeded", kind="rate_limit_error", headers={"retry-after": str(wait)})
        self.failures.failed(address, credential)
        return refusal

    def caller(self, request: Request):
        if origin := foreign_origin(request.headers, request.url.scheme):
            raise ApiError(403, f"requests from another site's page ({origin!r}) are refused", code="cross_origin",
                           kind="permission_error")
        address = _address(request)
        if not self.keys.keys:
            if not _loopback(request):
                raise ApiError(403, "this app's Images API answers loopback callers only (start it with --api-keys "
                                    "to let others in)", code="loopback_only", kind="permission_error")
            return api_caller(None, address)
        token = _bearer(request)
        if not token:
            raise ApiError(401, "an API key is required: send Authorization: Bearer <key> (--api-keys)",
                           param="authorization", code="missing_api_key", kind="authentication_error")
        name = self.keys.name_of(token)
        if name is None:
            raise self._wrong(address, "API key", ApiError(
                401, "that API key is not one of this app's (--api-keys)", param="authorization",
                code="invalid_api_key", kind="authentication_error"))
        return api_caller(name, address)

    def scraper(self, request: Request) -> None:
        token = _bearer(request)
        if self.metrics_key and token is not None and hmac.compare_digest(token.encode(), self.metrics_key.encode()):
            return
        if not _loopback(request):
            refusal = ApiError(403, "/metrics answers loopback scrapers, or others with the --metrics-key as a "
                                    "Bearer token", code="metrics_key_required", kind="permission_error")
            raise refusal if token is None else self._wrong(_address(request), "metrics key", refusal)


def router(images: Images, callers: Callers) -> APIRouter:
    routes = APIRouter()
    manager = images.manager

    @routes.api_route("/healthz", methods=["GET", "HEAD"])
    def healthz():
        return {"status": "ok", "state": manager.state}

    @routes.api_route("/readyz", methods=["GET", "HEAD"])
    @routes.api_route("/ping", methods=["GET", "HEAD"])
    def readyz():
        ready, why = manager.readiness()
        return JSONResponse({"status": "ready" if ready else "not ready", "reason": why},
                            status_code=200 if ready else 503)

    @routes.get("/metrics", dependencies=[Depends(callers.scraper)])
    def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(manager.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @routes.get("/v1/models")
    def models(caller=Depends(callers.caller)):
        created = int(time.time())
        return {"object": "list", "data": [{"id": name, "object": "model", "created": created,
                                            "owned_by": "neuron-studio"} for name in sorted(images.model_names())]}

    @routes.post("/v1/images/generations")
    async def generations(request: Request, caller=Depends(callers.caller)):
        fields = await images.json_fields(request)
        return await images.answer(request, caller, fields, [])

    @routes.post("/v1/images/edits")
    async def edits(request: Request, caller=Depends(callers.caller)):
        fields, references = await images.multipart_fields(request)
        if not references:
            raise ApiError(400, "image: an edit needs at least one reference image (multipart field image or "
                                "image[])", param="image", code="missing_image")
        return await images.answer(request, caller, fields, references)

    @routes.get(FILES_ROUTE + "{ident}")
    def image_file(ident: str, caller=Depends(callers.caller)):
        return images.file(ident, caller)

    # The page is mounted at "/" beside these routes and would take any other method on their paths.
    @routes.api_route("/v1/images/generations", methods=["GET", "PUT", "PATCH", "DELETE"])
    @routes.api_route("/v1/images/edits", methods=["GET", "PUT", "PATCH", "DELETE"])
    def wrong_method(request: Request):
        raise ApiError(405, f"{request.url.path} takes POST, not {request.method}", code="method_not_allowed",
                       headers={"allow": "POST"})

    return routes


def _malformed(_request: Request, exc: RequestValidationError) -> JSONResponse:
    return ApiError(400, f"the request is malformed: {exc.errors()[0].get('msg', '')}",
                    code="invalid_request").response()


def build_api(manager, keys: ApiKeys | None = None, metrics_key: str | None = None,
              failures: Failures | None = None) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None, exception_handlers={
        ApiError: lambda _request, exc: exc.response(), RequestValidationError: _malformed})
    app.include_router(router(Images(manager), Callers(keys or ApiKeys(), metrics_key, failures)))
    return app
