"""The NeuronCore plan (pure: no torch, no device) and the device layer's refusals without the SDK."""

import os
import subprocess
from pathlib import Path

import pytest

from backend.core_lists import format_cores, parse_cores
from backend.hardware.core_plan import CoresDoNotFit, default_app_cores, make_plan, plan_text
from backend.hardware.neuron_ls import InstanceCores, detect_instance_cores, parse_neuron_ls, parse_neuron_ls_json
from backend.settings import load_settings
from tests.neuron.captures import text

STANDIN_BIN = Path(__file__).resolve().parents[1] / "standin" / "bin"


@pytest.mark.parametrize("text, cores", [("3", [3]), ("0-3", [0, 1, 2, 3]), ("0,2", [0, 2]), ("0,2-3", [0, 2, 3])])
def test_visible_cores_syntax_round_trips(text, cores):
    assert parse_cores(text) == cores
    assert parse_cores(format_cores(cores)) == cores


@pytest.mark.parametrize("text", ["", "a", "3-1", "0,,1", "-1", "1,1"])
def test_bad_core_lists_are_refused(text):
    with pytest.raises(ValueError):
        parse_cores(text)


def test_ranks_get_the_cores_the_app_does_not_hold():
    plan = make_plan("0", 4)
    assert plan.cores_for("tensor-parallel", 2, heads=4) == [1, 2]
    assert make_plan("1", 4).cores_for("tensor-parallel", 3) == [0, 2, 3]
    assert set(plan.cores_for("tensor-parallel", 3)).isdisjoint(plan.app_cores)


def test_a_degree_that_does_not_fit_is_refused_naming_what_fits():
    with pytest.raises(CoresDoNotFit) as exc:
        make_plan("0", 4).cores_for("tensor-parallel", 4, heads=4)
    text = str(exc.value)
    assert "4 tensor-parallel ranks need 4 NeuronCores" in text and "app holds 0" in text
    assert "degrees that fit are 1, 2" in text  # 3 fits the cores but does not divide 4 heads
    described = make_plan("0-1", 4).describe({"tensor-parallel": (4, 4)})
    tp = described["engines"]["tensor-parallel"]
    assert tp["cores"] is None and "degrees that fit are 1, 2" in tp["error"]


def test_unknown_instance_size_refuses_tensor_parallel_naming_the_flag():
    plan = make_plan("0", InstanceCores(None, source="unknown: neuron-ls is not on PATH"))
    assert plan.free_cores() is None
    with pytest.raises(CoresDoNotFit, match="count is unknown.*--neuron-instance-cores N: logical cores"):
        plan.cores_for("tensor-parallel", 2)
    assert "instance size unknown" in plan_text(plan.describe({"tensor-parallel": (2, 24)}))


def test_settings_check_app_cores_against_the_instance():
    assert load_settings({"neuron_cores": "0-1"}, environ={}).neuron_cores == "0-1"
    with pytest.raises(ValueError, match="--neuron-cores"):
        load_settings({"neuron_cores": "x"}, environ={})
    with pytest.raises(ValueError, match="instance has NeuronCores 0-3"):
        load_settings({"neuron_cores": "4", "neuron_instance_cores": "4"}, environ={})


def _tp(plan, degree, heads=None):
    return plan.cores_for("tensor-parallel", degree, heads)


# neuron-ls as captured on real instances (tests/standin/captures/neuron-ls, sources in its SOURCES.md).
@pytest.mark.parametrize("name, logical, lnc, last", [
    ("trn2.3xlarge-lnc2.txt", 4, 2, (0, (0, 1, 2, 3))),
    ("trn2.3xlarge-lnc2.second-capture-i-06469ea258a6b0e1e.txt", 4, 2, (0, (0, 1, 2, 3))),
    ("trn2n.48xlarge-lnc2.txt", 64, 2, (15, (60, 61, 62, 63))),
    ("trn2n.48xlarge-lnc2-wide.txt", 64, 2, (15, (60, 61, 62, 63))),
    ("trn2.48xlarge-lnc2.container-1dev-with-procs.txt", 4, 2, (0, (0, 1, 2, 3))),
    ("trn1.2xlarge.txt", 2, 1, (0, (0, 1))),
    ("historical/trn2n.48xlarge-lnc2.sdk2.21-2.24.txt", 64, 2, (15, (60, 61, 62, 63))),  # no id column
    ("historical/trn2n.48xlarge-lnc2-LOGICALNC-column.sdk2.21.0beta.txt", 64, 2, (15, (60, 61, 62, 63))),
])
def test_neuron_ls_text_as_captured_gives_the_logical_cores_per_device(name, logical, lnc, last):
    found = parse_neuron_ls(text(f"neuron-ls/{name}"), environ={})
    assert (found.logical, found.lnc, found.physical) == (logical, lnc, logical * lnc)
    assert (found.devices[-1].index, found.devices[-1].cores) == last
    assert found.devices[-1].memory_bytes == (32 if name.startswith("trn1") else 96) * 2**30


