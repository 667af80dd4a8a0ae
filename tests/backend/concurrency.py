"""Waiting for a state, and two requests proven to run at once, for the tests of the engines that
serve several requests at a time (the replica pool, Ray Serve)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


def until(predicate: Callable[[], Any], what: str, bound: float, detail: Callable[[], str] | None = None) -> None:
    """Wait for a state, at most ``bound`` seconds; the test fails if it never comes, saying
    ``detail()`` (what was there instead) when given."""
    deadline = time.monotonic() + bound
    while not predicate():
        assert time.monotonic() < deadline, f"still waiting for {what}" + (f"; {detail()}" if detail else "")
        time.sleep(0.05)


def serve_two_at_once(mgr, request: Callable[[int], Any], bound: float,
                      while_both: Callable[[dict], None] | None = None) -> tuple[dict, dict]:
    """Requests A (seed 1) and B (seed 2): A holds its first step until B has made progress, so were
    they served one after the other A would wait for ever (bounded here) and the test fails.
    ``while_both(results)`` runs once B has started. Returns ({name: (image, result)}, {name:
    (began, ended)})."""
    b_started, results, errors, spans = threading.Event(), {}, [], {}

    def a_progress(event):  # (step >= 1: a Ray replica folds steps that come close together)
        if event.phase == "denoising" and event.step >= 1:
            assert b_started.wait(bound), "request B never ran while A was running"

    def b_progress(event):
        if event.phase == "denoising":
            b_started.set()

    def run(name, progress, seed):
        try:
            began = time.monotonic()
            results[name] = mgr.generate(request(seed), progress)
            spans[name] = (began, time.monotonic())
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    a = threading.Thread(target=run, args=("a", a_progress, 1))
    a.start()
    until(lambda: mgr.status().running, "request A to start", bound)
    b = threading.Thread(target=run, args=("b", b_progress, 2))
    b.start()
    if while_both is not None:
        while_both(results)
    a.join(bound)
    b.join(bound)
    assert not errors, errors
    return results, spans
