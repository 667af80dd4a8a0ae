"""What the serving code takes from here, and only through the entry points ``pyproject.toml``
declares (``neuron_studio.models``, ``neuron_studio.prompt_readers``): the backend never imports
this package, it asks for a model or a prompt reader by the name a flag or a model card gives.

- ``SCENES`` and ``RANDOM``: the two embedded models (``--model embedded`` and ``embedded-random``);
- ``ScenesReader``: the scene grammar's prompt reader, which a model card installs by naming it
  (``"prompt_grammar": "scenes"``). Importing this module imports the grammar's words alone.
"""

from __future__ import annotations

from pathlib import Path

from embedded import EMBEDDED_MODEL_DIR, SCENES_MODEL_DIR


def _is_pipeline_folder(path: Path) -> bool:
    return (path / "model_index.json").is_file()


class EmbeddedModel:
    """One embedded model: where its folder is, and how to have it (its label for the record)."""

    def __init__(self, name: str, folder: Path, label: str, missing: str | None = None):
        self.name, self._folder, self.label, self._missing = name, folder, label, missing

    def folder(self, cache_root: Path) -> Path:
        """Its folder, looked up without building anything: the committed one, else (the random
        model) where it is built on first use."""
        if self._missing is None and not _is_pipeline_folder(self._folder):
            return Path(cache_root) / "embedded" / self._folder.name
        return self._folder

    def resolve(self, cache_root: Path) -> tuple[str, str]:
        """(the folder for ``from_pretrained``, its label); FileNotFoundError saying what to do."""
        folder = self.folder(cache_root)
        if not _is_pipeline_folder(folder):
            if self._missing is not None:
                raise FileNotFoundError(self._missing)
            from embedded.recipe import save_pipeline  # a trimmed install: built from its seed

            save_pipeline(folder)
        return str(folder), self.label


# The trained model's weights are committed; rebuilding them means training, never done silently.
SCENES = EmbeddedModel("embedded", SCENES_MODEL_DIR, "embedded:scenes-flux2-klein",
                       missing=f"--model embedded: {SCENES_MODEL_DIR} is missing; rebuild it with `python -m embedded "
                               "train`, or pass --model embedded-random for the untrained tiny model")
RANDOM = EmbeddedModel("embedded-random", EMBEDDED_MODEL_DIR, "embedded:tiny-flux2-klein")


class ScenesReader:
    """The scene grammar's prompt reader: what a prompt says in the grammar, and what the page tells
    people the grammar understands (``embedded.grammar``, ``embedded.words``)."""

    name = "scenes"

    def read(self, prompt: str, editing: bool = False):
        """``embedded.grammar.Reading`` of ``prompt``: with ``editing`` (the request has reference
        images), an edit instruction where the prompt asks for one, else a caption."""
        from embedded import grammar

        return (grammar.read_edit(prompt) if editing else None) or grammar.read(prompt)

    def prompt_help(self, lang: str = "en") -> str:
        from embedded.words import describe

        return describe(lang)

    def edit_help(self, lang: str = "en") -> str:
        from embedded.words import describe_edits

        return describe_edits(lang)
