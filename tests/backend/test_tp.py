"""The tensor-parallel worker group with real torchrun and gloo on the CPU (2 ranks, the trained
embedded model: its sharded image must match its one-process image)."""

import dataclasses
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest

from backend.errors import GenerationCancelled, GroupDead
from backend.launch import protocol as proto
from backend.serving.manager import Manager
from tests.conftest import ROOT, make_settings


def _group(manager):
    """The tensor-parallel engine's worker group (None before its first start)."""
    return manager.engines["tensor-parallel"].group

pytestmark = pytest.mark.slow
STALL = 3.0  # seconds without progress before the group counts as hung (tests only)


@pytest.fixture(scope="module")
def mgr(tmp_path_factory):
    manager = Manager(make_settings(tmp_path_factory.mktemp("tp"), model="embedded", tp_stall_timeout=STALL))
    manager.start()
    # Started under a temp folder too long for rank 0's socket path (a long TMPDIR; pytest-xdist's
    # folders were): the run dir goes where the socket fits, and the group starts.
    long_temp = tmp_path_factory.mktemp("t" * 60)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(long_temp))
        manager.start_engine("tensor-parallel", 2, wait=True)
    assert _group(manager).state == "ready", _group(manager).describe()
    socket_path = _group(manager).socket_path
    # rank 0 bound it as tp.sock.new first, then renamed it
    assert not socket_path.startswith(str(long_temp)) and len(os.fsencode(socket_path + ".new")) <= proto.SUN_PATH_MAX
    yield manager
    group = _group(manager)
    manager.close()
    assert group.survivors() == []


def _req(mgr, mode, h=64, w=64, steps=3, seed=5):
    return mgr.validate("a green square at the top, on a white background", h, w, steps=steps, seed=seed,
                        mode=mode)


def _ensure_ready(mgr):
    if _group(mgr).state != "ready":
        mgr.start_engine("tensor-parallel", 2, wait=True)
    assert _group(mgr).state == "ready", _group(mgr).describe()


def _raw_call(mgr, key, request):
    with proto.connect(_group(mgr).socket_path, key.encode(), 30) as conn:
        proto.send(conn, request)
        while True:
            answer = proto.receive(conn, 30)
            if answer["type"] != "progress":
                return answer


def test_two_rank_image_matches_the_one_process_eager_image(mgr):
    _ensure_ready(mgr)
    events = []
    tp_image, tp_result = mgr.generate(_req(mgr, "tp", 128, 64, seed=21), events.append)
    eager_image, _ = mgr.generate(_req(mgr, "eager", 128, 64, seed=21))
    diff = np.abs(np.asarray(tp_image, dtype=int) - np.asarray(eager_image, dtype=int)).max()
    assert diff <= 2
    assert tp_result.world_size == 2 and tp_result.mode == "tp"
    assert [e.step for e in events if e.phase == "denoising"] == [0, 1, 2, 3]  # progress streams back
    status = mgr.status().to_json()
    assert json.loads(json.dumps(status)) == status
    assert status["tp"]["state"] == "ready" and set(status["tp"]["rank_pids"]) == {"0", "1"}
    # The System tab's rows, from the real group's READY and its last call (the UI tests' fake
    # group writes the same keys; this is where a renamed key would show).
    from ui.views_tp import tp_markdown

    timings, panel = status["tp"]["timings"], tp_markdown(status["tp"])
    assert f"| Load / warm-up | {timings['load']:.1f} s / {timings['warm']:.1f} s |" in panel
    assert f"| Last call | {timings['last_round_trip']:.3f} s" in panel
    assert any(r["mode"] == "tp" and r["state"] == "warm" for r in mgr.status().shapes)


def test_an_edit_with_two_references_and_a_batch_gives_the_in_process_pixels(mgr, tmp_path):
    """Issue 34: references reach every rank whole (their pixels through the group's buffer, checked
    by SHA-256 on rank 0, then one broadcast each), and a batch comes back whole: the in-process
    run's pixels within the two-rank tolerance."""
    from PIL import Image

    _ensure_ready(mgr)
    Image.new("RGB", (300, 200), "red").save(tmp_path / "wide.png")
    Image.new("RGB", (100, 150), "blue").save(tmp_path / "tall.png")
    refs = [str(tmp_path / "wide.png"), str(tmp_path / "tall.png")]
    tp = mgr.generate(mgr.validate("a red circle", 64, 64, steps=2, seed=1, mode="tp", images=refs, count=2))[1]
    local = mgr.generate(mgr.validate("a red circle", 64, 64, steps=2, seed=1, mode="eager", images=refs,
                                      count=2))[1]
    assert tp.engine == "tensor-parallel" and tp.degraded is None and tp.world_size == 2
    assert tp.signature == local.signature == "64x64*2+ref304x208+ref208x304"  # the model's 3:2 and 2:3 presets
    assert tp.references == local.references and len(tp.images) == len(local.images) == 2
    for mine, theirs in zip(local.images, tp.images):
        assert np.abs(np.asarray(mine, dtype=int) - np.asarray(theirs, dtype=int)).max() <= 2
    assert not np.array_equal(np.asarray(tp.images[0]), np.asarray(tp.images[1]))  # a batch, not one image twice


