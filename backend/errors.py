"""The errors the backend raises at its door. Each carries a message meant for the person at the UI or CLI.

One hierarchy, so the UI and the CLI turn every expected failure into one clear line and keep
tracebacks for the unexpected ones (the TGI interceptor habit).
"""

from __future__ import annotations


class StudioError(Exception):
    """An expected failure with a message a user can act on."""


class InvalidRequest(StudioError, ValueError):
    """A request field is out of range or malformed; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ModelNotFound(StudioError):
    """The model named by --model is neither a local diffusers folder nor in the local hub cache."""


class BackendNotReady(StudioError):
    """The model is still loading, or failed to load."""


class BackendBusy(StudioError):
    """Something that runs one at a time (a warm-up) is already running."""


class ShapeLocked(StudioError):
    """The app is locked to warm shapes and this (mode, shape) is not warm."""


class ShapeLimitReached(StudioError):
    """A compiled mode already holds as many graphs as the recompile limit allows."""


class GenerationCancelled(StudioError):
    """The running generation was stopped by a cancel request."""


class GenerationFailed(StudioError):
    """The pipeline or the compiler raised; the message says which and why."""


class CompileFailure(GenerationFailed):
    """A failure while a graph was being compiled; the shape's compile state becomes 'failed'."""


class GroupDead(GenerationFailed):
    """The tensor-parallel worker group died (a rank exited, or a call stalled and it was stopped)."""


class NotAllowed(StudioError):
    """The caller's role may not do this (a viewer asked for an operator's action, or to stop
    another viewer's run)."""
