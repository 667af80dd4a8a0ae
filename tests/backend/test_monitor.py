"""neuron-monitor read live (backend.hardware.monitor): the captured stream parses with its figures, the
panel and /metrics show them under the exporter's names, the stream is read bounded, the child ends with
the app, and the stand-in's ``neuron-monitor`` emits the captured format."""

from __future__ import annotations

import ast
import json
import os
import stat
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from backend.hardware import monitor as nm
from backend.serving.metrics import chip_families
from tests.neuron.captures import text
from tests.neuron.standin import run_py, standin_env
from ui.views_system import chip_markdown

PID = 16851  # the captured trn1.2xlarge process


def captured_lines() -> list[str]:
    """The captured reports as neuron-monitor streams them: one JSON object per line."""
    literal = text("neuron-monitor/trn1.2xlarge-stream.python-literal.txt").split("=", 1)[1]
    return [json.dumps(report) for report in ast.literal_eval(literal)]


def fed(lines: list[str]) -> nm.NeuronMonitor:
    monitor = nm.NeuronMonitor("neuron", clock=lambda: 100.0)
    for line in lines:
        monitor.take(nm.parse_report(line))
    return monitor


def test_the_captured_stream_parses_with_the_figures_in_the_file():
    first = nm.parse_report(captured_lines()[0])
    (process,) = first["processes"]
    assert process["pid"] == PID and process["tag"] == "16851"
    core0, core1 = process["cores"]
    assert core0["core"] == 0 and core0["utilization"] == pytest.approx(1.3631567613356375 / 100)
    assert core0["memory"] == {"constants": 196608, "model_code": 101125344, "model_shared_scratchpad": 0,
                               "runtime_memory": 0, "tensors": 943608}
    assert core1["memory"]["model_code"] == 32768 and core1["utilization"] == 0
    assert (process["device_bytes"], process["host_bytes"]) == (102298328, 610705408)
    assert process["latency"]["p50"] == 0.000095367431640625 and process["status"]["completed"] == 260
    assert first["instance"]["instance_type"] == "trn1.2xlarge" and first["instance"]["region"] == "us-west-2"
    assert first["hardware"]["neuron_device_count"] == 1 and first["hardware"]["neuroncore_per_device_count"] == 2


def test_the_reading_names_who_holds_each_core_and_a_viewer_sees_no_pid():
    from backend.serving.status import Status

    chip = fed(captured_lines()).reading({PID: "tp-rank-1"})
    assert [(c["core"], c["owner"], c["memory_bytes"]) for c in chip["cores"]] == [
        (0, "tp-rank-1", 196608 + 101125344 + 943608), (1, "tp-rank-1", 32768)]
    assert chip["processes"][0]["status_total"]["completed"] == 3 * 260  # three periods added up
    assert chip["age_seconds"] == 0 and chip["reports"] == 3
    blank = {f: None for f in Status.__dataclass_fields__}
    seen = Status(**{**blank, "model": {}, "warmup": {}, "engines": {}, "modes": [], "shapes": [], "running": [],
                     "waiting": [], "compiling_workers": [], "fallback_ops": {}, "chip": chip}).for_viewer().chip
    assert not any("pid" in row or "tag" in row for row in seen["processes"] + seen["cores"])
    assert seen["cores"][0]["owner"] == "tp-rank-1"


def test_owners_come_from_the_engines_describe():
    owners = nm.process_owners(10, {"rank_pids": {"0": 11, "1": 12}}, {"replicas": [{"index": 0, "pid": 13},
                                                                                     {"index": 1, "pid": None}]})
    assert owners == {10: "app", 11: "tp-rank-0", 12: "tp-rank-1", 13: "replica-0"}


def test_the_panel_shows_the_figures_in_both_languages():
    chip = fed(captured_lines()).reading({PID: "app"})
    en = chip_markdown(chip, "en")
    assert "| 0 | the app | 1.3 % | 97.5 MB | constants 192.0 KB, model_code 96.4 MB, tensors 921.5 KB |" in en
    assert "| 1 | the app | 0.0 % | 32.0 KB | model_code 32.0 KB |" in en
    tr = chip_markdown(nm.NeuronMonitor("neuron").reading({}), "tr")
    assert "neuron-monitor'un ilk raporu bekleniyor" in tr


