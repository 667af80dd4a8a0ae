"""Hardening figures: bad input, load, faults, orphans. ``python -m bench.hardening [--quick]``.

Prints: inputs tried / answered clearly (through the public API and the CLI), requests sent /
answered under concurrent load, RSS growth over sequential requests, faults injected / recovered,
and orphan worker processes found. The tests (tests/test_hardening.py) run the same functions and
hold each figure to its promise; this script is how a person reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil


def _group(manager):
    """The tensor-parallel engine's worker group (None before its first start)."""
    return manager.engines["tensor-parallel"].group

ROOT = Path(__file__).resolve().parent.parent
OK = "ok"  # a case that must succeed
KEEP_OUTPUTS = 5  # the app under test keeps this many PNGs (--keep-outputs)

# (name, (prompt, width, height, mode, steps, seed, guidance), words the refusal must contain | OK).
# NaN and infinity cannot travel in JSON at all: the client library refuses to send them (the CLI
# cases show the backend's own answer to them).
API_CASES: list[tuple[str, tuple, str]] = [
    ("size 0x0", ("a fox", 0, 0, "eager", 2, 1, 1.0), "nearest valid size is 64x64"),
    ("negative size", ("a fox", -64, 64, "eager", 2, 1, 1.0), "nearest valid size"),
    ("not a multiple of 16", ("a fox", 1000, 1024, "eager", 2, 1, 1.0), "not a multiple of 16"),
    ("below the minimum", ("a fox", 32, 64, "eager", 2, 1, 1.0), "outside 64..2048; nearest valid size is 64x64"),
    ("above the maximum", ("a fox", 4096, 4096, "eager", 2, 1, 1.0), "outside 64..2048"),
    ("non-numeric size", ("a fox", "wide", 64, "eager", 2, 1, 1.0), "width: must be a whole number of pixels"),
    ("huge aspect ratio", ("a fox", 2048, 64, "eager", 2, 1, 1.0), "aspect ratio 32.00:1"),
    ("zero steps", ("a fox", 64, 64, "eager", 0, 1, 1.0), "steps: must be between 1 and 50"),
    ("negative steps", ("a fox", 64, 64, "eager", -3, 1, 1.0), "steps: must be between 1 and 50"),
    ("too many steps", ("a fox", 64, 64, "eager", 500, 1, 1.0), "steps: must be between 1 and 50"),
    ("non-integer steps", ("a fox", 64, 64, "eager", 2.5, 1, 1.0), "steps: must be a whole number"),
    ("negative seed", ("a fox", 64, 64, "eager", 2, -5, 1.0), "seed: must be between"),
    ("seed above 2^63", ("a fox", 64, 64, "eager", 2, 2**63, 1.0), "seed: must be between"),
    ("largest seed (2^63-1) is exact", ("a fox", 64, 64, "eager", 1, 2**63 - 1, 1.0), OK),
    ("text seed", ("a fox", 64, 64, "eager", 2, "lucky", 1.0), "seed: must be a whole number"),
    ("NaN guidance", ("a fox", 64, 64, "eager", 2, 1, float("nan")), "not JSON compliant"),
    ("infinite guidance", ("a fox", 64, 64, "eager", 2, 1, float("inf")), "not JSON compliant"),
    ("negative guidance", ("a fox", 64, 64, "eager", 2, 1, -1.0), "guidance: must be between 0 and 20"),
    ("empty prompt", ("", 64, 64, "eager", 2, 1, 1.0), "prompt: is empty"),
    ("whitespace prompt", ("  \n\t ", 64, 64, "eager", 2, 1, 1.0), "prompt: is empty"),
    ("100 kB prompt", ("x" * 100_000, 64, 64, "eager", 2, 1, 1.0), "characters; the limit is 2000"),
    ("control characters", ("a\x00fox\x1b[31m", 64, 64, "eager", 2, 1, 1.0), "control character U+0000"),
    ("prompt past the tokenizer", ("fox " * 400, 64, 64, "eager", 2, 1, 1.0), "tokens with the chat template"),
    ("unknown mode", ("a fox", 64, 64, "turbo", 2, 1, 1.0), "mode: must be one of"),
    ("emoji and right-to-left text", ("a fox 🦊 in snow ثعلب في الثلج", 64, 64, "eager", 2, 1, 1.0), OK),
]

