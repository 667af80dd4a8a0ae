"""The TP wire: multiprocessing.connection's handshake over the group's key, bounded JSON
frames, deadlines; rank 0's door (connections, strangers, job sizes); the shared pixel buffer."""

import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from backend import errors
from backend.launch import protocol as proto
from tests.conftest import ROOT

KEY = b"s" * 64


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    ends = proto.Connection(a.detach()), proto.Connection(b.detach())
    yield ends
    for end in ends:
        end.close()


def test_messages_round_trip_and_none_arrives_when_none_was_sent(pair):
    a, b = pair
    assert proto.receive(b, 0.05) is None
    proto.send(a, {"type": "result", "width": 2, "prompt": "ğüşiöç 🦊"})
    proto.send(a, {"type": "ok"})
    assert proto.receive(b, 5) == {"type": "result", "width": 2, "prompt": "ğüşiöç 🦊"}
    assert proto.receive(b, 5) == {"type": "ok"}


@pytest.mark.parametrize("frame, message", [
    (b"not json", "not JSON"),
    (b"[1, 2]", "JSON object with a 'type'"),
    (b'{"kind": "x"}', "JSON object with a 'type'"),
    (b'{"type": 5}', "JSON object with a 'type'"),
    (b"\xff\xfe", "not JSON"),
])
def test_malformed_messages_are_refused(pair, frame, message):
    a, b = pair
    a.send_bytes(frame)
    with pytest.raises(proto.ProtocolError, match=message):
        proto.receive(b, 5)


def test_a_frame_over_the_limit_is_refused_unread():
    a, b = socket.socketpair()
    with a, proto.Connection(b.detach()) as conn:
        a.sendall(struct.pack("!i", proto.MAX_MESSAGE + 1))  # announced; not one byte of it sent
        with pytest.raises(proto.ProtocolError, match=f"over {proto.MAX_MESSAGE} bytes refused"):
            proto.receive(conn, 5)
    with pytest.raises(proto.ProtocolError, match="too large"):
        proto.send(proto.Connection(os.dup(0)), {"type": "x", "text": "x" * proto.MAX_MESSAGE})


def test_a_hang_up_and_a_frame_left_half_sent_are_a_lost_connection():
    a, b = socket.socketpair()
    proto._bound_io(b, 0.2)  # what accept and connect set: a frame once begun has this long
    with a, proto.Connection(b.detach()) as conn:
        a.sendall(struct.pack("!i", 100) + b"x" * 10)  # 10 of its 100 bytes, then nothing
        with pytest.raises(proto.ConnectionLost):
            proto.receive(conn, 5)
    c, d = socket.socketpair()
    with proto.Connection(d.detach()) as conn:
        c.close()
        with pytest.raises(proto.ConnectionLost, match="closed"):
            proto.receive(conn, 5)


def test_the_handshake_needs_the_key_on_both_sides():
    """multiprocessing.connection's mutual challenge: a peer with another key is refused, and so
    is one that does not speak the handshake (a stranger learns nothing and gets nothing run)."""
    for theirs, refused in ((KEY, False), (b"x" * 64, True)):
        a, b = socket.socketpair()
        outcome = {}

        def serve(b=b, outcome=outcome):
            try:
                proto.accept(b, KEY, 5).close()
                outcome["server"] = "accepted"
            except proto.Refused:
                outcome["server"] = "refused"

        thread = threading.Thread(target=serve)
        thread.start()
        client = proto.Connection(a.detach())
        try:
            proto._handshake(client, theirs, first=False)
            outcome["client"] = "accepted"
        except proto.Refused:
            outcome["client"] = "refused"
        finally:
            client.close()
        thread.join(10)
        assert outcome == ({"server": "refused", "client": "refused"} if refused
                           else {"server": "accepted", "client": "accepted"})


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
    proto.send(a, proto.error_message(exc))
    back = proto.error_from_message(proto.receive(b, 5))
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
    broken = dict(back.settings, min_size=512, max_size=256)  # the app's checks hold on the way back
    with pytest.raises(ValueError, match="--min-size/--max-size"):
        Settings.from_json(broken)
    rebuilt = Settings.from_json(back.settings)
    assert rebuilt == Settings(**{**vars(settings), "auth": None})  # everything but the credentials
    assert "secret" not in config.to_json()


# --- rank 0's door: strangers, connections, job sizes ------------------------------------------

