"""The Ray Serve engine on a real local Ray cluster (``ray.cluster_utils.Cluster``): a head without
Neuron and worker nodes that each declare one ``neuron_cores``, every node its own simulated trn2
(the TorchNeuron stand-in in the replicas, its own core-claim folder and compile cache), so Ray's
own assignment sets ``NEURON_RT_VISIBLE_CORES`` and the stand-in refuses a core claimed twice.
One cluster for the module; each test waits for states, never for a number of seconds."""

import dataclasses
import functools
import subprocess
import sys
import threading

import pytest

from backend.errors import GenerationCancelled, ShapeLocked
from backend.serving.manager import Manager
from tests.backend.concurrency import serve_two_at_once, until
from tests.conftest import make_settings
from tests.neuron.standin import REPO, _runtime, add_ray_node, standin_env

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow
BOUND = 120.0
BUNDLED = "80x80"  # compiled mode: the shape the bundle brings


_until = functools.partial(until, bound=BOUND)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray.cluster_utils import Cluster

    root = tmp_path_factory.mktemp("ray")
    bundle = root / "compiled.bundle"
    # The bundle is made on a simulated trn2 of its own while the cluster starts.
    maker = subprocess.Popen([sys.executable, "app.py", "cache", "export", str(bundle), "--mode", "compiled",
                              "--sizes", BUNDLED, "--device", "neuron", "--dtype", "float32",
                              "--model", "embedded-random", "--cache-dir", str(root / "maker-cache")],
                             cwd=REPO, env=standin_env(root / "maker"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    # A lost node is found within about 10 s (Ray's default health check gives it 15 s and more). At
    # 4 checks of 500 ms, a dry run on two busy cores lost a live node's raylet ("missed too many
    # heartbeats") and with it a replica that then did not come back warm: the bound is one a busy
    # machine meets, and the tests wait for states.
    head = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False,
        "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 10}})

    def node(name: str):
        return add_ray_node(head, root / name, NEURON_STUDIO_CACHE_DIR=str(root / f"{name}-cache"))

    head.nodes_by_name = {name: node(name) for name in ("a", "b")}
    head.root, head.node = root, node
    _out, err = maker.communicate(timeout=240)
    assert maker.returncode == 0, err[-3000:]
    head.bundle = bundle
    yield head
    head.shutdown()


@pytest.fixture(scope="module")
def mgr(cluster, tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("app"), ray=cluster.address, ray_replicas=2,
                             compile_backend=None, cache_from=cluster.bundle)
    manager = Manager(settings)
    manager.start()  # --ray: the deployment is up and every replica warm before start returns
    yield manager
    manager.close()
    ray.shutdown()


def _req(mgr, mode="eager", size=64, steps=2, seed=3):
    return mgr.validate("a red circle on a blue background", size, size, steps=steps, seed=seed, mode=mode)


def test_two_replicas_on_two_nodes_serve_two_requests_at_once_with_the_in_process_pixels(mgr, cluster):
    """Request A holds its first step until request B has made progress: were they served one after
    the other, A would wait for ever (bounded here) and the test fails."""
    import numpy as np
    from prometheus_client import generate_latest

    scraped = generate_latest(mgr.metrics.registry).decode()  # /metrics: the cluster as the scraper sees it
    for line in ("neuron_studio_ray_nodes 3.0", "neuron_studio_ray_neuron_cores 2.0",
                 'neuron_studio_ray_replicas{state="RUNNING"} 2.0', 'neuron_studio_engine_capacity{engine="ray"} 2.0'):
        assert line in scraped, line
    ray_status = mgr.status().ray
    assert ray_status["ready"] == 2 and mgr.capacity() == 2 and ray_status["device"] == "neuron"
    assert ray_status["resources"] == {"num_cpus": 0, "resources": {"neuron_cores": 1}}
    replicas = ray_status["replicas"]
    assert len({r["node"] for r in replicas}) == 2, replicas
    from ui.handlers import Studio

    shown = Studio(mgr).refresh_all("eager", 64, 64, 4)[-2]  # the System tab's cluster, as the page's timer fills it
    assert "2 of 2 replicas running" in shown and len(ray_status["node_list"]) == 3
    for node in ray_status["node_list"]:
        assert f"`{node['id'][:8]}`" in shown, shown
    for r in replicas:
        assert f"| `{r['id']}` | `{r['node'][:8]}` | 0 | running |" in shown, shown
    results, spans = serve_two_at_once(mgr, lambda seed: _req(mgr, seed=seed), BOUND)
    assert spans["a"][0] < spans["b"][1] and spans["b"][0] < spans["a"][1]  # the run intervals overlap
    places = {results[n][1].place for n in "ab"}
    by_place = {r["place"]: r for r in mgr.status().ray["replicas"]}
    assert places == set(by_place), (places, by_place)
    for name in "ab":
        assert results[name][1].engine == "ray" and " · node " in results[name][1].place
        assert results[name][1].place.endswith(" · core 0")  # each node's one core, as Ray assigned it
    # Ray set each replica's NEURON_RT_VISIBLE_CORES, and the stand-in's claim on that core is the replica's.
    assert [r["visible_cores"] for r in by_place.values()] == ["0", "0"]
    holders = {_runtime().holder_of(0, cluster.root / n) for n in ("a", "b")}
    assert holders == {r["pid"] for r in by_place.values()}
    # The app's own engine (the CPU, two threads) against the replicas (the stand-in's "neuron" device,
    # one thread): within test_replicas' tolerance (measured: 1 of 255 at most).
    for name, seed in (("a", 1), ("b", 2)):
        out = mgr.local.run(_req(mgr, seed=seed))
        same = np.asarray(out.image, dtype=np.int16) - np.asarray(results[name][0], dtype=np.int16)
        assert int(np.abs(same).max()) <= 2


def test_every_replica_started_warm_from_the_bundle_and_the_table_says_where(mgr, cluster):
    """--cache-from under --ray: each replica imported the bundle into its own node's cache and ran
    its shape from it, with no NEFF compiled; the compile table holds the shape warm at both."""
    replicas = mgr.status().ray["replicas"]
    for name in "ab":  # each node's own NEFF cache (not one that this process's environment named)
        assert any((cluster.root / f"{name}-cache" / "neff").rglob("*.neff")), name
    for replica in replicas:
        # A replica Serve restarted (a health check missed on a busy machine) finds its node's cache
        # already holding the bundle: every file was written or already there, none missing.
        # (a refused import reports {"path", "error"}: the assertion shows the replica and its error)
        placed = replica["bundle"].get("written", 0) + replica["bundle"].get("already_there", 0)
        assert placed > 0 and f"compiled {BUNDLED}" in replica["warm"], (replica["bundle"], replica)
    reports = mgr.engines["ray"].reports()
    assert all(r["warm"][f"compiled {BUNDLED}"]["neff_compiles"] == 0 for r in reports.values()), reports
    predicted = mgr.predict("compiled", _req(mgr, "compiled", 80).shape)
    assert predicted["will_compile"] is False and predicted["warm_on"] == [2, 2], predicted
    _image, result = mgr.generate(_req(mgr, "compiled", 80))
    assert result.compiles == 0 and result.neff_compiles == 0


def test_warm_only_refuses_a_cold_signature_before_it_reaches_ray(mgr):
    served = {rid: r["served"] for rid, r in mgr.engines["ray"].reports().items()}
    mgr.set_warm_only(True)
    try:
        with pytest.raises(ShapeLocked):
            mgr.generate(_req(mgr, "compiled", 96))
        mgr.generate(_req(mgr, "compiled", 80))  # the bundled shape is warm on the replicas: it runs
    finally:
        mgr.set_warm_only(False)

    def counted():  # a replica reports just after its run's last part (REPORT_AFTER)
        return sum(r["served"] for r in mgr.engines["ray"].reports().values())

    _until(lambda: counted() >= sum(served.values()) + 1, "the replica's report of its run")
    assert counted() == sum(served.values()) + 1, (served, mgr.engines["ray"].reports())


def test_stop_ends_a_remote_run_at_its_next_step(mgr):
    asked = {}

    def progress(event):  # a replica folds the steps of each PROGRESS_EVERY: step 2 may come as a later one
        if event.phase == "denoising" and event.step >= 2 and not asked:
            asked["step"] = event.step
            mgr.cancel()

    with pytest.raises(GenerationCancelled):
        mgr.generate(_req(mgr, steps=40, seed=5), progress)
    engine = mgr.engines["ray"]
    _until(lambda: any((r.get("stopped_at") or "").startswith("stopped after step")
                       for r in engine.reports().values()), "the replica to end the run")
    ended = [int(r["stopped_at"].split()[3]) for r in engine.reports().values()
             if (r.get("stopped_at") or "").startswith("stopped after step")]
    assert ended and ended[0] <= asked["step"] + 1, ended


def test_a_request_beyond_the_running_replicas_says_it_waits_for_one_then_runs(mgr):
    """Under autoscaling the job board hands Serve one request more than its replicas run (capacity);
    that one waits in Serve's queue, and its first event says so (the page: "waiting for a free
    replica"), not a silent "running". Here two runs hold the two replicas (each held at its first step
    on the app's side) when a third is sent; they are let go, and stopped, once it has said it waits."""
    from backend.request.records import Phase

    engine, stop, events, errors = mgr.engines["ray"], threading.Event(), {"a": [], "b": [], "c": []}, []

    def long_run(name, seed):
        def progress(event):
            events[name].append(event)
            if event.phase == Phase.DENOISING:
                stop.wait(BOUND)

        try:
            engine.run(_req(mgr, steps=50, seed=seed), progress, stop.is_set)
        except GenerationCancelled:
            pass
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    held = [threading.Thread(target=long_run, args=(name, seed)) for name, seed in (("a", 1), ("b", 2))]
    for thread in held:
        thread.start()
    _until(lambda: errors or all(any(e.phase == Phase.DENOISING for e in events[n]) for n in "ab"), "both runs")
    assert not errors, errors

    def third(event):
        events["c"].append(event)
        stop.set()  # the two go on, see the Stop and end at their next step; the third gets a replica

    out = engine.run(_req(mgr, steps=2, seed=3), third, lambda: False)
    for thread in held:
        thread.join(BOUND)
    assert not errors, errors
    assert [e.phase for e in events["c"]][0] == Phase.REPLICA, events["c"]
    assert Phase.DENOISING in [e.phase for e in events["c"]] and out.image is not None
    assert engine.sent == 0


def test_a_killed_worker_node_loses_no_request_and_its_replacement_starts_warm_from_the_bundle(mgr, cluster):
    """Two requests run, one per node; node a dies under its request (its raylet and replica
    killed). That request is served again by the other replica; Serve starts a replacement, which
    lands on node c (a fresh node: a new cache, its own cores) and is warm from the bundle at once."""
    engine = mgr.engines["ray"]
    restarts, retried = engine.restarts, engine.retried
    both, results, errors = threading.Barrier(3), {}, []

    def run(name):
        sent = {}

        def progress(event):
            if event.phase == "denoising" and event.step >= 1 and not sent:
                sent["once"] = True
                both.wait(BOUND)

        try:
            # long enough that node a's run is still going when its node is gone, on a busy machine too
            # (12 steps once ended before the removal did)
            results[name] = mgr.generate(_req(mgr, steps=40, seed=7 if name == "x" else 8), progress)[1]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in "xy"]
    for thread in threads:
        thread.start()
    both.wait(BOUND)  # both are denoising, one on each node
    cluster.remove_node(cluster.nodes_by_name.pop("a"), allow_graceful=False)
    for thread in threads:
        thread.join(BOUND)
    assert not errors, errors
    assert set(results) == {"x", "y"} and engine.retried == retried + 1, {n: r.place for n, r in results.items()}
    assert len({r.place for r in results.values()}) == 1  # both served by the replica that lived
    # what Serve still listed, for a failure that did not say (a dry run)
    _until(lambda: engine.restarts > restarts, "the app to see the replica gone",
           detail=lambda: f"Serve lists "
                          f"{({rid[:8]: (r['state'], r['node'][:8]) for rid, r in engine.replicas.items()})}, "
                          f"the watch's error: {engine.error}")
    assert "is gone" in engine.last_error
    cluster.nodes_by_name["c"] = cluster.node("c")
    _until(lambda: mgr.capacity() == 2 and all(f"compiled {BUNDLED}" in r["warm"] for r in engine.replicas.values()),
           "Serve's replacement to be up and warm")
    joined = [r for r in engine.reports().values() if r["node"] == cluster.nodes_by_name["c"].node_id]
    assert joined and joined[0]["warm"][f"compiled {BUNDLED}"]["neff_compiles"] == 0, joined
    predicted = mgr.predict("compiled", _req(mgr, "compiled", 80).shape)
    assert predicted["warm_on"] == [2, 2], predicted


def test_a_replica_folds_close_events_and_sends_a_small_image_in_parts_under_rays_inline_size():
    """What ``StudioReplica.run`` sends, without a cluster: of the events held back, each phase at its
    latest step, in order; an image of INLINE_PARTS parts or fewer as bytes put back bit for bit, a
    bigger one and latents as they are."""
    import numpy as np
    from PIL import Image

    from backend.engines.ray_serve import INLINE_PARTS, PART_BYTES, fold, pixel_parts, with_pixels
    from backend.request.records import EngineOutput, Phase, ProgressEvent

    held = []
    for phase, step in (("encoding", 0), ("denoising", 0), ("denoising", 1), ("denoising", 2), ("decoding", 2)):
        fold(held, ProgressEvent(phase, step, 2))
    assert [(e.phase, e.step) for e in held] == [(Phase.ENCODING, 0), (Phase.DENOISING, 2), (Phase.DECODING, 2)]

    def output(*sides):
        rng = np.random.default_rng(0)
        images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sides]
        return EngineOutput(image=images[0], more_images=images[1:], compiles=0, compile_seconds=0.0,
                            neff_compiles=0, seconds=1.0, encode=0.1, denoise=0.8, decode=0.1, place="r1")

    for sides in (((256, 256),), ((128, 96), (96, 128))):
        out = output(*sides)
        bare, parts, layout = pixel_parts(out)
        assert bare.image is None and bare.more_images == [] and bare.place == "r1"
        assert 1 <= len(parts) <= INLINE_PARTS and all(len(p) <= PART_BYTES for p in parts)
        back = with_pixels(bare, parts, layout)
        assert [im.size for im in back.images] == [im.size for im in out.images]
        for a, b in zip(back.images, out.images):
            assert a.mode == b.mode and np.array_equal(np.asarray(a), np.asarray(b))
    big = output((512, 512))  # 768 KiB: one object through Ray's store
    assert pixel_parts(big) == (big, [], None)
    latents = dataclasses.replace(big, image=None, more_images=[])
    assert pixel_parts(latents) == (latents, [], None)


def test_admission_predicts_by_the_replicas_device_not_the_apps(mgr):
    """The app here runs on the CPU, its replicas on the neuron stand-in (a head without Neuron, as on
    EKS): a new size compiles on them even in eager mode, and the cost line says so."""
    from backend.shapes import Shape

    assert mgr.device.kind == "cpu" and mgr.engines["ray"].admission_device().kind == "neuron"
    assert mgr.predict("eager", Shape(112, 112))["will_compile"]
    assert not mgr.admission.decide(mgr.device, "eager", Shape(112, 112), 2, False).prediction["will_compile"]
    # The shapes table's memory rows are planned for a NeuronCore of the replicas', which the app lacks.
    rows = [r for r in mgr.status().shapes if r["mode"] in ("eager", "compiled")]
    assert rows and all(r.get("memory_bytes") for r in rows), rows
    assert mgr.device_for("eager").kind == "neuron" and mgr.device_of(None) is mgr.device
    assert mgr.admission.memory_plan(mgr.device_for("eager"), "eager", Shape(128, 128)).fits
