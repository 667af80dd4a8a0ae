"""A rank's process housekeeping, set up before anything else: its output into
``<run_dir>/rank<N>.log``, a heartbeat counter beaten from a thread into ``rank<N>.heartbeat`` (so the
app can tell a rank that compiles from one that is stopped or frozen), and its exit, with the run
dir removed, when the app's process is gone."""

from __future__ import annotations

import os
import sys
import threading
import time

from backend.launch import protocol as proto


def _redirect_output(run_dir: str, rank: int) -> None:
    log = open(os.path.join(run_dir, f"rank{rank}.log"), "a", buffering=1, encoding="utf-8")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log


def _heartbeat(run_dir: str, rank: int, interval: float) -> None:
    """Count up in ``rank<N>.heartbeat`` every ``interval`` seconds, from a thread: a stopped or
    frozen process stops counting; one busy in a compile (which releases the GIL) keeps on."""
    path = os.path.join(run_dir, f"rank{rank}.heartbeat")

    def beat() -> None:
        count = 0
        while True:
            count += 1
            try:
                with open(path + ".tmp", "w", encoding="ascii") as handle:
                    handle.write(str(count))
                os.replace(path + ".tmp", path)
            except OSError:
                pass
            time.sleep(interval)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


def _watch_parent(pid: int, run_dir: str = "", rank: int = 0, interval: float = 1.0,
                  exit_process=os._exit) -> threading.Thread | None:
    """Exit when the app is gone (the 'death pipe' of vLLM, by polling the parent's pid). The app
    cannot clean up after a SIGKILL, so the ranks do: before exiting, they remove the group's
    private run dir (socket, logs, heartbeats), rank 0 first of all; ``protocol.remove_run_dir``
    removes nothing but such a dir."""
    if not pid:
        return None

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print(f"app process {pid} is gone; exiting", flush=True)
                if run_dir:
                    removed = proto.remove_run_dir(run_dir, attempts=10 if rank == 0 else 2)
                    print(f"run dir {run_dir} {'removed' if removed else 'not removed'}", flush=True)
                exit_process(3)
                return
            except PermissionError:
                pass
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread
