"""The page in a real browser (Debian's Chromium, headless) against a real app process."""

import os

import pytest
from playwright.sync_api import expect

from tests.ui.browser import CHROMIUM, badge_state, choose_mode, chromium, running_app

# .ci/run installs Debian's chromium, so in CI (CI=true) a missing browser fails instead of skipping.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
                                 reason="needs Debian's chromium (apt-get install chromium)")]


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("app"), "--compile-backend", "aot_eager") as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, app_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(app_url)
    page.wait_for_selector("#badges .ns-badge", timeout=30000)
    yield page
    context.close()


def test_type_prompt_pick_preset_generate_and_see_the_image(page):
    page.fill("#prompt textarea", "a lighthouse in a storm")
    page.get_by_label("16:9 · 1344x768").check()
    expect(page.locator("#width input")).to_have_value("1344")
    expect(page.locator("#height input")).to_have_value("768")
    page.click("#generate")
    page.wait_for_selector("#image img", timeout=60000)
    page.wait_for_function("document.querySelector('#run-info').innerText.includes('1344x768')", timeout=30000)
    assert "eager" in page.inner_text("#run-info")
    assert page.locator("#history img").count() >= 1


def test_compiled_badge_goes_from_cold_to_warm(page):
    choose_mode(page, "compiled (whole transformer)")
    page.get_by_label("3:2 · 1216x832").check()
    page.wait_for_function("document.querySelector('#badges .ns-badge[data-shape=\"1216x832\"]')"
                           ".dataset.state === 'cold'", timeout=15000)
    assert "Cold" in page.inner_text("#cost")
    page.fill("#prompt textarea", "a fox")
    page.click("#generate")
    page.wait_for_function("document.querySelector('#badges .ns-badge[data-shape=\"1216x832\"]')"
                           ".dataset.state === 'warm'", timeout=90000)
    page.wait_for_function("document.querySelector('#run-info').innerText.includes('compiled 1 graph')",
                           timeout=30000)
    assert badge_state(page, "1024x1024") == "cold"  # other token counts still need a compile
    assert badge_state(page, "832x1216") == "warm"  # the transpose has the same tokens: same graph


def test_stop_stops_a_running_generation_and_a_second_viewer_sees_it_live(page, browser, app_url):
    viewer = browser.new_page()
    viewer.goto(app_url)
    viewer.wait_for_selector("#badges .ns-badge", timeout=30000)
    page.fill("#prompt textarea", "a long one")
    page.get_by_label("1:1 · 1024x1024").check()
    page.fill("#steps input[type=number]", "50")
    page.press("#steps input[type=number]", "Enter")
    page.click("#generate")
    page.wait_for_function("document.querySelector('#engine-line').innerText.includes('denoising step')",
                           timeout=60000)
    viewer.wait_for_function("document.querySelector('#engine-line').innerText.includes('denoising step')",
                             timeout=15000)  # the other browser's status refreshes on its own
    page.click("#stop")
    page.wait_for_function("document.querySelector('#run-info').innerText.includes('Stopped')", timeout=30000)
    page.wait_for_function("!document.querySelector('#engine-line').innerText.includes('busy')", timeout=15000)
    viewer.close()


def test_a_bad_custom_size_shows_a_clear_error(page):
    page.fill("#prompt textarea", "a fox")
    page.fill("#width input", "1000")
    page.press("#width input", "Tab")
    page.wait_for_function("document.querySelector('#cost').innerText.includes('1008x')", timeout=15000)
    page.click("#generate")
    toast = page.locator(".toast-body").filter(has_text="nearest valid size is 1008x1024")
    toast.first.wait_for(timeout=30000)
    assert "Error" in page.locator(".toast-body").first.inner_text()


def test_tensor_parallel_mode_starts_the_group_shows_it_and_generates(page):
    choose_mode(page, "tensor-parallel (torchrun worker group)")
    page.wait_for_function("document.querySelector('#cost').innerText.includes('Starting')"
                           " || document.querySelector('#cost').innerText.includes('Ready')"
                           " || document.querySelector('#cost').innerText.includes('Cold')", timeout=30000)
    page.get_by_role("tab", name="System").click()
    page.wait_for_function("document.querySelector('#tp-info').innerText.includes('ready')", timeout=90000)
    assert "rank 1/2 starting" in page.input_value("#tp-logs textarea")
    page.get_by_role("tab", name="Studio").click()
    page.fill("#prompt textarea", "a fox")
    page.fill("#width input", "256")
    page.fill("#height input", "256")
    page.press("#height input", "Tab")
    page.click("#generate")
    page.wait_for_function("document.querySelector('#run-info').innerText.includes('256x256')"
                           " && document.querySelector('#run-info').innerText.includes('tp')", timeout=60000)
    choose_mode(page, "eager")
    page.get_by_role("tab", name="System").click()
    page.wait_for_function("document.querySelector('#tp-info').innerText.includes('stopped')", timeout=30000)
