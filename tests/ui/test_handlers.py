"""UI handlers against a fake manager: what the page shows for each outcome."""

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest
from PIL import Image

from backend.errors import GenerationCancelled, GenerationFailed
from backend.pngmeta import read_png_parameters
from backend.records import ProgressEvent
from backend.shapes import PRESETS, Shape
from ui import views


def recorder():
    calls = []
    return calls, lambda value=None, desc="", **kw: calls.append((value, desc))


def test_generate_shows_image_timings_seed_and_history(studio, fake):
    fake.progress_events = [ProgressEvent("encoding", 0, 4), ProgressEvent("compiling", 0, 4),
                            ProgressEvent("denoising", 2, 4), ProgressEvent("decoding", 4, 4)]
    calls, progress = recorder()
    path, info, record, seed, gallery, state = studio.generate_from_page(
        "a fox", 256, 128, "compiled", 4, 1.0, 0, True, [], progress=progress)
    assert Path(path).is_file() and read_png_parameters(path)["seed"] == seed == record["seed"]
    assert "**256x128**" in info and "compiled 1 graph(s)" in info and f"`{seed}`" in info
    assert gallery == state and gallery[0][0] == path and "compiled" in gallery[0][1]
    assert [desc for _v, desc in calls] == ["encoding…", "compiling…", "denoising step 2/4", "decoding…"]
    assert calls[2][0] == (2, 4)
    # the same seed again, not randomised; history grows newest first
    path2, info2, record2, seed2, gallery2, _ = studio.generate_from_page("a fox", 256, 128, "compiled", 4, 1.0, 77,
                                                                          False, state, progress=progress)
    assert seed2 == 77 and "no compile (warm)" in info2 and len(gallery2) == 2 and gallery2[0][0] == path2


@pytest.mark.parametrize("width, message", [(1000, "nearest valid size is 1008x128"), ("x", "whole number")])
def test_bad_sizes_are_page_errors_with_the_fix(studio, fake, width, message):
    with pytest.raises(gr.Error, match=message):
        studio.generate_from_page("a fox", width, 128, "eager", 4, 1.0, 0, True, [])
    assert not [c for c in fake.calls if c[0] == "generate"]


def test_backend_errors_become_gr_errors_and_stop_is_not_an_error(studio, fake):
    fake.raise_on_generate = GenerationFailed("RuntimeError in the pipeline: boom")
    with pytest.raises(gr.Error, match="boom"):
        studio.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 0, True, [])
    fake.raise_on_generate = GenerationCancelled("stopped after step 2 of 50")
    out = studio.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 0, True, [])
    assert "Stopped" in out[1]
    studio.stop()
    assert ("cancel",) in fake.calls


def _tp_calls(fake):
    return [c for c in fake.calls if c[0] in ("start_tp", "stop_tp")]


def test_picking_a_mode_starts_and_stops_nothing(studio, fake):
    from ui.app import build_ui

    demo = build_ui(fake)
    mode = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "mode")
    wired = {f.fn.__name__ for f in demo.fns.values() if any(t[0] == mode._id for t in f.targets)}
    assert wired == {"show_tp_controls", "refresh_studio"}  # the mode list only shows and refreshes
    assert [u["visible"] for u in studio.show_tp_controls("tp")] == [True, True]
    _engine, cost, _badges, tp_badge = studio.refresh_studio("tp", 64, 64, 4, 2)
    assert 'data-state="stopped"' in tp_badge and cost.startswith("**Stopped**")
    fake.set_tp("ready")
    assert [u["visible"] for u in studio.show_tp_controls("eager")] == [False, False]
    studio.refresh_all("eager", 64, 64, 4, 2)
    assert not _tp_calls(fake) and fake.tp["state"] == "ready"  # leaving TP mode leaves the group running


