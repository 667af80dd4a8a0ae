"""OpenAI's Images API over the service (``Manager.run``), errors included (docs/api.md is the manual).
The values are checked once, by the service, which names the field; a JSON body is bounded as it is
read, a multipart body as it streams (a part past its bound is refused before the rest is read).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import secrets
import threading
from pathlib import Path
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.formparsers import MultiPartException, MultiPartParser

from backend import errors
from backend.errors import InvalidRequest, StudioError
from backend.request.references import MAX_REFERENCE_BYTES
from backend.shapes import parse_shape, show_value
from web.guard import content_length

MAX_JSON_BYTES = 64 * 1024
POLICY_HEADER = "x-compile-policy"
API_NAMES = {"count": "n", "images": "image", "width": "size", "height": "size"}  # the service's field -> the API's
MODEL_NAMES = ("neuron-studio", "flux.2-klein")
FILES_ROUTE = "/v1/images/files/"
FILES_KEPT = 1000  # the newest response_format=url images each served by its id (retention may remove one sooner)


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status, headers=self.headers)


class ImageRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: Any = None
    n: Any = 1
    size: Any = None
    response_format: Literal["b64_json", "url"] = "b64_json"
    model: Any = None
    mode: Any = None
    steps: Any = None
    seed: Any = None
    guidance: Any = None
    # OpenAI's, accepted and changing nothing here
    user: Any = None
    quality: Any = None
    style: Any = None
    background: Any = None
    moderation: Any = None


FIELDS = tuple(ImageRequest.model_fields)[:-5]  # without OpenAI's five that change nothing


def _pydantic_refusal(exc: ValidationError) -> ApiError:
    first = exc.errors()[0]
    name = str(first["loc"][0]) if first.get("loc") else None
    if first["type"] == "json_invalid":  # a parse error, a nesting past the parser's limit included
        return ApiError(400, f"the body is not JSON: {first.get('ctx', {}).get('error', first['msg'])}",
                        code="invalid_json")
    if first["type"] == "extra_forbidden":
        return ApiError(400, f"{name}: not a field of this API (fields: {', '.join(FIELDS)})", param=name,
                        code="unknown_parameter")
    if first["type"] == "literal_error" and name == "response_format":
        return ApiError(400, f"response_format: must be one of b64_json, url, got {show_value(first.get('input'))}",
                        param=name, code="invalid_value")
    if first["type"] == "model_type" or not name:
        return ApiError(400, "the body must be a JSON object", code="invalid_json")
    return ApiError(400, f"the body is not JSON: {first['msg']}", code="invalid_json")


class BoundedParts(MultiPartParser):
    """Starlette's multipart parser with every part bounded while it streams (a field also at
    ``max_part_size``) and file parts held in memory, never spooled to disk."""

    spool_max_size = MAX_REFERENCE_BYTES + 1

    def on_part_begin(self) -> None:
        super().on_part_begin()
        self._bounded_size = 0

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        self._bounded_size += end - start
        if self._bounded_size > MAX_REFERENCE_BYTES:
            raise MultiPartException(f"a part is over {MAX_REFERENCE_BYTES / 2**20:.0f} MB, "
                                     "the most a reference may be")
        super().on_part_data(data, start, end)


class Images:
    def __init__(self, manager):
        self.manager = manager
        # id -> (path, owner): an image of a response_format=url answer, served to its maker only, by an
        # unguessable id that names no path
        self._files: collections.OrderedDict[str, tuple[str, Any]] = collections.OrderedDict()
        self._files_lock = threading.Lock()

    def _file_url(self, request: Request, path: str, owner) -> str:
        ident = f"{secrets.token_urlsafe(18)}.png"
        with self._files_lock:
            self._files[ident] = (path, owner)
            while len(self._files) > FILES_KEPT:
                self._files.popitem(last=False)
        return f"{str(request.base_url).rstrip('/')}{FILES_ROUTE}{ident}"

    def file(self, ident: str, caller) -> FileResponse:
        """The image ``ident`` names, for the caller that made it; 404 for anyone else, as for no image."""
        with self._files_lock:
            path, owner = self._files.get(ident, (None, None))
        if path is None or owner != caller.owner or not Path(path).is_file():
            raise ApiError(404, "no such image for this caller (an image's URL opens for the key that made it)",
                           code="not_found")
        return FileResponse(path, media_type="image/png", headers={"cache-control": "private, no-store"})

    @staticmethod
    async def json_fields(request: Request) -> ImageRequest:
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise ApiError(415, "send the request as JSON (Content-Type: application/json)",
                           code="unsupported_media_type")
        too_big = ApiError(413, f"the request body is over {MAX_JSON_BYTES / 2**10:.0f} KB", code="body_too_large")
        if (content_length(request.headers) or 0) > MAX_JSON_BYTES:  # a declared length: refused before the body
            raise too_big
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_JSON_BYTES:
                raise too_big
        try:
            return ImageRequest.model_validate_json(bytes(body))
        except ValidationError as exc:
            raise _pydantic_refusal(exc) from None

    async def multipart_fields(self, request: Request) -> tuple[ImageRequest, list[bytes]]:
        if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
            raise ApiError(415, "send an edit as multipart/form-data (image, prompt, ...)",
                           code="unsupported_media_type")
        most = self.manager.settings.max_references
        parser = BoundedParts(request.headers, request.stream(), max_files=most + 1,
                              max_fields=len(ImageRequest.model_fields), max_part_size=MAX_JSON_BYTES)
        try:
            form = await parser.parse()
        except MultiPartException as exc:  # the parser's bounds (files, fields, a part's size)
            raise ApiError(400, f"the multipart body was refused: {exc.message}", param="image",
                           code="invalid_multipart") from None
        raw: dict[str, Any] = {}
        images: list[bytes] = []
        try:
            for key, value in form.multi_items():
                if key in ("image", "image[]"):
                    if isinstance(value, str):
                        raise ApiError(400, f"{key}: must be a file (an image), got text", param="image",
                                       code="invalid_value")
                    images.append(await value.read())
                elif key == "mask":
                    raise ApiError(400, "mask: this model edits from references and the prompt; masks are not "
                                        "taken", param="mask", code="unsupported_parameter")
                elif not isinstance(value, str):
                    raise ApiError(400, f"{key}: must be a plain field, not a file", param=key, code="invalid_value")
                else:  # multipart sends text: whole numbers as numbers, the service checks the rest
                    raw[key] = int(value) if key in ("n", "steps", "seed") and value.strip().lstrip("-").isdigit() \
                        else value
        finally:
            await form.close()
        try:
            return ImageRequest.model_validate(raw), images
        except ValidationError as exc:
            raise _pydantic_refusal(exc) from None

    def check_model(self, model: Any) -> None:
        known = self.model_names()
        if model not in (None, "") and (not isinstance(model, str) or model not in known):
            raise ApiError(400, f"model: this app serves {self.manager.model_label or self.manager.settings.model}; "
                                f"give one of {', '.join(sorted(known))} or leave it out, got {show_value(model)}",
                           param="model", code="model_not_found")

    def model_names(self) -> set[str]:
        return {name for name in (*MODEL_NAMES, self.manager.settings.model, self.manager.model_label) if name}

    def plan(self, fields: ImageRequest, images: list[bytes]):
        """The service's request and what it will cost (``Manager.plan``); ``size: auto`` is the nearest warm one."""
        size = fields.size
        try:
            if size is None:
                shape = self.manager.card.start_shape
            elif not isinstance(size, str):
                raise ValueError(f"must be text such as \"1024x1024\" or \"auto\", got {show_value(size)}")
            else:
                shape = None if size == "auto" else parse_shape(size)
        except ValueError as exc:
            raise _invalid(InvalidRequest("size", str(exc))) from None
        try:
            return self.manager.plan(dict(prompt=fields.prompt, height=shape and shape.height,
                                          width=shape and shape.width, steps=fields.steps, guidance=fields.guidance,
                                          seed=fields.seed, mode=fields.mode or None, count=fields.n,
                                          images=images or None, nearest_warm=size == "auto"))
        except InvalidRequest as exc:
            raise _invalid(exc) from None

    async def answer(self, request: Request, caller, fields: ImageRequest, images: list[bytes]) -> JSONResponse:
        self.check_model(fields.model)
        run, prediction = await run_in_threadpool(self.plan, fields, images)
        headers = _compile_headers(prediction)
        if prediction.get("refused"):
            raise ApiError(409, prediction["refused"], param="size", code="shape_not_warm", headers=headers)
        if prediction["will_compile"] and request.headers.get(POLICY_HEADER, "").strip().lower() == "refuse":
            estimate, nearest = prediction.get("estimate_compile_seconds"), prediction.get("nearest_warm")
            raise ApiError(409, f"{run.shape} in {run.mode} mode would compile first"
                                + (f" (about {estimate:.0f} s)" if estimate else "")
                                + f", and {POLICY_HEADER} says refuse" + (f"; warm and nearest: {nearest}" if nearest
                                                                            else "; nothing is warm yet"),
                           param="size", code="would_compile", headers=headers)
        # A client that hangs up stops its run at the next step, as a closed page does.
        gone = threading.Event()

        async def watch() -> None:
            while not gone.is_set():
                if (await request.receive())["type"] == "http.disconnect":
                    gone.set()

        watcher = asyncio.ensure_future(watch())
        try:
            _image, result = await run_in_threadpool(self.manager.run, run, caller,
                                                     still_wanted=lambda: not gone.is_set())
        except StudioError as exc:
            raise _refusal(exc) from None
        finally:
            gone.set()
            watcher.cancel()
        record = result.to_json()
        data = []
        for path in result.paths:
            if fields.response_format == "url":
                data.append({"url": self._file_url(request, path, caller.owner)})
            else:
                data.append({"b64_json": base64.b64encode(Path(path).read_bytes()).decode()})
            if run.typed and run.typed != run.prompt:
                data[-1]["revised_prompt"] = run.prompt  # what the model's grammar read it as
        headers["x-compile"] = "compiled" if result.compiled else "warm"
        headers["x-compile-seconds"] = f"{result.compile_seconds:.3f}"
        return JSONResponse({"created": int(result.started_at), "data": data,
                             "neuron_studio": {k: v for k, v in record.items() if k not in ("path", "paths")}},
                            headers=headers)


