"""The clients' routes (``web.api``) as the server runs them — a FastAPI app with the page mounted
beside them — driven over httpx, on the real Manager with the fake in-process engine of
``tests/ui/fake_engines.py`` (the device work is not what these test; ``tests/web/test_openai_client.py``
drives a real app with the real ``openai`` client)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading

import httpx
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from backend.serving.manager import Manager
from backend.shapes import parse_shape
from tests.conftest import make_settings
from tests.ui.fake_engines import FakeEngine, start_manager, until
from web.api import ApiKeys, build_api

KEY = "alice-key-0123456789"
LOOPBACK, ELSEWHERE = ("127.0.0.1", 50000), ("10.1.2.3", 50000)


async def page(scope, receive, send):
    """What stands behind the door: the Gradio app, answering 418 for anything."""
    await send({"type": "http.response.start", "status": 418, "headers": []})
    await send({"type": "http.response.body", "body": b"the page"})


def ApiDoor(inner, manager, keys: ApiKeys, metrics_key: str | None = None):
    """The server's clients' routes (``web.api.build_api``) with ``inner`` (the page) mounted beside them."""
    app = build_api(manager, keys, metrics_key)
    app.mount("/", inner)
    return app


def call(door, method: str, path: str, client=LOOPBACK, **kwargs) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=door, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:7860") as http:
            return await http.request(method, path, **kwargs)
    return asyncio.run(go())


def generate(door, client=LOOPBACK, key: str | None = None, headers=None, **body) -> httpx.Response:
    headers = dict(headers or {})
    if key:
        headers["authorization"] = f"Bearer {key}"
    return call(door, "POST", "/v1/images/generations", client, json={"prompt": "a red circle", "size": "64x64",
                                                                        **body}, headers=headers)


def error(response: httpx.Response, status: int) -> dict:
    """The OpenAI error shape of a refusal with ``status``."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


@pytest.fixture
def started(tmp_path):
    manager, _launches = start_manager(tmp_path, max_queued_per_viewer=1)
    yield manager
    manager.close()


@pytest.fixture
def door(started):
    return ApiDoor(page, started, ApiKeys())


def outputs(manager) -> list[str]:
    folder = manager.settings.output_dir
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_other_paths_pass_through_to_the_page(door):
    assert call(door, "GET", "/").status_code == 418
    assert call(door, "GET", "/v1/images").status_code == 418  # not one of the door's own paths


def test_a_generation_answers_in_openai_shape_with_the_runs_record(door, started):
    response = generate(door, n=2, steps=2, seed=5, mode="eager")
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["data"]) == 2 and isinstance(body["created"], int)
    image = Image.open(io.BytesIO(base64.b64decode(body["data"][0]["b64_json"])))
    assert image.size == (64, 64) and image.format == "PNG"
    record = body["neuron_studio"]
    assert (record["signature"], record["count"], record["seed"], record["steps"]) == ("64x64*2", 2, 5, 2)
    assert response.headers["x-compile"] == "warm"  # eager compiles nothing on the CPU
    assert len(outputs(started)) == 2  # written like the page's runs


def test_without_keys_only_loopback_callers_may_generate(door, started):
    refused = error(generate(door, client=ELSEWHERE), 403)
    assert refused["code"] == "loopback_only" and "--api-keys" in refused["message"]
    assert outputs(started) == [] and started.records == []


def test_keys_each_a_caller_wrong_ones_refused_then_slowed_and_the_right_key_never_locked_out(started):
    """Issue 53 (5): a neighbour's wrong keys from the same address (a NAT, a shared host) used to lock
    out every key holder there for the minute; the right key is taken before the window."""
    door = ApiDoor(page, started, ApiKeys({"alice": KEY}))
    missing = error(generate(door, client=ELSEWHERE), 401)
    assert (missing["code"], missing["param"], missing["type"]) == ("missing_api_key", "authorization",
                                                                    "authentication_error")
    for _ in range(5):
        assert error(generate(door, client=ELSEWHERE, key="x" * 20), 401)["code"] == "invalid_api_key"
    slowed = generate(door, client=ELSEWHERE, key="y" * 20)  # the neighbour's next guess waits out the window
    assert error(slowed, 429)["code"] == "rate_limit_exceeded" and int(slowed.headers["retry-after"]) > 0
    assert generate(door, client=ELSEWHERE, key=KEY, steps=1).status_code == 200  # the holder, same address


