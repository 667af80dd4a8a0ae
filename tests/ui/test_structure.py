"""The ui package's shape, which a newcomer reads before any code: small modules, each owning one part
(a tab's handlers or views, the layout, the wiring, serving), imports that only go down, and Gradio
through its public API only."""

import ast
from pathlib import Path

UI = Path(__file__).resolve().parents[2] / "ui"
MODULES = {f"ui.{path.stem}": path for path in UI.glob("*.py") if path.stem != "__init__"}


def test_each_ui_module_says_what_it_owns():
    """(Sizes and import cycles, for every package: ``tests/backend/test_layout.py``.)"""
    for name, path in MODULES.items():
        assert ast.get_docstring(ast.parse(path.read_text())), name


def test_no_module_touches_a_private_attribute_of_gradio():
    """Issue 51 (6): Gradio is used through its public API only. The private names of the Gradio
    objects the app holds (Blocks, its queue, its server app, a request, components) appear as no
    attribute in the app's code."""
    import gradio as gr
    from gradio import queueing, routes

    private = {name for cls in (gr.Blocks(), queueing.Queue, routes.App, gr.Request, gr.Textbox, gr.Number,
                                gr.File, gr.Image, gr.Progress)
               for name in dir(cls) if name.startswith("_") and not name.endswith("__")}
    root = UI.parent
    files = [root / "app.py", *sorted((root / "ui").glob("*.py")), *sorted((root / "web").glob("*.py"))]
    for path in files:
        touched = sorted({(node.lineno, node.attr) for node in ast.walk(ast.parse(path.read_text()))
                          if isinstance(node, ast.Attribute) and node.attr in private})
        assert not touched, f"{path.relative_to(root)}: Gradio's private {touched}"
