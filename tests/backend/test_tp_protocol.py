"""The TP wire format on a socket pair: framing, limits, tokens, deadlines."""

import json
import os
import re
import shutil
import socket
import stat
import struct
import tempfile
import time

import pytest

from backend import errors
from backend.launch import protocol as proto
from tests.conftest import ROOT


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_header_and_payload_round_trip(pair):
    a, b = pair
    proto.send_message(a, {"type": "result", "width": 2}, b"\x00\x01\x02" * 4)
    header, payload = proto.recv_message(b, deadline=time.monotonic() + 5)
    assert header == {"type": "result", "width": 2, "payload_bytes": 12} and bytes(payload) == b"\x00\x01\x02" * 4


@pytest.mark.parametrize("raw, message", [
    (struct.pack(">I", proto.MAX_HEADER + 1), "refused"),
    (struct.pack(">I", 5) + b"nope!", "not JSON"),
    (struct.pack(">I", 2) + b"[]", "JSON object with a 'type'"),
    (struct.pack(">I", 29) + b'{"type": "x", "payload_bytes": -1}'[:29], "not JSON"),
])
def test_malformed_messages_are_refused(pair, raw, message):
    a, b = pair
    a.sendall(raw)
    with pytest.raises(proto.ProtocolError, match=message):
        proto.recv_message(b, deadline=time.monotonic() + 1)


def test_oversized_payload_is_refused(pair):
    a, b = pair
    data = b'{"type": "x", "payload_bytes": %d}' % (proto.MAX_PAYLOAD + 1)
    a.sendall(struct.pack(">I", len(data)) + data)
    with pytest.raises(proto.ProtocolError, match="payload of"):
        proto.recv_message(b, deadline=time.monotonic() + 1)


def test_deadline_and_hang_up(pair):
    a, b = pair
    a.sendall(struct.pack(">I", 100) + b'{"type"')  # half a message, then silence
    with pytest.raises(proto.DeadlineExceeded):
        proto.recv_message(b, deadline=time.monotonic() + 0.2)
    a.close()
    with pytest.raises(proto.ProtocolError, match="closed"):
        proto.recv_message(b, deadline=time.monotonic() + 1)


def test_token_check():
    assert proto.token_ok("s3cret", {"type": "hello", "token": "s3cret"})
    assert not proto.token_ok("s3cret", {"type": "hello", "token": "s3cre"})
    assert not proto.token_ok("s3cret", {"type": "hello"})
    assert not proto.token_ok("s3cret", {"type": "health", "token": "s3cret"})
    assert not proto.token_ok("s3cret", {"type": "hello", "token": 5})


def test_wait_readable(pair):
    a, b = pair
    assert proto.wait_readable(b, 0.05) is False
    proto.send_message(a, {"type": "ok"})
    assert proto.wait_readable(b, 1.0) is True


@pytest.mark.parametrize("exc", [
    errors.InvalidRequest("prompt", "is empty"), errors.GenerationCancelled("stopped after step 2 of 4"),
    errors.CompileFailure("NeuronCompileError while compiling: boom"), errors.GroupDead("a collective failed"),
    errors.ShapeLocked("64x64 is not warm"), errors.ShapeLimitReached("too many graphs"),
    errors.BackendNotReady("the worker group is loading"), errors.Unauthorized("bad token"),
    errors.GenerationFailed("RuntimeError in the pipeline: x", compiles=1, group_ending=True),
    errors.GenerationCancelled("stopped after step 1", compiles=2, compile_seconds=0.5, neff_compiles=3),
])
def test_every_error_crosses_the_socket_as_itself(pair, exc):
    a, b = pair
    proto.send_message(a, proto.error_message(exc))
    back = proto.error_from_message(proto.recv_message(b, deadline=time.monotonic() + 5)[0])
    assert type(back) is type(exc) and str(back) == str(exc)
    assert back.fields() == exc.fields()  # the counters a failed run still reports travel with it
    if isinstance(exc, errors.InvalidRequest):
        assert back.field == "prompt" and back.message == "is empty"


def test_the_socket_kinds_and_the_page_codes_are_the_error_classes_own():
    """One table: every backend error class has its own code, the wire uses it, and the page has a
    sentence for it (ui.i18n derives its codes from the same classes)."""
    from ui import i18n

    table = errors.codes()
    assert len(set(table.values())) == len(table)
    for code, cls in table.items():
        message = proto.error_message(cls("f", "x") if cls is errors.InvalidRequest else cls("x"))
        assert message["kind"] == code and errors.by_code(code) is cls
        assert f"err_{code}" in i18n.MESSAGES["en"] and f"err_{code}" in i18n.MESSAGES["tr"]
    with pytest.raises(TypeError, match="carries no compiles"):
        errors.ShapeLocked("x", compiles=1)  # a field a class does not carry is refused when made


