"""Manager: compile states from measured events, limits, cancel, the warm-only lock, warm-up, status."""

import json
import threading
from pathlib import Path

import pytest
import torch

from backend.errors import (
    BackendBusy,
    BackendNotReady,
    GenerationCancelled,
    GenerationFailed,
    InvalidRequest,
    ShapeLimitReached,
    ShapeLocked,
)
from backend.serving.manager import Manager
from backend.shapes import Shape
from tests.conftest import INDUCTOR_LOCK, make_settings, plant_inductor_entry


def _req(manager, mode, h, w, steps=2, seed=1):
    return manager.validate("a red fox", h, w, steps=steps, seed=seed, mode=mode)


def _row(manager, mode, shape):
    return next(r for r in manager.status().shapes if r["mode"] == mode and r["shape"] == shape)


def test_cold_compiling_warm_from_measured_events(manager):
    s = Shape(64, 64)
    assert manager.predict("compiled", s)["state"] == "cold"
    assert manager.predict("compiled", s)["will_compile"] is True
    seen = []

    def progress(event):
        seen.append((event.phase, manager.table.state("compiled", s), event.step))

    _img, result = manager.generate(_req(manager, "compiled", 64, 64), progress)
    phases = [p for p, _state, _step in seen]
    assert phases[0] == "encoding" and "compiling" in phases and phases[-2:] == ["decoding", "done"]
    assert ("compiling", "compiling", 0) in seen  # the table said 'compiling' while dynamo compiled
    row = _row(manager, "compiled", "64x64")
    assert row["state"] == "warm" and row["compiles"] == 1
    assert row["compile_seconds"] == pytest.approx(result.compile_seconds)
    manager.generate(_req(manager, "compiled", 64, 64))
    row = _row(manager, "compiled", "64x64")
    assert row["steady_seconds"] is not None and row["runs"] == 2
    prediction = manager.predict("compiled", s, steps=2)
    assert prediction["will_compile"] is False and prediction["expected_seconds"] > 0


def test_eager_on_cpu_never_compiles_and_says_so(manager):
    p = manager.predict("eager", Shape(64, 64))
    assert p["will_compile"] is False and "does not compile" in p["note"]


def test_transposed_shape_with_same_tokens_reuses_the_graph(manager):
    manager.generate(_req(manager, "compiled", 128, 64))
    p = manager.predict("compiled", Shape(64, 128))
    assert p["will_compile"] is False and "128x64" not in p["note"] and "64x128" in p["note"]
    _img, result = manager.generate(_req(manager, "compiled", 64, 128))
    assert result.compiled is False  # measured, not assumed from (h, w)
    row = _row(manager, "compiled", "128x64")
    assert row["state"] == "warm" and row["compiles"] == 0


def test_estimate_for_a_cold_shape_comes_from_past_compiles(manager):
    _img, first = manager.generate(_req(manager, "compiled", 64, 64))
    p = manager.predict("compiled", Shape(96, 96))
    assert p["will_compile"] is True
    assert p["estimate_compile_seconds"] == pytest.approx(first.compile_seconds, abs=1e-3)
    assert (p["estimate_source"], p["estimate_compiles"]) == ("measured", 1)
    # Nothing measured in regional mode yet: the compile backend's prior (aot_eager here), said to be one.
    regional = manager.predict("regional", Shape(96, 96))
    assert (regional["estimate_compile_seconds"], regional["estimate_source"]) == (5.0, "prior")


def test_shape_limit_refuses_instead_of_falling_back_to_eager(tmp_path):
    mgr = Manager(make_settings(tmp_path, max_compiled_shapes=2))
    mgr.start()
    assert torch._dynamo.config.recompile_limit >= 3
    mgr.generate(_req(mgr, "compiled", 64, 64))
    mgr.generate(_req(mgr, "compiled", 96, 96))
    assert mgr.predict("compiled", Shape(128, 128))["refused"]
    with pytest.raises(ShapeLimitReached, match="--max-compiled-shapes 2"):
        mgr.generate(_req(mgr, "compiled", 128, 128))
    assert _row(mgr, "compiled", "96x96")["state"] == "warm"
    assert mgr.generate(_req(mgr, "compiled", 64, 64))[1].compiled is False  # warm shapes still run
    mgr.generate(_req(mgr, "eager", 128, 128))  # eager is not limited
    mgr.close()


def test_dynamo_recompile_limit_hit_is_a_clear_failure_not_silent_eager(manager):
    manager.generate(_req(manager, "compiled", 64, 64))
    with torch._dynamo.config.patch(recompile_limit=1):
        with pytest.raises(GenerationFailed, match="recompile limit"):
            manager.generate(_req(manager, "compiled", 96, 96))
    row = _row(manager, "compiled", "96x96")
    assert row["state"] == "failed" and "recompile limit" in row["error"]
    assert manager.generate(_req(manager, "compiled", 96, 96))[1].compiled is True  # retry recovers
    assert _row(manager, "compiled", "96x96")["state"] == "warm"


