"""What the app and the tensor-parallel worker group agree on: the wire format, the worker's
config, the environment names that carry them, and the one table of error kinds.

Wire format:

A message is a 4-byte big-endian header length, a UTF-8 JSON header (an object with a ``type``),
then ``header["payload_bytes"]`` raw bytes (only image pixels use a payload). Nothing is pickled
or evaluated: JSON and raw bytes only, with bounded sizes. The first message on every connection is
``{"type": "hello", "token": ...}``; a wrong or missing token is answered with an error and the
connection is closed before anything else is read. The hello is read with ``recv_hello``: a header
of at most ``HELLO_MAX_HEADER`` bytes and no payload, so a stranger on the socket makes rank 0
allocate at most that much (the limits of other messages apply only after the token is checked).
Requests carry no payload either; only the worker's ``result`` does, and only where the pixels
cannot go through the group's ``PixelBuffer``: a result with ``"pixels": "shared"`` carries none,
its ``width * height * 3`` bytes are at the start of the buffer.

Request types: ``wait_ready``, ``generate``, ``health``, ``cancel``, ``shutdown``.
Answers: ``progress`` (zero or more, for generate), then one ``ready``, ``result``, ``ok`` or
``error``. An error's ``kind`` is its class's code in ``backend.errors``, the one table of errors:
the worker turns an exception into a message with ``error_message`` and the app turns it back into
the same exception class, with the fields it carries, with ``error_from_message``.

The worker's whole configuration travels once, as one JSON object (``WorkerConfig``) in the
``CONFIG_VAR`` environment variable, with the app's ``Settings`` inside it whole; the per-launch
token travels in ``TOKEN_VAR`` and the worker removes it from its environment at once.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import mmap
import os
import select
import shutil
import socket
import stat
import struct
import time
from typing import Any, Callable

from backend import errors
from backend.errors import GenerationFailed, InvalidRequest, StudioError

CONFIG_VAR = "NEURON_STUDIO_TP_CONFIG"
TOKEN_VAR = "NEURON_STUDIO_TP_TOKEN"

MAX_HEADER = 1 << 20  # 1 MiB of JSON is far more than any request needs
MAX_PAYLOAD = 256 << 20  # a 2048x2048 RGB image is 12 MiB
HELLO_MAX_HEADER = 4096  # {"type": "hello", "token": <64 hex digits>} is under 100 bytes
_LEN = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message, or went away."""


class DeadlineExceeded(ProtocolError):
    """No complete message arrived before the deadline."""


class ConnectionLost(ProtocolError):
    """The peer hung up, or the connection failed, before a whole message arrived."""


def _recv_exact(sock: socket.socket, n: int, deadline: float | None,
                clock: Callable[[], float] = time.monotonic) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        if deadline is not None:
            left = deadline - clock()
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
            raise ConnectionLost(f"connection failed: {exc}") from None
        if not k:
            raise ConnectionLost("connection closed by the peer")
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


