"""The NeuronCore plan (pure: no torch, no device) and the device layer's refusals without the SDK."""

import pytest

from pathlib import Path

from backend.core_plan import (CoresDoNotFit, InstanceCores, detect_instance_cores, format_cores, make_plan,
                               parse_cores, parse_neuron_ls, plan_text)
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


def test_unknown_instance_size_refuses_tensor_parallel_naming_the_flag():
    plan = make_plan("0", InstanceCores(None, source="unknown: neuron-ls is not on PATH"))
    assert plan.free_cores() is None
    with pytest.raises(CoresDoNotFit, match="count is unknown.*--neuron-instance-cores N: logical cores"):
        plan.tp_cores(2)
    assert "instance size unknown" in plan_text(plan.describe(2, 24))


def test_settings_check_app_cores_against_the_instance():
    assert load_settings({"neuron_cores": "0-1"}, environ={}).neuron_cores == "0-1"
    with pytest.raises(ValueError, match="--neuron-cores"):
        load_settings({"neuron_cores": "x"}, environ={})
    with pytest.raises(ValueError, match="instance has NeuronCores 0-3"):
        load_settings({"neuron_cores": "4", "neuron_instance_cores": "4"}, environ={})


# The Neuron-LS user guide's trn2n.48xlarge table (16 devices, 8 physical / 4 logical cores each).
TRN2_48XL = """instance-type: trn2n.48xlarge
logical-neuroncore-config: 2
+--------+--------+---------+--------+---------------+---------+
| NEURON | NEURON | LOGICAL | NEURON |   CONNECTED   |   PCI   |
| DEVICE | CORES  |   NC    | MEMORY |    DEVICES    |   BDF   |
+--------+--------+---------+--------+---------------+---------+
""" + "".join(f"| {i:<6} | 8      | 4       | 96 GB  | 12, 3, 4, 1   | cc:00.0 |\n" for i in range(16))


def test_neuron_ls_gives_logical_cores_and_the_physical_ones_behind_them():
    assert parse_neuron_ls(TRN2_48XL) == InstanceCores(64, 128, 2, "neuron-ls")
    assert parse_neuron_ls("no devices") is None


def test_the_standin_neuron_ls_is_found_on_path_and_follows_the_lnc():
    bin_dir = Path(__file__).resolve().parents[1] / "standin" / "bin"
    import os

    env = {"PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]]), "NEURON_STANDIN_DEVICES": "1"}
    assert detect_instance_cores(environ=env) == InstanceCores(4, 8, 2, "neuron-ls")  # a trn2.3xlarge
    assert detect_instance_cores(environ={**env, "NEURON_LOGICAL_NC_CONFIG": "1"}).logical == 8
    assert detect_instance_cores(7, environ=env) == InstanceCores(7, source="--neuron-instance-cores")


def _sysfs(root: Path) -> str:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "standin" / "torch_neuronx" / "_runtime.py"
    spec = importlib.util.spec_from_file_location("_standin_runtime_for_sysfs", path)
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    return str(runtime.write_sysfs(root))  # physical counts, mode 0400, as the driver writes them


def test_without_neuron_ls_the_sysfs_physical_count_is_divided_by_the_lnc(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_STANDIN_DEVICES", "2")
    sysfs = _sysfs(tmp_path)
    assert oct(Path(sysfs, "neuron0", "core_count").stat().st_mode & 0o777) == "0o400"
    none = {"PATH": str(tmp_path / "empty")}
    assert detect_instance_cores(sysfs=sysfs, environ=none) == InstanceCores(8, 16, 2, "sysfs")
    lnc1 = detect_instance_cores(sysfs=sysfs, environ={**none, "NEURON_LOGICAL_NC_CONFIG": "1"})
    assert lnc1.logical == 16
    assert detect_instance_cores(sysfs=str(tmp_path / "absent"), environ=none).logical is None


def test_a_normal_user_who_cannot_read_sysfs_gets_a_refusal_not_a_guess(tmp_path, monkeypatch):
    """The tests run as root, which reads a 0400 file anyway: a normal user's open() is simulated."""
    sysfs = _sysfs(tmp_path)
    real_open = open

    def user_open(path, *args, **kwargs):
        if str(path).endswith("core_count"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", user_open)
    found = detect_instance_cores(sysfs=sysfs, environ={"PATH": str(tmp_path / "empty")})
    assert found.logical is None and "readable by root only" in found.source
    with pytest.raises(CoresDoNotFit, match="--neuron-instance-cores"):
        make_plan("0", found).tp_cores(2, heads=24)


def test_explicit_neuron_without_the_sdk_is_a_clear_error(monkeypatch, tmp_path):
    from backend.device import DeviceUnavailable, resolve_device
    from tests.conftest import make_settings

    monkeypatch.setattr("backend.device.neuron_installed", lambda: False)
    with pytest.raises(DeviceUnavailable, match="torch-neuronx.*not installed"):
        resolve_device(make_settings(tmp_path, device="neuron"))
    with pytest.raises(DeviceUnavailable, match="no CUDA device"):
        resolve_device(make_settings(tmp_path, device="cuda"))
