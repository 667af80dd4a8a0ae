"""PNG files that carry their generation parameters, written atomically, and read back safely.

Two text chunks: ``parameters`` in the A1111 infotext form other tools read::

    a red fox
    Steps: 4, Sampler: FlowMatchEuler, CFG scale: 1.0, Seed: 42, Size: 256x256, Model: ..., Mode: compiled, Device: cpu

and ``neuron_studio``, the whole GenerationResult as JSON. Reading parses text only: nothing from a
PNG is evaluated or unpickled, and unknown or malformed fields are ignored.

Reading is bounded, because the PNG comes from outside (an upload on the page):

- ``read_png_parameters`` refuses a file over ``MAX_PNG_BYTES`` or one that is not a regular file,
  never decodes pixels, and reads the text chunks itself (each at most ``MAX_CHUNK_BYTES``, and at
  most ``MAX_INFOTEXT + 1`` characters of a zTXt/iTXt decompressed). PIL's own text limits
  (``PngImagePlugin.MAX_TEXT_CHUNK``/``MAX_TEXT_MEMORY``, 1 MiB/64 MiB) are module globals that
  other threads share, so PIL is not used for reading at all.
- ``parse_infotext`` is linear in its input (str methods, no backtracking regex) and bounded.
"""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import re
import secrets
import stat
import struct
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from PIL import Image, PngImagePlugin

from backend.errors import StorageFull
from backend.request.records import GenerationResult

PARAMS_KEY = "parameters"
JSON_KEY = "neuron_studio"
MAX_INFOTEXT = 8 * 1024  # characters of infotext parsed at all; a longer one is ignored whole
MAX_PARAMS_LINE = 2 * 1024  # a longer last line is not a params line (it is part of the prompt)
MAX_VALUE = 200  # a longer "key: value" value is ignored
MAX_FIELDS = 64  # "key: value" pieces looked at on the params line (A1111 writes about 20)
MAX_PNG_BYTES = 20 * 1024 * 1024  # a larger file is refused before it is read
MAX_CHUNK_BYTES = 64 * 1024  # a larger text chunk is skipped without being read
MAX_CHUNKS = 256  # chunks allowed before the image data (a PNG from a tool has about 10)
NAME_RANDOM_BITS = 64  # the random end of an output's name (secrets.token_hex)
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)  # a write that fails so raises StorageFull
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
_DIGITS = frozenset("0123456789")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
_DECIMAL = re.compile(r"[0-9]{1,10}(?:\.[0-9]{1,10})?")  # anchored by fullmatch; cannot backtrack far
REFERENCE_LETTERS = "ABCDEFGHIJKLMNOP"  # infotext keys are letters and spaces: "Reference A", "Reference B", ...
_HEX = frozenset("0123456789abcdef")


def infotext(result: GenerationResult) -> str:
    fields = [("Steps", result.steps), ("Sampler", "FlowMatchEuler"), ("CFG scale", result.guidance),
              ("Seed", result.seed), ("Size", f"{result.width}x{result.height}"), ("Model", result.model),
              ("Mode", result.mode), ("Device", result.device)]
    if result.count > 1:
        fields.append(("Batch size", result.count))
    for letter, reference in zip(REFERENCE_LETTERS, result.references):
        fields.append((f"Reference {letter}", f"{reference['sha256']} {reference['source']} {reference['fitted']} "
                                              f"{reference['fit'].replace(' ', '-')}"))
    return result.prompt + "\n" + ", ".join(f"{k}: {v}" for k, v in fields)


def _reference(value: str, max_size: int = 8192) -> dict[str, str] | None:
    """"<sha256> <source WxH> <fitted WxH> <fit>" back into a record's reference; None if malformed."""
    parts = value.split()
    if len(parts) != 4 or len(parts[0]) != 64 or not _HEX.issuperset(parts[0]):
        return None
    for size in parts[1:3]:
        sides = _size(size)
        if sides is None or not all(0 < side <= max_size for side in sides):
            return None
    if parts[3] not in ("crop", "pad", "as-is"):
        return None
    return {"sha256": parts[0], "source": parts[1], "fitted": parts[2], "fit": parts[3].replace("-", " ")}


def save_png(image: Image.Image, result: GenerationResult, path: str | Path) -> Path:
    """Write ``image`` with its metadata to ``path`` atomically (a temp file, then rename). A full
    disk or quota raises ``StorageFull`` (the temp file removed: nothing partial is left)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    info = PngImagePlugin.PngInfo()
    info.add_text(PARAMS_KEY, infotext(result))
    info.add_text(JSON_KEY, json.dumps(result.to_json(), ensure_ascii=False))
    fd, tmp = tempfile.mkstemp(prefix=".partial-", suffix=".png", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            image.save(handle, format="PNG", pnginfo=info)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            raise StorageFull(f"the output folder is full ({exc.strerror}): the image was not saved; "
                              "free some space or lower --keep-outputs") from None
        raise
    return path


def unique_output_path(folder: str | Path, result: GenerationResult) -> Path:
    """A new file name in ``folder`` that says when, what size, which mode and seed, and ends in
    ``NAME_RANDOM_BITS`` random bits: no one finds another caller's image from its parameters."""
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{result.width}x{result.height}-{result.mode}-{result.seed}"
    while True:
        candidate = Path(folder) / f"{base}-{secrets.token_hex(NAME_RANDOM_BITS // 8)}.png"
        if not candidate.exists():
            return candidate


