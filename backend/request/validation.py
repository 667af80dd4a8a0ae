"""Request validation: every field checked up front, each error naming the field and the fix (the
manager's, and the worker's, which trusts nothing it is sent)."""

from __future__ import annotations

import math
import re
import secrets
from typing import Any, Callable, Iterable

from backend.errors import InvalidRequest
from backend.request.records import GenerationRequest
from backend.request.references import check_count
from backend.settings import Settings
from backend.shapes import Shape, show_value, validate_shape, whole_number, within_tokens

MAX_SEED = 2**63 - 1
RANDOM_SEED_BOUND = 2**53  # random seeds stay exact as JavaScript numbers in the browser
_ALLOWED_CONTROL = {"\n", "\t", "\r"}
# Unicode's bidirectional formatting characters (UAX #9: embeddings, overrides, isolates, marks):
# a prompt holding one can show other words than it holds ("Trojan Source"), wherever it is shown.
_BIDI_CONTROLS = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
_GUIDANCE_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")


def _number(field: str, value: Any) -> float:
    """A float from a number or plain ASCII decimal text ('1', '3.5', '2e0'), or InvalidRequest."""
    if isinstance(value, bool):
        raise InvalidRequest(field, f"must be a number, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 64 or not _GUIDANCE_TEXT.fullmatch(text):
            raise InvalidRequest(field, f"must be a number, got {show_value(value)}")
        value = text
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidRequest(field, f"must be a number, got {show_value(value)}") from None


def work(shape: Shape, steps: int) -> float:
    """Megapixel-steps (references and a batch's images count too)."""
    return shape.work_pixels * steps / 1e6


def check_sequence(shape: Shape, budget: int, min_size: int = 16) -> None:
    """The image tokens a request asks against the model's budget; the field named is the one at fault:
    the size when the output alone is over, else the references."""
    if shape.tokens <= budget:
        return
    output = Shape(shape.height, shape.width)
    if output.tokens > budget:
        fits = within_tokens(output, budget, min_size)
        raise InvalidRequest("size", f"{output} is {output.tokens} image tokens; this model takes at most {budget} "
                                     "per request (--max-sequence-tokens)"
                                     + (f" — the largest size of that shape within it is {fits}" if fits else ""),
                             (("tokens", {"size": str(output), "tokens": output.tokens, "budget": budget}),)
                             + ((("largest", {"size": str(fits)}),) if fits else ()))
    raise InvalidRequest("images", f"{shape} is {shape.tokens} image tokens (the output's and the references'); "
                                   f"this model takes at most {budget} per request (--max-sequence-tokens) — fewer or "
                                   "smaller references, or a smaller size")


def check_signature(s: Settings, height: Any, width: Any, steps: Any = None, count: Any = None,
                    references: tuple = (), budget: int | None = None) -> tuple[Shape, int]:
    """(signature, steps) checked: size, aspect, steps, batch, references, work; with ``budget``, the
    image tokens too (``check_sequence``)."""
    shape = validate_shape(height, width, s.min_size, s.max_size, budget)
    long_side, short_side = max(shape.height, shape.width), min(shape.height, shape.width)
    if long_side > s.max_aspect * short_side:
        fitted = int(short_side * s.max_aspect) // 16 * 16
        nearest = (f"{fitted}x{shape.height}" if shape.width > shape.height else f"{shape.width}x{fitted}")
        raise InvalidRequest("size", f"aspect ratio {long_side / short_side:.2f}:1 is beyond {s.max_aspect:g}:1; "
                                     f"nearest valid size is {nearest}",
                             (("aspect", {"ratio": f"{long_side / short_side:.2f}", "limit": f"{s.max_aspect:g}"}),
                              ("nearest", {"size": nearest})))
    steps = s.steps if steps is None else whole_number("steps", steps)
    if not 1 <= steps <= s.max_steps:
        raise InvalidRequest("steps", f"must be between 1 and {s.max_steps}, got {show_value(steps)}",
                             (("between", {"low": 1, "high": s.max_steps, "got": show_value(steps)}),))
    count, references = check_count(count), tuple(references)
    if len(references) > s.max_references:
        raise InvalidRequest("images", f"{len(references)} reference images; at most {s.max_references} per request")
    shape = shape.with_inputs(count, (r.size for r in references))
    if s.max_work and work(shape, steps) > s.max_work:
        raise InvalidRequest("work", f"{shape} at {steps} steps is {work(shape, steps):.1f} megapixel-steps; the "
                                     f"limit is {s.max_work:g} — fewer steps or a smaller size")
    if budget is not None:
        check_sequence(shape, budget, s.min_size)
    return shape, steps


def validate_request(s: Settings, modes: Iterable[str], prompt: Any, height: Any, width: Any, steps: Any = None,
                     guidance: Any = None, seed: Any = None, mode: Any = None,
                     count_tokens: Callable[[str], int] | None = None, count: Any = None,
                     references: tuple = (), budget: int | None = None) -> GenerationRequest:
    """Raw inputs to a GenerationRequest, or InvalidRequest naming the field. Without
    ``count_tokens`` (the tokenizer with its chat template) only the character limit applies."""
    modes = tuple(modes)
    if not isinstance(prompt, str):
        raise InvalidRequest("prompt", f"must be text, got {type(prompt).__name__}")
    text = prompt.strip()
    if not text:
        raise InvalidRequest("prompt", "is empty; describe the image you want", (("empty_prompt", {}),))
    if len(text) > s.max_prompt_chars:
        raise InvalidRequest("prompt", f"is {len(text)} characters; the limit is {s.max_prompt_chars}",
                             (("long_prompt", {"chars": len(text), "limit": s.max_prompt_chars}),))
    for pos, ch in enumerate(text):
        if (ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0) and ch not in _ALLOWED_CONTROL:
            raise InvalidRequest("prompt", f"contains control character U+{ord(ch):04X} at position {pos}")
        if 0xD800 <= ord(ch) <= 0xDFFF:  # not text: it cannot be encoded (tokenizer, PNG, JSON)
            raise InvalidRequest("prompt", f"contains an unpaired surrogate U+{ord(ch):04X} at position {pos}")
        if ord(ch) in _BIDI_CONTROLS:  # they reorder how the prompt reads on a page, a PNG viewer, a log
            raise InvalidRequest("prompt", f"contains the bidirectional control character U+{ord(ch):04X} at "
                                           f"position {pos}")
    tokens = count_tokens(text) if count_tokens is not None else None
    if tokens is not None and tokens > s.max_prompt_tokens:
        raise InvalidRequest("prompt", f"is {tokens} tokens with the chat template; the text encoder reads "
                                       f"{s.max_prompt_tokens}, so the end would be cut off — shorten it")
    shape, steps = check_signature(s, height, width, steps, count, references, budget)

    guidance = _number("guidance", s.guidance if guidance is None else guidance)
    if not math.isfinite(guidance) or not 0.0 <= guidance <= s.max_guidance:
        raise InvalidRequest("guidance", f"must be between 0 and {s.max_guidance}, got {guidance!r}",
                             (("between", {"low": 0, "high": s.max_guidance, "got": repr(guidance)}),))

    if seed is None or seed == "" or (isinstance(seed, (int, float)) and not isinstance(seed, bool) and seed == -1):
        seed = secrets.randbelow(RANDOM_SEED_BOUND)
    else:
        seed = whole_number("seed", seed)
        if not 0 <= seed <= MAX_SEED:
            raise InvalidRequest("seed", "must be between 0 and 2^63-1 (or -1 for random), "
                                         f"got {show_value(seed)}")

    mode = s.mode if mode in (None, "") else mode
    if mode not in modes:
        raise InvalidRequest("mode", f"must be one of {', '.join(modes)}, got {show_value(mode)}")
    return GenerationRequest(text, shape.height, shape.width, steps, guidance, seed, mode, count=shape.count,
                             references=tuple(references), tokens=tokens)
