"""The job board (``backend.serving.jobs``): typed owners, round robin between owners, the per-owner
cap and the width that follows capacity. Real threads wait on the real board; nothing sleeps for a
duration (each test waits for states)."""

from __future__ import annotations

import threading

import pytest

from backend.errors import GenerationCancelled, QueueFull
from backend.serving.jobs import JobBoard, JobState, Owner, OwnerKind
from backend.shapes import Shape
from tests.ui.fake_engines import until

SHAPE = Shape(64, 64)


def page(session: str) -> Owner:
    return Owner(OwnerKind.PAGE, session)


class Room:
    """Jobs entered on one board, each waiting in its own thread; ``started`` lists them as they get
    their slot, and a job holds its slot until ``finish(label)``."""

    def __init__(self, width: int = 1):
        self.width = width
        self.board = JobBoard(lambda engine: self.width)
        self.started: list[str] = []
        self.jobs: dict[str, object] = {}
        self.errors: dict[str, Exception] = {}
        self._lock = threading.Lock()

    def submit(self, owner: Owner, label: str, cap: int | None = None, engine: str = "in-process") -> None:
        job = self.board.enter(owner, "eager", SHAPE, 4, engine, cap)
        self.jobs[label] = job

        def wait() -> None:
            try:
                self.board.wait_turn(job, lambda: False, poll=0.05)
            except Exception as exc:  # noqa: BLE001 - handed to the test
                self.errors[label] = exc
                return
            with self._lock:
                self.started.append(label)

        threading.Thread(target=wait, daemon=True).start()

    def finish(self, label: str) -> None:
        self.board.leave(self.jobs[label])

    def waiting(self) -> int:
        return sum(1 for j in self.board.jobs() if j.state is JobState.WAITING)


def test_a_second_owner_goes_next_behind_a_first_owners_thirty():
    room = Room()
    for i in range(30):
        room.submit(page("greedy"), f"greedy {i}")
        until(lambda i=i: len(room.board.jobs()) == i + 1, "the greedy job to enter")
    until(lambda: room.started == ["greedy 0"], "the first greedy run to start")
    room.finish("greedy 0")
    until(lambda: len(room.started) == 2, "the next greedy run to start")
    room.submit(page("other"), "other")
    until(lambda: room.board.place(room.jobs["other"]) == 1, "the other viewer's job to stand first")
    room.finish(room.started[-1])
    until(lambda: len(room.started) == 3, "the next run to start")
    assert room.started[-1] == "other"  # the very next free slot: within one run


def test_owners_take_turns_in_the_order_they_were_last_served():
    room = Room()
    room.submit(page("a"), "a0")
    until(lambda: room.started == ["a0"], "a0 to run")
    for label, owner in (("a1", "a"), ("a2", "a"), ("b0", "b"), ("c0", "c"), ("b1", "b")):
        room.submit(page(owner), label)
        until(lambda label=label: label in room.jobs and room.waiting() == len(room.jobs) - 1, "it to wait")
    order = []
    while len(order) < 5:
        room.finish(room.started[-1])
        until(lambda n=len(order): len(room.started) == n + 2, "the next to start")
        order.append(room.started[-1])
    assert order == ["b0", "c0", "a1", "b1", "a2"]


def test_an_owner_holds_at_most_its_cap_of_jobs_and_the_operator_none():
    room = Room()
    for i in range(3):
        room.submit(page("v"), f"v{i}", cap=3)
    with pytest.raises(QueueFull, match="at most 3"):
        room.submit(page("v"), "v3", cap=3)
    room.submit(page("w"), "w0", cap=3)  # another owner is not held by v's cap
    for i in range(10):
        room.submit(Owner(OwnerKind.OPERATOR), f"op{i}", cap=None)
    assert len(room.board.jobs()) == 14


def test_no_string_a_client_sends_names_another_kinds_owner():
    """Issue 51 (1): a forged Stop carried the victim's owner string ("api key alice"). An owner is
    its kind and its name: a page session that spells any API owner owns none of its jobs."""
    room = Room()
    victims = [Owner(OwnerKind.API_KEY, "alice"), Owner(OwnerKind.API_ADDRESS, "127.0.0.1"),
               Owner(OwnerKind.LOCAL), Owner(OwnerKind.OPERATOR)]
    for number, owner in enumerate(victims):
        room.submit(owner, f"victim {number}")
    forged = ["api key alice", "key alice", "alice", "api loopback 127.0.0.1", "loopback 127.0.0.1", "127.0.0.1",
              "local", "", "operator", "api address 127.0.0.1", str(victims[0]), str(victims[1])]
    for session in forged:
        assert room.board.cancel(page(session), everyone=False) == []
    assert not any(job.cancel.is_set() for job in room.board.jobs())
    assert [j.owner for j in room.board.cancel(victims[0], everyone=False)] == [victims[0]]


def test_as_many_jobs_run_at_once_as_the_capacity_and_it_is_read_again_when_it_changes():
    room = Room(width=1)
    for label in ("a", "b", "c"):
        room.submit(page(label), label)
    until(lambda: room.started == ["a"] and room.waiting() == 2, "one running, two waiting")
    room.width = 2  # a second replica became ready
    room.board.capacity_changed()
    until(lambda: len(room.started) == 2, "a second run beside the first")
    assert room.waiting() == 1


def test_a_waiting_job_that_is_stopped_leaves_the_board_at_once():
    room = Room()
    room.submit(page("a"), "a")
    until(lambda: room.started == ["a"], "a to run")
    room.submit(page("b"), "b")
    until(lambda: room.waiting() == 1, "b to wait")
    room.board.cancel(page("b"), everyone=False)
    until(lambda: "b" in room.errors, "b to leave")
    assert isinstance(room.errors["b"], GenerationCancelled)
    assert [j.owner for j in room.board.jobs()] == [page("a")]


def test_engines_run_side_by_side_each_job_waiting_only_behind_its_own_engines():
    room = Room(width=1)
    room.submit(page("a"), "a", engine="in-process")
    until(lambda: room.started == ["a"], "a to run in process")
    room.submit(page("b"), "b", engine="in-process")
    room.submit(page("c"), "c", engine="tensor-parallel")
    until(lambda: room.started == ["a", "c"], "the group's run beside the in-process one")
    assert room.board.place(room.jobs["b"]) == 1
