"""A bundle's tar headers, bounded before Python's tar reader sees them.

``tarfile`` reads a GNU long-name (``L``, ``K``) or a PAX (``x``, ``g``) header whole, whatever size
it announces, before anything of the app can look at the member it describes: a 2 MB file that
announces a huge one takes gigabytes of memory. So the container is walked here first, one
512-byte header at a time, reading no member's data (each is skipped by its announced size):

- a bundle is a plain tar, as ``bundles.export`` writes it (a compressed one is refused: its
  headers cannot be reached without inflating what comes before them);
- a long-name or PAX header may announce at most ``MAX_META_BYTES``;
- no sparse member (GNU ``S``; a PAX sparse map needs a PAX header, whose size is bounded, and
  the importer refuses ``issparse()`` members): a few kilobytes must not expand to gigabytes;
- the members together announce at most ``max_total`` bytes.

The header layout is POSIX ustar's (size 124-136 in octal or GNU base-256, type 156, magic 257).
"""

from __future__ import annotations

from pathlib import Path

BLOCK = 512
MAX_META_BYTES = 64 << 10  # a path of a few hundred characters, or a PAX record or two, is far less
META_TYPES = {b"L": "GNU long name", b"K": "GNU long link", b"x": "PAX", b"g": "PAX global"}
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}


class HeaderRefused(ValueError):
    """The container is not a tar the importer will hand to ``tarfile`` (says why)."""


def _size(header: bytes) -> int:
    field = header[124:136]
    if field[0] & 0x80:  # GNU base-256: a big-endian number in the remaining bytes
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip() or b"0"
    try:
        return int(text, 8)
    except ValueError:
        raise HeaderRefused(f"a header's size field is not a number ({text[:12]!r})") from None


def check(path: str | Path, max_total: int) -> int:
    """Walk the headers of the tar at ``path``; returns how many members it has. HeaderRefused
    names the first thing that is over its bound or not a plain tar."""
    members, total = 0, 0
    with open(path, "rb") as handle:
        start = handle.read(6)
        for magic, kind in _COMPRESSED.items():
            if start.startswith(magic):
                raise HeaderRefused(f"it is {kind}-compressed; a bundle is the plain tar `cache export` writes")
        handle.seek(0)
        while True:
            header = handle.read(BLOCK)
            if len(header) < BLOCK:
                raise HeaderRefused("it ends inside a header (not a whole tar)")
            if header == bytes(BLOCK):
                return members  # the end-of-archive marker
            if header[257:262] != b"ustar":
                raise HeaderRefused("a header is not a ustar header")
            kind, size = header[156:157], _size(header)
            if kind in META_TYPES and size > MAX_META_BYTES:
                raise HeaderRefused(f"a {META_TYPES[kind]} header announces {size} bytes "
                                    f"(at most {MAX_META_BYTES} are read)")
            if kind == b"S":
                raise HeaderRefused("it holds a sparse member (a bundle's files are whole)")
            if kind not in META_TYPES:
                members += 1
                total += size
                if total > max_total:
                    raise HeaderRefused(f"its members announce over {max_total} bytes")
            handle.seek((size + BLOCK - 1) // BLOCK * BLOCK, 1)
