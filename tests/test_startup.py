"""Serving the page needs none of the model stack: the page answers its first request before
torch, diffusers, transformers or the embedded model's scene code is imported (they load with the
model, after the page; ``python -m bench --only P6`` measures what that start costs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

# What server.serve does before it starts the model load (Manager, then launch), then one request.
PROBE = textwrap.dedent("""
    import json, os, socket, sys, tempfile, urllib.request
    from backend.settings import Settings
    from backend.serving.manager import Manager
    from server import launch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp()
    settings = Settings(model=sys.argv[1], cache_dir=tmp + "/cache", output_dir=tmp + "/out", port=port)
    served = launch(Manager(settings), settings)
    page = urllib.request.urlopen(f"http://127.0.0.1:{served.port}/", timeout=60)
    print(json.dumps({"status": page.status, "modules": sorted(sys.modules)}))
    sys.stdout.flush()
    os._exit(0)
""")
HEAVY = ("torch", "diffusers", "transformers", "safetensors", "accelerate")
# (backend.engines.base, the engines' contract, is light: the manager holds its engines by it.)
MODEL_CODE = ("embedded.scenes", "embedded.grammar", "embedded.recipe", "embedded.training",
              "backend.engines.in_process", "backend.launch.group", "backend.engines.replicas",
              "backend.engines.tensor_parallel", "backend.hardware.device", "backend.workers.worker")


@pytest.fixture(scope="module")
def started():
    proc = subprocess.run([sys.executable, "-c", PROBE, "embedded"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ, "GRADIO_ANALYTICS_ENABLED": "False"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_page_answers_before_the_model_stack_is_imported(started):
    out = started
    assert out["status"] == 200
    loaded = [m for m in out["modules"] if m.split(".")[0] in HEAVY or m in HEAVY
              or any(m == c or m.startswith(c + ".") for c in MODEL_CODE)]
    assert loaded == [], loaded
    assert "embedded.words" in out["modules"]  # what the page says the model understands: the words alone


def test_the_next_start_removes_what_a_killed_run_left_in_tmp_and_nothing_else(tmp_path):
    """A SIGKILLed app cannot remove its Gradio temp folder; the next start does — only folders of
    this app's runs whose process is gone."""
    from ui.temp_dir import TEMP_PREFIX, remove_dead_runs_folders

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"{TEMP_PREFIX}{dead.pid}-abc123"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "upload.png").write_bytes(b"x")
    live = tmp_path / f"{TEMP_PREFIX}{os.getpid()}-def456"
    live.mkdir()
    others = [tmp_path / "neuron-studio-gradio-abcdef", tmp_path / "gradio", tmp_path / f"{TEMP_PREFIX}notapid-x"]
    for other in others:
        other.mkdir()
    assert remove_dead_runs_folders(str(tmp_path)) == [str(left)]
    assert not left.exists() and live.is_dir() and all(o.is_dir() for o in others)