@pytest.mark.parametrize("body, param, words", [
    ({"size": "65x64"}, "size", "nearest valid size is 64x64"),
    ({"size": "big"}, "size", "WIDTHxHEIGHT"),
    ({"n": 9}, "n", "count (n): must be between 1 and 4"),
    ({"steps": 0}, "steps", "steps: must be between"),
    ({"prompt": ""}, "prompt", "prompt: is empty"),
    ({"response_format": "gif"}, "response_format", "b64_json, url"),
    ({"model": "dall-e-3"}, "model", "this app serves"),
    ({"colour": "red"}, "colour", "not a field of this API"),
    ({"mode": "turbo"}, "mode", "must be one of"),
])
def test_a_bad_field_is_refused_naming_it_and_nothing_is_kept(door, started, body, param, words):
    refusal = error(generate(door, **body), 400)
    assert refusal["param"] == param and words in refusal["message"], refusal
    assert refusal["type"] == "invalid_request_error"
    assert outputs(started) == [] and started.records == []


def test_bodies_are_bounded_typed_and_same_site(door, started):
    assert error(call(door, "POST", "/v1/images/generations", content=b"{" + b" " * 70_000 + b"}",
                      headers={"content-type": "application/json"}), 413)["code"] == "body_too_large"
    assert error(call(door, "POST", "/v1/images/generations", content=b"prompt=x",
                      headers={"content-type": "text/plain"}), 415)["code"] == "unsupported_media_type"
    assert error(call(door, "POST", "/v1/images/generations", content=b"[1]",
                      headers={"content-type": "application/json"}), 400)["code"] == "invalid_json"
    # A page on another site cannot make a visitor's browser spend the device (a simple POST needs no preflight).
    cross = generate(door, headers={"origin": "http://evil.example", "host": "127.0.0.1:7860"})
    assert error(cross, 403)["code"] == "cross_origin"
    assert error(call(door, "GET", "/v1/images/generations"), 405)["code"] == "method_not_allowed"
    assert outputs(started) == []


def _png(width=64, height=64) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "red").save(buffer, "PNG")
    return buffer.getvalue()


def test_an_edit_takes_multipart_references_and_refuses_a_non_image(door, started):
    response = call(door, "POST", "/v1/images/edits", data={"prompt": "make it blue", "size": "64x64", "steps": "2"},
                    files=[("image[]", ("a.png", _png(), "image/png")),
                           ("image[]", ("b.png", _png(80, 48), "image/png"))])
    assert response.status_code == 200, response.text
    record = response.json()["neuron_studio"]
    assert len(record["references"]) == 2 and "+ref" in record["signature"]
    kept = outputs(started)
    bad = call(door, "POST", "/v1/images/edits", data={"prompt": "x"},
               files=[("image", ("a.png", b"not an image at all", "image/png"))])
    refusal = error(bad, 400)
    assert refusal["param"] == "image" and "images (image): reference 1 is not an image" in refusal["message"]
    stray = error(call(door, "POST", "/v1/images/edits", data={"prompt": "x"}, files=[("other", ("a", b"x"))]), 400)
    assert stray["param"] == "other" and "not a file" in stray["message"]
    mask = error(call(door, "POST", "/v1/images/edits", data={"prompt": "x"},
                      files=[("image", ("a.png", _png(), "image/png")), ("mask", ("m.png", _png(), "image/png"))]), 400)
    assert mask["param"] == "mask"
    assert outputs(started) == kept


def test_compile_aware_sizes_headers_and_refusals(door, started):
    first = generate(door, mode="compiled", steps=2)
    assert first.status_code == 200 and first.headers["x-compile"] == "compiled"
    # A client may ask to be refused rather than wait for a compile: told the estimate and the nearest warm size.
    refused = generate(door, mode="compiled", size="96x96", headers={"x-compile-policy": "refuse"})
    body = error(refused, 409)
    assert body["code"] == "would_compile" and "warm and nearest: 64x64" in body["message"]
    assert refused.headers["x-compile"] == "will-compile" and float(refused.headers["x-compile-estimate-seconds"]) > 0
    auto = generate(door, mode="compiled", size="auto", steps=2)  # the nearest warm signature
    assert auto.status_code == 200 and auto.json()["neuron_studio"]["signature"] == "64x64"
    assert auto.headers["x-compile"] == "warm"
    started.set_warm_only(True)
    locked = error(generate(door, mode="compiled", size="96x96"), 409)
    assert locked["code"] == "shape_not_warm" and "nearest: 64x64" in locked["message"]
    assert len(started.records) == 2