def is_own_png(path: str | Path) -> bool:
    """Whether ``path`` is a regular PNG file (not a link) that carries this app's ``neuron_studio``
    chunk before its image data: read bounded as ``read_png_parameters`` reads, no pixels decoded."""
    try:
        return _read_text(path, JSON_KEY, MAX_CHUNK_BYTES, getattr(os, "O_NOFOLLOW", 0)) is not None
    except ValueError:
        return False


def _ascii_int(value: str, max_digits: int = 20) -> int | None:
    """A whole number written in ASCII digits only (no sign, no '²', no Arabic-Indic digits)."""
    if not value or len(value) > max_digits or not _DIGITS.issuperset(value):
        return None
    return int(value)


def _size(text: str) -> tuple[int, int] | None:
    """"WIDTHxHEIGHT" (each side at most 5 ASCII digits) as (width, height); None if malformed."""
    width, x, height = text.partition("x")
    sides = _ascii_int(width.strip(), 5), _ascii_int(height.strip(), 5)
    return sides if x and None not in sides else None


def _params(line: str) -> dict[str, str]:
    """'Key: value, Key: value' as {key (lower case): value}; malformed pieces are skipped. Linear:
    one split on ',' (at most ``MAX_FIELDS`` + 1 pieces; whatever follows is the last one)
    and one partition per piece."""
    fields: dict[str, str] = {}
    for piece in line.split(",", MAX_FIELDS):
        key, colon, value = piece.partition(":")
        key, value = key.strip(), value.strip()
        if not colon or not key or len(key) > 40 or not _KEY_CHARS.issuperset(key) or len(value) > MAX_VALUE:
            continue
        fields.setdefault(key.lower(), value)  # the first occurrence wins
    return fields


def parse_infotext(text: str, *, max_prompt: int = 2000, max_steps: int = 50, max_guidance: float = 20.0,
                   max_seed: int = 2**63 - 1, min_size: int = 64, max_size: int = 2048) -> dict[str, Any]:
    """A1111 infotext as {prompt, steps, guidance, seed, width, height, mode, model, device, count,
    references}, linear in ``text`` and bounded (``MAX_INFOTEXT``, ``MAX_PARAMS_LINE``, ``MAX_VALUE``).
    Each value is held to the app's bounds (the keyword arguments, defaults as in ``Settings``) or left
    out, so a control is never filled with something validation would refuse: whole numbers in ASCII
    digits, guidance ("CFG scale") a plain decimal (no inf, nan or exponent), a size's two sides
    multiples of 16 (both or neither), the prompt cut to ``max_prompt`` characters."""
    if not isinstance(text, str) or len(text) > MAX_INFOTEXT:
        return {}
    text = text.strip()
    head, newline, last = text.rpartition("\n")
    fields = _params(last) if len(last) <= MAX_PARAMS_LINE else {}
    if fields.get("steps", "")[:1].isdigit():  # a params line has "Steps: N" (any digit: a bad one is dropped below)
        prompt = head if newline else ""
    else:
        prompt, fields = text, {}
    prompt = prompt.strip()[:max_prompt].strip()
    out: dict[str, Any] = {"prompt": prompt} if prompt else {}
    if (steps := _ascii_int(fields.get("steps", ""))) is not None and 1 <= steps <= max_steps:
        out["steps"] = steps
    guidance = fields.get("cfg scale", "")
    if _DECIMAL.fullmatch(guidance):
        value = float(guidance)
        if math.isfinite(value) and 0.0 <= value <= max_guidance:
            out["guidance"] = value
    if (seed := _ascii_int(fields.get("seed", ""))) is not None and 0 <= seed <= max_seed:
        out["seed"] = seed
    size = _size(fields.get("size", "").lower())
    if size and all(min_size <= v <= max_size and v % 16 == 0 for v in size):
        out["width"], out["height"] = size
    for key in ("mode", "model", "device"):
        if fields.get(key):
            out[key] = fields[key]
    if (count := _ascii_int(fields.get("batch size", ""), 2)) is not None and 1 <= count <= 4:
        out["count"] = count
    found = (_reference(fields.get(f"reference {letter.lower()}", "")) for letter in REFERENCE_LETTERS)
    if references := list(itertools.takewhile(lambda r: r is not None, found)):  # A, B, ... to the first not read
        out["references"] = references
    return out


