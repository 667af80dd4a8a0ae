"""Fixtures for the page's handler tests: ``Studio`` over the real ``Manager``, with the fakes of
``tests/ui/fake_engines.py`` behind its engine seam (no model run, no worker process); and the one
real app process the API and browser tests share (``launched_app``)."""

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.ui.fake_engines import start_manager
from ui.handlers import Studio


@pytest.fixture
def started(tmp_path, monkeypatch):
    """(manager, launches): the real manager, started; its compile cache folder a fresh one under
    ``tmp_path`` (so clearing it touches no other test's cache)."""
    from backend.hardware import env as device_env

    manager, launches = start_manager(tmp_path)
    inductor = tmp_path / "inductor-cache"
    inductor.mkdir()
    # What prepare_environment recorded at the start, pointed here for this test (restored after).
    monkeypatch.setitem(device_env._prepared, device_env.INDUCTOR_CACHE_VAR, str(inductor))
    yield manager, launches
    manager.close()


@pytest.fixture
def manager(started):
    """The real Manager (shadows tests/conftest.py's, which loads the model for real)."""
    return started[0]


@pytest.fixture
def launches(started):
    """The fake torchrun: every worker group the engines made (``made``), and ``hold``."""
    return started[1]


@pytest.fixture
def engine(manager):
    """The in-process engine: a ``FakeEngine``."""
    return manager.engines["in-process"]


@pytest.fixture
def cache_dir(manager) -> Path:
    """The compile cache folder the manager clears (under tmp_path)."""
    from backend.hardware import env as device_env

    return Path(device_env.prepared_environment()[device_env.INDUCTOR_CACHE_VAR])


@pytest.fixture
def studio(manager):
    return Studio(manager)


ROOM_KEY = "room-key-0123456789abcdef"  # the launched app's one Images API key


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET, an HTTP error's included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


@pytest.fixture(scope="package")
def launched_app(tmp_path_factory):
    """One real app process for the API and browser tests (tests/ui/test_api.py, test_browser.py):
    the random-weight model, aot_eager, an API key and ``--prewarm 64x64``; started once (each start
    imports gradio and the model stack: ~15 s on two cores). Yields (url, workdir, the /readyz
    answers from the page's first minute until 200). The tests that share it leave the app as they
    found it (lock off, group stopped), or assert only on what they made themselves."""
    from tools.app_process import running_app

    workdir = tmp_path_factory.mktemp("app")
    (workdir / "keys").write_text(f"# the room's key\nroom:{ROOM_KEY}\n")
    with running_app(workdir, "--compile-backend", "aot_eager", "--api-keys", str(workdir / "keys"),
                     "--prewarm", "64x64", ready=False, timeout=240) as url:
        answers = []
        deadline = time.monotonic() + 240
        while not answers or answers[-1][0] != 200:  # wait for the state, however long the load takes
            assert time.monotonic() < deadline, answers[-3:]
            answers.append(http_get(url + "readyz"))
            time.sleep(0.1)
        yield url, workdir, answers
