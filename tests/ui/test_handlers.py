"""UI handlers against the real manager (fake engines behind its seam): what the page shows for each
outcome."""

import ast
import threading
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest
from PIL import Image

from backend.errors import GenerationFailed
from backend.images.pngmeta import read_png_parameters
from backend.shapes import PRESETS, Shape
from tests.conftest import plant_inductor_entry
from tests.ui.fake_engines import WAIT, calm_refusal, system_views, until
from ui.views_common import CUSTOM, format_bytes, load_example_prompts, preset_label
from ui.views_performance import MODE_COLORS, latency_frame
from ui.views_system import shapes_frame


def recorder():
    calls = []
    return calls, lambda value=None, desc="", **kw: calls.append((value, desc))


def tp_group(manager):
    """The tensor-parallel engine's current group (a FakeWorkerGroup), None before the first start."""
    return manager.engines["tensor-parallel"].group


def test_generate_shows_image_timings_seed_and_history(studio, manager):
    calls, progress = recorder()
    path, info, record, seed, gallery, state, _paths = studio.studio_tab.generate_from_page(
        "a fox", 256, 128, "compiled", 4, 1.0, 0, True, [], progress=progress)
    assert Path(path).is_file() and read_png_parameters(path)["seed"] == seed == record["seed"]
    assert "**256x128**" in info and "compiled 1 graph(s)" in info and f"`{seed}`" in info
    assert gallery == state and gallery[0][0] == path and "compiled" in gallery[0][1]
    assert [desc for _v, desc in calls] == ["encoding…", "denoising step 0/4", "compiling…", "denoising step 1/4",
                                            "denoising step 2/4", "denoising step 3/4", "denoising step 4/4",
                                            "decoding…"]
    assert calls[3][0] == (1, 4) and calls[2][0] is None  # a compile has no fraction to show
    assert manager.records[-1].engine == "in-process" and manager.records[-1].place == "app"
    # the same seed again, not randomised; history grows newest first
    path2, info2, record2, seed2, gallery2, _, _paths = studio.studio_tab.generate_from_page(
        "a fox", 256, 128, "compiled", 4, 1.0, 77, False, state, progress=progress)
    assert seed2 == 77 and "no compile (warm)" in info2 and len(gallery2) == 2 and gallery2[0][0] == path2


@pytest.mark.parametrize("width, message", [(1000, "nearest valid size is 1008x128"), ("x", "whole number")])
def test_bad_sizes_are_calm_notices_with_the_fix(studio, manager, width, message, caplog):
    caplog.set_level("INFO", logger="neuron_studio.ui")
    assert message in calm_refusal(
        studio.studio_tab.generate_from_page("a fox", width, 128, "eager", 4, 1.0, 0, True, []))
    # One line in the presenter's terminal, no traceback: a refusal is not a bug.
    assert [r.getMessage().startswith("refused (invalid): ") for r in caplog.records] == [True]
    assert not any(r.exc_info for r in caplog.records)
    # And the Generate button waits while the cost line says the click would be refused.
    generate = studio.studio_tab.refresh_studio("eager", width, 128, 4)[4]
    assert generate == gr.update(interactive=False)
    assert studio.studio_tab.refresh_studio("eager", 512, 128, 4)[4] == gr.update(interactive=True)
    # The cost line asks the service's own checks: 1008x128 (past the 4:1 aspect bound) waits too, as
    # its click would be refused (the page's checks had left the aspect out).
    engine, cost, *_rest, generate, _end = studio.studio_tab.refresh_studio("eager", 1008, 128, 4)
    assert "aspect ratio" in cost and generate == gr.update(interactive=False)
    assert not manager.records and not manager.status().shapes  # refused before anything ran


def test_backend_errors_become_notices_and_stop_is_not_an_error(studio, manager, engine, capsys):
    engine.fail_with = GenerationFailed("RuntimeError in the pipeline: boom")
    assert "boom" in calm_refusal(studio.studio_tab.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 0, True, []))
    assert "boom" in manager.status().last_error and not manager.records
    engine.fail_with = None
    assert studio.studio_tab.stop() == "Nothing is running."  # the page's line under the buttons
    assert "Nothing is running." in capsys.readouterr().out
    page_run = lambda: studio.studio_tab.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 0, True, [])  # noqa: E731
    with engine.hold(page_run, after_step=2) as outcome:
        assert manager.status().busy["phase"] == "denoising"
        said = studio.studio_tab.stop()  # the real cancel: the run stops at its next step boundary
        assert said.startswith("Stopping at the next denoising step") and said in capsys.readouterr().out
    assert "Stopped: stopped after step 2 of 4" in capsys.readouterr().out
    assert "Stopped" in outcome["result"][1] and not manager.records and manager.status().busy is None


def test_picking_a_mode_starts_and_stops_nothing(studio, manager, launches):
    from ui.app import build_ui

    demo = build_ui(manager)
    mode = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "mode")
    wired = {f.fn.__name__ for f in demo.fns.values() if any(t[0] == mode._id for t in f.targets)}
    assert wired == {"show_tp_controls", "refresh_studio"}  # the mode list only shows and refreshes
    assert [u["visible"] for u in studio.studio_tab.show_tp_controls("tp")] == [True, True]
    _engine, cost, _badges, tp_badge = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[:4]
    assert 'data-state="stopped"' in tp_badge and cost.startswith("**Stopped**")
    assert not launches.made  # looking at tp mode launched nothing
    studio.system_tab.start_tp(2)
    assert [u["visible"] for u in studio.studio_tab.show_tp_controls("eager")] == [False, False]
    studio.refresh_all("eager", 64, 64, 4, 2)
    assert len(launches.made) == 1 and tp_group(manager).state == "ready"  # leaving TP mode leaves it running


def test_start_and_stop_are_the_buttons(studio, manager, launches, capsys):
    studio.system_tab.start_tp(4)
    first = tp_group(manager)
    assert launches.made == [first] and manager.status().tp["world_size"] == 4
    assert "Starting the tensor-parallel group (4 ranks)" in capsys.readouterr().out
    studio.system_tab.start_tp(2.0)  # a running group of another degree is replaced
    second = tp_group(manager)
    assert launches.made == [first, second] and first.state == "stopped" and first.dir and not Path(first.dir).exists()
    assert manager.status().tp["world_size"] == 2 and second.state == "ready"
    assert "Replacing the 4-rank tensor-parallel group with 2 ranks" in capsys.readouterr().out
    studio.system_tab.start_tp(None)  # an empty box: the default degree (2), which is running: left as it is
    assert launches.made == [first, second]
    assert "already ready with 2 ranks" in capsys.readouterr().out
    with pytest.raises(gr.Error, match="does not divide the model's 4 attention heads; use one of 1, 2, 4"):
        studio.system_tab.start_tp(3)
    with pytest.raises(gr.Error, match="The TP degree is not valid: must be a whole number, got 2.5"):
        studio.system_tab.start_tp(2.5)
    assert launches.made == [first, second] and second.state == "ready"  # refused before anything started
    studio.system_tab.stop_tp()
    assert second.state == "stopped" and manager.status().tp["state"] == "stopped"
    assert "The tensor-parallel group is stopped." in capsys.readouterr().out
    studio.system_tab.stop_tp()  # already stopped: nothing to do
    assert "The tensor-parallel group is not running." in capsys.readouterr().out


