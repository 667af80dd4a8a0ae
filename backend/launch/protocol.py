"""What the app and a worker group agree on: the wire, the worker's config, the run dir, the errors.

The wire is ``multiprocessing.connection`` over the group's Unix socket (0600, in its private run
dir). Each connection begins with a mutual HMAC challenge over the per-launch key: a peer without it
is refused after one frame of at most 256 bytes. Then each message is one frame of UTF-8 JSON, an
object with a ``type``; a frame announced longer than ``MAX_MESSAGE`` is refused unread, one begun
must arrive whole within the read timeout, and nothing is pickled. Requests: ``wait_ready``,
``generate``, ``health``, ``cancel``, ``shutdown``; answers: ``progress``, then one ``ready``,
``result``, ``ok`` or ``error`` (its ``kind`` a code of ``backend.errors``, with the fields it
carries). A result's pixels are in the app's ``PixelBuffer``. The worker's configuration travels
once as JSON in ``CONFIG_VAR``; the key in ``TOKEN_VAR``, which the worker removes at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import stat
import struct
import sys
import tempfile
import time
from multiprocessing import connection as mpc
from multiprocessing import shared_memory
from typing import Any

from backend import errors
from backend.errors import GenerationFailed, InvalidRequest, StudioError

CONFIG_VAR = "NEURON_STUDIO_TP_CONFIG"
TOKEN_VAR = "NEURON_STUDIO_TP_TOKEN"

MAX_MESSAGE = 1 << 20  # 1 MiB of JSON is far more than any request or answer needs
MAX_PIXELS = 256 << 20  # a 2048x2048 RGB image is 12 MiB
Connection = mpc.Connection


class ProtocolError(Exception):
    """Not a well-formed message, or the peer went away."""


class ConnectionLost(ProtocolError):
    """The peer hung up, or the connection failed or stalled, before a whole message arrived."""


class Refused(ProtocolError):
    """The peer does not hold the group's key (or does not speak the handshake)."""


def _bound_io(sock: socket.socket, seconds: float) -> None:
    """Every read and write on ``sock`` fails after ``seconds`` without progress (SO_RCVTIMEO and
    SO_SNDTIMEO: a frame begun and not finished, or a peer that stopped reading)."""
    sock.settimeout(None)  # blocking, so that the kernel's timeouts are the ones that apply
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)


def _handshake(conn: Connection, key: bytes, first: bool) -> Connection:
    """``conn`` once the challenge both ways succeeded; else closed, and Refused."""
    steps = (mpc.deliver_challenge, mpc.answer_challenge) if first else (mpc.answer_challenge, mpc.deliver_challenge)
    try:
        for step in steps:
            step(conn, key)
        return conn
    except mpc.AuthenticationError as exc:
        conn.close()
        raise Refused(str(exc)) from None
    except (EOFError, OSError, AssertionError) as exc:  # a stranger's frame, a hang-up, a timeout
        conn.close()
        raise Refused(f"no handshake: {exc or type(exc).__name__}") from None


def connect(path: str, key: bytes, timeout: float) -> Connection:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        _bound_io(sock, timeout)
    except OSError as exc:
        sock.close()
        raise ConnectionLost(f"cannot connect: {exc}") from None
    return _handshake(Connection(sock.detach()), key, first=False)


def accept(sock: socket.socket, key: bytes, timeout: float) -> Connection:
    """Rank 0's side: the handshake, and afterwards each frame once begun, within ``timeout`` seconds."""
    _bound_io(sock, timeout)
    return _handshake(Connection(sock.detach()), key, first=True)


def send(conn: Connection, message: dict[str, Any]) -> None:
    data = json.dumps(message, ensure_ascii=False, allow_nan=False).encode("utf-8")
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"message too large ({len(data)} bytes)")
    try:
        conn.send_bytes(data)
    except (OSError, ValueError) as exc:
        raise ConnectionLost(f"cannot send: {exc}") from None