@pytest.mark.parametrize("name, logical, lnc, kind", [
    ("trn1.2xlarge.json", 2, 1, None),
    ("trn2.48xlarge-lnc2.container-1dev-with-procs.json", 4, 2, "trn2.48xlarge"),
])
def test_neuron_ls_json_as_captured(name, logical, lnc, kind):
    found = parse_neuron_ls_json(text(f"neuron-ls/{name}"), environ={})
    assert (found.logical, found.lnc, found.instance_type) == (logical, lnc, kind)
    assert found.hbm_per_core() == {"trn1.2xlarge.json": 16, }.get(name, 24) * 2**30


def test_the_documented_json_excerpt_reads_the_same_as_its_table():
    """The Neuron-LS guide elides devices 1-14 of its JSON with a bare '...' line: without that
    line, the two devices it shows read as the table's devices 0 and 15."""
    excerpt = text("neuron-ls/trn2n.48xlarge-lnc2.json-elided.txt").replace("  ...\n", "")
    found = parse_neuron_ls_json(excerpt, environ={})
    assert [(d.index, d.cores) for d in found.devices] == [(0, (0, 1, 2, 3)), (15, (60, 61, 62, 63))]


def test_a_process_at_lnc_1_sees_twice_the_cores_neuron_ls_reports_at_lnc_2():
    """neuron-ls reports the instance's LNC=2; a process with NEURON_LOGICAL_NC_CONFIG=1 has twice
    as many (smaller) logical cores, numbered device by device (TorchNeuron's harness reads it so)."""
    found = parse_neuron_ls(text("neuron-ls/trn2.3xlarge-lnc2.txt"), environ={"NEURON_LOGICAL_NC_CONFIG": "1"})
    assert (found.logical, found.physical, found.lnc) == (8, 8, 1)
    assert found.devices[0].cores == tuple(range(8)) and found.hbm_per_core() == 12 * 2**30


def test_a_trn2_3xlarge_serves_the_default_degree_with_the_app_on_its_last_core():
    found = parse_neuron_ls(text("neuron-ls/trn2.3xlarge-lnc2.txt"), environ={})
    plan = make_plan(default_app_cores(found), found)
    assert plan.app_cores == (3,) and _tp(plan, 2, heads=24) == [0, 1]
    with pytest.raises(CoresDoNotFit, match="degrees that fit are 1, 2, 3 "):
        _tp(plan, 4, heads=24)
    assert plan.claim("replicas", 1) == [0] and _tp(plan, 2, heads=24) == [1, 2]


def test_a_group_stays_on_one_chip_where_one_has_room():
    found = parse_neuron_ls(text("neuron-ls/trn2n.48xlarge-lnc2.txt"), environ={})
    plan = make_plan(default_app_cores(found), found)
    assert plan.app_cores == (63,)
    plan.claim("replicas", 3)  # 0-2 on chip 0
    assert _tp(plan, 4, heads=24) == [4, 5, 6, 7]  # chip 1, not 3 and 4-6 across two chips
    assert "HBM 24 GiB per core" in plan_text(plan.describe({"tensor-parallel": (4, 24)}))


