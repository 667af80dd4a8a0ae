"""The app's line to a worker group's rank 0 (``RankZero``, held by ``WorkerGroup``), and stall detection.

A request with no message for the stall timeout is hung, unless every rank's heartbeat (a counter
in ``<run dir>/rank<N>.heartbeat``) still moves: on Neuron the compiler runs silently at a cold
shape, eager mode included, often for longer; such a silence may last up to the compile timeout.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from backend.errors import BackendNotReady, GenerationFailed, GroupDead, InvalidRequest
from backend.launch import protocol as proto
from backend.request.records import EngineOutput, GenerationRequest, Phase, ProgressEvent
from backend.request.references import MAX_COUNT, MAX_REFERENCE_RGB, pixel_layout
from backend.settings import Settings


class GroupState(enum.StrEnum):
    """A worker group's state; dead: it ended without being asked. Each is its name in the status JSON."""

    STOPPED = "stopped"
    LAUNCHING = "launching"
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"
    STOPPING = "stopping"
    DEAD = "dead"


STARTING = (GroupState.LAUNCHING, GroupState.LOADING, GroupState.WARMING)


class RankZero:
    """``status()``: the group's state and error, read while a call waits; ``on_lost(reason, froze)``:
    mark the group dead (``froze``: a rank's heartbeat stopped). The pixel buffer is made at the first
    launch and kept across restarts."""

    def __init__(self, name: str, place: str, degree: int, settings: Settings, clock: Callable[[], float],
                 status: Callable[[], tuple[str, str | None]], on_lost: Callable[..., None]):
        self.name, self.place, self.degree, self._clock = name, place, degree, clock
        self._status, self._on_lost, self._runs_as = status, on_lost, settings.runs_as
        self.stall_timeout, self.compile_timeout = settings.tp_stall_timeout, settings.compile_timeout
        self.run_dir: str | None = None  # the launch's: rank 0's socket and the ranks' heartbeats
        self.socket_path: str | None = None
        self.key = ""  # the launch's: rank 0 serves only a peer that holds it
        self.last_ran: dict[str, Any] | None = None  # the last job, as rank 0 said its ranks ran it
        self.last_request_error: str | None = None  # this launch's
        self.trace: list[dict[str, float]] | None = None  # a benchmark's (bench.tp_transport): each run's hops
        self._beats: dict[int, tuple[str, float]] = {}  # rank -> (heartbeat text, when it last changed)
        # A job's pixels: its references on the way in, its images (up to MAX_COUNT) on the way out.
        self._pixels_bytes = min(proto.MAX_PIXELS, max(MAX_COUNT * settings.max_size * settings.max_size * 3,
                                                       settings.max_references * MAX_REFERENCE_RGB))
        self._pixels: proto.PixelBuffer | None = None
        self._conn: proto.Connection | None = None  # the runs' persistent connection
        self._run_lock = threading.Lock()  # one connection, and the pixel buffer holds one job's pixels

    def dial(self, run_dir: str, key: str) -> None:
        self.hang_up()
        self.run_dir, self.socket_path, self.key = run_dir, os.path.join(run_dir, "tp.sock"), key
        self.last_request_error = None

    def pixels(self) -> proto.PixelBuffer:
        if self._pixels is None:
            try:
                self._pixels = proto.PixelBuffer.create(self._pixels_bytes)
            except OSError as exc:  # e.g. /dev/shm full
                raise BackendNotReady(f"cannot make the {self.name}'s pixel buffer of {self._pixels_bytes} "
                                      f"bytes in shared memory: {exc}") from None
        return self._pixels

    def close(self) -> None:
        with self._run_lock:
            pixels, self._pixels = self._pixels, None
        if pixels is not None:
            pixels.close()

    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False) -> tuple[EngineOutput, float]:
        """The output and the call's round trip (seconds of the clock, the pixels' copies included)."""
        from PIL import Image

        def relay(msg: dict[str, Any]) -> None:
            on_progress(ProgressEvent(msg["phase"], msg.get("step", 0), msg.get("steps", 0), request.mode,
                                      msg.get("shape", "")))

        # The request as validated, in the mode its ranks run.
        job = dataclasses.replace(request, mode=self._runs_as(request.mode)).to_json()
        layout = pixel_layout(request.references)
        trace = self.trace
        header = {"type": "generate", **job, "forbid_compile": forbid_compile, "reference_pixels": layout,
                  **({"trace": True} if trace is not None else {})}
        with self._run_lock:
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
        round_trip = self._clock() - began
        if trace is not None:
            trace.append({**(msg.get("stamps") or {}), "sent": sent, "returned": returned,
                          "built": time.monotonic(), "seconds": msg["seconds"]})
        return EngineOutput.from_json(msg, images[0], place=self.place, more_images=images[1:]), round_trip

    def wait_ready(self, deadline: float, stall: float,
                   on_message: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """On the connection the runs will use, kept from READY on: a process that fills rank 0's other
        connection slots cannot keep the app's requests out."""
        with self._run_lock:
            return self.request({"type": "wait_ready"}, deadline=deadline, stall=stall, on_message=on_message,
                                persistent=True)

    def stopped_beating(self, within: float) -> int | None:
        """A rank whose heartbeat was seen and has not moved for more than ``within`` seconds (stopped
        or frozen: its heartbeat thread cannot run); None when every rank that has one beats."""
        return next((rank for rank, q in enumerate(self._quiet_beats()) if q is not None and q > within), None)

    def ranks_beating(self, within: float) -> bool:
        """True while every rank's heartbeat has moved within ``within`` seconds (read at every poll)."""
        return bool(self.run_dir) and all(q is not None and q <= within for q in self._quiet_beats())

    def _quiet_beats(self) -> list[float | None]:
        """Per rank, seconds since its heartbeat last changed as this side saw it (None: no heartbeat file)."""
        now, quiet = self._clock(), []
        for rank in range(self.degree if self.run_dir else 0):
            try:
                text = Path(self.run_dir, f"rank{rank}.heartbeat").read_text(encoding="ascii")
            except OSError:
                quiet.append(None)
                continue
            seen = self._beats.get(rank)
            if seen is None or seen[0] != text:
                self._beats[rank] = seen = (text, now)
            quiet.append(now - seen[1])
        return quiet

    def _connect(self, deadline: float) -> proto.Connection:
        try:
            return proto.connect(self.socket_path, self.key.encode(), max(0.01, min(30.0, deadline - self._clock())))
        except proto.ProtocolError as exc:  # unreachable, or it does not hold this launch's key
            raise GroupDead(self._status()[1] or f"cannot reach the worker group: {exc}") from None

    def request(self, header: dict[str, Any], deadline: float | None = None,
                on_message: Callable[[dict[str, Any]], None] | None = None,
                should_stop: Callable[[], bool] | None = None,
                stall: float | None = None, persistent: bool = False) -> dict[str, Any]:
        """One request, on the runs' connection (``persistent``, the runs' lock held; dropped when it
        fails: what it still carries is stale) or one of its own. GroupDead when the group dies;
        TimeoutError(phase, seconds) past ``deadline`` or after ``stall`` seconds without a message
        (default: the stall timeout, longer while compiling)."""
        conn = (self._conn if persistent else None) or self._connect(deadline or self._clock() + 30)
        if persistent:
            self._conn = None  # given back only when the request ends cleanly
        cancelled = False
        try:
            proto.send(conn, header)
            phase, last = "", self._clock()
            while True:
                quiet = stall or (self.compile_timeout if phase == Phase.COMPILING else self.stall_timeout)
                # While every rank's heartbeat moves, silence is a compile: allowed up to the compile timeout.
                if stall is None and self.ranks_beating(self.stall_timeout):
                    quiet = max(quiet, self.compile_timeout)
                limit = min(deadline or float("inf"), last + quiet)
                if should_stop and not cancelled and should_stop():
                    try:  # every rank stops at the next step (they vote on it)
                        self.request({"type": "cancel"}, deadline=self._clock() + 5)
                        cancelled = True
                    except (GroupDead, TimeoutError):
                        pass  # no slot for it now (or the group is going): asked again at the next poll
                msg = proto.receive(conn, min(0.2, max(0.0, limit - self._clock())))
                if msg is None:
                    state, error = self._status()
                    if state == GroupState.DEAD:
                        raise GroupDead(error or "the worker group died")
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
            raise GroupDead(self._status()[1] or f"lost the worker group: {exc}") from None
        finally:
            if conn is not None:
                conn.close()

    def hang_up(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def call(self, header: dict[str, Any], **kwargs) -> dict[str, Any]:
        """A request whose stall kills the group (a hung rank is no better than a dead one); an error
        reply becomes the exception it stands for."""
        try:
            msg = self.request(header, **kwargs)
        except TimeoutError as exc:
            phase, stall = exc.args
            reason = (f"no progress for {stall:g} s" + (f" while {phase}" if phase else "")
                      + " — a rank is hung or too slow; the group is being stopped")
            self._on_lost(reason, self.stopped_beating(self.stall_timeout) is not None)
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
        """The error to raise for a group going down, after a bounded wait for its monitor to say which
        rank died (``on_lost`` if it does not)."""
        deadline = self._clock() + 10
        while self._status()[0] in STARTING + (GroupState.READY,) and self._clock() < deadline:
            time.sleep(0.05)
        state = self._status()[0]
        if state in (GroupState.STOPPING, GroupState.STOPPED):
            return GroupDead(f"the {self.name} was stopped")
        if state != GroupState.DEAD:
            self._on_lost(reason)
        return GroupDead(self._status()[1] or reason)
