"""The benchmark suite: rows built by the method in bench/stats.py, the in-process rows run for real.

Figures are never asserted (benchmarks print, a busy machine makes them anything); what is asserted
is how a row is built and judged, that a count the app promises (no compile when switching warm
shapes) holds, and that the README section is generated from the committed results.
"""

import json
import os
import subprocess
import sys

import pytest

from bench import report, suite, table, warmup
from tests.conftest import ROOT

VERDICTS = {"pass", "fail", "inconclusive", "info"}


def _check_row(row):
    assert row["verdict"] in VERDICTS
    assert (row["goal"] is None) == (row["verdict"] == "info")
    if row["ci"] is not None:
        low, high = row["ci"]
        assert low <= row["value"] <= high and row["n"] >= 1
        assert (row["needed_reps"] is not None) == (row["verdict"] == "inconclusive")


@pytest.mark.slow
def test_in_process_rows_run_interleaved_and_judge_by_interval(tmp_path, monkeypatch):
    """P1, P2 and P12's cost row in their quick form, in this process. P8 is the same interleaved
    measurement over the three modes (the GPU script's quick run below measures it); P3-P7 start
    processes of their own and are covered below with their children's measurements replaced; P12's
    accuracy row runs at one preset in tests/backend/test_scene_model.py (here it is left out). ``python -m bench
    --quick`` runs every row."""
    from bench import editing

    monkeypatch.setattr(editing, "p12_edit_accuracy", lambda quick: [])
    result = suite.run(["P1", "P2", "P12"], quick=True)
    assert not result["errors"], result["errors"]
    rows = result["rows"]
    assert [r["id"] for r in rows] == ["P1", "P1", "P2", "P2", "P12"]
    edit = rows[-1]  # an edit against text to image at the same size: the references' tokens named
    assert edit["unit"] == "x" and "tokens 32 vs 16" in edit["name"] and "edit accuracy" in edit["note"]
    for row in rows:
        _check_row(row)
    timed = [r for r in rows if r["unit"] == "x"]
    assert timed and all(r["cpu"] and r["n"] >= 4 for r in timed)  # wall and process CPU, every repetition
    compiles = rows[2]
    assert compiles["unit"] == "compiles" and compiles["value"] == 0 and compiles["verdict"] == "pass"
    text = table.format_table(result)
    assert "95 % CI" in text and all(r["name"] in text for r in rows)


def test_p3_repeats_in_fresh_processes_and_a_copied_weight_fails_the_row(monkeypatch, tmp_path):
    import bench.memory_shapes as memory

    runs = iter([(100.0, 110.0, True), (100.0, 111.0, True), (100.0, 109.0, False)] * 2)  # tiny, bigger

    def fake_run_isolated(configs, backend, steps, shapes):
        one, three, shared = next(runs)
        return [{"config": configs[0], "rss_one_warm_bytes": one * 2**20, "rss_three_warm_bytes": three * 2**20,
                 "ratio_three_to_one": three / one, "weights_shared": shared}]

    monkeypatch.setattr(memory, "run_isolated", fake_run_isolated)
    ratio, growth = memory.p3_memory(tmp_path, quick=False)[:2]
    assert ratio["n"] == 3 and ratio["verdict"] == "fail" and "copied" in ratio["note"]
    assert growth["unit"] == "MiB" and growth["value"] == pytest.approx(5.0) and growth["n"] == 3


