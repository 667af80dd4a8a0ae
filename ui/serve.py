"""``python app.py`` (serve): the page first, within seconds, then the model stack in the background;
``demo``'s warm-up and lock; and the process's end (signals, the running generation, the workers,
Gradio's temp folder: ``ui.temp_dir``). The page itself is ``ui.app``'s."""

from __future__ import annotations

import shutil
import signal
import sys
import threading

from backend.settings import Settings
from ui.temp_dir import own_temp_dir

EXIT_BAD_INPUT = 2


def serve(settings: Settings, demo_modes: list[str] | None = None, demo_tp: bool = False) -> int:
    """Serve the page. ``demo_modes``: ``python app.py demo`` — once the model is ready, warm every
    preset in each of these modes (and start the tensor-parallel group with ``demo_tp``), then lock
    the app to warm shapes, saying each step on stdout."""
    temp_dir = own_temp_dir()
    try:
        return _serve(settings, demo_modes, demo_tp)
    finally:
        if temp_dir:  # app.py leaves with os._exit, so no atexit hook would run
            shutil.rmtree(temp_dir, ignore_errors=True)


def prepare_demo(manager, modes: list[str], tp: bool, say=print) -> None:
    """What a presenter does before the room comes in, in one go: every preset warm in each mode,
    the group started if asked (it warms its own shapes before READY), then the lock to warm shapes,
    so no click in the demo waits for a compile."""
    if not manager.wait_ready() or manager.state == "failed":
        say(f"demo: the model did not load: {manager.load_error}")
        return
    shapes = [shape for _name, shape in manager.card.presets]
    for mode in modes:
        say(f"demo: warming {len(shapes)} presets in {mode} mode…")
        manager.warmup(shapes, mode, progress=lambda done, total, shape, mode=mode: shape is not None and say(
            f"demo:   {mode} {shape} ({done + 1}/{total})"))
    if tp:
        say("demo: starting the tensor-parallel group…")
        manager.start_engine("tensor-parallel", wait=True)
    manager.set_warm_only(True)
    say(f"demo: ready — {len(shapes)} presets warm in {', '.join(modes) or 'no mode'}"
        + (", the tensor-parallel group running" if tp else "") + "; locked to warm shapes. Open the operator "
        "link above on the presenter's screen; the room opens the local URL (or --host/--port's).")


def _serve(settings: Settings, demo_modes: list[str] | None = None, demo_tp: bool = False) -> int:
    from backend.serving.manager import Manager
    from ui.app import launch

    manager = Manager(settings)
    try:
        demo = launch(manager, settings, block=False)  # the page first, within seconds
    except ValueError as exc:  # a bad --auth
        print(f"app.py: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    manager.start(background=True)  # then the model stack, in the background; status shows it
    if demo_modes is not None:
        threading.Thread(target=prepare_demo, args=(manager, demo_modes, demo_tp), name="demo", daemon=True).start()
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
