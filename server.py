"""The server: one ASGI app assembled in one place (``assemble``), served by uvicorn; and the process's
life: the page first, within seconds, then the model stack in the background; ``demo``'s warm-up and
lock; the end (signals, the running generation, the workers, Gradio's temp folder).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from backend.settings import Settings
from ui.temp_dir import own_temp_dir

EXIT_BAD_INPUT = 2


class Served:
    def __init__(self, app, host: str, port: int, forwarded_allow_ips: str | None = None):
        import uvicorn

        # X-Forwarded-For/-Proto are read only from the proxies the operator names (uvicorn's default
        # trusts loopback, so a local caller could be any address it liked): else the peer's address.
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=1,
                                proxy_headers=bool(forwarded_allow_ips), forwarded_allow_ips=forwarded_allow_ips or "")
        self.server, self.port = uvicorn.Server(config), port
        self.thread = threading.Thread(target=self.server.run, name="web-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise OSError(f"the web server did not start on {host}:{port}")
            time.sleep(0.02)

    def close(self) -> None:
        self.server.should_exit = self.server.force_exit = True
        self.thread.join(10)


def assemble(manager, settings: Settings, key, api_keys, auth: list[tuple[str, str]] | None):
    """FastAPI with the clients' routes (``web.api``), the room's guard as its outermost middleware
    (``web.guard``), the page's Blocks mounted at ``/``. ``auth``: the viewers' logins (``--auth``, parsed).
    Starlette's CORS middleware with no origin allowed stands in for Gradio's, which would answer any
    localhost origin with credentials (Gradio leaves CORS to a parent app that configures it)."""
    import gradio as gr
    from starlette.middleware.cors import CORSMiddleware

    from ui.app import build_ui
    from ui.constants import CSS, I18N, MAX_QUEUE, MAX_UPLOAD, PROMPT_KEYS
    from web.api import build_api
    from web.guard import Failures, RoomGuard, allowed_hosts

    output_dir = str(Path(settings.output_dir).resolve())
    demo = build_ui(manager, key)
    demo.queue(default_concurrency_limit=1, max_size=MAX_QUEUE)
    failures = Failures()  # one window for every credential: the logins, API keys, the metrics key
    app = build_api(manager, api_keys, settings.metrics_key, failures)
    app.add_middleware(CORSMiddleware, allow_origins=[])
    app.add_middleware(RoomGuard, key=key, hosts=allowed_hosts(settings.host),
                       output_dir=output_dir, upload_dir=os.environ.get("GRADIO_TEMP_DIR"), failures=failures,
                       viewer_login=bool(auth))
    return gr.mount_gradio_app(app, demo, path="/", auth=auth, show_error=False,
                               enable_monitoring=False, css=CSS, js=PROMPT_KEYS, i18n=I18N, max_file_size=MAX_UPLOAD,
                               allowed_paths=[output_dir],
                               server_name=settings.host, server_port=settings.port, ssr_mode=False)


def launch(manager, settings: Settings) -> Served:
    import atexit

    from backend.serving.roles import OperatorKey, parse_pairs
    from web.api import ApiKeys
    from web.guard import ANY_ADDRESS, LOOPBACK_NAMES

    # A bad --auth is refused before anything listens.
    auth = parse_pairs(settings.auth, "--auth") if settings.auth else None
    try:
        api_keys = ApiKeys.load(settings.api_keys)
    except OSError as exc:
        raise ValueError(f"--api-keys: {exc}") from None
    for flag, spec in (("--auth", settings.auth), ("--operator-auth", settings.operator_auth)):
        if spec and not Path(spec).expanduser().is_file() and any(a.startswith(flag) for a in sys.argv):
            print(f"warning: {flag} user:pass on the command line is visible to every local user (ps); "
                  f"give a file of user:pass lines or the environment variable instead", file=sys.stderr)
    key = OperatorKey(parse_pairs(settings.operator_auth, "--operator-auth") if settings.operator_auth else None)
    if settings.host not in LOOPBACK_NAMES and not settings.auth:
        print(f"warning: serving on {settings.host} without --auth: anyone who can reach this address "
              "can use the app", file=sys.stderr)
    # Gradio's copies of images and uploads: ``serve`` made the folder before Gradio loaded; for other
    # callers it is made, and removed at exit, here.
    if made := own_temp_dir():
        atexit.register(shutil.rmtree, made, ignore_errors=True)
    app = assemble(manager, settings, key, api_keys, auth)
    served = Served(app, settings.host, settings.port, settings.forwarded_allow_ips)
    shown = "127.0.0.1" if settings.host in ANY_ADDRESS else settings.host
    key.base_url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{served.port}"
    print(f"* Running on local URL:  {key.base_url}", flush=True)
    link = key.link(key.base_url)
    print(f"operator link (keep it to yourself; other pages are viewers): {link}" if link else
          "operator: log in at /operator with the --operator-auth credentials", flush=True)
    print(f"api: {api_keys.describe()}: {key.base_url}/v1/images/generations; probes /healthz /readyz; "
          f"metrics /metrics ({'loopback, or the --metrics-key' if settings.metrics_key else 'loopback only'})",
          flush=True)
    return served


def serve(settings: Settings, demo_modes: list[str] | None = None, demo_tp: bool = False) -> int:
    """Serve the page. ``demo_modes``: ``python app.py demo`` (``prepare_demo`` once the model is ready)."""
    from backend.serving.manager import Manager

    temp_dir = own_temp_dir()
    try:
        manager = Manager(settings)
        try:
            served = launch(manager, settings)  # the page first, within seconds
        except (ValueError, OSError) as exc:  # a bad --auth, a port in use
            print(f"app.py: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        manager.start(background=True)  # then the model stack, in the background; status shows it
        if demo_modes is not None:
            threading.Thread(target=prepare_demo, args=(manager, demo_modes, demo_tp), name="demo",
                             daemon=True).start()
        # SIGTERM and Ctrl-C end the app the same way, within a few seconds in every mode: the running
        # generation is cancelled at its next step, the worker group stopped, then the web server.
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            while not stop.wait(0.2) and served.thread.is_alive():
                pass
        finally:
            # A compile in progress cannot be interrupted: the process exit ends it (nothing is half
            # written: PNGs are renamed into place whole).
            manager.close(wait=1.0)
            served.close()
        return 0
    finally:
        if temp_dir:  # app.py leaves with os._exit, so no atexit hook would run
            shutil.rmtree(temp_dir, ignore_errors=True)


def prepare_demo(manager, modes: list[str], tp: bool, say=print) -> None:
    """What a presenter does before the room comes in, in one go: every preset warm in each mode,
    the group started if asked (it warms its own shapes before READY), then the lock to warm shapes,
    so no click in the demo waits for a compile."""
    if not manager.wait_ready():
        say(f"demo: the model did not load: {manager.load_error}")
        return
    shapes = [shape for _name, shape in manager.card.presets]
    manager.preparing = "the demo is warming its presets"  # /readyz waits for it
    try:
        for mode in modes:
            say(f"demo: warming {len(shapes)} presets in {mode} mode…")
            manager.warmup(shapes, mode, progress=lambda done, total, shape, mode=mode: shape is not None and say(
                f"demo:   {mode} {shape} ({done + 1}/{total})"))
        if tp:
            say("demo: starting the tensor-parallel group…")
            manager.start_engine("tensor-parallel", wait=True)
        manager.set_warm_only(True)
    finally:
        manager.preparing = None
    say(f"demo: ready — {len(shapes)} presets warm in {', '.join(modes) or 'no mode'}"
        + (", the tensor-parallel group running" if tp else "") + "; locked to warm shapes. Open the operator "
        "link above on the presenter's screen; the room opens the local URL (or --host/--port's).")
