"""The replica pool with real worker processes on the CPU (2 replicas of the tiny random model):
requests run side by side, dispatch prefers warm replicas, a killed replica loses nothing and comes
back. No test here waits for a number of seconds: each waits for a state, with a generous bound."""

import contextlib
import functools
import os
import signal
import threading
import time

import pytest

from backend.errors import GroupDead, InvalidRequest, NotAllowed
from backend.serving.manager import Manager
from backend.serving.roles import Caller
from tests.backend.concurrency import serve_two_at_once, until
from tests.conftest import make_settings

pytestmark = pytest.mark.slow
BOUND = 120.0  # seconds any wait below may take on a loaded machine before it counts as a failure


def _req(mgr, mode="eager", size=64, steps=2, seed=3):
    return mgr.validate("a red circle on a blue background", size, size, steps=steps, seed=seed, mode=mode)


_until = functools.partial(until, bound=BOUND)


@pytest.fixture(scope="module")
def mgr(tmp_path_factory):
    manager = Manager(make_settings(tmp_path_factory.mktemp("replicas"), replicas=2, tp_stall_timeout=30.0))
    manager.start()  # --replicas 2: the pool starts with the app and is ready before start returns
    yield manager
    pool = manager.engines["replicas"]
    groups = list(pool.replicas)
    manager.close()
    assert all(g.survivors() == [] for g in groups)


def test_two_replicas_serve_two_requests_at_once(mgr):
    """Request A holds its first step until request B has made progress: were they served one after
    the other, A would wait for ever (bounded here) and the test fails."""
    status = mgr.status()
    pool = status.replicas
    assert pool["size"] == 2 and pool["ready"] == 2 and mgr.capacity() == 2
    assert len({r["pid"] for r in pool["replicas"]}) == 2 and status.engine is None  # the app loaded no model
    ran, _spans = serve_two_at_once(
        mgr, lambda seed: _req(mgr, seed=seed), BOUND,
        while_both=lambda done: _until(lambda: len(mgr.status().running) == 2 or done, "two requests running"))
    results = {name: result for name, (_image, result) in ran.items()}
    assert {results["a"].place, results["b"].place} == {"replica 0", "replica 1"}
    assert results["a"].engine == results["b"].engine == "replicas"


def test_an_edit_with_two_references_and_a_batch_on_a_replica_gives_the_in_process_pixels(mgr, tmp_path):
    """Issue 34: a replica is a group of one rank: the references go through its pixel buffer
    (checked by SHA-256) and the batch comes back whole, the app's own engine's pixels within the
    tensor-parallel tests' tolerance (another process may split its matmuls over other threads)."""
    import numpy as np
    from PIL import Image

    Image.new("RGB", (300, 200), "red").save(tmp_path / "wide.png")
    Image.new("RGB", (100, 150), "blue").save(tmp_path / "tall.png")
    from backend.request.references import load_references
    from backend.shapes import Shape

    # Fitted to small reference sizes (this model's presets are a megapixel: slow on two cores).
    refs = load_references([str(tmp_path / "tall.png"), str(tmp_path / "wide.png")], [Shape(64, 96), Shape(96, 64)])
    request = mgr.validate("a fox", 64, 64, steps=2, seed=1, mode="eager", images=refs, count=2)
    _image, served = mgr.generate(request)
    assert served.engine == "replicas" and served.place.startswith("replica ")
    assert served.signature == "64x64*2+ref96x64+ref64x96" and len(served.images) == 2
    # the replica ran them in the signature's order (by fitted size), and its record says so
    assert [r["fitted"] for r in served.references] == ["96x64", "64x96"]
    here = mgr.engines["in-process"].run(request)  # the same request in the app's own process
    for mine, theirs in zip(here.images, served.images):
        assert np.abs(np.asarray(mine, dtype=int) - np.asarray(theirs, dtype=int)).max() <= 2


def test_a_warm_shape_goes_to_its_warm_replica_and_the_cost_line_says_where(mgr):
    mgr.generate(_req(mgr, "compiled", 64, seed=4))
    warm_at = set(mgr.table.warm_places("compiled", _req(mgr, "compiled").shape))
    assert len(warm_at) == 1
    prediction = mgr.predict("compiled", _req(mgr).shape)
    assert prediction["warm_on"] == [1, 2] and not prediction["will_compile"]
    for seed in (5, 6):  # not compiled again elsewhere: they wait for the warm replica
        result = mgr.generate(_req(mgr, "compiled", 64, seed=seed))[1]
        assert result.place in warm_at and result.compiles == 0
    mgr.warmup([_req(mgr).shape], "compiled")  # a warm-up warms every replica
    assert mgr.predict("compiled", _req(mgr).shape)["warm_on"] == [2, 2]
    replicas = mgr.status().replicas["replicas"]
    assert all("compiled 64x64" in r["warm"] for r in replicas)


