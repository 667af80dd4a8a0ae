"""The CPU load meter on this machine's real /proc: a process this one started is its own work,
one it did not start is other work."""

import subprocess
import sys
import time

import pytest

from backend.hardware import load

pytestmark = pytest.mark.skipif(load._ticks() is None, reason="no /proc/stat here (Linux only)")
SPIN = "import sys\nwhile True: pass"


def _cpu_ticks(pid: int) -> int:
    rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def _spin_until(pid: int, ticks: int) -> None:
    deadline = time.monotonic() + 120
    while _cpu_ticks(pid) < ticks:  # wait for the spinner's own CPU time, not for seconds
        assert time.monotonic() < deadline, "the spinner got no CPU in two minutes"
        time.sleep(0.05)


def test_a_child_is_this_processs_work_and_a_stranger_is_other_work():
    start = load.CpuLoad.mark()
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        _spin_until(child.pid, 50)
        end = load.CpuLoad.mark()
        assert end[2] - start[2] >= _cpu_ticks(child.pid) - 5  # the child's ticks are counted as ours
    finally:
        child.kill()
        child.wait()
    # A stranger: started through a shell that exits at once, so its parent is no longer this process.
    pid = int(subprocess.run(["sh", "-c", f'{sys.executable} -c "{SPIN}" >/dev/null 2>&1 & echo $!'],
                             capture_output=True, text=True, check=True).stdout)
    try:
        before, spun = load.CpuLoad.mark(), _cpu_ticks(pid)
        _spin_until(pid, spun + 50)
        after = load.CpuLoad.mark()
        stranger = _cpu_ticks(pid) - spun
        assert after[2] - before[2] < stranger  # not ours (we only polled /proc meanwhile)
        assert load.CpuLoad.during(before, after) >= (stranger - 5) / (after[1] - before[1])
    finally:
        subprocess.run(["kill", str(pid)], check=False)
