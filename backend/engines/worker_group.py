"""A worker group: torchrun worker processes, launched, watched, called and stopped here.

The tensor-parallel engine holds one group of N ranks (the transformer sharded over them); the
replica pool holds N groups of one rank each (a whole pipeline per replica). What a group knows:

- the lifecycle (as TGI and vLLM do it): ``launching`` (torchrun started) -> ``loading`` ->
  ``warming`` -> ``ready`` (rank 0 answered ``wait_ready`` with READY: timings, and per rank its pid,
  core and which transformer weights it holds) ... ``stopping`` -> ``stopped``; ``dead`` when any
  rank exits (torchrun ends the group; the monitor thread sees it at once), when a call stalls past
  its deadline, or when the start fails. Every background thread ends the group in a state (ready,
  dead, stopped) with its reason, whatever it dies of. A request that fails (bad input, a compiler
  error) is answered by the worker and leaves the group ``ready``;
- stall detection: a request with no message for the stall timeout is hung, unless every rank's
  heartbeat (a counter each rank's thread writes to ``<run dir>/rank<N>.heartbeat``) still moves:
  on Neuron the compiler runs silently at a cold shape, eager mode included, often for longer than
  the stall timeout. Such a silence may last up to the compile timeout; a rank that is stopped or
  frozen stops beating and the group is declared dead within the stall timeout;
- stop: a polite shutdown request, then SIGTERM to the whole process group, a grace period, then
  SIGKILL; every pid seen is checked afterwards. Workers also exit when the app's process is gone.

Which cores its ranks get and what it may run are its engine's business (the core plan is checked
there, before a group is made). One clock (``clock``, injectable) serves every deadline, so the
stall timeout is tested with a fake clock.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from backend.errors import BackendNotReady, GenerationFailed, GroupDead, InvalidRequest, StudioError
from backend.records import EngineOutput, GenerationRequest, ProgressEvent
from backend.settings import Settings
from backend.tp import processes
from backend.tp import protocol as proto

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
STARTING = ("launching", "loading", "warming")


def check_degree(degree: Any, heads: int, core_plan=None, owner: str = "tensor-parallel") -> list[int]:
    """Refuse a degree that cannot work, naming what can; return each rank's NeuronCore ([] off Neuron)."""
    if isinstance(degree, bool) or not isinstance(degree, int) or not 1 <= degree <= 64:
        raise InvalidRequest("tp_degree", f"must be a whole number from 1 to 64, got {degree!r}")
    if heads % degree:
        divisors = [d for d in range(1, min(heads, 64) + 1) if heads % d == 0]
        raise InvalidRequest("tp_degree", f"{degree} does not divide the model's {heads} attention heads; "
                                          f"use one of {', '.join(map(str, divisors))}")
    if core_plan is None:
        return []
    from backend.core_plan import CoresDoNotFit

    try:
        return core_plan.claim(owner, degree, heads)
    except CoresDoNotFit as exc:
        raise InvalidRequest("tp_degree", str(exc)) from None


def transport_parts(stamps: dict[str, float], sent: float, returned: float, built: float,
                    worker_seconds: float) -> dict[str, float]:
    """Where one request's round trip went, in seconds, from the app's and rank 0's stamps (one
    monotonic clock); the parts add up to the round trip less the pipeline's own seconds: connect
    + hello + request to rank 0; the hand-over to rank 0's job loop; the job's broadcast to the
    ranks; the run beyond the pipeline's own seconds; the pixels written out and the header made;
    the result's transfer and parse; the image made from the pixels."""
    if not {"received", "taken", "broadcast", "ran", "sending"} <= set(stamps):
        return {}
    return {"request": stamps["received"] - sent, "queue": stamps["taken"] - stamps["received"],
            "broadcast": stamps["broadcast"] - stamps["taken"],
            "run_beyond_pipeline": stamps["ran"] - stamps["broadcast"] - worker_seconds,
            "assemble": stamps["sending"] - stamps["ran"], "transfer": returned - stamps["sending"],
            "decode": built - returned}


