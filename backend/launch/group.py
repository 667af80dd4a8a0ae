"""A worker group (``WorkerGroup``): torchrun worker processes, launched, brought to READY, watched and
stopped (docs/tensor-parallel.md). The tensor-parallel engine holds one of N ranks, the replica pool N
of one rank. One injectable clock serves every deadline, so the stall timeout is tested with a fake one.

Why it died (``death_reason``): each rank's torchelastic error file (``<run dir>/torchrun/<run id>/
attempt_<n>/<local rank>/error.json``); else torchrun's failure summary for a rank ended by a signal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import logging
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil

from backend.errors import BackendNotReady, InvalidRequest, StudioError
from backend.hardware import env as device_env
from backend.hardware.core_plan import CoresDoNotFit
from backend.launch import protocol as proto
from backend.launch.calls import STARTING, GroupState, RankZero
from backend.request.records import EngineOutput, GenerationRequest, ProgressEvent
from backend.settings import Settings

__all__ = ["STARTING", "WorkerGroup", "check_degree", "tp_degrees", "whole_between"]

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """A zombie counts as gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def tp_degrees(heads: int, core_plan=None) -> list[int]:
    """The degrees that divide the heads (on Neuron those that also fit one chip: ``CorePlan.tp_degrees``)."""
    return core_plan.tp_degrees(heads) if core_plan is not None else \
        [d for d in range(1, min(heads, 64) + 1) if heads % d == 0]


def whole_between(field: str, value: Any, high: int) -> None:
    """Refuse ``value`` unless it is a whole number (not a bool) from 1 to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InvalidRequest(field, f"must be a whole number from 1 to {high}, got {value!r}",
                             (("whole_between", {"low": 1, "high": high, "got": repr(value)}),))


def check_degree(degree: Any, heads: int, core_plan=None) -> list[int]:
    """Refuse a degree that cannot work, naming what can (``tp_degrees``); each rank's NeuronCore ([] off Neuron)."""
    whole_between("tp_degree", degree, 64)
    if heads % degree:
        raise InvalidRequest("tp_degree", f"{degree} does not divide the model's {heads} attention heads; "
                                          f"use one of {', '.join(map(str, tp_degrees(heads, core_plan)))}")
    if core_plan is None:
        return []
    try:
        return core_plan.claim("tensor-parallel", degree, heads)  # the engine's name
    except CoresDoNotFit as exc:
        raise InvalidRequest("tp_degree", str(exc)) from None


def rank_failures(run_dir: str | None) -> dict[int, str]:
    """{rank: the exception it ended with, as its error file says}."""
    found = {}
    for path in glob.glob(os.path.join(run_dir or "", "torchrun", "*", "attempt_*", "*", "error.json")):
        try:
            message = json.loads(Path(path).read_text("utf-8")).get("message")
            rank = int(os.path.basename(os.path.dirname(path)))
        except (OSError, ValueError, AttributeError):
            continue
        found[rank] = str(message.get("message") if isinstance(message, dict) else message)
    return found


def death_reason(run_dir: str | None, log_text: str, code: int) -> str:
    """One line: each failed rank and what it died of, else torchrun's own last error line."""
    failures, parts = rank_failures(run_dir), []
    ending = proto.RankEnding.__name__ + ": "
    for rank, message in sorted(failures.items())[:4]:
        line = message.splitlines()[0]
        parts.append(f"rank {rank} ended itself after a failed request ({line.removeprefix(ending)[:300]})"
                     if line.startswith(ending) else f"rank {rank} failed: {line[:300]}")
    # torchrun's failure summary: (rank, exit code; negative: the signal)
    exits = re.findall(r"rank\s*:\s*(\d+).*?\n.*?exitcode\s*:\s*(-?\d+)", log_text) or \
        re.findall(r"rank: (\d+) \(local_rank: \d+\)\s+exitcode\s*:\s*(-?\d+)", log_text)
    for rank, exitcode in ((int(r), int(c)) for r, c in exits[:4]):
        if rank not in failures:
            how = f"signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"status {exitcode}"
            parts.append(f"rank {rank} exited with {how}")
    if not parts:
        errors = [line.strip() for line in log_text.splitlines()
                  if re.search(r"error|Error|refused|in use", line) and "Traceback" not in line]
        parts.append(f"torchrun exited with status {code}" + (f": {errors[-1][:300]}" if errors else ""))
    return "; ".join(parts) + " — the group is down"


