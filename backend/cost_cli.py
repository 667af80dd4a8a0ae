"""``python app.py cost``: measure the cost receipt here — load the model, run each size until it is
warm, then ``runs`` steady runs, and print what an image costs (``backend.serving.cost``)."""

from __future__ import annotations

import json
import sys

from backend.errors import StudioError
from backend.serving.cost import Reference, format_receipt
from backend.settings import Settings
from backend.shapes import parse_shape_list

PROMPT = "a red circle in the centre, on a white background"


def cost(settings: Settings, sizes: str | None, runs: int, reference: Reference | None, as_json: bool) -> int:
    from backend.serving.manager import Manager

    manager = Manager(settings)
    try:
        shapes = parse_shape_list(sizes) if sizes else (settings.prewarm or [manager.card.start_shape])
        requests = [manager.validate(PROMPT, s.height, s.width, seed=1, count=s.count) for s in shapes]
    except (ValueError, StudioError) as exc:
        manager.close()
        print(f"app.py cost: error: {exc}", file=sys.stderr)
        return 2
    try:
        manager.start()
        for request in requests:
            manager.run(request, save=False)  # compiles (or not) and warms
            for _ in range(runs):
                manager.run(request, save=False)
            print(f"cost: {request.shape} in {request.mode} mode: 1 warm-up + {runs} runs", file=sys.stderr)
        data = manager.receipt(reference=reference)
    except StudioError as exc:
        print(f"app.py cost: error: {exc}", file=sys.stderr)
        return 1
    finally:
        manager.close()
    print(json.dumps(data) if as_json else format_receipt(data))
    return 0
