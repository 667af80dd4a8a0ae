"""Run code against the torch_neuronx stand-in (``tests/standin``) in a fresh subprocess.

The simulated runtime, its core claims and the environment TorchNeuron reads at import all live
per process, so every check runs in a child started with ``standin_env``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "standin"

# Inherited settings that would change what the stand-in does; each test states its own.
_CLEARED_PREFIXES = ("TORCH_NEURONX_", "NEURON_RT_", "NEURON_STANDIN_")
_CLEARED = {"NEURON_LOGICAL_NC_CONFIG", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "TORCH_DEVICE_BACKEND_AUTOLOAD", "TORCHELASTIC_RUN_ID"}


def standin_env(state_dir: os.PathLike | str, devices: int = 1, **extra: str | None) -> dict[str, str]:
    """os.environ for a child that sees the stand-in: PYTHONPATH, the stand-in's ``neuron-ls`` on
    PATH, the state dir, and a simulated instance of ``devices`` Trainium2 chips (8 physical cores
    each; 4 logical each at the default ``NEURON_LOGICAL_NC_CONFIG=2``: one device is a trn2.3xlarge).

    ``extra`` sets more variables; a value of None removes one.
    """
    env = {k: v for k, v in os.environ.items()
           if k not in _CLEARED and not k.startswith(_CLEARED_PREFIXES)}
    paths = [str(REPO), str(STANDIN)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["NEURON_STANDIN_STATE_DIR"] = str(state_dir)
    env["NEURON_STANDIN_DEVICES"] = str(devices)
    env["PATH"] = os.pathsep.join([str(STANDIN / "bin"), env.get("PATH", "")])
    env["HF_HUB_OFFLINE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def add_ray_node(cluster, state_dir: os.PathLike | str, **extra: str | None):
    """A worker node of a local Ray cluster (``ray.cluster_utils.Cluster``) whose processes see
    ``standin_env(state_dir, **extra)``, with one ``neuron_cores``. Ray starts a node with this
    process's environment *updated* by ``env_vars``, so a variable ``standin_env`` leaves out (a
    ``TORCH_NEURONX_NEFF_CACHE_DIR`` an earlier test's Device set here) would still reach the node:
    those are out of this process's environment while the node starts."""
    env = standin_env(state_dir, **extra)
    left_out = {k: os.environ.pop(k) for k in [k for k in os.environ if k not in env]}
    try:
        return cluster.add_node(num_cpus=1, resources={"neuron_cores": 1}, env_vars=env)
    finally:
        os.environ.update(left_out)


def run_py(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -c code`` in the repo root with ``env``; stdout/stderr captured as text."""
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def run_all(*runs: tuple[list[str], dict[str, str]], timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Start every ``(argv, env)`` child at once in the repo root and wait for all of them (each
    child imports torch: independent children side by side take less than one after the other);
    their results in order, stdout/stderr captured as text. ``argv`` after the interpreter."""
    procs = [subprocess.Popen([sys.executable, *argv], env=env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for argv, env in runs]
    try:
        outputs = [proc.communicate(timeout=timeout) for proc in procs]
        return [subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
                for proc, (out, err) in zip(procs, outputs)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@functools.lru_cache(maxsize=1)
def _runtime():
    """The stand-in's runtime module, loaded from its file: no torch, no package import."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_standin_runtime", STANDIN / "torch_neuronx" / "_runtime.py")
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    return runtime


def core_holder(state_dir: os.PathLike | str, core: int) -> int | None:
    """The pid holding NeuronCore ``core`` in ``state_dir`` right now, or None (the stand-in's own
    ``holder_of``; claims nothing)."""
    return _runtime().holder_of(core, state_dir)
