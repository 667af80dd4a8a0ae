"""Traffic: many clients at once through the HTTP API (``run_load``: every request answered once, each
client's in its order, the queue seen) and many requests in a row in one process (``run_memory``:
RSS growth). Figures of ``python -m bench.hardening``; tests/test_hardening.py holds each."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil


def run_load(url: str, clients: int = 5, per_client: int = 4) -> dict[str, Any]:
    """clients x per_client requests at once; every answer accounted for, in each client's order."""
    from gradio_client import Client

    results: dict[int, list[dict]] = {}
    saw_queue = threading.Event()
    errors: list[str] = []

    def client_run(c: int) -> None:
        from gradio_client.utils import Status

        client = Client(url, verbose=False)
        jobs = []
        for i in range(per_client):
            job = client.submit("load test", 128, 128, "eager", 4, 1000 * c + i, 1.0, api_name="/generate")
            # The next request goes out once this one has joined the queue, so the client's own order
            # is the order the server received them in.
            while job.status().code in (Status.STARTING, Status.JOINING_QUEUE) and not job.done():
                time.sleep(0.005)
            jobs.append(job)
        for job in jobs:
            while not job.done():
                status = job.status()
                # The service's job board says a run's place in its progress ("waiting for your turn — place N").
                if any((unit.desc or "").startswith("waiting for your turn") for unit in status.progress_data or []):
                    saw_queue.set()
                time.sleep(0.02)
        out = []
        for job in jobs:
            try:
                out.append(job.result()[1])
            except Exception as exc:  # noqa: BLE001 - counted as unanswered
                errors.append(str(exc))
        results[c] = out

    threads = [threading.Thread(target=client_run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    records = [r for rs in results.values() for r in rs]
    seeds = sorted(r["seed"] for r in records)
    expected = sorted(1000 * c + i for c in range(clients) for i in range(per_client))
    in_order = all([r["seed"] for r in sorted(rs, key=lambda r: r["started_at"])] == [r["seed"] for r in rs]
                   for rs in results.values())
    return {"sent": clients * per_client, "answered": len(records), "lost_or_duplicated": seeds != expected,
            "each_client_in_order": in_order, "queue_position_seen": saw_queue.is_set(), "errors": errors}


def run_memory(requests: int = 100) -> dict[str, Any]:
    """RSS growth over sequential requests in one process (after a warm-up of 10)."""
    import gc

    from backend.serving.manager import Manager
    from backend.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        manager = Manager(Settings(device="cpu", dtype="float32", compile_backend="aot_eager",
                                   cache_dir=Path(tmp) / "c", output_dir=Path(tmp) / "o"))
        manager.start()
        request = manager.validate("memory", 64, 64, steps=2, seed=1, mode="eager")
        for _ in range(10):
            manager.generate(request)
        gc.collect()
        before = psutil.Process().memory_info().rss
        for i in range(requests):
            manager.generate(dataclasses.replace(request, seed=i))
        gc.collect()
        after = psutil.Process().memory_info().rss
        manager.close()
    return {"requests": requests, "rss_before_MiB": before / 2**20, "rss_after_MiB": after / 2**20,
            "growth_MiB": (after - before) / 2**20}

