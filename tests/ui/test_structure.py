"""The ui package's shape, which a newcomer reads before any code: small modules, each owning one part
(a tab's handlers or views, the layout, the wiring, serving), imports that only go down, and Gradio's
queue internals in one adapter."""

import ast
from pathlib import Path

UI = Path(__file__).resolve().parents[2] / "ui"
MODULES = {f"ui.{path.stem}": path for path in UI.glob("*.py") if path.stem != "__init__"}


def test_each_ui_module_says_what_it_owns():
    """(Sizes and import cycles, for every package: ``tests/backend/test_layout.py``.)"""
    for name, path in MODULES.items():
        assert ast.get_docstring(ast.parse(path.read_text())), name


def test_only_the_adapter_touches_gradios_queue():
    for name, path in MODULES.items():
        if name == "ui.gradio_queue":
            continue
        touched = [node.lineno for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Attribute) and node.attr == "_queue"]
        assert not touched, f"{name} line {touched}: Gradio's queue internals belong in ui/gradio_queue.py"
