"""The tensor-parallel engine's lifecycle against a fake rank 0 on a Unix socket and a fake clock:
no torchrun, no sleeps to wait out a deadline. (Real torchrun groups: tests/backend/test_tp.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

import pytest

from backend.errors import BackendNotReady, GroupDead, InvalidRequest
from backend.launch import protocol as proto
from backend.launch.group import WorkerGroup, check_degree
from tests.conftest import ROOT, make_settings

MODEL = str(ROOT / "assets" / "tiny-flux2-klein")
CPU = types.SimpleNamespace(info=types.SimpleNamespace(kind="cpu", dtype="float32", compile_backend="aot_eager"),
                            core_plan=None)


class FakeClock:
    """Every look at the clock is ``step`` seconds later: deadlines pass without waiting for them."""

    def __init__(self, step: float = 1.0):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class FakeRank0:
    """Accepts a connection on ``path`` with the group's key; reads the request, then answers with ``reply``
    (a dict) or, when ``reply`` is None, says nothing until the test ends."""

    def __init__(self, path: str, reply: dict | None = None):
        self.reply, self.requests, self.done = reply, [], threading.Event()
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(4)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        sock, _ = self.sock.accept()
        with proto.accept(sock, b"t" * 64, 30) as conn:
            self.requests.append(proto.receive(conn, 30))
            if self.reply is not None:
                proto.send(conn, self.reply)
            self.done.wait(30)

    def close(self) -> None:
        self.done.set()
        self.sock.close()


@pytest.fixture
def group(tmp_path):
    made = WorkerGroup(make_settings(tmp_path, tp_stall_timeout=30.0, tp_start_timeout=100.0), MODEL, CPU, 2, [],
                      clock=FakeClock(), grace=0.5)
    made.rank0.dial(str(tmp_path), "t" * 64)  # rank 0's socket: tmp_path/tp.sock
    yield made
    made.stop()


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def test_a_silent_group_is_declared_hung_after_the_stall_timeout(group):
    peer = FakeRank0(group.socket_path)
    group.state = "ready"
    try:
        with pytest.raises(GroupDead, match="no progress for 30 s"):
            group.rank0.call({"type": "generate"})
    finally:
        peer.close()
    assert group.state == "dead" and "no progress for 30 s" in group.error
    assert peer.requests == [{"type": "generate"}]


@pytest.mark.parametrize("beating", [True, False])
def test_silence_while_every_rank_beats_lasts_up_to_the_compile_timeout(group, tmp_path, beating):
    """A rank busy in a silent compile keeps beating: the call waits past the stall timeout (up to
    the compile timeout); a stopped rank's heartbeat stands still: dead at the stall timeout."""
    group.rank0.compile_timeout = 120.0  # the ranks beat in tmp_path, the run dir it dialled
    group._clock.step = 5.0
    stop = threading.Event()

    def beat(rank: int) -> None:
        count = 0
        while not stop.is_set():
            count += 1
            (tmp_path / f"rank{rank}.heartbeat").write_text(str(count))
            if not beating and rank == 1:
                return  # rank 1 stopped after one beat
            stop.wait(0.01)

    beaters = [threading.Thread(target=beat, args=(r,), daemon=True) for r in range(2)]
    for thread in beaters:
        thread.start()
    peer = FakeRank0(group.socket_path)
    group.state = "ready"
    try:
        with pytest.raises(GroupDead, match=f"no progress for {120 if beating else 30} s"):
            group.rank0.call({"type": "generate"})
    finally:
        stop.set()
        peer.close()


def test_an_error_reply_to_wait_ready_leaves_the_group_dead_with_the_reason(group):
    peer = FakeRank0(group.socket_path, {"type": "error", "kind": "not_ready",
                                         "error": "rank 1: NeuronCore 2 is already reserved by process 42"})
    group.proc, group.state = _sleeper(), "launching"
    try:
        group._await_ready(group.proc)
    finally:
        peer.close()
    assert group.wait_ready(5) is False
    assert group.state == "dead" and "NeuronCore 2 is already reserved" in group.error
    group._teardown.join(10)
    assert group.proc.poll() is not None  # the launcher was stopped too