def _broken_backend(gm, example_inputs):
    raise RuntimeError("injected compiler failure")


if "broken_for_test" not in torch._dynamo.list_backends(exclude_tags=()):
    torch._dynamo.register_backend(_broken_backend, name="broken_for_test")


def test_a_compile_that_fails_marks_the_shape_failed(manager, monkeypatch):
    monkeypatch.setattr(manager.device.info, "compile_backend", "broken_for_test")
    with pytest.raises(GenerationFailed, match="injected compiler failure"):
        manager.generate(_req(manager, "regional", 64, 64))
    row = _row(manager, "regional", "64x64")
    assert row["state"] == "failed" and "while compiling" in row["error"]
    assert "injected" in manager.status().last_error
    assert manager.generate(_req(manager, "eager", 64, 64))[0] is not None  # the app still works


def test_an_exception_inside_the_pipeline_is_a_failed_request_not_a_dead_backend(manager, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("injected pipeline failure")

    monkeypatch.setattr(manager.engine.pipe.vae, "decode", boom)
    with pytest.raises(GenerationFailed, match="RuntimeError in the pipeline: injected pipeline failure"):
        manager.generate(_req(manager, "eager", 64, 64))
    assert manager.status().state == "ready"
    monkeypatch.undo()
    assert manager.generate(_req(manager, "eager", 64, 64))[0] is not None


def test_cancel_stops_at_the_next_step_and_keeps_a_finished_compile(manager):
    def progress(event):
        if event.phase == "denoising" and event.step == 1:
            assert manager.status().busy["step"] == 1
            assert manager.cancel() is True

    with pytest.raises(GenerationCancelled, match="after step 1 of 6"):
        manager.generate(_req(manager, "compiled", 64, 64, steps=6), progress)
    assert manager.status().busy is None
    row = _row(manager, "compiled", "64x64")
    assert row["state"] == "warm" and row["compiles"] == 1 and row["runs"] == 0
    _img, result = manager.generate(_req(manager, "compiled", 64, 64))  # a stale cancel does not leak
    assert result.compiled is False
    assert manager.cancel() is False  # nothing running


def test_warm_only_lock_refuses_cold_shapes_and_serves_warm_ones(manager):
    manager.warmup([Shape(64, 64)], mode="compiled")
    manager.set_warm_only(True)
    assert manager.status().warm_only is True
    with pytest.raises(ShapeLocked, match="warm: 64x64"):
        manager.generate(_req(manager, "compiled", 96, 96))
    assert manager.predict("compiled", Shape(96, 96))["refused"]
    assert manager.generate(_req(manager, "compiled", 64, 64))[1].compiled is False
    assert manager.generate(_req(manager, "eager", 96, 96))  # eager on CPU never compiles


def test_warm_only_lock_has_a_compile_safety_net(manager):
    # If the table is wrong (it believes a shape is warm), dynamo's fail_on_recompile stance refuses.
    manager.generate(_req(manager, "compiled", 64, 64))
    manager.table.finish("compiled", Shape(96, 96), compiles=1, compile_seconds=1.0, seconds=None)
    manager.set_warm_only(True)
    with pytest.raises(ShapeLocked, match="locked to warm shapes"):
        manager.generate(_req(manager, "compiled", 96, 96))
    manager.set_warm_only(False)
    assert manager.generate(_req(manager, "compiled", 96, 96))[1].compiled is True


def test_warmup_and_prewarm_make_shapes_warm_with_latency(tmp_path):
    mgr = Manager(make_settings(tmp_path, prewarm=[Shape(64, 64), Shape(128, 64)], mode="regional"))
    mgr.start()
    for shape in ("64x64", "64x128"):
        row = _row(mgr, "regional", shape)
        assert row["state"] == "warm" and row["compile_seconds"] > 0 and row["steady_seconds"] > 0
    ticks = []
    results = mgr.warmup([Shape(96, 96)], mode="compiled", progress=lambda i, n, s: ticks.append((i, n)))
    assert ticks == [(0, 1), (1, 1)]
    assert [r.compiled for r in results] == [True, False]
    mgr.close()


def test_device_work_is_serialised(manager):
    active, overlaps = [], []
    lock = threading.Lock()

    def progress(event):
        with lock:
            if event.phase == "encoding":
                active.append(1)
                overlaps.append(len(active))
            if event.phase == "done":
                active.pop()

    errors = []

    def worker(seed):
        try:
            manager.generate(_req(manager, "eager", 64, 64, seed=seed), progress)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and overlaps == [1, 1, 1, 1]
    assert len(manager.records) == 4


def test_status_is_json_and_complete(manager):
    manager.generate(_req(manager, "compiled", 64, 64))
    status = manager.status().to_json()
    assert json.loads(json.dumps(status)) == status  # JSON-able as it is: no int keys, no objects
    assert status["state"] == "ready"
    assert status["device"]["kind"] == "cpu" and status["dtype"] == "float32"
    assert status["model"]["label"] == "embedded:tiny-flux2-klein"
    assert status["engine"]["engine"] == "in-process"
    cache = Path(status["cache"]["dir"])
    on_disk = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and not p.is_symlink())
    assert status["cache"]["bytes"] == on_disk  # what the folder holds, counted, not a placeholder
    assert status["memory"]["rss_bytes"] > 0
    row = next(r for r in status["shapes"] if (r["mode"], r["shape"]) == ("compiled", "64x64"))
    assert row["state"] == "warm" and row["compile_seconds"] > 0 and "steady_seconds" in row