def _decode_text_chunk(kind: bytes, data: bytes, max_chars: int) -> tuple[str, str] | None:
    """(keyword, text) of a tEXt/zTXt/iTXt chunk; None when it is malformed or its text is longer
    than ``max_chars`` (at most ``max_chars + 1`` characters are ever decompressed)."""
    keyword, sep, rest = data.partition(b"\0")
    if not sep or not 1 <= len(keyword) <= 79:
        return None
    compressed, encoding = False, "latin-1"
    if kind == b"zTXt":
        if rest[:1] != b"\0":  # compression method 0 (zlib) is the only one defined
            return None
        rest, compressed = rest[1:], True
    elif kind == b"iTXt":
        if len(rest) < 2 or rest[0] not in (0, 1) or rest[1] != 0:
            return None
        compressed, rest, encoding = rest[0] == 1, rest[2:], "utf-8"
        _language, sep1, rest = rest.partition(b"\0")
        _translated, sep2, rest = rest.partition(b"\0")
        if not (sep1 and sep2):
            return None
    limit = max_chars * 4 + 4 if encoding == "utf-8" else max_chars + 1  # bytes enough for max_chars + 1
    if compressed:
        try:
            rest = zlib.decompressobj().decompress(rest, limit)
        except zlib.error:
            return None
    if len(rest) > limit:
        return None
    text = rest.decode(encoding, errors="replace")
    return (keyword.decode("latin-1"), text) if len(text) <= max_chars else None


def _png_text(handle, size: int, key: str, max_chars: int) -> str | None:
    """The text of the first text chunk named ``key`` before the image data, as PIL's
    ``Image.open`` (and other tools reading ``info``) sees it. Reads chunk headers and that text
    chunk only: pixel data is never read or decompressed. Raises ValueError for a file that is not
    a PNG, is truncated before its image data, or has more than ``MAX_CHUNKS`` chunks before it."""
    if handle.read(8) != _PNG_SIGNATURE:
        raise ValueError("not a PNG file (its first bytes are not the PNG signature)")
    wanted = key.encode("latin-1") + b"\0"
    pos = 8
    for n in range(MAX_CHUNKS):
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError("truncated PNG: it ends before its image data")
        length, kind = struct.unpack(">I4s", head)
        if n == 0 and kind != b"IHDR":
            raise ValueError("malformed PNG: the first chunk is not IHDR")
        if length > size - pos - 12:
            raise ValueError(f"truncated PNG: a {kind.decode('latin-1')!r} chunk of {length} bytes "
                             "runs past the end of the file")
        pos += 12 + length
        if kind in (b"IDAT", b"IEND"):
            return None  # text after the image data is not read (PIL's Image.open does not either)
        if kind in _TEXT_CHUNKS and length <= MAX_CHUNK_BYTES:
            data = handle.read(length)
            crc = handle.read(4)
            if not data.startswith(wanted):
                continue
            if len(crc) < 4 or zlib.crc32(kind + data) != struct.unpack(">I", crc)[0]:
                continue  # a damaged chunk is not trusted
            decoded = _decode_text_chunk(kind, data, max_chars)
            if decoded is not None and decoded[0] == key:
                return decoded[1]
        else:
            handle.seek(length + 4, os.SEEK_CUR)
    raise ValueError(f"malformed PNG: more than {MAX_CHUNKS} chunks before the image data")


def _read_text(path: str | Path, key: str, max_chars: int, flags: int) -> str | None:
    """``_png_text`` of the file at ``path``; ValueError names the problem with a file that is not a
    regular file, is larger than ``MAX_PNG_BYTES``, is not a PNG or is truncated."""
    try:  # non-blocking: a FIFO named x.png does not hang the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | flags)
    except OSError as exc:
        raise ValueError(f"cannot open the PNG: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ValueError("not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > MAX_PNG_BYTES:
            raise ValueError(f"the file is {info.st_size / 1e6:.1f} MB; PNGs over {MAX_PNG_BYTES / 1e6:.0f} MB "
                             "are not read")
        try:
            return _png_text(handle, info.st_size, key, max_chars)
        except OSError as exc:
            raise ValueError(f"cannot read the PNG: {exc.strerror or exc}") from None


def read_png_parameters(path: str | Path, **bounds: Any) -> dict[str, Any]:
    """Generation parameters stored in a PNG ({} when it carries none, or only an oversized or broken
    ``parameters`` chunk; ``bounds`` go to ``parse_infotext``), no pixels decoded; ValueError as ``_read_text``."""
    text = _read_text(path, PARAMS_KEY, MAX_INFOTEXT, getattr(os, "O_BINARY", 0))
    return parse_infotext(text, **bounds) if text is not None else {}