def test_a_new_page_takes_the_running_groups_degree(studio, manager):
    opened = studio.page_opened()
    assert len(opened) == 2 and all(v == gr.skip() for v in opened)
    manager.start_engine("tensor-parallel", 4)
    assert studio.page_opened() == (4, 4)


def test_tp_cost_line_says_what_to_do_and_what_it_costs(studio, manager, launches):
    engine, cost, badges, tp_badge = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[:4]
    assert cost.startswith("**Stopped**") and "press **Start group**" in cost
    assert "launches 2 processes that each load the model" in cost and "no start measured yet" in cost
    assert "tensor-parallel group **stopped**" in engine
    # No gap where the badges were: they show the mode its requests run in meanwhile (eager here).
    assert (badges == studio.studio_tab.refresh_studio("eager", 64, 64, 4)[2]
            and badges.count("ns-badge ") == len(PRESETS))
    assert "launches 4 processes" in studio.studio_tab.refresh_studio("tp", 64, 64, 4, 4)[1]

    launches.hold = True  # the start stays "launching" until READY
    manager.start_engine("tensor-parallel", 2)
    engine, cost, _b, tp_badge = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[:4]
    assert cost.startswith("**Starting**") and "(2 ranks) is launching" in cost and "runs in process" in cost
    assert 'data-state="launching"' in tp_badge and "group **launching** (2 ranks)" in engine
    tp_group(manager).phase("warming")
    assert "is warming" in studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[1]

    tp_group(manager).ready()
    engine, cost, badges, tp_badge = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[:4]
    # each rank runs eager (--tp-compile), which compiles nothing on this device
    assert cost.startswith("**Ready**") and "(tp mode does not compile on this device)" in cost
    assert "ready group of 2 ranks" in cost and 'data-shape="1024x1024" data-state="warm"' in badges
    assert 'data-state="ready"' in tp_badge and "group **ready** (2 ranks)" in engine
    cost = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 4)[1]
    assert "ready group of 2 ranks, not 4: **Start group** replaces it" in cost

    manager.stop_engine("tensor-parallel")
    cost = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[1]
    assert cost.startswith("**Stopped**") and "its last start took 2.5 s to load and warm up" in cost
    assert "its last start, with 2 ranks, took 2.5 s" in studio.studio_tab.refresh_studio("tp", 64, 64, 4, 4)[1]

    launches.hold = False
    manager.start_engine("tensor-parallel", 2)
    tp_group(manager).die("rank 1 exited with signal SIGKILL — the group is down")
    engine, cost, _b, tp_badge = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[:4]
    assert cost.startswith("**Down**") and "rank 1 exited with signal SIGKILL" in cost
    assert "Press **Start group**" in cost and 'Meanwhile Generate runs in process (eager)' in cost
    assert ('data-state="dead"' in tp_badge and "group **dead**" in engine
            and "**degraded**: the tensor-parallel group is dead" in engine)


def test_runs_served_in_process_while_the_group_is_down_say_so(studio, manager):
    # never started: served in process, saying why (a viewer could not start it)
    _p, info, record, *_ = studio.studio_tab.generate_from_page("a fox", 64, 64, "tp", 2, 1.0, 1, False, [])
    assert record["mode"] == "eager" and "operator has not started the tensor-parallel group" in info
    studio.system_tab.start_tp(2)
    tp_group(manager).die("rank 1 exited with code 1")
    with pytest.warns(UserWarning, match="degraded"):  # gr.Warning outside a request
        _p, info, record, _s, gallery, _h, _paths = studio.studio_tab.generate_from_page(
            "a fox", 64, 64, "tp", 2, 1.0, 1, False, [])
    assert (record["mode"], record["requested_mode"]) == ("eager", "tp") and "dead" in record["degraded"]
    assert (record["engine"], record["place"]) == ("in-process", "app")
    assert ", eager on the app's own core instead of tp, 2 steps" in info
    assert info.endswith("It ran on the app's own core because the tensor-parallel group is dead "
                         "(rank 1 exited with code 1).")
    assert ", tp" not in info and "eager in process (tp down)" in gallery[0][1]
    studio.system_tab.start_tp(2)  # a dead group is replaced by a fresh one
    _p, info, record, _s, gallery, _h, _paths = studio.studio_tab.generate_from_page(
        "a fox", 64, 64, "tp", 2, 1.0, 1, False, [])
    assert record["mode"] == "tp" and record["degraded"] is None and record["world_size"] == 2
    assert (record["engine"], record["place"]) == ("tensor-parallel", "tp")
    assert ", tp (2 ranks)," in info and "own core" not in info and "tp ×2" in gallery[0][1]
    studio.system_tab.stop_tp()
    # stopped on purpose: served in process the same way, saying so
    _p, info, record, *_ = studio.studio_tab.generate_from_page("a fox", 64, 64, "tp", 2, 1.0, 1, False, [])
    assert record["mode"] == "eager" and "stopped (the operator stopped it)" in info


def test_the_timer_reads_no_logs_and_the_logs_button_does(studio, manager):
    studio.system_tab.start_tp(2)
    for _ in range(3):
        studio.refresh_all("tp", 64, 64, 4, 2)
    assert tp_group(manager).log_reads == 0
    logs = studio.system_tab.show_tp_logs()
    assert tp_group(manager).log_reads == 3  # rank 0's, rank 1's and torchrun's, once each
    assert "── rank 1 ──\nrank 1/2 starting (pid 12)" in logs
    assert "torchrun" not in logs  # empty tails are left out


def test_system_panel_shows_the_group_and_its_ranks(studio, manager, launches):
    *_rest, tp_badge, tp_md, _replicas, _ray, status = system_views(studio)
    assert 'data-state="stopped"' in tp_badge and "| State | stopped |" in tp_md and "| Rank |" not in tp_md
    assert "| Ranks | 2 |" in tp_md  # never started: the degree a Start would launch
    assert "| Degrees offered (divide the heads; on Neuron within one chip) | 1, 2, 4 |" in tp_md  # 4 heads, CPU
    launches.hold = True
    manager.start_engine("tensor-parallel", 4)
    *_rest, tp_badge, tp_md, _replicas, _ray, status = system_views(studio)
    assert "| State | launching |" in tp_md and "| Ranks | 4 |" in tp_md and "| Rank |" not in tp_md
    tp_group(manager).ready()
    *_rest, tp_badge, tp_md, _replicas, _ray, status = system_views(studio)
    assert "0: 11, 1: 12, 2: 13, 3: 14" in tp_md and "| Load / warm-up | 2.0 s / 0.5 s |" in tp_md
    assert "| 3 | 14 | n/a | cpu | 3.00 | 2.00 | 1.00 | 6 weights sharded |" in tp_md
    assert "logs" not in status["tp"]
    studio.studio_tab.generate_from_page("a fox", 64, 64, "tp", 2, 1.0, 1, False, [])
    tp_md = system_views(studio)[4]
    assert "0.405 s" in tp_md and "5.0 ms" in tp_md  # the last call's round trip and its overhead


