"""Time to UI (P6): a fresh app process from its start to the page's first HTTP 200, against its
floor, a bare Gradio Blocks app launched the same way (``bench.bare_gradio``), and to the model
being ready."""

from __future__ import annotations

import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench import BENCH_MODEL, ROOT, stats
from bench.harness import clean_env
from bench.rows import make_row


def _time_to_ui(tmp: Path, bare: bool = False) -> tuple[float, float | None]:
    """Seconds from process start to the page's first HTTP 200, and to the model being ready (the
    app), for the app or (``bare``) a bare Gradio Blocks app launched the same way."""
    from tools.app_process import free_port

    port = free_port()
    env = clean_env()
    cmd = ([sys.executable, "-m", "bench.bare_gradio", str(port)] if bare else
           [sys.executable, str(ROOT / "app.py"), "--model", BENCH_MODEL, "--port", str(port),
            "--cache-dir", str(tmp / "cache"), "--output-dir", str(tmp / "out")])
    began = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT if bare else tmp, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        page = ready = client = None
        while (page is None or (ready is None and not bare)) and time.monotonic() - began < 120:
            try:
                if page is None:
                    with urllib.request.urlopen(url, timeout=1):
                        page = time.monotonic() - began
                if not bare:
                    from gradio_client import Client

                    # One client, asking every 0.1 s: a new client each time fetched the page's
                    # whole config, and that load on the 2 cores slowed the very start it timed.
                    client = client or Client(url, verbose=False)
                    if client.predict(api_name="/status")["state"] == "ready":
                        ready = time.monotonic() - began
                        break
                    time.sleep(0.08)
            except OSError:
                pass
            time.sleep(0.02)
        if page is None or (ready is None and not bare):
            raise RuntimeError("the app did not come up")
        return page, ready
    finally:
        proc.terminate()
        proc.wait(30)


def p6_time_to_ui(tmp: Path, quick: bool) -> list[dict]:
    """Process start -> the page's first HTTP 200, the app against its floor: a bare Gradio Blocks
    app with the same launch options (``bench.bare_gradio``), in a random order per repetition."""
    rng = random.Random(6)
    app, bare, ready = [], [], []
    for _ in range(3 if quick else 9):
        for side in rng.sample(["app", "bare"], 2):
            page, model_ready = _time_to_ui(tmp, bare=side == "bare")
            (bare if side == "bare" else app).append(page)
            if side == "app":
                ready.append(model_ready)
    ratio = stats.summarise(stats.ratios(app, bare))
    return [
        make_row("P6", "time to UI: process start -> HTTP 200 from the page, app / bare Gradio Blocks app "
                       "(same Gradio, same launch options)", ratio, "x", "<= 1.10", None,
                 {"app_s": stats.spread(app), "bare_s": stats.spread(bare)}),
        make_row("P6", "time to UI: process start -> model ready (tiny model)", stats.summarise(ready), "s", None),
    ]
