"""The layout rules the architecture rests on: the backend never reaches gradio, the UI never torch."""

import subprocess
import sys

from tests.conftest import ROOT

IMPORT_ALL = """
import importlib, pkgutil, sys
import {package}
for info in pkgutil.walk_packages({package}.__path__, "{package}."):
    importlib.import_module(info.name)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("gradio", "torch", "embedded")))
"""


def _imported(package: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", IMPORT_ALL.format(package=package)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return eval(proc.stdout.strip().splitlines()[-1])  # a printed list of module names


def test_importing_every_backend_module_imports_no_gradio_and_no_training_code():
    modules = _imported("backend")
    assert "torch" in modules  # the walk did reach the device layer
    assert not [m for m in modules if m.split(".")[0] == "gradio"]
    # The serving code takes the embedded models' folders (and, lazily, their builder), never how they were trained.
    assert not {"embedded.training", "embedded.components", "embedded.recipe"} & set(modules), modules


def test_no_embedded_module_is_over_400_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "embedded").glob("*.py")}
    assert sizes and max(sizes.values()) <= 400, sizes


def test_importing_every_ui_module_imports_no_torch():
    modules = _imported("ui")
    assert "gradio" in modules
    assert not [m for m in modules if m.split(".")[0] == "torch"]