def test_a_start_that_never_opens_its_socket_ends_dead_not_launching(group):
    group.proc, group.state = _sleeper(), "launching"
    group._clock.step = 25.0  # four looks at the clock pass the 100 s start timeout
    group._await_ready(group.proc)
    assert group.state == "dead" and "did not open their socket within 100 s" in group.error
    assert group._ready.is_set()


def test_a_failing_ready_thread_still_ends_in_a_state(group, monkeypatch):
    group.proc, group.state = _sleeper(), "launching"
    monkeypatch.setattr(group.rank0, "request", lambda *a, **k: (_ for _ in ()).throw(ValueError("broken thread")))
    open(group.socket_path, "w").close()  # the socket "exists"; the call itself blows up
    group._await_ready(group.proc)
    assert group.state == "dead" and "ValueError: broken thread" in group.error


def test_degrees_are_checked_before_anything_starts():
    assert check_degree(2, 24) == [] and check_degree(3, 24) == []
    with pytest.raises(InvalidRequest, match="5 does not divide the model's 24 attention heads; "
                                             "use one of 1, 2, 3, 4, 6, 8, 12, 24"):
        check_degree(5, 24)
    with pytest.raises(InvalidRequest, match="whole number from 1 to 64"):
        check_degree(0, 24)
    from backend.hardware.core_plan import make_plan

    assert check_degree(2, 4, make_plan("0", 4)) == [1, 2]
    with pytest.raises(InvalidRequest, match="degrees that fit are 1, 2"):
        check_degree(4, 4, make_plan("0", 4))


# --- the private run dir: removed on stop, kept while dead, removed by the ranks if the app dies --

def _run_dir(parent, *names) -> str:
    made = tempfile.mkdtemp(prefix="neuron-studio-tp-", dir=parent)
    for name in names:
        (Path(made) / name).write_text("x")
    return made


def test_a_start_whose_launcher_cannot_start_leaves_no_run_dir(group, tmp_path, monkeypatch):
    """torchrun not launched (here: Popen fails) leaves the group stopped, the error raised, and no
    empty run dir behind (it stayed until a close that a failed start may never get)."""
    group.run_root = str(tmp_path)

    def fail(*args, **kwargs):
        raise OSError("no launcher")

    monkeypatch.setattr(subprocess, "Popen", fail)
    with pytest.raises(OSError, match="no launcher"):
        group.start()
    assert group.state == "stopped" and group.dir is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(proto.RUN_DIR_PREFIX)]


def test_a_stop_removes_the_run_dir_and_its_logs(group, tmp_path):
    group.dir = _run_dir(tmp_path, "rank0.log", "rank1.log", "torchrun.log", "rank0.heartbeat")
    group.proc, group.state = _sleeper(), "launching"
    group.stop()
    assert group.state == "stopped" and group.survivors() == []
    assert not os.path.exists(group.dir) and group.rank_logs() == {"rank 0": "", "rank 1": "", "torchrun": ""}


def test_a_dead_group_keeps_its_logs_until_it_is_stopped_or_closed(group, tmp_path):
    group.dir = _run_dir(tmp_path, "rank0.log", "torchrun.log")
    Path(group.dir, "rank1.log").write_text("rank 1 exited with signal SIGKILL\n")
    group.proc, group.state = _sleeper(), "launching"
    group.stop(final_state="dead")  # as the monitor and a stalled call end it
    assert group.state == "dead" and "SIGKILL" in group.rank_logs()["rank 1"]
    group.stop()  # Manager.stop_tp on the dead group
    assert group.state == "stopped" and not os.path.exists(group.dir)

    group.dir = _run_dir(tmp_path, "rank0.log")
    group.proc, group.state = _sleeper(), "launching"
    group.stop(final_state="dead")
    group.close()
    assert not os.path.exists(group.dir)


