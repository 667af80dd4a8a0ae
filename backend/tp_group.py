"""The manager's side of the tensor-parallel worker group: launch, READY, health, calls, monitor, stop.

Lifecycle (as TGI and vLLM do it): ``launching`` (torchrun started) -> ``loading`` -> ``warming`` ->
``ready`` (rank 0 sent READY with its timings) ... ``stopping`` -> ``stopped``; ``dead`` when any
rank exits (torchrun then ends the group and exits; a monitor thread sees it at once) or a call
stalls past its deadline. A request that fails (bad input, OOM, a compiler error) is answered by
the worker and leaves the group ``ready``: the status says which happened.

The group runs in its own session, so stop = a polite shutdown request, then SIGTERM to the whole
process group, a grace period, then SIGKILL; every rank pid seen is checked afterwards. Workers also
exit by themselves when the app's process disappears.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from backend import tp_protocol as proto
from backend.errors import (BackendNotReady, CompileFailure, GenerationCancelled, GenerationFailed, InvalidRequest,
                            ShapeLocked, StudioError)
from backend.records import GenerationRequest, ProgressEvent
from backend.tp_worker import CONFIG_VAR, TOKEN_VAR

ROOT = Path(__file__).resolve().parent.parent
_ERRORS = {"invalid": lambda m: InvalidRequest("request", m), "cancelled": GenerationCancelled,
           "compile_failed": CompileFailure, "locked": ShapeLocked, "failed": GenerationFailed,
           "busy": BackendNotReady, "unauthorized": GenerationFailed}


class GroupDead(GenerationFailed):
    """The worker group died (a rank exited, or a call stalled and the group was stopped)."""


class TPWorkerGroup:
    def __init__(self, *, model_path: str, device_kind: str, dtype: str, compile_backend: str,
                 compile_mode: str, degree: int, cache_dir: str, warm: list[str] | None = None,
                 cores: list[int] | None = None, collective_timeout: float = 300.0, min_size: int = 64, max_size: int = 2048, max_steps: int = 50,
                 start_timeout: float = 600.0, stall_timeout: float = 60.0, compile_timeout: float = 1800.0,
                 grace: float = 5.0, torchrun_args: str = "", clock: Callable[[], float] = time.monotonic):
        self.degree = degree
        self.compile_mode = compile_mode
        self.cores = list(cores or [])  # NeuronCore of each rank, from the core plan (empty off Neuron)
        self.device_kind = device_kind
        self.start_timeout, self.stall_timeout, self.compile_timeout = start_timeout, stall_timeout, compile_timeout
        self.grace = grace
        self.torchrun_args = shlex.split(torchrun_args)
        self._clock = clock
        self._config = {"model_path": model_path, "device": device_kind, "dtype": dtype,
                        "compile_backend": compile_backend, "compile_mode": compile_mode, "warm": warm or [],
                        "cache_dir": str(cache_dir), "cores": self.cores,
                        "collective_timeout": collective_timeout, "min_size": min_size,
                        "max_size": max_size, "max_steps": max_steps, "parent_pid": os.getpid()}
        self.state = "stopped"
        self.error: str | None = None
        self.last_request_error: str | None = None
        self.timings: dict[str, Any] = {}
        self.proc: subprocess.Popen | None = None
        self.dir: str | None = None
        self.socket_path: str | None = None
        self._token = ""
        self._pids: set[int] = set()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._log = None
        self._teardown: threading.Thread | None = None

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self._teardown is not None:
            self._teardown.join()  # the previous group is fully gone before a new one starts
        with self._lock:
            if self.state not in ("stopped", "dead", "failed"):
                raise BackendNotReady(f"the tensor-parallel group is already {self.state}")
            self._cleanup_dir()
            self.dir = tempfile.mkdtemp(prefix="neuron-studio-tp-")  # 0700: ours alone
            self.socket_path = os.path.join(self.dir, "tp.sock")
            self._token = secrets.token_hex(32)
            config = dict(self._config, socket=self.socket_path, run_dir=self.dir)
            env = dict(os.environ, **{CONFIG_VAR: json.dumps(config), TOKEN_VAR: self._token})
            # The app's own NeuronCores are not the ranks': each rank sets its core before torch loads.
            env.pop("NEURON_RT_VISIBLE_CORES", None)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={self.degree}", "--monitor-interval=0.5", *self.torchrun_args,
                   "-m", "backend.tp_worker"]
            self._log = open(os.path.join(self.dir, "torchrun.log"), "w")
            self.error = self.last_request_error = None
            self.timings = {}
            self._pids = set()
            self._ready.clear()
            self.started_at = time.time()
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            self.state = "launching"
        threading.Thread(target=self._monitor, args=(self.proc,), name="tp-monitor", daemon=True).start()
        threading.Thread(target=self._await_ready, name="tp-ready", daemon=True).start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        self._ready.wait(timeout)
        return self.state == "ready"

    def _monitor(self, proc: subprocess.Popen) -> None:
        code = proc.wait()
        with self._lock:
            if proc is not self.proc or self.state in ("stopping", "stopped", "dead"):
                return
            self.state = "dead"
            self.error = self._death_reason(code)
        self._ready.set()
        self.stop(final_state="dead")  # torchrun is gone; make sure no rank outlives it

    def _death_reason(self, code: int) -> str:
        text = self._tail("torchrun.log", 200)
        failed = re.findall(r"rank\s*:\s*(\d+).*?\n.*?exitcode\s*:\s*(-?\d+)", text) or \
            re.findall(r"rank: (\d+) \(local_rank: \d+\)\s+exitcode\s*:\s*(-?\d+)", text)
        parts = []
        for rank, exitcode in failed[:4]:
            exitcode = int(exitcode)
            how = f"signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"status {exitcode}"
            parts.append(f"rank {rank} exited with {how}")
        if not parts:
            errors = [line.strip() for line in text.splitlines()
                      if re.search(r"error|Error|refused|in use", line) and "Traceback" not in line]
            parts.append(f"torchrun exited with status {code}" + (f": {errors[-1][:300]}" if errors else ""))
        return "; ".join(parts) + " — the group is down"

    def _await_ready(self) -> None:
        deadline = self._clock() + self.start_timeout
        while self.state == "launching" and not os.path.exists(self.socket_path or ""):
            if self._clock() > deadline:
                self._fail_start("the workers did not open their socket in time")
                return
            time.sleep(0.1)
        try:
            header, _ = self._request({"type": "wait_ready"}, deadline=deadline)
        except StudioError as exc:
            self._fail_start(str(exc))
            return
        with self._lock:
            if self.state in ("launching", "loading", "warming"):
                self.state, self.timings = "ready", header.get("timings", {})
                self._pids = self._rank_pids()
        self._ready.set()

    def _fail_start(self, reason: str) -> None:
        with self._lock:
            if self.state in ("dead", "stopping", "stopped"):
                self._ready.set()
                return
        self._mark_dead(reason)

    def _mark_dead(self, reason: str) -> None:
        """Report the group dead now; tear it down in the background (a hung rank needs SIGKILL)."""
        with self._lock:
            self.state, self.error = "dead", reason
        self._ready.set()
        self._teardown = threading.Thread(target=self.stop, kwargs={"final_state": "dead"}, daemon=True)
        self._teardown.start()

    def stop(self, final_state: str = "stopped") -> None:
        """Shut the group down: ask politely, then SIGTERM the group, then SIGKILL. Leaves no process."""
        with self._lock:
            proc = self.proc
            if proc is None or self.state == "stopped" or (self.state == "stopping" and final_state == "stopped"):
                return
            polite = self.state == "ready"
            if final_state == "stopped":
                self.state = "stopping"
            pids = self._pids | self._rank_pids()
        if polite and proc.poll() is None and self.socket_path and os.path.exists(self.socket_path):
            try:  # stop a running generation first, so the shutdown is not queued behind it
                self._request({"type": "cancel"}, deadline=self._clock() + 1)
                self._request({"type": "shutdown"}, deadline=self._clock() + self.grace)
            except StudioError:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                proc.wait(timeout=self.grace if sig == signal.SIGTERM else 0)
            except subprocess.TimeoutExpired:
                pass
            alive = [p for p in pids if _alive(p)]
            if proc.poll() is not None and not alive:
                break
            _signal_group(proc.pid, sig)
            for pid in alive:
                _signal(pid, sig)
            if sig == signal.SIGTERM:
                _wait_gone([proc.pid, *alive], self.grace)
        proc.wait()
        _wait_gone(list(pids), self.grace)
        with self._lock:
            if self.proc is proc:  # a restart may already have begun
                if final_state == "stopped" or self.state != "dead":
                    self.state = final_state
                self._pids = pids
        if self._log and final_state == "stopped":
            self._log.close()

    def survivors(self) -> list[int]:
        """Rank or launcher pids of this group still alive (empty after a stop)."""
        pids = set(self._pids) | ({self.proc.pid} if self.proc else set())
        return sorted(p for p in pids if _alive(p))

    def _cleanup_dir(self) -> None:
        if self.dir and os.path.isdir(self.dir):
            shutil.rmtree(self.dir, ignore_errors=True)

    def close(self) -> None:
        self.stop()
        self._cleanup_dir()

    # calls -------------------------------------------------------------------------------------
    def _connect(self, deadline: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(max(0.01, deadline - self._clock()))
        try:
            sock.connect(self.socket_path)
        except OSError as exc:
            sock.close()
            raise GroupDead(self.error or f"cannot reach the worker group: {exc}") from None
        return sock

    def _request(self, header: dict[str, Any], deadline: float | None = None,
                 on_message: Callable[[dict[str, Any]], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> tuple[dict[str, Any], bytes]:
        """One request on its own connection. Progress messages go to ``on_message``; the call fails
        when the group dies, when ``deadline`` passes, or when no message arrives within the stall
        timeout (longer while compiling)."""
        start_deadline = deadline or self._clock() + 30
        sock = self._connect(start_deadline)
        cancelled = False
        try:
            proto.send_message(sock, {"type": "hello", "token": self._token})
            proto.send_message(sock, header)
            phase, last = "", self._clock()
            while True:
                stall = self.compile_timeout if phase == "compiling" else self.stall_timeout
                limit = min(deadline or float("inf"), last + stall)
                if should_stop and not cancelled and should_stop():
                    cancelled = True  # every rank stops at the next step (they vote on it)
                    self._request({"type": "cancel"}, deadline=self._clock() + 5)
                if not proto.wait_readable(sock, min(0.2, limit - self._clock())):
                    if self.state == "dead":
                        raise GroupDead(self.error or "the worker group died")
                    if self._clock() >= limit:
                        raise TimeoutError(phase, stall)
                    continue
                try:  # a message has begun: read all of it (a stalled peer still hits the limit)
                    msg, payload = proto.recv_message(sock, deadline=limit)
                except proto.DeadlineExceeded:
                    raise TimeoutError(phase, stall) from None
                except proto.ProtocolError as exc:
                    time.sleep(1.0)  # a dying rank 0 closes the socket just before torchrun exits
                    raise GroupDead(self.error or f"lost the worker group: {exc}") from None
                last = self._clock()
                if msg["type"] != "progress":
                    return msg, payload
                phase = msg.get("phase", phase)
                if on_message:
                    on_message(msg)
        finally:
            sock.close()

    def call(self, header: dict[str, Any], **kwargs) -> tuple[dict[str, Any], bytes]:
        """A request whose stall kills the group (a hung rank cannot be told apart from a dead one)."""
        try:
            msg, payload = self._request(header, **kwargs)
        except TimeoutError as exc:
            phase, stall = exc.args
            reason = (f"no progress for {stall:g} s" + (f" while {phase}" if phase else "")
                      + " — a rank is hung or too slow; the group is being stopped")
            self._mark_dead(reason)
            raise GroupDead(reason + self._tails_note()) from None
        if msg["type"] == "error":
            kind = msg.get("kind", "failed")
            if kind == "group_broken":  # a rank died under a collective; torchrun is ending the group
                deadline = self._clock() + 10
                while self.state != "dead" and self._clock() < deadline:
                    time.sleep(0.05)
                if self.state != "dead":
                    self._mark_dead(msg.get("error", "a collective failed"))
                raise GroupDead((self.error or msg.get("error", "")) + self._tails_note())
            self.last_request_error = msg.get("error")
            exc = _ERRORS.get(kind, GenerationFailed)(msg.get("error", kind))
            for attr in ("compiles", "compile_seconds"):
                if attr in msg:
                    setattr(exc, attr, msg[attr])
            raise exc
        return msg, payload

    def health(self, timeout: float = 2.0) -> dict[str, Any]:
        if self.state in ("stopped", "dead", "stopping") or not self.socket_path:
            return {"state": self.state, "error": self.error}
        try:
            msg, _ = self._request({"type": "health"}, deadline=self._clock() + timeout)
        except (StudioError, TimeoutError) as exc:
            return {"state": self.state, "error": f"health check failed: {exc}"}
        if self.state in ("launching", "loading", "warming") and msg.get("state") in ("loading", "warming"):
            self.state = msg["state"]
        return msg

    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False):
        """Generate through the group; the same contract as InProcessEngine.run."""
        from PIL import Image

        from backend.engine import EngineOutput

        if self.state != "ready":
            hint = {"stopped": "; select tensor-parallel mode again to start it",
                    "dead": "; restart it from the System panel or by selecting the mode again"}.get(
                        self.state, "; try again when it is ready")
            raise BackendNotReady(f"the tensor-parallel group is {self.state}"
                                  + (f" ({self.error})" if self.error else "") + hint)

        def relay(msg: dict[str, Any]) -> None:
            on_progress(ProgressEvent(msg["phase"], msg.get("step", 0), msg.get("steps", 0), "tp",
                                      msg.get("shape", "")))

        header = {"type": "generate", **request.to_json(), "forbid_compile": forbid_compile}
        began = self._clock()
        msg, payload = self.call(header, on_message=relay, should_stop=should_stop)
        # A view onto the received bytes (no copy); the bytearray lives as long as the image.
        image = Image.frombuffer("RGB", (msg["width"], msg["height"]), payload, "raw", "RGB", 0, 1)
        self.timings["last_round_trip"] = self._clock() - began
        self.timings["last_worker_seconds"] = msg["seconds"]
        return EngineOutput(image=image, compiles=msg["compiles"], compile_seconds=msg["compile_seconds"],
                            neff_compiles=msg.get("neff_compiles", 0), seconds=msg["seconds"],
                            encode=msg["encode"], denoise=msg["denoise"], decode=msg["decode"])

    # status ------------------------------------------------------------------------------------
    def _rank_pids(self) -> set[int]:
        import psutil

        try:
            return {p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)}
        except (psutil.NoSuchProcess, AttributeError):
            return set()

    def _tail(self, name: str, lines: int = 20) -> str:
        if not self.dir:
            return ""
        try:
            with open(os.path.join(self.dir, name), encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return ""

    def rank_logs(self, lines: int = 20) -> dict[str, str]:
        logs = {f"rank {r}": self._tail(f"rank{r}.log", lines) for r in range(self.degree)}
        logs["torchrun"] = self._tail("torchrun.log", lines)
        return logs

    def rank_pids(self) -> dict[int, int]:
        """{rank: pid}, from each rank's first log line."""
        found = {}
        for r in range(self.degree):
            m = re.search(r"rank (\d+)/\d+ starting \(pid (\d+)\)", self._tail(f"rank{r}.log", 10_000))
            if m:
                found[int(m.group(1))] = int(m.group(2))
        return found

    def _tails_note(self) -> str:
        last_lines = {r: self._tail(f"rank{r}.log", 3).strip() for r in range(self.degree)}
        tails = [f"[rank {r}] {text.splitlines()[-1]}" for r, text in last_lines.items() if text]
        return ("\n" + "\n".join(tails)) if tails else ""

    def describe(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "world_size": self.degree,
            "compile_mode": self.compile_mode,
            "device": self.device_kind,
            "cores": list(self.cores) if self.device_kind == "neuron" else None,
            "pids": sorted(self._pids),
            "rank_pids": {str(r): pid for r, pid in self.rank_pids().items()},  # JSON keys are text
            "error": self.error,
            "last_request_error": self.last_request_error,
            "timings": self.timings,
            "socket": self.socket_path,
        }


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
