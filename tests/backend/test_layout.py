"""The layout rules the architecture rests on: the backend never reaches gradio, the UI never torch;
no class spans files and no mixin reads another's private state; imports never go round in a circle."""

import ast
import subprocess
import sys
from pathlib import Path

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


def test_no_backend_module_imports_the_embedded_models():
    """Issue 51 (9): the serving code asks for models and prompt readers by name through entry points
    (``backend.models.plugins``); the embedded package is one provider, never imported by it."""
    modules = _modules()
    importing = {name: sorted(m for m in _imports(path, modules) if m.split(".")[0] == "embedded")
                 for name, path in modules.items() if name.split(".")[0] == "backend"}
    assert {name: found for name, found in importing.items() if found} == {}


def test_importing_every_backend_module_imports_no_gradio_and_no_training_code():
    modules = _imported("backend")
    assert "torch" in modules  # the walk did reach the device layer
    assert not [m for m in modules if m.split(".")[0] == "gradio"]
    # The serving code takes the embedded models' folders (and, lazily, their builder), never how they were trained.
    assert not {"embedded.training", "embedded.components", "embedded.recipe"} & set(modules), modules


PROJECT = ("app.py", "server.py", "backend", "ui", "web", "embedded", "bench", "tools")  # the code outside tests/


def _modules() -> dict[str, Path]:
    """Every module of the project by its dotted name (a package by its own name)."""
    found = {}
    for top in PROJECT:
        for path in ([ROOT / top] if top.endswith(".py") else sorted((ROOT / top).rglob("*.py"))):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path, modules: dict) -> set[str]:
    """The project modules ``path`` imports, anywhere in the file (a function's import counts: it
    is an arrow all the same). ``from a import b`` is an arrow to ``a.b`` when that is a module,
    else to ``a``."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def _classes() -> dict[str, tuple[str, ast.ClassDef]]:
    """Every class of the project by its dotted name: (its module, its definition)."""
    found = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found[f"{name}.{node.name}"] = (name, node)
    return found


def _private_use(node: ast.ClassDef) -> tuple[set[str], set[str]]:
    """(the private names a class sets or defines, the private names it reads) on ``self``."""
    own = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    own |= {t.id for n in node.body if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    read = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self" \
                and sub.attr.startswith("_") and not sub.attr.startswith("__"):
            (own if isinstance(sub.ctx, ast.Store) else read).add(sub.attr)
    return own, read


def test_no_class_spans_files_and_no_mixin_reads_anothers_private_state():
    """A class is as long as its one job needs (the 400-line cap split classes into mixins that read
    each other's state): its parts are objects it holds, not base classes in other files; and no
    class reads a private name of ``self`` that neither it nor its bases set (a mixin reading its
    host's state)."""
    classes = _classes()
    by_short: dict[str, list[str]] = {}
    for dotted in classes:
        by_short.setdefault(dotted.rsplit(".", 1)[1], []).append(dotted)
    spanning, foreign = set(), {}
    for dotted, (module, node) in classes.items():
        own, read = _private_use(node)
        stack, seen = [ast.unparse(b).split(".")[-1] for b in node.bases], set()
        while stack:
            base = stack.pop()
            for base_dotted in by_short.get(base, []):
                if base_dotted in seen:
                    continue
                seen.add(base_dotted)
                base_module, base_node = classes[base_dotted]
                if base_module != module and base in [ast.unparse(b).split(".")[-1] for b in node.bases]:
                    spanning.add(dotted)
                own |= _private_use(base_node)[0]
                stack += [ast.unparse(b).split(".")[-1] for b in base_node.bases]
        if read - own:
            foreign[dotted] = sorted(read - own)
    assert len(classes) > 100  # the walk found the project
    assert not foreign, foreign
    assert not spanning, spanning


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in list(graph):
        if name not in index:
            visit(name)
    return cycles


def test_no_import_cycle_between_modules():
    """Arrows only go down: no module reaches, through any chain of imports, back to itself. A
    package's ``__init__`` counts as the package."""
    modules = _modules()
    assert _cycles({name: _imports(path, modules) - {name} for name, path in modules.items()}) == []


def _package(name: str, modules: dict) -> str:
    """A module's package: ``backend.<folder>`` inside the backend (its top-level modules — settings,
    errors, shapes, cli — each their own), else the top-level package."""
    parts = name.split(".")
    if parts[0] == "backend" and (len(parts) > 2 or modules[name].name == "__init__.py"):
        return ".".join(parts[:2])
    return name if parts[0] == "backend" else parts[0]


def test_no_import_cycle_between_packages():
    """The folders are the architecture: ``ui`` over ``backend``; inside it, e.g. ``serving`` over
    ``engines`` over ``launch``, ``workers`` (the ranks) over ``engines``, all over ``hardware``,
    ``request``, ``settings``. No folder imports one that imports it back."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph.setdefault(_package(name, modules), set()).update(
            _package(d, modules) for d in _imports(path, modules))
    assert _cycles({p: deps - {p} for p, deps in graph.items()}) == []


def test_importing_every_ui_module_imports_no_torch():
    modules = _imported("ui")
    assert "gradio" in modules
    assert not [m for m in modules if m.split(".")[0] == "torch"]


def test_importing_every_web_module_imports_neither_gradio_nor_torch():
    """The server's doors run before Gradio's routes and answer probes while the model loads."""
    modules = _imported("web")
    assert not [m for m in modules if m.split(".")[0] in ("gradio", "torch")], modules