def test_start_and_stop_are_the_buttons(studio, fake):
    studio.start_tp(4)
    assert _tp_calls(fake) == [("start_tp", 4)] and fake.tp["world_size"] == 4
    studio.start_tp(2.0)  # a running group of another degree is replaced
    assert _tp_calls(fake)[-1] == ("start_tp", 2) and fake.tp["world_size"] == 2
    studio.start_tp(None)  # an empty box: the default degree
    assert _tp_calls(fake)[-1] == ("start_tp", None)
    with pytest.raises(gr.Error, match="does not divide the model's 4 attention heads; use one of 1, 2, 4"):
        studio.start_tp(3)
    with pytest.raises(gr.Error, match="The TP degree is not valid: must be a whole number, got 2.5"):
        studio.start_tp(2.5)
    studio.stop_tp()
    assert _tp_calls(fake)[-1] == ("stop_tp",) and fake.tp["state"] == "stopped"
    calls = len(fake.calls)
    studio.stop_tp()  # already stopped: nothing to do
    assert len(fake.calls) == calls


def test_a_new_page_takes_the_running_groups_degree(studio, fake):
    assert all(isinstance(v, type(gr.skip())) for v in studio.page_opened())
    fake.start_tp(4)
    assert studio.page_opened() == (4, 4)


def test_tp_cost_line_says_what_to_do_and_what_it_costs(studio, fake):
    engine, cost, badges, tp_badge = studio.refresh_studio("tp", 64, 64, 4, 2)
    assert cost.startswith("**Stopped**") and "press **Start group**" in cost
    assert "launches 2 processes that each load the model" in cost and "no start measured yet" in cost
    assert "tensor-parallel group **stopped**" in engine and badges == views.badges_html([])
    assert "launches 4 processes" in studio.refresh_studio("tp", 64, 64, 4, 4)[1]

    fake.start_tp(2)
    engine, cost, _b, tp_badge = studio.refresh_studio("tp", 64, 64, 4, 2)
    assert cost.startswith("**Starting**") and "(2 ranks) is launching" in cost and "served in process" in cost
    assert 'data-state="launching"' in tp_badge and "group **launching** (2 ranks)" in engine
    fake.set_tp("warming")
    assert "is warming" in studio.refresh_studio("tp", 64, 64, 4, 2)[1]

    fake.set_tp("ready")
    engine, cost, badges, tp_badge = studio.refresh_studio("tp", 64, 64, 4, 2)
    # each rank runs eager (--tp-compile), which compiles nothing on this device
    assert cost.startswith("**Ready**") and "(tp mode does not compile on this device)" in cost
    assert "ready group of 2 ranks" in cost and 'data-shape="1024x1024" data-state="warm"' in badges
    assert 'data-state="ready"' in tp_badge and "group **ready** (2 ranks)" in engine
    cost = studio.refresh_studio("tp", 64, 64, 4, 4)[1]
    assert "ready group of 2 ranks, not 4: **Start group** replaces it" in cost

    fake.stop_tp()
    cost = studio.refresh_studio("tp", 64, 64, 4, 2)[1]
    assert cost.startswith("**Stopped**") and "its last start took 2.5 s to load and warm up" in cost
    assert "its last start, with 2 ranks, took 2.5 s" in studio.refresh_studio("tp", 64, 64, 4, 4)[1]

    fake.set_tp("dead", error="rank 1 exited with signal SIGKILL")
    engine, cost, _b, tp_badge = studio.refresh_studio("tp", 64, 64, 4, 2)
    assert cost.startswith("**Down**") and "rank 1 exited with signal SIGKILL" in cost
    assert "Press **Start group**" in cost and 'served in process (eager, "degraded")' in cost
    assert 'data-state="dead"' in tp_badge and "group **dead**" in engine and "degraded:" in engine