def test_starting_replicas_is_the_operators_and_a_bad_count_is_refused_naming_the_field(mgr):
    viewer = Caller("viewer", "page-1")
    with pytest.raises(NotAllowed):
        mgr.start_engine("replicas", 3, caller=viewer)
    with pytest.raises(NotAllowed):
        mgr.stop_engine("replicas", caller=viewer)
    with pytest.raises(InvalidRequest) as err:
        mgr.start_engine("replicas", 65)
    assert err.value.field == "replicas"
    with pytest.raises(InvalidRequest, match="must be one of tensor-parallel, replicas"):
        mgr.start_engine("in-process")
    assert mgr.status().replicas["size"] == 2  # nothing changed


def test_a_killed_replica_fails_only_its_request_and_comes_back(mgr):
    pool = mgr.engines["replicas"]
    started, outcome = threading.Event(), {}

    def progress(event):
        if event.phase == "denoising":
            started.set()

    def run():
        try:
            outcome["result"] = mgr.generate(_req(mgr, steps=40, seed=9), progress)[1]
        except Exception as exc:  # noqa: BLE001 - checked below
            outcome["error"] = exc

    # One replica is kept busy first, so the long request lands on the other: the victim.
    hold, held = threading.Event(), {}

    def block():
        try:
            held["result"] = mgr.generate(_req(mgr, steps=40, seed=8),
                                          lambda e: hold.wait(BOUND) if e.phase == "denoising" else None)[1]
        except Exception as exc:  # noqa: BLE001 - checked below
            held["error"] = exc

    blocker = threading.Thread(target=block)
    blocker.start()
    _until(lambda: 1 in pool._busy or 0 in pool._busy, "the first request to take a replica")
    busy_first = next(iter(pool._busy))
    victim = pool.replicas[1 - busy_first]
    pid = int(victim.rank_pids()[0])
    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(BOUND)
    os.kill(pid, signal.SIGKILL)
    thread.join(BOUND)
    hold.set()
    blocker.join(BOUND)
    error = outcome.get("error")
    assert isinstance(error, GroupDead), outcome
    # The other replica's request, in flight (its page still reading progress) when the victim
    # died, ends with its image, made where it was sent.
    assert "result" in held and held["result"].place == pool.replicas[busy_first].place, held
    assert (f"{victim.place} died while serving this request" in str(error)
            and "other replicas keep serving" in str(error))
    _until(lambda: pool.replicas[1 - busy_first] is not victim and pool.replicas[1 - busy_first].state == "ready",
           "the killed replica to come back")
    status = mgr.status().replicas
    assert status["restarts"] >= 1 and status["ready"] == 2
    assert int(pool.replicas[1 - busy_first].rank_pids()[0]) != pid
    assert victim.survivors() == []
    for seed in (10, 11):  # both serve again
        mgr.generate(_req(mgr, seed=seed))


def test_a_stopped_replica_is_found_by_its_heartbeat_and_routed_around(tmp_path):
    """Issue 53 (12): a SIGSTOPped replica (alive, silent) held the next request sent to it for the
    stall timeout and more (68 s in the probe). Its heartbeat stands still, so within the stall
    timeout (10 s here) it is dead and restarting, with the reason in the pool's status; a request
    made then is served by a replica that runs, and the stopped process is gone."""
    manager = Manager(make_settings(tmp_path, replicas=2, tp_stall_timeout=10.0))
    pid = None
    try:
        manager.start()
        pool = manager.engines["replicas"]
        victim = pool.replicas[0]
        pid = int(victim.rank_pids()[0])
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        _until(lambda: victim.state == "dead", "the stopped replica to be found by its heartbeat")
        print(f"found dead {time.monotonic() - stopped:.1f} s after SIGSTOP (stall timeout 10 s)")
        assert victim.froze and "heartbeat has not moved for 10 s" in victim.error
        _image, record = manager.generate(_req(manager, seed=21))
        assert record.place in ("replica 0", "replica 1")  # replica 1, or replica 0 restarted
        _until(lambda: pool.restarts >= 1 and not victim.survivors(), "the stopped replica to be ended and restarted")
        assert pool.replicas[0] is not victim
        assert "replica 0 was restarted" in manager.status().replicas["error"]
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        manager.close()