def test_replicas_start_with_a_count_serve_and_stop(studio, manager, launches, capsys):
    assert system_views(studio)[5].startswith("No replicas running. Start some to serve several requests")
    shown = studio.system_tab.start_replicas(2.0)
    assert "Starting 2 replicas" in capsys.readouterr().out
    assert [(g.role, g.place, g.degree, g.state) for g in launches.made] == [
        ("replica", "replica 0", 1, "ready"), ("replica", "replica 1", 1, "ready")]
    assert shown.startswith("**Replicas**: 2 of 2 ready, 0 busy, 0 restarted")
    assert "| 0 | ready | — | 31 | 0 | — |" in shown and "| 1 | ready | — | 32 | 0 | — |" in shown
    assert manager.capacity() == 2 and "replicas 2/2 ready, 0 busy" in studio.studio_tab.refresh_studio(
        "eager", 64, 64, 4)[0]

    # the pool serves the in-process modes now; each replica keeps its own graphs
    _p, _info, record, *_ = studio.studio_tab.generate_from_page("a fox", 64, 64, "compiled", 4, 1.0, 1, False, [])
    assert (record["engine"], record["place"], record["compiled"]) == ("replicas", "replica 0", True)
    assert "warm on 1 of 2 replicas" in studio.studio_tab.refresh_studio("compiled", 64, 64, 4)[1]
    shown = system_views(studio)[5]
    assert "| 0 | ready | — | 31 | 1 | compiled 64x64 |" in shown and "| 1 | ready | — | 32 | 0 | — |" in shown

    launches.made[1].die("rank 0 exited with signal SIGKILL — the group is down")  # restarted on its own
    shown = system_views(studio)[5]
    assert "1 restarted" in shown and "| 1 | ready | — | 42 | 0 | — |" in shown and len(launches.made) == 3

    shown = studio.system_tab.stop_replicas()
    assert "The replicas are stopped." in capsys.readouterr().out
    assert "No replicas running" in shown and manager.capacity() == 1
    studio.system_tab.stop_replicas()  # already stopped: nothing to do
    assert "No replicas are running." in capsys.readouterr().out
    # the killed replica stays dead (its death is what its request reported); the others stopped
    assert [g.state for g in launches.made] == ["stopped", "dead", "stopped"]
    _p, _info, record, *_ = studio.studio_tab.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 1, False, [])
    assert (record["engine"], record["place"]) == ("in-process", "app")  # stopped: served in process again


@pytest.mark.parametrize("count, message", [
    (2.5, "The number of replicas is not valid: must be a whole number, got 2.5"),
    ("two", "The number of replicas is not valid: must be a whole number (digits 0-9), got 'two'"),
    (0, "The number of replicas is not valid: must be a whole number from 1 to 64, got 0"),
    (65, "The number of replicas is not valid: must be a whole number from 1 to 64, got 65")])
def test_a_replica_count_that_cannot_work_is_refused_naming_the_field(studio, launches, count, message):
    import re

    with pytest.raises(gr.Error, match=re.escape(message)):
        studio.system_tab.start_replicas(count)
    assert not launches.made  # refused before anything started


def test_stopping_replicas_that_never_started_says_so(studio, launches, capsys):
    shown = studio.system_tab.stop_replicas()
    assert "No replicas are running." in capsys.readouterr().out and shown.startswith("No replicas running.")
    assert not launches.made


def test_two_ready_replicas_serve_two_page_requests_at_once(studio, manager, launches):
    """Issue 51 (3): the job board gives an engine as many slots as it has ready places, read as
    they change: with two replicas ready, two page runs are in flight together (each waits at step 1
    for the other: run one at a time, the barrier breaks)."""
    import threading

    studio.system_tab.start_replicas(2)
    both = threading.Barrier(2, timeout=30)
    for group in launches.made:
        group.at_step = lambda step: both.wait() if step == 1 else None
    records = []
    runs = [threading.Thread(target=lambda seed=seed: records.append(studio.studio_tab.generate_from_page(
        "a fox", 64, 64, "eager", 2, 1.0, seed, False, [])[2])) for seed in (1, 2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(60)
    assert not both.broken and len(records) == 2
    assert {r["place"] for r in records} == {"replica 0", "replica 1"} and all(r["overlapped"] for r in records)
    studio.system_tab.stop_replicas()
    assert manager.controls.engine_capacity("replicas") == 0


def test_cost_line_and_badges_follow_the_compile_state(studio, manager):
    engine, cost, badges, _tp = studio.studio_tab.refresh_studio("compiled", 1024, 1024, 4)[:4]
    assert engine.startswith(f"**{manager.status().model['label']}** on **cpu (float32)** · ready")
    # Before this machine has measured a compile: the compile backend's prior (aot_eager here), said to be one.
    assert cost == ("**Cold** — **1024x1024** in **compiled** mode: it will compile first (about 5.0 s — a prior "
                    "for this compile backend, until this machine measures its first compile).")
    assert 'data-shape="1024x1024" data-state="cold"' in badges
    studio.studio_tab.generate_from_page("a fox", 1024, 1024, "compiled", 4, 1.0, 0, True, [])  # compiles in 1.5 s
    _e, cost, badges, _tp = studio.studio_tab.refresh_studio("compiled", 1024, 1024, 4)[:4]
    assert cost.startswith("**Ready**") and "no steady timing yet" in cost
    assert 'data-shape="1024x1024" data-state="warm"' in badges
    # steady: 0.1 + 4 x 0.05 + 0.1 s
    studio.studio_tab.generate_from_page("a fox", 1024, 1024, "compiled", 4, 1.0, 0, True, [])
    _e, cost, badges, _tp = studio.studio_tab.refresh_studio("compiled", 1024, 1024, 4)[:4]
    assert "**Ready**" in cost and "expected 400 ms" in cost and 'data-shape="1024x1024" data-state="warm"' in badges
    assert 'data-shape="1152x896" data-state="cold"' in badges
    assert "it will compile first (about 1.5 s, from 1 past compile)" in studio.studio_tab.refresh_studio(
        "compiled", 1152, 896, 4)[1]
    manager.set_warm_only(True)
    _e, cost, badges, _tp = studio.studio_tab.refresh_studio("compiled", 1152, 896, 4)[:4]
    assert "**Refused**" in cost and 'data-shape="1152x896" data-state="locked"' in badges
    assert "1152x896 is not warm in compiled mode" in calm_refusal(  # and the run is refused
        studio.studio_tab.generate_from_page("a fox", 1152, 896, "compiled", 4, 1.0, 0, True, []))
    studio.studio_tab.generate_from_page("a fox", 1024, 1024, "compiled", 4, 1.0, 0, True, [])  # a warm one runs
    _e, cost, _b, _tp = studio.studio_tab.refresh_studio("compiled", 1000, 1024, 4)[:4]
    assert cost.startswith("**Invalid** — The image size is not valid: width 1000") and "1008x1024" in cost


def test_presets_and_custom_sizes_stay_in_step(studio):
    assert studio.studio_tab.preset_changed("16:9 · 1344x768") == (1344, 768)
    for name, shape in PRESETS:  # every preset sets both boxes, and a size that is a preset names it
        label = preset_label(name, shape)
        assert studio.studio_tab.preset_changed(label) == (shape.width, shape.height), label
        assert studio.studio_tab.size_changed(shape.width, shape.height) == label
    assert studio.studio_tab.size_changed(1000, 768) == CUSTOM
    # Custom leaves width and height as they are: an update with no value for each, not a size.
    keep = {"__type__": "update"}
    assert gr.skip() == keep and studio.studio_tab.preset_changed(CUSTOM) == (keep, keep)


def _uploaded(path, tmp_path, monkeypatch) -> str:
    """``path`` as the page's file box hands it over: a copy in Gradio's upload folder."""
    import shutil

    uploads = tmp_path / "uploads"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))
    (uploads / "u1").mkdir(parents=True, exist_ok=True)
    return shutil.copy(path, uploads / "u1" / Path(path).name)


