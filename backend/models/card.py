"""What a model folder says about itself to the page, in ``neuron_studio.json`` beside
``model_index.json``: its presets (``presets``, or ``preset_scale``: the ~1 MP buckets of
``backend.shapes.PRESETS`` scaled), the largest size it was trained at, the prompt grammar it reads,
the size the page starts at and the prompt length it was trained at (docs/embedded-model.md,
"Presets and prompts from the model folder", has each key). A folder without the file gets the ~1 MP
presets and no grammar; the file is bounded and checked like any input: a bad one is refused naming the key.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from backend.errors import ModelNotFound
from backend.models.plugins import prompt_reader
from backend.models.source import local_folder
from backend.shapes import MULTIPLE, NEURON_PRESETS, PRESETS, Shape, parse_shape

CARD_FILE = "neuron_studio.json"
MAX_CARD_BYTES = 16 * 1024
MAX_PRESETS = len(PRESETS)  # as many as a warm-up may cover (backend.serving.controls.MAX_SHAPES)
MAX_NAME = 16
GRAMMARS = ("scenes",)
SIDES = (64, 4096)
DEFAULT_PROMPT_TOKENS = 512  # Flux2KleinPipeline's default max_sequence_length
PROMPT_TOKENS = (16, DEFAULT_PROMPT_TOKENS)


@dataclasses.dataclass(frozen=True)
class ModelCard:
    presets: tuple[tuple[str, Shape], ...] = PRESETS
    trained_pixels: int | None = None
    prompt_grammar: str | None = None
    start: Shape | None = None
    prompt_tokens: int | None = None  # the pipeline's max_sequence_length (None: its default)
    source: str | None = None  # the card file it was read from (None: the defaults)

    @property
    def start_shape(self) -> Shape:
        return self.start or self.presets[0][1]

    def beyond_training(self, shape: Shape) -> bool:
        return self.trained_pixels is not None and shape.pixels > self.trained_pixels

    def preset_name(self, shape: Shape) -> str | None:
        return next((name for name, s in self.presets if s == shape), None)

    @property
    def reader(self):
        """The prompt reader the card names (``backend.models.plugins``), or None: any prompt."""
        return None if self.prompt_grammar is None else prompt_reader(self.prompt_grammar)

    def read_prompt(self, prompt: str, editing: bool = False):
        """The reader's reading of ``prompt`` (its ``caption``, what it understood), or None for a
        model without a grammar. With ``editing`` (the request has reference images), an edit
        instruction where the prompt asks for one."""
        return self.reader.read(prompt, editing) if self.reader is not None else None

    def edit_help(self, lang: str = "en") -> str | None:
        """One sentence of what an edit prompt may ask of the model (None: any prompt), in ``lang``."""
        return self.reader.edit_help(lang) if self.reader is not None else None

    def prompt_help(self, lang: str = "en") -> str | None:
        """One sentence of what the model's grammar understands (None: any prompt), in ``lang``."""
        return self.reader.prompt_help(lang) if self.reader is not None else None

    def to_json(self) -> dict:
        return {"presets": [[name, str(shape)] for name, shape in self.presets],
                "trained_pixels": self.trained_pixels, "prompt_grammar": self.prompt_grammar,
                "start": str(self.start_shape), "prompt_tokens": self.prompt_tokens,
                "from_card": self.source is not None}


def scaled_presets(side: int) -> tuple[tuple[str, Shape], ...]:
    """The ~1 MP presets' aspect ratios at about ``side`` x ``side`` pixels, sides multiples of 16."""
    def scale(value: int) -> int:
        return max(MULTIPLE, round(value * side / 1024 / MULTIPLE) * MULTIPLE)

    return tuple((name, Shape(scale(s.height), scale(s.width))) for name, s in PRESETS)


