"""Process plumbing for the worker group: is a pid alive, signal one or a whole group, wait until
pids are gone, read the tail of a rank's log. No knowledge of ranks or requests."""

from __future__ import annotations

import os
import time


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_gone(pids: list[int], timeout: float) -> bool:
    """Wait until none of ``pids`` is alive, at most ``timeout`` seconds (``psutil.wait_procs``;
    a zombie no one has reaped yet counts as gone, looked at every half second). True when all are."""
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + timeout
    procs = [p for p in procs if alive(p.pid)]
    while procs:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        _gone, procs = psutil.wait_procs(procs, timeout=min(left, 0.5))
        procs = [p for p in procs if alive(p.pid)]
    return True


def children(pid: int) -> set[int]:
    """Every descendant pid of ``pid`` (empty when it is gone)."""
    import psutil

    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def tail(path: str, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ("" when it does not exist)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""
