"""The floor for P6: a bare Gradio Blocks app with one textbox, launched with the app's own launch
options (as ``server.py`` serves the page: queue, server name and port, no monitoring, quiet off, the same CSS
and upload limit), started as its own process by ``python -m bench --only P6``.

    python -m bench.bare_gradio PORT
"""

from __future__ import annotations

import sys


def main(port: int) -> None:
    import gradio as gr

    from ui.constants import CSS, MAX_UPLOAD

    with gr.Blocks(title="bare") as demo:
        gr.Textbox(label="prompt")
    demo.queue(default_concurrency_limit=1)
    demo.launch(server_name="127.0.0.1", server_port=port, enable_monitoring=False, show_error=False,
                prevent_thread_lock=False, css=CSS, max_file_size=MAX_UPLOAD, quiet=False)


if __name__ == "__main__":
    main(int(sys.argv[1]))
