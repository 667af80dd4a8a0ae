"""The web server's own doors, below Gradio (pure ASGI, no Gradio): ``guard`` (Host names, the
output folder, uploads, the operator's login) and ``door`` (the OpenAI-compatible Images API in
``openai_images``, the probes, the metrics)."""
