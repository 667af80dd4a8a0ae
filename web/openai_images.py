"""``POST /v1/images/generations`` (JSON) and ``POST /v1/images/edits`` (multipart, ``image`` or
``image[]``: the references of an edit) in OpenAI's request and response shapes, answered by the
same manager as the page (docs/api.md).

Fields: ``prompt``, ``n`` (images per prompt: one batch), ``size`` ("WIDTHxHEIGHT" or "auto"),
``response_format`` (``b64_json``, the default, or ``url``: the app's own output route), ``model``;
the extensions ``mode``, ``steps``, ``seed``, ``guidance``. OpenAI fields that change nothing here
(``user``, ``quality``, ``style``, ``background``, ``moderation``) are accepted and ignored;
anything else is refused naming it. Each response carries the run's record (``neuron_studio``).

Compile-aware: ``size: "auto"`` takes the nearest warm signature; a cold one while the app is locked
to warm shapes is refused at once (409, the nearest warm one named); a request that compiles says
so (``X-Compile``, ``X-Compile-Estimate-Seconds``) and one sent with ``X-Compile-Policy: refuse``
is refused (409) instead of waiting for a compile. Every body is bounded before it is read; an
upload is read into memory, checked (``backend.request.references``) and never written.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from backend.errors import (
    BackendBusy,
    BackendNotReady,
    GenerationCancelled,
    InvalidRequest,
    NotAllowed,
    QueueFull,
    ShapeLimitReached,
    ShapeLocked,
    StudioError,
)
from backend.request.references import MAX_REFERENCE_BYTES
from backend.serving.compile_state import nearest_signature
from backend.shapes import show_value
from web.guard import content_length
from web.replies import ApiError

MAX_JSON_BYTES = 64 * 1024
EXTENSIONS = ("mode", "steps", "seed", "guidance")
FIELDS = ("prompt", "n", "size", "response_format", "model", *EXTENSIONS)
IGNORED = ("user", "quality", "style", "background", "moderation")
FORMATS = ("b64_json", "url")
POLICY_HEADER = "x-compile-policy"
# The page's name of a field -> the request's (what an OpenAI client sent).
API_NAMES = {"count": "n", "images": "image", "width": "size", "height": "size"}
MODEL_NAMES = ("neuron-studio", "flux.2-klein")


class ImagesApi:
    """The two routes, one manager. Each caller (an API key, or a loopback address) owns its runs on
    the service's job board: ``--max-queued-per-viewer`` waiting besides the one running, as a page."""

    def __init__(self, manager):
        self.manager = manager

    async def answer(self, path: str, request: Request, caller) -> JSONResponse:
        """The response to one request, run for ``caller`` (``backend.serving.roles.api_caller``): the
        job board holds its turn and its cap, as for every other door."""
        return await self._answer(path, request, caller)

    async def _answer(self, path: str, request: Request, caller) -> JSONResponse:
        editing = path.endswith("/edits")
        fields, images = await (_multipart(request, self.manager.settings.max_references) if editing
                                else _json(request))
        if editing and not images:
            raise ApiError(400, "image: an edit needs at least one reference image (multipart field image or "
                                "image[])", param="image", code="missing_image")
        if not editing and "image" in fields:
            raise ApiError(400, "image: references go to /v1/images/edits", param="image")
        response_format = fields.get("response_format") or "b64_json"
        if response_format not in FORMATS:
            raise ApiError(400, f"response_format: must be one of {', '.join(FORMATS)}, got "
                                f"{show_value(response_format)}", param="response_format")
        self._check_model(fields.get("model"))
        run = await run_in_threadpool(self._validate, fields, images)
        prediction = self.manager.predict(run.mode, run.shape, run.steps)
        headers = _compile_headers(prediction)
        if prediction.get("refused"):
            raise ApiError(409, prediction["refused"], param="size", code="shape_not_warm", headers=headers)
        if prediction["will_compile"] and request.headers.get(POLICY_HEADER, "").strip().lower() == "refuse":
            estimate = prediction.get("estimate_compile_seconds")
            nearest = prediction.get("nearest_warm")
            raise ApiError(409, f"{run.shape} in {run.mode} mode would compile first"
                                + (f" (about {estimate:.0f} s)" if estimate else "")
                                + f", and {POLICY_HEADER} says refuse" + (f"; warm and nearest: {nearest}" if nearest
                                                                            else "; nothing is warm yet"),
                           param="size", code="would_compile", headers=headers)
        _image, result = await self._generate(request, run, caller)
        record = result.to_json()
        data = []
        for path_ in result.paths:
            if response_format == "url":
                data.append({"url": f"{str(request.base_url).rstrip('/')}/gradio_api/file={quote(path_)}"})
            else:
                data.append({"b64_json": base64.b64encode(Path(path_).read_bytes()).decode()})
            if run.typed and run.typed != run.prompt:
                data[-1]["revised_prompt"] = run.prompt  # what the model's grammar read it as
        for key in ("path", "paths"):
            record.pop(key, None)
        headers["x-compile"] = "compiled" if result.compiled else "warm"
        headers["x-compile-seconds"] = f"{result.compile_seconds:.3f}"
        return JSONResponse({"created": int(result.started_at), "data": data, "neuron_studio": record},
                            headers=headers)

    def _check_model(self, model: Any) -> None:
        known = {name for name in (*MODEL_NAMES, self.manager.settings.model, self.manager.model_label) if name}
        if model not in (None, "") and model not in known:
            raise ApiError(400, f"model: this app serves {self.manager.model_label or self.manager.settings.model}; "
                                f"give one of {', '.join(sorted(known))} or leave it out, got {show_value(model)}",
                           param="model", code="model_not_found")

    def _validate(self, fields: dict[str, Any], images: list[bytes]):
        """The GenerationRequest (``Manager.validate``: every field checked, the references read)."""
        size = fields.get("size")
        auto = size == "auto"
        shape = self.manager.card.start_shape  # no size: the page's first size, as the page starts with
        try:
            if size is not None and not auto:
                if not isinstance(size, str):
                    raise InvalidRequest("size", f"must be text such as \"1024x1024\" or \"auto\", got "
                                                 f"{show_value(size)}")
                width, height = _size(size)
            else:
                width, height = shape.width, shape.height
            args = dict(steps=fields.get("steps"), guidance=fields.get("guidance"), seed=fields.get("seed"),
                        mode=fields.get("mode") or self.manager.settings.mode, images=images or None,
                        count=fields.get("n", 1))
            run = self.manager.validate(fields.get("prompt"), height, width, **args)
            args["images"] = run.references or None  # read and fitted once
            if auto:  # the nearest warm signature, else the start size (an edit: its first reference's)
                if run.references:
                    height, width = run.references[0].size
                    run = self.manager.validate(fields.get("prompt"), height, width, **args)
                warm = self.manager.table.warm_shapes(run.mode)
                if warm:
                    nearest = nearest_signature(run.shape, warm)
                    if (nearest.height, nearest.width) != (run.height, run.width):
                        run = self.manager.validate(fields.get("prompt"), nearest.height, nearest.width, **args)
            return run
        except InvalidRequest as exc:
            raise _invalid(exc) from None

    async def _generate(self, request: Request, run, caller):
        """Run it; a client that hangs up stops its run at the next step, as a closed page does."""
        gone = threading.Event()

        async def watch() -> None:
            while not gone.is_set():
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    gone.set()

        watcher = asyncio.ensure_future(watch())
        try:
            return await run_in_threadpool(self.manager.run, run, caller, still_wanted=lambda: not gone.is_set())
        except StudioError as exc:
            raise _refusal(exc) from None
        finally:
            gone.set()
            watcher.cancel()


