"""Make the README's screenshots with the browser-test tooling: `python -m tests.ui.screenshot`
(`python -m tests.ui.screenshot assets edit`: only edit.png; `... assets tr`: only studio-tr.png).

Starts the app (the trained embedded model, aot_eager), generates the page's first example prompt
in compiled and eager mode at three of the model's presets (its own, from its card) so that the
shape table and the plots have something to show, and writes PNGs under assets/: what a laptop
screen shows (1280x800, no scrolling) of each tab, a compile in progress with its estimate, a
refused click, the Studio tab as a Turkish browser sees it (studio-tr.png), and an edit from a
reference image with two images per prompt (edit.png). `python -m tests.ui.screenshot assets neuron`:
the System tab of the app on the neuron stand-in (system-neuron.png: the chip panel, the core plan,
each shape's attention path). `python -m tests.ui.screenshot assets ray`: the System tab of the app
serving from a local Ray cluster (system-ray.png: the nodes, the Serve replicas, the queue).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

from tests.ui.browser import ROOT, choose_mode, choose_preset, chromium
from tools.app_process import operator_token, running_app
from ui.views_common import load_example_prompts

LAPTOP = {"width": 1280, "height": 800}  # a presenter's screen: what shows without scrolling
# The page's first example prompt, as a person writes it (the model reads it in its grammar).
PROMPT = load_example_prompts(ROOT / "assets" / "prompts.txt")[0]
EDIT_PROMPT = "make the red circle blue"


def _size(page, width: int, height: int) -> None:
    page.fill("#width input", str(width))
    page.fill("#height input", str(height))
    page.press("#height input", "Tab")


def _shoot(page, path: Path, down_to: str | None = None) -> None:
    """What the screen shows with the page at its top (a click may have scrolled it); with
    ``down_to``, the page from its top to the bottom of that element, however tall."""
    page.evaluate("window.scrollTo(0, 0)")
    page.evaluate("document.querySelectorAll('.toast-close').forEach(b => b.click())")  # an earlier step's notice
    page.wait_for_timeout(300)
    if down_to is None:
        page.screenshot(path=str(path))
        return
    # images below the fold load lazily: bring the element into view until its images have loaded
    page.locator(down_to).scroll_into_view_if_needed()
    page.wait_for_function(f"[...document.querySelectorAll('{down_to} img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)",
                           timeout=15000)
    page.evaluate("window.scrollTo(0, 0)")
    box = page.locator(down_to).bounding_box()
    page.screenshot(path=str(path), full_page=True,
                    clip={"x": 0, "y": 0, "width": LAPTOP["width"], "height": box["y"] + box["height"] + 16})


def _generate(page, runs: int) -> None:
    for _ in range(runs):
        count = page.locator("#history img").count()
        page.click("#generate")
        page.wait_for_function(f"document.querySelectorAll('#history img').length > {count}", timeout=120000)


def make_screenshots(out_dir: Path, only: str | None = None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    if only == "neuron":
        return [_system_on_standin(out_dir / "system-neuron.png")]
    if only == "ray":
        return [_system_on_ray(out_dir / "system-ray.png")]
    written = []
    with tempfile.TemporaryDirectory() as tmp, running_app(Path(tmp), "--compile-backend", "aot_eager") as url, \
            chromium() as browser:
        if only == "edit":
            return [_edit(browser, url, Path(tmp), out_dir / "edit.png")]
        if only == "tr":  # the Turkish Studio tab alone: once to compile its shape, once warm
            return [_turkish_studio(browser, url, out_dir / "studio-tr.png") for _ in range(2)][-1:]
        page = browser.new_page(locale="en-US", viewport=LAPTOP)
        page.goto(url + "operator?token=" + operator_token(Path(tmp)))  # the operator's page: every control
        page.wait_for_selector("#badges .ns-badge", timeout=30000)
        page.fill("#prompt textarea", PROMPT)
        # A first compile, caught while it runs: the bar says how long so far and what to expect.
        choose_mode(page, "compiled (whole transformer)")
        choose_preset(page, "9:21 · 160x384")
        page.wait_for_function("document.querySelector('#cost').innerText.includes('160x384')", timeout=30000)
        page.click("#generate")
        page.wait_for_function("document.body.innerText.includes('compiling')", timeout=60000)
        written.append(out_dir / "compiling.png")
        _shoot(page, written[-1])
        page.wait_for_function("document.querySelectorAll('#history img').length > 0", timeout=120000)
        # The model's presets; compiled and eager at each, so the plots have points.
        for mode in ("compiled (whole transformer)", "eager"):
            choose_mode(page, mode)
            for label in ("16:9 · 336x192", "3:4 · 224x288"):
                choose_preset(page, label)
                _generate(page, 2 if mode.startswith("compiled") else 1)
        choose_mode(page, "eager")
        choose_preset(page, "1:1 · 256x256")
        _generate(page, 1)
        choose_mode(page, "compiled (whole transformer)")
        _generate(page, 2)
        page.wait_for_timeout(1500)
        written.append(out_dir / "studio.png")
        _shoot(page, written[-1])
        # A refused click: a calm notice, the last image and gallery kept.
        page.fill("#prompt textarea", "")
        page.click("#generate")
        page.wait_for_function("document.querySelector('#run-info').innerText.includes('Not run')", timeout=30000)
        page.wait_for_timeout(500)
        written.append(out_dir / "refusal.png")
        _shoot(page, written[-1])
        page.fill("#prompt textarea", PROMPT)
        page.get_by_role("tab", name="Compare").click()
        page.click("#compare-run")
        page.wait_for_function("document.querySelectorAll('#compare-gallery img').length >= 2", timeout=120000)
        page.wait_for_timeout(1000)
        written.append(out_dir / "compare.png")
        _shoot(page, written[-1])
        for tab, name in (("System", "system.png"), ("Performance", "performance.png")):
            page.get_by_role("tab", name=tab).click()
            page.wait_for_timeout(2500)
            written.append(out_dir / name)
            _shoot(page, written[-1])
        written.append(_turkish_studio(browser, url, out_dir / "studio-tr.png"))
        written.append(_turkish_system(browser, url + "operator?token=" + operator_token(Path(tmp)),
                                       out_dir / "system-tr.png"))
        written.append(_edit(browser, url, Path(tmp), out_dir / "edit.png"))
    return written


def _edit(browser, url: str, tmp: Path, path: Path) -> Path:
    """An edit (docs/editing.md): one reference in the Edit area (a scene of the embedded model's
    grammar, drawn at a size the fit crops to the 4:3 preset), an edit the model learned, at that
    preset, two images per prompt, the cost line pricing the whole signature and the run line saying
    how the reference was fitted; the page down to the Edit area, so that both show."""
    from PIL import Image

    from embedded import scenes

    reference = tmp / "reference.png"
    scene = scenes.parse_caption("a red circle on the left, on a white background")
    Image.fromarray(scenes.render(scene, 240, 320)).save(reference)
    page = browser.new_page(locale="en-US", viewport=LAPTOP)
    page.goto(url)
    page.wait_for_selector("#badges .ns-badge", timeout=30000)
    page.fill("#prompt textarea", EDIT_PROMPT)
    choose_preset(page, "4:3 · 288x224")  # the output at the reference's fitted size
    page.click("#edit .label-wrap")
    page.set_input_files("#references input[type=file]", str(reference))
    page.fill("#count input", "2")
    page.press("#count input", "Tab")
    page.wait_for_function("document.querySelector('#cost').innerText.includes('288x224*2+ref')", timeout=30000)
    _generate(page, 1)
    page.wait_for_timeout(1000)
    _shoot(page, path, down_to="#edit")
    page.close()
    return path


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _system_on_standin(path: Path) -> Path:
    """The operator's System tab with the app on the CPU-backed neuron stand-in (tests/standin), after
    eager runs at a preset and at a size whose attention takes the fast path: what the chip panel,
    the NeuronCore plan and the shapes table's attention column show."""
    from tests.neuron.standin import standin_env

    with tempfile.TemporaryDirectory() as tmp, _environment(standin_env(Path(tmp) / "state")), \
            running_app(Path(tmp), "--device", "neuron", "--dtype", "float32", "--mode", "eager",
                        "--cache-dir", str(Path(tmp) / "cache"), timeout=300) as url, chromium() as browser:
        page = browser.new_page(locale="en-US", viewport=LAPTOP)
        page.goto(url + "operator?token=" + operator_token(Path(tmp)))
        page.wait_for_selector("#badges .ns-badge", timeout=60000)
        page.fill("#prompt textarea", PROMPT)
        choose_preset(page, "1:1 · 256x256")
        _generate(page, 1)
        _size(page, 512, 256)
        _generate(page, 1)
        page.get_by_role("tab", name="System").click()
        page.wait_for_function("document.body.innerText.includes('slow: ')", timeout=60000)
        page.wait_for_timeout(6000)  # the stand-in's neuron-monitor reports every few seconds
        _shoot(page, path, down_to="#shapes-table")
        page.close()
    return path