def test_load_parameters_from_png_fills_the_controls(studio, tmp_path, monkeypatch):
    path, *_ = studio.studio_tab.generate_from_page("a lighthouse", 256, 128, "regional", 7, 1.0, 4242, False, [])
    with pytest.raises(gr.Error, match="not a readable PNG"):  # a path the event names, not an upload
        studio.studio_tab.load_png(path)
    prompt, width, height, preset, steps, guidance, seed, randomize, mode, count = studio.studio_tab.load_png(
        _uploaded(path, tmp_path, monkeypatch))
    assert (prompt, width, height, preset, steps, seed, randomize, mode, count) == (
        "a lighthouse", 256, 128, CUSTOM, 7, 4242, False, "regional", 1)
    plain = tmp_path / "plain.png"
    Image.new("RGB", (8, 8)).save(plain)
    with pytest.warns(UserWarning, match="no generation parameters"):  # gr.Warning outside a request
        loaded = studio.studio_tab.load_png(_uploaded(plain, tmp_path, monkeypatch))
        assert len(loaded) == 10 and all(v == gr.skip() for v in loaded)
    (tmp_path / "not.png").write_text("hello")
    with pytest.raises(gr.Error, match="not a readable PNG"):
        studio.studio_tab.load_png(_uploaded(tmp_path / "not.png", tmp_path, monkeypatch))


def test_system_panel_table_warmup_lock_and_cache(studio, manager, engine, cache_dir, capsys):
    studio.studio_tab.generate_from_page("a fox", 64, 64, "compiled", 4, 1.0, 0, True, [])
    info, table, warm, _tp_badge, _tp, _replicas, _ray, status = system_views(studio)
    cache = status["cache"]["caches"][0]
    assert f"| Model | {status['model']['label']} |" in info and "| Device | cpu — requested |" in info
    assert f"| Compile cache | `{cache['dir']}` ({format_bytes(cache['bytes'])}, TORCHINDUCTOR_CACHE_DIR) |" in info
    assert "| Engine | in-process · ready · active mode compiled |" in info
    assert list(table.columns) == ["mode", "shape", "state", "compile s", "steady s", "runs", "error"]
    assert table.iloc[0]["state"] == "warm"
    turkish = shapes_frame(manager.status().shapes, "tr")
    assert list(turkish.columns)[:3] == ["mod", "boyut", "durum"] and turkish.iloc[0]["durum"] == "sıcak"

    # warm-up: the real one, in the background, through the real generate (compile, then a steady run)
    with engine.hold(lambda: studio.system_tab.start_warmup(["1:1 · 1024x1024", "16:9 · 1344x768"],
                                                            "compiled")) as started:
        assert system_views(studio)[2] == "Warming up compiled: 0/2 done, now 1024x1024"
        line = studio.studio_tab.refresh_studio("eager", 64, 64, 4)[0]
        assert ("**busy**: compiled 1024x1024 denoising step 1/4 (0.0 s)" in line
                and "warming up 0/2 in compiled" in line)
        with pytest.raises(gr.Error, match="a warm-up is already running"):
            studio.system_tab.start_warmup(["1:1 · 1024x1024"], "compiled")
    assert started["result"] == "Warming up compiled: 0/2 done, now 1024x1024"  # what the button showed
    until(lambda: not manager.status().warmup["running"], "the warm-up finished")
    assert manager.status().warmup == {"running": False, "mode": "compiled", "done": 2, "total": 2,
                                          "current": None, "error": None}
    assert system_views(studio)[2] == "Warm-up finished: 2 shape(s) in compiled mode"
    warmed = [(r.mode, r.shape, r.compiled) for r in manager.records if r.prompt == "warm-up"]
    assert warmed == [("compiled", Shape(1024, 1024), True), ("compiled", Shape(1024, 1024), False),
                      ("compiled", Shape(768, 1344), True), ("compiled", Shape(768, 1344), False)]
    assert set(manager.table.warm_shapes("compiled")) == {Shape(64, 64), Shape(1024, 1024), Shape(768, 1344)}

    studio.system_tab.set_warm_only(True)
    assert manager.warm_only is True and manager.status().warm_only is True

    # clearing the cache: the real one, on this test's cache folder; the user's own files stay
    plant_inductor_entry(cache_dir, 1_500_000)
    (cache_dir / "notes.txt").write_text("mine")
    plan, confirm = studio.system_tab.clear_plan()
    assert f"- 1 compile-cache entries, 1.5 MB, in `{cache_dir}`" in plan and confirm["visible"] is True
    studio.system_tab.clear_cache()
    assert "Compile cache cleared (1.5 MB)." in capsys.readouterr().out
    assert not (cache_dir / "fxgraph").exists() and (cache_dir / "notes.txt").read_text() == "mine"
    assert manager.status().cache["bytes"] == 4


def test_the_cache_is_not_cleared_while_a_group_holds_it(studio, manager, cache_dir):
    entry = plant_inductor_entry(cache_dir, 1000)
    studio.system_tab.start_tp(2)
    with pytest.raises(gr.Error, match="stop the group first"):
        studio.system_tab.clear_cache()
    assert entry.is_file()
    studio.system_tab.stop_tp()
    studio.system_tab.clear_cache()
    assert not (cache_dir / "fxgraph").exists()


def test_performance_frames_come_from_the_records(studio):
    for mode in ("eager", "eager", "compiled", "compiled"):
        studio.studio_tab.generate_from_page("a fox", 64, 64, mode, 4, 1.0, 1, False, [])
    latency_plot, compile_value, note = studio.performance_tab.refresh_plots()
    latency_value = pd.DataFrame(latency_plot.value["data"], columns=latency_plot.value["columns"])
    latency, compile_times = (value.dropna() for value in (latency_value, compile_value))
    assert latency_plot.x_lim[0] == latency_plot.y_lim[0] == 0 and latency_plot.y_lim[1] > latency["seconds"].max()
    # Compiling runs and a first run at a place (its first-time costs) are left out of latency.
    assert set(latency["mode"]) == {"eager", "compiled"} and len(latency) == 2
    assert list(compile_times["shape · mode"]) == ["64x64 · compiled"] and note == ""
    # Values only, every mode in each, those not run without numbers: the chart Gradio built when the
    # page opened has each mode's colour, and no setting changes to rebuild it (ui.views_performance.plotted).
    for value, ran in ((latency_value, {"eager", "compiled"}), (compile_value, {"compiled"})):
        assert sorted(value["mode"]) == sorted(MODE_COLORS)  # one row each here: a row run, or one empty
        assert set(value.dropna()["mode"]) == ran


