"""The web server's own parts apart from the page (no Gradio): ``api`` (the clients' routes) and
``guard`` (the room's door), which ``server.py`` assembles with the page into one ASGI app."""
