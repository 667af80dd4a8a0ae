"""How the suite's rows run the app: in this process (``start_manager``), or as a fresh process of
``app.py`` or another script (``clean_env``, ``run_python``, ``app_cli``, ``child_compile``,
``child_first_image``), so a row that times a start, a compile or a cache sees no state this
process has built up."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from bench import BENCH_MODEL, ROOT


def start_manager(tmp: Path, **overrides):
    """A started ``Manager`` of the bench model on the CPU (float32, aot_eager), its caches and
    outputs under ``tmp``; ``overrides`` are further ``Settings``."""
    from backend.serving.manager import Manager
    from backend.settings import Settings

    settings = Settings(**{"model": BENCH_MODEL, "device": "cpu", "dtype": "float32",
                           "compile_backend": "aot_eager", "cache_dir": tmp / "cache", "output_dir": tmp / "out",
                           **overrides})
    manager = Manager(settings)
    manager.start()
    return manager


def clean_env() -> dict[str, str]:
    """The environment for a child app process whose caches are exactly its --cache-dir.

    Importing torch here sets TORCHINDUCTOR_CACHE_DIR in this process's environment (inductor
    records its default), which a child would inherit and prefer over --cache-dir."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCHINDUCTOR_CACHE_DIR", "TORCH_NEURONX_NEFF_CACHE_DIR")}
    return {**env, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}


def run_python(*argv: str, cwd: Path) -> str:
    """``python ARGV`` in ``cwd`` with ``clean_env``; its stdout (RuntimeError with its stderr on failure)."""
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=clean_env())
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return proc.stdout


def app_cli(*argv: str, cwd: Path) -> str:
    """``python app.py ARGV`` in ``cwd`` (``run_python``)."""
    return run_python(str(ROOT / "app.py"), *argv, cwd=cwd)


def _generate(model: str, mode: str, backend: str, size: str, cache: Path, *more: str) -> dict:
    """The JSON record of one generation ("warm-up", seed 0, not saved) in a fresh app process."""
    out = app_cli("generate", "warm-up", "--size", size, "--mode", mode, *more, "--seed", "0", "--json", "--no-save",
                  "--model", model, "--device", "cpu", "--dtype", "float32", "--compile-backend", backend,
                  "--cache-dir", str(cache), cwd=cache.parent)
    return json.loads(out.strip().splitlines()[-1])


def child_compile(model: str, mode: str, backend: str, size: str, cache: Path) -> tuple[float, float]:
    """Compile seconds of one generation in a fresh app process (its record's ``compile_seconds``) and
    that process's whole CPU time (user + system, from the kernel's accounting of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = _generate(model, mode, backend, size, cache, "--steps", "1")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return record["compile_seconds"], child_cpu


def child_first_image(mode: str, size: str, cache: Path) -> float:
    """Seconds of the first image in a fresh app process (its record's ``seconds``: compile included)."""
    return _generate(BENCH_MODEL, mode, "inductor", size, cache)["seconds"]