def receive(conn: Connection, timeout: float | None) -> dict[str, Any] | None:
    """The next message, or None when none began within ``timeout`` seconds (None: wait for it)."""
    try:
        if not conn.poll(timeout):
            return None
        data = conn.recv_bytes(MAX_MESSAGE)
    except EOFError:
        raise ConnectionLost("connection closed by the peer") from None
    except OSError as exc:
        if "bad message length" in str(exc):  # multiprocessing.connection's words for "too long"
            raise ProtocolError(f"a frame over {MAX_MESSAGE} bytes refused") from None
        raise ConnectionLost(f"connection failed: {exc}") from None
    try:
        message = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError(f"message is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("a message must be a JSON object with a 'type'")
    return message


RESTART_EXIT = 75  # a rank that ended itself after a failed request: the group should be restarted


class RankEnding(Exception):
    """In the torchelastic error file of a rank that left after a failed request: restart the group."""


RUN_DIR_PREFIX = "neuron-studio-tp-"  # the group's private run dir: tempfile.mkdtemp(prefix=...)
# The bytes a socket's path may hold before its NUL: unix(7)'s 108-byte sun_path on Linux, 104 on
# the BSDs and macOS. A longer path fails rank 0's bind ("AF_UNIX path too long").
SUN_PATH_MAX = 107 if sys.platform == "linux" else 103
# The longest path a run dir holds under its root: rank 0 binds "tp.sock.new" (mkdtemp adds 8 letters).
_SOCKET_TAIL = os.path.join("", RUN_DIR_PREFIX + "x" * 8, "tp.sock.new")


def run_root(preferred: str | None = None) -> str:
    """The folder a group's run dir is made in: ``preferred``, else the temp folder (``TMPDIR``);
    when rank 0's socket path would not fit there (a long ``TMPDIR``), the first short system temp
    folder where it does."""
    def socket_bytes(root: str) -> int:
        return len(os.fsencode(os.path.join(root, _SOCKET_TAIL)))

    first = os.path.abspath(preferred or tempfile.gettempdir())
    for root in (first, "/tmp", "/var/tmp", "/usr/tmp"):
        fits = socket_bytes(root) <= SUN_PATH_MAX
        if fits and os.path.isdir(root) and os.access(root, os.W_OK | os.X_OK):
            return root
    raise errors.BackendNotReady(
        f"the tensor-parallel group's socket would be {socket_bytes(first)} bytes long under {first}, "
        f"and a socket's path holds at most {SUN_PATH_MAX}: set TMPDIR to a shorter folder")


def remove_run_dir(path: str | None, require_contents: bool = True, attempts: int = 5) -> bool:
    """Remove a group's run dir and nothing else (the guard on every removal of a path from a config or
    environment): a real directory owned by this user, named ``RUN_DIR_PREFIX...``, holding
    (``require_contents``) a ``tp.sock`` or rank logs. Retried: a rank may still write its heartbeat."""
    if not path:
        return False
    path = os.path.normpath(os.path.abspath(path))
    try:
        info = os.lstat(path)
        names = os.listdir(path) if require_contents and stat.S_ISDIR(info.st_mode) else []
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or not os.path.basename(path).startswith(RUN_DIR_PREFIX) \
            or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
        return False
    logs = any(n.startswith("rank") and n.endswith(".log") for n in names)
    if require_contents and "tp.sock" not in names and not logs:
        return False
    for attempt in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return True
        time.sleep(0.05 * (attempt + 1))
    return False


class PixelBuffer:
    """One job's pixels in shared memory: the app makes it (0600) and unlinks it when the group closes
    (its resource tracker does, should the app die first); rank 0 attaches by name."""

    def __init__(self, memory: shared_memory.SharedMemory, owner: bool):
        self.memory, self.owner = memory, owner
        self.name, self.size = memory.name, memory.size

    @classmethod
    def create(cls, size: int) -> "PixelBuffer":
        if not 0 < size <= MAX_PIXELS:
            raise ValueError(f"a pixel buffer of {size} bytes (limit {MAX_PIXELS})")
        return cls(shared_memory.SharedMemory(create=True, size=size), owner=True)

    @classmethod
    def attach(cls, name: str, size: int) -> "PixelBuffer":
        """OSError when it is missing or smaller than ``size``."""
        if sys.version_info >= (3, 13):
            memory = shared_memory.SharedMemory(name=name, track=False)
        else:  # attaching registers it with this process's resource tracker, which would unlink
            memory = shared_memory.SharedMemory(name=name)  # the app's buffer when this rank exits
            from multiprocessing import resource_tracker

            resource_tracker.unregister(memory._name, "shared_memory")  # noqa: SLF001 - see above
        if memory.size < size:
            memory.close()
            raise OSError(f"the pixel buffer {name} is smaller than {size} bytes")
        return cls(memory, owner=False)

    @property
    def view(self) -> memoryview:
        return self.memory.buf

    def write(self, pixels) -> int:
        data = memoryview(pixels).cast("B")
        if data.nbytes > self.size:
            raise ValueError(f"{data.nbytes} bytes of pixels do not fit the group's buffer of {self.size}")
        self.memory.buf[:data.nbytes] = data
        return data.nbytes

    def close(self) -> None:
        with contextlib.suppress(BufferError):  # a view is still held: the mapping goes when it is collected
            self.memory.close()
        if self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.memory.unlink()


@dataclasses.dataclass
class WorkerConfig:
    """Everything a rank needs: ``settings`` is ``Settings.to_json()`` with the device the app resolved."""

    settings: dict[str, Any]
    model_path: str
    cores: list[int]  # NeuronCore of each rank, by local rank (empty off Neuron)
    warm: list[str]  # shapes every rank compiles before READY
    socket: str = ""
    run_dir: str = ""
    parent_pid: int = 0
    role: str = "tp"  # tp: the transformer sharded over the ranks; replica: one rank, the whole pipeline
    threads: int = 0  # CPU threads per rank (0: torch's default)
    pixels: str = ""  # the name of the app's PixelBuffer
    pixels_bytes: int = 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "WorkerConfig":
        return cls(**json.loads(text))


def error_message(exc: BaseException) -> dict[str, Any]:
    """The ``error`` message for an exception: its code, its text, the fields it carries."""
    if not isinstance(exc, StudioError):
        return {"type": "error", "kind": GenerationFailed.code, "error": f"{type(exc).__name__}: {exc}"}
    text = exc.message if isinstance(exc, InvalidRequest) else str(exc)
    return {"type": "error", "kind": exc.code, "error": text, **exc.fields()}


def error_from_message(msg: dict[str, Any]) -> StudioError:
    """The exception an ``error`` message stands for (unknown kinds: plain failures)."""
    cls = errors.by_code(str(msg.get("kind") or GenerationFailed.code))
    text = str(msg.get("error") or msg.get("kind") or "failed")
    if issubclass(cls, InvalidRequest):
        return cls(str(msg.get("field") or "request"), text)
    return cls(text, **{name: msg[name] for name in cls.carries if name in msg})
