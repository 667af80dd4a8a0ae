"""Issue 51 (2, 3): every door's runs wait on the service's one job board, round robin between owners.
A first viewer sends 30 runs through a door, a second viewer one: the second starts within one run of
the next free slot, through the page's Generate, the API's ``/generate`` and the Images API alike.
The real Manager and its board; the fake in-process engine (``tests/ui/fake_engines.py``) with a
gate that lets one run finish at a time, so nothing here waits for a duration."""

from __future__ import annotations

import asyncio
import re
import threading
import types

import httpx
import pytest

from backend.serving.jobs import JobState
from tests.ui.fake_engines import start_manager, until
from ui.handlers import Studio
from web.api import ApiKeys, build_api

FIRST = 30


class Gate:
    """Wraps the engine's run: records each run's label as it starts and holds it until ``let_one``."""

    def __init__(self, engine):
        self.started: list[str] = []
        self._go = threading.Semaphore(0)
        run = engine._run

        def gated(request, *args, **kwargs):
            self.started.append(request.typed or request.prompt)
            self._go.acquire(timeout=60)
            return run(request, *args, **kwargs)

        engine._run = gated

    def let_one(self) -> None:
        self._go.release()


@pytest.fixture
def room(tmp_path):
    manager, _launches = start_manager(tmp_path, max_queued_per_viewer=FIRST)
    gate = Gate(manager.engines["in-process"])
    yield manager, gate
    for _ in range(2 * FIRST):
        gate.let_one()
    manager.close()


def page(session: str):
    return types.SimpleNamespace(session_hash=session, headers={}, cookies={})


def through_the_page(manager, session: str, label: str):
    studio = Studio(manager)
    return lambda: studio.studio_tab.generate_from_page(label, 64, 64, "eager", 1, 0.0, 1, False, [],
                                                        page=page(session), progress=lambda *a, **k: None)


def through_generate(manager, session: str, label: str):
    studio = Studio(manager)
    return lambda: studio.api.api_generate(label, 64, 64, "eager", 1, 1, 0.0, page=page(session),
                                       progress=lambda *a, **k: None)


def through_the_images_api(manager, session: str, label: str):
    door = build_api(manager, ApiKeys({session: f"{session}-key-0123456789"}))

    def send():
        async def go():
            transport = httpx.ASGITransport(app=door, client=("127.0.0.1", 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:7860", timeout=120) as http:
                return await http.post("/v1/images/generations", json={"prompt": label, "size": "64x64", "steps": 1},
                                       headers={"authorization": f"Bearer {session}-key-0123456789"})
        answer = asyncio.run(go())
        assert answer.status_code == 200, answer.text
    return send


@pytest.mark.parametrize("door", [through_the_page, through_generate, through_the_images_api])
def test_a_second_viewers_run_starts_within_one_run_behind_a_first_viewers_thirty(room, door):
    manager, gate = room
    threads = []

    def submit(session: str, label: str) -> None:
        thread = threading.Thread(target=door(manager, session, label), daemon=True)
        thread.start()
        threads.append(thread)

    for i in range(FIRST):
        submit("first", f"first {i}")
    until(lambda: len(manager.board.jobs()) == FIRST, "the first viewer's thirty on the board")
    until(lambda: len(gate.started) == 1, "the first run to start")
    submit("second", "second")
    until(lambda: len(manager.board.jobs()) == FIRST + 1, "the second viewer's run on the board")
    gate.let_one()  # the first run ends: the next free slot
    until(lambda: len(gate.started) == 2, "the next run to start")
    assert gate.started[1] == "second"
    for _ in range(FIRST):
        gate.let_one()
    until(lambda: not manager.board.jobs(), "every run to end")
    for thread in threads:
        thread.join(60)
    assert len(manager.records) == FIRST + 1


def test_a_closed_page_leaves_the_board(room):
    """Its waiting runs leave at once, its running one stops at its next step (Gradio's unload event
    calls ``Studio.page_closed``); the next viewer's run goes next."""
    manager, gate = room
    studio = Studio(manager)
    outcomes = []
    for label, session in (("gone 0", "gone"), ("gone 1", "gone"), ("stays", "stays")):
        threading.Thread(target=lambda f=through_the_page(manager, session, label): outcomes.append(f()),
                         daemon=True).start()
        until(lambda want=1 + (label != "gone 0") + (label == "stays"): len(manager.board.jobs()) >= want,
              f"{label} on the board")
    until(lambda: gate.started == ["gone 0"], "the first run to start")
    studio.page_closed(page=page("gone"))
    until(lambda: [j.owner.ident for j in manager.board.jobs() if j.state is JobState.WAITING] == ["stays"],
          "the closed page's waiting run to leave")
    gate.let_one()
    until(lambda: gate.started == ["gone 0", "stays"], "the remaining run to go next")
    gate.let_one()
    until(lambda: not manager.board.jobs(), "the board to empty")
    assert [r.prompt for r in manager.records] == ["stays"]  # the closed page's run was stopped, not finished


def test_a_waiting_run_is_told_its_place_and_about_how_long_until_its_turn(room):
    """The board's place and a wait estimate from the compile table's steady figures (issue 51: "show
    the job board's own position and wait estimate"): none before the shape has a steady run, then
    what the run ahead should still take."""
    manager, gate = room
    studio, said = Studio(manager), []

    def run(session: str, label: str, progress=lambda *a, **k: None):
        thread = threading.Thread(target=lambda: studio.studio_tab.generate_from_page(
            label, 64, 64, "eager", 1, 0.0, 1, False, [], page=page(session), progress=progress), daemon=True)
        thread.start()
        return thread

    first = run("first", "measured")
    until(lambda: len(gate.started) == 1, "the first run to start")
    blind = run("second", "no figure yet", lambda *a, desc="", **k: said.append(desc))
    until(lambda: said, "the second run told its place")
    assert said[0] == "waiting for your turn — place 1 of 1"  # nothing measured yet: the place alone
    gate.let_one()  # the first run ends; the second starts, measured by nothing yet
    until(lambda: len(gate.started) == 2, "the second run to start")
    gate.let_one()
    for thread in (first, blind):
        thread.join(60)
    said.clear()
    ahead = run("first", "ahead")
    until(lambda: len(gate.started) == 3, "the run ahead to start")
    waiting = run("second", "waiting", lambda *a, desc="", **k: said.append(desc))
    until(lambda: said, "the waiting run told its place")
    assert re.fullmatch(r"waiting for your turn — place 1 of 1, about [0-9.]+ m?s", said[0]), said[0]
    for _ in range(2):
        gate.let_one()
    for thread in (ahead, waiting):
        thread.join(60)
