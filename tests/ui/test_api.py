"""The public APIs of one launched app (the embedded model on the CPU, an API key, ``--prewarm``):
through gradio_client, `generate` and `status` and nothing else; through the real ``openai`` client
and ``prometheus_client``'s parser, issue 35's 'done when' — readiness flips from 503 to 200 across
the start, generations and edits come back in OpenAI's shapes, bad requests and bad keys get
OpenAI's error shape naming the field, and nothing is kept."""

import base64
import io
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
from gradio_client import Client
from gradio_client.exceptions import AuthenticationError
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOM_KEY
from tests.conftest import http_get as _get
from tools.app_process import running_app

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("own_tempdir")]  # gradio_client's download folders


@pytest.fixture(scope="module")
def app(launched_app):
    """(url, workdir) of the app the hardening and browser tests use too (tests/conftest.py)."""
    return launched_app[:2]


@pytest.fixture(scope="module")
def app_url(app):
    return app[0]


@pytest.fixture(scope="module")
def client(app_url):
    return openai.OpenAI(base_url=app_url + "v1", api_key=ROOM_KEY, max_retries=0)


def test_generate_and_status_endpoints(app_url):
    client = Client(app_url, verbose=False)
    status = client.predict(api_name="/status")
    assert status["state"] == "ready" and status["device"]["kind"] == "cpu"
    assert status["model"]["label"] == "embedded:tiny-flux2-klein"
    image, record = client.predict("a red fox", 128, 64, "compiled", 2, 11, 1.0, api_name="/generate")
    assert Path(image).is_file()
    assert (record["width"], record["height"], record["mode"], record["seed"]) == (128, 64, "compiled", 11)
    assert record["compiled"] is True and record["compiles"] == 1 and "path" not in record
    _image, again = client.predict("a red fox", 128, 64, "compiled", 2, 11, 1.0, api_name="/generate")
    assert again["compiled"] is False
    rows = client.predict(api_name="/status")["shapes"]
    assert {"mode": "compiled", "shape": "128x64", "state": "warm"}.items() <= rows[0].items()


def test_only_the_public_endpoints_are_listed(app_url):
    with urllib.request.urlopen(app_url + "gradio_api/info", timeout=10) as response:
        info = json.load(response)
    assert set(info["named_endpoints"]) == {"/generate", "/status"}
    assert not info.get("unnamed_endpoints")


@pytest.mark.parametrize("args, message", [
    (("a fox", 1000, 64, "eager", 2, 1, 1.0), "nearest valid size is 1008x64"),
    (("", 64, 64, "eager", 2, 1, 1.0), "prompt: is empty"),
    (("a fox", 64, 64, "turbo", 2, 1, 1.0), "mode: must be one of"),
    (("a fox", 64, 64, "eager", 0, 1, 1.0), "steps: must be between 1 and 50"),
])
def test_user_errors_arrive_as_clear_messages(app_url, args, message):
    client = Client(app_url, verbose=False)
    with pytest.raises(Exception, match=message):
        client.predict(*args, api_name="/generate")
    assert client.predict(api_name="/status")["state"] == "ready"


def test_a_tp_request_while_the_group_is_not_running_runs_in_process_and_says_why(app_url):
    """The page, the API and Compare follow one rule: the group not running (never started, stopped,
    starting, dead) means a tensor-parallel request runs in process, recorded as such."""
    client = Client(app_url, verbose=False)
    _png, record = client.predict("a fox", 64, 64, "tp", 2, 1, 1.0, api_name="/generate")
    assert (record["mode"], record["requested_mode"], record["world_size"]) == ("eager", "tp", 1)
    assert "operator has not started the tensor-parallel group" in record["degraded"]


def test_monitoring_endpoint_is_off(app_url):
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(app_url + "monitoring", timeout=5)
    # Gradio's own refusal when monitoring is off (routes.py: 403 "Monitoring is not enabled."),
    # not an error of a monitoring page that is there (a 500), nor a login wall in front of one.
    assert err.value.code == 403 and "Monitoring is not enabled" in err.value.read().decode()


def test_auth_protects_page_and_api(tmp_path):
    with running_app(tmp_path, "--auth", "demo:s3cret", ready=False) as url:
        # No credentials: the client cannot even read the app's config (401).
        with pytest.raises(AuthenticationError, match=re.escape(f"Could not load {url} as credentials were "
                                                                "not provided. Please login.")):
            Client(url, verbose=False)
        # Wrong ones: Gradio's /login refuses them (not with a 401, so gradio_client raises a plain
        # ValueError, not its AuthenticationError).
        for wrong in (("demo", "wrong"), ("nobody", "s3cret")):
            with pytest.raises(ValueError, match=f"^{re.escape(f'Could not login to {url}.')}$") as refused:
                Client(url, auth=wrong, verbose=False)
            assert type(refused.value) is ValueError, wrong
        client = Client(url, auth=("demo", "s3cret"), verbose=False)
        assert client.predict(api_name="/status")["model"]["spec"] == "embedded-random"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "config", timeout=5)


