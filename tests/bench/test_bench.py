"""The benchmark scripts run (figures are not asserted: benchmarks print, tests only check they work)."""

import json
import subprocess
import sys

import pytest

from bench import report
from tests.conftest import ROOT

EXPECTED_IDS = {"P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8"}


# The per-test timeout (pytest.ini: 300 s) would cut a busy machine's quick run short: each test
# waits as long as its subprocess may take, and a little more.
@pytest.mark.slow
@pytest.mark.timeout(1260)
def test_quick_suite_runs_every_row(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["quick"] is True and not result["errors"]
    assert {row["id"] for row in result["rows"]} == EXPECTED_IDS
    for row in result["rows"]:
        assert row["verdict"] in ("pass", "short", "info") and isinstance(row["value"], (int, float))
        assert (row["goal"] is None) == (row["verdict"] == "info")
    assert result["machine"]["cores"] >= 1


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_gpu_script_runs_on_cpu_quick(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_realistic", "--device", "cpu", "--quick", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["modes"]) == {"eager", "compiled", "regional"}
    assert result["modes"]["compiled"]["compiles"] >= 1 and result["modes"]["eager"]["compiles"] == 0
    assert result["P2_compiles_alternating"] == 0 and result["P1_app_overhead_ratio"] > 0
    assert result["reference"]["seconds"] == 0.57


def _result(verdict="short", pid="P9"):
    return {"date": "2026-01-01", "machine": {"cpu": "x", "cores": 2, "torch": "2.13.0"}, "errors": {},
            "rows": [{"id": pid, "name": "thing", "value": 1.5, "unit": "x", "goal": "<= 1", "verdict": verdict,
                      "spread": [1.4, 1.6], "absolute": {}, "note": ""}]}


def test_a_short_row_needs_an_explanation():
    with pytest.raises(SystemExit, match="P9 is short"):
        report.section(_result(), report.RESULTS / "x.json", None, None)
    text = report.section(_result(pid="P1"), report.RESULTS / "x.json", None, None)
    assert report.SHORT_BECAUSE["P1"] in text and "No GPU run is committed yet" in text


def test_the_readme_section_is_generated_from_the_latest_results():
    source = report.latest("*-cpu.json")
    assert source is not None, "commit a full `python -m bench` run"
    result = json.loads(source.read_text())
    gpu_source = report.latest("*-cuda-realistic.json")
    gpu = json.loads(gpu_source.read_text()) if gpu_source else None
    expected = report.section(result, source, gpu, gpu_source)
    assert expected in report.README.read_text(), "run `python -m bench.report` after `python -m bench`"
    assert report.PLOT.is_file()