# (name, argv, words the one-line error must contain)
CLI_CASES: list[tuple[str, list[str], str]] = [
    ("no size", ["generate", "fox"], "at least one --size"),
    ("malformed size", ["generate", "fox", "--size", "64by64"], "expected WIDTHxHEIGHT"),
    ("not a multiple of 16", ["generate", "fox", "--size", "100x64"], "nearest valid size is 96x64"),
    ("huge aspect ratio", ["generate", "fox", "--size", "2048x64"], "aspect ratio"),
    ("zero steps", ["generate", "fox", "--size", "64x64", "--steps", "0"], "--steps"),
    ("text seed", ["generate", "fox", "--size", "64x64", "--seed", "lucky"], "seed: must be a whole number"),
    ("seed above 2^63", ["generate", "fox", "--size", "64x64", "--seed", str(2**63)], "seed: must be between"),
    ("NaN guidance", ["generate", "fox", "--size", "64x64", "--guidance", "nan"], "guidance"),
    ("empty prompt", ["generate", "  ", "--size", "64x64"], "prompt: is empty"),
    ("prompt past the tokenizer", ["generate", "fox " * 400, "--size", "64x64"], "tokens with the chat template"),
    ("unknown mode", ["generate", "fox", "--size", "64x64", "--mode", "turbo"], "--mode: expected one of"),
    ("TP degree not dividing the heads", ["generate", "fox", "--size", "64x64", "--mode", "tp", "--tp-degree", "3"],
     "does not divide the model's 4 attention heads"),
    ("missing model", ["generate", "fox", "--size", "64x64", "--model", "/no/such/model"], "no such folder"),
]


def run_api_cases(client, status_fn) -> list[dict[str, Any]]:
    """Each case through gradio_client; a refusal must be clear and leave the backend unchanged."""
    rows = []
    for name, args, expect in API_CASES:
        before = status_fn()
        try:
            _image, record = client.predict(*args, api_name="/generate")
            outcome, message = "answered", f"seed {record['seed']}"
        except Exception as exc:  # noqa: BLE001 - the message is what is judged
            outcome, message = "refused", str(exc)
        after = status_fn()
        unchanged = (before["shapes"] == after["shapes"] and before["generations"] == after["generations"])
        clear = (outcome == "answered") if expect == OK else (outcome == "refused" and expect in message and unchanged)
        rows.append({"case": name, "clear": clear, "outcome": outcome, "message": message[:200],
                     "state_unchanged": unchanged if expect != OK else None})
    return rows


def run_cli_cases(output_dir: Path) -> list[dict[str, Any]]:
    """Each case through app.main in this process: exit status 2 and one line on stderr."""
    import app

    rows = []
    for name, argv, expect in CLI_CASES:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = app.main(argv + ["--output-dir", str(output_dir)])
            except SystemExit as exc:
                code = exc.code
        lines = err.getvalue().strip().splitlines()
        clear = code == 2 and len(lines) == 1 and expect in lines[0] and "Traceback" not in err.getvalue()
        rows.append({"case": name, "clear": clear, "exit": code, "message": (lines or [""])[-1][:200]})
    return rows