def test_metrics_carry_the_exporters_names_and_labels_with_the_figures():
    """Every family of the captured exporter output, with its labels (ours add ``owner``), so the Grafana
    dashboard AWS ships for it (its queries captured beside it) reads ours."""
    chip = fed(captured_lines()[:1]).reading({PID: "app"})

    class One:
        def collect(self):
            yield from chip_families(chip)

    registry = CollectorRegistry()
    registry.register(One())
    ours = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    theirs = {f.name: f for f in text_string_to_metric_families(
        text("neuron-monitor/prometheus-exporter-inf1.xlarge.excerpt.txt"))}
    for name, family in theirs.items():
        assert ours[name].type == family.type, name
        assert {*family.samples[0].labels, "owner"} == set(ours[name].samples[0].labels), name
    value = {(s.name, s.labels.get("neuroncore"), s.labels.get("percentile"), s.labels.get("status_type"),
              s.labels.get("memory_location")): s.value for f in ours.values() for s in f.samples}
    assert value[("neuroncore_utilization_ratio", "0", None, None, None)] == pytest.approx(0.013631567613356375)
    assert value[("neuroncore_memory_usage_model_code", "0", None, None, "None")] == 101125344
    assert value[("neuron_runtime_memory_used_bytes", None, None, None, "neuron_device")] == 102298328
    assert value[("execution_latency_seconds", None, "p99", None, None)] == 0.00013184547424316406
    assert value[("execution_status_total", None, None, "completed", None)] == 260
    queries = text("neuron-monitor/grafana-dashboard-queries.txt")
    assert "neuroncore_utilization_ratio" in queries and "avg by (percentile) (execution_latency_seconds)" in queries


def test_off_neuron_nothing_starts_and_the_panel_says_what_it_would_show(monkeypatch):
    monkeypatch.setattr(nm.subprocess, "Popen", lambda *a, **k: pytest.fail("started off Neuron"))
    monitor = nm.NeuronMonitor("cpu")
    monitor.start()
    chip = monitor.reading({})
    assert chip["running"] is False and chip["why"] == "off_neuron"
    assert "The app runs on cpu: there is no Neuron runtime to read" in chip_markdown(chip, "en")
    assert "Uygulama cpu üzerinde çalışıyor" in chip_markdown(chip, "tr")


def _fake_tool(tmp_path, body: str) -> str:
    path = tmp_path / "neuron-monitor"
    path.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_the_stream_is_read_bounded_and_only_reports_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(nm, "LINE_CAP", 4096)
    good = captured_lines()[2]
    assert len(good) > 4096  # the captured report itself is over this cap: a shorter one is made below
    small = json.dumps({"neuron_runtime_data": [{"pid": 7, "neuron_runtime_tag": "7", "error": "", "report": {
        "neuroncore_counters": {"neuroncores_in_use": {"3": {"neuroncore_utilization": 250}, "x": {},
                                                       "99999": {"neuroncore_utilization": 5}}, "error": ""},
        "memory_used": {"neuron_runtime_used_bytes": {"neuron_device": -5, "usage_breakdown": {
            "neuroncore_memory_usage": {"3": {"tensors": "many", "constants": 10}}}}, "error": "failed"}}}]})
    lines = ["x" * 10000, "[" * 100000 + "]" * 100000, '{"neuron_runtime_data": 5}', "not json", small]
    tool = _fake_tool(tmp_path, f"sys.stdout.write({json.dumps(chr(10).join(lines) + chr(10))})")
    monitor = nm.NeuronMonitor("neuron", executable=tool)
    monitor.start()
    monitor._reader.join(30)  # the fake tool ends after its lines: the reader ends with it
    chip = monitor.reading({7: "replica-0"})
    assert chip["reports"] == 1 and chip["dropped"] == 4
    assert chip["why"] == f"{tool} exited (code 0)" and chip["running"] is False
    (core,) = chip["cores"]
    # percent capped at 100; the memory group's error skips it, as the exporter does; bad keys dropped
    assert core["core"] == 3 and core["utilization"] == 1.0 and core["memory_bytes"] == 0
    monitor.close()


def test_close_ends_the_child_and_its_config(tmp_path):
    tool = _fake_tool(tmp_path, "print('{\"neuron_runtime_data\": []}', flush=True)\ntime.sleep(600)")
    monitor = nm.NeuronMonitor("neuron", executable=tool, period=0.5)
    monitor.start()
    proc, folder = monitor._proc, monitor._config_dir
    assert json.loads(open(os.path.join(folder, "monitor.conf")).read()) == {
        "period": "0.5s", "neuron_runtimes": [{"tag_filter": ".*", "metrics": [
            {"type": "neuroncore_counters"}, {"type": "memory_used"}, {"type": "execution_stats"}]}]}
    monitor.close()
    assert proc.poll() is not None and not monitor._reader.is_alive() and not os.path.exists(folder)
    assert monitor.reading({})["running"] is False


