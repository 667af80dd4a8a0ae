"""Helpers for end-to-end UI checks: Debian's Chromium driven by Playwright (the app process itself
comes from ``tools.app_process``).

Used by the browser tests and by ``python -m tests.ui.screenshot`` (the README's screenshot).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Debian's chromium, wherever PATH finds it (NEURON_STUDIO_CHROMIUM overrides).
CHROMIUM = (os.environ.get("NEURON_STUDIO_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
            or "/usr/bin/chromium")
# Under CI a missing browser is a failure, never a skip (.ci/run installs chromium and sets CI=true).
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextlib.contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def choose_mode(page, label: str) -> None:
    page.click("#mode input")
    page.get_by_role("option", name=label, exact=True).click()


def choose_preset(page, label: str) -> None:
    page.click("#preset input")
    page.get_by_role("option", name=label, exact=True).click()


def badge_state(page, shape: str) -> str:
    return page.get_attribute(f'#badges .ns-badge[data-shape="{shape}"]', "data-state")