def run_load(url: str, clients: int = 5, per_client: int = 4) -> dict[str, Any]:
    """clients x per_client requests at once; every answer accounted for, in each client's order."""
    from gradio_client import Client

    results: dict[int, list[dict]] = {}
    saw_queue = threading.Event()
    errors: list[str] = []

    def client_run(c: int) -> None:
        from gradio_client.utils import Status

        client = Client(url, verbose=False)
        jobs = []
        for i in range(per_client):
            job = client.submit("load test", 128, 128, "eager", 4, 1000 * c + i, 1.0, api_name="/generate")
            # The next request goes out once this one has joined the queue, so the client's own order
            # is the order the server received them in.
            while job.status().code in (Status.STARTING, Status.JOINING_QUEUE) and not job.done():
                time.sleep(0.005)
            jobs.append(job)
        for job in jobs:
            while not job.done():
                status = job.status()
                if getattr(status, "rank", None) not in (None, 0) or getattr(status, "queue_size", 0):
                    saw_queue.set()
                time.sleep(0.02)
        out = []
        for job in jobs:
            try:
                out.append(job.result()[1])
            except Exception as exc:  # noqa: BLE001 - counted as unanswered
                errors.append(str(exc))
        results[c] = out

    threads = [threading.Thread(target=client_run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    records = [r for rs in results.values() for r in rs]
    seeds = sorted(r["seed"] for r in records)
    expected = sorted(1000 * c + i for c in range(clients) for i in range(per_client))
    in_order = all([r["seed"] for r in sorted(rs, key=lambda r: r["started_at"])] == [r["seed"] for r in rs]
                   for rs in results.values())
    return {"sent": clients * per_client, "answered": len(records), "lost_or_duplicated": seeds != expected,
            "each_client_in_order": in_order, "queue_position_seen": saw_queue.is_set(), "errors": errors}


def png_with_text(path: Path, text: str, key: str = "parameters", compressed: bool = False) -> Path:
    """A 1x1 PNG whose ``key`` text chunk holds ``text`` (the probe's 201-byte file and its variants)."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text(key, text, zip=compressed)
    Image.new("RGB", (1, 1)).save(path, pnginfo=info)
    return path


# The probe's freezing PNG and variants: (name, text of the parameters chunk, zTXt?).
PNG_CASES = [
    ("Steps: 1, + 60,000 letters", "Steps: 1, " + "a" * 60_000, False),
    ("60,000 letters, compressed", "Steps: 1, " + "a" * 60_000, True),
    ("20,000 'a: ' pairs", "Steps: 1, " + "a: " * 20_000, False),
    ("30,000 commas", "Steps: 1" + "," * 30_000, False),
    ("64 kB prompt line", "x" * 65_000 + "\nSteps: 4, Seed: 1", False),
]
NORMAL_INFOTEXT = ("a red circle on the left, on a sky gradient\nSteps: 4, Sampler: FlowMatchEuler, CFG scale: 1.0, "
                   "Seed: 42, Size: 256x256, Model: embedded:scenes-flux2-klein, Mode: compiled, Device: cpu")


def run_png_cases(url: str, tmp: Path) -> list[dict[str, Any]]:
    """Each hostile PNG through the page's "load parameters" event, with /status called meanwhile:
    the parse's time against a normal PNG's (measured side by side), and the slowest /status answer."""
    from gradio_client import Client

    from tools.room_client import config, event_index, post_event, upload

    index = event_index(config(url), "png-in", "upload")
    client = Client(url, verbose=False)

    def through_page(path: Path) -> tuple[float, dict]:
        data = upload(url, str(path))
        began = time.perf_counter()
        answer = post_event(url, index, [data])
        return time.perf_counter() - began, answer

    normal = png_with_text(tmp / "normal.png", NORMAL_INFOTEXT)
    rows = []
    for name, text, compressed in PNG_CASES:
        path = png_with_text(tmp / "hostile.png", text, compressed=compressed)
        status_seconds: list[float] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                began = time.perf_counter()
                client.predict(api_name="/status")
                status_seconds.append(time.perf_counter() - began)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            normal_seconds = min(through_page(normal)[0] for _ in range(3))
            hostile_seconds, answer = min((through_page(path) for _ in range(3)), key=lambda r: r[0])
        finally:
            stop.set()
            poller.join(60)
        rows.append({"case": name, "bytes": path.stat().st_size, "answered": "output" in answer,
                     "normal_s": round(normal_seconds, 4), "ratio_to_normal": round(hostile_seconds / normal_seconds, 2),
                     "slowest_status_s": round(max(status_seconds or [0.0]), 3)})
    return rows


def run_foreign_files(tmp: Path) -> dict[str, int]:
    """Each compile cache layout with the compile stack's entries and a user's files beside them:
    clearing must remove the former and keep every one of the latter."""
    from backend import cache_layout

    key, sha = "0a1b" + "c" * 28, "0a1b" + "d" * 60  # TorchNeuron's layouts (tests/standin/captures/torchneuron/neff_cache.json)
    written = {"neff": [f"0a/1b/{key}.neff", "0a/1b/.tmp.Ab3xY9", f"{sha}/{sha}.neff"],
               "neff-locks": [f"locks/{key}.lock", f"{sha}/locks/compile.lock"],
               "inductor": ["fxgraph/ab/entry", "j6/cj6za2bike3u7tduddk6hzww7rezwfxjykobuwzmevoumg5c2rey.py"]}
    foreign = ["notes.txt", "0a/keep.txt", "0a/1b/photo.jpg", "fx/cfx123.py", "results/model.safetensors"]
    planted = kept = removed = 0
    for kind, ours in written.items():
        root = tmp / kind
        for relative in ours + foreign:
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_bytes(b"x")
        cache_layout.remove(root, cache_layout.entries(kind, root))
        planted += len(foreign)
        kept += sum((root / r).exists() for r in foreign)
        removed += sum(not (root / r).exists() for r in ours)
    return {"foreign_planted": planted, "foreign_kept": kept,
            "entries_written": sum(map(len, written.values())), "entries_removed": removed}


def run_memory(requests: int = 100) -> dict[str, Any]:
    """RSS growth over sequential requests in one process (after a warm-up of 10)."""
    import gc

    from backend.manager import Manager
    from backend.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        manager = Manager(Settings(device="cpu", dtype="float32", compile_backend="aot_eager",
                                   cache_dir=Path(tmp) / "c", output_dir=Path(tmp) / "o"))
        manager.start()
        request = manager.validate("memory", 64, 64, steps=2, seed=1, mode="eager")
        for _ in range(10):
            manager.generate(request)
        gc.collect()
        before = psutil.Process().memory_info().rss
        for i in range(requests):
            manager.generate(dataclasses.replace(request, seed=i))
        gc.collect()
        after = psutil.Process().memory_info().rss
        manager.close()
    return {"requests": requests, "rss_before_MiB": before / 2**20, "rss_after_MiB": after / 2**20,
            "growth_MiB": (after - before) / 2**20}


def alive(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


TP_FAULTS = (("TP rank 0 killed", signal.SIGKILL, 0), ("TP rank 1 killed", signal.SIGKILL, 1),
             ("TP rank 1 hung", signal.SIGSTOP, 1))


def run_faults(tp_faults=TP_FAULTS) -> list[dict[str, Any]]:
    """Inject each fault into a live manager; recovered = a clear error, then a working request.
    ``tp_faults``: which ranks to kill or hang mid-generation (name, signal, rank). The manager
    (and any worker group) is closed whatever happens."""
    from backend.manager import Manager
    from backend.settings import Settings

    tmp = Path(tempfile.mkdtemp(prefix="faults-"))
    manager = Manager(Settings(device="cpu", dtype="float32", compile_backend="aot_eager", tp_stall_timeout=3.0,
                               cache_dir=tmp / "c", output_dir=tmp / "o"))
    try:
        manager.start()
        return _inject_faults(manager, tmp, tp_faults)
    finally:
        manager.close()


def _inject_faults(manager, tmp: Path, tp_faults=TP_FAULTS) -> list[dict[str, Any]]:
    import torch

    from backend.errors import GenerationFailed, StudioError

    rows: list[dict[str, Any]] = []

    def works(mode: str = "eager") -> bool:
        try:
            return manager.generate(manager.validate("after the fault", 64, 64, steps=2, seed=3, mode=mode))[1] is not None
        except StudioError:
            return False

    def record(name: str, error: str | None, recovered: bool, orphans: int = 0) -> None:
        rows.append({"fault": name, "clear_error": bool(error), "error": (error or "")[:200],
                     "recovered": recovered, "orphans": orphans})

    # 1. a compile that fails
    if "broken_for_hardening" not in torch._dynamo.list_backends(exclude_tags=()):
        def broken(gm, example_inputs):
            raise RuntimeError("injected compiler failure")
        torch._dynamo.register_backend(broken, name="broken_for_hardening")
    real_backend = manager.device.info.compile_backend
    manager.device.info.compile_backend = "broken_for_hardening"
    try:
        manager.generate(manager.validate("x", 96, 96, steps=1, seed=1, mode="regional"))
        error = None
    except GenerationFailed as exc:
        error = str(exc)
    manager.device.info.compile_backend = real_backend
    # Recovery in the mode and at the shape that failed: the next request compiles again, and says so.
    from backend.shapes import Shape

    retry = manager.predict("regional", Shape(96, 96))
    try:
        again = manager.generate(manager.validate("x", 96, 96, steps=1, seed=1, mode="regional"))[1]
        recovered = again.compiled and retry["will_compile"] and "last error" in retry["note"]
    except StudioError:
        recovered = False
    record("compile failure", error, recovered and works("regional"))

    # 2. an exception inside the pipeline
    vae = manager.engine.pipe.vae
    real_decode = vae.decode
    vae.decode = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("injected pipeline failure"))
    try:
        manager.generate(manager.validate("x", 64, 64, steps=1, seed=1, mode="eager"))
        error = None
    except GenerationFailed as exc:
        error = str(exc)
    vae.decode = real_decode
    record("exception in the pipeline", error, works())

    # 3-4. a tensor-parallel rank killed, then hung, mid-generation
    for name, sig, rank in tp_faults:
        manager.start_engine("tensor-parallel", 2, wait=True)
        pids = set(_group(manager).rank_pids().values()) | {_group(manager).proc.pid}
        victim = _group(manager).rank_pids()[rank]
        started = threading.Event()
        outcome: dict[str, str] = {}

        def long_run() -> None:
            try:
                manager.generate(manager.validate("long", 512, 512, steps=50, seed=1, mode="tp"),
                                 lambda e: started.set() if e.phase == "denoising" else None)
            except StudioError as exc:
                outcome["error"] = str(exc)

        thread = threading.Thread(target=long_run)
        thread.start()
        started.wait(60)
        os.kill(victim, sig)
        thread.join(30)
        notice = manager.status()["degraded"] or ""
        degraded_ok = "degraded" in notice and works("tp")  # served in process while the group is down
        manager.start_engine("tensor-parallel", 2, wait=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)
        record(name, outcome.get("error"), degraded_ok and works("tp"), len(alive(pids)))  # old group gone?

    # 5. the group fails to start (bad torchrun arguments)
    manager.stop_engine("tensor-parallel")
    manager.settings.tp_torchrun_args = "--no-such-torchrun-flag"
    manager.start_engine("tensor-parallel", 2, wait=True)
    error = _group(manager).error if _group(manager).state == "dead" else None
    manager.settings.tp_torchrun_args = ""
    manager.start_engine("tensor-parallel", 2, wait=True)
    record("TP group fails to start (bad torchrun arguments)", error, _group(manager).state == "ready" and works("tp"))

    group = _group(manager)
    pids = set(group.rank_pids().values()) | {group.proc.pid}
    manager.close()
    left = len(alive(pids))
    rows.append({"fault": "stop after the faults", "clear_error": True, "error": "",
                 "recovered": group.state == "stopped" and left == 0, "orphans": left})
    return rows


def run_sigterm(tmp: Path, mode: str = "tp") -> dict[str, Any]:
    """SIGTERM to a serving app mid-generation in ``mode``: clean exit, no orphans, no half-written PNG."""
    from gradio_client import Client

    from tools.app_process import free_port

    port = free_port()
    out = tmp / "outputs"
    # A temp folder of its own (TMPDIR): what the app leaves in it after the exit is counted.
    temp = tmp / "tmpdir"
    temp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "TMPDIR": str(temp)}
    for name in ("TORCHINDUCTOR_CACHE_DIR", "GRADIO_TEMP_DIR"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--mode", mode,
                             "--tp-degree", "2", "--compile-backend", "aot_eager", "--output-dir", str(out)],
                            cwd=tmp, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    client = None
    while time.monotonic() < deadline:
        try:
            client = client or Client(url, verbose=False)
            if client.predict(api_name="/status")["state"] == "ready":
                break
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.3)
    family = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
    job = client.submit("long", 512, 512, mode, 50, 1, 1.0, api_name="/generate")
    busy, waiting = None, time.monotonic() + 120  # its own bound: a slow start must not eat into it
    while time.monotonic() < waiting:
        busy = client.predict(api_name="/status").get("busy")
        if busy is not None and busy.get("phase") not in (None, "starting"):
            break
        time.sleep(0.1)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = "killed after 60 s"
    del job
    time.sleep(1.0)
    partial = [p.name for p in out.glob(".partial-*")] if out.exists() else []
    return {"mode": mode, "busy_when_signalled": (busy or {}).get("phase"), "exit_code": code,
            "seconds_to_exit": round(time.monotonic() - began, 2),
            "orphans": len(alive(family)), "half_written_pngs": len(partial),
            "left_in_tmp": sorted(p.name for p in temp.iterdir())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from gradio_client import Client

    from tools.app_process import running_app

    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with running_app(tmp, "--compile-backend", "aot_eager", "--keep-outputs", str(KEEP_OUTPUTS)) as url:
            from tools.room_client import refused_operator_events

            client = Client(url, verbose=False)
            report["api"] = run_api_cases(client, lambda: client.predict(api_name="/status"))
            report["load"] = run_load(url)
            report["operator_events"] = [{"event": e, "refused": r, "caller": who} for who, cookie in
                                         (("anonymous", None), ("forged key", "forged")) for e, r, _m in
                                         refused_operator_events(url, cookie)]
            report["png"] = run_png_cases(url, tmp)
            report["outputs_kept"] = len(list((tmp / "outputs").glob("*.png")))
        report["foreign_files"] = run_foreign_files(tmp / "caches")
        report["cli"] = run_cli_cases(tmp / "cli-out")
        report["memory"] = run_memory()
        report["faults"] = run_faults()
        report["sigterm"] = [run_sigterm(tmp / mode, mode) for mode in ("eager", "compiled", "regional", "tp")]
        from bench.room import replica_killed

        report["replica_killed"] = replica_killed(tmp)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    tried = report["api"] + report["cli"]
    faults = report["faults"]
    print(f"inputs tried / answered clearly: {len(tried)} / {sum(r['clear'] for r in tried)} "
          f"(API {len(report['api'])}, CLI {len(report['cli'])})")
    for r in tried:
        if not r["clear"]:
            print(f"  NOT CLEAR: {r['case']}: {r['message']}")
    load = report["load"]
    print(f"requests sent / answered under load: {load['sent']} / {load['answered']} "
          f"(lost or duplicated: {load['lost_or_duplicated']}, each client in order: {load['each_client_in_order']}, "
          f"queue position seen: {load['queue_position_seen']})")
    mem = report["memory"]
    print(f"RSS growth over {mem['requests']} sequential requests: {mem['growth_MiB']:.1f} MiB "
          f"({mem['rss_before_MiB']:.0f} -> {mem['rss_after_MiB']:.0f} MiB)")
    print(f"faults injected / recovered: {len(faults) - 1} / {sum(r['recovered'] for r in faults[:-1])}")
    for r in faults:
        print(f"  {r['fault']}: {'recovered' if r['recovered'] else 'NOT RECOVERED'}; {r['error'][:120]}")
    for sig in report["sigterm"]:
        print(f"SIGTERM mid-generation ({sig['mode']}): exit {sig['exit_code']} after {sig['seconds_to_exit']} s, "
              f"half-written PNGs {sig['half_written_pngs']}, orphans {sig['orphans']}, "
              f"left in its temp folder {len(sig['left_in_tmp'])}")
    rk = report["replica_killed"]
    print(f"a replica killed under {rk['sent']} requests from 5 clients (2 replicas): answered {rk['answered']} / "
          f"{rk['sent']} (served {rk['served']}, clear errors {rk['clear_errors']} of {rk['errors']}), lost "
          f"{rk['lost']}, duplicated {rk['duplicated']}, replica back: {rk['restarted']}")
    orphans = sum(r["orphans"] for r in faults) + sum(s["orphans"] for s in report["sigterm"])
    print(f"orphan processes found: {orphans}")
    events = report["operator_events"]
    print(f"operator events posted by fn_index as a viewer / refused: {len(events)} / "
          f"{sum(e['refused'] for e in events)} (anonymous and forged key)")
    for row in report["png"]:
        print(f"hostile PNG '{row['case']}' ({row['bytes']} bytes): answered {row['answered']}, "
              f"{row['ratio_to_normal']}x a normal PNG's time, slowest /status meanwhile {row['slowest_status_s']} s")
    ff = report["foreign_files"]
    print(f"foreign files in cache folders kept / planted: {ff['foreign_kept']} / {ff['foreign_planted']} "
          f"(compile entries removed {ff['entries_removed']} / {ff['entries_written']})")
    print(f"output PNGs kept after {len(report['api']) + report['load']['sent']} requests: "
          f"{report['outputs_kept']} (limit --keep-outputs {KEEP_OUTPUTS})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