def test_cleanup_removes_nothing_but_a_run_dir(group, tmp_path):
    other = tmp_path / "not-a-run-dir"
    other.mkdir()
    (other / "rank0.log").write_text("keep me")
    group.dir = str(other)
    group.close()
    assert (other / "rank0.log").read_text() == "keep me"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_rank_removes_the_run_dir_when_the_app_is_gone(tmp_path):
    from backend.workers.worker import _watch_parent

    run_dir = _run_dir(tmp_path, "tp.sock", "rank0.log", "rank0.heartbeat")
    exits = []
    thread = _watch_parent(_dead_pid(), run_dir, rank=0, interval=0.01, exit_process=exits.append)
    thread.join(10)
    assert exits == [3] and not os.path.exists(run_dir)


@pytest.mark.parametrize("layout", ["no prefix", "no socket or logs", "a link", "missing"])
def test_a_rank_removes_only_a_run_dir(tmp_path, layout):
    from backend.workers.worker import _watch_parent

    target = tmp_path / "target"
    target.mkdir()
    (target / "rank0.log").write_text("keep me")
    if layout == "no prefix":
        path = str(target)
    elif layout == "no socket or logs":
        path = _run_dir(tmp_path, "notes.txt")
    elif layout == "a link":
        path = str(tmp_path / "neuron-studio-tp-link")
        os.symlink(target, path)
    else:
        path = str(tmp_path / "neuron-studio-tp-gone")
    exits = []
    _watch_parent(_dead_pid(), path, rank=0, interval=0.01, exit_process=exits.append).join(10)
    assert exits == [3]  # the rank still leaves
    assert (target / "rank0.log").read_text() == "keep me"
    if layout == "no socket or logs":
        assert os.path.isdir(path)


def test_a_rank_process_cleans_up_after_its_app_is_killed(tmp_path):
    """The real thing without torchrun: a 'rank' watches an 'app' process, which is SIGKILLed."""
    run_dir = _run_dir(tmp_path, "tp.sock", "rank0.log", "torchrun.log")
    app = _sleeper()
    script = ("import sys, time; sys.path.insert(0, sys.argv[3]); from backend.workers.worker import _watch_parent; "
              "_watch_parent(int(sys.argv[1]), sys.argv[2], 0, interval=0.05); time.sleep(60)")
    rank = subprocess.Popen([sys.executable, "-c", script, str(app.pid), run_dir, str(ROOT)],
                            stdout=subprocess.PIPE, text=True)
    try:
        app.kill()
        app.wait()
        assert rank.wait(timeout=30) == 3
        assert not os.path.exists(run_dir)
        assert "removed" in rank.stdout.read()
    finally:
        rank.kill()


TORCHRUN_FAILURE = """Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_00:00:00
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 4242)
"""


def _rank_ends_itself(run_dir: str, rank: int, monkeypatch) -> None:
    """What a rank that leaves after a failed request writes (``job_loop.record_exit``), with torch's
    own ErrorHandler, where torchrun tells it to (``TORCHELASTIC_ERROR_FILE`` under --log-dir)."""
    from backend.workers.job_loop import record_exit

    folder = Path(run_dir, "torchrun", "none_k2x9", "attempt_0", str(rank))
    folder.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(folder / "error.json"))
    record_exit(proto.RankEnding("RuntimeError: x"))


@pytest.mark.parametrize("signs", ["reply, then death", "death, then reply", "error file only", "none"])
def test_a_group_whose_ranks_ended_themselves_restarts_once_its_processes_are_gone(tmp_path, signs, monkeypatch):
    """Rank 0's reply (``group_ending``) and the group's death (its processes gone: on Neuron its
    cores free) come in either order; the rank's torchelastic error file saying ``RankEnding``
    alone also says it (torchrun may end rank 0 before its reply gets out). A rank that was killed
    (no error file; the signal in torchrun's summary) is left dead for the operator."""
    from backend.errors import GenerationFailed
    from tests.ui.fake_engines import start_manager

    manager, launches = start_manager(tmp_path, tp_degree=2)
    try:
        engine = manager.engines["tensor-parallel"]
        engine.start(2, wait=True)
        old = engine.group
        code = -9

        def reply() -> None:
            def fails(*args, **kwargs):
                raise GenerationFailed("RuntimeError in the pipeline: x", group_ending=True)
            old.run = fails
            with pytest.raises(GenerationFailed):
                engine.run(manager.validate("a red circle", 64, 64, steps=1, mode="tp"), lambda e: None,
                           lambda: False)

        def death() -> None:
            if signs == "error file only":  # and no summary in torchrun's log: the file alone says it
                _rank_ends_itself(old.dir, 1, monkeypatch)
            else:
                Path(old.dir, "torchrun.log").write_text(TORCHRUN_FAILURE.format(code=code))
            old.die("rank 1 exited — the group is down")

        order = {"reply, then death": [reply, death], "death, then reply": [death, reply],
                 "error file only": [death], "none": [death]}[signs]
        order[0]()
        if len(order) == 2:
            assert engine.group is old and len(launches.made) == 1  # one of the two signs restarts nothing
        for step in order[1:]:
            step()
        for thread in threading.enumerate():  # a restart, if one was decided, runs on its own thread
            if thread.name == "tp-restart":
                thread.join(60)
        if signs == "none":
            assert engine.group is old and old.state == "dead" and len(launches.made) == 1
            return
        assert engine.group is not old and engine.group.state == "ready" and len(launches.made) == 2
    finally:
        manager.close()