def _metrics(door, **kwargs) -> dict:
    response = call(door, "GET", "/metrics", **kwargs)
    assert response.status_code == 200, response.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def test_metrics_count_requests_and_show_queues_while_a_caller_is_held_to_its_share(door, started):
    engine = started.engine
    assert generate(door, steps=1).status_code == 200
    assert error(generate(door, mode="turbo"), 400)["param"] == "mode"
    waiting = {}

    def second():
        waiting["response"] = generate(door, steps=2)

    with engine.hold(lambda: generate(door, steps=2)) as held:
        thread = threading.Thread(target=second)
        thread.start()
        until(lambda: started.engine_load().get(engine.name, (0, 0)) == (1, 1), "one running, one waiting")
        seen = _metrics(door)
        assert seen[("neuron_studio_queue_depth", (("engine", engine.name),))] == 1
        assert seen[("neuron_studio_busy_workers", (("engine", engine.name),))] == 1
        # --max-queued-per-viewer 1: this caller's running request and one waiting; a third is refused
        # at once — not queued behind them (which the engine's load would show).
        third: dict = {}
        late = threading.Thread(target=lambda: third.setdefault("response", generate(door, steps=2)))
        late.start()
        until(lambda: "response" in third or started.engine_load().get(engine.name) == (2, 1),
              "the third request answered or queued")
        assert "response" in third, "a third request from the same caller was queued, not refused"
        assert error(third["response"], 429)["code"] == "rate_limit_exceeded"
    thread.join(30)
    late.join(30)
    assert held["result"].status_code == 200 and waiting["response"].status_code == 200
    seen = _metrics(door)
    assert seen[("neuron_studio_requests_total", (("mode", "eager"), ("outcome", "ok")))] == 3
    assert seen[("neuron_studio_requests_total", (("mode", "other"), ("outcome", "invalid")))] == 1
    assert seen[("neuron_studio_request_seconds_count", (("mode", "eager"), ("shape", "other")))] == 3
    assert seen[("neuron_studio_state", (("state", "ready"),))] == 1
    assert seen[("neuron_studio_warm_signatures", (("mode", "eager"),))] == 1


def test_metrics_answer_loopback_or_the_metrics_key(started):
    door = ApiDoor(page, started, ApiKeys(), metrics_key="scrape-key-0123456789")
    assert error(call(door, "GET", "/metrics", client=ELSEWHERE), 403)["code"] == "metrics_key_required"
    assert error(call(door, "GET", "/metrics", client=ELSEWHERE, headers={"authorization": "Bearer nope"}), 403)
    assert call(door, "GET", "/metrics", client=ELSEWHERE,
                headers={"authorization": "Bearer scrape-key-0123456789"}).status_code == 200
    assert _metrics(door)  # loopback needs no key


def test_readyz_is_503_until_the_model_is_loaded_and_the_prewarm_shapes_are_warm(tmp_path):
    manager = Manager(make_settings(tmp_path, prewarm=[parse_shape("64x64")]), engine_factory=FakeEngine)
    door = ApiDoor(page, manager, ApiKeys())
    try:
        for path in ("/readyz", "/ping"):
            response = call(door, "GET", path)
            assert response.status_code == 503 and response.json()["reason"] == "the model is loading"
        assert call(door, "GET", "/healthz").status_code == 200  # the process answers
        manager.start()
        response = call(door, "GET", "/readyz")
        assert response.status_code == 200 and response.json() == {"status": "ready", "reason": "ready"}
        assert call(door, "GET", "/ping").status_code == 200
        manager.table.forget("eager")  # the configured shape no longer warm (the cache was cleared)
        response = call(door, "GET", "/readyz")
        assert response.status_code == 503 and "64x64 not warm yet" in response.json()["reason"]
    finally:
        manager.close()


