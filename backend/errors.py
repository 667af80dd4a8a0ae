"""The errors the backend raises at its door: the one table of error codes, one hierarchy, so the UI
and the CLI turn every expected failure into one clear line and keep tracebacks for the unexpected
ones (the TGI interceptor habit).

Each class has its stable ``code`` (the page's sentences in ``ui.i18n``, the worker socket's
``kind`` through ``by_code``) and the fields it may carry (``carries``), given when the error is
made (``GenerationCancelled("...", compiles=2)``), never attached afterwards.
"""

from __future__ import annotations

from typing import Any

# Counters a failed or cancelled run still reports (a compile it finished is kept).
RUN_COUNTERS = ("compiles", "compile_seconds", "neff_compiles")


class StudioError(Exception):
    """An expected failure with a message a user can act on."""

    code = "error"
    carries: tuple[str, ...] = ()
    _registry: dict[str, type["StudioError"]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            if cls.code in StudioError._registry:
                raise TypeError(f"error code {cls.code!r} is taken by {StudioError._registry[cls.code].__name__}")
            StudioError._registry[cls.code] = cls

    def __init__(self, message: str = "", **fields: Any):
        unknown = set(fields) - set(self.carries)
        if unknown:
            raise TypeError(f"{type(self).__name__} carries no {', '.join(sorted(unknown))}")
        super().__init__(message)
        for name in self.carries:
            setattr(self, name, fields.get(name, getattr(type(self), name, None)))

    def fields(self) -> dict[str, Any]:
        """The carried fields that are set (for the wire)."""
        return {name: getattr(self, name) for name in self.carries if getattr(self, name, None) is not None}

    def evolve(self, message: str | None = None, **fields: Any) -> "StudioError":
        """The same error (class, message, fields), with another message or fields."""
        if isinstance(self, InvalidRequest):
            return type(self)(self.field, self.message if message is None else message,
                              self.why if message is None else None)
        return type(self)(str(self) if message is None else message, **{**self.fields(), **fields})


def by_code(code: str) -> type[StudioError]:
    """The class for a code (an unknown code is a plain failure)."""
    return StudioError._registry.get(code, GenerationFailed)


def codes() -> dict[str, type[StudioError]]:
    return dict(StudioError._registry)


class InvalidRequest(StudioError, ValueError):
    """A request field is out of range or malformed; ``field`` names it."""

    code = "invalid"
    carries = ("field", "why")

    def __init__(self, field: str, message: str, why: tuple[tuple[str, dict[str, Any]], ...] | None = None):
        """``why``: the message as (reason key, values) pairs, for a page that says it in its own
        language (``ui.i18n``: ``why_<key>``); the API and the CLI say ``message``."""
        super().__init__(f"{field}: {message}", field=field, why=why)
        self.message = message


class ModelNotFound(StudioError):
    """The model named by --model is neither a local diffusers folder nor in the local hub cache."""

    code = "model_not_found"


class BackendNotReady(StudioError):
    """The model is still loading, or failed to load, or the engine for the mode is not running."""

    code = "not_ready"


class BackendBusy(StudioError):
    """Something that runs one at a time (a warm-up) is already running."""

    code = "busy"


class QueueFull(BackendBusy):
    """The caller already has as many runs waiting or running as one caller may (the job board's cap)."""

    code = "queue_full"


class ShapeLocked(StudioError):
    """The app is locked to warm shapes and this (mode, shape) is not warm."""

    code = "locked"


class ShapeLimitReached(StudioError):
    """A compiled mode already holds as many graphs as the recompile limit allows."""

    code = "limit"


class DoesNotFit(StudioError):
    """The signature would not fit one NeuronCore's memory (``backend.hardware.memory``)."""

    code = "does_not_fit"


class GenerationCancelled(StudioError):
    """The running generation was stopped by a cancel request (or its page went away)."""

    code = "cancelled"
    carries = RUN_COUNTERS


class GenerationFailed(StudioError):
    """The pipeline or the compiler raised; the message says which and why. ``group_ending``: the
    worker ranks that ran it are leaving after it (the engine restarts them)."""

    code = "failed"
    carries = RUN_COUNTERS + ("group_ending",)
    group_ending = False


class CompileFailure(GenerationFailed):
    """A failure while a graph was being compiled; the shape's compile state becomes 'failed'."""

    code = "compile_failed"


class GroupDead(GenerationFailed):
    """A worker group died under the request (a rank exited, a collective broke, or a call stalled
    and the group was stopped): a tensor-parallel group, or a replica."""

    code = "group_dead"


class NotAllowed(StudioError):
    """The caller's role may not do this (a viewer asked for an operator's action, or to stop
    another viewer's run)."""

    code = "not_allowed"


class Unauthorized(StudioError):
    """A worker-socket connection without the launch's token (refused before its request is read)."""

    code = "unauthorized"


class BundleRefused(StudioError):
    """The bundle does not apply here, or is malformed, or would overwrite the cache: nothing changed."""

    code = "bundle_refused"


class StorageFull(StudioError):
    """The output folder's disk or quota is full (ENOSPC/EDQUOT): the image was not saved, and
    nothing partial was left."""

    code = "storage_full"


class DeviceUnavailable(StudioError):
    """The requested device cannot be used on this machine."""

    code = "device_unavailable"
