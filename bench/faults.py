"""Faults injected, and what is left after them: a compile that fails, an exception in the pipeline,
a worker group that fails to start, tensor-parallel ranks killed or hung mid-generation
(``run_faults``), and SIGTERM to a serving app mid-generation (``run_sigterm``); the orphan
processes each leaves are counted (``alive``). Figures of ``python -m bench.hardening``;
tests/test_hardening.py holds each. (A replica killed under load: ``bench.room.replica_killed``.)"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench import ROOT


def _group(manager):
    """The tensor-parallel engine's worker group (None before its first start)."""
    return manager.engines["tensor-parallel"].group


def alive(pids) -> list[int]:
    """The processes among ``pids`` still running (a zombie counts as gone)."""
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
# What each fault's error must say for a person to know what happened (besides being one line).
SAYS = {"compile failure": ("while compiling",), "exception in the pipeline": ("injected pipeline failure",),
        "TP rank 0 killed": ("rank 0", "SIGKILL"), "TP rank 1 killed": ("rank 1", "SIGKILL"),
        "TP rank 1 hung": ("no progress",), "TP group fails to start (bad torchrun arguments)": ("torchrun exited",)}


def clear(name: str, error: str | None) -> bool:
    """A clear error: there is one, it is not a traceback, and it says what happened (``SAYS``)."""
    return bool(error) and "Traceback" not in error and all(word in error for word in SAYS.get(name, ()))


def run_faults(tp_faults=TP_FAULTS) -> list[dict[str, Any]]:
    """Inject each fault into a live manager; recovered = a clear error, then a working request.
    ``tp_faults``: which ranks to kill or hang mid-generation (name, signal, rank). The manager
    (and any worker group) is closed whatever happens."""
    from backend.serving.manager import Manager
    from backend.settings import Settings

    with tempfile.TemporaryDirectory(prefix="faults-") as name:  # its caches and images, removed after
        tmp = Path(name)
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
            return manager.generate(manager.validate("after the fault", 64, 64, steps=2, seed=3,
                                                     mode=mode))[1] is not None
        except StudioError:
            return False

    def record(name: str, error: str | None, recovered: bool, orphans: int = 0) -> None:
        rows.append({"fault": name, "clear_error": clear(name, error), "error": (error or "")[:200],
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

    # 3. the group fails to start (bad torchrun arguments); the start after it is the one the
    # faults below begin with (each group start imports the model stack in every rank)
    manager.settings.tp_torchrun_args = "--no-such-torchrun-flag"
    manager.start_engine("tensor-parallel", 2, wait=True)
    error = _group(manager).error if _group(manager).state == "dead" else None
    manager.settings.tp_torchrun_args = ""
    manager.start_engine("tensor-parallel", 2, wait=True)
    record("TP group fails to start (bad torchrun arguments)", error, _group(manager).state == "ready" and works("tp"))

    # 4-5. a tensor-parallel rank killed, then hung, mid-generation
    for name, sig, rank in tp_faults:
        manager.start_engine("tensor-parallel", 2, wait=True)  # the group running already: no new start
        pids = set(_group(manager).rank_pids().values()) | {_group(manager).proc.pid}
        victim = _group(manager).rank_pids()[rank]
        started = threading.Event()
        outcome: dict[str, str] = {}

        def long_run(started=started, outcome=outcome) -> None:
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
        notice = manager.status().degraded or ""
        # The status says why the group is down (it died), and a tp request is served in process meanwhile.
        degraded_ok = "tensor-parallel group is dead" in notice and works("tp")
        manager.start_engine("tensor-parallel", 2, wait=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)
        record(name, outcome.get("error"), degraded_ok and works("tp"), len(alive(pids)))  # old group gone?

    group = _group(manager)
    pids = set(group.rank_pids().values()) | {group.proc.pid}
    manager.close()
    left = len(alive(pids))
    rows.append({"fault": "stop after the faults", "clear_error": None, "error": "",  # no error to judge
                 "recovered": group.state == "stopped" and left == 0, "orphans": left})
    return rows


def run_sigterm(tmp: Path, mode: str = "tp") -> dict[str, Any]:
    """SIGTERM to a serving app mid-generation in ``mode``: clean exit, no orphans, no half-written PNG."""
    # A temp folder of its own (TMPDIR): what the app leaves in it after the exit is counted. A short
    # one: under a long folder the group's run dir goes to /tmp (backend.launch.protocol.run_root),
    # where it would not be counted.
    temp = Path(tempfile.mkdtemp(prefix="sigterm-", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        return _sigterm(tmp, temp, mode)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _sigterm(tmp: Path, temp: Path, mode: str) -> dict[str, Any]:
    from gradio_client import Client

    from tools.app_process import free_port, stop_app

    port = free_port()
    out = tmp / "outputs"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "TMPDIR": str(temp)}
    for name in ("TORCHINDUCTOR_CACHE_DIR", "GRADIO_TEMP_DIR"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--mode", mode,
                             "--tp-degree", "2", "--compile-backend", "aot_eager", "--output-dir", str(out)],
                            cwd=tmp, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 900  # as below: ready (or gone) decides; the bound is for a wedged app
    client, status = None, {}
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            client = client or Client(url, verbose=False)
            status = client.predict(api_name="/status")
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if status.get("state") in ("ready", "failed"):
            break
        time.sleep(0.3)
    if status.get("state") == "failed":  # said at once: waiting on would only run into the bound
        stop_app(proc)
        raise RuntimeError(f"the app's model load failed: {status.get('load_error')}")
    if proc.poll() is not None:
        raise RuntimeError(f"the app exited with {proc.returncode} before it was ready")
    family = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
    job = client.submit("long", 512, 512, mode, 50, 1, 1.0, api_name="/generate")
    # Until the run is under way (a group that is still starting says "starting"), or over: the
    # state decides, not a clock; the bound only keeps a wedged app from hanging the caller.
    busy, waiting = None, time.monotonic() + 900
    while time.monotonic() < waiting and not job.done():
        busy = client.predict(api_name="/status").get("busy")
        if busy is not None and busy.get("phase") not in (None, "starting"):
            break
        time.sleep(0.1)
    # Its processes as they are when the signal goes (a group's ranks start after the app is ready).
    family |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
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