def test_api_keys_file_names_keys_and_refuses_weak_or_repeated_ones(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(f"# who may call\nalice:{KEY}\n\n{'b' * 24}\n")
    assert ApiKeys.load(keys).keys == {"alice": KEY, "key-4": "b" * 24}
    for text, words in ((f"alice:{KEY}\nalice:{'c' * 20}\n", "used twice"), ("bob:short\n", "at least 16"),
                        ("# nothing\n", "holds no key")):
        keys.write_text(text)
        with pytest.raises(ValueError, match=words):
            ApiKeys.load(keys)


def test_json_fields_that_change_nothing_here_are_accepted(door):
    response = generate(door, steps=1, user="someone", quality="standard", style="vivid")
    assert response.status_code == 200, response.text
    assert json.loads(response.text)["neuron_studio"]["steps"] == 1


def test_neuron_core_gauges_count_the_plan_and_the_claims():
    """On Neuron the plan says which cores the app and each engine own; a CPU run has none, so the
    plan here is a stand-in object with the two fields the collector reads (``app_cores``, ``claims``)."""
    from types import SimpleNamespace

    from backend.serving.metrics import _cores

    group = SimpleNamespace(name="tensor-parallel", cores_wanted=lambda: (2, None))
    pool = SimpleNamespace(name="replicas", cores_wanted=lambda: (2, None))
    plan = SimpleNamespace(app_cores=(3,), claims={"tensor-parallel": (0, 1)})
    manager = SimpleNamespace(device=SimpleNamespace(core_plan=plan), engine=object(),
                              engines=SimpleNamespace(launched=(group, pool)))
    planned, held = _cores(manager)
    assert {s.labels["owner"]: s.value for s in planned.samples} == {"app": 1, "tensor-parallel": 2, "replicas": 2}
    assert {s.labels["owner"]: s.value for s in held.samples} == {"app": 1, "tensor-parallel": 2, "replicas": 0}
    cpu = SimpleNamespace(device=SimpleNamespace(core_plan=None), engine=object(), engines=manager.engines)
    assert [list(family.samples) for family in _cores(cpu)] == [[], []]


def test_a_multipart_part_over_its_bound_is_refused_before_the_rest_of_the_body_is_read(door, started):
    """Issue 51 (4): the body used to be read whole (up to five references' worth) before it was
    parsed. Parts are bounded as the body streams: a reference part past 20 MB is refused there, and
    the 60 MB the client would send after it are never read."""
    from backend.request.references import MAX_REFERENCE_BYTES

    sent = {"bytes": 0}
    boundary = "studio-boundary"
    chunk = b"\0" * 2**20

    async def body():
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nmake it blue\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n"
                "Content-Type: image/png\r\n\r\n").encode()
        sent["bytes"] += len(head)
        yield head
        for _ in range(80):  # 80 MB of one part
            sent["bytes"] += len(chunk)
            yield chunk
        yield f"\r\n--{boundary}--\r\n".encode()

    refused = error(call(door, "POST", "/v1/images/edits", content=body(),
                         headers={"content-type": f"multipart/form-data; boundary={boundary}"}), 400)
    assert refused["code"] == "invalid_multipart" and "over 20 MB" in refused["message"]
    assert sent["bytes"] < MAX_REFERENCE_BYTES + 4 * len(chunk)  # cut at the bound, not at the end
    assert outputs(started) == [] and started.records == []


def test_an_images_url_names_no_server_path_and_opens_for_the_key_that_made_it_only(started):
    """Issue 53 (7): ``response_format=url`` gave ``/gradio_api/file=<the server's absolute path>``, which
    told every client the output folder and, with --auth, answered 401 to a key-only client. Now an
    unguessable id on the API's own route, under the key's check, not the page's login."""
    door = ApiDoor(page, started, ApiKeys({"alice": KEY, "bob": "bob-key-0123456789"}))
    made = generate(door, client=ELSEWHERE, key=KEY, steps=1, response_format="url")
    assert made.status_code == 200, made.text
    url = made.json()["data"][0]["url"]
    assert str(started.settings.output_dir.resolve()) not in url and "file=" not in url, url
    path = url.removeprefix("http://127.0.0.1:7860")
    opened = call(door, "GET", path, client=ELSEWHERE, headers={"authorization": f"Bearer {KEY}"})
    assert opened.status_code == 200 and opened.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(opened.content)).size == (64, 64)
    other = call(door, "GET", path, client=ELSEWHERE, headers={"authorization": "Bearer bob-key-0123456789"})
    assert error(other, 404)["code"] == "not_found"  # another key: as if there were no such image
    assert call(door, "GET", path, client=ELSEWHERE).status_code == 401  # no key at all


def test_a_full_output_disk_is_answered_507(door, started, monkeypatch):
    """Issue 53 (10): the service's StorageFull (ENOSPC while saving) was a generic 500."""
    from backend.errors import StorageFull

    def full(*_args, **_kwargs):
        raise StorageFull("the output folder's disk is full: the image was not saved")

    monkeypatch.setattr(started, "run", full)
    refused = error(generate(door, steps=1), 507)
    assert refused["code"] == "storage_full" and "disk is full" in refused["message"]


def test_references_are_held_in_memory_never_spooled_to_tmpdir(door, started, monkeypatch, tmp_path):
    """Issue 53 (10): a full TMPDIR while the multipart parser spooled a reference left a partial file.
    Each part is held in memory up to its bound (20 MB, counted by the guard as it arrives): with no
    TMPDIR at all to write to, an edit still runs, and nothing is written there."""
    import tempfile

    nowhere = tmp_path / "no-tmpdir"  # a TMPDIR where nothing can be written (missing), as a full one
    monkeypatch.setattr(tempfile, "tempdir", str(nowhere))
    big = _png(1024, 1024) + b"\0" * (2 * 2**20)  # a reference of 2 MB (trailing bytes after IEND)
    response = call(door, "POST", "/v1/images/edits", data={"prompt": "make it blue", "size": "64x64", "steps": "1"},
                    files=[("image", ("a.png", big, "image/png"))])
    assert response.status_code == 200, response.text
    assert not nowhere.exists()