def recv_message(sock: socket.socket, deadline: float | None = None,
                 clock: Callable[[], float] = time.monotonic, *, max_header: int = MAX_HEADER,
                 max_payload: int = MAX_PAYLOAD) -> tuple[dict[str, Any], bytearray]:
    """Read one message; ``deadline`` is a ``clock()`` value (None waits forever). A header longer
    than ``max_header`` or a payload longer than ``max_payload`` is refused when announced, before
    anything more is read or allocated."""
    (size,) = _LEN.unpack(_recv_exact(sock, _LEN.size, deadline, clock))
    if size > max_header:
        raise ProtocolError(f"header of {size} bytes refused (limit {max_header})")
    try:
        header = json.loads(_recv_exact(sock, size, deadline, clock).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ProtocolError("header must be a JSON object with a 'type'")
    n = header.get("payload_bytes", 0)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= max_payload:
        raise ProtocolError(f"payload of {str(n)[:40]} bytes refused (limit {max_payload})")
    return header, _recv_exact(sock, n, deadline, clock) if n else bytearray()


def recv_hello(sock: socket.socket, deadline: float | None,
               clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Read the first message of a connection, from a peer not yet trusted: a header of at most
    ``HELLO_MAX_HEADER`` bytes with no payload (its type and token are ``token_ok``'s to check).
    Anything larger raises ProtocolError having read (and allocated) at most ``HELLO_MAX_HEADER``
    + 4 bytes."""
    header, _ = recv_message(sock, deadline, clock, max_header=HELLO_MAX_HEADER, max_payload=0)
    return header


def token_ok(expected: str, header: dict[str, Any]) -> bool:
    """Constant-time check of a hello message's token."""
    token = header.get("token")
    return (header.get("type") == "hello" and isinstance(token, str)
            and hmac.compare_digest(token.encode(), expected.encode()))


RESTART_EXIT = 75  # a rank that ended itself after a failed request: the group should be restarted
RUN_DIR_PREFIX = "neuron-studio-tp-"  # the group's private run dir: tempfile.mkdtemp(prefix=...)


def is_run_dir(path: str | None, require_contents: bool = True) -> bool:
    """True only for a group's run dir: a real directory (not a link) owned by this user, named
    ``RUN_DIR_PREFIX...``, holding (with ``require_contents``) a ``tp.sock`` or rank logs. Guards
    every removal of a path that came from a config or environment."""
    if not path:
        return False
    path = os.path.normpath(os.path.abspath(path))
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or not os.path.basename(path).startswith(RUN_DIR_PREFIX):
        return False
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return False
    if not require_contents:
        return True
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return "tp.sock" in names or any(n.startswith("rank") and n.endswith(".log") for n in names)


def remove_run_dir(path: str | None, require_contents: bool = True, attempts: int = 5) -> bool:
    """Remove a group's run dir (see ``is_run_dir``; anything else is left alone). Retries a few
    times: another rank may still be writing its heartbeat into it. True when it is gone."""
    if not is_run_dir(path, require_contents):
        return False
    path = os.path.normpath(os.path.abspath(path))
    for attempt in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return True
        time.sleep(0.05 * (attempt + 1))
    return False


class PixelBuffer:
    """The pixels of one result, shared between the app and rank 0 instead of sent on the socket:
    an anonymous memory file (``memfd``) the app makes for its group, mapped by both. Rank 0 opens
    it through the app's ``/proc/<pid>/fd/<n>``, which only a process of the same user may; there
    is no file anywhere to clean up, and the memory goes with the last process that holds it.

    The socket path stays the reference: where no memfd can be made (not Linux) or rank 0 cannot
    open it, each result carries its pixels as a payload, as before. One result at a time uses the
    buffer: rank 0 runs its jobs one by one and writes before it sends the result's header; the app
    copies the pixels out before its next request on the group (``WorkerGroup.run`` holds a lock)."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self._map = mmap.mmap(fd, size)
        self.view = memoryview(self._map)

    @classmethod
    def create(cls, size: int) -> "PixelBuffer | None":
        """The app's buffer of ``size`` bytes (None where memfd is not available)."""
        if not hasattr(os, "memfd_create") or not 0 < size <= MAX_PAYLOAD:
            return None
        fd = os.memfd_create("neuron-studio-pixels", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)  # sparse: only the pages a result writes become memory
            return cls(fd, size)
        except OSError:
            os.close(fd)
            return None

    @property
    def path(self) -> str:
        """What rank 0 opens (``WorkerConfig.pixels``)."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    @classmethod
    def open(cls, path: str, size: int) -> "PixelBuffer | None":
        """Rank 0's view of the app's buffer (None when it cannot be opened: results use the socket)."""
        if not path or not 0 < size <= MAX_PAYLOAD:
            return None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size < size:
                raise OSError("the pixel buffer is smaller than announced")
            return cls(fd, size)
        except (OSError, ValueError):
            os.close(fd)
            return None

    def write(self, pixels) -> bool:
        """Copy ``pixels`` (bytes-like, or a C-contiguous uint8 array) to the start of the buffer;
        False when they do not fit (send them on the socket instead)."""
        data = memoryview(pixels).cast("B")
        if data.nbytes > self.size:
            return False
        self.view[:data.nbytes] = data
        return True

    def close(self) -> None:
        try:
            self.view.release()
            self._map.close()
        except (BufferError, ValueError):
            pass  # an image still maps it: the memory goes when that is collected
        try:
            os.close(self.fd)
        except OSError:
            pass


@dataclasses.dataclass
class WorkerConfig:
    """Everything a rank needs, sent once by the app. ``settings`` is ``Settings.to_json()`` whole,
    with the device the app resolved (kind, dtype, compile backend) written into it."""

    settings: dict[str, Any]
    model_path: str
    cores: list[int]  # NeuronCore of each rank, by local rank (empty off Neuron)
    warm: list[str]  # shapes every rank compiles before READY
    socket: str = ""
    run_dir: str = ""
    parent_pid: int = 0
    role: str = "tp"  # tp: the transformer sharded over the ranks; replica: one rank, the whole pipeline
    threads: int = 0  # CPU threads per rank (0: torch's default)
    pixels: str = ""  # the app's PixelBuffer (its path for rank 0), "" when results use the socket
    pixels_bytes: int = 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "WorkerConfig":
        return cls(**json.loads(text))


def error_message(exc: BaseException) -> dict[str, Any]:
    """The ``error`` message for an exception: its code (``backend.errors``), its text, the fields it
    carries (the invalid field, the counters a failed run still reports, ``group_ending``)."""
    if not isinstance(exc, StudioError):
        return {"type": "error", "kind": GenerationFailed.code, "error": f"{type(exc).__name__}: {exc}"}
    text = exc.message if isinstance(exc, InvalidRequest) else str(exc)
    return {"type": "error", "kind": exc.code, "error": text, **exc.fields()}


def error_from_message(msg: dict[str, Any]) -> StudioError:
    """The exception an ``error`` message stands for, with its fields (unknown kinds are plain
    failures; fields a class does not carry are dropped)."""
    cls = errors.by_code(str(msg.get("kind") or GenerationFailed.code))
    text = str(msg.get("error") or msg.get("kind") or "failed")
    if issubclass(cls, InvalidRequest):
        return cls(str(msg.get("field") or "request"), text)
    return cls(text, **{name: msg[name] for name in cls.carries if name in msg})
