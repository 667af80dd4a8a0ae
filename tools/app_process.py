"""Start ``python app.py`` as a process on a free port and wait until its page (and model) are up.

One helper for the browser and API tests, the benchmarks and the hardening figures::

    with running_app(workdir, "--compile-backend", "aot_eager") as url:
        ...
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def operator_token(workdir: Path) -> str:
    """The operator token the app printed at start (its link's ``token=``), from its log."""
    for line in (Path(workdir) / "app.log").read_text().splitlines():
        if line.startswith("operator link"):
            return line.rsplit("token=", 1)[1].strip()
    raise LookupError("the app printed no operator link")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(workdir: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """Start `python app.py` on a free port, its output in ``workdir/app.log``: (the process, its URL)."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "NEURON_STUDIO_OUTPUT_DIR": str(workdir / "outputs")}
    with open(workdir / "app.log", "w") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), *flags],
                                cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}/"


def wait_up(proc: subprocess.Popen, url: str, workdir: Path, ready: bool = True, timeout: float = 120) -> None:
    """Wait until the app's page is served and, with ``ready``, its model has loaded (or failed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError((workdir / "app.log").read_text()) from None
            if time.monotonic() > deadline:
                raise TimeoutError("the page was not served") from None
            time.sleep(0.2)
    if ready:
        from gradio_client import Client

        client = Client(url, verbose=False)
        while client.predict(api_name="/status")["state"] not in ("ready", "failed"):
            if time.monotonic() > deadline:
                raise TimeoutError("the model did not load")
            time.sleep(0.2)


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def running_app(workdir: Path, *flags: str, ready: bool = True, timeout: float = 120):
    """Start `python app.py` on a free port; yield its URL once the page (and model) are up."""
    proc, url = start_app(workdir, *flags)
    try:
        wait_up(proc, url, workdir, ready, timeout)
        yield url
    finally:
        stop_app(proc)