def test_a_death_names_each_rank_and_what_it_died_of(tmp_path, monkeypatch):
    """A rank that raised: its exception, from its torchelastic error file (written by torch's
    ErrorHandler, as ``worker.run`` does); a rank killed by a signal: the signal, from torchrun's
    summary; nothing from either: torchrun's status."""
    from backend.launch.calls import GroupState
    from backend.launch.group import death_reason
    from backend.workers.job_loop import record_exit

    folder = tmp_path / "torchrun" / "none_abc" / "attempt_0" / "0"
    folder.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(folder / "error.json"))
    try:
        raise RuntimeError("the model folder has no transformer")
    except RuntimeError as exc:
        record_exit(exc)
    reason = death_reason(str(tmp_path), TORCHRUN_FAILURE.format(code=-9), 1)
    assert reason == ("rank 0 failed: RuntimeError: the model folder has no transformer; "
                      "rank 1 exited with signal SIGKILL — the group is down")
    assert not WorkerGroup.ended_itself.fget(types.SimpleNamespace(state=GroupState.DEAD, dir=str(tmp_path)))
    assert death_reason(str(tmp_path / "none"), "", 1) == "torchrun exited with status 1 — the group is down"


def test_a_group_that_runs_is_not_started_again(tmp_path):
    """The real start guard (the fake group replaces only its process steps): a second start of a
    group that is starting or ready is refused and launches nothing."""
    from tests.ui.fake_engines import start_manager

    manager, launches = start_manager(tmp_path, tp_degree=2)
    try:
        engine = manager.engines["tensor-parallel"]
        engine.start(2, wait=True)
        group = engine.group
        with pytest.raises(BackendNotReady, match="already ready"):
            group.start()
        assert group.state == "ready" and len(launches.made) == 1
    finally:
        manager.close()


@pytest.mark.parametrize("kind, role, users, wanted", [
    ("neuron", "tp", None, "3601"),  # at least the collective timeout: --compile-timeout 3600.5 on Neuron
    ("neuron", "tp", "7200", "7200"),  # a longer one of the user's is kept
    ("neuron", "tp", "30", "3601"),  # the documented default's figure: raised
    ("neuron", "replica", None, None),  # a replica runs no collective
    ("cpu", "tp", None, None),
])
def test_the_ranks_runtime_lets_a_collective_wait_as_long_as_the_group_does(tmp_path, monkeypatch, kind, role,
                                                                           users, wanted):
    """Issue 52 (6a): a TorchNeuron collective is one NEFF execution; the runtime ends an execution
    after NEURON_RT_EXEC_TIMEOUT (30 s in the configuration guide's table:
    captures/neuron-runtime/exec_timeout.json), long before the group's raised collective timeout
    while a peer compiles. The environment torchrun's ranks get says at least that timeout."""
    from tests.neuron.captures import load

    assert all(d < 1800 for d in load("neuron-runtime/exec_timeout.json")["documented_defaults_seconds"])
    if users is None:
        monkeypatch.delenv("NEURON_RT_EXEC_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("NEURON_RT_EXEC_TIMEOUT", users)
    device = types.SimpleNamespace(info=types.SimpleNamespace(kind=kind, dtype="float32", compile_backend="aot_eager"))
    made = WorkerGroup(make_settings(tmp_path, compile_timeout=3600.5, tp_collective_timeout=300.0), MODEL, device,
                       1 if role == "replica" else 2, [0] if role == "replica" else [0, 1], role=role)
    made.dir = str(tmp_path)
    made.rank0.dial(str(tmp_path), "t" * 64)
    launched = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kwargs: launched.append(kwargs["env"]))
    try:
        made._spawn()
    finally:
        made.close()
    assert launched[0].get("NEURON_RT_EXEC_TIMEOUT") == (wanted or users)


