"""Rank 0's Unix socket server: the one door of a worker group to the outside.

It authenticates each connection (the hello's token), answers health, cancel and wait_ready at once
from the connection's thread, and queues generate/shutdown jobs for the job loop
(``backend.workers.job_loop``), which answers them on the same connection. The socket is 0600 in the
group's private run dir; the messages are ``backend.launch.protocol``'s."""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from typing import Any

from backend.errors import BackendNotReady, InvalidRequest, Unauthorized
from backend.launch import protocol as proto


class Rank0Server:
    """Rank 0's socket: authenticates, answers quick requests, queues device work.

    Bounded against whoever can reach the socket: at most ``max_connections`` connections at once
    (one more is closed as soon as it is accepted), each with ``read_timeout`` seconds to send each
    message, and a first message (the hello) of at most ``protocol.HELLO_MAX_HEADER`` bytes with
    no payload, refused before anything larger is read or allocated."""

    def __init__(self, path: str, token: str, world: int, *, max_connections: int = 16,
                 read_timeout: float = 10.0):
        self.token, self.world = token, world
        self.jobs: queue.Queue = queue.Queue()
        self.cancel = threading.Event()
        self.state = "loading"
        self.timings: dict[str, Any] = {}
        self.ranks: list[dict[str, Any]] = []
        self.error: str | None = None
        self.busy: dict[str, Any] | None = None
        self.done = 0  # requests answered with a result
        self.pixels: proto.PixelBuffer | None = None  # the app's buffer for results (None: the socket)
        self.refused = 0  # connections refused for a wrong token or a malformed hello
        self.turned_away = 0  # connections closed at once: max_connections were already open
        self.max_connections, self.read_timeout = max_connections, read_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._count_lock = threading.Lock()
        self.open_connections = 0
        self._closed = False
        self.ready = threading.Event()
        # The app takes the socket file's appearance to mean "connect now": it must not appear
        # before the socket listens (a connect between bind and listen is refused, and a start
        # that gets "connection refused" is a dead group). So it is bound under another name,
        # listening, and then renamed into place (rename is atomic; the socket goes with its inode).
        staging = path + ".new"
        old = os.umask(0o177)  # the socket file is created 0600
        try:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(staging)
        finally:
            os.umask(old)
        os.chmod(staging, 0o600)
        self.sock.listen(max_connections)
        os.rename(staging, path)
        self.path = path
        threading.Thread(target=self._accept, name="tp-accept", daemon=True).start()

    def describe(self) -> dict[str, Any]:
        return {"type": "ok", "state": self.state, "world_size": self.world, "timings": self.timings,
                "busy": self.busy, "error": self.error, "requests_done": self.done, "refused": self.refused}

    def close(self) -> None:
        """Stop accepting (the accept thread ends); open connections finish on their own."""
        self._closed = True
        for end in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                end()  # shutdown wakes a blocked accept() on Linux; close alone does not
            except OSError:
                pass

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

    def _refuse(self, conn: socket.socket, why: str) -> None:
        self.refused += 1
        print(f"refused a connection: {why}", flush=True)
        try:
            proto.send_message(conn, proto.error_message(Unauthorized("bad token")))
        except OSError:
            pass

    def _serve(self, conn: socket.socket) -> None:
        try:
            try:
                hello = proto.recv_hello(conn, deadline=time.monotonic() + self.read_timeout)
            except (proto.DeadlineExceeded, proto.ConnectionLost):
                raise  # silent or gone: dropped below, not counted as refused
            except proto.ProtocolError as exc:
                self._refuse(conn, f"malformed hello ({exc})")
                return
            if not proto.token_ok(self.token, hello):
                self._refuse(conn, "missing or wrong token")
                return
            # Requests carry no payload (only results do).
            request, _ = proto.recv_message(conn, deadline=time.monotonic() + self.read_timeout, max_payload=0)
            kind = request["type"]
            if kind == "health":
                proto.send_message(conn, self.describe())
            elif kind == "cancel":
                self.cancel.set()
                proto.send_message(conn, {"type": "ok"})
            elif kind == "wait_ready":
                # Each phase as it begins (loading, warming), then READY: the app learns the
                # group's phase from this one call, and asks nothing while it shows a status.
                said = None
                while not self.ready.wait(0.2):
                    if self.state != said:
                        said = self.state
                        proto.send_message(conn, {"type": "progress", "phase": said})
                reply = ({**self.describe(), "type": "ready", "ranks": self.ranks} if self.state == "ready"
                         else proto.error_message(BackendNotReady(self.error or self.state)))
                proto.send_message(conn, reply)
            elif kind in ("generate", "shutdown"):
                if self.state != "ready":
                    proto.send_message(conn, proto.error_message(
                        BackendNotReady(f"the worker group is {self.state}")))
                    return
                finished = threading.Event()
                # When it arrived (CLOCK_MONOTONIC is one clock for every process on the machine:
                # the app reads the transport's parts off these stamps, bench.tp_transport).
                request["stamps"] = {"received": time.monotonic()}
                self.jobs.put((request, conn, finished))
                finished.wait()  # the main loop answers on this connection
            else:
                proto.send_message(conn, proto.error_message(
                    InvalidRequest("type", f"unknown request {kind[:40]!r}")))
        except (proto.ProtocolError, OSError, KeyError) as exc:
            print(f"connection dropped: {exc}", flush=True)
        finally:
            self._release(conn)