def _size(text: str) -> tuple[int, int]:
    """(width, height) of "WIDTHxHEIGHT"; InvalidRequest("size") otherwise."""
    from backend.shapes import parse_shape

    try:
        shape = parse_shape(text)
    except ValueError as exc:
        raise InvalidRequest("size", str(exc)) from None
    return shape.width, shape.height


def _invalid(exc: InvalidRequest) -> ApiError:
    param = API_NAMES.get(exc.field, exc.field)
    text = str(exc).split(": ", 1)[1] if ": " in str(exc) else str(exc)
    named = exc.field if param == exc.field else f"{exc.field} ({param})"
    return ApiError(400, f"{named}: {text}", param=param, code="invalid_value")


def _refusal(exc: StudioError) -> ApiError:
    """A backend refusal in OpenAI's error shape and the HTTP status it means."""
    if isinstance(exc, InvalidRequest):
        return _invalid(exc)
    if isinstance(exc, (ShapeLocked, ShapeLimitReached)):
        return ApiError(409, str(exc), param="size", code="shape_not_warm")
    if isinstance(exc, NotAllowed):
        return ApiError(403, str(exc), code="not_allowed", kind="permission_error")
    if isinstance(exc, QueueFull):
        return ApiError(429, str(exc), code="rate_limit_exceeded", kind="rate_limit_error", headers={"retry-after": "5"})
    if isinstance(exc, (BackendNotReady, BackendBusy)):
        return ApiError(503, str(exc), code="not_ready", kind="server_error", headers={"retry-after": "5"})
    if isinstance(exc, GenerationCancelled):
        return ApiError(499, str(exc), code="cancelled", kind="server_error")
    return ApiError(500, str(exc), code="generation_failed", kind="server_error")


