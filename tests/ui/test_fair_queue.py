"""Issue 33 (8): one viewer cannot queue runs without end ahead of the room. A real Gradio app and
real gradio_client sessions: a device-queue event that holds until the test lets it go, Gradio's
queue with the app's per-session cap (``ui.gradio_queue.cap_per_session``)."""

from __future__ import annotations

import threading
import time

import gradio as gr
import httpx
import pytest
from gradio_client import Client
from gradio_client.utils import QueueError

from ui import gradio_queue
from ui.constants import DEVICE_QUEUE

CAP = 4


@pytest.fixture
def room():
    release, started = threading.Event(), []

    def run(label: str) -> str:
        started.append(label)
        release.wait(60)
        return label

    with gr.Blocks() as demo:
        box, out = gr.Textbox(), gr.Textbox()
        gr.Button().click(run, box, out, api_name="run", concurrency_id=DEVICE_QUEUE, concurrency_limit=1)
    demo.queue(default_concurrency_limit=1)
    demo.launch(prevent_thread_lock=True, quiet=True)
    assert gradio_queue.cap_per_session(demo, DEVICE_QUEUE, lambda: CAP,
                                        lambda position, cap: f"{cap} waiting; the first at place {position}")
    try:
        yield demo, release, started
    finally:
        release.set()
        demo.close()


def _until(predicate, what: str) -> None:
    deadline = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _waiting(demo) -> list:
    return list(demo._queue.event_queue_per_concurrency_id[DEVICE_QUEUE].queue)


def test_round_robin_puts_each_sessions_next_run_before_anyones_second():
    from types import SimpleNamespace as Event

    events = [Event(session_hash=s, n=i) for i, s in enumerate("aaaabca")]
    gradio_queue.round_robin(events)
    assert [(e.session_hash, e.n) for e in events] == [("a", 0), ("b", 4), ("c", 5), ("a", 1), ("a", 2),
                                                        ("a", 3), ("a", 6)]


def test_one_viewer_queues_at_most_the_cap_and_another_viewers_run_goes_next(room):
    demo, release, started = room
    url = demo.local_url
    greedy, other = Client(url, verbose=False), Client(url, verbose=False)
    first = greedy.submit("greedy 0", api_name="/run")
    _until(lambda: started == ["greedy 0"], "the first run to start")
    waiting = [greedy.submit(f"greedy {i}", api_name="/run") for i in range(1, CAP + 1)]
    _until(lambda: len(_waiting(demo)) == CAP, "the greedy viewer's runs to wait")
    refused = greedy.submit("greedy over", api_name="/run")
    with pytest.raises(QueueError, match="Queue is full"):  # gradio_client's words for a 503 join
        refused.result(timeout=60)
    fn_index = next(i for i, fn in demo.fns.items() if fn.api_name == "run")
    answer = httpx.post(f"{url}gradio_api/queue/join", timeout=30,
                        json={"data": ["raw"], "fn_index": fn_index, "session_hash": greedy.session_hash})
    assert answer.status_code == 503 and f"{CAP} waiting; the first at place 1" in answer.text  # the app's
    assert len(_waiting(demo)) == CAP  # the refused ones never joined
    mine = other.submit("other", api_name="/run")
    _until(lambda: len(_waiting(demo)) == CAP + 1, "the other viewer's run to join")
    # Round robin: the other viewer's one run waits behind the greedy one's next, not all four.
    assert [e.session_hash for e in _waiting(demo)].index(other.session_hash) == 1
    release.set()
    assert mine.result(timeout=60) == "other" and first.result(timeout=60) == "greedy 0"
    assert started.index("other") == 2  # it ran right after the greedy viewer's second
    assert [job.result(timeout=60) for job in waiting] == [f"greedy {i}" for i in range(1, CAP + 1)]


def test_the_waiting_runs_of_a_page_that_closed_leave_the_queue(room):
    """Issue 33 (8): runs nobody reads any more do not hold the room's places. A page's runs wait
    while its event stream is open; when the stream closes (the tab went away), Gradio's queue drops
    them (``Queue.clean_events``) and the next viewer's run goes next. (The run already going stops
    at its next step: ``gradio_queue.page_alive``, tested in test_roles.)"""
    demo, release, started = room
    url = demo.local_url
    fn_index = next(i for i, fn in demo.fns.items() if fn.api_name == "run")

    def join(label: str, session: str) -> None:
        answer = httpx.post(f"{url}gradio_api/queue/join", timeout=30,
                            json={"data": [label], "fn_index": fn_index, "session_hash": session})
        assert answer.status_code == 200, answer.text

    for label in ("gone 0", "gone 1", "gone 2"):
        join(label, "gone")  # a page joins, then listens (a stream before any join is a 404)
    with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": "gone"}, timeout=60) as page:
        lines = page.iter_lines()  # held: a dropped iterator closes the stream
        assert '"msg":"estimation"' in next(lines)  # open and answering
        _until(lambda: started == ["gone 0"] and len(_waiting(demo)) == 2, "one run going and two waiting")
        join("stays", "stays")
        assert [e.session_hash for e in _waiting(demo)] == ["gone", "stays", "gone"]
    _until(lambda: [e.session_hash for e in _waiting(demo)] == ["stays"], "the closed page's runs to leave")
    release.set()
    _until(lambda: started == ["gone 0", "stays"], "the remaining run to go next")