def test_at_lnc_1_each_process_gets_a_whole_hbm_bank():
    """Two physical cores share one 24 GB bank; FLUX.2-klein-4B in bf16 is about 16 GB."""
    found = parse_neuron_ls(text("neuron-ls/trn2.3xlarge-lnc2.txt"), environ={"NEURON_LOGICAL_NC_CONFIG": "1"})
    plan = make_plan(default_app_cores(found), found)
    assert plan.app_cores == (6,) and plan.free_cores() == [0, 2, 4]
    assert _tp(plan, 2, heads=24) == [0, 2]
    with pytest.raises(CoresDoNotFit, match="share one HBM bank"):
        _tp(plan, 4, heads=24)


def test_neuron_ls_is_asked_for_json_first_and_the_table_second():
    calls = []

    def run(argv, **_kwargs):
        calls.append(argv[1:])
        out = "" if "--json-output" in argv else text("neuron-ls/trn2.3xlarge-lnc2.txt")
        return subprocess.CompletedProcess(argv, 0 if out else 1, out, "unknown flag" if not out else "")

    found = detect_instance_cores(environ={"PATH": str(STANDIN_BIN)}, run=run)
    assert calls == [["--json-output"], []] and found.logical == 4


def test_the_standin_neuron_ls_prints_the_captured_formats():
    env = {"PATH": os.pathsep.join([str(STANDIN_BIN), os.environ["PATH"]]), "NEURON_STANDIN_DEVICES": "1"}
    table = subprocess.run(["neuron-ls"], env=env, capture_output=True, text=True).stdout
    captured = text("neuron-ls/trn2.3xlarge-lnc2.txt")
    assert table.splitlines()[2:] == captured.splitlines()[2:]  # all but the instance id
    assert detect_instance_cores(environ=env) == parse_neuron_ls_json(
        subprocess.run(["neuron-ls", "-j"], env=env, capture_output=True, text=True).stdout, environ=env)
    assert detect_instance_cores(environ={**env, "NEURON_LOGICAL_NC_CONFIG": "1"}).logical == 8
    assert detect_instance_cores(7, environ=env) == InstanceCores(7, source="--neuron-instance-cores")
    none = subprocess.run(["neuron-ls"], env={**env, "NEURON_STANDIN_DEVICES": "0"}, capture_output=True, text=True)
    assert none.returncode == 1 and none.stdout == "" and "failed to discover Neuron devices" in none.stderr
    unknown = detect_instance_cores(environ={**env, "NEURON_STANDIN_DEVICES": "0"})
    assert unknown.logical is None and "failed to discover Neuron devices" in unknown.source


def test_a_plan_the_instance_cannot_hold_is_kept_and_refuses_engines_naming_why(monkeypatch):
    from backend.hardware.device import Device

    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "3")  # the app's cores, on an instance of 2
    device = Device.__new__(Device)  # the device layer's plan alone: no device behind it
    device.info = type("Info", (), {"kind": "neuron"})()
    device._instance_cores, device._core_plan = 2, None
    plan = device.core_plan
    assert device.core_plan is plan  # asked once, kept: a status poll does not raise it again
    assert plan.instance.logical is None and "instance has NeuronCores 0-1" in plan.instance.source
    with pytest.raises(CoresDoNotFit, match="instance has NeuronCores 0-1"):
        _tp(plan, 2)


def test_explicit_neuron_without_the_sdk_is_a_clear_error(monkeypatch, tmp_path):
    from backend.hardware.device import DeviceUnavailable, resolve_device
    from tests.conftest import make_settings

    monkeypatch.setattr("backend.hardware.device.neuron_installed", lambda: False)
    with pytest.raises(DeviceUnavailable, match="torch-neuronx.*not installed"):
        resolve_device(make_settings(tmp_path, device="neuron"))
    with pytest.raises(DeviceUnavailable, match="no CUDA device"):
        resolve_device(make_settings(tmp_path, device="cuda"))