class WorkerGroup:
    def __init__(self, settings: Settings, model_path: str, device, degree: int, cores: list[int], *,
                 role: str = "tp", place: str = "tp", warm: list[str] | None = None,
                 env: dict[str, str] | None = None, threads: int = 0,
                 on_dead: Callable[["WorkerGroup"], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, grace: float = 5.0):
        """``device`` is the app's ``backend.device.Device``: its kind, dtype and compile backend go
        to the ranks. ``degree`` ranks, rank r on NeuronCore ``cores[r]`` ([] off Neuron); ``role``
        ``tp`` shards the transformer over the ranks, ``replica`` (one rank) loads it whole. ``place``
        names the group in the compile table; ``warm`` are shapes compiled before READY; ``env`` is
        added to the ranks' environment; ``threads`` caps each rank's CPU threads (0: torch's);
        ``on_dead(group)`` is called (from a background thread) once a group that was ready has
        died and its processes are gone."""
        self.degree, self.cores, self.role, self.place = degree, list(cores), role, place
        self.name = "tensor-parallel group" if role == "tp" else place
        info = device.info
        self.device_kind = info.kind
        self.compile_mode = settings.runs_as(role) if role == "tp" else None
        self.last_ran: dict[str, Any] | None = None  # the last job, as rank 0 said its ranks ran it
        self._runs_as = settings.runs_as
        self.start_timeout, self.stall_timeout = settings.tp_start_timeout, settings.tp_stall_timeout
        self.compile_timeout, self.grace = settings.compile_timeout, grace
        self.torchrun_args = shlex.split(settings.tp_torchrun_args)
        self._clock = clock
        worker_settings = dataclasses.replace(settings, device=info.kind, dtype=info.dtype,
                                              compile_backend=info.compile_backend, tp_degree=self.degree)
        self._config = proto.WorkerConfig(
            settings=worker_settings.to_json(), model_path=model_path, cores=self.cores,
            warm=list(warm or []), parent_pid=os.getpid(), role=role, threads=threads)
        self.env, self.threads, self._on_dead = dict(env or {}), threads, on_dead
        self.was_ready = False
        self.state = "stopped"
        self.error: str | None = None
        self.last_request_error: str | None = None
        self.timings: dict[str, Any] = {}
        self.ranks: list[dict[str, Any]] = []  # per-rank READY reports: pid, core, sharded weights
        self.proc: subprocess.Popen | None = None
        self.dir: str | None = None
        self.socket_path: str | None = None
        self._token = ""
        self._pids: set[int] = set()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._log = None
        self._teardown: threading.Thread | None = None
        self._last_health = float("-inf")
        self._beats: dict[int, tuple[str, float]] = {}  # rank -> (heartbeat text, when it last changed)
        # Results' pixels come through shared memory (made at the first start, kept across restarts
        # of this group, closed with it); one request at a time uses it.
        self._pixels_bytes = min(proto.MAX_PAYLOAD, settings.max_size * settings.max_size * 3)
        self._pixels: proto.PixelBuffer | None = None
        self._run_lock = threading.Lock()

    def close(self) -> None:
        """Stop at once (the app is leaving or replacing the group): SIGTERM, grace, SIGKILL. A dead
        group stays dead (its reason is what a request that ran into it reports)."""
        self.stop(final_state="dead" if self.state == "dead" else "stopped", polite=False)
        self._cleanup_dir()
        pixels, self._pixels = self._pixels, None  # its processes are gone: nobody writes to it now
        if pixels is not None:
            pixels.close()

    def describe(self) -> dict[str, Any]:
        """JSON-able status; cheap (pids, cores and shard reports were read once, at READY)."""
        if self.state in STARTING and self._clock() - self._last_health >= 1.0:
            self._last_health = self._clock()
            self.health(timeout=0.5)  # refreshes the phase
        return {
            "state": self.state,
            "place": self.place,
            "world_size": self.degree,
            "compile_mode": self.compile_mode,
            "device": self.device_kind,
            "cores": list(self.cores) if self.device_kind == "neuron" else None,
            "pids": sorted(self._pids),
            "rank_pids": {str(r): pid for r, pid in self.rank_pids().items()},  # JSON keys are text
            "ranks": self.ranks,
            "error": self.error,
            "last_request_error": self.last_request_error,
            "timings": self.timings,
            "socket": self.socket_path,
        }

    def require_ready(self) -> None:
        """BackendNotReady, saying how to start it again, unless the group is ready."""
        if self.state != "ready":
            raise BackendNotReady(f"the {self.name} is {self.state}"
                                  + (f" ({self.error})" if self.error else "")
                                  + "; start it again (Start beside the mode, or the System tab)")

    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False) -> EngineOutput:
        """Generate through the group (one request at a time: the caller's engine queues them)."""
        from PIL import Image

        self.require_ready()

        def relay(msg: dict[str, Any]) -> None:
            on_progress(ProgressEvent(msg["phase"], msg.get("step", 0), msg.get("steps", 0), request.mode,
                                      msg.get("shape", "")))

        # The job, built once: the request as validated, in the mode its ranks run (``Settings.runs_as``).
        job = dataclasses.replace(request, mode=self._runs_as(request.mode))
        header = {"type": "generate", **job.to_json(), "forbid_compile": forbid_compile}
        with self._run_lock:  # the pixel buffer holds one result: copied out before the next request
            pixels = self._pixels
            began, sent = self._clock(), time.monotonic()
            msg, payload = self.call(header, on_message=relay, should_stop=should_stop)
            returned = time.monotonic()
            self.last_ran = msg.get("ran")  # rank 0 says what its ranks ran: the job as sent, whole
            if self.last_ran != job.to_json():
                raise GenerationFailed(f"the {self.name} ran {self.last_ran!r}, not the job it was sent")
            size = (msg.get("width"), msg.get("height"))
            if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 16 for v in size):
                raise GenerationFailed(f"the {self.name} answered with an image of size {size}")
            nbytes = size[0] * size[1] * 3
            shared = msg.get("pixels") == "shared"
            if shared and (pixels is None or nbytes > pixels.size):
                raise GenerationFailed(f"the {self.name} put {nbytes} bytes of pixels in a buffer of "
                                       f"{pixels.size if pixels else 0}")
            if not shared and len(payload) != nbytes:
                raise GenerationFailed(f"the {self.name} sent {len(payload)} bytes of pixels for a {size[0]}x{size[1]} image")
            # Copied out of the shared buffer (the next result overwrites it), or a view onto the
            # received bytes (no copy; the bytearray lives as long as the image).
            image = (Image.frombytes("RGB", size, pixels.view[:nbytes]) if shared
                     else Image.frombuffer("RGB", size, payload, "raw", "RGB", 0, 1))
        self.timings["last_round_trip"] = self._clock() - began
        self.timings["last_pixels"] = "shared" if shared else "socket"
        self.timings["last_worker_seconds"] = msg["seconds"]
        self.timings["last_parts"] = transport_parts(msg.get("stamps") or {}, sent, returned, time.monotonic(),
                                                     msg["seconds"])
        return EngineOutput.from_json(msg, image, place=self.place)

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self._teardown is not None:
            self._teardown.join()  # the previous group is fully gone before a new one starts
        with self._lock:
            if self.state not in ("stopped", "dead"):
                raise BackendNotReady(f"the {self.name} is already {self.state}")
            self._cleanup_dir()
            self.dir = tempfile.mkdtemp(prefix="neuron-studio-tp-")  # 0700: ours alone
            self.socket_path = os.path.join(self.dir, "tp.sock")
            self._token = secrets.token_hex(32)
            if self._pixels is None:
                self._pixels = proto.PixelBuffer.create(self._pixels_bytes)
            config = dataclasses.replace(self._config, socket=self.socket_path, run_dir=self.dir,
                                         pixels=self._pixels.path if self._pixels else "",
                                         pixels_bytes=self._pixels.size if self._pixels else 0)
            env = dict(os.environ, **{proto.CONFIG_VAR: config.to_json(), proto.TOKEN_VAR: self._token})
            # The app's own NeuronCores are not the ranks': each rank sets its core before torch loads.
            env.pop("NEURON_RT_VISIBLE_CORES", None)
            env.update(self.env)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
            # torchrun's own log dir (its per-rank error files) inside the run dir, which goes with
            # the group: by default it makes a torchelastic_* dir in /tmp and never removes it.
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={self.degree}", "--monitor-interval=0.5",
                   f"--log-dir={os.path.join(self.dir, 'torchrun')}", *self.torchrun_args,
                   "-m", "backend.tp.worker"]
            self._log = open(os.path.join(self.dir, "torchrun.log"), "w")
            self.error = self.last_request_error = None
            self.timings, self.ranks, self._pids = {}, [], set()
            self._ready.clear()
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            self.state = "launching"
        threading.Thread(target=self._monitor, args=(self.proc,), name="tp-monitor", daemon=True).start()
        threading.Thread(target=self._await_ready, args=(self.proc,), name="tp-ready", daemon=True).start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        self._ready.wait(timeout)
        return self.state == "ready"

    def _monitor(self, proc: subprocess.Popen) -> None:
        code = proc.wait()
        try:
            reason = self._death_reason(code)
        except Exception as exc:  # noqa: BLE001 - the group is dead whatever the log says
            reason = f"torchrun exited with status {code} ({type(exc).__name__} reading its log)"
        with self._lock:
            if proc is not self.proc or self.state in ("stopping", "stopped", "dead"):
                self._ready.set()
                return
            self.state, self.error = "dead", reason
        self._ready.set()
        self.stop(final_state="dead")  # torchrun is gone; make sure no rank outlives it
        self._report_death(proc)

    def _report_death(self, proc: subprocess.Popen) -> None:
        if self._on_dead is not None and self.was_ready and proc is self.proc and self.state == "dead":
            try:
                self._on_dead(self)
            except Exception:  # noqa: BLE001 - a failed restart must not hide the death
                log.exception("on_dead of %s", self.name)

    def exit_codes(self) -> list[tuple[int, int]]:
        """(rank, exit code) of the ranks that failed, as torchrun's log of a dead group says
        (negative: the signal that ended it)."""
        text = self._tail("torchrun.log", 200)
        failed = re.findall(r"rank\s*:\s*(\d+).*?\n.*?exitcode\s*:\s*(-?\d+)", text) or \
            re.findall(r"rank: (\d+) \(local_rank: \d+\)\s+exitcode\s*:\s*(-?\d+)", text)
        return [(int(rank), int(code)) for rank, code in failed]

    @property
    def ended_itself(self) -> bool:
        """A rank left on purpose after a failed request (``RESTART_EXIT``): the group should be
        restarted, whether or not rank 0's reply saying so got out before torchrun ended it."""
        return self.state == "dead" and any(code == proto.RESTART_EXIT for _rank, code in self.exit_codes())

    def _death_reason(self, code: int) -> str:
        parts = []
        for rank, exitcode in self.exit_codes()[:4]:
            how = f"signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"status {exitcode}"
            parts.append(f"rank {rank} exited with {how}")
        if not parts:
            text = self._tail("torchrun.log", 200)
            errors = [line.strip() for line in text.splitlines()
                      if re.search(r"error|Error|refused|in use", line) and "Traceback" not in line]
            parts.append(f"torchrun exited with status {code}" + (f": {errors[-1][:300]}" if errors else ""))
        return "; ".join(parts) + " — the group is down"

    def _await_ready(self, proc: subprocess.Popen) -> None:
        """Wait for READY; whatever happens (a timeout, an error reply, this thread's own failure),
        the group ends in a state with its reason: ready or dead."""
        try:
            deadline = self._clock() + self.start_timeout
            while self.state == "launching" and not os.path.exists(self.socket_path or ""):
                if self._clock() > deadline:
                    raise BackendNotReady(f"the workers did not open their socket within {self.start_timeout:g} s")
                time.sleep(0.1)
            if self.state not in STARTING:
                return
            # Loading is silent and may be slow on a busy machine: only the start deadline bounds it
            # (a rank that exits meanwhile is seen by the monitor).
            msg, _ = self._request({"type": "wait_ready"}, deadline=deadline, stall=self.start_timeout)
            if msg.get("type") != "ready":
                raise proto.error_from_message(msg)
            with self._lock:
                if proc is self.proc and self.state in STARTING:
                    self.state, self.timings, self.was_ready = "ready", dict(msg.get("timings") or {}), True
                    self.ranks = list(msg.get("ranks") or [])
                    self._pids = {int(r["pid"]) for r in self.ranks if r.get("pid")}
        except TimeoutError as exc:
            self._fail_start(proc, f"no READY from the workers within {exc.args[1]:g} s")
        except Exception as exc:  # noqa: BLE001 - reported as the group's state, never lost in a thread
            self._fail_start(proc, str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}")
        finally:
            self._ready.set()

    def _fail_start(self, proc: subprocess.Popen, reason: str) -> None:
        with self._lock:
            if proc is not self.proc or self.state in ("dead", "stopping", "stopped"):
                return
        self._mark_dead(f"the group did not start: {reason}")

    def _mark_dead(self, reason: str) -> None:
        """Report the group dead now; tear it down in the background (a hung rank needs SIGKILL)."""
        with self._lock:
            self.state, self.error = "dead", reason
        self._ready.set()
        proc = self.proc

        def teardown() -> None:
            self.stop(final_state="dead")
            self._report_death(proc)

        self._teardown = threading.Thread(target=teardown, daemon=True)
        self._teardown.start()

    def stop(self, final_state: str = "stopped", polite: bool = True) -> None:
        """Shut the group down: ask politely (a ready group; it cancels a running generation first),
        then SIGTERM the group, then SIGKILL. Leaves no process."""
        with self._lock:
            proc = self.proc
            if proc is None or self.state == "stopped" or (self.state == "stopping" and final_state == "stopped"):
                return
            polite = polite and self.state == "ready"
            if final_state == "stopped":
                self.state = "stopping"
            pids = self._pids | processes.children(proc.pid)
        if polite and proc.poll() is None and self.socket_path and os.path.exists(self.socket_path):
            try:  # stop a running generation first, so the shutdown is not queued behind it
                self._request({"type": "cancel"}, deadline=self._clock() + 1)
                self._request({"type": "shutdown"}, deadline=self._clock() + self.grace)
            except (StudioError, TimeoutError):
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:  # after a polite shutdown the group leaves by itself: give it the grace period
                proc.wait(timeout=self.grace if (sig == signal.SIGTERM and polite) else 0)
            except subprocess.TimeoutExpired:
                pass
            alive = [p for p in pids if processes.alive(p)]
            if proc.poll() is not None and not alive:
                break
            processes.signal_group(proc.pid, sig)
            for pid in alive:
                processes.signal_pid(pid, sig)
            if sig == signal.SIGTERM:
                processes.wait_gone([proc.pid, *alive], self.grace)
        proc.wait()
        processes.wait_gone(list(pids), self.grace)
        run_dir = None
        with self._lock:
            if self.proc is proc:  # a restart may already have begun
                if final_state == "stopped" or self.state != "dead":
                    self.state = final_state
                self._pids = pids
                # A stopped group leaves nothing behind; a dead one keeps its logs (the page shows
                # their tails) until the next start or close.
                run_dir = self.dir if self.state == "stopped" else None
        self._ready.set()
        if self._log and final_state == "stopped":
            self._log.close()
        if run_dir:
            self._cleanup_dir(run_dir)

    def survivors(self) -> list[int]:
        """Rank or launcher pids of this group still alive (empty after a stop)."""
        pids = set(self._pids) | ({self.proc.pid} if self.proc else set())
        return sorted(p for p in pids if processes.alive(p))

    def _cleanup_dir(self, path: str | None = None) -> None:
        """Remove the group's private run dir (``path``, default the current one) with its socket
        and logs. Only a dir named like one (``protocol.RUN_DIR_PREFIX``) is ever removed."""
        path = path or self.dir
        if path is None or path == self.dir:
            if self._log and not self._log.closed:
                self._log.close()  # torchrun's log lives in it
        proto.remove_run_dir(path, require_contents=False)

    # calls -------------------------------------------------------------------------------------
    def ranks_beating(self, within: float) -> bool:
        """True while every rank's heartbeat counter has moved within the last ``within`` seconds
        (of this group's clock). Read on every poll of a request, so a change is seen when it happens."""
        if not self.dir:
            return False
        now, fresh = self._clock(), True
        for rank in range(self.degree):
            try:
                with open(os.path.join(self.dir, f"rank{rank}.heartbeat"), encoding="ascii") as handle:
                    text = handle.read()
            except OSError:
                return False
            seen = self._beats.get(rank)
            if seen is None or seen[0] != text:
                self._beats[rank] = (text, now)
            elif now - seen[1] > within:
                fresh = False
        return fresh

    def _connect(self, deadline: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(max(0.01, min(30.0, deadline - self._clock())))
        try:
            sock.connect(self.socket_path)
        except OSError as exc:
            sock.close()
            raise GroupDead(self.error or f"cannot reach the worker group: {exc}") from None
        return sock

    def _request(self, header: dict[str, Any], deadline: float | None = None,
                 on_message: Callable[[dict[str, Any]], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 stall: float | None = None) -> tuple[dict[str, Any], bytes]:
        """One request on its own connection. Progress messages go to ``on_message``; the call fails
        when the group dies, when ``deadline`` passes, or when no message arrives within ``stall``
        seconds (default: the stall timeout, longer while compiling): TimeoutError(phase, seconds)."""
        sock = self._connect(deadline or self._clock() + 30)
        cancelled = False
        try:
            proto.send_message(sock, {"type": "hello", "token": self._token})
            proto.send_message(sock, header)
            phase, last = "", self._clock()
            while True:
                quiet = stall or (self.compile_timeout if phase == "compiling" else self.stall_timeout)
                # While every rank's heartbeat moves, silence is a compile (the Neuron compiler says
                # nothing, eager mode included): allowed up to the compile timeout.
                if stall is None and self.ranks_beating(self.stall_timeout):
                    quiet = max(quiet, self.compile_timeout)
                limit = min(deadline or float("inf"), last + quiet)
                if should_stop and not cancelled and should_stop():
                    cancelled = True  # every rank stops at the next step (they vote on it)
                    self._request({"type": "cancel"}, deadline=self._clock() + 5)
                if not proto.wait_readable(sock, min(0.2, max(0.0, limit - self._clock()))):
                    if self.state == "dead":
                        raise GroupDead(self.error or "the worker group died")
                    if self._clock() >= limit:
                        raise TimeoutError(phase, quiet)
                    continue
                try:  # a message has begun: read all of it (a stalled peer still hits the limit)
                    msg, payload = proto.recv_message(sock, deadline=limit, clock=self._clock)
                except proto.DeadlineExceeded:
                    raise TimeoutError(phase, quiet) from None
                except proto.ProtocolError as exc:
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
        """A request whose stall kills the group (a hung rank cannot be told apart from a dead one);
        an error reply becomes the exception it stands for (its code in ``backend.errors``)."""
        try:
            msg, payload = self._request(header, **kwargs)
        except TimeoutError as exc:
            phase, stall = exc.args
            reason = (f"no progress for {stall:g} s" + (f" while {phase}" if phase else "")
                      + " — a rank is hung or too slow; the group is being stopped")
            self._mark_dead(reason)
            raise GroupDead(reason + self._tails_note()) from None
        except GroupDead as exc:  # rank 0 hung up: it died, and torchrun is ending the group
            raise self._group_lost(str(exc)) from None
        if msg["type"] != "error":
            return msg, payload
        error = proto.error_from_message(msg)
        ending = bool(getattr(error, "group_ending", False))
        if isinstance(error, GroupDead):  # a rank died under a collective; torchrun is ending the group
            raise self._group_lost(str(error)).evolve(group_ending=ending)
        self.last_request_error = str(error)
        if ending:
            # The ranks leave after this failure (on Neuron a failed request may leave a collective
            # half done); the error keeps its class, so a compile failure still marks its shape failed.
            self._group_lost(f"the ranks ended after a failed request: {error}")
            error = error.evolve(f"{error} — the {self.name} is restarting so that no rank serves on a "
                                 f"possibly broken communicator")
        raise error

    def _group_lost(self, reason: str) -> GroupDead:
        """The group is going down: wait (bounded) for the monitor to see torchrun exit and say which
        rank died; mark it dead here if it does not. A group being stopped on purpose is not waited
        for. Returns the error to raise."""
        deadline = self._clock() + 10
        while self.state in STARTING + ("ready",) and self._clock() < deadline:
            time.sleep(0.05)
        if self.state in ("stopping", "stopped"):
            return GroupDead(f"the {self.name} was stopped")
        if self.state != "dead":
            self._mark_dead(reason)
        return GroupDead((self.error or reason) + self._tails_note())

    def health(self, timeout: float = 2.0) -> dict[str, Any]:
        if self.state in ("stopped", "dead", "stopping") or not self.socket_path:
            return {"state": self.state, "error": self.error}
        try:
            msg, _ = self._request({"type": "health"}, deadline=self._clock() + timeout)
        except (StudioError, TimeoutError) as exc:
            return {"state": self.state, "error": f"health check failed: {exc}"}
        with self._lock:
            if self.state in STARTING and msg.get("state") in ("loading", "warming"):
                self.state = msg["state"]
        return msg

    # logs and pids -----------------------------------------------------------------------------
    def _tail(self, name: str, lines: int = 20) -> str:
        return processes.tail(os.path.join(self.dir, name), lines) if self.dir else ""

    def rank_logs(self, lines: int = 20) -> dict[str, str]:
        """Each rank's log tail and torchrun's, read now (only when someone looks at them)."""
        logs = {f"rank {r}": self._tail(f"rank{r}.log", lines) for r in range(self.degree)}
        logs["torchrun"] = self._tail("torchrun.log", lines)
        return logs

    def rank_pids(self) -> dict[int, int]:
        """{rank: pid}, as each rank reported it at READY."""
        return {int(r["rank"]): int(r["pid"]) for r in self.ranks if r.get("pid")}

    def _tails_note(self) -> str:
        last_lines = {r: self._tail(f"rank{r}.log", 3).strip() for r in range(self.degree)}
        tails = [f"[rank {r}] {text.splitlines()[-1]}" for r, text in last_lines.items() if text]
        return ("\n" + "\n".join(tails)) if tails else ""
