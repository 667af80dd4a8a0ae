"""The neuron branch of the device layer, wired against the torch_neuronx TEST DOUBLE (no Trainium here).

These tests prove what the app *calls* on Neuron; they do not claim anything ran on a NeuronCore.
"""

import importlib
import sys
from pathlib import Path

import pytest
import torch
from diffusers import DiffusionPipeline

from backend import device_env
from backend.device import Device, resolve_device
from backend.manager import Manager
from backend.shapes import Shape
from tests.conftest import make_settings

DOUBLES = Path(__file__).resolve().parent.parent / "doubles"


@pytest.fixture
def fake_neuron(monkeypatch, tmp_path):
    """Put the test double where `import torch_neuronx` finds it, with a clean environment."""
    assert "torch_neuronx" not in sys.modules
    monkeypatch.syspath_prepend(str(DOUBLES))
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    for var in (device_env.NEFF_CACHE_VAR, device_env.NEURON_METRICS_VAR):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(device_env, "_prepared", {})
    importlib.invalidate_caches()
    yield tmp_path
    module = sys.modules.pop("torch_neuronx", None)
    if hasattr(torch, "neuron"):
        del torch.neuron
    registry = torch._dynamo.backends.registry  # forget the double's backend for later tests
    registry._COMPILER_FNS.pop("neuron", None)
    registry._BACKENDS.pop("neuron", None)
    assert module is not None


def test_auto_picks_neuron_and_sets_the_neff_cache_before_the_backend_loads(fake_neuron):
    settings = make_settings(fake_neuron, device="auto", dtype="auto", compile_backend=None,
                             cache_dir=fake_neuron / "cache")
    info = resolve_device(settings)
    neuronx = sys.modules["torch_neuronx"]  # imported by the device layer (autoload was off)
    assert info.kind == "neuron" and "2 NeuronCore(s) visible" in info.reason
    assert info.torch_device == "neuron" and info.dtype == "bfloat16"
    assert info.compile_backend == "neuron" and info.process_group_backend == "neuron"
    expected = str((fake_neuron / "cache" / "neff").resolve())
    assert neuronx.IMPORT_ENV["TORCH_NEURONX_NEFF_CACHE_DIR"] == expected
    assert neuronx.IMPORT_ENV["TORCH_NEURONX_METRICS_ENABLED"] == "1"


def test_a_user_set_neff_cache_is_respected(fake_neuron, monkeypatch):
    monkeypatch.setenv(device_env.NEFF_CACHE_VAR, str(fake_neuron / "mine"))
    resolve_device(make_settings(fake_neuron, device="neuron", compile_backend=None))
    assert sys.modules["torch_neuronx"].IMPORT_ENV["TORCH_NEURONX_NEFF_CACHE_DIR"] == str(fake_neuron / "mine")


def test_pipeline_is_moved_to_neuron_and_compiled_with_the_neuron_backend(fake_neuron, monkeypatch):
    moves, compiles = [], []

    def spy_to(self, *args, **kwargs):  # the double cannot hold tensors on "neuron": record, stay on CPU
        moves.append((args, kwargs))
        return self

    real_compile = torch.nn.Module.compile

    def spy_compile(self, *args, **kwargs):
        compiles.append((type(self).__name__, kwargs))
        return real_compile(self, *args, **kwargs)

    monkeypatch.setattr(DiffusionPipeline, "to", spy_to)
    monkeypatch.setattr(torch.nn.Module, "compile", spy_compile)
    mgr = Manager(make_settings(fake_neuron, device="neuron", compile_backend=None, dtype="float32"))
    mgr.start()
    neuronx = sys.modules["torch_neuronx"]
    assert moves == [(("neuron",), {})]

    _img, result = mgr.generate(mgr.validate("a red fox", 64, 64, steps=2, seed=0, mode="compiled"))
    assert compiles == [("Flux2Transformer2DModel", {"backend": "neuron", "fullgraph": True, "dynamic": False})]
    assert any(call[0] == "compile_backend.neuron" for call in neuronx.CALLS)
    assert result.device == "neuron" and result.compiled and result.neff_compiles == 1
    assert any(call[0] == "torch.neuron.synchronize" for call in neuronx.CALLS)

    _img, again = mgr.generate(mgr.validate("a red fox", 64, 64, steps=2, seed=0, mode="compiled"))
    assert again.compiled is False and again.neff_compiles == 0

    mgr.generate(mgr.validate("a red fox", 64, 64, steps=2, seed=0, mode="regional"))
    assert {name for name, _kw in compiles[1:]} == {"Flux2TransformerBlock", "Flux2SingleTransformerBlock"}
    assert all(kw == {"backend": "neuron", "fullgraph": True, "dynamic": False} for _n, kw in compiles)

    status = mgr.status()
    assert status["device"]["kind"] == "neuron"
    assert status["memory"]["device_allocated_bytes"] == 123_000
    assert status["cache"]["variable"] == "TORCH_NEURONX_NEFF_CACHE_DIR"
    mgr.close()


def test_eager_on_neuron_is_expected_to_compile_new_shapes(fake_neuron):
    mgr = Manager(make_settings(fake_neuron, device="neuron", compile_backend=None, dtype="float32"))
    mgr.device = Device(resolve_device(mgr.settings))  # predict needs the device, not a model
    assert mgr.predict("eager", Shape(64, 64))["will_compile"] is True


def test_explicit_neuron_without_the_sdk_is_a_clear_error(monkeypatch, tmp_path):
    from backend.device import DeviceUnavailable

    monkeypatch.setattr("backend.device.neuron_installed", lambda: False)
    with pytest.raises(DeviceUnavailable, match="torch-neuronx.*not installed"):
        resolve_device(make_settings(tmp_path, device="neuron"))
    with pytest.raises(DeviceUnavailable, match="no CUDA device"):
        resolve_device(make_settings(tmp_path, device="cuda"))