def test_with_neuron_cores_none_every_core_of_a_trn2_3xlarge_goes_to_a_degree_4_group():
    """Issue 52 (5): the app always kept one of the 4 cores and its refusal named a flag that could
    not help; ``--neuron-cores none`` leaves every core to the engines, and a refusal says so."""
    assert load_settings({"neuron_cores": "none"}, environ={}).neuron_cores == "none"
    assert load_settings({"neuron_cores": "None", "neuron_instance_cores": "4"}, environ={}).neuron_cores == "none"
    found = parse_neuron_ls(text("neuron-ls/trn2.3xlarge-lnc2.txt"), environ={})
    with pytest.raises(CoresDoNotFit, match=r"--neuron-cores none leaves every core to the engines"):
        _tp(make_plan(default_app_cores(found), found), 4, heads=24)
    plan = make_plan("none", found)
    assert plan.app_cores == () and _tp(plan, 4, heads=24) == [0, 1, 2, 3]
    described = plan.describe({"tensor-parallel": (4, 24)})
    assert described["app_cores"] == "none" and described["engines"]["tensor-parallel"]["cores"] == "0-3"
    plan.claim("tensor-parallel", 4, heads=24)
    with pytest.raises(CoresDoNotFit) as refused:
        plan.cores_for("replicas", 1)
    assert "the app holds none" in str(refused.value) and "--neuron-cores" not in str(refused.value)


def test_tensor_parallel_degrees_divide_the_heads_and_stay_on_one_chip():
    """Neuron's guidance keeps TP within a chip ("Keep TP4 within a chip", Best practices for training
    on AWS Neuron): on a trn2.48xlarge's captured table (16 chips of 4 logical cores) degree 8 spans
    two chips and is refused, and a degree no chip has room for is refused, not spread over chips."""
    found = parse_neuron_ls(text("neuron-ls/trn2n.48xlarge-lnc2.txt"), environ={})
    plan = make_plan("none", found)
    assert plan.chip_room() == 4 and plan.tp_degrees(24) == [1, 2, 3, 4]
    assert plan.describe({"tensor-parallel": (2, 24)})["engines"]["tensor-parallel"]["degrees"] == [1, 2, 3, 4]
    with pytest.raises(CoresDoNotFit, match="stays on one chip.*degrees that fit are 1, 2, 3, 4$"):
        _tp(plan, 8, heads=24)
    plan.claims["replicas"] = tuple(range(0, 64, 4))  # one core of every chip: 3 free on each
    assert _tp(plan, 3, heads=24) == [1, 2, 3]
    with pytest.raises(CoresDoNotFit, match="leave 3 free at most.*degrees that fit are 1, 2, 3$"):
        _tp(plan, 4, heads=24)
    from backend.errors import InvalidRequest
    from backend.launch.group import check_degree

    with pytest.raises(InvalidRequest, match="use one of 1, 2, 3, 4$"):
        check_degree(5, 24, make_plan("none", found))
    one_chip = parse_neuron_ls(text("neuron-ls/trn2.3xlarge-lnc2.txt"), environ={"NEURON_LOGICAL_NC_CONFIG": "1"})
    assert make_plan("none", one_chip).tp_degrees(24) == [1, 2, 3, 4]  # 8 cores, 4 HBM banks: 4 processes


def test_an_app_holding_no_core_never_starts_its_runtime_and_refuses_device_work(monkeypatch):
    """With ``none`` the app's process leaves NEURON_RT_VISIBLE_CORES unset (no value means "no core"),
    so starting its runtime would reserve every core, the group's included: the in-process engine
    loads nothing and refuses each run naming the flag; the device asks the runtime for nothing."""
    from backend.engines.in_process import InProcessEngine
    from backend.errors import BackendNotReady
    from backend.hardware import env as device_env
    from backend.hardware.device import Device

    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    monkeypatch.setitem(device_env._prepared, device_env.VISIBLE_CORES_VAR, "none")
    assert device_env.claim_neuron_cores("0") == "none" and "NEURON_RT_VISIBLE_CORES" not in os.environ
    device = Device.__new__(Device)  # the device layer's rules alone: no device behind it
    device.info = type("Info", (), {"kind": "neuron", "dtype": "bfloat16", "torch_device": "neuron"})()
    device._instance_cores, device._core_plan, device._hbm, device._neuronx = 4, None, None, None
    assert not device.holds_cores and device.core_plan.app_cores == ()
    assert device.memory()["device_allocated_bytes"] is None
    engine = InProcessEngine(device, "unused", loader=lambda *_: pytest.fail("loaded on a core the app does not hold"))
    engine.load()
    assert engine.pipe is None
    with pytest.raises(BackendNotReady, match=r"holds no NeuronCore \(--neuron-cores none\)"):
        engine.run(None)
