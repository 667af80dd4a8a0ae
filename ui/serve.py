"""``python app.py`` (serve): the page first, within seconds, then the model stack in the background."""

from __future__ import annotations

import signal
import sys

from backend.settings import Settings

EXIT_BAD_INPUT = 2


def serve(settings: Settings) -> int:
    from backend.manager import Manager
    from ui.app import launch

    manager = Manager(settings)
    try:
        demo = launch(manager, settings, block=False)  # the page first, within seconds
    except ValueError as exc:  # a bad --auth
        print(f"app.py: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    manager.start(background=True)  # then the model stack, in the background; status shows it
    # SIGTERM ends the app like Ctrl-C does, so the worker group is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        demo.block_thread()
    finally:
        manager.close()
        demo.close()
    return 0
