"""Shared fixtures. The environment is fixed here, before any test imports torch or gradio."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # (the code is an installed package: pyproject.toml)

_CACHE = tempfile.mkdtemp(prefix="neuron-studio-test-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)  # the suite leaves nothing in /tmp
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["NEURON_STUDIO_CACHE_DIR"] = _CACHE
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE, "inductor")
# What the first in-process Manager's prepare_environment would set for the whole process (the app
# takes these variables over --cache-dir): set here, a module run alone shares the suite's NEFF cache as
# in a full run, and no child recreates it inside another test's removed folder.
os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(_CACHE, "neff")
os.environ["TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"] = os.path.join(_CACHE, "neff-local")
os.environ.setdefault("GRADIO_TEMP_DIR", os.path.join(_CACHE, "gradio"))  # what the handlers write
# Most tests need the pipeline's shapes and timings, not its pictures: the random-weight model. The
# tests of the trained default ("embedded") name it.
os.environ["NEURON_STUDIO_MODEL"] = "embedded-random"

import pytest  # noqa: E402

from backend.settings import EMBEDDED_RANDOM_MODEL, Settings  # noqa: E402


def make_settings(tmp_path: Path | None = None, **overrides) -> Settings:
    """Test settings: the random-weight tiny model on the CPU, fp32, the fast aot_eager compile backend,
    a private cache and output dir."""
    base = dict(model=EMBEDDED_RANDOM_MODEL, device="cpu", dtype="float32", compile_backend="aot_eager",
                cache_dir=Path(_CACHE),
                output_dir=(tmp_path or Path(_CACHE)) / "outputs")
    base.update(overrides)
    return Settings(**base)


@pytest.fixture
def settings(tmp_path):
    return make_settings(tmp_path)


@pytest.fixture
def manager(tmp_path):
    from backend.serving.manager import Manager

    mgr = Manager(make_settings(tmp_path))
    mgr.start()
    own_compile_history(mgr, tmp_path)
    yield mgr
    mgr.close()


def own_compile_history(manager, tmp_path: Path) -> None:
    """The manager's compile history from a file of this test's own: the suite's cache folder is
    shared, and what one test compiled would be another's estimate."""
    manager.table.history.open(tmp_path / "compile-history.json", "test")


@contextlib.contextmanager
def beside(request, starts: dict[str, Callable[[], subprocess.Popen]]):
    """For a module-scoped fixture: when the module starts, start the process each of its selected
    tests will read ({test name: a function returning the Popen}); yields {test name: Popen}. A
    subprocess works one core mostly (imports, one process's loop), so the module's other tests use
    the other core meanwhile: nothing timed is started so. Those still running at the end are killed."""
    wanted = {item.name for item in request.session.items if item.module is request.module}
    started = {name: start() for name, start in starts.items() if name in wanted}
    try:
        yield started
    finally:
        for proc in started.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


# Inductor's own cache entries as a real compile wrote them (tests/captures/inductor_cache_tree.txt):
# what "Clear compile cache" recognises and removes; anything else in the folder is a user's.
INDUCTOR_GRAPH = ("fxgraph/a7/fa7lpgotpuddcmkfmmuaswn5ur2nagb4ofwukojqjaq4laqexsbg/"
                  "ulq5tkt4tknoy7t4ble5gz3fh3khcltyv4gyza3mbu42n5altkf")
INDUCTOR_LOCK = "locks/c244b2rga7kqcbbf2xhybporem2yeo55qusvywqyipbcdmkdmkrr.lock"


def plant_inductor_entry(cache_dir: Path, size: int, relative: str = INDUCTOR_GRAPH) -> Path:
    """A compile-cache entry of ``size`` bytes under ``cache_dir``, named as inductor names it."""
    path = Path(cache_dir) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


ROOM_KEY = "room-key-0123456789abcdef"  # the launched app's one Images API key
LAUNCHED_KEEP = 3  # its --keep-outputs


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET, an HTTP error's included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


@pytest.fixture
def own_tempdir(tmp_path, monkeypatch):
    """gradio_client downloads each file into a new folder under ``tempfile.gettempdir()`` and leaves the
    folder behind, empty (``_download_file`` in gradio_client/client.py): a test that downloads through
    it keeps them in its own folder, which pytest removes."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(scope="session")
def launched_app(tmp_path_factory):
    """One real app process for the hardening, API and browser tests (tests/test_hardening.py,
    tests/ui/test_api.py, test_browser.py): the random-weight model, aot_eager, an API key,
    ``--prewarm 64x64`` and ``--keep-outputs LAUNCHED_KEEP``; started once (each start imports gradio
    and the model stack: ~15 s on two cores). Yields (url, workdir, the /readyz answers from the
    page's first minute until 200). The tests that share it leave the app as they found it (lock
    off, group stopped), or assert only on what they made themselves."""
    from tools.app_process import running_app

    workdir = tmp_path_factory.mktemp("app")
    (workdir / "keys").write_text(f"# the room's key\nroom:{ROOM_KEY}\n")
    with running_app(workdir, "--compile-backend", "aot_eager", "--api-keys", str(workdir / "keys"),
                     "--prewarm", "64x64", "--keep-outputs", str(LAUNCHED_KEEP), ready=False, timeout=240) as url:
        answers = []
        deadline = time.monotonic() + 240
        while not answers or answers[-1][0] != 200:  # wait for the state, however long the load takes
            assert time.monotonic() < deadline, answers[-3:]
            answers.append(http_get(url + "readyz"))
            time.sleep(0.1)
        yield url, workdir, answers
