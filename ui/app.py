"""The studio page: ``build_ui`` puts the layout (``ui.layout``), its events (``ui.wiring``) and the
public API (``ui.api``) together around one ``ui.handlers.Studio``; ``launch`` serves it (auth, the
operator's key, the Host guard, the queue). Gradio only; no torch.

Panels: Studio (controls, cost of the chosen shape, badges, image, history), Compare (one prompt
through two or three modes), System (device, caches, per-shape table, warm-up, lock, the
tensor-parallel group, replicas, bundles) and Performance (latency and compile-time plots). Every
static word is an ``I18N(key)`` from ``ui.i18n.MESSAGES``, which the browser translates (Turkish for
``tr``, else English); the handlers render what they return in the same language on the server.
The process around it (the model load, signals, the temp folder) is ``ui.serve``'s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import gradio as gr

from ui.api import add_api
from ui.constants import ASSETS, CSS, I18N, MAX_QUEUE, MAX_UPLOAD, PROMPT_KEYS
from ui.handlers import Studio
from ui.layout import build_page
from ui.temp_dir import own_temp_dir
from ui.views_common import load_example_prompts
from ui.wiring import wire


def build_ui(manager, operator_key=None) -> gr.Blocks:
    """The page. ``operator_key`` (``backend.serving.roles.OperatorKey``) tells each event's caller: the
    operator's controls show only on the operator's page, and the manager refuses them for viewers."""
    studio = Studio(manager, operator_key)
    studio.examples = load_example_prompts(ASSETS / "prompts.txt")
    # Gradio's temporary copies (images, uploads) older than an hour are deleted every 10 minutes.
    with gr.Blocks(title="Neuron Studio", delete_cache=(600, 3600)) as demo:
        page = build_page(manager)
        wire(studio, page, demo)
        add_api(studio, manager)
    studio.operator_controls = len(page.operator_only)
    return demo


def parse_auth(spec: str | None) -> list[tuple[str, str]] | None:
    """'user:pass', or a file with one user:pass per line (# comments allowed) -> Gradio auth list."""
    from backend.serving.roles import parse_pairs

    return parse_pairs(spec, "--auth") if spec else None


def launch(manager, settings, block: bool = True) -> gr.Blocks:
    """Serve the page now; the caller starts the model load after this returns (page first)."""
    import atexit
    import shutil

    from starlette.middleware import Middleware

    from backend.serving.roles import OperatorKey, parse_pairs
    from web.door import ApiDoor, ApiKeys
    from web.guard import RoomGuard, allowed_hosts

    auth = parse_auth(settings.auth)
    try:
        api_keys = ApiKeys.load(settings.api_keys)
    except OSError as exc:
        raise ValueError(f"--api-keys: {exc}") from None
    for flag, spec in (("--auth", settings.auth), ("--operator-auth", settings.operator_auth)):
        if spec and not Path(spec).expanduser().is_file() and any(a.startswith(flag) for a in sys.argv):
            print(f"warning: {flag} user:pass on the command line is visible to every local user (ps); "
                  f"give a file of user:pass lines or the environment variable instead", file=sys.stderr)
    key = OperatorKey(parse_pairs(settings.operator_auth, "--operator-auth") if settings.operator_auth else None)
    if settings.host not in ("127.0.0.1", "localhost", "::1") and not auth:
        print(f"warning: serving on {settings.host} without --auth: anyone who can reach this address "
              "can use the app", file=sys.stderr)
    # Gradio's copies of images and uploads: a private folder of the app's own (``ui.serve`` makes
    # it before Gradio loads and removes it at exit; for other callers, removed at exit here).
    made = own_temp_dir()
    if made:
        atexit.register(shutil.rmtree, made, ignore_errors=True)
    demo = build_ui(manager, key)
    demo.queue(default_concurrency_limit=1, max_size=MAX_QUEUE)
    guard = Middleware(RoomGuard, key=key, hosts=allowed_hosts(settings.host),
                       output_dir=str(Path(settings.output_dir).resolve()), upload_dir=os.environ.get("GRADIO_TEMP_DIR"))
    # The Images API, the probes and the metrics (web.door), behind the guard's Host check.
    door = Middleware(ApiDoor, manager=manager, keys=api_keys, metrics_key=settings.metrics_key)
    demo.launch(server_name=settings.host, server_port=settings.port, share=settings.share, auth=auth,
                enable_monitoring=False, show_error=False, prevent_thread_lock=True, css=CSS, js=PROMPT_KEYS, i18n=I18N,
                allowed_paths=[str(Path(settings.output_dir).resolve())], quiet=False,
                max_file_size=MAX_UPLOAD, app_kwargs={"middleware": [guard, door]})
    shown = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    key.base_url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{demo.server_port}"
    link = key.link(key.base_url)
    print(f"operator link (keep it to yourself; other pages are viewers): {link}" if link else
          "operator: log in at /operator with the --operator-auth credentials", flush=True)
    print(f"api: {api_keys.describe()}: {key.base_url}/v1/images/generations; probes /healthz /readyz; "
          f"metrics /metrics ({'loopback, or the --metrics-key' if settings.metrics_key else 'loopback only'})",
          flush=True)
    if block:
        demo.block_thread()
    return demo
