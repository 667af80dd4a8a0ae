"""Who may do what: every operator handler refused for a viewer (state unchanged), allowed for the
operator; a viewer stops only its own run. Driven through the handlers with an OperatorKey, as the
page's events call them (``tests/ui/test_room.py`` posts the same events to a running app)."""

import types

import gradio as gr
import pytest

from backend.roles import COOKIE, OperatorKey
from ui.handlers import Studio


def page(cookie=None, session="s-viewer"):
    return types.SimpleNamespace(cookies={COOKIE: cookie} if cookie else {}, headers={}, session_hash=session)


@pytest.fixture
def room(fake):
    key = OperatorKey()
    return Studio(fake, key), key


OPERATOR_EVENTS = [
    ("start_tp", (2,)), ("stop_tp", ()), ("show_tp_logs", ()), ("clear_plan", ()), ("clear_cache", ()),
    ("set_warm_only", (True,)), ("start_warmup", (["1:1 · 1024x1024"], "compiled")), ("export_bundle", ()),
    ("show_bundle", ("/nonexistent.bundle",)), ("import_bundle", ("/nonexistent.bundle",)),
]


@pytest.mark.parametrize("name, args", OPERATOR_EVENTS)
def test_a_viewer_is_refused_every_operator_event_and_nothing_changes(room, fake, name, args):
    studio, key = room
    fake.set_tp("ready")
    before = (fake.status()["tp"]["state"], fake.status()["warm_only"], list(fake.calls))
    for who in (page(), page(cookie="forged"), page(cookie=key.token)):  # the link token is not the session key
        with pytest.raises(gr.Error, match="Not allowed for a viewer"):
            getattr(studio, name)(*args, page=who)
    assert (fake.status()["tp"]["state"], fake.status()["warm_only"], list(fake.calls)) == before


def test_the_operator_may_and_the_page_says_which_role(room, fake):
    studio, key = room
    operator = page(cookie=key.session_key, session="s-op")
    studio.set_warm_only(True, page=operator)
    assert fake.status()["warm_only"] is True
    studio.start_warmup(["1:1 · 1024x1024"], "compiled", page=operator)
    assert fake.calls[-1][0] == "warmup"
    line, *shown = studio.page_role(page=operator)
    assert "operator" in line and all(u["visible"] is True for u in shown)
    line, *shown = studio.page_role(page=page())
    assert "viewer" in line and all(u["visible"] is False for u in shown)


def test_a_viewer_stops_only_its_own_run(room, fake):
    studio, key = room
    real = fake._real
    with real._state_lock:
        real._current = {"mode": "eager", "shape": "64x64", "owner": "s-alice", "started": 0.0}
    with pytest.raises(gr.Error, match="another viewer's"):
        studio.stop(page=page(session="s-bob"))
    assert not real._cancel.is_set()
    studio.stop(page=page(session="s-alice"))
    assert real._cancel.is_set()
    real._cancel.clear()
    studio.stop(page=page(cookie=key.session_key, session="s-op"))  # the operator stops anyone's
    assert real._cancel.is_set()
    assert "owner" not in (real.status()["busy"] or {})  # sessions are not published


def test_the_operator_sees_an_uploaded_bundles_manifest_before_importing_it(room, fake, tmp_path):
    import dataclasses
    import io
    import json
    import tarfile

    studio, key = room
    operator = page(cookie=key.session_key, session="s-op")

    def bundle(**changes):
        manifest = dataclasses.replace(fake._real.bundle_manifest([{"mode": "compiled", "shape": "64x64",
                                                                     "compile_seconds": 2.0}]), **changes)
        path = tmp_path / f"b{len(list(tmp_path.glob('*.bundle')))}.bundle"
        data = json.dumps(manifest.to_json()).encode()
        with tarfile.open(path, "w") as tar:
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return str(path)

    shown, confirm = studio.show_bundle(bundle(), page=operator)
    assert "compiled 64x64" in shown and "It applies to this install." in shown and "runs its author's code" in shown
    assert confirm["visible"] is True
    shown, confirm = studio.show_bundle(bundle(dtype="bfloat16"), page=operator)
    assert "does not apply here: dtype" in shown and confirm["visible"] is False
    studio.import_bundle(bundle(), page=operator)  # no files: nothing to write, and nothing refused


def test_the_page_handler_asks_gradios_queue_whether_its_session_still_waits():
    studio = Studio(manager=None)
    job = types.SimpleNamespace(session_hash="s-1", alive=True)
    studio.blocks = types.SimpleNamespace(_queue=types.SimpleNamespace(active_jobs=[[job], None]))
    alive = studio._still_wanted(types.SimpleNamespace(session_hash="s-1"))
    assert alive() is True
    job.alive = False  # Gradio's clean_events when the page's event stream closed
    assert alive() is False
    assert studio._still_wanted(types.SimpleNamespace(session_hash=None)) is None


def test_a_shape_warmed_from_a_bundle_is_labelled_so_in_the_shapes_table():
    from ui import views

    row = {"mode": "compiled", "shape": "64x64", "state": "warm", "compile_seconds": 0.4, "steady_seconds": 0.1,
           "runs": 1, "error": None, "bundle_compile_seconds": 21.5}
    frame = views.shapes_frame({"shapes": [row, {**row, "shape": "80x80", "bundle_compile_seconds": None}]})
    assert frame.iloc[0, 2].endswith("(from a bundle)") and frame.iloc[0, 3] == "21.50 (from a bundle)"
    assert frame.iloc[1, 3] == 0.4