class WorkerGroup:
    def __init__(self, settings: Settings, model_path: str, device, degree: int, cores: list[int], *,
                 role: str = "tp", place: str = "tp", warm: list[str] | None = None,
                 env: dict[str, str] | None = None, threads: int = 0,
                 on_dead: Callable[["WorkerGroup"], None] | None = None,
                 on_change: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic, grace: float = 5.0):
        """Rank r on NeuronCore ``cores[r]`` ([] off Neuron); ``role`` ``replica``: one rank, the whole
        pipeline; ``place``: its name in the compile table. ``on_dead(group)`` runs (in a background
        thread) once a group that was ready died and its processes are gone."""
        self.degree, self.cores, self.role, self.place = degree, list(cores), role, place
        self.name = "tensor-parallel group" if role == "tp" else place
        info = device.info
        self.device_kind = info.kind
        self.compile_mode = settings.runs_as(role) if role == "tp" else None
        self.start_timeout, self.grace = settings.tp_start_timeout, grace
        self.torchrun_args = shlex.split(settings.tp_torchrun_args)
        self._clock = clock
        worker_settings = dataclasses.replace(settings, device=info.kind, dtype=info.dtype,
                                              compile_backend=info.compile_backend, tp_degree=self.degree)
        self._config = proto.WorkerConfig(
            settings=worker_settings.to_json(), model_path=model_path, cores=self.cores,
            warm=list(warm or []), parent_pid=os.getpid(), role=role, threads=threads)
        # On Neuron the runtime lets one execution (a tensor-parallel collective) wait as long as the group does.
        ranks = device_env.rank_exec_timeout(settings.collective_seconds(info.kind)) \
            if info.kind == "neuron" and role == "tp" else {}
        self.env, self.threads, self._on_dead, self._on_change = {**ranks, **(env or {})}, threads, on_dead, on_change
        self.was_ready, self.state, self.error = False, GroupState.STOPPED, None
        self.froze = False  # it died because a rank's heartbeat stopped (SIGSTOP, a frozen host)
        self.beat_poll = max(0.05, min(1.0, settings.tp_stall_timeout / 5))  # heartbeats read this often while ready
        self.timings: dict[str, Any] = {}
        self.ranks: list[dict[str, Any]] = []  # per-rank READY reports: pid, core, sharded weights
        self.proc: subprocess.Popen | None = None
        self.dir: str | None = None
        self._pids: set[int] = set()
        self._ready, self._lock = threading.Event(), threading.Lock()
        self._log = None
        self._teardown: threading.Thread | None = None
        self.rank0 = RankZero(self.name, place, degree, settings, clock, lambda: (self.state, self.error),
                              self._mark_dead)
        self.run_root: str | None = None  # where run dirs are made (None: the temp folder, if its paths are short)

    def close(self) -> None:
        """Stop at once (SIGTERM, grace, SIGKILL); a dead group stays dead, with its reason."""
        self.stop(final_state=GroupState.DEAD if self.state == GroupState.DEAD else GroupState.STOPPED, polite=False)
        self._cleanup_dir()
        self.rank0.close()

    @property
    def socket_path(self) -> str | None:
        return self.rank0.socket_path

    def describe(self) -> dict[str, Any]:
        """No I/O: pids, cores and shards were read once, at READY."""
        return {
            "state": self.state, "place": self.place, "world_size": self.degree,
            "compile_mode": self.compile_mode, "device": self.device_kind,
            "cores": list(self.cores) if self.device_kind == "neuron" else None, "pids": sorted(self._pids),
            "rank_pids": {str(r): pid for r, pid in self.rank_pids().items()},  # JSON keys are text
            "ranks": self.ranks, "error": self.error, "last_request_error": self.rank0.last_request_error,
            "timings": self.timings,
            "socket": self.socket_path,
        }

    def require_ready(self) -> None:
        if self.state != GroupState.READY:
            raise BackendNotReady(f"the {self.name} is {self.state}" + (f" ({self.error})" if self.error else "")
                                  + "; start it again (Start beside the mode, or the System tab)")

    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False) -> EngineOutput:
        """One request at a time: the caller's engine queues them."""
        self.require_ready()
        out, self.timings["last_round_trip"] = self.rank0.run(request, on_progress, should_stop, forbid_compile)
        self.timings["last_worker_seconds"] = out.seconds
        return out

    def health(self, timeout: float = 2.0) -> dict[str, Any]:
        """Rank 0's health reply (a starting group takes its phase), else the state and why."""
        if self.state in (GroupState.STOPPED, GroupState.DEAD, GroupState.STOPPING) or not self.socket_path:
            return {"state": self.state, "error": self.error}
        try:
            msg = self.rank0.request({"type": "health"}, deadline=self._clock() + timeout)
        except (StudioError, TimeoutError) as exc:
            return {"state": self.state, "error": f"health check failed: {exc}"}
        self._phase(self.proc, msg.get("state"))
        return msg

    def _tail(self, name: str, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.dir, name), encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except (OSError, TypeError):  # TypeError: no run dir
            return ""

    def rank_logs(self, lines: int = 20) -> dict[str, str]:
        """Read only when someone looks at them."""
        return {**{f"rank {r}": self._tail(f"rank{r}.log", lines) for r in range(self.degree)},
                "torchrun": self._tail("torchrun.log", lines)}

    def rank_pids(self) -> dict[int, int]:
        return {int(r["rank"]): int(r["pid"]) for r in self.ranks if r.get("pid")}

    # The transitions below are the only code that sets ``state``; ``_spawn``, ``_watch`` and
    # ``_end_processes`` are what touches processes (a test double replaces those three).
    def start(self) -> None:
        if self._teardown is not None:
            self._teardown.join()  # the previous group is fully gone before a new one starts
        with self._lock:
            if self.state not in (GroupState.STOPPED, GroupState.DEAD):
                raise BackendNotReady(f"the {self.name} is already {self.state}")
            self._cleanup_dir()
            self.dir = tempfile.mkdtemp(prefix=proto.RUN_DIR_PREFIX, dir=proto.run_root(self.run_root))  # 0700
            self.error, self.froze = None, False
            self.timings, self.ranks, self._pids = {}, [], set()
            self._ready.clear()
            try:
                self.rank0.dial(self.dir, secrets.token_hex(32))
                self.proc = self._spawn()
            except BaseException:  # no launcher: the run dir goes now, not at a close that may not come
                self._cleanup_dir()
                self.dir = None
                raise
            self.state = GroupState.LAUNCHING
        self._watch(self.proc)

    def _spawn(self):  # (lock held) the launcher process
        pixels = self.rank0.pixels()
        config = dataclasses.replace(self._config, socket=self.socket_path, run_dir=self.dir,
                                     pixels=pixels.name, pixels_bytes=pixels.size)
        env = dict(os.environ, **{proto.CONFIG_VAR: config.to_json(), proto.TOKEN_VAR: self.rank0.key})
        # The app's own NeuronCores are not the ranks': each rank sets its core before torch loads.
        env.pop("NEURON_RT_VISIBLE_CORES", None)
        env.update(self.env)
        # torchrun's own log dir (its per-rank error files) inside the run dir, which goes with
        # the group: by default it makes a torchelastic_* dir in /tmp and never removes it.
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={self.degree}", "--monitor-interval=0.5",
               f"--log-dir={os.path.join(self.dir, 'torchrun')}", *self.torchrun_args,
               "-m", "backend.workers.worker"]
        self._log = open(os.path.join(self.dir, "torchrun.log"), "w")
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def _watch(self, proc) -> None:
        for watch, name in ((self._monitor, "monitor"), (self._await_ready, "ready"), (self._watch_beats, "heartbeat")):
            threading.Thread(target=watch, args=(proc,), name=f"tp-{name}", daemon=True).start()

    def _watch_beats(self, proc) -> None:
        """While ready: a rank whose heartbeat has not moved for the stall timeout is stopped or frozen,
        and the group is dead at once (a replica restarts), so no request waits on it, busy or idle."""
        stall = self.rank0.stall_timeout
        while proc is self.proc and self.state not in (GroupState.STOPPING, GroupState.STOPPED, GroupState.DEAD):
            rank = self.rank0.stopped_beating(stall) if self.state == GroupState.READY else None
            if rank is not None:
                # A rank that failed is the cause (torchrun then ends the others, whose heartbeats stop): on a
                # busy machine the stall may be seen before the launcher's exit, so its error file is read first.
                if rank_failures(self.dir):
                    self._mark_dead(death_reason(self.dir, "", 0))
                else:
                    self._mark_dead(f"rank {rank}'s heartbeat has not moved for {stall:g} s (--tp-stall-timeout): it "
                                    "is stopped or frozen; the group is being stopped", froze=True)
                return
            time.sleep(self.beat_poll)

    def _became_ready(self, proc, timings: dict[str, Any], ranks: list[dict[str, Any]]) -> None:
        with self._lock:
            if proc is self.proc and self.state in STARTING:
                self.state, self.timings, self.was_ready = GroupState.READY, dict(timings), True
                self.ranks = list(ranks)
                self._pids = {int(r["pid"]) for r in self.ranks if r.get("pid")}
        self._on_change()

    def _phase(self, proc, phase: str | None) -> None:
        with self._lock:
            if proc is self.proc and self.state in STARTING and phase in (GroupState.LOADING, GroupState.WARMING):
                self.state = GroupState(phase)

    def _exited(self, proc, reason: str) -> bool:
        """The launcher exited: dead, unless being stopped (or replaced). True when this made it dead."""
        with self._lock:
            if proc is not self.proc or self.state in (GroupState.STOPPING, GroupState.STOPPED, GroupState.DEAD):
                self._ready.set()
                return False
            self.state, self.error = GroupState.DEAD, reason
        self._ready.set()
        self._on_change()
        return True

    def wait_ready(self, timeout: float | None = None) -> bool:
        self._ready.wait(timeout)
        return self.state == GroupState.READY

    def _monitor(self, proc: subprocess.Popen) -> None:
        code = proc.wait()
        try:
            reason = death_reason(self.dir, self._tail("torchrun.log", 200), code)
        except Exception as exc:  # noqa: BLE001 - the group is dead whatever the log says
            reason = f"torchrun exited with status {code} ({type(exc).__name__} reading its log)"
        if self._exited(proc, reason):
            self.stop(final_state=GroupState.DEAD)  # torchrun is gone; make sure no rank outlives it
            self._report_death(proc)

    def _report_death(self, proc: subprocess.Popen) -> None:
        if self._on_dead is not None and self.was_ready and proc is self.proc and self.state == GroupState.DEAD:
            try:
                self._on_dead(self)
            except Exception:  # noqa: BLE001 - a failed restart must not hide the death
                log.exception("on_dead of %s", self.name)

    @property
    def ended_itself(self) -> bool:
        """A rank left on purpose after a failed request (whether or not rank 0's reply said so)."""
        return self.state == GroupState.DEAD and any(
            message.startswith(proto.RankEnding.__name__ + ":") for message in rank_failures(self.dir).values())

    def _await_ready(self, proc: subprocess.Popen) -> None:
        """Whatever happens (a timeout, an error reply, this thread's failure), it ends ready or dead."""
        try:
            deadline = self._clock() + self.start_timeout
            while self.state == GroupState.LAUNCHING and not os.path.exists(self.socket_path or ""):
                if self._clock() > deadline:
                    raise BackendNotReady(f"the workers did not open their socket within {self.start_timeout:g} s")
                time.sleep(0.1)
            if self.state not in STARTING:
                return
            # Loading is silent and may be slow on a busy machine: only the start deadline bounds it
            # (a rank that exits meanwhile is seen by the monitor).
            msg = self.rank0.wait_ready(deadline, self.start_timeout, lambda m: self._phase(proc, m.get("phase")))
            if msg.get("type") != "ready":
                raise proto.error_from_message(msg)
            self._became_ready(proc, msg.get("timings") or {}, msg.get("ranks") or [])
        except TimeoutError as exc:
            self._mark_dead(f"the group did not start: no READY from the workers within {exc.args[1]:g} s", proc=proc)
        except Exception as exc:  # noqa: BLE001 - reported as the group's state, never lost in a thread
            why = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
            self._mark_dead(f"the group did not start: {why}", proc=proc)
        finally:
            self._ready.set()

    def _mark_dead(self, reason: str, froze: bool = False, proc=None) -> None:
        """Dead now, torn down in the background (a hung rank needs SIGKILL); a dead group keeps its first
        reason. With ``proc``: unless that launch is being stopped or was replaced."""
        with self._lock:
            if self.state == GroupState.DEAD:
                return
            if proc is not None and (proc is not self.proc or self.state in (GroupState.STOPPING, GroupState.STOPPED)):
                return
            self.state, self.error, self.froze = GroupState.DEAD, reason, froze
        self._ready.set()
        self._on_change()
        proc = self.proc

        def teardown() -> None:
            self.stop(final_state=GroupState.DEAD)
            self._report_death(proc)

        self._teardown = threading.Thread(target=teardown, daemon=True)
        self._teardown.start()

    def stop(self, final_state: GroupState = GroupState.STOPPED, polite: bool = True) -> None:
        """Ask politely (a ready group: cancel, then shutdown), then SIGTERM, then SIGKILL. Leaves no process."""
        with self._lock:
            proc = self.proc
            stopping = self.state == GroupState.STOPPING and final_state == GroupState.STOPPED
            if proc is None or self.state == GroupState.STOPPED or stopping:
                return
            polite = polite and self.state == GroupState.READY
            if final_state == GroupState.STOPPED:
                self.state = GroupState.STOPPING
        pids = self._end_processes(proc, polite)
        self.rank0.hang_up()
        run_dir = None
        with self._lock:
            if self.proc is proc:  # a restart may already have begun
                if final_state == GroupState.STOPPED or self.state != GroupState.DEAD:
                    self.state = final_state
                self._pids = pids
                # A stopped group leaves nothing behind; a dead one keeps its logs (the page shows
                # their tails) until the next start or close.
                run_dir = self.dir if self.state == GroupState.STOPPED else None
        self._ready.set()
        self._on_change()
        if self._log and final_state == GroupState.STOPPED:
            self._log.close()
        if run_dir:
            self._cleanup_dir(run_dir)

    def _end_processes(self, proc, polite: bool) -> set[int]:
        try:
            pids = self._pids | {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pids = set(self._pids)
        if polite and proc.poll() is None and self.socket_path and os.path.exists(self.socket_path):
            with contextlib.suppress(StudioError, TimeoutError):  # cancel first: no shutdown queued behind a run
                self.rank0.request({"type": "cancel"}, deadline=self._clock() + 1)
                self.rank0.request({"type": "shutdown"}, deadline=self._clock() + self.grace)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(subprocess.TimeoutExpired):  # after a polite shutdown: the grace period
                proc.wait(timeout=self.grace if (sig == signal.SIGTERM and polite) else 0)
            alive = [p for p in pids if _alive(p)]
            if proc.poll() is not None and not alive:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            if sig == signal.SIGTERM:
                _wait_gone([proc.pid, *alive], self.grace)
        proc.wait()
        _wait_gone(list(pids), self.grace)
        return pids

    def survivors(self) -> list[int]:
        pids = set(self._pids) | ({self.proc.pid} if self.proc else set())
        return sorted(p for p in pids if _alive(p))

    def _cleanup_dir(self, path: str | None = None) -> None:
        """Remove a run dir (default the current one); ``remove_run_dir`` guards what it removes."""
        path = path or self.dir
        if (path is None or path == self.dir) and self._log and not self._log.closed:
            self._log.close()  # torchrun's log lives in it
        proto.remove_run_dir(path, require_contents=False)