@pytest.mark.parametrize("beating, ended", [(True, False), (False, False), (False, True)])
def test_a_ready_group_whose_heartbeat_stands_still_is_dead_within_the_stall_timeout(group, tmp_path, beating, ended,
                                                                                      monkeypatch):
    """Issue 53 (12): a SIGSTOPped replica, idle, was found only by the next request sent to it, after
    the stall timeout. While ready, the group reads its ranks' heartbeats: one that stands still for
    the stall timeout (30 s here) makes the group dead at once, a stopped or frozen rank in its
    reason; heartbeats that move keep it ready. The fake clock moves 1 s per look, and each look
    (while ``beating``) sees both ranks' counters move; the watch ends when the group leaves ready.
    ``ended``: a rank ended itself after a failed request first (torchrun stopping the other is what
    stilled the heartbeats, seen before the launcher's exit on a loaded machine): that is the reason."""
    if ended:
        group.dir = str(tmp_path / "run")  # the launched group's run dir, torchrun's error files under it
        _rank_ends_itself(group.dir, 1, monkeypatch)
    looks = {"n": 0}

    def clock() -> float:
        looks["n"] += 1
        if beating:
            for rank in range(2):
                (tmp_path / f"rank{rank}.heartbeat").write_text(str(looks["n"]))
        if looks["n"] > 200:  # long past the stall timeout: the test's end
            group.state = "stopping"
        return float(looks["n"])

    for rank in range(2):
        (tmp_path / f"rank{rank}.heartbeat").write_text("0")
    group.rank0._clock = group._clock = clock
    group.beat_poll = 0.0
    group.proc, group.state = _sleeper(), "ready"
    try:
        group._watch_beats(group.proc)
        if beating:
            assert group.state == "stopping" and group.error is None and not group.froze
        else:
            assert group.state == "dead" and group.froze != ended and looks["n"] < 40
            if ended:
                assert group.error.startswith("rank 1 ended itself after a failed request (RuntimeError: x)")
            else:
                assert "heartbeat has not moved for 30 s" in group.error and "stopped or frozen" in group.error
            group._teardown.join(10)
    finally:
        group.proc.kill()
        group.proc.wait()


def test_a_request_on_a_replica_that_froze_under_it_is_served_by_another(tmp_path):
    """Issue 53 (12): the replica serving a request freezes (its heartbeat stands still, and the group
    is marked dead for it, as ``_watch_beats`` does); the request is served by another replica instead
    of failing, and the frozen one is restarted and reported."""
    from backend.launch.group import GroupState
    from tests.ui.fake_engines import start_manager, until

    manager, _launches = start_manager(tmp_path)
    try:
        pool = manager.engines["replicas"]
        pool.start(2, wait=True)
        frozen = pool.replicas[0]  # both free and cold: the first is picked

        def freeze(step: int) -> None:
            if step == 1:
                frozen._mark_dead("rank 0's heartbeat has not moved for 60 s: it is stopped or frozen")
                frozen.froze = True

        frozen.at_step = freeze
        _image, record = manager.generate(manager.validate("a fox", 64, 64, steps=2, seed=1, mode="eager"))
        assert record.place in ("replica 0", "replica 1") and frozen.state == GroupState.DEAD
        until(lambda: pool.restarts == 1, "the frozen replica's restart")  # (its teardown runs in the background)
        assert "replica 0 was restarted" in pool.describe()["error"]
        assert pool.replicas[0] is not frozen
    finally:
        manager.close()
