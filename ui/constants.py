"""What several ui modules share, defined here so that imports only go down to it: the names of
the page's queues (concurrency groups), the upload limit, the assets folder, the browser's words
table (``I18N``), the page's CSS and its keyboard script.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ui.i18n import MESSAGES

I18N = gr.I18n(**MESSAGES)

ASSETS = Path(__file__).resolve().parent.parent / "assets"
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

# Enter in the prompt generates (a presenter types and presses Enter); Ctrl+Enter (or Shift+Enter,
# which Gradio also takes as submit) is a new line. Keys pressed while an input method composes
# (CJK) are left alone.
PROMPT_KEYS = """
() => {
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key !== "Enter" || event.isComposing || !box.closest || !box.closest("#prompt")) return;
    if (event.ctrlKey || event.metaKey) {
      event.preventDefault();
      const at = box.selectionStart;
      box.value = box.value.slice(0, at) + "\\n" + box.value.slice(box.selectionEnd);
      box.selectionStart = box.selectionEnd = at + 1;
      box.dispatchEvent(new Event("input", {bubbles: true}));
    } else if (!event.shiftKey && !event.altKey) {
      event.preventDefault();
      event.stopPropagation();
      const button = document.querySelector("#generate");
      if (button && !button.disabled) button.click();
    }
  }, true);
}
"""

CSS = """
.toast-title-row > span:first-child {display: none;}
.ns-badges {display: flex; flex-wrap: wrap; gap: 6px;}
.ns-badge {border-radius: 999px; padding: 2px 10px; font-size: 0.85em; border: 1px solid #8884;}
.ns-badge i {display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 6px;}
.ns-warm i {background: #16a34a;} .ns-cold i {background: #9ca3af;} .ns-compiling i {background: #eab308;}
.ns-failed i {background: #dc2626;} .ns-locked i {background: #6366f1;}
.ns-tp {display: inline-flex; align-items: center; padding: 6px 0; white-space: nowrap;}
.ns-tp i {display: inline-block; flex: none; width: 10px; height: 10px; border-radius: 50%; margin-right: 8px;
          background: #9ca3af;}
.ns-tp-ready i {background: #16a34a;} .ns-tp-dead i {background: #dc2626;}
.ns-tp-launching i, .ns-tp-loading i, .ns-tp-warming i, .ns-tp-stopping i {background: #eab308;}
#history .thumbnail-item {display: flex; flex-direction: column; overflow: visible;}
#history .thumbnail-item img {height: calc(100% - 2.7em); object-fit: contain;}
#history .caption-label {position: static; transform: none; background: none; color: var(--body-text-color);
  white-space: normal; max-width: 100%; padding: 1px 2px; font-size: 10.5px; line-height: 1.2;}
[id^=examples] .gallery {display: flex; flex-wrap: wrap; gap: 4px;}  /* #examples, #examples-tr */
[id^=examples] .gallery-item {padding: 1px 8px; font-size: 0.82em;}
[id^=examples] > .label {display: none;}
/* Gradio's "Pages:" is English only */
[id^=examples] .paginate {font-size: 0;} [id^=examples] .paginate button {font-size: 0.8rem;}
[id^=examples] .gallery-item div {max-width: 112px; white-space: nowrap !important; overflow: hidden;
  text-overflow: ellipsis;}
#references .grid-container {padding-top: 48px;}
#title h1 {display: inline; font-size: 1.5em; margin: 0 12px 0 0;} #title p {display: inline; margin: 0;}
#lines {gap: 24px; align-items: baseline;} #lines p {margin: 0;}
.ns-hint {font-size: 0.85em; opacity: 0.8;} .ns-hint summary {cursor: pointer;} .ns-i {font-style: normal;}
#system-info table, #tp-info table, #replica-info table, #ray-info table {border-collapse: collapse; font-size: 0.9em;}
#system-info :is(td, th), #tp-info :is(td, th), #replica-info :is(td, th), #ray-info :is(td, th) {
  border: 0 !important; border-bottom: 1px solid var(--border-color-primary) !important; padding: 3px 12px !important;}
"""