@pytest.fixture
def server():
    from backend.workers.rank0_server import Rank0Server

    folder = tempfile.mkdtemp(prefix="ns-")  # short: a Unix socket path has about 100 bytes
    made = Rank0Server(os.path.join(folder, "tp.sock"), KEY, 2, max_job=4096)
    made.state = "ready"
    yield made
    made.close()
    shutil.rmtree(folder, ignore_errors=True)


def _raw_connect(server):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(server.path)
    return sock


def _ask(conn, request):
    proto.send(conn, request)
    return proto.receive(conn, 10)


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
    made = rank0_server.Rank0Server(path, KEY, 2, max_job=4096)
    try:
        assert seen == [False]  # not visible before it listens
        assert sorted(os.listdir(folder)) == ["tp.sock"]  # visible now, under its name, and only it
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        monkeypatch.undo()
        made.state = "ready"
        with proto.connect(path, KEY, 10) as conn:
            assert _ask(conn, {"type": "health"})["state"] == "ready"
    finally:
        made.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_run_dir_goes_where_rank_0s_socket_path_fits(tmp_path, monkeypatch):
    """A socket's path holds SUN_PATH_MAX bytes: under a long TMPDIR rank 0's bind failed ("AF_UNIX
    path too long") and the group never started. ``run_root`` keeps the temp folder while the path
    fits, takes a short system one when it does not, and says so when none is there."""
    from backend.workers import rank0_server

    assert proto.run_root("/tmp") == "/tmp"  # a folder where it fits is kept
    long = tmp_path / ("t" * max(1, proto.SUN_PATH_MAX - len(str(tmp_path))))
    long.mkdir()
    with pytest.raises(OSError, match="too long"):  # the kernel's limit, as rank 0 met it
        rank0_server.Rank0Server(str(long / "tp.sock"), KEY, 2, max_job=4096)
    root = proto.run_root(str(long))
    folder = tempfile.mkdtemp(prefix=proto.RUN_DIR_PREFIX, dir=root)
    try:
        assert root in ("/tmp", "/var/tmp", "/usr/tmp")
        rank0_server.Rank0Server(os.path.join(folder, "tp.sock"), KEY, 2, max_job=4096).close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: p == str(long) or real_isdir(p) and p.startswith(str(tmp_path)))
    with pytest.raises(errors.BackendNotReady, match="set TMPDIR to a shorter folder"):
        proto.run_root(str(long))


def test_one_connection_carries_request_after_request(server):
    """The app keeps one connection for its generations: rank 0 answers each request on it in turn."""
    with proto.connect(server.path, KEY, 10) as conn:
        assert [_ask(conn, {"type": "health"})["type"] for _ in range(3)] == ["ok"] * 3
        assert _ask(conn, {"type": "cancel"}) == {"type": "ok"} and server.cancel.is_set()
        assert _ask(conn, {"type": "bogus"})["kind"] == "invalid"
        assert _ask(conn, {"type": "health"})["state"] == "ready"
    _wait(lambda: server.open_connections == 0, "the slot released when the app hung up")


def test_a_job_too_long_for_the_ranks_broadcast_is_refused_at_the_door(server):
    with proto.connect(server.path, KEY, 10) as conn:
        answer = _ask(conn, {"type": "generate", "prompt": "x" * 5000})
        assert answer["kind"] == "invalid" and "over 4096 bytes" in answer["error"]
    assert server.jobs.empty()


def test_the_pixel_buffer_is_shared_with_a_process_that_attaches_by_name():
    """Rank 0 attaches to the app's buffer by name and writes a result's pixels; the app reads the
    same bytes. The rank's exit does not remove it (the app owns it: its close does)."""
    buffer = proto.PixelBuffer.create(1 << 20)
    try:
        child = textwrap.dedent(f"""
            from backend.launch.protocol import PixelBuffer
            mine = PixelBuffer.attach({buffer.name!r}, {buffer.size})
            assert mine.write(bytes(range(256)) * 4) == 1024
            try:
                mine.write(b"x" * ({buffer.size} + 1))
                raise SystemExit("an oversized write was taken")
            except ValueError:
                pass
            mine.close()
            try:
                PixelBuffer.attach({buffer.name!r}, {buffer.size} * 2)
                raise SystemExit("a buffer smaller than announced was taken")
            except OSError as exc:
                assert "smaller" in str(exc)
        """)
        done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "leaked" not in done.stderr, done.stderr
        assert bytes(buffer.view[:1024]) == bytes(range(256)) * 4
        again = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr  # still there after the first rank left
    finally:
        buffer.close()
    assert not os.path.exists(f"/dev/shm/{buffer.name}")  # the app's close removed it