def test_the_documented_api_example_runs_as_written(app_url):
    readme = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    block = next(b for b in readme.split("```python")[1:] if 'api_name="/generate"' in b).split("```")[0]
    assert "from gradio_client import Client" in block
    # As written, but pointed at this test's app instead of the default port.
    namespace = {"Client": lambda _url: Client(app_url, verbose=False)}
    exec(block.replace("from gradio_client import Client", ""), namespace)
    assert namespace["record"]["width"] == 512 and namespace["record"]["seed"] == 42
    assert Path(namespace["png_path"]).is_file() and namespace["status"]["state"] == "ready"


def test_only_prompt_is_required_and_view_api_describes_every_parameter(app_url):
    client = Client(app_url, verbose=False)
    image, record = client.predict("a red fox", api_name="/generate")
    assert (record["width"], record["height"], record["mode"], record["steps"], record["guidance"]) == (
        1024, 1024, "eager", 4, 1.0)
    assert Path(image).is_file() and 0 <= record["seed"] < 2**53
    params = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/generate"]["parameters"]
    described = {p["parameter_name"]: (p["python_type"]["type"], p["parameter_has_default"], p["parameter_default"])
                 for p in params}
    assert described == {"prompt": ("str", False, None), "width": ("int", True, 1024), "height": ("int", True, 1024),
                         "mode": ("str", True, "eager"), "steps": ("int", True, 4), "seed": ("int", True, -1),
                         "guidance": ("float", True, 1.0), "images": ("list[filepath]", True, None),
                         "count": ("int", True, 1)}
    assert all(p["python_type"]["description"] for p in params)
    _image, exact = client.predict(prompt="x", width=64, height=64, steps=1, seed=2**63 - 1, api_name="/generate")
    assert exact["seed"] == 2**63 - 1


def test_an_edit_with_references_and_a_batch_through_gradio_client(app_url, tmp_path):
    """Issue 34: /generate takes reference images (gradio_client's handle_file) and a count; the
    record names the signature, each reference's SHA-256 and fit, and the batch."""
    import hashlib

    from gradio_client import handle_file
    from PIL import Image

    Image.new("RGB", (300, 200), "red").save(tmp_path / "wide.png")
    client = Client(app_url, verbose=False)
    image, record = client.predict("a red fox", 64, 64, "eager", 2, 3, 1.0, [handle_file(tmp_path / "wide.png")], 2,
                                   api_name="/generate")
    assert Path(image).is_file() and record["count"] == 2 and "paths" not in record
    assert record["signature"] == "64x64*2+ref1216x832"  # 3:2 fitted to the 3:2 preset
    assert record["references"] == [{"sha256": hashlib.sha256((tmp_path / "wide.png").read_bytes()).hexdigest(),
                                     "source": "300x200", "fitted": "1216x832", "fit": "crop"}]
    (tmp_path / "x.png").write_text("not an image")
    with pytest.raises(Exception, match="images: reference 1 is not an image"):
        client.predict("a fox", 64, 64, "eager", 2, 3, 1.0, [handle_file(tmp_path / "x.png")], api_name="/generate")


# --- the room: roles, the Host header -------------------------------------------------------------

def _room_state(url):
    status = Client(url, verbose=False).predict(api_name="/status")
    return (status["warm_only"], status["tp"]["state"], status["replicas"]["size"], status["warmup"],
            status["cache"]["bytes"])


def test_every_operator_event_is_refused_for_an_anonymous_or_forged_caller(app_url):
    from tools.room_client import OPERATOR_EVENTS, refused_operator_events

    before = _room_state(app_url)
    for cookie in (None, "forged-key"):
        rows = refused_operator_events(app_url, cookie)
        assert len(rows) == len(OPERATOR_EVENTS) and all(refused for _event, refused, _error in rows), rows
    assert _room_state(app_url) == before


def test_the_replica_buttons_are_refused_for_an_anonymous_or_forged_caller(app_url):
    # (tools/room_client.OPERATOR_EVENTS predates the replica controls.)
    from tools.room_client import config, event_index, post_event

    before, cfg = _room_state(app_url), config(app_url)
    for cookie in (None, "forged-key"):
        for elem_id, data in (("replica-start", [2]), ("replica-stop", [])):
            answer = post_event(app_url, event_index(cfg, elem_id, "click"), data, cookie=cookie)
            error = str((answer.get("output") or {}).get("error") or "")
            assert answer.get("success") is False and "Not allowed for a viewer" in error, (elem_id, answer)
    assert _room_state(app_url) == before


