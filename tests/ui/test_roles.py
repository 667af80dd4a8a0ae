"""Who may do what: every operator handler refused for a viewer (state unchanged), allowed for the
operator; a viewer stops only its own run. Driven through the handlers with an OperatorKey, as the
page's events call them, over the real manager (``tests/ui/test_api.py`` posts the same events to a
running app)."""

import json
import types
from pathlib import Path

import gradio as gr
import pytest

from backend.errors import GenerationCancelled
from backend.serving.roles import COOKIE, OperatorKey, page_caller
from backend.shapes import Shape
from tests.conftest import plant_inductor_entry
from tests.ui.fake_engines import system_views, until
from ui.handlers import Studio


def page(cookie=None, session="s-viewer"):
    return types.SimpleNamespace(cookies={COOKIE: cookie} if cookie else {}, headers={}, session_hash=session)


@pytest.fixture
def room(manager):
    key = OperatorKey()
    return Studio(manager, key), key


OPERATOR_EVENTS = [
    ("start_tp", (2,)), ("stop_tp", ()), ("show_tp_logs", ()), ("start_replicas", (2,)), ("stop_replicas", ()),
    ("clear_plan", ()), ("clear_cache", ()), ("set_warm_only", (True,)),
    ("start_warmup", (["1:1 · 1024x1024"], "compiled")), ("export_bundle", ()),
    ("show_bundle", ("/nonexistent.bundle",)), ("import_bundle", ("/nonexistent.bundle",)),
    ("stop_compiling_worker", ()), ("log_out", ()),
]


def _handler(studio, name):
    """The page's handler ``name``, on whichever of the page's tabs holds it."""
    return next(getattr(tab, name) for tab in (studio.studio_tab, studio.compare_tab, studio.system_tab,
                                               studio.performance_tab, studio.api, studio) if hasattr(tab, name))


def _room_state(manager, launches, cache_dir, temp_dir):
    """Everything an operator event could change: the engines, the lock, warm-ups, the shapes, the
    worker groups made and their log reads, the compile cache's files, Gradio's temp folder (where
    an export writes)."""
    status = manager.status().to_json()
    return (status["engines"], status["tp"]["state"], status["tp"]["world_size"], status["replicas"]["size"],
            status["warm_only"], status["warmup"], status["shapes"], [(g.state, g.log_reads) for g in launches.made],
            sorted(p.name for p in cache_dir.rglob("*")), sorted(p.name for p in temp_dir.rglob("*")))


@pytest.mark.parametrize("name, args", OPERATOR_EVENTS)
def test_a_viewer_is_refused_every_operator_event_and_nothing_changes(room, manager, launches, cache_dir, name, args,
                                                                     tmp_path, monkeypatch):
    studio, key = room
    temp_dir = tmp_path / "gradio-temp"
    temp_dir.mkdir()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(temp_dir))
    manager.start_engine("tensor-parallel", 2)
    plant_inductor_entry(cache_dir, 100)
    before = _room_state(manager, launches, cache_dir, temp_dir)
    for who in (page(), page(cookie="forged"), page(cookie=key.token)):  # the link token is not the session key
        with pytest.raises(gr.Error, match="Not allowed for a viewer"):
            _handler(studio, name)(*args, page=who)
    assert _room_state(manager, launches, cache_dir, temp_dir) == before


def test_every_handler_that_asks_for_the_caller_is_in_the_list():
    """A handler that decides by the caller's role is an operator event above, except those that
    answer a viewer too (stop: its own run; page_role and show_tp_controls: which controls show; the
    status views and status_for: which sentences and details a viewer's page reads). Read from the source of every class
    in the page's handler modules (``Studio``, one class per tab, the door and the runs)."""
    import ast

    door_asks = {"caller", "call", "require_operator"}  # the door's ways of acting as the event's caller
    asking, classes = set(), 0
    for module in sorted((Path(__file__).resolve().parents[2] / "ui").glob("handlers*.py")):
        for cls in (n for n in ast.parse(module.read_text()).body if isinstance(n, ast.ClassDef)):
            classes += 1
            asking |= {f.name for f in cls.body if isinstance(f, ast.FunctionDef) and f.name not in door_asks
                       and any(isinstance(n, ast.Attribute) and n.attr in door_asks for n in ast.walk(f))}
    assert classes > 5, classes  # the tabs' handler classes, the door and the runs
    # (run, Generate's and Compare's: the caller owns its runs on the job board, whatever its role)
    answering_viewers = {"stop", "page_role", "show_tp_controls", "refresh_studio", "refresh_all", "status_for",
                         "run"}
    assert asking - answering_viewers == {name for name, _args in OPERATOR_EVENTS}
    assert answering_viewers <= asking  # each still asks (a stale name here would hide a new operator handler)


def test_the_operator_may_and_the_page_says_which_role(room, manager):
    studio, key = room
    operator = page(cookie=key.session_key, session="s-op")
    studio.system_tab.set_warm_only(True, page=operator)
    assert manager.status().warm_only is True
    studio.system_tab.start_warmup(["1:1 · 1024x1024"], "compiled", page=operator)
    until(lambda: not manager.status().warmup["running"], "the warm-up finished")
    assert manager.status().warmup["error"] is None and manager.table.warm_shapes("compiled") == [Shape(1024, 1024)]
    studio.system_tab.start_replicas(2, page=operator)
    assert manager.status().replicas["ready"] == 2
    studio.system_tab.stop_replicas(page=operator)
    line, *shown = studio.page_role(page=operator)
    assert "operator" in line and all(u["visible"] is True for u in shown)
    line, *shown = studio.page_role(page=page())
    assert "viewer" in line and all(u["visible"] is False for u in shown)


def test_a_viewers_page_hides_every_operator_control(manager):
    """``page_role`` answers one visibility update per operator control the page has (ui.app lists
    them): all hidden for a viewer, all shown for the operator."""
    from ui.app import build_ui

    key = OperatorKey()
    demo = build_ui(manager, key)
    event = next(f for f in demo.fns.values() if getattr(f.fn, "__name__", None) == "page_role")
    studio = event.fn.__self__
    controls = {block.elem_id or type(block).__name__ for block in event.outputs[1:]}
    assert len(event.outputs) - 1 == studio.operator_controls == 8
    assert {"tp-buttons", "tp-system-start", "tp-system-stop"} <= controls, controls  # tp-buttons: Start, Stop
    line, *shown = studio.page_role(page=page())
    assert "viewer" in line and len(shown) == 8 and all(u["visible"] is False for u in shown)
    line, *shown = studio.page_role(page=page(cookie=key.session_key, session="s-op"))
    assert "operator" in line and len(shown) == 8 and all(u["visible"] is True for u in shown)


def test_a_viewer_stops_only_its_own_run(room, manager, engine):
    studio, key = room
    request = manager.validate("a fox", 64, 64, steps=4, seed=0, mode="eager")
    alices_run = lambda: manager.generate(request, caller=page_caller(False, "s-alice"))  # noqa: E731

    with engine.hold(alices_run) as outcome:
        busy = manager.status().busy
        assert busy["mode"] == "eager" and "owner" not in busy  # sessions are not published
        assert "another viewer's" in studio.studio_tab.stop(page=page(session="s-bob"))  # said on the page
    assert "result" in outcome  # bob's stop changed nothing: alice's run finished

    with engine.hold(alices_run) as outcome:
        studio.studio_tab.stop(page=page(session="s-alice"))
    assert isinstance(outcome.get("error"), GenerationCancelled)

    with engine.hold(alices_run) as outcome:
        studio.studio_tab.stop(page=page(cookie=key.session_key, session="s-op"))  # the operator stops anyone's
    assert isinstance(outcome.get("error"), GenerationCancelled)
    assert len(manager.records) == 1 and manager.status().running == []


def test_the_operator_sees_an_uploaded_bundles_manifest_before_importing_it(room, manager, tmp_path):
    import dataclasses
    import io
    import json
    import tarfile

    studio, key = room
    operator = page(cookie=key.session_key, session="s-op")

    def bundle(**changes):
        manifest = dataclasses.replace(manager.bundle_manifest([{"mode": "compiled", "shape": "64x64",
                                                                     "compile_seconds": 2.0}]), **changes)
        path = tmp_path / f"b{len(list(tmp_path.glob('*.bundle')))}.bundle"
        data = json.dumps(manifest.to_json()).encode()
        with tarfile.open(path, "w") as tar:
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return str(path)

    shown, confirm = studio.system_tab.show_bundle(bundle(), page=operator)
    assert "compiled 64x64" in shown and "It applies to this install." in shown and "runs its author's code" in shown
    assert confirm["visible"] is True
    shown, confirm = studio.system_tab.show_bundle(bundle(dtype="bfloat16"), page=operator)
    assert "does not apply here: dtype" in shown and confirm["visible"] is False
    studio.system_tab.import_bundle(bundle(), page=operator)  # no files: nothing to write, and nothing refused


def test_a_forged_stop_with_any_owner_string_an_api_client_could_send_ends_nothing(room, manager, engine):
    """Issue 51 (1): API runs were owned by the string "api <caller>" and Stop compared the session a
    client sent, so a page sending "api key alice" as its session stopped Alice's run. Owners are
    typed now: no session string equals an API key's owner."""
    from backend.serving.roles import api_caller

    studio, _key = room
    request = manager.validate("a fox", 64, 64, steps=4, seed=0, mode="eager")
    alice = api_caller("alice", "127.0.0.1")
    with engine.hold(lambda: manager.run(request, alice)) as outcome:
        for forged in ("api key alice", "key alice", "alice", "api loopback 127.0.0.1", "loopback 127.0.0.1",
                       str(alice.owner), "api address 127.0.0.1", "local", ""):
            assert "another viewer's" in studio.studio_tab.stop(page=page(session=forged or None))
    assert "result" in outcome  # every forged stop changed nothing: Alice's run finished

def test_a_shape_warmed_from_a_bundle_is_labelled_so_in_the_shapes_table():
    from ui.views_system import shapes_frame

    row = {"mode": "compiled", "shape": "64x64", "state": "warm", "compile_seconds": 0.4, "steady_seconds": 0.1,
           "runs": 1, "error": None, "bundle_compile_seconds": 21.5}
    frame = shapes_frame([row, {**row, "shape": "80x80", "bundle_compile_seconds": None}])
    assert frame.iloc[0, 2].endswith("(from a bundle)") and frame.iloc[0, 3] == "21.50 (from a bundle)"
    assert frame.iloc[1, 3] == 0.4


def test_a_viewer_reads_only_what_a_viewer_can_do(room, manager):
    """Every sentence a viewer's page shows names only what a viewer can do: no "press Start group",
    no "Start some" replicas, no TP degree that would do nothing; a TP click runs in process and says why."""
    studio, key = room
    viewer = page()
    degree, group_row = studio.studio_tab.show_tp_controls("tp", page=viewer)
    assert degree["visible"] is False and group_row["visible"] is True  # the group's state, not its buttons
    engine, cost, _badges, _tp, generate, _end = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2, page=viewer)
    assert "operator has not started" in cost and "Generate runs in process" in cost
    assert generate["interactive"] is True
    replicas = system_views(studio, page=viewer)[5]
    assert "operator can start replicas" in replicas
    shown = " ".join([cost, replicas, engine])
    for operator_words in ("press", "Start group", "Start some", "Start replicas"):
        assert operator_words not in shown, operator_words
    _p, info, record, *_ = studio.studio_tab.generate_from_page("a fox", 64, 64, "tp", 2, 1.0, 1, False, [],
                                                                page=viewer)
    assert record["mode"] == "eager" and record["requested_mode"] == "tp"
    assert "operator has not started the tensor-parallel group" in record["degraded"]
    # The operator's page names the button, and shows the degree.
    operator = page(cookie=key.session_key, session="s-operator")
    assert "press **Start group**" in studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2, page=operator)[1]
    assert studio.studio_tab.show_tp_controls("tp", page=operator)[0]["visible"] is True


def test_a_run_an_api_client_owns_cannot_be_stopped_by_a_sessionless_or_other_caller(room, manager, engine):
    """Stop posted by hand without a session owns nothing: it no longer ends an API client's run, a
    Compare, or a warm-up (which only the operator stops)."""
    studio, key = room
    api_client = page(session="s-api")
    api_run = lambda: studio.api.api_generate("a fox", 64, 64, "eager", 4, 1, 1.0, page=api_client)  # noqa: E731
    with engine.hold(api_run) as outcome:
        for who in (page(session=None), page(session="s-someone-else")):
            assert "another viewer's" in studio.studio_tab.stop(page=who)
    assert "result" in outcome and outcome["result"][1]["seed"] == 1  # the API client got its image
    warmup_run = lambda: manager.generate(manager.validate("a fox", 64, 64, steps=4, seed=0, mode="eager"),  # noqa: E731
                                          _warming=True)
    with engine.hold(warmup_run) as outcome:
        assert "another viewer's" in studio.studio_tab.stop(page=page(session=None))
    assert "result" in outcome  # a warm-up has no owner: no viewer stops it


def test_a_viewer_reads_no_socket_pids_cache_paths_or_log_lines(room, manager):
    """Issue 33 (5): the status a viewer's page and a viewer's /status get leaves out the worker
    socket, process ids and cache folders, and cuts each error to its first line; the operator's
    is whole."""
    studio, key = room
    manager.start_engine("tensor-parallel", 2, wait=True)
    manager.start_engine("replicas", 1, wait=True)
    manager.last_error = "RuntimeError: boom\n[rank 1] a line of its log"
    whole = studio.status_for(page(cookie=key.session_key, session="s-operator")).to_json()
    seen = studio.status_for(page()).to_json()
    assert whole["tp"]["socket"] and whole["tp"]["rank_pids"] and whole["cache"]["dir"]
    text = json.dumps(seen)
    assert whole["tp"]["socket"] not in text and whole["cache"]["dir"] not in text
    assert not {"socket", "pids", "rank_pids"} & set(seen["tp"])
    assert all("pid" not in r for r in seen["tp"]["ranks"] + seen["replicas"]["replicas"])
    assert seen["last_error"] == "RuntimeError: boom" and seen["tp"]["state"] == "ready"
    panel = " ".join(map(str, system_views(studio, page=page())))
    assert "| Rank pids | … |" in panel and whole["cache"]["dir"] not in panel  # the System tab, a viewer's


def test_the_operator_logs_out_and_the_old_cookie_and_link_are_a_viewers(room):
    """Issue 33 (9): Log out gives the run a new operator key: the page that pressed it, and the
    link it came in by, are a viewer's from then on; a viewer's Log out changes nothing."""
    studio, key = room
    old_cookie, old_token = key.session_key, key.token
    with pytest.raises(gr.Error):
        studio.system_tab.log_out(page())
    assert key.session_key == old_cookie and key.token == old_token
    operator = page(cookie=old_cookie, session="s-operator")
    assert studio.door.caller(operator).is_operator
    studio.system_tab.log_out(operator)
    assert not studio.door.caller(operator).is_operator and not key.check_token(old_token)
    assert key.check_token(key.token) and studio.door.caller(page(cookie=key.session_key)).is_operator
