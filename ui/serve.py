"""``python app.py`` (serve): the page first, within seconds, then the model stack in the background."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading

from backend.settings import Settings

EXIT_BAD_INPUT = 2


def own_temp_dir() -> str | None:
    """Gradio's copies of images and uploads (and exported bundles) go to a private folder (0700)
    of the app's own, which the caller removes at exit; one given in GRADIO_TEMP_DIR is the user's
    (None: nothing made). Made before Gradio is imported: several of its modules read the variable
    at import, and would otherwise write to /tmp/gradio."""
    if os.environ.get("GRADIO_TEMP_DIR"):
        return None
    made = os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix="neuron-studio-gradio-")
    return made


def serve(settings: Settings) -> int:
    temp_dir = own_temp_dir()
    try:
        return _serve(settings)
    finally:
        if temp_dir:  # app.py leaves with os._exit, so no atexit hook would run
            shutil.rmtree(temp_dir, ignore_errors=True)


def _serve(settings: Settings) -> int:
    from backend.manager import Manager
    from ui.app import launch

    manager = Manager(settings)
    try:
        demo = launch(manager, settings, block=False)  # the page first, within seconds
    except ValueError as exc:  # a bad --auth
        print(f"app.py: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    manager.start(background=True)  # then the model stack, in the background; status shows it
    # SIGTERM and Ctrl-C end the app the same way: the running generation is cancelled at its next
    # step, the worker group is stopped (no process outlives the app), then the web server exits
    # without waiting for open browser connections — within a few seconds in every mode.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(0.2) and demo.is_running:
            pass
    finally:
        # A compile in progress cannot be interrupted: the process exit ends it (nothing is half
        # written: PNGs are renamed into place whole).
        manager.close(wait=1.0)
        if demo.server is not None:
            demo.server.force_exit = True  # uvicorn: do not wait for connections to close
        demo.close(verbose=False)
    return 0
