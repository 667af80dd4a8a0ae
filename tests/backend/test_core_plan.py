"""The NeuronCore plan (pure: no torch, no device) and the device layer's refusals without the SDK."""

import pytest

from backend.core_plan import CoresDoNotFit, CorePlan, detect_instance_cores, format_cores, make_plan, parse_cores
from backend.settings import load_settings


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
    assert plan.tp_cores(2, heads=4) == [1, 2]
    assert make_plan("1", 4).tp_cores(3) == [0, 2, 3]
    assert set(plan.tp_cores(3)).isdisjoint(plan.app_cores)


def test_a_degree_that_does_not_fit_is_refused_naming_what_fits():
    with pytest.raises(CoresDoNotFit) as exc:
        make_plan("0", 4).tp_cores(4, heads=4)
    text = str(exc.value)
    assert "4 tensor-parallel ranks need 4 NeuronCores" in text and "app holds 0" in text
    assert "degrees that fit are 1, 2" in text  # 3 fits the cores but does not divide 4 heads
    described = make_plan("0-1", 4).describe(degree=4, heads=4)
    assert described["tp_cores"] is None and "degrees that fit are 1, 2" in described["tp_error"]


def test_unknown_instance_size_takes_the_cores_after_the_apps():
    plan = CorePlan(None, (0,))
    assert plan.tp_cores(2) == [1, 2] and plan.free_cores() is None


def test_settings_check_app_cores_against_the_instance():
    assert load_settings({"neuron_cores": "0-1"}, environ={}).neuron_cores == "0-1"
    with pytest.raises(ValueError, match="--neuron-cores"):
        load_settings({"neuron_cores": "x"}, environ={})
    with pytest.raises(ValueError, match="instance has NeuronCores 0-3"):
        load_settings({"neuron_cores": "4", "neuron_instance_cores": "4"}, environ={})


def test_instance_size_is_read_from_the_driver_sysfs(tmp_path):
    assert detect_instance_cores(str(tmp_path)) is None
    for i, n in enumerate((4, 4)):
        (tmp_path / f"neuron{i}").mkdir()
        (tmp_path / f"neuron{i}" / "core_count").write_text(f"{n}\n")
    assert detect_instance_cores(str(tmp_path)) == 8


def test_explicit_neuron_without_the_sdk_is_a_clear_error(monkeypatch, tmp_path):
    from backend.device import DeviceUnavailable, resolve_device
    from tests.conftest import make_settings

    monkeypatch.setattr("backend.device.neuron_installed", lambda: False)
    with pytest.raises(DeviceUnavailable, match="torch-neuronx.*not installed"):
        resolve_device(make_settings(tmp_path, device="neuron"))
    with pytest.raises(DeviceUnavailable, match="no CUDA device"):
        resolve_device(make_settings(tmp_path, device="cuda"))
