"""A room of viewers: concurrent clients against the in-process engine and against a replica pool.

``measure_room`` runs ``clients`` threads, each sending ``per_client`` requests one after the other
through ``Manager.generate`` (the app's door, routing and admission included), and returns the
wall time of the whole batch and every request's latency. ``p11_replicas`` (``python -m bench
--only P11``) runs the batch on two managers side by side, interleaved in a random order per
repetition: one serving in process, one with a pool of replicas. ``replica_killed`` (``python -m
bench.hardening``) kills a replica in the middle of such a batch and counts what was answered.
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench import stats
from bench.harness import start_manager
from bench.rows import make_row

PROMPT = "a red circle on a blue background"


def measure_room(manager, clients: int, per_client: int, size: int, steps: int = 4,
                 seed: int = 0) -> dict[str, Any]:
    """Every client's requests, all clients at once. Returns {"wall": s, "latencies": [s, ...],
    "answers": {request id: ("image", place) | ("error", message)}, "errors": [...]}: each request
    has a distinct seed (its id), so a lost or duplicated answer shows."""
    answers: dict[int, list[tuple[str, str]]] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    from backend.errors import StudioError

    def client(index: int) -> None:
        for k in range(per_client):
            rid = seed * 100000 + index * 1000 + k
            request = manager.validate(PROMPT, size, size, steps=steps, seed=rid, mode="eager")
            began = time.perf_counter()
            try:
                _image, result = manager.generate(request)
                answer = ("image", result.place)
            except StudioError as exc:
                answer = ("error", str(exc))
            with lock:
                latencies.append(time.perf_counter() - began)
                answers.setdefault(rid, []).append(answer)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"wall": time.perf_counter() - began, "latencies": latencies, "answers": answers,
            "sent": clients * per_client}


def _managers(tmp: Path, replicas: int):
    # The trained embedded model (the app's default): what a room would see.
    local = start_manager(tmp / "local", model="embedded")
    pool = start_manager(tmp / "pool", model="embedded", replicas=replicas)
    return local, pool


def p11_replicas(tmp: Path, quick: bool) -> list[dict]:
    """4 clients x 8 requests at 256x256: 2 replicas against the in-process engine, interleaved."""
    clients, per_client, reps = (2, 2, 2) if quick else (4, 8, 7)
    size, replicas = (128, 2) if quick else (256, 2)
    local, pool = _managers(tmp, replicas)
    walls: dict[str, list[float]] = {"in-process": [], "replicas": []}
    medians: dict[str, list[float]] = {"in-process": [], "replicas": []}
    try:
        for manager in (local, pool):  # one warm batch each: the replicas' first runs, the page cache
            measure_room(manager, clients, 1, size)
        sides = {"in-process": local, "replicas": pool}

        def batch(side: str, rep: int):
            def run() -> None:
                out = measure_room(sides[side], clients, per_client, size, seed=rep + 1)
                walls[side].append(out["wall"])
                medians[side].append(statistics.median(out["latencies"]))
            return run

        import random

        rng = random.Random(11)
        for rep in range(reps):
            order = list(sides)
            rng.shuffle(order)
            for side in order:
                batch(side, rep)()
        throughput = stats.summarise(stats.ratios(walls["in-process"], walls["replicas"]))
        latency = stats.summarise(stats.ratios(medians["replicas"], medians["in-process"]))
        absolute = {"in_process_batch_s": stats.spread(walls["in-process"]),
                    "replicas_batch_s": stats.spread(walls["replicas"]),
                    "in_process_median_latency_s": stats.spread(medians["in-process"]),
                    "replicas_median_latency_s": stats.spread(medians["replicas"])}
        note = (f"{clients} clients x {per_client} requests at {size}x{size}, embedded model, eager, "
                f"{replicas} replicas vs 1 in-process engine on {os.cpu_count()} cores")
        return [
            make_row("P11", f"room throughput, {replicas} replicas / 1 in-process engine "
                            f"({clients} clients x {per_client} at {size}x{size})", throughput, "x", ">= 1.5",
                     absolute=absolute, note=note),
            make_row("P11", f"room median per-request latency, {replicas} replicas / 1 in-process engine", latency,
                     "x", "<= 1.2", absolute=absolute, note=note),
        ]
    finally:
        pool.close()
        local.close()


def replica_killed(tmp: Path, clients: int = 5, per_client: int = 4) -> dict[str, Any]:
    """20 requests from 5 clients on 2 replicas; one replica is SIGKILLed once requests are running.
    Every request must be answered once: an image, or a clear error naming the replica."""
    manager = start_manager(tmp / "killed", replicas=2)
    pool = manager.engines["replicas"]
    try:
        victim = pool.replicas[0]
        pid = int(victim.rank_pids()[0])
        done: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: done.update(measure_room(manager, clients, per_client, 128,
                                                                          steps=8)))
        thread.start()
        deadline = time.monotonic() + 120
        while not pool._busy and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        thread.join(600)
        deadline = time.monotonic() + 120
        while (pool.replicas[0] is victim or pool.replicas[0].state != "ready") and time.monotonic() < deadline:
            time.sleep(0.1)
        answers = done.get("answers", {})
        errors = [a[1] for got in answers.values() for a in got if a[0] == "error"]
        return {"sent": done.get("sent", clients * per_client), "answered": sum(len(a) for a in answers.values()),
                "served": sum(a[0] == "image" for got in answers.values() for a in got),
                "clear_errors": sum("died while serving this request" in e for e in errors), "errors": len(errors),
                "lost": clients * per_client - len(answers),
                "duplicated": sum(len(a) > 1 for a in answers.values()),
                "restarted": pool.replicas[0] is not victim and pool.replicas[0].state == "ready",
                "error_sample": errors[:1]}
    finally:
        manager.close()
