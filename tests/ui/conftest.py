"""Fixtures for the page's handler tests: ``Studio`` over the real ``Manager``, with the fakes of
``tests/ui/fake_engines.py`` behind its engine seam (no model run, no worker process). The real app
process the API, browser and hardening tests share is ``tests.conftest.launched_app``."""

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