def test_the_operator_link_makes_an_operator(app):
    from tools.room_client import config, event_index, operator_cookie, post_event

    url, workdir = app
    line = next(each for each in (workdir / "app.log").read_text().splitlines() if each.startswith("operator link"))
    token = line.rsplit("token=", 1)[1].strip()
    with pytest.raises(urllib.error.HTTPError) as wrong:
        urllib.request.urlopen(url + "operator?token=guess", timeout=10)
    assert wrong.value.code == 403
    cookie = operator_cookie(url, token)
    index = event_index(config(url), "warm-only", "input")
    assert post_event(url, index, [True], cookie=cookie)["success"] is True
    assert _room_state(url)[0] is True
    assert post_event(url, index, [False], cookie=cookie)["success"] is True
    assert _room_state(url)[0] is False


@pytest.mark.parametrize("host", ["evil.example", "evil.example:7860", "127.0.0.1.nip.io", "[fe80::1]"])
def test_a_loopback_app_refuses_other_host_names(app_url, host):
    """DNS rebinding: a page elsewhere can point a name at 127.0.0.1, but it cannot fake the Host."""
    request = urllib.request.Request(app_url + "gradio_api/info", headers={"Host": host})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 421
    port = app_url.rsplit(":", 1)[1].strip("/")
    for good in (f"127.0.0.1:{port}", f"localhost:{port}"):
        with urllib.request.urlopen(urllib.request.Request(app_url, headers={"Host": good}), timeout=10) as page:
            assert page.status == 200


def test_readyz_flips_from_503_to_200_across_the_prewarm(launched_app):
    url, workdir, answers = launched_app
    assert answers[0][0] == 503 and ("loading" in answers[0][1] or "warming" in answers[0][1]), answers[0]
    assert {code for code, _ in answers} == {503, 200} and answers[-1][0] == 200
    assert _get(url + "healthz")[0] == 200 and _get(url + "ping")[0] == 200
    assert "the Images API (/v1/images) takes 1 API key(s)" in (workdir / "app.log").read_text()


def test_generate_and_edit_with_the_openai_client(app, client):
    result = client.images.generate(prompt="a red circle", size="64x64", n=2,
                                    extra_body={"steps": 2, "seed": 7, "mode": "eager"})
    assert len(result.data) == 2
    image = Image.open(io.BytesIO(base64.b64decode(result.data[0].b64_json)))
    assert image.size == (64, 64)
    record = result.model_extra["neuron_studio"]
    assert (record["signature"], record["seed"], record["engine"]) == ("64x64*2", 7, "in-process")
    buffer = io.BytesIO()
    Image.new("RGB", (96, 64), "blue").save(buffer, "PNG")
    edited = client.images.edit(image=[("ref.png", buffer.getvalue(), "image/png")], prompt="make it red",
                                size="64x64", response_format="url", extra_body={"steps": 2})
    assert "+ref" in edited.model_extra["neuron_studio"]["signature"]
    assert "/v1/images/files/" in edited.data[0].url  # no server path: an id that opens for its key only
    opened = urllib.request.Request(edited.data[0].url, headers={"Authorization": f"Bearer {client.api_key}"})
    with urllib.request.urlopen(opened, timeout=10) as response:
        assert Image.open(io.BytesIO(response.read())).size == (64, 64)


def test_bad_requests_and_keys_get_the_error_shape_naming_the_field(app, client):
    url, workdir = app
    kept = sorted((workdir / "outputs").iterdir())
    cases = [(dict(prompt="a fox", size="100x64"), "size", "multiple of 16"),
             (dict(prompt="a fox", n=5), "n", "count (n)")]
    for kwargs, param, words in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            client.images.generate(**kwargs)
        assert refused.value.body["param"] == param and words in refused.value.body["message"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.images.edit(image=("ref.png", b"GIF89a not really", "image/png"), prompt="x")
    assert refused.value.body["param"] == "image"
    for key in ("-", "wrong-key-0123456789abc"):
        with pytest.raises(openai.AuthenticationError) as refused:
            openai.OpenAI(base_url=url + "v1", api_key=key, max_retries=0).images.generate(prompt="x")
        assert refused.value.body["code"] == "invalid_api_key" and refused.value.body["param"] == "authorization"
    assert sorted((workdir / "outputs").iterdir()) == kept


def test_metrics_parse_and_count_what_ran(app, client):
    url = app[0]
    client.images.generate(prompt="a red circle", size="64x64", extra_body={"steps": 1})
    code, text = _get(url + "metrics")
    assert code == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("neuron_studio_requests_total", (("mode", "eager"), ("outcome", "ok")))] >= 3
    assert samples[("neuron_studio_requests_total", (("mode", "eager"), ("outcome", "invalid")))] >= 2
    assert samples[("neuron_studio_engine_state", (("engine", "in-process"), ("state", "ready")))] == 1
    assert samples[("neuron_studio_state", (("state", "ready"),))] == 1