def test_p5_and_p7_pair_fresh_processes_in_random_orders(monkeypatch, tmp_path):
    calls = []

    def fake_child(model, mode, backend, size, cache):
        calls.append((mode, cache.name))
        if mode == "regional":
            return 3.0, 6.0
        return (10.0, 20.0) if not cache.exists() else (1.0, 2.0)

    def fake_child_p7(model, mode, backend, size, cache):
        seconds = fake_child(model, mode, backend, size, cache)
        cache.mkdir(parents=True, exist_ok=True)  # the first process leaves its cache behind
        return seconds

    monkeypatch.setattr("embedded.recipe.save_pipeline", lambda dest, cfg: dest)
    monkeypatch.setattr(warmup, "child_compile", fake_child)
    (p5,) = warmup.p5_regional_warmup(tmp_path, quick=False)
    assert p5["n"] == 3 and p5["value"] == pytest.approx(0.3) and p5["verdict"] == "pass"
    firsts = [calls[i][0] for i in range(0, 6, 2)]
    assert set(firsts) == {"compiled", "regional"}  # neither side always first
    assert p5["absolute"]["whole_process_cpu_s"]["median"] == 20.0

    monkeypatch.setattr(warmup, "child_compile", fake_child_p7)
    (p7,) = warmup.p7_persistent_cache(tmp_path, quick=False)
    assert p7["n"] == 3 and p7["value"] == pytest.approx(10.0) and p7["verdict"] == "pass"
    assert len({c for _m, c in calls[6:]}) == 3  # a new cache for every repetition


def test_p10_pairs_a_bundled_and_a_bare_fresh_process_per_repetition(monkeypatch, tmp_path):
    calls = []

    def fake_cli(*argv, cwd):
        calls.append(argv[:2])
        return ""

    def fake_first_image(mode, size, cache):
        calls.append(("generate", mode, cache.parent.name))
        bundled = "bundle" in cache.parent.name
        return (2.0 if bundled else 12.0) if mode == "compiled" else (1.5 if bundled else 6.0)

    monkeypatch.setattr(warmup, "app_cli", fake_cli)
    monkeypatch.setattr(warmup, "child_first_image", fake_first_image)
    compiled, compiled_fresh, regional, _regional_fresh = warmup.p10_bundle_start(tmp_path, quick=False)
    assert calls[0] == ("cache", "export")
    assert compiled["value"] == pytest.approx(6.0) and compiled["verdict"] == "pass" and compiled["n"] == 3
    assert compiled_fresh["value"] == 0 and compiled_fresh["verdict"] == "pass"
    assert regional["goal"] is None and regional["value"] == pytest.approx(4.0)
    generates = [c for c in calls if c[0] == "generate"]
    assert {g[2].split("-")[2] for g in generates[0:6:2]} == {"bundle", "none"}  # neither side always first
    assert sum(c == ("cache", "import") for c in calls) == 6  # a bundle imported into every bundled side


@pytest.mark.slow
def test_child_compile_reports_the_childs_cpu_time(tmp_path):
    """``child_compile`` itself: the app process it runs (a one-step eager generation of the random
    tiny model) spends seconds of CPU importing torch and diffusers, and that time — the kernel's
    accounting of the child, not this process's clock — is what it reports."""
    import time

    from bench.harness import child_compile

    wall = time.monotonic()
    compile_seconds, child_cpu = child_compile("embedded-random", "eager", "aot_eager", "64x64", tmp_path / "cache")
    wall = time.monotonic() - wall
    assert compile_seconds == 0.0  # eager on the CPU compiles nothing
    assert 0.5 < child_cpu < 2 * wall * (os.cpu_count() or 1), (child_cpu, wall)


