"""The web server's own parts, apart from the page (no Gradio here): ``api`` (the clients' FastAPI
routes: the OpenAI-compatible Images API, the model list, the probes, the metrics) and ``guard``
(Host names, the output folder, uploads, the operator's login), which ``server.py`` assembles with
the page into one ASGI app."""
