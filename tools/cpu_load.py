"""Keep the CPU busy on purpose, to check that the test suite does not depend on an idle machine.

    python -m tools.cpu_load --procs 2 --seconds 3600 &     # both cores of a 2-core machine
    python -m pytest -q; kill %1

Each process spins on arithmetic until ``--seconds`` have passed, then exits by itself (it never
outlives its bound, even if nobody kills it). Pure CPU: no memory growth, no disk, no network.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time


def spin(seconds: float, parent: int) -> None:
    deadline = time.monotonic() + seconds
    x = 0
    while time.monotonic() < deadline and os.getppid() == parent:  # ends with its parent, however killed
        for i in range(10_000):
            x = (x * 1103515245 + i) % 2147483648


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 2, help="busy processes (default: cores)")
    parser.add_argument("--seconds", type=float, default=1800.0, help="stop after this long (default 1800)")
    args = parser.parse_args()
    workers = [multiprocessing.Process(target=spin, args=(args.seconds, os.getpid()), daemon=True)
               for _ in range(args.procs)]
    for w in workers:
        w.start()
    print(f"cpu_load: {args.procs} busy process(es) for at most {args.seconds:g} s", flush=True)
    try:
        for w in workers:
            w.join()
    except KeyboardInterrupt:
        for w in workers:
            w.terminate()


if __name__ == "__main__":
    main()