def test_a_request_made_while_the_model_loads_waits_and_runs(tmp_path, monkeypatch):
    """The page's click or an API call made right after the start gets its image, with "loading"
    progress meanwhile; a manager that was never started refuses at once."""
    never = Manager(make_settings(tmp_path))
    with pytest.raises(BackendNotReady, match="still loading"):
        never.generate(never.validate("fox", 64, 64))
    release = threading.Event()
    from backend.models import source as model_source

    real = model_source.resolve_model

    def slow_resolve(*args, **kwargs):
        release.wait(60)  # the load holds here until the request is waiting
        return real(*args, **kwargs)

    monkeypatch.setattr("backend.models.source.resolve_model", slow_resolve)
    mgr = Manager(make_settings(tmp_path))
    mgr.start(background=True)
    seen, done = [], {}

    def click():
        done["result"] = mgr.generate(mgr.validate("fox", 64, 64, steps=1, seed=3), progress=seen.append)[1]

    waiter = threading.Thread(target=click)
    waiter.start()
    while not seen and waiter.is_alive():  # waiting on the state, not on seconds: the first "loading" event
        waiter.join(0.05)
    assert seen[0].phase == "loading" and mgr.status().state == "loading"
    release.set()
    waiter.join(120)
    assert not waiter.is_alive() and done["result"].seed == 3
    assert [e.phase for e in seen].index("encoding") > 0  # loading first, then the run
    mgr.close()


def test_failed_loads_are_reported(tmp_path):
    bad = Manager(make_settings(tmp_path, model=str(tmp_path / "missing")))
    bad.start(background=True)
    assert bad.wait_ready(30) is False
    assert bad.status().state == "failed" and "no such folder" in bad.status().load_error
    with pytest.raises(BackendNotReady, match="failed to load"):
        bad.generate(bad.validate("fox", 64, 64))


def test_readiness_names_no_path_when_the_model_fails_to_load(tmp_path):
    """Issue 53 (9): /readyz (anyone's) printed --model's folder; its reason now holds no path, and the
    operator's status keeps the whole error."""
    secret = tmp_path / "private-models" / "missing"
    bad = Manager(make_settings(tmp_path, model=str(secret)))
    bad.start(background=True)
    assert bad.wait_ready(30) is False
    ready, why = bad.readiness()
    assert not ready and "failed to load" in why
    assert "/" not in why and "private-models" not in why
    assert str(secret) in bad.status().load_error
    # nor does any door's refusal, nor a viewer's status
    with pytest.raises(BackendNotReady) as refused:
        bad.generate(bad.validate("fox", 64, 64))
    assert "private-models" not in str(refused.value)
    assert "private-models" not in bad.status().for_viewer().load_error


def test_a_prewarm_shape_that_fails_leaves_the_app_ready(tmp_path, monkeypatch):
    mgr = Manager(make_settings(tmp_path, prewarm=[Shape(64, 64)], mode="regional",
                                compile_backend="broken_for_test"))
    mgr.start()
    status = mgr.status()
    assert status.state == "ready" and "prewarm: " in status.last_error
    assert _row(mgr, "regional", "64x64")["state"] == "failed"
    assert mgr.generate(_req(mgr, "eager", 64, 64))[1].compiled is False
    mgr.close()


def test_compare_runs_one_request_through_modes(manager):
    entries = manager.compare(_req(manager, "eager", 64, 64, seed=9), ["eager", "compiled", "regional"])
    assert [e["mode"] for e in entries] == ["eager", "compiled", "regional"]
    assert entries[0]["max_diff"] == 0 and all(e["max_diff"] <= 1 for e in entries)
    assert [e["result"].compiled for e in entries] == [False, True, True]
    assert len({e["result"].seed for e in entries}) == 1
    with pytest.raises(InvalidRequest, match="two or three"):
        manager.compare(_req(manager, "eager", 64, 64), ["eager"])


