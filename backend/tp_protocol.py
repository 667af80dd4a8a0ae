"""The wire format between the app and the tensor-parallel worker group's rank 0.

A message is a 4-byte big-endian header length, a UTF-8 JSON header (an object with a ``type``),
then ``header["payload_bytes"]`` raw bytes (only image pixels use a payload). Nothing is pickled
or evaluated: JSON and raw bytes only, with bounded sizes. The first message on every connection is
``{"type": "hello", "token": ...}``; a wrong or missing token is answered with an error and the
connection is closed before anything else is read.

Request types: ``generate``, ``warmup``, ``status``, ``health``, ``cancel``, ``shutdown``.
Answers: ``progress`` (zero or more, for generate/warmup), then one ``result``, ``ok`` or ``error``
(``kind``: unauthorized | invalid | failed | compile_failed | cancelled | locked | busy).
"""

from __future__ import annotations

import hmac
import json
import select
import socket
import struct
import time
from typing import Any

MAX_HEADER = 1 << 20  # 1 MiB of JSON is far more than any request needs
MAX_PAYLOAD = 256 << 20  # a 2048x2048 RGB image is 12 MiB
_LEN = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message, or went away."""


class DeadlineExceeded(ProtocolError):
    """No complete message arrived before the deadline."""


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(f"no answer within the deadline ({got}/{n} bytes read)")
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            k = sock.recv_into(view[got:], n - got)
        except socket.timeout:
            raise DeadlineExceeded(f"no answer within the deadline ({got}/{n} bytes read)") from None
        except OSError as exc:
            raise ProtocolError(f"connection failed: {exc}") from None
        if not k:
            raise ProtocolError("connection closed by the peer")
        got += k
    return buf


def wait_readable(sock: socket.socket, timeout: float) -> bool:
    """True when a message (or the peer's hang-up) is waiting; lets callers poll between messages
    without ever abandoning one half read."""
    readable, _, _ = select.select([sock], [], [], max(0.0, timeout))
    return bool(readable)


def send_message(sock: socket.socket, header: dict[str, Any], payload: bytes | memoryview = b"") -> None:
    header = dict(header, payload_bytes=len(payload))
    data = json.dumps(header, ensure_ascii=False, allow_nan=False).encode("utf-8")
    if len(data) > MAX_HEADER:
        raise ProtocolError(f"header too large ({len(data)} bytes)")
    sock.sendall(_LEN.pack(len(data)) + data)
    if payload:
        sock.sendall(payload)  # pixels go out as they are: no copy into one big buffer


def recv_message(sock: socket.socket, deadline: float | None = None) -> tuple[dict[str, Any], bytearray]:
    """Read one message; ``deadline`` is a time.monotonic() value (None waits forever)."""
    (size,) = _LEN.unpack(_recv_exact(sock, _LEN.size, deadline))
    if size > MAX_HEADER:
        raise ProtocolError(f"header of {size} bytes refused (limit {MAX_HEADER})")
    try:
        header = json.loads(_recv_exact(sock, size, deadline).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ProtocolError("header must be a JSON object with a 'type'")
    n = header.get("payload_bytes", 0)
    if not isinstance(n, int) or not 0 <= n <= MAX_PAYLOAD:
        raise ProtocolError(f"payload of {n!r} bytes refused (limit {MAX_PAYLOAD})")
    return header, _recv_exact(sock, n, deadline) if n else bytearray()


def token_ok(expected: str, header: dict[str, Any]) -> bool:
    """Constant-time check of a hello message's token."""
    token = header.get("token")
    return (header.get("type") == "hello" and isinstance(token, str)
            and hmac.compare_digest(token.encode(), expected.encode()))
