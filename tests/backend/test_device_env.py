"""What the app sets before torch loads: the NEFF lock timeout against the compile allowance, and
the interpreter's folder on PATH (TorchNeuron runs neuronx-cc by name)."""

import os
import subprocess
import sys

from tests.conftest import ROOT
from tests.neuron.captures import load


def _prepared(env: dict, *args: str) -> dict:
    code = ("import json, os, sys; from backend.hardware import env as device_env; "
            f"device_env.prepare_environment(sys.argv[1], {args[0] if args else '1800.0'}); "
            "print(json.dumps({k: os.environ.get(k) for k in ('TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT', 'PATH')}))")
    out = subprocess.run([sys.executable, "-c", code, str(env.pop("_root"))], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json

    return json.loads(out.stdout)


def test_the_lock_timeout_is_at_least_the_compile_allowance_unless_the_user_set_it(tmp_path):
    default = load("torchneuron/neff_cache.json")["lock_timeout_default_seconds"]  # TorchNeuron's 1200
    base = {k: v for k, v in os.environ.items() if k != "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"}
    assert _prepared({**base, "_root": tmp_path}, "3600.5")["TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"] == "3601"
    assert _prepared({**base, "_root": tmp_path}, "60")["TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"] == str(default)
    mine = {**base, "_root": tmp_path, "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT": "99"}
    assert _prepared(mine, "3600")["TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"] == "99"


def test_an_app_started_by_its_interpreters_path_finds_the_venvs_compiler(tmp_path):
    """As systemd would start it: PATH without the venv's bin/."""
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    path = _prepared({**env, "PATH": "/usr/bin:/bin", "_root": tmp_path})["PATH"].split(os.pathsep)
    assert path[0] == os.path.dirname(os.path.abspath(sys.executable)) and path[1:] == ["/usr/bin", "/bin"]