def test_a_starting_groups_phase_reaches_the_status_without_the_status_asking_the_ranks(mgr):
    """Rank 0 says each phase of its start on the wait for READY; reading the status is no socket
    call (it once asked the ranks' health from inside ``describe``, every second of a start)."""
    mgr.stop_engine("tensor-parallel")
    mgr.start_engine("tensor-parallel", 2)
    group = _group(mgr)
    asked, request = [], group.rank0.request

    def counted(header, *args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            asked.append(header["type"])
        return request(header, *args, **kwargs)

    group.rank0.request = counted
    seen = []
    try:
        while group.describe()["state"] not in ("ready", "dead"):
            state = mgr.status().tp["state"]
            if not seen or seen[-1] != state:
                seen.append(state)
            time.sleep(0.02)
    finally:
        del group.rank0.request
    assert group.state == "ready", group.describe()
    assert "loading" in seen and asked == []


def test_a_process_that_fills_rank0s_connection_slots_does_not_keep_requests_out(mgr):
    """Issue 33 (6): 16 silent connections from a process of the same user take every slot rank 0
    has for newcomers; the app's requests go through the connection it has held since READY (a
    group just started: it has run nothing yet)."""
    mgr.start_engine("tensor-parallel", 2, wait=True)
    strangers = []
    try:
        for _ in range(16):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(_group(mgr).socket_path)
            strangers.append(sock)
        deadline = time.monotonic() + 30
        while "error" not in _group(mgr).health(timeout=0.5):  # until a newcomer (a health check) is turned away
            assert time.monotonic() < deadline, "rank 0 never filled its slots"
            time.sleep(0.05)
        _image, record = mgr.generate(_req(mgr, "tp", steps=1))
        assert record.world_size == 2 and _group(mgr).state == "ready"
    finally:
        for sock in strangers:
            sock.close()
    deadline = time.monotonic() + 30  # until rank 0 has dropped them all: the app's and this check's left
    while _group(mgr).health(timeout=2).get("open_connections") != 2:
        assert time.monotonic() < deadline, "rank 0 kept the strangers' connections"
        time.sleep(0.05)


def test_a_wrong_key_is_refused_and_nothing_runs(mgr):
    """A peer without the launch's key fails the handshake; the request it sends after it is
    never read, and the group serves on. The socket is 0600 in a 0700 run dir."""
    _ensure_ready(mgr)
    before = _group(mgr).health()
    with pytest.raises(proto.Refused):
        _raw_call(mgr, "0" * 64, {"type": "generate", "prompt": "x", "height": 64, "width": 64, "steps": 1,
                                  "guidance": 1.0, "seed": 1})
    deadline = time.monotonic() + 30  # rank 0 counts a refusal after it has answered it
    while (after := _group(mgr).health())["refused"] != before["refused"] + 1:
        assert time.monotonic() < deadline and after["refused"] <= before["refused"] + 1, (before, after)
        time.sleep(0.05)
    assert after["requests_done"] == before["requests_done"]
    assert stat.S_IMODE(os.stat(_group(mgr).socket_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(_group(mgr).dir).st_mode) == 0o700


def test_a_job_that_fails_on_the_ranks_is_a_failed_request_not_a_dead_group(mgr):
    """The ranks trust the app's job (validated once, in the app); one that breaks anyway — here a
    field missing — fails that request on every rank alike and the group serves the next."""
    _ensure_ready(mgr)
    header = _raw_call(mgr, _group(mgr).rank0.key, {"type": "generate", "prompt": "x", "height": 64, "width": 64,
                                             "steps": 1, "guidance": 1.0, "mode": "eager"})  # no seed
    assert header["type"] == "error" and "seed" in header["error"]
    assert _group(mgr).health()["state"] == "ready"
    assert mgr.generate(_req(mgr, "tp"))[1].world_size == 2


def test_what_a_person_typed_reaches_the_ranks_the_record_and_the_png(mgr, tmp_path):
    """A request whose prompt is the model's reading of what was typed: the ranks run the job whole
    (rank 0 answers with the job it ran, checked against the one sent), and the record and the PNG
    keep what was typed (the ranks once re-validated the job and dropped it)."""
    from PIL import Image

    from backend.images.pngmeta import JSON_KEY

    _ensure_ready(mgr)
    request = dataclasses.replace(_req(mgr, "tp"), typed="a red fox, please")
    image, result = mgr.generate(request)
    assert (result.prompt, result.caption) == ("a red fox, please", request.prompt) and result.world_size == 2
    assert _group(mgr).rank0.last_ran == {**request.to_json(), "mode": "eager"}  # the ranks' record: --tp-compile
    path = mgr.save_image(image, result)
    with Image.open(path) as png:
        assert json.loads(png.text[JSON_KEY])["prompt"] == "a red fox, please"


def test_cancel_stops_every_rank_at_the_same_step(mgr):
    _ensure_ready(mgr)

    def progress(event):
        if event.phase == "denoising" and event.step == 2:
            mgr.cancel()

    # Rank 0 sends step 2's progress, then votes; on a busy machine it can be descheduled in between
    # long enough for the cancel to reach it, so step 2's own vote may already stop (seen in a dry run),
    # and a loaded one may run several steps before the cancel arrives (step 7 in another): the ranks
    # stop together wherever that is, well before the end, and the group stays ready.
    with pytest.raises(GenerationCancelled, match=r"stopped after step \d+ of 30") as stopped:
        mgr.generate(_req(mgr, "tp", 256, 256, steps=30), progress)
    assert 2 <= int(re.search(r"step (\d+) of", str(stopped.value)).group(1)) < 30
    assert _group(mgr).state == "ready"
    assert mgr.generate(_req(mgr, "tp"))[1].world_size == 2


def _run_long_in_thread(mgr):
    outcome, started = {}, threading.Event()

    def progress(event):
        if event.phase == "denoising" and event.step >= 1:
            started.set()

    def run():
        began = time.monotonic()
        try:
            mgr.generate(_req(mgr, "tp", 512, 512, steps=50), progress)
        except Exception as exc:  # noqa: BLE001 - inspected by the test
            outcome["error"] = exc
        outcome["seconds"] = time.monotonic() - began

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(60), _group(mgr).describe()
    return thread, outcome


def test_a_killed_rank_is_reported_dead_with_its_log_and_restart_works(mgr):
    """...and the new group serves the same image, through the same pixel buffer."""
    _ensure_ready(mgr)
    pids = _group(mgr).rank_pids()
    thread, outcome = _run_long_in_thread(mgr)
    os.kill(pids[1], signal.SIGKILL)
    thread.join(120)  # a bound a loaded machine meets, not a figure (bench.hardening times it)
    assert not thread.is_alive() and isinstance(outcome["error"], GroupDead)
    tp = mgr.status().tp
    assert tp["state"] == "dead" and "rank 1 exited with signal SIGKILL" in tp["error"]
    assert "rank 1/2 starting" in mgr.engine_logs("tensor-parallel")["rank 1"]
    old = _group(mgr)
    mgr.start_engine("tensor-parallel", 2, wait=True)
    assert old.survivors() == []
    image, record = mgr.generate(_req(mgr, "tp"))
    assert record.world_size == 2
    eager = np.asarray(mgr.generate(_req(mgr, "eager"))[0], dtype=int)
    assert np.abs(np.asarray(image, dtype=int) - eager).max() <= 2


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie); one that exits while it is looked at is not."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_stop_leaves_no_process(mgr):
    _ensure_ready(mgr)
    pids = set(_group(mgr).rank_pids().values()) | {_group(mgr).proc.pid}
    mgr.stop_engine("tensor-parallel")
    assert _group(mgr).state == "stopped" and _group(mgr).survivors() == []
    assert not [p for p in pids if _running(p)]
    # Stopped on purpose: a tensor-parallel request runs in process, and its record says why.
    record = mgr.generate(_req(mgr, "tp"))[1]
    assert record.mode == "eager" and "group is stopped (the operator stopped it)" in record.degraded


def test_workers_exit_when_the_app_dies(tmp_path):
    script = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from backend.serving.manager import Manager
        from backend.settings import Settings
        # (not tests.conftest's settings: importing it makes a cache folder, which a killed app leaves)
        here = Path({str(tmp_path)!r})
        m = Manager(Settings(model="embedded-random", device="cpu", dtype="float32", compile_backend="aot_eager",
                             cache_dir=here / "cache", output_dir=here / "outputs"))
        m.start()
        m.start_engine("tensor-parallel", 2, wait=True)
        group = m.engines["tensor-parallel"].group
        print(json.dumps(sorted(group.rank_pids().values()) + [group.proc.pid]), flush=True)
        print(group.rank0.pixels().name, flush=True)
        time.sleep(600)
    """)
    app = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    pids = json.loads(app.stdout.readline())
    pixels = os.path.join("/dev/shm", app.stdout.readline().strip().lstrip("/"))
    assert len(pids) == 3 and os.path.exists(pixels)
    app.kill()
    app.wait()
    deadline = time.monotonic() + 15
    while any(_running(p) for p in pids) or os.path.exists(pixels):
        assert time.monotonic() < deadline, "worker processes or the pixel buffer outlived the app"
        time.sleep(0.2)