def test_runs_served_in_process_while_the_group_is_down_say_so(studio, fake):
    with pytest.raises(gr.Error, match="press|Start"):  # never started: nothing serves TP
        studio.generate_from_page("a fox", 64, 64, "tp", 2, 1.0, 1, False, [])
    fake.set_tp("dead", error="rank 1 exited with code 1")
    with pytest.warns(UserWarning, match="degraded"):  # gr.Warning outside a request
        _p, info, record, _s, gallery, _h = studio.generate_from_page("a fox", 64, 64, "tp", 2, 1.0, 1, False, [])
    assert (record["mode"], record["requested_mode"]) == ("eager", "tp") and "dead" in record["degraded"]
    assert ", served in process (eager) instead of tp, 2 steps" in info
    assert info.endswith("**Degraded** — the tensor-parallel group is dead (rank 1 exited with code 1).")
    assert ", tp" not in info and "eager in process (tp down)" in gallery[0][1]
    fake.set_tp("ready")
    _p, info, record, _s, gallery, _h = studio.generate_from_page("a fox", 64, 64, "tp", 2, 1.0, 1, False, [])
    assert record["mode"] == "tp" and record["degraded"] is None
    assert ", tp (2 ranks)," in info and "served in process" not in info and "tp ×2" in gallery[0][1]


def test_the_timer_reads_no_logs_and_the_logs_button_does(studio, fake):
    fake.set_tp("ready")
    for _ in range(3):
        studio.refresh_all("tp", 64, 64, 4, 2)
    assert not [c for c in fake.calls if c[0] == "tp_logs"]
    logs = studio.show_tp_logs()
    assert fake.calls[-1] == ("tp_logs", 20) and "── rank 1 ──\nrank 1/2 starting" in logs
    assert "torchrun" not in logs  # empty tails are left out


def test_system_panel_shows_the_group_and_its_ranks(studio, fake):
    *_rest, tp_badge, tp_md, status = studio.refresh_system()
    assert 'data-state="stopped"' in tp_badge and "| State | stopped |" in tp_md and "| Rank |" not in tp_md
    assert "| Ranks | 2 |" in tp_md  # never started: the degree a Start would launch
    fake.start_tp(4)
    *_rest, tp_badge, tp_md, status = studio.refresh_system()
    assert "| State | launching |" in tp_md and "| Ranks | 4 |" in tp_md and "| Rank |" not in tp_md
    fake.set_tp("ready")
    *_rest, tp_badge, tp_md, status = studio.refresh_system()
    assert "0: 11, 1: 12, 2: 13, 3: 14" in tp_md and "| Load / warm-up | 2.0 s / 0.5 s |" in tp_md
    assert "| 3 | 14 | n/a | cpu | 3.00 | 2.00 | 1.00 | 6 weights sharded |" in tp_md
    assert "logs" not in status["tp"]


def test_cost_line_and_badges_follow_the_compile_state(studio, fake):
    engine, cost, badges, _tp = studio.refresh_studio("compiled", 1024, 1024, 4)
    assert engine.startswith(f"**{fake.status()['model']['label']}** on **cpu (float32)** · ready")
    assert cost == ("**Cold** — **1024x1024** in **compiled** mode: it will compile first "
                    "(no compile measured yet in this mode to estimate from).")
    assert 'data-shape="1024x1024" data-state="cold"' in badges
    studio.generate_from_page("a fox", 1024, 1024, "compiled", 4, 1.0, 0, True, [])  # compiles in 1.5 s
    _e, cost, badges, _tp = studio.refresh_studio("compiled", 1024, 1024, 4)
    assert cost.startswith("**Ready**") and "no steady timing yet" in cost
    assert 'data-shape="1024x1024" data-state="warm"' in badges
    studio.generate_from_page("a fox", 1024, 1024, "compiled", 4, 1.0, 0, True, [])  # steady: 0.1 + 4 x 0.05 + 0.1 s
    _e, cost, badges, _tp = studio.refresh_studio("compiled", 1024, 1024, 4)
    assert "**Ready**" in cost and "expected 400 ms" in cost and 'data-shape="1024x1024" data-state="warm"' in badges
    assert 'data-shape="1152x896" data-state="cold"' in badges
    assert "it will compile first (estimated 1.5 s from past compiles)" in studio.refresh_studio(
        "compiled", 1152, 896, 4)[1]
    fake.set_warm_only(True)
    _e, cost, badges, _tp = studio.refresh_studio("compiled", 1152, 896, 4)
    assert "**Refused**" in cost and 'data-shape="1152x896" data-state="locked"' in badges
    _e, cost, _b, _tp = studio.refresh_studio("compiled", 1000, 1024, 4)
    assert cost.startswith("**Invalid** — The image size is not valid: width 1000") and "1008x1024" in cost


