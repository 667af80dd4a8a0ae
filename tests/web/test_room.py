"""Issue 53, the web layer: the app as ``server.assemble`` builds it (the guard, the clients' routes,
Gradio's Blocks mounted), driven over httpx's ASGI transport — uploads counted as they arrive,
origins compared by scheme, host and port, the viewers' login behind the failure window, malformed
input answered 400 without a traceback — and served by uvicorn for the forwarded headers."""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import threading
import urllib.error
import urllib.request

import httpx
import pytest

from backend.hardware.env import dir_size
from backend.serving.roles import OperatorKey
from tests.conftest import make_settings
from web import guard
from web.api import ApiKeys, Callers, build_api

VIEWERS = [("ann", "ann-password-1"), ("bob", "bob-password-2")]
KEY = "carol-key-0123456789"
BOUNDARY = "room-boundary"


@pytest.fixture(scope="module")
def room(tmp_path_factory):
    """(app, upload folder): the assembled app with --auth viewers and one API key."""
    from backend.serving.manager import Manager
    from server import assemble

    tmp = tmp_path_factory.mktemp("room")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_TEMP_DIR", str(tmp / "gradio"))
        settings = make_settings(tmp)
        app = assemble(Manager(settings), settings, OperatorKey(None), ApiKeys({"carol": KEY}), VIEWERS)
        login = send(app, "POST", "/login", client="10.0.0.99", data=dict(zip(("username", "password"), VIEWERS[0])))
        assert login.status_code == 200, login.text
        yield app, tmp / "gradio", {"cookie": "; ".join(f"{k}={v}" for k, v in login.cookies.items())}