def test_a_rank_report_keeps_its_peak_and_cuts_long_op_lists_to_fit():
    from backend.request.records import EngineOutput
    from backend.workers.collectives import COUNTERS_BYTES, _counters, encode_job

    out = EngineOutput(image=None, compiles=0, compile_seconds=0.0, neff_compiles=1, seconds=1.0, encode=0.0,
                       denoise=0.0, decode=0.0, fallback_ops=["aten::silu"], peak_bytes=123,
                       device_ops=[f"aten::op_{i:04d}" for i in range(1000)])
    report = _counters(out)
    assert len(encode_job(report)) <= COUNTERS_BYTES and report["peak"] == 123
    assert report["host"] == ["aten::silu"] and report["device"][-1].startswith("(and ")


def test_the_standin_neuron_monitor_emits_the_captured_format(tmp_path):
    """A process on the stand-in claims its core, keeps a tensor and synchronizes; the stand-in's tool
    lists it on that core with the tensor's bytes, in the captured report's keys."""
    env = standin_env(tmp_path / "state", NEURON_RT_VISIBLE_CORES="2")
    conf = tmp_path / "monitor.conf"
    conf.write_text(json.dumps(nm.config(0.2)))
    code = f"""
import os, subprocess, torch
x = torch.ones(1000, device="neuron")
torch.neuron.synchronize()
proc = subprocess.Popen(["neuron-monitor", "-c", {str(conf)!r}], stdout=subprocess.PIPE, text=True)
print(os.getpid()); print(proc.stdout.readline(), end=""); proc.terminate(); proc.wait()
"""
    done = run_py(code, env)
    assert done.returncode == 0, done.stderr
    pid, line = done.stdout.splitlines()[:2]
    report = nm.parse_report(line)
    (process,) = report["processes"]
    assert process["pid"] == int(pid) and process["tag"] == pid
    held = [c for c in process["cores"] if c["memory_bytes"]]
    assert [(c["core"], c["memory"]["tensors"]) for c in held] == [(2, 4000)]
    captured = json.loads(captured_lines()[0])["neuron_runtime_data"][0]["report"]
    emitted = json.loads(line)["neuron_runtime_data"][0]["report"]
    for group in nm.GROUPS:  # every key the captured report has in each group, at each level the app reads
        assert set(emitted[group]) == set(captured[group]), group
    assert set(emitted["memory_used"]["neuron_runtime_used_bytes"]) == set(
        captured["memory_used"]["neuron_runtime_used_bytes"])
    assert set(emitted["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]["neuroncore_memory_usage"]["2"]) \
        == set(nm.MEMORY_CATEGORIES)
    assert set(json.loads(line)) >= {"neuron_runtime_data", "instance_info", "neuron_hardware_info"}


_SCENARIO = """
import json, os, time
from backend.hardware import monitor
from backend.serving.manager import Manager
from tests.neuron.app_scenarios import _settings, _run
from pathlib import Path

monitor.PERIOD_SECONDS = 0.2
mgr = Manager(_settings(Path(os.environ["WORKDIR"])))
mgr.start()
_image, record = _run(mgr, 64, "eager")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # until a report taken after the run shows the app's memory
    chip = mgr.status().chip
    if any(c["owner"] == "app" and c["memory_bytes"] for c in chip["cores"]):
        break
    time.sleep(0.05)
status = mgr.status()
scrape = mgr.metrics.registry
from prometheus_client import generate_latest
text = generate_latest(scrape).decode()
child = mgr.monitor._proc
mgr.close()
print(json.dumps({"record": record, "chip": status.to_json()["chip"], "viewer": status.for_viewer().chip,
                  "metrics": text, "pid": os.getpid(), "child_ended": child.poll() is not None}))
"""


@pytest.mark.slow
def test_on_the_standin_the_status_and_metrics_show_the_apps_core_and_the_run_its_peak(tmp_path):
    env = standin_env(tmp_path / "state", WORKDIR=str(tmp_path))
    done = run_py(_SCENARIO, env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    record, chip = out["record"], out["chip"]
    assert record["peak_bytes"] > 0 and "aten::mm" in record["device_ops"] and not record["fallback_ops"]
    (core,) = [c for c in chip["cores"] if c["owner"] == "app"]
    assert core["core"] == 3 and core["pid"] == out["pid"]  # the app's own core (the last of a trn2.3xlarge)
    assert 0 < core["memory"]["tensors"] <= record["peak_bytes"]
    assert chip["running"] and chip["hardware"]["neuron_device_count"] == 1
    assert "pid" not in out["viewer"]["cores"][0]
    samples = [s for f in text_string_to_metric_families(out["metrics"]) for s in f.samples
               if s.name == "neuroncore_memory_usage_tensors"]
    assert [(s.labels["neuroncore"], s.labels["owner"], s.labels["runtime_tag"], s.labels["instance_type"], s.value)
            for s in samples] == [("3", "app", str(out["pid"]), "trn2.3xlarge", core["memory"]["tensors"])]
    assert out["child_ended"]
