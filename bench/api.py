"""P13: the OpenAI-compatible Images API (issue 35) against the Gradio API for the same request, and
what a Prometheus scrape costs while the app is busy.

One app process (the random-weight model on the CPU, eager). The same request — prompt, size,
steps, seed — goes through ``openai``'s ``images.generate`` and through ``gradio_client``'s
``/generate``, interleaved in a random order per repetition (``bench.stats.interleaved``): the ratio
of their wall-clock seconds is the API's overhead (goal <= 1.02). Then 20 requests are sent at once
(20 threads) and ``/metrics`` is scraped over and over until they are done: the scrape's median
seconds under that load, and how many requests were waiting or running when it was read.
"""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request
from pathlib import Path

from bench import stats
from bench.rows import make_row, timed_ratio

PROMPT = "a red circle in the centre, on a white background"
CONCURRENT = 20


def p13_api(tmp: Path, quick: bool) -> list[dict]:
    import openai
    from gradio_client import Client

    from tools.app_process import running_app

    size, reps = (128, 6) if quick else (256, 25)
    with running_app(tmp, "--model", "embedded-random", "--mode", "eager", "--steps", "2",
                     "--max-queued-per-viewer", str(CONCURRENT), timeout=300) as url:
        client = openai.OpenAI(base_url=url + "v1", api_key="-", max_retries=0)
        gradio = Client(url, verbose=False)

        def through_openai():
            client.images.generate(prompt=PROMPT, size=f"{size}x{size}", extra_body={"steps": 2, "seed": 1})

        def through_gradio():
            gradio.predict(PROMPT, size, size, "eager", 2, 1, 1.0, api_name="/generate")

        through_openai(), through_gradio()  # warm both paths
        measured = stats.interleaved({"openai": through_openai, "gradio": through_gradio}, reps)
        wall, _cpu = timed_ratio(measured, "openai", "gradio")
        rows = [make_row("P13", f"Images API overhead at {size}x{size}: openai images.generate / gradio_client "
                                "/generate, same request", wall, "x", "<= 1.02", None,
                         {"openai_s": stats.spread(measured["wall"]["openai"]),
                          "gradio_s": stats.spread(measured["wall"]["gradio"])},
                         note="the bench process' CPU is not the server's: wall clock only")]
        rows.append(_scrape_under_load(url, client, size))
    return rows


def _scrape_under_load(url: str, client, size: int) -> dict:
    done = threading.Event()
    errors: list[str] = []

    def one(seed: int) -> None:
        try:
            client.images.generate(prompt=PROMPT, size=f"{size}x{size}", extra_body={"steps": 2, "seed": seed})
        except Exception as exc:  # noqa: BLE001 - counted in the row
            errors.append(type(exc).__name__)

    threads = [threading.Thread(target=one, args=(seed,)) for seed in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    waiter = threading.Thread(target=lambda: ([t.join() for t in threads], done.set()))
    waiter.start()
    seconds, in_flight = [], []
    while not done.is_set() or len(seconds) < 3:
        began = time.perf_counter()
        with urllib.request.urlopen(url + "metrics", timeout=30) as response:
            text = response.read().decode()
        seconds.append(time.perf_counter() - began)
        in_flight.append(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                             if line.startswith(("neuron_studio_queue_depth{", "neuron_studio_busy_workers{"))))
    waiter.join()
    return make_row("P13", f"/metrics scrape seconds while {CONCURRENT} Images API requests run at once (median of "
                           f"{len(seconds)} scrapes)", None, "s", None,
                    absolute={"scrape_s": stats.spread(seconds), "requests_in_flight_max": max(in_flight),
                              "errors": len(errors)},
                    count=round(statistics.median(seconds), 4),
                    note=f"{len(errors)} of {CONCURRENT} requests failed" if errors else "")