@pytest.mark.slow
@pytest.mark.timeout(660)  # the subprocess may take 600 s on a busy machine; the test waits longer
def test_gpu_script_runs_on_cpu_quick(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_realistic", "--device", "cpu", "--quick", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["modes"]) == {"eager", "compiled", "regional"}
    assert result["modes"]["compiled"]["compiles"] >= 1 and result["modes"]["eager"]["compiles"] == 0
    assert result["modes"]["regional"]["compiles"] == 2  # two blocks of each class, one graph per class
    for mode in result["modes"].values():
        low, high = mode["steady"]["ci"]
        assert low <= mode["steady"]["median"] <= high and mode["steady"]["n"] == 3
    assert result["P2_compiles"] == 0
    for key in ("P1", "P2"):
        assert result[key]["verdict"] in VERDICTS - {"info"} and result[key]["n"] == 3
    assert result["peak_device_bytes"] is None and result["P3_device_memory_ratio"] is None  # no CUDA here


def _result(verdict="fail", pid="P9", ci=(1.4, 1.6)):
    return {"date": "2026-01-01", "machine": {"cpu": "x", "cores": 2, "torch": "2.13.0"}, "errors": {},
            "rows": [{"id": pid, "name": "thing", "value": 1.5, "unit": "x", "goal": "<= 1", "verdict": verdict,
                      "ci": list(ci), "spread": [1.3, 1.7], "n": 5, "needed_reps": None, "cpu": None,
                      "absolute": {}, "note": ""}]}


def test_some_rows_saved_again_replace_theirs_in_the_latest_full_result(monkeypatch, tmp_path):
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    full = _result("pass", "P1")
    full["rows"] += [dict(full["rows"][0], id=pid) for pid in ("P9", "P9", "P10")]
    full["note"] = "P4 from another run."
    full["machine"]["device"] = "cpu"
    (tmp_path / "2026-01-01-cpu.json").write_text(json.dumps({**full, "quick": False}))
    again = {**_result("fail", "P9"), "date": "2026-01-05", "quick": False}
    again["machine"]["device"] = "cpu"
    again["rows"].append(dict(again["rows"][0], id="P12"))
    merged = suite.merge_into_latest(again, ["P9", "P12"])
    assert [(r["id"], r["verdict"], r["measured"]) for r in merged["rows"]] == [
        ("P1", "pass", "2026-01-01"), ("P9", "fail", "2026-01-05"), ("P10", "pass", "2026-01-01"),
        ("P12", "fail", "2026-01-05")]
    assert merged["date"] == "2026-01-05" and merged["note"].startswith("P4 from another run. P9, P12 measured "
                                                                        "2026-01-05")
    assert "kept from `2026-01-01-cpu.json`" in merged["note"]
    # Measured again and merged into the merged file: its sentence is replaced, not added to.
    (tmp_path / "2026-01-05-cpu.json").write_text(json.dumps(merged))
    twice = suite.merge_into_latest({**again, "date": "2026-01-06"}, ["P9", "P12"])
    assert twice["note"] == ("P4 from another run. P9, P12 measured 2026-01-06 (`python -m bench --only P9,P12 "
                             "--save`); the other rows as measured 2026-01-01 (kept from `2026-01-01-cpu.json`).")
    # Another row merged later: the earlier merge's sentence stays for the rows it still holds.
    (tmp_path / "2026-01-06-cpu.json").write_text(json.dumps(twice))
    other = {**_result("pass", "P10"), "date": "2026-01-07", "quick": False, "machine": again["machine"]}
    thrice = suite.merge_into_latest(other, ["P10"])
    assert thrice["note"] == ("P4 from another run. P9, P12 measured 2026-01-06 (`python -m bench --only P9,P12 "
                              "--save`); P10 measured 2026-01-07 (`python -m bench --only P10 --save`); the other "
                              "rows as measured 2026-01-01 (kept from `2026-01-01-cpu.json`).")
    (tmp_path / "2026-01-07-cpu.json").write_text(json.dumps(thrice))
    assert suite.merge_into_latest({**again, "date": "2026-01-08"}, ["P9"])["note"] == (
        "P4 from another run. P12 measured 2026-01-06 (`python -m bench --only P9,P12 --save`); P10 measured "
        "2026-01-07 (`python -m bench --only P10 --save`); P9 measured 2026-01-08 (`python -m bench --only P9 "
        "--save`); the other rows as measured 2026-01-01 (kept from `2026-01-01-cpu.json`).")
    # a quick run stays apart
    assert suite.merge_into_latest({**again, "quick": True}, ["P9"]) == {**again, "quick": True}


def test_the_plot_is_dated_by_its_rows_not_by_the_merge():
    result = _result("pass", "P1")
    result["rows"][0].update(points=[{"mode": "eager", "pixels": 1, "seconds": 1}], measured="2025-12-30")
    result["rows"].append(dict(_result()["rows"][0], measured="2026-01-01"))  # no points: not plotted
    assert report.plotted_on(result) == "2025-12-30"


def test_the_readme_section_lists_what_did_not_pass_without_excuses():
    text = report.section(_result(), report.RESULTS / "x.json", None, None)
    assert "| P9 | thing | 1.5 x | 1.4–1.6 | 5 | <= 1 | fail |" in text
    assert "Not passed in this run: **P9** thing — fail." in text and report.METHOD in text
    assert not hasattr(report, "SHORT_BECAUSE")
    passed = report.section(_result("pass", ci=(0.8, 0.9)), report.RESULTS / "x.json", None, None)
    assert "Not passed" not in passed


def test_the_readme_section_is_generated_from_the_latest_results():
    source = report.latest("*-cpu.json")
    assert source is not None, "commit a full `python -m bench` run"
    result = json.loads(source.read_text())
    gpu_source = report.latest("*-cuda-realistic.json")
    gpu = json.loads(gpu_source.read_text()) if gpu_source else None
    expected = report.section(result, source, gpu, gpu_source)
    assert expected in report.README.read_text(), "run `python -m bench.report` after `python -m bench`"
    assert report.PLOT.is_file()


def test_compare_flags_a_regression_only_where_the_intervals_say_so(tmp_path, capsys):
    from bench import compare

    def run(*rows):
        return {"rows": [{"id": i, "name": n, "value": v, "unit": "x", "goal": g, "ci": list(ci)}
                         for i, n, v, g, ci in rows]}

    old = run(("P1", "overhead (a 1.0 s call)", 1.00, "<= 1.02", (0.99, 1.01)),
              ("P4", "transport", 5.0, "<= 5", (4.5, 5.5)),
              ("P7", "cache", 5.0, ">= 3", (4.0, 6.0)),
              ("P8", "modes", 1.0, None, (0.9, 1.1)), ("P9", "gone row", 1.0, None, (1.0, 1.0)))
    new = run(("P1", "overhead (a 1.1 s call)", 1.05, "<= 1.02", (1.03, 1.07)),  # the name's figures differ
              ("P4", "transport", 5.2, "<= 5", (4.6, 5.8)),
              ("P7", "cache", 8.0, ">= 3", (7.0, 9.0)),
              ("P8", "modes", 0.5, None, (0.4, 0.6)), ("P10", "new row", 2.0, None, (2.0, 2.0)))
    verdicts = {e["id"]: e["verdict"] for e in compare.compare_rows(old, new)}
    assert verdicts == {"P1": "regressed", "P4": "same", "P7": "improved", "P8": "changed", "P9": "gone",
                        "P10": "new"}
    p1 = next(e for e in compare.compare_rows(old, new) if e["id"] == "P1")
    assert p1["ratio"] == pytest.approx(1.05) and p1["ratio_ci"] == pytest.approx([1.03 / 1.01, 1.07 / 0.99])
    for name, data in (("old", old), ("new", new)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    assert compare.main([str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 1  # a regression: status 1
    assert "| P1 overhead | 1 x | 1.05 x | 1.050 [1.020–1.081] | regressed |" in capsys.readouterr().out
    assert compare.main([str(tmp_path / "old.json"), str(tmp_path / "old.json")]) == 0


def test_every_project_name_the_benchmarks_and_tools_import_exists():
    """bench/ and tools/ import the app's modules inside functions (a row runs only when asked), so a
    moved module or name would break a row only when someone runs it: every ``from X import a`` of
    the project's, at any depth, names a module and attributes that exist (a fallback for an older
    checkout, inside ``except ImportError``, is left alone)."""
    import ast
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    missing = []
    for path in sorted([*root.glob("bench/*.py"), *root.glob("tools/*.py")]):
        tree = ast.parse(path.read_text())
        fallbacks = {id(n) for handler in ast.walk(tree) if isinstance(handler, ast.ExceptHandler)
                     for n in ast.walk(handler)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module or id(node) in fallbacks:
                continue
            if node.module.split(".")[0] not in ("backend", "ui", "web", "server", "embedded"):
                continue
            try:
                module = importlib.import_module(node.module)
            except ImportError as exc:
                missing.append(f"{path.name}: {node.module} ({exc})")
                continue
            missing += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                        if not hasattr(module, a.name) and not _is_submodule(node.module, a.name)]
    assert not missing, missing


def _is_submodule(package: str, name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(f"{package}.{name}") is not None
