"""Issue 35's 'done when', on a real app process (the random-weight model on the CPU) with the real
``openai`` client and ``prometheus_client``'s parser: readiness flips from 503 to 200 across a
start with ``--prewarm``; generations and edits come back in OpenAI's shapes; bad requests and bad
keys get OpenAI's error shape naming the field, and nothing is kept."""

from __future__ import annotations

import base64
import io
import time
import urllib.error
import urllib.request

import openai
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from tools.app_process import running_app

pytestmark = pytest.mark.slow
KEY = "room-key-0123456789abcdef"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("openai")
    (workdir / "keys").write_text(f"# the room's key\nroom:{KEY}\n")
    with running_app(workdir, "--model", "embedded-random", "--api-keys", str(workdir / "keys"),
                     "--prewarm", "64x64", ready=False, timeout=240) as url:
        answers = []
        deadline = time.monotonic() + 240
        while not answers or answers[-1][0] != 200:  # wait for the state, however long the load takes
            assert time.monotonic() < deadline, answers[-3:]
            answers.append(_get(url + "readyz"))
            time.sleep(0.1)
        yield url, workdir, answers


@pytest.fixture(scope="module")
def client(app):
    return openai.OpenAI(base_url=app[0] + "v1", api_key=KEY, max_retries=0)


def test_readyz_flips_from_503_to_200_across_the_prewarm(app):
    url, workdir, answers = app
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
    with urllib.request.urlopen(edited.data[0].url, timeout=10) as response:  # the app's own output route
        assert Image.open(io.BytesIO(response.read())).size == (64, 64)


def test_bad_requests_and_keys_get_the_error_shape_naming_the_field(app, client):
    url, workdir, _answers = app
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