def test_an_unexpected_exception_is_a_failure_with_its_class_name():
    msg = proto.error_message(ZeroDivisionError("division by zero"))
    assert msg["kind"] == "failed" and msg["error"] == "ZeroDivisionError: division by zero"
    assert type(proto.error_from_message({"kind": "no-such-kind", "error": "x"})) is errors.GenerationFailed


def test_the_worker_config_carries_the_whole_settings():
    from backend.settings import Settings, parse_shape_list

    settings = Settings(device="cpu", tp_collective_timeout=42.0, neuron_cores="1", max_steps=9,
                        prewarm=parse_shape_list("128x64"), auth="user:secret")
    config = proto.WorkerConfig(settings=settings.to_json(), model_path="m", cores=[1, 2], warm=["64x64"])
    back = proto.WorkerConfig.from_json(config.to_json())
    assert back == config
    rebuilt = Settings.from_json(back.settings)
    assert rebuilt == Settings(**{**vars(settings), "auth": None})  # everything but the credentials
    assert "secret" not in config.to_json()


# --- a stranger on the socket: the hello is bounded, and so are connections --------------------

class _RecordingSocket:
    """One end of a socket pair that records how many bytes each recv was asked for."""

    def __init__(self, sock):
        self.sock, self.asked = sock, []

    def settimeout(self, t):
        self.sock.settimeout(t)

    def recv_into(self, view, n):
        self.asked.append(n)
        return self.sock.recv_into(view, n)


def _raw(header: dict) -> bytes:
    data = json.dumps(header).encode()
    return struct.pack(">I", len(data)) + data


@pytest.mark.parametrize("raw, message", [
    (_raw({"type": "hello", "token": "t", "payload_bytes": 256 << 20}), "payload of 268435456 bytes refused"),
    (_raw({"type": "hello", "token": "t", "payload_bytes": 1}), "limit 0"),
    (struct.pack(">I", proto.MAX_HEADER), f"header of {proto.MAX_HEADER} bytes refused (limit 4096)"),
    (struct.pack(">I", 2**32 - 1), "refused"),
    (_raw({"type": "hello", "token": "t" * 5000}), "refused (limit 4096)"),
])
def test_a_hello_is_refused_before_anything_large_is_read(pair, raw, message):
    a, b = pair
    a.sendall(raw)
    spy = _RecordingSocket(b)
    with pytest.raises(proto.ProtocolError, match=re.escape(message)):
        proto.recv_hello(spy, deadline=time.monotonic() + 5)
    assert max(spy.asked) <= proto.HELLO_MAX_HEADER and sum(spy.asked) <= proto.HELLO_MAX_HEADER + 4


def test_a_small_hello_is_read_whole(pair):
    a, b = pair
    proto.send_message(a, {"type": "hello", "token": "t" * 64})
    assert proto.recv_hello(b, deadline=time.monotonic() + 5) == {"type": "hello", "token": "t" * 64,
                                                                   "payload_bytes": 0}


@pytest.fixture
def server():
    from backend.workers.rank0_server import Rank0Server

    folder = tempfile.mkdtemp(prefix="ns-")  # short: a Unix socket path has about 100 bytes
    made = Rank0Server(os.path.join(folder, "tp.sock"), "s" * 64, 2)
    made.state = "ready"
    yield made
    made.close()
    shutil.rmtree(folder, ignore_errors=True)


def _connect(server):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(server.path)
    return sock


