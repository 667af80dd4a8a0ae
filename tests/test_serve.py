"""`python app.py` serves a page and the generate/status API while the model loads in the background."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_app_serves_the_page_and_the_api(tmp_path):
    from gradio_client import Client

    port = _free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "NEURON_STUDIO_OUTPUT_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "page not served"
                time.sleep(0.3)
        client = Client(url, verbose=False)
        while client.predict(api_name="/status")["state"] != "ready":
            assert time.monotonic() < deadline, "model never became ready"
            time.sleep(0.3)
        status = client.predict(api_name="/status")
        assert status["device"]["kind"] == "cpu" and status["model"]["label"] == "embedded:tiny-flux2-klein"
        image, record = client.predict("a red fox", 64, 64, "eager", 2, 11, api_name="/generate")
        assert Path(image).is_file() and record["seed"] == 11 and record["width"] == 64
        with pytest.raises(Exception, match="nearest valid size is 64x64"):
            client.predict("a red fox", 60, 64, "eager", 2, 11, api_name="/generate")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "monitoring", timeout=5)  # the monitoring endpoint is off
    finally:
        proc.terminate()
        proc.wait(timeout=30)