def test_presets_and_custom_sizes_stay_in_step(studio):
    assert studio.preset_changed("16:9 · 1344x768", 0, 0) == (1344, 768)
    for name, shape in PRESETS:  # every preset sets both boxes, and a size that is a preset names it
        label = views.preset_label(name, shape)
        assert studio.preset_changed(label, 1000, 768) == (shape.width, shape.height), label
        assert studio.size_changed(shape.width, shape.height) == label
    assert studio.size_changed(1000, 768) == views.CUSTOM
    # Custom leaves width and height as they are: an update with no value for each, not a size.
    keep = {"__type__": "update"}
    assert gr.skip() == keep and studio.preset_changed(views.CUSTOM, 1000, 768) == (keep, keep)


def test_load_parameters_from_png_fills_the_controls(studio, fake, tmp_path):
    path, *_ = studio.generate_from_page("a lighthouse", 256, 128, "regional", 7, 1.0, 4242, False, [])
    prompt, width, height, preset, steps, guidance, seed, randomize, mode = studio.load_png(path)
    assert (prompt, width, height, preset, steps, seed, randomize, mode) == (
        "a lighthouse", 256, 128, views.CUSTOM, 7, 4242, False, "regional")
    plain = tmp_path / "plain.png"
    Image.new("RGB", (8, 8)).save(plain)
    with pytest.warns(UserWarning, match="no generation parameters"):  # gr.Warning outside a request
        assert all(isinstance(v, type(gr.skip())) for v in studio.load_png(str(plain)))
    (tmp_path / "not.png").write_text("hello")
    with pytest.raises(gr.Error, match="not a readable PNG"):
        studio.load_png(str(tmp_path / "not.png"))


def test_system_panel_table_warmup_lock_and_cache(studio, fake):
    studio.generate_from_page("a fox", 64, 64, "compiled", 4, 1.0, 0, True, [])
    info, table, warm, _tp_badge, _tp, status = studio.refresh_system()
    cache = status["cache"]["caches"][0]
    assert f"| Model | {status['model']['label']} |" in info and "| Device | cpu — requested |" in info
    assert f"| Compile cache | `{cache['dir']}` ({views._bytes(cache['bytes'])}, TORCHINDUCTOR_CACHE_DIR) |" in info
    assert list(table.columns) == ["mode", "shape", "state", "compile s", "steady s", "runs", "error"]
    assert table.iloc[0]["state"] == "warm"
    turkish = views.shapes_frame(status, "tr")
    assert list(turkish.columns)[:3] == ["mod", "boyut", "durum"] and turkish.iloc[0]["durum"] == "sıcak"
    studio.start_warmup(["1:1 · 1024x1024", "16:9 · 1344x768"], "compiled")
    assert ("warmup", (Shape(1024, 1024), Shape(768, 1344)), "compiled") in fake.calls
    studio.set_warm_only(True)
    assert fake.warm_only is True
    studio.clear_cache()
    assert ("clear",) in fake.calls


def test_performance_frames_come_from_the_records(studio, fake):
    for mode in ("eager", "compiled", "compiled"):
        studio.generate_from_page("a fox", 64, 64, mode, 4, 1.0, 1, False, [])
    latency, compile_times = studio.refresh_plots()
    latency, compile_times = (pd.DataFrame(p.value["data"], columns=p.value["columns"])
                              for p in (latency, compile_times))
    assert set(latency["mode"]) == {"eager", "compiled"}  # compiling runs are left out of latency
    assert list(compile_times["shape · mode"]) == ["64x64 · compiled"]


def _page(accept_language):
    return SimpleNamespace(headers={"accept-language": accept_language})


def test_plot_axes_follow_the_page_language(studio):
    latency, compile_times = studio.refresh_plots(page=_page("tr-TR,tr;q=0.9"))
    assert (latency.x_title, latency.y_title) == ("megapiksel", "görsel başına saniye")
    assert compile_times.y_title == "derleme saniyesi"
    latency, _ = studio.refresh_plots(page=_page("en-US"))
    assert latency.y_title == "seconds per image"