def _page(accept_language):
    return SimpleNamespace(headers={"accept-language": accept_language})


def test_empty_views_say_what_will_appear_there(studio):
    """First visit: a note says what will fill the plots, the Compare table has its column names."""
    *_values, note = studio.performance_tab.refresh_plots()
    assert note.startswith("No steady run yet") and "Nothing compiled yet" in note
    table = studio.compare_tab.empty_compare_table()
    assert list(table.columns) == ["mode", "seconds", "compiled", "compile s", "max |Δ| (0-255)"] and table.empty
    assert list(studio.compare_tab.empty_compare_table(_page("tr-TR")).columns)[0] != "mode"
    studio.studio_tab.generate_from_page("a fox", 64, 64, "compiled", 4, 1.0, 1, False, [])
    studio.studio_tab.generate_from_page("a fox", 64, 64, "compiled", 4, 1.0, 2, False, [])
    assert studio.performance_tab.refresh_plots()[-1] == ""  # both plots hold data now
    latency, compile_times = studio.performance_tab.plot_labels()
    assert latency.title == "Latency vs image size (steady state)"
    assert compile_times.title == "Compile time per shape and mode"


def test_plot_axes_follow_the_page_language(studio):
    latency, compile_times = studio.performance_tab.plot_labels(page=_page("tr-TR,tr;q=0.9"))
    assert (latency.x_title, latency.y_title) == ("megapiksel", "görsel başına saniye")
    assert compile_times.y_title == "derleme saniyesi"
    assert studio.performance_tab.refresh_plots(page=_page("tr-TR"))[-1].startswith("Henüz kararlı")
    latency, _ = studio.performance_tab.plot_labels(page=_page("en-US"))
    assert latency.y_title == "seconds per image"


def test_gradio_tracks_progress_for_the_device_handlers(studio):
    """Gradio injects its progress tracker only into a parameter whose default is ``gr.Progress()``;
    with anything else the page's progress bar never follows the denoising steps."""
    from gradio.helpers import special_args
    for handler, n_inputs in ((studio.studio_tab.generate_from_page, 11), (studio.api.api_generate, 9),
                              (studio.compare_tab.compare, 9)):
        progress_index = special_args(handler, [None] * n_inputs)[1]
        assert progress_index is not None, handler.__name__


def test_compare_shows_side_by_side_with_max_difference(studio, manager):
    gallery, table = studio.compare_tab.compare("a fox", 64, 64, 4, 1.0, 3, False, ["eager", "compiled", "regional"])
    assert [row["mode"] for _i, row in table.iterrows()] == ["eager", "compiled", "regional"]
    assert list(table["max |Δ| (0-255)"]) == [0, 1, 5] and list(table["compiled"]) == ["no", "yes", "yes"]
    assert [(r.mode, r.seed, r.compiled) for r in manager.records] == [
        ("eager", 3, False), ("compiled", 3, True), ("regional", 3, True)]  # one request, each mode
    # Side by side: one image per mode, in the modes' order, each captioned with its mode.
    assert len(gallery) == 3 and all(Path(p).is_file() for p, _c in gallery)
    assert [caption.split(" · ")[0] for _p, caption in gallery] == ["eager", "compiled", "regional"], gallery
    _gallery, turkish = studio.compare_tab.compare("a fox", 64, 64, 4, 1.0, 3, False, ["eager", "compiled"],
                                                   page=_page("tr-TR"))
    assert list(turkish["derlendi"]) == ["hayır", "hayır"]  # its words, not Python's (both warm now)


def test_api_generate_returns_png_and_record(studio):
    path, record = studio.api.api_generate("a fox", 64, 64, "eager", 2, 5, 1.0)
    assert Path(path).is_file() and record["seed"] == 5 and record["steps"] == 2


def _manager_names_the_ui_uses() -> set[str]:
    """Every ``manager.X``, ``self.manager.X`` and ``self.door.manager.X`` in the ui modules (the handlers,
    the layout, the API, …)."""
    names = set()
    for file in sorted((Path(__file__).resolve().parents[2] / "ui").glob("*.py")):
        tree = ast.parse(file.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "manager") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "manager"):
                names.add(node.attr)
    return names