def test_background_warmup_reports_progress_and_refuses_a_second(manager):
    import time

    manager.start_warmup([Shape(64, 64), Shape(96, 96)], "compiled")
    with pytest.raises(BackendBusy):
        manager.start_warmup([Shape(64, 64)], "compiled")
    deadline = time.monotonic() + 60
    while manager.status().warmup["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    warmup = manager.status().warmup
    assert warmup["done"] == warmup["total"] == 2 and warmup["error"] is None
    assert _row(manager, "compiled", "96x96")["state"] == "warm"


def test_a_warm_up_list_is_deduplicated_and_capped(manager):
    from backend.serving.controls import MAX_SHAPES
    from backend.shapes import PRESETS

    assert MAX_SHAPES == len(PRESETS)
    with pytest.raises(InvalidRequest, match=f"at most {MAX_SHAPES} different shapes"):
        manager.start_warmup([Shape(64 + 16 * i, 64) for i in range(MAX_SHAPES + 1)], "eager")
    manager.start_warmup([Shape(64, 64)] * 20, "eager")  # the probe's 20 copies: one shape
    assert manager.status().warmup["total"] == 1
    deadline = __import__("time").monotonic() + 120
    while manager.status().warmup["running"] and __import__("time").monotonic() < deadline:
        __import__("time").sleep(0.05)


def test_clear_compile_cache_empties_the_folder(manager):
    folder = Path(manager.device.cache_info()["dir"])
    plant_inductor_entry(folder, 1000)
    (folder / "mine.txt").write_text("a user's file")
    assert manager.clear_compile_cache() >= 1000
    assert folder.is_dir() and sorted(p.name for p in folder.iterdir()) == ["mine.txt"]


def test_clear_compile_cache_is_refused_while_a_group_runs(manager, monkeypatch):
    """Its ranks hold lock files in the local NEFF cache and compile into the caches."""
    import types

    folder = Path(manager.device.cache_info()["dir"])
    held = plant_inductor_entry(folder, 10, INDUCTOR_LOCK)
    group = types.SimpleNamespace(state="ready")
    monkeypatch.setattr(manager.engines["tensor-parallel"], "group", group)
    with pytest.raises(BackendBusy, match="stop the group first"):
        manager.clear_compile_cache()
    assert held.exists()
    group.state = "dead"
    assert manager.clear_compile_cache() >= 10


def test_save_image_writes_a_png_with_parameters(manager):
    from backend.images.pngmeta import read_png_parameters

    image, result = manager.generate(_req(manager, "eager", 64, 64, seed=31))
    path = manager.save_image(image, result)
    assert result.path == path and Path(path).parent == manager.settings.output_dir.resolve()
    assert read_png_parameters(path)["seed"] == 31


def test_a_run_nobody_waits_for_stops_at_its_next_step(manager):
    """The page that asked has gone (Gradio marked its job not alive): the run ends at a step boundary."""
    asked = []

    def still_wanted():
        asked.append(True)
        return len(asked) < 2  # the page goes away during the first step

    with pytest.raises(GenerationCancelled):
        manager.generate(_req(manager, "eager", 64, 64, steps=4), still_wanted=still_wanted)
    assert manager.status().state == "ready"
    _img, result = manager.generate(_req(manager, "eager", 64, 64, steps=1))  # the next one runs
    assert result.steps == 1



def test_a_prompt_checked_before_the_model_loaded_is_held_to_the_text_encoders_limit_when_it_runs(tmp_path):
    """The CLI checks its requests before it loads the model, and a click may come during the load:
    without the tokenizer only the character limit applies, so the service counts the prompt's tokens
    when the run starts (``GenerationRequest.tokens`` None), whichever door it came by."""
    mgr = Manager(make_settings(tmp_path, max_prompt_tokens=60))
    long = "a red fox " * 20
    early = mgr.validate(long, 64, 64, steps=1)
    assert early.tokens is None  # no tokenizer yet: the 200 characters pass
    short = mgr.validate("a fox", 64, 64, steps=1)
    mgr.start()
    try:
        with pytest.raises(InvalidRequest, match="tokens with the chat template") as refused:
            mgr.run(early, save=False)
        assert refused.value.field == "prompt" and not mgr.records
        assert mgr.run(short, save=False)[1].prompt == "a fox"
        assert mgr.validate("a fox", 64, 64, steps=1).tokens > 0  # counted at once now
    finally:
        mgr.close()
