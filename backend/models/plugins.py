"""Models and prompt readers by name, from the installed packages' entry points: the serving code
knows neither the embedded models nor their grammar, only the names a flag or a model card gives
(``pyproject.toml`` declares the embedded ones: ``neuron_studio.models``,
``neuron_studio.prompt_readers``). Loading one imports its module then, not before."""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

MODELS = "neuron_studio.models"
PROMPT_READERS = "neuron_studio.prompt_readers"


@functools.lru_cache(maxsize=None)
def find(group: str, name: str):
    """The object the entry point ``name`` of ``group`` names, loaded; None when no package provides it.
    A model (``MODELS``) provides ``folder(cache_root)`` and ``resolve(cache_root)``."""
    found = entry_points(group=group, name=name)
    return next(iter(found)).load() if found else None


def prompt_reader(name: str):
    """An instance of the named prompt reader (``read``, ``prompt_help``, ``edit_help``), or None."""
    reader = find(PROMPT_READERS, name)
    return reader() if isinstance(reader, type) else reader