def _invalid(exc: InvalidRequest) -> ApiError:
    param = API_NAMES.get(exc.field, exc.field)
    named = exc.field if param == exc.field else f"{exc.field} ({param})"
    return ApiError(400, f"{named}: {exc.message}", param=param, code="invalid_value")


# A service refusal's HTTP status and OpenAI error fields, by its class (the first that matches).
_REFUSALS = (
    ((errors.ShapeLocked, errors.ShapeLimitReached), 409, {"param": "size", "code": "shape_not_warm"}),
    (errors.NotAllowed, 403, {"code": "not_allowed", "kind": "permission_error"}),
    (errors.QueueFull, 429, {"code": "rate_limit_exceeded", "kind": "rate_limit_error",
                             "headers": {"retry-after": "5"}}),
    ((errors.BackendNotReady, errors.BackendBusy), 503, {"code": "not_ready", "kind": "server_error",
                                                         "headers": {"retry-after": "5"}}),
    (errors.GenerationCancelled, 499, {"code": "cancelled", "kind": "server_error"}),
    (errors.StorageFull, 507, {"code": "storage_full", "kind": "server_error"}),
)


def _refusal(exc: StudioError) -> ApiError:
    if isinstance(exc, InvalidRequest):
        return _invalid(exc)
    for classes, status, fields in _REFUSALS:
        if isinstance(exc, classes):
            return ApiError(status, str(exc), **fields)
    return ApiError(500, str(exc), code="generation_failed", kind="server_error")


def _compile_headers(prediction: dict[str, Any]) -> dict[str, str]:
    headers = {"x-compile": "will-compile" if prediction["will_compile"] else "warm"}
    if prediction.get("estimate_compile_seconds"):
        headers["x-compile-estimate-seconds"] = f"{prediction['estimate_compile_seconds']:.1f}"
    if prediction.get("nearest_warm"):
        headers["x-nearest-warm"] = prediction["nearest_warm"]
    return headers