def _system_on_ray(path: Path) -> Path:
    """The operator's System tab with the app serving from a local Ray cluster (``--ray``, docs/replicas.md):
    a head and two worker nodes declaring one NeuronCore each, every node its own simulated trn2 (the
    TorchNeuron stand-in, as tests/backend/test_ray_serve.py), two Serve replicas warm at 256x256 and a
    run; the screen scrolled down to the cluster's tables. Prints the operator's ``status().ray`` as JSON
    (tests/standin/captures/ray/status_ray.json is one)."""
    import json

    from gradio_client import Client
    from ray.cluster_utils import Cluster

    from backend.serving.roles import COOKIE
    from tests.neuron.standin import add_ray_node

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            for name in ("a", "b"):
                add_ray_node(cluster, root / name, NEURON_STUDIO_CACHE_DIR=str(root / f"{name}-cache"))
            with running_app(root, "--ray", cluster.address, "--ray-replicas", "2", "--ray-max-replicas", "2",
                             "--dtype", "float32", "--mode", "eager", "--prewarm", "256x256",
                             "--cache-dir", str(root / "cache"), timeout=600) as url, chromium() as browser:
                page = browser.new_page(locale="en-US", viewport=LAPTOP)
                page.goto(url + "operator?token=" + operator_token(root))
                page.wait_for_selector("#badges .ns-badge", timeout=60000)
                page.fill("#prompt textarea", PROMPT)
                choose_preset(page, "1:1 · 256x256")
                _generate(page, 1)
                page.get_by_role("tab", name="System").click()
                page.wait_for_function("document.querySelector('#ray-info').innerText.includes('2 of 2 replicas')",
                                       timeout=60000)
                page.wait_for_timeout(2500)
                # What the screen shows scrolled down to the cluster's tables.
                page.evaluate("window.scrollTo(0, document.querySelector('#ray-info').getBoundingClientRect().top"
                              " + window.scrollY - 24)")
                page.wait_for_timeout(300)
                page.screenshot(path=str(path))
                cookie = next(c["value"] for c in page.context.cookies() if c["name"] == COOKIE)
                status = Client(url, verbose=False,
                                headers={"Cookie": f"{COOKIE}={cookie}"}).predict(api_name="/status")
                print(json.dumps(status["ray"], indent=1))
                page.close()
        finally:
            cluster.shutdown()
    return path