def _shape(value, where: str) -> Shape:
    if not isinstance(value, str) or len(value) > 16:
        raise ValueError(f"{where}: expected WIDTHxHEIGHT such as 256x256")
    shape = parse_shape(value)
    for side in (shape.width, shape.height):
        if side % MULTIPLE or not SIDES[0] <= side <= SIDES[1]:
            raise ValueError(f"{where}: {value} — sides must be multiples of {MULTIPLE} "
                             f"between {SIDES[0]} and {SIDES[1]}")
    return shape


def parse_card(data: object) -> ModelCard:
    """A card from its JSON; ValueError naming the key that is wrong."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    if unknown := set(data) - {"presets", "preset_scale", "trained_pixels", "prompt_grammar", "start",
                                 "prompt_tokens"}:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r}")
    presets = PRESETS
    if "presets" in data and "preset_scale" in data:
        raise ValueError("give presets or preset_scale, not both")
    if "presets" in data:
        given = data["presets"]
        if not isinstance(given, dict) or not 1 <= len(given) <= MAX_PRESETS:
            raise ValueError(f"presets: expected an object of 1 to {MAX_PRESETS} \"name\": \"WIDTHxHEIGHT\"")
        for name in given:
            if not name.strip() or len(name) > MAX_NAME or not name.isprintable():
                raise ValueError(f"presets: a name of 1 to {MAX_NAME} printable characters, got {name[:MAX_NAME]!r}…")
        presets = tuple((name, _shape(value, f"presets[{name!r}]")) for name, value in given.items())
    elif "preset_scale" in data:
        side = data["preset_scale"]
        if isinstance(side, bool) or not isinstance(side, int) or not SIDES[0] <= side <= SIDES[1]:
            raise ValueError(f"preset_scale: expected a whole number of pixels from {SIDES[0]} to {SIDES[1]}")
        presets = scaled_presets(side)
    trained = data.get("trained_pixels")
    if trained is not None and (isinstance(trained, bool) or not isinstance(trained, int)
                                or not SIDES[0] ** 2 <= trained <= SIDES[1] ** 2):
        raise ValueError(f"trained_pixels: expected a whole number from {SIDES[0] ** 2} to {SIDES[1] ** 2}")
    grammar = data.get("prompt_grammar")
    if grammar is not None and grammar not in GRAMMARS:
        raise ValueError(f"prompt_grammar: expected one of {', '.join(GRAMMARS)}")
    tokens = data.get("prompt_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                               or not PROMPT_TOKENS[0] <= tokens <= PROMPT_TOKENS[1]):
        raise ValueError(f"prompt_tokens: expected a whole number from {PROMPT_TOKENS[0]} to {PROMPT_TOKENS[1]}")
    return ModelCard(presets, trained, grammar, _shape(data["start"], "start") if "start" in data else None, tokens)


def read_card(folder: str | Path | None, neuron: bool = False) -> ModelCard:
    """The card in ``folder`` (a diffusers pipeline folder), or the defaults when it has none; a card
    that names no presets gets ``NEURON_PRESETS`` on Neuron (each takes the fast attention path)."""
    defaults = ModelCard(NEURON_PRESETS) if neuron else ModelCard()
    if folder is None or not (path := Path(folder) / CARD_FILE).is_file():
        return defaults
    try:
        if path.stat().st_size > MAX_CARD_BYTES:
            raise ValueError(f"larger than {MAX_CARD_BYTES // 1024} KiB")
        card = parse_card(data := json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise ModelNotFound(f"{path}: {exc}; fix or remove the file (it is optional)") from None
    if not {"presets", "preset_scale"} & set(data):
        card = dataclasses.replace(card, presets=defaults.presets)
    return dataclasses.replace(card, source=str(path))


def card_for(spec: str, cache_root: Path, neuron: bool = False) -> ModelCard:
    """The card of the model ``--model spec`` names, read without loading or downloading anything:
    the embedded folders and local folders have theirs; a hub id, the defaults."""
    return read_card(local_folder(spec, cache_root), neuron)