def _wait(predicate, what):
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _closed(sock, said_at_most: int = 64) -> bool:
    """True when rank 0 hangs up having sent at most its challenge (``said_at_most`` bytes)."""
    said = b""
    try:
        while chunk := sock.recv(4096):
            said += chunk
    except ConnectionResetError:
        pass
    return len(said) <= said_at_most


@pytest.mark.parametrize("first_frame", [struct.pack("!i", 256 << 20), struct.pack("!i", 257) + b"x" * 257,
                                         b'{"type": "hello", "token": "ssss"}'])
def test_a_stranger_is_refused_after_one_small_frame_and_rank0_serves_on(server, first_frame):
    """Whatever a stranger sends first — a frame announced at 256 MiB, one over the handshake's
    256 bytes, the old hello — it is refused without more being read, and the key still works."""
    sock = _raw_connect(server)
    sock.sendall(first_frame)
    assert _closed(sock)
    sock.close()
    _wait(lambda: server.refused == 1, "refused")
    with proto.connect(server.path, KEY, 10) as conn:
        assert _ask(conn, {"type": "health"})["refused"] == 1


def test_rank0_holds_16_connections_and_closes_the_17th_at_once(server):
    held = [_raw_connect(server) for _ in range(16)]
    try:
        _wait(lambda: server.open_connections == 16, "16 connections accepted")
        extra = _raw_connect(server)
        assert _closed(extra, said_at_most=0)  # closed without a word, while the 16 stay open
        extra.close()
        assert server.turned_away == 1 and server.open_connections == 16
        held.pop(0).close()
        _wait(lambda: server.open_connections == 15, "a closed connection released its slot")
        with proto.connect(server.path, KEY, 10) as conn:  # a slot is free again
            assert _ask(conn, {"type": "health"})["state"] == "ready"
    finally:
        for sock in held:
            sock.close()
    _wait(lambda: server.open_connections == 0, "every slot released")


def test_a_silent_connection_is_dropped_at_the_read_deadline(server):
    server.read_timeout = 0.2
    sock = _raw_connect(server)
    assert _closed(sock)  # nothing sent: no handshake within the deadline, so it is refused
    sock.close()
    _wait(lambda: server.open_connections == 0, "slot released")
    assert server.refused == 1


def _broadcast_rank(rank: int, store_path: str, jobs: list, out_dir: str) -> None:
    import types

    import torch.distributed as dist

    from backend.workers.collectives import _bcast_json

    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    try:
        me = types.SimpleNamespace(rank=rank, control=dist.group.WORLD,
                                   settings=types.SimpleNamespace(max_prompt_chars=2000, max_references=4))
        collectives, broadcast = [], dist.broadcast

        def counted(*args, **kwargs):
            collectives.append("broadcast")
            return broadcast(*args, **kwargs)

        dist.broadcast = counted
        got = [_bcast_json(job if rank == 0 else None, me) for job in jobs]
        dist.broadcast = broadcast
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
            json.dump({"jobs": got, "collectives": len(collectives)}, handle)
    finally:
        dist.destroy_process_group()


def test_the_longest_job_the_app_can_send_reaches_every_rank_whole_in_one_broadcast():
    """A prompt and what was typed at the character limit, in 4-byte characters, fit the one
    broadcast (``job_bytes``); so does a short job: one collective a job. Two real gloo ranks."""
    import torch.multiprocessing as mp

    from backend.workers.collectives import encode_job, job_bytes

    jobs = [{"type": "generate", "prompt": "a red circle", "seed": 3},
            {"type": "generate", "prompt": "🦊" * 2000, "typed": "🦊" * 2000, "mode": "eager", "seed": 4,
             "height": 2048, "width": 2048, "steps": 100, "guidance": 10.0, "forbid_compile": False, "count": 4,
             # an edit's references, described (their pixels follow in broadcasts of their own)
             "references": [{"sha256": "f" * 64, "source": "16384x16384", "fitted": "1024x1024", "fit": "crop"}] * 4},
            {"type": "shutdown"}]
    assert len(encode_job(jobs[1])) > 16_000 and len(encode_job(jobs[1])) <= job_bytes(2000, 4)
    folder = tempfile.mkdtemp(prefix="ns-bcast-")
    try:
        mp.spawn(_broadcast_rank, args=(os.path.join(folder, "store"), jobs, folder), nprocs=2, join=True)
        for rank in (0, 1):
            with open(os.path.join(folder, f"rank{rank}.json"), encoding="utf-8") as handle:
                assert json.load(handle) == {"jobs": jobs, "collectives": len(jobs)}, rank
    finally:
        shutil.rmtree(folder, ignore_errors=True)