def send(app, method: str, path: str, client: str = "127.0.0.1", **kwargs) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=app, client=(client, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:7860") as http:
            return await http.request(method, path, **kwargs)
    return asyncio.run(go())


def test_a_chunked_upload_is_cut_at_the_callers_bound_and_another_callers_upload_still_works(room):
    """The probe's request: 300 MB of files to Gradio's upload route without a Content-Length (counted
    as 20 MB before the body, it stored 300 MB and every later upload met 413 for an hour). Counted as it
    arrives, it is cut at the caller's 100 MB, Gradio's parser deletes its part file, and the
    operator's 2.6 MB bundle from another address goes through right after."""
    app, uploads, viewer = room
    sent = {"bytes": 0}
    chunk = b"\0" * 2**20

    async def body():  # 16 files of 19 MB (each under Gradio's 20 MB a file), one at a time
        for number in range(16):
            yield (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{number}.bin\"\r\n"
                   "Content-Type: application/octet-stream\r\n\r\n").encode()
            for _ in range(19):
                sent["bytes"] += len(chunk)
                yield chunk
            yield b"\r\n"
        yield f"--{BOUNDARY}--\r\n".encode()

    cut = send(app, "POST", "/gradio_api/upload", client="10.5.0.1", content=body(),
               headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}", **viewer})
    assert cut.status_code == 429 and "Too much uploaded" in cut.text, cut.text
    assert sent["bytes"] <= guard.UPLOAD_BYTES_PER_CALLER + len(chunk)  # cut where it passed the bound
    assert dir_size(uploads) == 0  # no partial file held
    bundle = b"b" * 2_600_000
    taken = send(app, "POST", "/gradio_api/upload", client="10.5.0.2", headers=viewer,
                 files=[("files", ("warm.bundle", bundle, "application/octet-stream"))])
    assert taken.status_code == 200, taken.text
    assert dir_size(uploads) == len(bundle)
    # The cut caller's window is spent for every upload route, the Images API's edits included.
    again = send(app, "POST", "/v1/images/edits", client="10.5.0.1", headers={"authorization": f"Bearer {KEY}"},
                 files=[("image", ("a.png", b"x" * 1000, "image/png"))], data={"prompt": "x"})
    assert again.status_code == 429


def test_a_credentialed_request_from_another_port_of_this_host_is_refused_and_cors_grants_it_nothing(room):
    """Cookies ignore ports: a page on http://127.0.0.1:9999 sent the operator's cookie and acted as
    the operator (the Origin was compared by host name only), and Gradio's CORS answered any
    localhost origin with credentials."""
    app, _uploads, viewer = room
    assert send(app, "GET", "/gradio_api/info", headers=viewer).status_code == 200  # the viewer's cookie, no Origin
    other = {"origin": "http://127.0.0.1:9999", **viewer}
    assert send(app, "GET", "/gradio_api/info", headers=other).status_code == 403  # a credentialed read
    assert send(app, "POST", "/v1/images/generations", json={"prompt": "x"},
                headers={"origin": "http://127.0.0.1:9999", "authorization": f"Bearer {KEY}"}).status_code == 403
    assert send(app, "POST", "/gradio_api/upload", headers={"origin": "https://127.0.0.1:7860"},
                files=[("files", ("a", b"x"))]).status_code == 403  # another scheme
    preflight = send(app, "OPTIONS", "/gradio_api/queue/join", headers={
        "origin": "http://localhost:9999", "access-control-request-method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-credentials" not in preflight.headers
    simple = send(app, "GET", "/gradio_api/info", headers={"origin": "http://localhost:9999"})
    assert "access-control-allow-origin" not in simple.headers
    own = send(app, "POST", "/login", client="10.6.0.1", data={"username": "ann", "password": "ann-password-1"},
               headers={"origin": "http://127.0.0.1:7860"})
    assert own.status_code == 200  # the page's own origin, as the browser sends it


def test_twenty_wrong_viewer_passwords_meet_429_and_another_users_login_still_works(room):
    app, _uploads, _viewer = room
    codes = [send(app, "POST", "/login", client="10.7.0.1", data={"username": "ann", "password": f"guess-{n}"}
                  ).status_code for n in range(20)]
    assert codes == [400] * guard.LOGIN_FAILURES + [429] * (20 - guard.LOGIN_FAILURES)
    assert send(app, "POST", "/login", client="10.7.0.1",
                data={"username": "bob", "password": "bob-password-2"}).status_code == 200


def test_malformed_input_is_answered_400_with_no_traceback(room, caplog):
    """A NUL byte in a file path (os.path.realpath's ValueError) and a list where the model's name goes
    (a set lookup's TypeError) printed tracebacks at 100+ requests a second; 30k-deep JSON is the
    parser's refusal."""
    app, _uploads, _viewer = room
    caplog.set_level(logging.DEBUG)
    assert send(app, "GET", "/gradio_api/file=/tmp/a%00b").status_code == 400
    deep = b'{"prompt": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    auth = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    refused = send(app, "POST", "/v1/images/generations", client="10.8.0.1", content=deep, headers=auth)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_json"
    listed = send(app, "POST", "/v1/images/generations", client="10.8.0.1", json={"prompt": "x", "model": [[1]]},
                  headers=auth)
    assert listed.status_code == 400 and listed.json()["error"]["param"] == "model"
    assert "Traceback" not in caplog.text


def test_the_load_png_handler_refuses_malformed_paths_without_a_traceback(tmp_path):
    import gradio as gr

    from tests.ui.fake_engines import start_manager
    from ui.handlers import Studio

    manager, _launches = start_manager(tmp_path)
    try:
        tab = Studio(manager).studio_tab
        for path in ("/tmp/a\0b.png", str(tmp_path), {"path": "/etc/passwd"}):
            with pytest.raises(gr.Error) as refused:
                tab.load_png(path)
            assert refused.value.print_exception is False  # Gradio prints a gr.Error's traceback by default
    finally:
        manager.close()


def test_a_short_metrics_key_is_refused_and_wrong_ones_meet_the_window():
    with pytest.raises(ValueError, match="--metrics-key: a key is at least 16"):
        Callers(ApiKeys(), metrics_key="short")
    app = build_api(object(), ApiKeys(), metrics_key="scrape-key-0123456789")  # refused before the manager
    codes = [send(app, "GET", "/metrics", client="10.9.0.1", headers={"authorization": f"Bearer wrong-{n}"}
                  ).status_code for n in range(guard.LOGIN_FAILURES + 1)]
    assert codes == [403] * guard.LOGIN_FAILURES + [429]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("trusted", [None, "127.0.0.1"])
def test_a_forged_forwarded_for_from_loopback_changes_no_bound(trusted):
    """uvicorn believed X-Forwarded-For from loopback by default: a local caller named a new address
    for each wrong operator token (and each upload, each run) and met no bound. Now only the proxies
    --forwarded-allow-ips names are believed."""
    from server import Served

    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    port = _free_port()
    served = Served(guard.RoomGuard(ok, OperatorKey(None), hosts=None), "127.0.0.1", port, *filter(None, [trusted]))
    try:
        codes = [_get(f"http://127.0.0.1:{port}/operator?token={'0' * 43}", {"X-Forwarded-For": f"10.0.0.{n}"})
                 for n in range(guard.LOGIN_FAILURES + 1)]
    finally:
        served.close()
    if trusted is None:
        assert codes == [403] * guard.LOGIN_FAILURES + [429]
    else:  # the named proxy's word is taken: each forwarded address its own window
        assert codes == [403] * (guard.LOGIN_FAILURES + 1)


def test_a_full_disk_while_an_upload_is_written_answers_507_and_keeps_nothing_partial(tmp_path):
    """Gradio's parser writing a part file on a full disk (ENOSPC) answered 500 with a traceback and
    left its temporary file at the top of the upload folder (it deletes it only on a parse error); a
    finished upload in a folder of its own is another caller's and stays."""
    import errno

    held = tmp_path / "uploads"
    (held / "f00d").mkdir(parents=True)
    (held / "f00d" / "kept.png").write_bytes(b"an upload waiting to be read")

    async def full(scope, receive, send):  # Gradio's upload route on a full disk
        (held / "tmpq1w2e3").write_bytes((await receive())["body"][:1000])
        raise OSError(errno.ENOSPC, "No space left on device")

    door = guard.RoomGuard(full, OperatorKey(None), hosts=None, upload_dir=str(held))
    answer = send(door, "POST", "/gradio_api/upload", files=[("files", ("a", io.BytesIO(b"x" * 5000)))])
    assert answer.status_code == 507 and "disk is full" in answer.text
    assert sorted(str(p.relative_to(held)) for p in held.rglob("*")) == ["f00d", "f00d/kept.png"]


def test_the_uploads_in_flight_count_towards_the_held_bound(monkeypatch):
    """Two callers' bodies arriving at once are held together: the total is counted as they arrive,
    not only from what the folder held before they began."""
    monkeypatch.setattr(guard, "UPLOADS_TOTAL_BYTES", 3 * 2**20)
    first_in, release = threading.Event(), asyncio.Event()

    async def slow_reader(scope, receive, send):
        while True:
            message = await receive()
            first_in.set()
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    door = guard.RoomGuard(slow_reader, OperatorKey(None), hosts=None)

    async def go():
        async def first_body():
            yield b"a" * 2 * 2**20
            await release.wait()
            yield b"a"

        async def one(client, content):
            transport = httpx.ASGITransport(app=door, client=(client, 1))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:7860") as http:
                return await http.post("/gradio_api/upload", content=content)

        first = asyncio.ensure_future(one("10.1.0.1", first_body()))
        while not (first_in.is_set() or first.done()):
            await asyncio.sleep(0)
        second = await one("10.1.0.2", b"b" * 2 * 2**20)  # 2 MB arriving + 2 MB > 3 MB held at once
        release.set()
        return (await first).status_code, second.status_code

    assert asyncio.run(go()) == (200, 413)