def test_the_ui_uses_only_what_the_manager_has(manager):
    """What the page uses of the manager exists on the real one (the handler tests drive it, so a
    handler calling something it lacks fails there too; this names the missing one)."""
    used = _manager_names_the_ui_uses()
    assert {"run", "compare", "status", "predict", "start_engine", "stop_engine", "engine_logs",
            "settings", "modes"} <= used, used
    # Issue 51: the page hands its raw fields to the service's one entry; it never validates, runs or
    # saves around it.
    assert not {"validate", "generate", "save_image"} & used, used
    for name in sorted(used):
        assert hasattr(manager, name), f"the UI uses manager.{name}, which the real Manager does not have"


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
    # The page's presets, start size and prompt come from the model's card (backend.models.card):
    # the trained embedded model offers the ~1 MP ratios at the ~256x256 it was trained at, starts
    # at 1:1 with a prompt from its examples, says once (under the prompt) what it understands, and
    # labels a size beyond training; a model without a card keeps the ~1 MP presets, no prompt.
    from tests.ui.fake_engines import start_manager
    from ui.app import build_ui
    from ui.constants import ASSETS
    from ui.handlers import Studio

    manager, _launches = start_manager(tmp_path, model=model)
    try:
        demo = build_ui(manager)
        studio = Studio(manager)
        value = {b.elem_id: b.value for b in demo.blocks.values()
                 if getattr(b, "elem_id", None) and hasattr(b, "value")}
        blocks = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
        api = {b.label: b.value for b in demo.blocks.values() if type(b).__name__ == "RawNumber"}
        assert (api["width"], api["height"]) == (value["width"], value["height"])  # the API's defaults too
        examples = load_example_prompts(ASSETS / "prompts.txt")
        presets = [value for _label, value in blocks["preset"].choices]
        if model == "embedded":
            assert presets[:3] == ["1:1 · 256x256", "4:3 · 288x224", "3:4 · 224x288"] and len(presets) == 10
            assert (value["width"], value["height"], value["preset"]) == (256, 256, "1:1 · 256x256")
            assert value["prompt"] == examples[0] and ", on " not in examples[0]  # no place: the centre
            # The grammar in one short line beside the prompt, the whole of it behind its (i).
            assert "(left out: the centre)" in value["prompt-hint"] and "<summary>" in value["prompt-hint"]
            assert studio.studio_tab.preset_changed("21:9 · 384x160") == (384, 160)
            assert studio.studio_tab.size_changed(160, 384) == "9:21 · 160x384"
            assert "**Beyond training**: this model learnt sizes up to 65,536 pixels (256x256)" in \
                studio.studio_tab.refresh_studio("eager", 512, 512, 4)[1]
            assert "Beyond training" not in studio.studio_tab.refresh_studio("eager", 384, 160, 4)[1]
            # Issue 54 (2): the first size people type is refused before the click, naming the size and
            # the model's budget, with a size of that shape that runs (it blamed a reference nobody loaded).
            _e, cost, _b, _t, generate, *_ = studio.studio_tab.refresh_studio("eager", 1024, 1024, 4)
            assert cost.startswith("**Invalid** — The image size is not valid: 1024x1024 is 4096 image tokens")
            assert "the largest size of that shape within it is 512x512" in cost and generate["interactive"] is False
            assert studio.studio_tab.refresh_studio("eager", 512, 512, 4)[4]["interactive"] is True
            request = manager.validate("a red circle on a blue background", 256, 256, steps=1, seed=1)
            assert (request.prompt, request.typed) == ("a red circle in the centre, on a blue background",
                                                       "a red circle on a blue background")
            _path, line, record, *_ = studio.studio_tab.generate_from_page(request.typed, 256, 256, "eager", 1, 1.0, 1,
                                                                False, [])
            assert record["prompt"] == request.typed and record["caption"] == request.prompt
            assert "Drawn as “a red circle in the centre, on a blue background”" in line
            exact = manager.validate(request.prompt, 256, 256, steps=1, seed=1)
            assert exact.typed is None  # a caption of the grammar goes in as typed
            # A Turkish page shows the Turkish examples (the grammar reads them) and starts with the first.
            turkish = load_example_prompts(ASSETS / "prompts-tr.txt")
            assert blocks["examples-tr"].visible is False and blocks["examples"].visible is True
            assert [row[0] for row in blocks["examples-tr"].samples] == turkish
            tabs = Studio(manager, None, {"en": examples, "tr": turkish}).studio_tab
            first, english, own = tabs.page_examples(_page("tr-TR,tr;q=0.9"))
            assert first["value"] == turkish[0] and english["visible"] is False and own["visible"] is True
            first, english, own = tabs.page_examples(_page("en-US"))
            assert isinstance(first, type(gr.skip())) and english["visible"] is True and own["visible"] is False
        else:
            name, shape = PRESETS[0]
            assert presets == [preset_label(n, s) for n, s in PRESETS] + [CUSTOM]
            assert (value["width"], value["height"]) == (shape.width, shape.height)
            assert value["preset"] == preset_label(name, shape) and value["prompt"] == ""
            assert not blocks["prompt-hint"].visible and "examples-tr" not in blocks  # its prompts as typed
            assert manager.validate("a red fox", 64, 64).prompt == "a red fox"  # no grammar: as typed
            assert "Beyond training" not in studio.studio_tab.refresh_studio("eager", 1536, 1536, 4)[1]
    finally:
        manager.close()


def test_runs_side_by_side_are_not_steady_figures(studio, manager, engine):
    """A run that overlapped another says how busy the machine was, not what its shape costs: it is
    counted but kept out of the steady median (and the latency plot); a lone run is in it."""
    studio.system_tab.start_tp(2)
    studio.studio_tab.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 1, False, [])  # a first run: not steady
    studio.studio_tab.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 1, False, [])  # compiles nothing on CPU
    page_run = lambda: studio.studio_tab.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 2, False, [])  # noqa: E731
    with engine.hold(page_run, after_step=1):
        _p, _i, tp_record, *_ = studio.studio_tab.generate_from_page("a fox", 64, 64, "tp", 4, 1.0, 3, False, [])
    eager_first, eager_lone, tp_beside, eager_beside = manager.records
    assert tp_record["overlapped"] and tp_beside.overlapped and eager_beside.overlapped
    assert not eager_lone.overlapped and eager_lone.steady and not eager_first.steady
    row = next(r for r in manager.status().shapes if (r["mode"], r["shape"]) == ("eager", "64x64"))
    assert row["runs"] == 3 and row["steady_runs"] == 1 and row["steady_seconds"] == eager_lone.seconds
    assert "(median of 1 steady runs" in shapes_frame(manager.status().shapes).iloc[0]["steady s"]
    assert len(latency_frame(manager.records)) == 1  # the lone eager run only
    # Before any run the modes are still words: an untyped empty column read as numbers drew a "NaN" legend.
    empty = latency_frame([])
    assert [pd.api.types.is_string_dtype(empty[c]) for c in ("mode", "shape", "megapixels", "seconds")] == [
        True, True, False, False]
    from ui.app import build_ui

    demo_plots = [b for b in build_ui(manager).blocks.values() if isinstance(b, (gr.ScatterPlot, gr.BarPlot))]
    assert [b.color_map for b in demo_plots] == [MODE_COLORS] * 2  # one colour per mode in both plots


def test_a_compile_shows_its_time_so_far_and_stop_is_heard_at_once(studio, manager, engine, capsys):
    """A first compile is no silent spinner: the bar says "compiling — N s so far, about M expected"
    every second, and Stop pressed meanwhile is acknowledged at once, saying the compile finishes first."""
    calls = []
    adapter = studio.studio_tab.runs.progress_adapter(lambda value=None, desc="", **kw: calls.append(desc))
    from backend.request.records import ProgressEvent

    adapter(ProgressEvent("compiling", 0, 4, "compiled", "64x64", estimate=5.0))  # the manager says what to expect
    until(lambda: any(d.startswith("compiling — ") for d in calls), "a compile tick")
    adapter(ProgressEvent("denoising", 1, 4, "compiled", "64x64"))  # the tick ends with the compile
    tick = next(d for d in calls if d.startswith("compiling — "))
    assert "so far, about 5.0 s expected" in tick
    # A compile that fails sends no further step: the run's end stops the ticking all the same.
    import threading

    adapter(ProgressEvent("compiling", 0, 4, "compiled", "64x64"))
    until(lambda: any(t.name == "compile-progress" for t in threading.enumerate()), "the tick started")
    adapter.close()
    until(lambda: not any(t.name == "compile-progress" for t in threading.enumerate()), "the tick ended")
    page_run = lambda: studio.studio_tab.generate_from_page("a fox", 64, 64, "compiled", 4, 1.0, 0, True, [])  # noqa: E731
    with engine.hold(page_run, after_step=0) as outcome:  # held while it compiles
        job = manager.status().running[0]
        assert job["compile_estimate"] == 5.0  # admission's prior (nothing measured yet), kept on the job
        studio.studio_tab.stop()
        assert "the compile that is running finishes first (about" in capsys.readouterr().out
    assert "Stopped" in outcome["result"][1]


