"""How much of the machine's CPU time other work took: during a run, and over the last seconds.

On a CPU a run's seconds depend on what else the machine runs; a steady figure read without that
misleads (a busy machine made 0.19 s runs take 1.56 s). The share is read from Linux's ``/proc``
(``proc(5)``: the ``cpu`` line of ``/proc/stat``, fields 14-15 of ``/proc/PID/stat``, both in
clock ticks): all busy time, less this process's and its descendants' (workers it launched).
Elsewhere nothing is read and every share is None.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PROC = Path("/proc")


def _ticks() -> tuple[int, int, int] | None:
    """(busy, total) ticks of the whole machine and the ticks of this process tree, or None."""
    try:
        fields = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is within user)
    busy = total - fields[3] - (fields[4] if len(fields) > 4 else 0)
    parents: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            rest = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone since the listing
        pid = int(entry.name)
        parents[pid], used[pid] = int(rest[1]), int(rest[11]) + int(rest[12])
    ours, me = 0, os.getpid()
    for pid, ticks in used.items():
        seen = 0
        while pid != me and pid > 1 and seen < 64:  # up the parents to this process, or to init
            pid, seen = parents.get(pid, 0), seen + 1
        if pid == me:
            ours += ticks
    return busy, total, ours


class CpuLoad:
    """``during(start)`` for a span (``start`` from ``mark()``); ``now``: the share over the last
    ``period`` seconds, kept by a thread once ``start()`` is called."""

    def __init__(self, period: float = 2.0):
        self.period, self.now, self.samples = period, None, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    mark = staticmethod(_ticks)

    @staticmethod
    def during(start, end=None) -> float | None:
        """The share of all CPU time from ``start`` to ``end`` (now) that other processes were busy (0 to 1)."""
        if start is None:  # nothing was marked: no walk of /proc for nothing
            return None
        end = end or _ticks()
        if end is None or end[1] <= start[1]:
            return None
        others = (end[0] - start[0]) - (end[2] - start[2])
        return min(1.0, max(0.0, others / (end[1] - start[1])))

    def start(self) -> None:
        if self._thread is None and _ticks() is not None:
            self._thread = threading.Thread(target=self._watch, name="cpu-load", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        start = _ticks()
        while not self._stop.wait(self.period):
            end = _ticks()
            self.now, start = self.during(start, end), end
            self.samples += 1

    def close(self) -> None:
        self._stop.set()
