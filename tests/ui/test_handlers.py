"""UI handlers against a fake manager: what the page shows for each outcome."""

import ast
from pathlib import Path

import gradio as gr
import pytest
from PIL import Image

from backend.errors import GenerationCancelled, GenerationFailed
from backend.pngmeta import read_png_parameters
from backend.records import ProgressEvent
from backend.shapes import Shape
from tests.ui.fake_manager import FakeManager
from ui import views
from ui.handlers import Studio


@pytest.fixture
def fake(tmp_path):
    return FakeManager(tmp_path)


@pytest.fixture
def studio(fake):
    return Studio(fake)


def recorder():
    calls = []
    return calls, lambda value=None, desc="", **kw: calls.append((value, desc))


def test_generate_shows_image_timings_seed_and_history(studio, fake):
    fake.progress_events = [ProgressEvent("encoding", 0, 4), ProgressEvent("compiling", 0, 4),
                            ProgressEvent("denoising", 2, 4), ProgressEvent("decoding", 4, 4)]
    calls, progress = recorder()
    path, info, record, seed, gallery, state = studio.generate_from_page(
        "a fox", 256, 128, "compiled", 4, 1.0, 0, True, [], progress)
    assert Path(path).is_file() and read_png_parameters(path)["seed"] == seed == record["seed"]
    assert "**256x128**" in info and "compiled 1 graph(s)" in info and f"`{seed}`" in info
    assert gallery == state and gallery[0][0] == path and "compiled" in gallery[0][1]
    assert [desc for _v, desc in calls] == ["encoding…", "compiling…", "denoising step 2/4", "decoding…"]
    assert calls[2][0] == (2, 4)
    # the same seed again, not randomised; history grows newest first
    path2, info2, record2, seed2, gallery2, _ = studio.generate_from_page("a fox", 256, 128, "compiled", 4, 1.0, 77, False,
                                                                 state, progress)
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


def test_selecting_tensor_parallel_starts_the_group_and_leaving_it_stops_it(studio, fake):
    studio.mode_changed("tp", 2)
    assert ("start_tp", 2) in fake.calls
    _engine, cost, _badges = studio.refresh_studio("tp", 64, 64, 4)
    assert cost.startswith("**Starting**") and "loading" in cost
    *_rest, tp_md, logs, _status = studio.refresh_system()
    assert "| State | loading |" in tp_md and "0: 11, 1: 12" in tp_md and "rank 0/2 starting" in logs
    studio.mode_changed("eager", 2)
    deadline = __import__("time").monotonic() + 5
    while ("stop_tp",) not in fake.calls:  # stopped in the background
        assert __import__("time").monotonic() < deadline
    with pytest.raises(gr.Error, match="does not divide"):
        studio.mode_changed("tp", 3)


def test_cost_line_and_badges_follow_the_compile_state(studio, fake):
    engine, cost, badges = studio.refresh_studio("compiled", 1024, 1024, 4)
    assert "fake-model" in engine and "**Cold**" in cost and "estimated 2.0 s" in cost
    assert 'data-shape="1024x1024" data-state="cold"' in badges
    studio.generate_from_page("a fox", 1024, 1024, "compiled", 4, 1.0, 0, True, [])
    _e, cost, badges = studio.refresh_studio("compiled", 1024, 1024, 4)
    assert "**Ready**" in cost and "expected 500 ms" in cost and 'data-shape="1024x1024" data-state="warm"' in badges
    assert 'data-shape="1152x896" data-state="cold"' in badges
    fake.set_warm_only(True)
    _e, cost, badges = studio.refresh_studio("compiled", 1152, 896, 4)
    assert "**Refused**" in cost and 'data-shape="1152x896" data-state="locked"' in badges
    _e, cost, _b = studio.refresh_studio("compiled", 1000, 1024, 4)
    assert cost.startswith("**Invalid** — size:") and "1008x1024" in cost


def test_presets_and_custom_sizes_stay_in_step(studio):
    assert studio.preset_changed("16:9 · 1344x768", 0, 0) == (1344, 768)
    assert studio.size_changed(1344, 768) == "16:9 · 1344x768"
    assert studio.size_changed(1000, 768) == views.CUSTOM
    assert all(v is not None for v in studio.preset_changed(views.CUSTOM, 1, 2))


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
    info, table, warm, _tp, _logs, status = studio.refresh_system()
    assert "fake-model" in info and "/tmp/x" in info and "2.0 KB" in info
    assert list(table.columns) == views.SHAPE_COLUMNS and table.iloc[0]["state"] == "warm"
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
    assert set(latency["mode"]) == {"eager", "compiled"}  # compiling runs are left out of latency
    assert list(compile_times["shape · mode"]) == ["64x64 · compiled"]


def test_compare_shows_side_by_side_with_max_difference(studio, fake):
    gallery, table = studio.compare("a fox", 64, 64, 4, 1.0, 3, False, ["eager", "compiled", "regional"])
    assert [row["mode"] for _i, row in table.iterrows()] == ["eager", "compiled", "regional"]
    assert list(table["max |Δ| vs first (0-255)"]) == [0, 1, 5]
    assert len(gallery) == 3 and all(Path(p).is_file() for p, _c in gallery)


def test_api_generate_returns_png_and_record(studio):
    path, record = studio.api_generate("a fox", 64, 64, "eager", 2, 5, 1.0)
    assert Path(path).is_file() and record["seed"] == 5 and record["steps"] == 2


def test_ui_imports_no_torch():
    for file in Path(__file__).resolve().parents[2].joinpath("ui").glob("*.py"):
        tree = ast.parse(file.read_text())
        names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
        names |= {node.module.split(".")[0] for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module}
        assert "torch" not in names and "diffusers" not in names, file