def _turkish_studio(browser, url: str, path: Path) -> Path:
    """The Studio tab as a Turkish browser sees it, after one run of a shape that is already warm:
    the Turkish example prompts, the first in the prompt box (the embedded grammar reads Turkish words)."""
    page = browser.new_page(locale="tr-TR", viewport=LAPTOP)
    page.goto(url)
    page.wait_for_selector("#badges .ns-badge", timeout=30000)
    page.wait_for_function("document.querySelector('#prompt textarea').value.includes('kırmızı')", timeout=30000)
    choose_mode(page, "derlenmiş (tüm transformer)")
    _size(page, 256, 256)
    _generate(page, 1)
    page.wait_for_function("document.querySelector('#cost').innerText.startsWith('Hazır')", timeout=30000)
    _shoot(page, path)
    page.close()
    return path


def _turkish_system(browser, operator_url: str, path: Path) -> Path:
    """The operator's System tab as a Turkish browser sees it: the shapes table, the warm-up, the
    tensor-parallel and replica panels with their buttons."""
    page = browser.new_page(locale="tr-TR", viewport=LAPTOP)
    page.goto(operator_url)
    page.wait_for_selector("#badges .ns-badge", timeout=30000)
    page.get_by_role("tab", name="Sistem").click()
    page.wait_for_timeout(2500)
    _shoot(page, path, down_to="#replica-info")
    page.close()
    return path


if __name__ == "__main__":
    for path in make_screenshots(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets",
                                 sys.argv[2] if len(sys.argv) > 2 else None):
        print(path)
