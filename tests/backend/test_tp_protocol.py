"""The TP wire format on a socket pair: framing, limits, tokens, deadlines."""

import socket
import struct
import time

import pytest

from backend import errors
from backend.tp import protocol as proto


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
    errors.BackendNotReady("the worker group is loading"), proto.Unauthorized("bad token"),
    errors.GenerationFailed("RuntimeError in the pipeline: x"),
])
def test_every_error_crosses_the_socket_as_itself(pair, exc):
    exc.compiles = 1  # counters a failed run still reports travel with it
    a, b = pair
    proto.send_message(a, proto.error_message(exc))
    back = proto.error_from_message(proto.recv_message(b, deadline=time.monotonic() + 5)[0])
    assert type(back) is type(exc) and str(back) == str(exc) and back.compiles == 1
    if isinstance(exc, errors.InvalidRequest):
        assert back.field == "prompt" and back.message == "is empty"


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
