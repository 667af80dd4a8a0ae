"""Rank 0's Unix socket server, a worker group's one door: each connection authenticated
(``protocol.accept``), then its requests served in turn: health, cancel and wait_ready at once,
generate and shutdown queued for the job loop, which answers them on the same connection."""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
import time
from typing import Any

from backend.errors import BackendNotReady, InvalidRequest
from backend.launch import protocol as proto
from backend.workers.collectives import encode_job


class Rank0Server:
    """Bounded against whoever can reach the socket: ``MAX_CONNECTIONS`` at once (one more is closed as
    soon as it is accepted); ``read_timeout`` seconds for the handshake and each message begun."""

    MAX_CONNECTIONS = 16

    def __init__(self, path: str, key: bytes, world: int, *, max_job: int):
        self.path, self.key, self.world, self.max_job, self.read_timeout = path, key, world, max_job, 10.0
        self.jobs: queue.Queue = queue.Queue()
        self.cancel, self.ready = threading.Event(), threading.Event()
        self.state = "loading"
        self.timings: dict[str, Any] = {}
        self.ranks: list[dict[str, Any]] = []
        self.error: str | None = None
        self.busy: dict[str, Any] | None = None
        self.done = 0  # requests answered with a result
        self.pixels: proto.PixelBuffer | None = None  # the app's buffer for results
        self.refused = 0  # connections refused: no key, a wrong one, or no handshake in time
        self.turned_away = 0  # connections closed at once: MAX_CONNECTIONS were already open
        self._slots = threading.BoundedSemaphore(self.MAX_CONNECTIONS)
        self._count_lock = threading.Lock()
        self.open_connections, self._closed = 0, False
        # The socket file's appearance means "connect now" to the app, and a connect before listen()
        # is refused: so it is bound under another name and renamed into place once listening.
        staging = path + ".new"
        old = os.umask(0o177)  # the socket file is created 0600
        try:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(staging)
        finally:
            os.umask(old)
        os.chmod(staging, 0o600)
        self.sock.listen(self.MAX_CONNECTIONS)
        os.rename(staging, path)
        threading.Thread(target=self._accept, name="tp-accept", daemon=True).start()

    def describe(self) -> dict[str, Any]:
        return {"type": "ok", "state": self.state, "world_size": self.world, "timings": self.timings,
                "busy": self.busy, "error": self.error, "requests_done": self.done, "refused": self.refused,
                "open_connections": self.open_connections}

    def close(self) -> None:
        """Stop accepting; open connections finish on their own."""
        self._closed = True
        for end in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            with contextlib.suppress(OSError):
                end()  # shutdown wakes a blocked accept() on Linux; close alone does not

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # e.g. out of file descriptors: do not spin
                continue
            if not self._slots.acquire(blocking=False):
                self.turned_away += 1
                conn.close()
                continue
            with self._count_lock:
                self.open_connections += 1
            try:
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
            except RuntimeError:  # can't start a thread: refuse this one, keep serving
                self._release(conn)

    def _release(self, conn: socket.socket) -> None:
        conn.close()
        with self._count_lock:
            self.open_connections -= 1
        self._slots.release()

    def _serve(self, sock: socket.socket) -> None:
        try:
            try:
                conn = proto.accept(sock, self.key, self.read_timeout)
            except proto.Refused as exc:
                self.refused += 1
                print(f"refused a connection: {exc}", flush=True)
                return
            with conn:
                while True:
                    self._answer(conn, proto.receive(conn, None))
        except proto.ConnectionLost:
            pass  # the app closed it (or went away)
        except (proto.ProtocolError, OSError, KeyError) as exc:
            print(f"connection dropped: {exc}", flush=True)
        finally:
            self._release(sock)

    def _answer(self, conn: proto.Connection, request: dict[str, Any]) -> None:
        kind = request["type"]
        if kind == "health":
            proto.send(conn, self.describe())
        elif kind == "cancel":
            self.cancel.set()
            proto.send(conn, {"type": "ok"})
        elif kind == "wait_ready":
            # Each phase as it begins, then READY: the app asks nothing else while it starts.
            said = None
            while not self.ready.wait(0.2):
                if self.state != said:
                    said = self.state
                    proto.send(conn, {"type": "progress", "phase": said})
            proto.send(conn, {**self.describe(), "type": "ready", "ranks": self.ranks} if self.state == "ready"
                       else proto.error_message(BackendNotReady(self.error or self.state)))
        elif kind in ("generate", "shutdown"):
            if self.state != "ready":
                proto.send(conn, proto.error_message(BackendNotReady(f"the worker group is {self.state}")))
                return
            if len(encode_job(request)) > self.max_job:  # it would not fit the ranks' broadcast
                proto.send(conn, proto.error_message(InvalidRequest("request", f"over {self.max_job} bytes")))
                return
            if request.get("trace"):  # a benchmark's trace (bench.tp_transport): when it arrived
                request["stamps"] = {"received": time.monotonic()}
            finished = threading.Event()
            self.jobs.put((request, conn, finished))
            finished.wait()  # the job loop answers on this connection
        else:
            proto.send(conn, proto.error_message(InvalidRequest("type", f"unknown request {kind[:40]!r}")))
