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


def _all_at_once(client, clients: int) -> float:
    """Run ``client(index)`` for every client at once; the wall seconds until the last one is done."""
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began


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

    return {"wall": _all_at_once(client, clients), "latencies": latencies, "answers": answers,
            "sent": clients * per_client}


def measure_api_room(url: str, clients: int, per_client: int, size: int, steps: int = 4, seed: int = 0) -> dict:
    """``measure_room`` through the page's public API (``/generate``, gradio_client, one session per
    client): the whole app in the path — the server, Gradio's queue, the job board, the engines."""
    from gradio_client import Client

    latencies: list[float] = []
    lock = threading.Lock()
    sessions = [Client(url, verbose=False) for _ in range(clients)]

    def client(index: int) -> None:
        for k in range(per_client):
            began = time.perf_counter()
            sessions[index].predict(PROMPT, size, size, "eager", steps, seed * 100000 + index * 1000 + k, 1.0,
                                    api_name="/generate")
            with lock:
                latencies.append(time.perf_counter() - began)

    return {"wall": _all_at_once(client, clients), "latencies": latencies}


def p11_api(tmp: Path, quick: bool) -> list[dict]:
    """P11 through the page's API: two apps, one serving in process and one with 2 replicas (each
    ``python app.py``), the same batches interleaved."""
    import random

    from tools.app_process import running_app

    clients, per_client, reps = (2, 2, 2) if quick else (4, 8, 7)
    size, replicas = (128, 2) if quick else (256, 2)
    walls: dict[str, list[float]] = {"in-process": [], "replicas": []}
    for name in ("api-local", "api-pool"):
        (tmp / name).mkdir()
    with running_app(tmp / "api-local", "--model", "embedded") as local, \
            running_app(tmp / "api-pool", "--model", "embedded", "--replicas", str(replicas), timeout=600) as pool:
        sides = {"in-process": local, "replicas": pool}
        for url in sides.values():  # one warm batch each: the replicas' first runs
            measure_api_room(url, clients, 1, size)
        rng = random.Random(12)
        for rep in range(reps):
            order = list(sides)
            rng.shuffle(order)
            for side in order:
                walls[side].append(measure_api_room(sides[side], clients, per_client, size, seed=rep + 1)["wall"])
    throughput = stats.summarise(stats.ratios(walls["in-process"], walls["replicas"]))
    return [make_row("P11", f"room throughput through the page's API (/generate), {replicas} replicas / 1 in-process "
                            f"engine ({clients} clients x {per_client} at {size}x{size})", throughput, "x", ">= 1.5",
                     absolute={"in_process_batch_s": stats.spread(walls["in-process"]),
                               "replicas_batch_s": stats.spread(walls["replicas"])},
                     note=f"two apps (python app.py, --replicas {replicas} for one), gradio_client sessions, embedded "
                          f"model, eager, {os.cpu_count()} cores")]


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
        rows = [
            make_row("P11", f"room throughput, {replicas} replicas / 1 in-process engine "
                            f"({clients} clients x {per_client} at {size}x{size})", throughput, "x", ">= 1.5",
                     absolute=absolute, note=note),
            make_row("P11", f"room median per-request latency, {replicas} replicas / 1 in-process engine", latency,
                     "x", "<= 1.2", absolute=absolute, note=note),
        ]
    finally:
        pool.close()
        local.close()
    return rows + p11_api(tmp, quick)


FIRST_VIEWER_RUNS = 30
SIZE = 128  # each run long enough (4 steps) that the first viewer's thirty are still waiting


def _doors(manager):
    """Each door to the service, as a function ``send(session, seed)`` that runs one request as that
    viewer: the page's Generate (its handler), gradio_client's ``/generate`` (its handler) and the
    Images API (the FastAPI app, over httpx's in-process transport)."""
    import asyncio
    import types

    import httpx

    from ui.handlers import Studio
    from web.api import ApiKeys, build_api

    studio = Studio(manager)

    def page(session: str):
        return types.SimpleNamespace(session_hash=session, headers={}, cookies={})

    def through_page(session: str, seed: int) -> None:
        studio.studio_tab.generate_from_page(PROMPT, SIZE, SIZE, "eager", 4, 1.0, seed, False, [], page=page(session),
                                  progress=lambda *a, **k: None)

    def through_generate(session: str, seed: int) -> None:
        studio.api.api_generate(PROMPT, SIZE, SIZE, "eager", 4, seed, 1.0, page=page(session),
                                progress=lambda *a, **k: None)

    keys = {name: f"{name}-key-0123456789" for name in ("first", "second")}
    api = build_api(manager, ApiKeys(keys))

    def through_images_api(session: str, seed: int) -> None:
        async def go():
            transport = httpx.ASGITransport(app=api, client=("127.0.0.1", 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=600) as http:
                answer = await http.post("/v1/images/generations",
                                         json={"prompt": PROMPT, "size": f"{SIZE}x{SIZE}", "steps": 4, "seed": seed},
                                         headers={"authorization": f"Bearer {keys[session]}"})
                answer.raise_for_status()
        asyncio.run(go())

    return {"page": through_page, "/generate": through_generate, "Images API": through_images_api}


def fair_turn(manager, send) -> tuple[float, int]:
    """A first viewer sends ``FIRST_VIEWER_RUNS`` runs at once; once they are all on the board and
    one has finished (all of them entered: waiting, running or done), a second viewer sends one.
    Returns how many of the first viewer's runs started
    after the second's was sent and before it started (its wait, in runs), and how many of the
    first viewer's were still waiting when it was sent."""
    threads = [threading.Thread(target=send, args=("first", 1000 + i)) for i in range(FIRST_VIEWER_RUNS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 600
    while len(manager.board.jobs()) + len(manager.records) < FIRST_VIEWER_RUNS or len(manager.records) < 1:
        if time.monotonic() > deadline:
            raise TimeoutError("the first viewer's runs never reached the board")
        time.sleep(0.005)
    sent, waiting = time.time(), sum(1 for job in manager.board.jobs() if job.state.value == "waiting")
    send("second", 1)
    for thread in threads:
        thread.join(600)
    second = next(r for r in manager.records if r.seed == 1)
    return float(sum(1 for r in manager.records if r.seed >= 1000 and sent < r.started_at < second.started_at)), waiting


def p14_fair_turn(tmp: Path, quick: bool) -> list[dict]:
    """The second viewer's wait behind a first viewer's 30 runs, in runs, through each door."""
    manager = start_manager(tmp / "room", max_queued_per_viewer=FIRST_VIEWER_RUNS)
    try:
        rows = []
        for door, send in _doors(manager).items():
            manager.records.clear()
            waited, waiting = fair_turn(manager, send)
            rows.append(make_row("P14", f"a second viewer's wait behind a first viewer's {FIRST_VIEWER_RUNS} runs, "
                                        f"through {door} (runs)", None, "runs", "<= 1.0", count=waited,
                                 absolute={"first_viewers_runs_waiting_when_sent": waiting},
                                 note="the runs of the first viewer that started between the second's request and "
                                      f"its own start ({SIZE}x{SIZE}, 4 steps, random-weight model, "
                                      "in-process engine)"))
        return rows
    finally:
        manager.close()


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
