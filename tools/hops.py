"""Count the hops of one Generate click and one tensor-parallel request (docs/architecture.md).

    python -m tools.hops                 # prints both counts and the hops, one per line
    python -m tools.hops --json

A hop is a hand-off between two named functions of the project (``app.py``, ``backend/``, ``ui/``;
a comprehension or a lambda is part of its function), counted once per caller -> callee pair (a per-step
callback is one hop, not one per step), plus one
for each thread and each process a request crosses. Measured, not read off the code: a profiler
(``sys.setprofile``, in every thread) records the pairs while the app serves the request through
the page's own handler (``Studio.generate_from_page``), the tiny random model on the CPU, eager
mode, 64x64, 2 steps. The ranks of the tensor-parallel group record theirs the same way (a
``sitecustomize`` this tool puts on their ``PYTHONPATH``), counting only what runs under the job
loop (``serve``) and rank 0's socket server while the request is served. Run it on an older
checkout to compare (it imports nothing of the project at module level).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = (str(ROOT / "backend"), str(ROOT / "ui"), str(ROOT / "app.py"))
# Not hand-offs: a comprehension, a generator expression or a lambda runs inside its function.
INLINE = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>")

# What each rank records: pairs under the job loop (and rank 0's socket threads), appended to a file.
RANK_RECORDER = '''
import os, sys, threading
_out = os.environ.get("NEURON_STUDIO_HOPS_OUT")
_root = os.environ.get("NEURON_STUDIO_HOPS_ROOT", "")
if _out:
    _project = tuple(os.path.join(_root, p) for p in ("backend", "ui", "app.py"))
    _seen, _lock = set(), threading.Lock()
    _inline = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>")
    _serving = ("serve", "_serve", "_serve_connection")
    def _name(code):
        return os.path.relpath(code.co_filename, _root) + ":" + code.co_qualname

    def _profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(_project):
            return
        caller = frame.f_back
        if caller is None or not caller.f_code.co_filename.startswith(_project) or frame.f_code.co_name in _inline:
            return
        f, under = caller, False
        while f is not None:
            if f.f_code.co_name in _serving and f.f_code.co_filename.startswith(_project):
                under = True
                break
            f = f.f_back
        if not under:
            return
        pair = (_name(caller.f_code), _name(frame.f_code))
        with _lock:
            if pair not in _seen:
                _seen.add(pair)
                with open(_out + "." + str(os.getpid()), "a") as fh:
                    fh.write(pair[0] + " -> " + pair[1] + chr(10))
    sys.setprofile(_profile)
    threading.setprofile(_profile)
'''


class Recorder:
    """Caller -> callee pairs between project functions, and the threads they ran in."""

    def __init__(self):
        self.pairs: dict[tuple[str, str], None] = {}
        self.threads: set[str] = set()
        self.on = False

    @staticmethod
    def _name(code) -> str:
        return f"{os.path.relpath(code.co_filename, ROOT)}:{code.co_qualname}"

    def profile(self, frame, event, arg):
        if not self.on or event != "call" or not frame.f_code.co_filename.startswith(PROJECT):
            return
        caller = frame.f_back
        if caller is None or not caller.f_code.co_filename.startswith(PROJECT) or frame.f_code.co_name in INLINE:
            return
        self.pairs.setdefault((self._name(caller.f_code), self._name(frame.f_code)), None)
        self.threads.add(threading.current_thread().name.split(" ")[0].rstrip("-0123456789") or "thread")

    def __enter__(self):
        self.on = True
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)
        return self

    def __exit__(self, *exc):
        self.on = False
        sys.setprofile(None)
        threading.setprofile(None)


def _rank_pairs(out: str) -> dict[str, list[str]]:
    found = {}
    for path in sorted(Path(out).parent.glob(Path(out).name + ".*")):
        found[path.suffix.lstrip(".")] = [line for line in path.read_text().splitlines() if line]
    return found


def measure() -> dict:
    work = Path(tempfile.mkdtemp(prefix="neuron-studio-hops-"))
    (work / "site").mkdir()
    (work / "site" / "sitecustomize.py").write_text(RANK_RECORDER)
    out = str(work / "rank-hops")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work / "site"), os.environ.get("PYTHONPATH")]))
    os.environ["NEURON_STUDIO_HOPS_ROOT"] = str(ROOT)
    sys.path.insert(0, str(ROOT))  # an older checkout is not an installed package

    try:
        from backend.hardware.env import prepare_environment
        from backend.serving.manager import Manager
    except ImportError:  # a checkout from before backend/ was in folders (3592357 and earlier)
        from backend.device_env import prepare_environment
        from backend.manager import Manager
    from backend.settings import Settings

    prepare_environment(work / "cache")
    settings = Settings(model="embedded-random", cache_dir=str(work / "cache"), output_dir=str(work / "out"),
                        tp_degree=2)
    manager = Manager(settings)
    manager.start()
    from ui.handlers import Studio

    studio = Studio(manager)
    args = ("a red circle on a blue background", 64, 64)
    studio.studio_tab.generate_from_page(*args, "eager", 2, 1.0, 1, False, [])  # the first run loads and warms
    with Recorder() as eager:
        studio.studio_tab.generate_from_page(*args, "eager", 2, 1.0, 2, False, [])
    manager.start_engine("tensor-parallel", 2, wait=True)
    studio.studio_tab.generate_from_page(*args, "tp", 2, 1.0, 1, False, [])  # its first run, unrecorded
    os.environ["NEURON_STUDIO_HOPS_OUT"] = out  # (read by the ranks at start: restart them)
    manager.stop_engine("tensor-parallel")
    manager.start_engine("tensor-parallel", 2, wait=True)  # fresh ranks: their first job is the one recorded
    with Recorder() as tp:
        studio.studio_tab.generate_from_page(*args, "tp", 2, 1.0, 2, False, [])
    ranks = _rank_pairs(out)
    manager.close()
    shutil.rmtree(work, ignore_errors=True)

    def count(rec: Recorder, processes: dict[str, list[str]] | None = None) -> dict:
        pairs = [f"{a} -> {b}" for a, b in rec.pairs]
        crossings = len(rec.threads) - 1
        rank_pairs = [p for lines in (processes or {}).values() for p in lines]
        crossings += len(processes or {})  # app -> rank 0 (socket), rank 0 -> each other rank (collective)
        return {"hops": len(pairs) + len(rank_pairs) + crossings, "function_hops": len(pairs),
                "rank_hops": len(rank_pairs), "thread_and_process_crossings": crossings,
                "threads": sorted(rec.threads), "pairs": pairs,
                "rank_pairs": {pid: lines for pid, lines in (processes or {}).items()}}

    return {"eager_click": count(eager), "tp_request": count(tp, ranks)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure()
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for name, r in result.items():
        print(f"{name}: {r['hops']} hops ({r['function_hops']} in the app, {r['rank_hops']} on the ranks, "
              f"{r['thread_and_process_crossings']} thread/process crossings; threads: {', '.join(r['threads'])})")
    for name, r in result.items():
        print(f"\n# {name}")
        print("\n".join(r["pairs"]))
        for pid, lines in r["rank_pairs"].items():
            print(f"## rank process {pid}")
            print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
