"""The web page (placeholder until the studio UI lands): generate one image and watch the status.

Gradio only; it reaches the backend through the manager alone and imports no torch.
"""

from __future__ import annotations

import gradio as gr

from backend.errors import StudioError


def build_ui(manager) -> gr.Blocks:
    settings = manager.settings

    def generate(prompt, width, height, mode, steps, seed):
        try:
            request = manager.validate(prompt, height, width, steps=steps, seed=seed, mode=mode)
            image, result = manager.generate(request)
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        return image, result.to_json()

    with gr.Blocks(title="Neuron Studio") as demo:
        gr.Markdown("# Neuron Studio\nFLUX.2-klein on AWS Trainium. The full studio is on its way; "
                    "this page generates one image and shows the backend's status.")
        with gr.Row():
            with gr.Column():
                prompt = gr.Textbox(label="Prompt", value="a red fox in the snow")
                with gr.Row():
                    width = gr.Number(label="Width", value=512, precision=0, step=16)
                    height = gr.Number(label="Height", value=512, precision=0, step=16)
                mode = gr.Dropdown(["eager", "compiled", "regional"], value=settings.mode, label="Mode")
                steps = gr.Number(label="Steps", value=settings.steps, precision=0)
                seed = gr.Number(label="Seed (-1: random)", value=-1, precision=0)
                button = gr.Button("Generate", variant="primary")
            with gr.Column():
                image = gr.Image(label="Image", type="pil", format="png")
                record = gr.JSON(label="Result")
        status = gr.JSON(label="Status")

        def refresh_status() -> dict:
            return manager.status()

        demo.load(refresh_status, outputs=status, api_visibility="private")
        gr.Timer(2.0).tick(refresh_status, outputs=status, api_visibility="private")

        def status_api() -> dict:
            """The manager's status snapshot (device, model, per-shape compile states, caches)."""
            return manager.status()

        gr.api(status_api, api_name="status")
        button.click(generate, [prompt, width, height, mode, steps, seed], [image, record],
                     api_name="generate", concurrency_id="device", concurrency_limit=1)
    return demo


def launch(manager, settings) -> None:
    demo = build_ui(manager)
    demo.queue().launch(server_name=settings.host, server_port=settings.port,
                        enable_monitoring=False, show_error=False)