def test_gradio_tracks_progress_for_the_device_handlers(studio):
    """Gradio injects its progress tracker only into a parameter whose default is ``gr.Progress()``;
    with anything else the page's progress bar never follows the denoising steps."""
    from gradio.helpers import special_args
    for handler, n_inputs in ((studio.generate_from_page, 9), (studio.api_generate, 7), (studio.compare, 8)):
        progress_index = special_args(handler, [None] * n_inputs)[1]
        assert progress_index is not None, handler.__name__


def test_compare_shows_side_by_side_with_max_difference(studio, fake):
    gallery, table = studio.compare("a fox", 64, 64, 4, 1.0, 3, False, ["eager", "compiled", "regional"])
    assert [row["mode"] for _i, row in table.iterrows()] == ["eager", "compiled", "regional"]
    assert list(table["max |Δ| vs first (0-255)"]) == [0, 1, 5]
    assert len(gallery) == 3 and all(Path(p).is_file() for p, _c in gallery)


def test_api_generate_returns_png_and_record(studio):
    path, record = studio.api_generate("a fox", 64, 64, "eager", 2, 5, 1.0)
    assert Path(path).is_file() and record["seed"] == 5 and record["steps"] == 2


def _manager_names_the_ui_uses() -> set[str]:
    """Every ``manager.X`` and ``self.manager.X`` in ui/handlers.py and ui/app.py."""
    names = set()
    for file in ("handlers.py", "app.py"):
        tree = ast.parse((Path(__file__).resolve().parents[2] / "ui" / file).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "manager") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "manager"
                    and isinstance(owner.value, ast.Name) and owner.value.id == "self"):
                names.add(node.attr)
    return names


def _public_parameters(method) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(method).parameters.values()
            if not p.name.startswith("_")]


def test_the_fake_manager_has_the_real_managers_surface(fake):
    """What the page uses of the manager exists on both, with the same parameters (names, order,
    defaults), so the handler tests drive the UI the way the real manager is driven."""
    from backend.manager import Manager

    real = Manager(fake.settings)
    used = _manager_names_the_ui_uses()
    assert {"generate", "status", "predict", "validate", "start_tp", "settings", "modes"} <= used, used
    for name in sorted(used):
        assert hasattr(real, name), f"the UI uses manager.{name}, which the real Manager does not have"
        assert hasattr(fake, name), f"the UI uses manager.{name}, which the fake manager does not have"
        real_value, fake_value = getattr(real, name), getattr(fake, name)
        if callable(real_value):
            assert callable(fake_value), name
            assert _public_parameters(fake_value) == _public_parameters(real_value), name
        else:
            assert type(fake_value) is type(real_value), name


def test_ui_imports_no_torch():
    for file in Path(__file__).resolve().parents[2].joinpath("ui").glob("*.py"):
        tree = ast.parse(file.read_text())
        names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
        names |= {node.module.split(".")[0] for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module}
        assert "torch" not in names and "diffusers" not in names, file


@pytest.mark.parametrize("model", ["embedded", "embedded-random"])
def test_the_first_page_fits_the_model(model, tmp_path):
    # The trained embedded model starts (page and API) at a size it was trained at, the page with a
    # prompt from its grammar; any other model at the first preset with an empty prompt.
    from tests.ui.fake_manager import FakeManager
    from ui.app import ASSETS, build_ui

    demo = build_ui(FakeManager(tmp_path, model=model))
    value = {b.elem_id: b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) and hasattr(b, "value")}
    api = {b.label: b.value for b in demo.blocks.values() if type(b).__name__ == "RawNumber"}
    assert (api["width"], api["height"]) == (value["width"], value["height"])  # the API's defaults too
    examples = views.load_example_prompts(ASSETS / "prompts.txt")
    if model == "embedded":
        assert (value["width"], value["height"], value["preset"]) == (256, 256, views.CUSTOM)
        assert value["prompt"] == examples[0]
    else:
        name, shape = PRESETS[0]
        assert (value["width"], value["height"]) == (shape.width, shape.height)
        assert value["preset"] == views.preset_label(name, shape) and value["prompt"] == ""