def _compile_headers(prediction: dict[str, Any]) -> dict[str, str]:
    headers = {"x-compile": "will-compile" if prediction["will_compile"] else "warm"}
    if prediction.get("estimate_compile_seconds"):
        headers["x-compile-estimate-seconds"] = f"{prediction['estimate_compile_seconds']:.1f}"
    if prediction.get("nearest_warm"):
        headers["x-nearest-warm"] = prediction["nearest_warm"]
    return headers


def _fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The known fields; an unknown one is refused naming it."""
    unknown = sorted(set(raw) - set(FIELDS) - set(IGNORED))
    if unknown:
        raise ApiError(400, f"{unknown[0]}: not a field of this API (fields: {', '.join(FIELDS)})", param=unknown[0],
                       code="unknown_parameter")
    return {k: v for k, v in raw.items() if k in FIELDS}


async def _body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) past ``limit`` bytes before more is read."""
    length = content_length(request.headers)
    if request.headers.get("content-length") and (length is None or length > limit):
        raise ApiError(413, f"the request body is over {limit / 2**20:.1f} MB", code="body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request body is over {limit / 2**20:.1f} MB", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def _json(request: Request) -> tuple[dict[str, Any], list[bytes]]:
    import json

    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise ApiError(415, "send the request as JSON (Content-Type: application/json)", code="unsupported_media_type")
    try:
        raw = json.loads(await _body(request, MAX_JSON_BYTES))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not JSON: {exc}", code="invalid_json") from None
    if not isinstance(raw, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    return _fields(raw), []


async def _multipart(request: Request, max_references: int) -> tuple[dict[str, Any], list[bytes]]:
    """The edit's fields and its images' bytes; the body is bounded (each reference's bytes, and
    a little for the fields) before it is parsed, and the parser's spooled copies closed."""
    from starlette.exceptions import HTTPException
    from starlette.formparsers import MultiPartException

    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise ApiError(415, "send an edit as multipart/form-data (image, prompt, ...)", code="unsupported_media_type")
    body = await _body(request, (max_references + 1) * MAX_REFERENCE_BYTES + MAX_JSON_BYTES)
    sent = False

    async def replay():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    parsed = Request(request.scope, replay)
    try:
        async with parsed.form(max_files=max_references + 1, max_fields=len(FIELDS) + len(IGNORED),
                               max_part_size=MAX_JSON_BYTES) as form:
            raw: dict[str, Any] = {}
            images: list[bytes] = []
            for key, value in form.multi_items():
                if key in ("image", "image[]"):
                    if isinstance(value, str):
                        raise ApiError(400, f"{key}: must be a file (an image), got text", param="image",
                                       code="invalid_value")
                    images.append(await value.read(MAX_REFERENCE_BYTES + 1))
                elif key == "mask":
                    raise ApiError(400, "mask: this model edits from references and the prompt; masks are not "
                                        "taken", param="mask", code="unsupported_parameter")
                elif not isinstance(value, str):
                    raise ApiError(400, f"{key}: must be a plain field, not a file", param=key, code="invalid_value")
                else:
                    raw[key] = value
    except (HTTPException, MultiPartException) as exc:  # the parser's bounds (files, fields, a field's size)
        detail = getattr(exc, "detail", None) or getattr(exc, "message", "")
        raise ApiError(400, f"the multipart body was refused: {detail}", param="image", code="invalid_multipart") \
            from None
    for key in ("n", "steps", "seed"):  # multipart sends text: the backend's checks take numbers as text too
        if key in raw and isinstance(raw[key], str) and raw[key].strip().lstrip("-").isdigit():
            raw[key] = int(raw[key])
    return _fields(raw), images
