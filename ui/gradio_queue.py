"""The one place that touches Gradio's queue internals (``Blocks._queue``, a ``gradio.queueing.Queue``).

Gradio has no public API for three things the page needs, so they are read or set here and nowhere
else (checked against gradio 5's ``queueing.py``; a Gradio without these attributes makes each call
a no-op that returns False/None, and the page still works, with less honest queue positions):

- whether the page that asked for a run is still open (``active_jobs``' events carry ``alive``,
  cleared when the page's event stream closes),
- the width of one concurrency group (``event_queue_per_concurrency_id[id].concurrency_limit``,
  read by Gradio at every dispatch),
- how many runs one session may have waiting, and in which order they wait (``cap_per_session``:
  Gradio's ``Queue.push`` is wrapped; it reads a concurrency group's waiting events, and puts them
  in round-robin order between sessions after each join),
- how often the queue polls while nothing waits: Gradio polls every 1 ms for a free worker and every
  10 ms for progress, which on an idle app is most of its CPU (measured: ``python -m bench.idle``).
"""
from __future__ import annotations

from typing import Callable

# While idle, the queue looks for work every 20 ms (Gradio: 1 ms) and sends progress every 50 ms
# (Gradio: 10 ms). A run is at least half a second; 20 ms more before it starts is not seen.
IDLE_POLL_S = 0.02
PROGRESS_POLL_S = 0.05


def _queue(blocks):
    return getattr(blocks, "_queue", None) if blocks is not None else None


def calm(blocks, idle_poll: float = IDLE_POLL_S, progress_poll: float = PROGRESS_POLL_S) -> bool:
    """Make an idle queue poll less often (call after ``Blocks.queue()``). False: no queue to calm."""
    queue = _queue(blocks)
    if queue is None or not hasattr(queue, "sleep_when_free"):
        return False
    queue.sleep_when_free = max(queue.sleep_when_free, idle_poll)
    queue.progress_update_sleep_when_free = max(getattr(queue, "progress_update_sleep_when_free", 0), progress_poll)
    return True


def page_alive(blocks, session: str | None) -> Callable[[], bool] | None:
    """A check that turns False once the page with this session has gone; None when it cannot be told."""
    if not session or _queue(blocks) is None:
        return None

    def alive() -> bool:
        jobs = [job for job_set in list(blocks._queue.active_jobs) if job_set for job in list(job_set)
                if getattr(job, "session_hash", None) == session]
        return not jobs or any(getattr(job, "alive", True) for job in jobs)

    return alive


def set_width(blocks, concurrency_id: str, width: int) -> bool:
    """Let ``width`` events of one concurrency group run at once. False: no such group (yet)."""
    queue = _queue(blocks)
    event_queue = (getattr(queue, "event_queue_per_concurrency_id", None) or {}).get(concurrency_id)
    if event_queue is None:
        return False
    event_queue.concurrency_limit = width
    return True


def cap_per_session(blocks, concurrency_id: str, cap: Callable[[], int],
                    refusal: Callable[[int, int], str]) -> bool:
    """Refuse a session's new event in one concurrency group while ``cap()`` of its events already
    wait there: Gradio's queue has no per-session bound, so one page or API client could queue
    hundreds of runs ahead of everyone. The join is answered 503 with ``refusal(position, cap)``
    (``position``: where that session's first waiting run stands; gradio_client and the page say
    "Queue is full", the words are in the answer's body). False: no queue to cap."""
    queue = _queue(blocks)
    if queue is None or not hasattr(queue, "push"):
        return False
    push = queue.push

    async def capped(body, request, username):
        fn = (getattr(blocks, "fns", None) or {}).get(getattr(body, "fn_index", None))
        session = getattr(body, "session_hash", None)
        group = (getattr(queue, "event_queue_per_concurrency_id", None) or {}).get(concurrency_id)
        if session and group is not None and getattr(fn, "concurrency_id", None) == concurrency_id:
            waiting = [i for i, event in enumerate(list(group.queue)) if event.session_hash == session]
            if len(waiting) >= cap():
                return False, refusal(waiting[0] + 1, cap()), "queue_full"
        result = await push(body, request, username)
        group = (getattr(queue, "event_queue_per_concurrency_id", None) or {}).get(concurrency_id)
        if result[0] and group is not None and getattr(fn, "concurrency_id", None) == concurrency_id:
            round_robin(group.queue)
            if hasattr(queue, "broadcast_estimations"):
                queue.broadcast_estimations(concurrency_id)  # the places each page shows, in the new order
        return result

    queue.push = capped
    return True


def round_robin(events: list) -> None:
    """Reorder waiting events in place, fairly between sessions: each session's first waiting event
    in the order they came, then each one's second, and so on — one viewer's burst waits behind
    everyone else's next run, not in front of it. (Run right after a join, in the queue's own event
    loop, between two of its dispatches: nothing else touches the list meanwhile.)"""
    turn: dict[str, int] = {}
    keyed = []
    for position, event in enumerate(events):
        nth = turn.get(event.session_hash, 0)
        turn[event.session_hash] = nth + 1
        keyed.append((nth, position, event))
    events[:] = [event for _nth, _position, event in sorted(keyed, key=lambda k: k[:2])]