def test_a_request_waiting_in_ray_serves_queue_says_so_on_the_page(studio):
    """RayServeEngine sends Phase.REPLICA first for a request that no running replica can take yet (under
    autoscaling, until Serve adds one): the bar says so in the page's language, not a bare spinner."""
    from backend.request.records import ProgressEvent

    for lang, words in (("en", "waiting for a free replica"), ("tr", "boş bir kopya bekleniyor")):
        calls = []
        adapter = studio.studio_tab.runs.progress_adapter(lambda value=None, desc="", _c=calls, **kw: _c.append(desc),
                                                          lang)
        adapter(ProgressEvent("replica", 0, 4, "eager", "64x64"))
        assert calls and calls[-1].startswith(words), calls


def test_the_operator_can_end_a_compile_a_worker_runs_and_a_viewer_cannot(tmp_path, capsys):
    """A compile in a worker process cannot be interrupted, but the process can be stopped: while
    the group compiles, the operator's page shows "End the compile", which stops the group and ends
    the run; a viewer's page does not show it (and ``tests/ui/test_roles.py`` finds a viewer's call
    refused)."""
    from backend.serving.roles import OperatorKey
    from tests.ui.fake_engines import start_manager
    from ui.handlers import Studio

    manager, launches = start_manager(tmp_path, tp_compile="compiled")  # the ranks compile
    studio = Studio(manager)
    studio.system_tab.start_tp(2)
    group = launches.made[-1]
    compiling, release = threading.Event(), threading.Event()

    def hold_while_compiling(step: int) -> None:
        if step == 0:
            compiling.set()
            release.wait(WAIT)

    group.at_step = hold_while_compiling
    outcome = {}
    run = threading.Thread(target=lambda: outcome.update(
        out=studio.studio_tab.generate_from_page("a fox", 64, 64, "tp", 4, 1.0, 3, False, [])), daemon=True)
    run.start()
    try:
        assert compiling.wait(WAIT)
        end_compile = studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[5]
        assert end_compile == gr.update(visible=True)
        viewer = SimpleNamespace(session_hash="viewer-page", headers={}, cookies={})
        viewers_page = Studio(manager, OperatorKey())
        assert viewers_page.studio_tab.refresh_studio("tp", 64, 64, 4, 2, page=viewer)[5] == gr.update(visible=False)
        assert group.state == "ready"
        assert studio.studio_tab.stop_compiling_worker().startswith("Stopped the tensor-parallel workers")
        assert "Stopped the tensor-parallel workers: the compile ended" in capsys.readouterr().out
        assert group.state == "stopped"
    finally:
        release.set()
        run.join(WAIT)
        manager.close()
    assert not run.is_alive()
    _p, info, *_ = outcome["out"]
    assert info.startswith("**Stopped** before the image was finished")  # a stop, not a dead group
    assert studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2)[5] == gr.update(visible=False)  # nothing compiles now


def test_a_demo_in_one_command_warms_every_preset_starts_the_group_and_locks(manager, launches):
    """``python app.py demo --demo-modes compiled --tp``: what it does once the model is ready."""
    from server import prepare_demo

    said, readiness = [], []

    def say(line):
        said.append(line)
        readiness.append(manager.readiness())

    prepare_demo(manager, ["compiled"], tp=True, say=say)
    # /readyz is not ready while the demo warms (issue 54, item 10), and is once it is done
    assert readiness[0] == (False, "the demo is warming its presets") and manager.readiness() == (True, "ready")
    presets = [str(shape) for _name, shape in manager.card.presets]
    warm = {r["shape"] for r in manager.status().shapes if r["mode"] == "compiled" and r["state"] == "warm"}
    assert warm == set(presets)
    assert launches.made and launches.made[-1].state == "ready" and manager.status().warm_only is True
    assert said[-1].startswith(f"demo: ready — {len(presets)} presets warm in compiled, the tensor-parallel group")


def test_the_embedded_models_page_says_what_it_did_not_understand_and_what_it_cannot_draw(studio, manager, tmp_path,
                                                                                          monkeypatch):
    """A prompt partly outside the grammar: the run line names the words not understood, what was
    made up, and the closest example; a size past training says before the click what really
    happens and offers the nearest preset."""
    from backend.models.card import card_for

    manager.card = card_for("embedded", tmp_path)  # the scene grammar and its ~256 px presets
    reads, read = [], type(manager.card).read_prompt
    monkeypatch.setattr(type(manager.card), "read_prompt", lambda *a, **k: reads.append(a) or read(*a, **k))
    studio.studio_tab.examples = {"en": ["a red circle on a blue background",
                                         "a blue star in the middle, on an orange background"]}
    _p, info, record, *_ = studio.studio_tab.generate_from_page("a cat on orange", 256, 256, "eager", 4, 1.0, 1,
                                                                False, [])
    assert record["prompt"] == "a cat on orange" and len(reads) == 1  # the prompt is read once, by the service
    assert "**Not understood**: “cat”" in info and "made up (the prompt did not say): a shape: circle" in info
    assert info.endswith("Closest example: “a blue star in the middle, on an orange background”.")
    # A Turkish page: the notes in Turkish, the grammar's words its own (the record keeps the English)
    _p, info, record, *_ = studio.studio_tab.generate_from_page("kırmızı bir kedi", 256, 256, "eager", 4, 1.0, 1, False,
                                                                [], page=_page("tr-TR"))
    assert "**Anlaşılmadı**: “kedi”" in info and "uyduruldu (istem söylemedi): bir şekil: daire" in info, info
    # the closest example in the page's own words: the Turkish line that stands for the closest English one
    studio.studio_tab.examples["tr"] = ["mavi arka planda kırmızı bir daire", "ortada mavi bir yıldız, turuncu zeminde"]
    _p, info, *_ = studio.studio_tab.generate_from_page("turuncu zeminde bir kedi", 256, 256, "eager", 4, 1.0, 1, False,
                                                        [], page=_page("tr-TR"))
    assert info.endswith("“ortada mavi bir yıldız, turuncu zeminde”."), info
    cost = studio.studio_tab.refresh_studio("eager", 512, 512, 4)[1]
    assert "**Beyond training**" in cost and "broken or empty field" in cost
    assert "The nearest size it draws well: **1:1 · 256x256**." in cost


def test_a_png_made_past_the_default_step_bound_loads_with_its_steps(tmp_path, monkeypatch):
    """The PNG loader checks against the app's own bounds, not the defaults: with --max-steps 100,
    a PNG made at 80 steps loads its steps."""
    from tests.ui.fake_engines import start_manager
    from ui.handlers import Studio

    manager, _launches = start_manager(tmp_path, max_steps=100)
    try:
        studio = Studio(manager)
        path, *_ = studio.studio_tab.generate_from_page("a lighthouse", 64, 64, "eager", 80, 1.0, 7, False, [])
        assert studio.studio_tab.load_png(_uploaded(path, tmp_path, monkeypatch))[4] == 80
    finally:
        manager.close()