def test_the_socket_file_appears_only_once_rank_0_listens(monkeypatch):
    """The app connects as soon as the file exists; a connect between bind and listen is refused,
    and a start that is refused reads as a dead group (it once failed a degree-3 start on a busy
    machine). Rank 0 binds under another name, listens, and renames it into place."""
    from backend.workers import rank0_server

    folder = tempfile.mkdtemp(prefix="ns-")
    path = os.path.join(folder, "tp.sock")
    seen = []

    class Watched(socket.socket):
        def listen(self, *args):
            seen.append(os.path.exists(path))
            super().listen(*args)

    monkeypatch.setattr(rank0_server.socket, "socket", Watched)
    made = rank0_server.Rank0Server(path, "s" * 64, 2)
    try:
        assert seen == [False]  # not visible before it listens
        assert sorted(os.listdir(folder)) == ["tp.sock"]  # visible now, under its name, and only it
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        monkeypatch.undo()
        made.state = "ready"
        sock = _connect(made)
        proto.send_message(sock, {"type": "hello", "token": "s" * 64})
        proto.send_message(sock, {"type": "health"})
        assert proto.recv_message(sock, deadline=time.monotonic() + 10)[0]["state"] == "ready"
        sock.close()
    finally:
        made.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_pixel_buffer_is_shared_with_a_process_that_opens_its_path():
    """Rank 0 writes a result's pixels into the app's memfd (opened through /proc/<app>/fd/<n>);
    the app reads the same bytes. What does not fit, or a path that cannot be opened, falls back
    to the socket (write False, open None)."""
    import subprocess
    import sys
    import textwrap

    buffer = proto.PixelBuffer.create(1 << 20)
    if buffer is None:
        pytest.skip("no memfd on this platform: results always use the socket")
    try:
        child = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            from backend.launch.protocol import PixelBuffer
            mine = PixelBuffer.open({buffer.path!r}, {buffer.size})
            assert mine.write(bytes(range(256)) * 4)
            assert not mine.write(b"x" * ({buffer.size} + 1))
            mine.close()
        """)
        subprocess.run([sys.executable, "-c", child], check=True, timeout=60)
        assert bytes(buffer.view[:1024]) == bytes(range(256)) * 4
        assert proto.PixelBuffer.open("/proc/self/fd/999999", 1024) is None
        assert proto.PixelBuffer.open(buffer.path, buffer.size * 2) is None  # smaller than announced
    finally:
        buffer.close()


def _wait(predicate, what):
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _closed(sock) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_rank0_refuses_an_oversized_hello_and_serves_on(server):
    sock = _connect(server)
    sock.sendall(_raw({"type": "hello", "token": "s" * 64, "payload_bytes": 256 << 20}))
    header, _ = proto.recv_message(sock, deadline=time.monotonic() + 10)
    assert header["kind"] == "unauthorized" and _closed(sock)
    sock.close()
    assert server.refused == 1
    sock = _connect(server)  # the right hello still works
    proto.send_message(sock, {"type": "hello", "token": "s" * 64})
    proto.send_message(sock, {"type": "health"})
    assert proto.recv_message(sock, deadline=time.monotonic() + 10)[0]["refused"] == 1
    sock.close()


def test_rank0_holds_16_connections_and_closes_the_17th_at_once(server):
    held = [_connect(server) for _ in range(16)]
    try:
        _wait(lambda: server.open_connections == 16, "16 connections accepted")
        extra = _connect(server)
        assert _closed(extra)  # closed without a word, while the 16 stay open
        extra.close()
        assert server.turned_away == 1 and server.open_connections == 16
        proto.send_message(held[0], {"type": "hello", "token": "s" * 64})  # a held one is served
        proto.send_message(held[0], {"type": "health"})
        assert proto.recv_message(held[0], deadline=time.monotonic() + 10)[0]["state"] == "ready"
        held.pop(0).close()
        _wait(lambda: server.open_connections == 15, "the served connection released its slot")
        again = _connect(server)  # a slot is free again
        proto.send_message(again, {"type": "hello", "token": "x" * 64})
        assert proto.recv_message(again, deadline=time.monotonic() + 10)[0]["kind"] == "unauthorized"
        again.close()
    finally:
        for sock in held:
            sock.close()
    _wait(lambda: server.open_connections == 0, "every slot released")


def test_a_silent_connection_is_dropped_at_the_read_deadline(server):
    server.read_timeout = 0.2
    sock = _connect(server)
    assert _closed(sock)  # nothing sent: dropped after the deadline, not counted as refused
    sock.close()
    _wait(lambda: server.open_connections == 0, "slot released")
    assert server.refused == 0


def _broadcast_rank(rank: int, store_path: str, jobs: list, out_dir: str) -> None:
    import types

    import torch.distributed as dist

    from backend.workers.collectives import _bcast_json

    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    try:
        me = types.SimpleNamespace(rank=rank, control=dist.group.WORLD)
        got = [_bcast_json(job if rank == 0 else None, me) for job in jobs]
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
            json.dump(got, handle)
    finally:
        dist.destroy_process_group()


def test_a_job_reaches_every_rank_whole_in_one_broadcast_or_two():
    """A job up to JOB_BYTES goes in one collective; a longer one (2,000 emoji are ~24 KB of JSON)
    follows in a second: both arrive whole on rank 1. Two real gloo ranks."""
    import torch.multiprocessing as mp

    from backend.workers.collectives import JOB_BYTES

    jobs = [{"type": "generate", "prompt": "a red circle", "seed": 3},
            {"type": "generate", "prompt": "🦊" * 2000, "seed": 4},
            {"type": "shutdown"}]
    assert len(json.dumps(jobs[1]).encode()) > JOB_BYTES > len(json.dumps(jobs[0]).encode())
    folder = tempfile.mkdtemp(prefix="ns-bcast-")
    try:
        mp.spawn(_broadcast_rank, args=(os.path.join(folder, "store"), jobs, folder), nprocs=2, join=True)
        for rank in (0, 1):
            with open(os.path.join(folder, f"rank{rank}.json"), encoding="utf-8") as handle:
                assert json.load(handle) == jobs, rank
    finally:
        shutil.rmtree(folder, ignore_errors=True)
