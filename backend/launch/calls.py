"""A worker group's calls to rank 0 over its authenticated Unix socket: ``run`` (a generation on
the group's one persistent connection, its pixels through the shared buffer), ``call`` (a request
whose stall or error reply becomes the group's death or the exception it stands for), ``health``,
stall detection (the ranks' heartbeats), and the ranks' log tails and pids.

``GroupCalls`` is the base of ``backend.launch.group.WorkerGroup``, which launches, watches
and stops the processes; these methods read what it keeps (``state``, ``error``, ``name``,
``place``, ``degree``, ``dir``, ``socket_path``, ``ranks``, ``timings``, the key, the clock, the
timeouts, the pixel buffer) and, when a call finds the group gone, call its ``_mark_dead``.

``trace``: None, or a list a benchmark sets (``bench.tp_transport``); each run then appends the
monotonic stamps of its hops, the app's and rank 0's. Nothing is stamped otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable

from backend.errors import BackendNotReady, GenerationFailed, GroupDead, InvalidRequest, StudioError
from backend.launch import processes
from backend.launch import protocol as proto
from backend.request.records import EngineOutput, GenerationRequest, ProgressEvent
from backend.request.references import pixel_layout

STARTING = ("launching", "loading", "warming")


class GroupCalls:
    """What the app asks of a running group (see the module's docstring for what it relies on)."""

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
        job = dataclasses.replace(request, mode=self._runs_as(request.mode)).to_json()
        layout = pixel_layout(request.references)
        header = {"type": "generate", **job, "forbid_compile": forbid_compile, "reference_pixels": layout}
        trace = self.trace
        if trace is not None:
            header["trace"] = True
        with self._run_lock:  # one connection, and the pixel buffer holds one job's pixels
            if sum(part["bytes"] for part in layout) > self._pixels.size:
                raise InvalidRequest("images", f"the references do not fit the {self.name}'s pixel buffer")
            for reference, part in zip(request.references, layout):  # rank 0 reads them before it answers
                self._pixels.view[part["offset"]:part["offset"] + part["bytes"]] = reference.rgb
            began, sent = self._clock(), time.monotonic()
            msg = self.call(header, on_message=relay, should_stop=should_stop, persistent=True)
            returned = time.monotonic()
            self.last_ran = msg.get("ran")  # rank 0 says what its ranks ran: the job as sent, whole
            if self.last_ran != job:
                raise GenerationFailed(f"the {self.name} ran {self.last_ran!r}, not the job it was sent")
            size = (msg.get("width"), msg.get("height"))
            if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 16 for v in size):
                raise GenerationFailed(f"the {self.name} answered with an image of size {size}")
            nbytes = size[0] * size[1] * 3
            if nbytes * request.count > self._pixels.size:
                raise GenerationFailed(f"the {self.name} put {nbytes * request.count} bytes of pixels in a buffer "
                                       f"of {self._pixels.size}")
            # copied: the next job overwrites them; a batch's images lie one after the other
            images = [Image.frombytes("RGB", size, self._pixels.view[i * nbytes:(i + 1) * nbytes])
                      for i in range(request.count)]
        self.timings["last_round_trip"] = self._clock() - began
        self.timings["last_worker_seconds"] = msg["seconds"]
        if trace is not None:
            trace.append({**(msg.get("stamps") or {}), "sent": sent, "returned": returned,
                          "built": time.monotonic(), "seconds": msg["seconds"]})
        return EngineOutput.from_json(msg, images[0], place=self.place, more_images=images[1:])

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

    def _connect(self, deadline: float) -> proto.Connection:
        try:
            return proto.connect(self.socket_path, self._token.encode(),
                                 max(0.01, min(30.0, deadline - self._clock())))
        except proto.ProtocolError as exc:  # unreachable, or it does not hold this launch's key
            raise GroupDead(self.error or f"cannot reach the worker group: {exc}") from None

    def _request(self, header: dict[str, Any], deadline: float | None = None,
                 on_message: Callable[[dict[str, Any]], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 stall: float | None = None, persistent: bool = False) -> dict[str, Any]:
        """One request: on the group's persistent connection (``persistent``, the caller holding
        ``_run_lock``), else on a connection of its own. Progress messages go to ``on_message``; the
        call fails when the group dies, when ``deadline`` passes, or when no message arrives within
        ``stall`` seconds (default: the stall timeout, longer while compiling): TimeoutError(phase,
        seconds). A persistent connection that fails is dropped: what it still carries is stale."""
        conn = self._conn if persistent else None
        if conn is None:
            conn = self._connect(deadline or self._clock() + 30)
        if persistent:
            self._conn = None  # given back only when the request ends cleanly
        cancelled = False
        try:
            proto.send(conn, header)
            phase, last = "", self._clock()
            while True:
                quiet = stall or (self.compile_timeout if phase == "compiling" else self.stall_timeout)
                # While every rank's heartbeat moves, silence is a compile (the Neuron compiler says
                # nothing, eager mode included): allowed up to the compile timeout.
                if stall is None and self.ranks_beating(self.stall_timeout):
                    quiet = max(quiet, self.compile_timeout)
                limit = min(deadline or float("inf"), last + quiet)
                if should_stop and not cancelled and should_stop():
                    try:  # every rank stops at the next step (they vote on it)
                        self._request({"type": "cancel"}, deadline=self._clock() + 5)
                        cancelled = True
                    except (GroupDead, TimeoutError):
                        pass  # no slot for it now (or the group is going): asked again at the next poll
                msg = proto.receive(conn, min(0.2, max(0.0, limit - self._clock())))
                if msg is None:
                    if self.state == "dead":
                        raise GroupDead(self.error or "the worker group died")
                    if self._clock() >= limit:
                        raise TimeoutError(phase, quiet)
                    continue
                last = self._clock()
                if msg["type"] != "progress":
                    if persistent:
                        self._conn, conn = conn, None
                    return msg
                phase = msg.get("phase", phase)
                if on_message:
                    on_message(msg)
        except proto.ProtocolError as exc:
            raise GroupDead(self.error or f"lost the worker group: {exc}") from None
        finally:
            if conn is not None:
                conn.close()

    def _drop_connection(self) -> None:
        """Close the runs' connection (the group stopped, or a new launch has a new rank 0)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def call(self, header: dict[str, Any], **kwargs) -> dict[str, Any]:
        """A request whose stall kills the group (a hung rank cannot be told apart from a dead one);
        an error reply becomes the exception it stands for (its code in ``backend.errors``)."""
        try:
            msg = self._request(header, **kwargs)
        except TimeoutError as exc:
            phase, stall = exc.args
            reason = (f"no progress for {stall:g} s" + (f" while {phase}" if phase else "")
                      + " — a rank is hung or too slow; the group is being stopped")
            self._mark_dead(reason)
            raise GroupDead(reason) from None
        except GroupDead as exc:  # rank 0 hung up: it died, and torchrun is ending the group
            raise self._group_lost(str(exc)) from None
        if msg["type"] != "error":
            return msg
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
        return GroupDead(self.error or reason)

    def health(self, timeout: float = 2.0) -> dict[str, Any]:
        if self.state in ("stopped", "dead", "stopping") or not self.socket_path:
            return {"state": self.state, "error": self.error}
        try:
            msg = self._request({"type": "health"}, deadline=self._clock() + timeout)
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