def test_the_cost_line_states_the_work_bound_before_the_click_and_generate_refuses_past_it(tmp_path):
    from tests.ui.fake_engines import start_manager

    manager, _launches = start_manager(tmp_path, max_work=30.0)
    try:
        from ui.handlers import Studio

        studio = Studio(manager)
        cost = studio.studio_tab.refresh_studio("eager", 1024, 1024, 20)[1]
        assert cost.endswith(" · 21.0 of the 30 megapixel-steps a run may take"), cost
        over = studio.studio_tab.refresh_studio("eager", 1024, 1024, 40)[1]
        assert "more work than one run may be" in over and "the limit is 30" in over, over
        assert "the limit is 30" in calm_refusal(
            studio.studio_tab.generate_from_page("a fox", 1024, 1024, "eager", 40, 1.0, 0, True, []))
    finally:
        manager.close()


def test_an_edit_on_the_page_takes_uploads_and_the_apps_own_images_only(studio, manager, tmp_path, monkeypatch):
    """Issue 34 on the page: references from the Edit area (uploads) or Use as reference (an image
    the app wrote); a path the event names anywhere else is refused before it is read; a batch is
    one sheet and one history entry; the cost line prices the whole signature."""
    from PIL import Image

    uploads = tmp_path / "uploads"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))
    (uploads / "a1").mkdir(parents=True)
    upload = uploads / "a1" / "wide.png"
    Image.new("RGB", (300, 200), "red").save(upload)
    outside = tmp_path / "elsewhere.png"
    Image.new("RGB", (64, 64)).save(outside)
    line = calm_refusal(studio.studio_tab.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 1, False, [],
                                                  [(str(outside), None)], 1))
    assert "reference 1 is not a file uploaded to this app" in line
    cost = studio.studio_tab.refresh_studio("compiled", 1024, 1024, 4, None, 2, [(str(upload), None)])[1]
    assert "1024x1024*2+ref1216x832" in cost  # 3:2 fitted to the 3:2 preset, priced before the click
    shown, line, record, _seed, gallery, _state, paths = studio.studio_tab.generate_from_page(
        "a fox", 64, 64, "eager", 4, 1.0, 1, False, [], [(str(upload), None)], 2)
    assert record["signature"] == "64x64*2+ref1216x832" and len(paths) == 2
    assert "2 images in one batch" in line and "300x200 → 1216x832 (cropped)" in line
    assert shown.size == (64 * 2 + 8, 64) and len(gallery) == 1  # one sheet, one history entry
    # Issue 54 (5): Use as reference makes it the one reference, however often it is pressed; Add keeps several
    # (the handler is not handed the references: pressed again, it cannot stack the image)
    assert studio.studio_tab.use_as_reference(paths) == [(paths[0], None)]
    assert studio.studio_tab.use_as_reference(paths) == [(paths[0], None)]
    references = studio.studio_tab.add_as_reference(paths, [(str(upload), None)])
    assert references == [(str(upload), None), (paths[0], None)]  # the app's own image joins the references
    assert studio.studio_tab.add_as_reference(paths, references) == gr.skip()  # the same image twice: once
    clicked = gr.SelectData(None, {"index": 1, "value": {"image": {"path": paths[1]}, "caption": "x"}})
    assert studio.studio_tab.history_selected(clicked) == [paths[1]]  # or the history image clicked last
    _s, _line, again, *_ = studio.studio_tab.generate_from_page("a fox", 64, 64, "eager", 4, 1.0, 1, False, [],
                                                                references, 1)
    assert again["signature"] == "64x64+ref1216x832+ref1024x1024"  # the 64x64 result fitted to the 1:1 preset
    assert again["references"][1]["source"] == "64x64" and again["references"][1]["fitted"] == "1024x1024"
    _gallery, table = studio.compare_tab.compare("a fox", 64, 64, 4, 1.0, 3, False, ["eager", "compiled"],
                                                 [(str(upload), None)])
    assert [r.signature for r in manager.records[-2:]] == ["64x64+ref1216x832"] * 2  # Compare runs the same edit
    assert list(table["mode"]) == ["eager", "compiled"]


def test_a_badge_says_where_a_shape_is_warm_among_replicas_and_warm_on_none_is_no_green_dot():
    """Issue 54 (6): "4:3 · 288x224 · warm 0/2" showed a green dot."""
    from ui.views_studio import badges_html

    def badge(warm_on):
        p = {"shape": "288x224", "state": "warm", "will_compile": False, "warm_on": warm_on, "mode": "eager",
             "expected_seconds": None, "note": "warm"}
        return badges_html([("4:3 · 288x224", p)])

    none = badge([0, 2])
    assert 'data-state="cold"' in none and "warm on 0 of 2 replicas" in none and "ns-warm" not in none
    one = badge([1, 2])
    assert 'data-state="warm"' in one and "warm on 1 of 2 replicas" in one
    assert "2 kopyanın 1 tanesinde sıcak" in badges_html([("4:3", {**{"shape": "288x224", "state": "warm",
                                                                     "will_compile": False, "warm_on": [1, 2],
                                                                     "mode": "eager", "expected_seconds": None,
                                                                     "note": "warm"}})], lang="tr")


def test_remove_takes_out_the_reference_clicked_last_or_the_last_one():
    from ui.handlers_studio import StudioTab

    refs = [("a.png", None), ("b.png", None), ("c.png", None)]
    assert StudioTab.remove_reference(refs, 0) == (refs[1:], None)
    assert StudioTab.remove_reference(refs, None) == (refs[:2], None)
    assert StudioTab.remove_reference(refs, 7) == (refs[:2], None)  # a stale index: the last one
    assert StudioTab.remove_reference([], None)[0] == gr.skip()


def test_the_latency_axes_start_at_zero_and_end_past_the_data_in_steps(manager):
    """Past the largest preset and the slowest run, in steps of 1, 2, 2.5 and 5: a point is never on
    the edge, and the ends (settings that rebuild the chart: ui.views_performance.plotted) seldom change."""
    from ui.app import build_ui
    from ui.views_performance import axis_end, latency_limits

    assert [axis_end(v) for v in (0.0655, 0.3, 0.45, 1.85, 0.9, 3.1)] == [0.1, 0.5, 0.5, 2.5, 1.0, 5.0]
    frame = pd.DataFrame({"mode": ["eager"] * 2, "shape": ["256x256", "512x512"], "megapixels": [0.0655, 0.262],
                          "seconds": [0.3, 0.5]})
    presets = [("1:1", Shape(256, 256))]
    assert latency_limits(frame, presets) == {"x_lim": [0, 0.5], "y_lim": [0, 1.0]}
    assert latency_limits(frame.iloc[:1], presets) == {"x_lim": [0, 0.1], "y_lim": [0, 0.5]}
    assert latency_limits(frame.iloc[:0], presets) == {"x_lim": [0, 0.1], "y_lim": [0, 1.0]}  # before any run
    latency, compiles = (b for b in build_ui(manager).blocks.values() if isinstance(b, (gr.ScatterPlot, gr.BarPlot)))
    assert latency.y_lim == [0, 1.0] and compiles.y_lim == [0, None]


def test_compare_and_performance_say_what_the_modes_show_on_a_cpu(studio, manager):
    compare_note, perf_note = studio.device_notes()
    assert compare_note["visible"] is perf_note["visible"] is (manager.device.kind == "cpu") is True
