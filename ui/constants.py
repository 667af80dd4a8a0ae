"""What several ui modules share, defined here so that imports only go down to it: the page's queues
(concurrency groups), the upload limit, the assets folder, the words table (``I18N``), the page's CSS
and keyboard script (``page.css``, ``prompt_keys.js`` beside this file).
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ui.i18n import MESSAGES

I18N = gr.I18n(**MESSAGES)

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parent / "assets"
# Runs (Generate, Compare, the API's /generate) go to the service's job board, which orders them
# round robin between owners and runs as many at once as the engines can: Gradio only hands them
# over, up to RUN_SLOTS at a time (the rest wait in Gradio's queue, bounded by MAX_QUEUE).
RUN_QUEUE = "runs"
RUN_SLOTS = 64
MAX_QUEUE = 256
# Bundles' export and import hold the device (the cache must not change under them): one at a time.
DEVICE_QUEUE = "device"
MAX_UPLOAD = "20mb"  # a parameters PNG is kilobytes; nothing bigger is read, or kept
UPLOAD_QUEUE = "uploads"  # events that parse an upload run one at a time, apart from the device
PROMPT_KEYS = (HERE / "prompt_keys.js").read_text(encoding="utf-8")  # Enter generates, Ctrl+Enter a new line
CSS = (HERE / "page.css").read_text(encoding="utf-8")
