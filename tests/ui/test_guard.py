"""The server's door (web.guard), issue 33: uploads are bounded per caller and in total,
cross-origin ones are refused, and an upload the app has read is not kept (2); wrong operator
logins from one address are slowed down (9). The guard is driven as the server drives it (ASGI calls),
below a stand-in for Gradio's upload route that stores what it is sent."""

from __future__ import annotations

import asyncio
import os

import pytest

from backend.serving.roles import OperatorKey
from web import guard
from web.guard import RoomGuard


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _door(tmp_path, clock):
    """The guard over an app that stores each upload it is handed in ``tmp_path/uploads``."""
    folder = tmp_path / "uploads"
    folder.mkdir(exist_ok=True)

    async def store(scope, receive, send):
        length = dict(scope["headers"]).get(b"content-length", b"0")
        (folder / f"u{len(os.listdir(folder))}").write_bytes(b"x" * int(length))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"stored"})

    return RoomGuard(store, OperatorKey(None), hosts=None, upload_dir=str(folder), clock=clock), folder


def _status(door, scope: dict) -> int:
    """Drive one HTTP request through the door as the server does; its answer's status."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(door({"type": "http", "query_string": b"", **scope}, receive, send))
    return sent[0]["status"]


def _post(door, size: int, client: str = "10.0.0.1", origin: str | None = None) -> int:
    headers = [(b"host", b"studio:7860"), (b"content-length", str(size).encode())]
    if origin:
        headers.append((b"origin", origin.encode()))
    return _status(door, {"method": "POST", "path": guard.UPLOAD_ROUTE, "headers": headers, "client": (client, 5555)})


def test_one_caller_past_its_bytes_is_refused_and_nothing_more_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(guard, "UPLOADS_TOTAL_BYTES", 10**9)
    clock = Clock()
    door, folder = _door(tmp_path, clock)
    big = 19 * 2**20
    codes = [_post(door, big) for _ in range(6)]
    assert codes == [200] * 5 + [429]  # 5 x 19 MB fit the 100 MB a caller may send in 10 minutes
    assert len(os.listdir(folder)) == 5  # the refused one was never handed on
    assert _post(door, big, client="10.0.0.2") == 200  # another caller has its own budget
    clock.now += guard.UPLOAD_WINDOW_S + 1
    assert _post(door, big) == 200  # and the first one's comes back with time


def test_uploads_held_together_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(guard, "UPLOADS_TOTAL_BYTES", 3 * 2**20)
    door, folder = _door(tmp_path, Clock())
    assert [_post(door, 2**20, client=f"10.0.0.{i}") for i in range(4)] == [200, 200, 200, 413]
    assert len(os.listdir(folder)) == 3
    for name in os.listdir(folder):  # read and deleted: room again
        os.unlink(folder / name)
    assert _post(door, 2**20, client="10.0.0.9") == 200


def test_a_cross_origin_upload_is_refused(tmp_path):
    door, folder = _door(tmp_path, Clock())
    assert _post(door, 100, origin="https://evil.example") == 403
    assert _post(door, 100, origin="http://studio:7860") == 200  # the page's own
    assert len(os.listdir(folder)) == 1


def test_an_upload_read_by_the_app_is_deleted_and_nothing_outside_its_folder_is(tmp_path, monkeypatch):
    from ui.temp_dir import TEMP_PREFIX, discard_upload

    own = tmp_path / f"{TEMP_PREFIX}{os.getpid()}-abc"
    (own / "hash1").mkdir(parents=True)
    upload = own / "hash1" / "params.png"
    upload.write_bytes(b"png")
    outside = tmp_path / "mine.png"
    outside.write_bytes(b"a user's")
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(own))
    assert discard_upload(outside) is False and outside.exists()
    assert discard_upload(upload) is True and not upload.exists() and not (own / "hash1").exists()
    assert own.exists()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # a folder the app did not make: nothing
    assert discard_upload(outside) is False and outside.exists()


@pytest.mark.parametrize("tab, handler", [("studio_tab", "load_png"), ("system_tab", "import_bundle")])
def test_the_handlers_discard_what_they_read(studio, tmp_path, monkeypatch, tab, handler):
    from PIL import Image

    from ui.temp_dir import TEMP_PREFIX

    own = tmp_path / f"{TEMP_PREFIX}{os.getpid()}-xyz"
    (own / "h").mkdir(parents=True)
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(own))
    upload = own / "h" / "file.png"
    Image.new("RGB", (8, 8)).save(upload)
    try:
        getattr(getattr(studio, tab), handler)(str(upload))
    except Exception:  # noqa: BLE001 - a refusal is fine: what counts is that the upload is gone
        pass
    assert not upload.exists()


def _login(door, query: bytes, client: str = "10.0.0.1") -> int:
    return _status(door, {"method": "GET", "path": "/operator", "headers": [(b"host", b"studio:7860")],
                          "client": (client, 5555), "query_string": query})


def test_wrong_operator_logins_from_one_address_are_slowed_down(tmp_path):
    clock = Clock()
    key = OperatorKey(None)
    door = RoomGuard(None, key, hosts=None, clock=clock)
    wrong = [_login(door, b"token=" + b"0" * 43) for _ in range(guard.LOGIN_FAILURES + 1)]
    assert wrong == [403] * guard.LOGIN_FAILURES + [429]
    # The token is a key (43 random characters): checked before the window, its holder is never locked
    # out by a neighbour's guesses (issue 53); wrong ones keep waiting out the window.
    assert _login(door, f"token={key.token}".encode()) == 303
    assert _login(door, b"token=" + b"1" * 43) == 429
    clock.now += guard.LOGIN_WINDOW_S + 1
    assert _login(door, b"token=" + b"1" * 43) == 403
