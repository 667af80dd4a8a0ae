"""Fixtures for the page's handler tests: a Studio over the fake manager (tests/ui/fake_manager.py)."""

import pytest

from tests.ui.fake_manager import FakeManager
from ui.handlers import Studio


@pytest.fixture
def fake(tmp_path):
    return FakeManager(tmp_path)


@pytest.fixture
def studio(fake):
    return Studio(fake)
