"""P15, the Ray Serve engine (``backend.engines.ray_serve``) on a real local Ray cluster.

``p15_ray_serve`` (``python -m bench --only P15``) starts a ``ray.cluster_utils.Cluster`` of a head
that offers no CPU and two worker nodes of one CPU each (each Serve replica asks for one CPU, so one
lands on each node and Ray sets its ``OMP_NUM_THREADS`` to 1), and two managers in this process: one
serving from a Serve deployment of 2 replicas (``--ray``), one in process. Ray starts its workers at
nice 15 (``worker_niceness``) and this process runs at 0: on a busy machine a replica would yield to
this process and the cluster's daemons where the in-process engine does not, so the cluster's workers
run at 0 too. Two
rows, each measured side by side, in an order drawn at random per repetition (``bench/stats.py``):

- **throughput, 2 replicas / 1**: the same requests (``measure_room``) with two clients at once, both
  replicas busy, against one client, one request at a time. Both sides run on the one deployment:
  the second is what a deployment of one replica serves, since the app's job board lets an engine
  run as many requests at once as it has running replicas (``RayServeEngine.capacity``), so the
  board would hold a second client's request until the first is done, as one client does, and a
  replica takes one request at a time anyway (``max_ongoing_requests`` 1).
- **the Ray hop**: one warm request through the Ray engine (the door, the job board, Serve's handle,
  the stream of progress events, the replica) against the same request on the in-process engine,
  whose torch is held to one thread for the row, as a replica's is: the ratio is the hop, not a
  difference in threads. The hop is about a fixed cost, so the full run measures it at 256x256 and
  512x512 (``--quick``: 128x128 only).

- **autoscaling** (the full run only, an info row: ``p15_autoscaling``): a deployment of 1 replica with
  bounds 1 and 2 under two clients asking without pause, the seconds until the second runs.

Each row's note gives the share of the CPU other processes took while it ran (``backend.hardware.load``;
the cluster's processes are this one's children, so they count as ours).

Ray is optional (``requirements-ray.txt``): without it the rows are not measured and say so.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from bench import BENCH_MODEL, stats
from bench.harness import start_manager
from bench.room import PROMPT, measure_room
from bench.rows import make_row


def _cluster():
    from ray.cluster_utils import Cluster

    # Ray starts its workers (the Serve replicas) at nice 15 (its worker_niceness), below this process's 0:
    # on a busy machine a replica would yield where the in-process side does not (the module's docstring).
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "_system_config": {"worker_niceness": 0}})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    return cluster


def p15_ray_serve(tmp: Path, quick: bool) -> list[dict]:
    """2 Serve replicas against 1 (throughput), and one warm request through Ray against in process."""
    try:
        import ray
    except ImportError:
        return [make_row("P15", "Ray Serve: not measured (ray is not installed: pip install -r requirements-ray.txt)",
                         None, "", None, note="ray missing")]
    import torch

    from backend.hardware.load import CpuLoad

    size, steps = (128, 2) if quick else (256, 4)
    # 35 throughput repetitions: enough to decide a ratio near 1.6 (a run of 11 left it inconclusive)
    per_client, reps, hops = (2, 2, 3) if quick else (4, 35, 21)
    sizes = (size,) if quick else (size, 512)  # the hop is a fixed cost: its share shrinks as a run grows
    cluster = _cluster()
    threads = torch.get_num_threads()
    served, local = None, None
    try:
        served = start_manager(tmp / "ray", model=BENCH_MODEL, ray=cluster.address, ray_replicas=2)
        local = start_manager(tmp / "local", model=BENCH_MODEL)
        torch.set_num_threads(1)  # the in-process side computes as one replica does
        seen = served.status().ray
        placed = sorted(r["node"] for r in seen["replicas"])
        assert seen["ready"] == 2 and len(set(placed)) == 2, seen  # one replica on each worker node
        for manager in (served, local):  # a warm batch each: the replicas' first runs, the page cache
            for hop_size in sizes:
                measure_room(manager, 2, 1, hop_size, steps)

        # Throughput: the same 2 x per_client requests, two in flight against one at a time, at each size:
        # the app's own work a request (the job board, the stream, the PNG) shares the 2 cores with the
        # replicas, so its share, like the hop's, shrinks as a run grows.
        batches = {"2 replicas": (2, per_client), "1 replica": (1, 2 * per_client)}
        done = {side: 0 for side in batches}

        def batch(side: str, batch_size: int):
            def run() -> None:
                done[side] += 1  # each batch its own seeds: a lost or repeated answer would show
                clients, each = batches[side]
                out = measure_room(served, clients, each, batch_size, steps, seed=done[side])
                failed = [a for answers in out["answers"].values() for a in answers if a[0] != "image"]
                assert not failed and len(out["answers"]) == out["sent"], failed  # a fast failure is no throughput
            return run

        wall, others = {}, {}
        for batch_size in sizes:
            began = CpuLoad.mark()  # this process's tree (the cluster included) apart: the others' share
            wall[batch_size] = stats.interleaved({side: batch(side, batch_size) for side in batches}, reps,
                                                 seed=15)["wall"]
            others[("throughput", batch_size)] = CpuLoad.during(began)
        places = {r["place"] for r in served.status().ray["replicas"]}

        # The hop: one warm request at a time, through Ray and in process.
        counter = iter(range(1, 10 ** 6))

        def one(manager, hop_size: int):
            return lambda: manager.generate(manager.validate(PROMPT, hop_size, hop_size, steps=steps,
                                                             seed=next(counter), mode="eager"))

        hop = {}
        for hop_size in sizes:
            began = CpuLoad.mark()
            hop[hop_size] = stats.interleaved({"ray": one(served, hop_size), "in-process": one(local, hop_size)},
                                              hops, seed=16)["wall"]
            others[hop_size] = CpuLoad.during(began)
    finally:
        torch.set_num_threads(threads)
        for manager in (served, local):
            if manager is not None:
                manager.close()
        ray.shutdown()
        cluster.shutdown()

    def share(key) -> str:
        return "unknown" if others[key] is None else f"{100 * others[key]:.0f} %"

    note = (f"a local Ray cluster (ray {ray.__version__}): a head without CPUs and 2 worker nodes of 1 CPU each, "
            f"on {os.cpu_count()} cores; Serve replicas of 1 CPU (one thread, nice 0 as this process), the "
            f"random-weight model, eager, "
            f"{steps} steps; places {', '.join(sorted(places))}")
    rows = []
    for batch_size, measured in wall.items():
        rows.append(make_row(
            "P15", f"Ray Serve throughput, 2 replicas / 1 (2 x {per_client} requests at {batch_size}x{batch_size}, "
                   f"two in flight against one)",
            stats.summarise(stats.ratios(measured["1 replica"], measured["2 replicas"])), "x", ">= 1.6",
            absolute={"two_replicas_batch_s": stats.spread(measured["2 replicas"]),
                      "one_replica_batch_s": stats.spread(measured["1 replica"]),
                      "others_cpu_share": others[("throughput", batch_size)]},
            note=f"{note}; other processes took {share(('throughput', batch_size))} of the CPU meanwhile"))
    for hop_size, measured in hop.items():
        rows.append(make_row(
            "P15", f"Ray Serve hop: one warm request through Ray / in process (one thread each, {hop_size}x{hop_size})",
            stats.summarise(stats.ratios(measured["ray"], measured["in-process"])), "x", "<= 1.10",
            absolute={"ray_s": stats.spread(measured["ray"]), "in_process_s": stats.spread(measured["in-process"]),
                      "hop_median_s": statistics.median(a - b for a, b in zip(measured["ray"], measured["in-process"])),
                      "others_cpu_share": others[hop_size]},
            note=f"{note}; other processes took {share(hop_size)} of the CPU meanwhile"))
    if not quick:
        rows.append(p15_autoscaling(tmp))
    return rows


def p15_autoscaling(tmp: Path, bound: float = 300.0) -> dict:
    """Serve's autoscaling under the studio: a deployment of 1 replica with bounds 1 and 2, two clients
    asking without pause; how long until the second replica runs (Serve's defaults: it scales up after
    30 s of demand over its target), and whether it then serves. An info row: Serve's timing, not a goal."""
    import threading
    import time

    from backend.errors import StudioError

    cluster = _cluster()
    manager, stop, answers = None, threading.Event(), []
    try:
        manager = start_manager(tmp / "scale", model=BENCH_MODEL, ray=cluster.address, ray_replicas=1,
                                ray_min_replicas=1, ray_max_replicas=2)
        assert manager.status().ray["ready"] == 1, manager.status().ray

        def client(index: int) -> None:
            for k in range(10 ** 6):
                if stop.is_set():
                    return
                request = manager.validate(PROMPT, 256, 256, steps=4, seed=index * 10 ** 6 + k, mode="eager")
                try:
                    answers.append(("image", manager.generate(request)[1].place, time.monotonic()))
                except StudioError as exc:
                    answers.append(("error", str(exc), time.monotonic()))

        began = time.monotonic()
        clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(2)]
        for thread in clients:
            thread.start()
        scaled = None
        while time.monotonic() - began < bound and scaled is None:
            if manager.status().ray["ready"] >= 2:
                scaled = time.monotonic()
            time.sleep(0.5)
        if scaled is not None:
            time.sleep(10)  # the new replica's first runs: answers after `scaled` name the places serving
        stop.set()
        for thread in clients:
            thread.join(60)
        ray_status = manager.status().ray
    finally:
        stop.set()
        if manager is not None:
            manager.close()
        import ray

        ray.shutdown()
        cluster.shutdown()
    errors = [a for a in answers if a[0] != "image"]
    late = {a[1] for a in answers if a[0] == "image" and scaled is not None and a[2] > scaled}
    return make_row("P15", "Ray Serve autoscaling (--ray-replicas 1 --ray-min-replicas 1 --ray-max-replicas 2): "
                           "seconds of two clients' demand until the second replica runs", None, "s", None,
                    count=None if scaled is None else round(scaled - began, 1),
                    absolute={"answered": len(answers) - len(errors), "errors": len(errors),
                              "places_serving_after": sorted(late), "target": ray_status.get("target"),
                              "first_error": errors[0][1] if errors else None},
                    note="Serve's autoscaling defaults (upscale_delay_s 30, look_back_period_s 30), target 1 "
                         "request a replica; 256x256, 4 steps, the random-weight model; "
                         + ("it did not scale within the bound" if scaled is None else
                            f"{len(late)} replicas answered in the 10 s after"))
