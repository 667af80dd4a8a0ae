"""CPU an idle app uses: `python app.py --model embedded-random` with no page open.

    python -m bench.idle            # 20 s after the model is ready; prints % of one core
    python -m bench.idle --seconds 60 --json

Counts the app process and its children (user + system time over wall time). Nothing is asserted:
the figure is printed (issue 30 measured 4.7-6 %, and 1.7 % with Gradio's queue polling patched to
20 ms; issue 51 removed that patch, Gradio being used through its public API only: 3.9 %).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def measure(seconds: float) -> dict:
    import psutil

    from tools.app_process import running_app

    with tempfile.TemporaryDirectory() as tmp, running_app(Path(tmp), "--model", "embedded-random") as url:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        app = next(c.pid for c in psutil.net_connections("tcp")
                   if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN)
        proc = psutil.Process(app)
        time.sleep(2)  # the readiness poll's client has gone
        procs = [proc, *proc.children(recursive=True)]
        before, start = sum(sum(p.cpu_times()[:2]) for p in procs), time.monotonic()
        time.sleep(seconds)
        used, wall = sum(sum(p.cpu_times()[:2]) for p in procs) - before, time.monotonic() - start
    return {"seconds": round(wall, 1), "cpu_percent_of_a_core": round(100 * used / wall, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.seconds)
    print(json.dumps(result) if args.json else
          f"idle app: {result['cpu_percent_of_a_core']} % of one core over {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
