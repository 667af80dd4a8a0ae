"""Make the README's screenshots with the browser-test tooling: `python -m tests.ui.screenshot`.

Starts the app (embedded model, aot_eager), generates in compiled mode at two presets so badges,
the shape table and the plots have something to show, and writes PNGs under assets/ (the Studio
tab once more as a Turkish browser sees it: studio-tr.png).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.ui.browser import ROOT, choose_mode, chromium
from tools.app_process import running_app


def _generate(page, preset: str, runs: int) -> None:
    page.get_by_label(preset).check()
    for _ in range(runs):
        count = page.locator("#history img").count()
        page.click("#generate")
        page.wait_for_function(f"document.querySelectorAll('#history img').length > {count}", timeout=120000)


def make_screenshots(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp, running_app(Path(tmp), "--compile-backend", "aot_eager") as url, \
            chromium() as browser:
        page = browser.new_page(locale="en-US", viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_selector("#badges .ns-badge", timeout=30000)
        page.fill("#prompt textarea", "a red fox in fresh snow, golden hour")
        choose_mode(page, "compiled (whole transformer)")
        _generate(page, "3:2 · 1216x832", 2)
        _generate(page, "1:1 · 1024x1024", 2)
        choose_mode(page, "eager")
        _generate(page, "1:1 · 1024x1024", 1)
        _generate(page, "3:2 · 1216x832", 1)
        for mode in ("eager", "compiled (whole transformer)"):  # a small custom size spreads the plot
            choose_mode(page, mode)
            page.fill("#width input", "512")
            page.fill("#height input", "512")
            page.press("#height input", "Tab")
            count = page.locator("#history img").count()
            for _ in range(2):
                page.click("#generate")
                count += 1
                page.wait_for_function(f"document.querySelectorAll('#history img').length >= {count}",
                                       timeout=120000)
        choose_mode(page, "compiled (whole transformer)")
        page.get_by_label("16:9 · 1344x768").check()
        page.wait_for_timeout(1500)
        written.append(out_dir / "studio.png")
        page.screenshot(path=str(written[-1]), full_page=True)
        for tab, name in (("System", "system.png"), ("Performance", "performance.png")):
            page.get_by_role("tab", name=tab).click()
            page.wait_for_timeout(2500)
            written.append(out_dir / name)
            page.screenshot(path=str(written[-1]), full_page=True)
        written.append(_turkish_studio(browser, url, out_dir / "studio-tr.png"))
    return written


def _turkish_studio(browser, url: str, path: Path) -> Path:
    """The Studio tab as a Turkish browser sees it, after one run of a shape that is already warm."""
    page = browser.new_page(locale="tr-TR", viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_selector("#badges .ns-badge", timeout=30000)
    page.fill("#prompt textarea", "taze karda kızıl bir tilki, altın saat")
    choose_mode(page, "derlenmiş (tüm transformer)")
    _generate(page, "3:2 · 1216x832", 1)
    page.wait_for_function("document.querySelector('#cost').innerText.startsWith('Hazır')", timeout=30000)
    page.screenshot(path=str(path), full_page=True)
    page.close()
    return path


if __name__ == "__main__":
    for path in make_screenshots(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets"):
        print(path)
