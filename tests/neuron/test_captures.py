"""The app and the stand-in against TorchNeuron's real artefacts (``tests/standin/captures``).

Each test here reads a capture — real tool output published by people who ran it, or the line of
TorchNeuron's source that makes a text, a key or a unit — and checks the app's reading of it, and
that the stand-in produces the same thing. neuron-ls's formats are checked in
``tests/backend/test_core_plan.py``; the NEFF cache layout in ``tests/backend/test_cache_layout.py``
and ``tests/neuron/test_standin.py``.
"""

from __future__ import annotations

import json
import re

import pytest

from backend.hardware.metrics import COMPILE_ERROR_MARKS, compile_error_text, is_compile_error
from tests.neuron.captures import load
from tests.neuron.standin import run_py, standin_env

ERRORS = load("torchneuron/errors.json")["errors"]


@pytest.mark.parametrize("captured", ERRORS, ids=lambda e: f"{e['kind']}-line{e['source']['line']}")
def test_captured_errors_are_classified_by_their_kind(captured):
    """A failed neuronx-cc run is a compile failure (the (mode, shape) is marked failed); a runtime
    failure to run a NEFF is not."""
    error = RuntimeError(captured["message"])
    assert is_compile_error(error) is (captured["kind"] == "compile")
    wrapped = RuntimeError("the pipeline's step failed")
    wrapped.__cause__ = error
    assert is_compile_error(wrapped) is (captured["kind"] == "compile")


@pytest.mark.parametrize("captured", [e for e in ERRORS if e["kind"] == "compile"],
                         ids=lambda e: f"line{e['source']['line']}")
def test_the_shown_line_is_the_compilers_not_the_header(captured):
    shown = compile_error_text(RuntimeError(captured["message"]))
    assert shown.startswith("COMPILATION FAILED: ") and shown in captured["published"]
    assert "python stack trace" not in shown and not shown.endswith('"')


def test_the_marks_are_the_words_of_torchneurons_source():
    """Each mark the app looks for is in the source line that produces the text."""
    producers = " ".join(p["text"] for p in load("torchneuron/errors.json")["producers"])
    for mark in COMPILE_ERROR_MARKS:
        assert mark.rstrip("'=") in producers.replace('\\"', '"'), mark


STANDIN_PROBE = """
import json, os, re, sys
os.environ["TORCH_NEURONX_METRICS_ENABLED"] = "1"
os.environ["NEURON_STANDIN_COMPILE_SECONDS"] = "0.2"
os.environ["NEURON_STANDIN_FALLBACK_OPS"] = "aten::cumsum"
import torch, torch_neuronx, torch_neuronx.metrics as metrics
out = {}
x = torch.ones(4, 7, device="neuron")
torch.cumsum(x, 0)
(x * 2).sum()
out["fallback"] = torch_neuronx.get_fallback_ops()
torch_neuronx.clear_op_tracking()
out["after_clear"] = torch_neuronx.get_fallback_ops()
torch.compile(lambda t: t.sin() + 1, backend="neuron", fullgraph=True, dynamic=False)(x)
out["metric"] = metrics.get_metric_data("CompilationCache.CompilationTime")
os.environ["NEURON_STANDIN_FAIL_COMPILE_DIM"] = "7"
try:
    torch.compile(lambda t: t.cos() * 3, backend="neuron", fullgraph=True, dynamic=False)(x)
except Exception as exc:
    out["error"] = [type(exc).__name__, type(exc).__module__, str(exc)]
from torch_neuronx import utils
out["key"] = [utils.get_platform_target(), utils.get_lnc_setting()]
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    root = tmp_path_factory.mktemp("captures")
    env = standin_env(root / "state", TORCH_NEURONX_NEFF_CACHE_DIR=str(root / "neff"),
                      TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR=str(root / "local"))
    proc = run_py(STANDIN_PROBE, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])


def test_the_standins_compile_error_is_torchneurons_text(standin):
    """The format of ErrorHandler.cpp (captured: errors.json producers), as a plain RuntimeError."""
    name, module, text = standin["error"]
    assert (name, module) == ("RuntimeError", "builtins")
    assert re.fullmatch(r'Compilation error occurred on Neuron for operation=torch_compile;\n'
                        r'error message="COMPILATION FAILED: [^\n]*"\npython stack trace=\n', text), text
    assert is_compile_error(RuntimeError(text))
    shape = [e["message"] for e in ERRORS if e["message"].startswith("Compilation error occurred")][0]
    assert text.split("COMPILATION FAILED: ")[0] == shape.split("COMPILATION FAILED: ")[0]


def test_the_standins_metric_data_has_the_captured_shape_and_unit(standin):
    captured = load("torchneuron/metrics.json")
    data = standin["metric"]
    assert sorted(data) == sorted(captured["get_metric_data_keys"])
    assert all(sorted(sample) == sorted(captured["sample_keys"]) for sample in data["samples"])
    assert captured["compile_time_unit"] == "ns"
    # Two graph NEFFs of 0.2 s each (simulated) in nanoseconds, plus the eager ops (simulated 0 s).
    assert 0.2e9 <= data["accumulator"] < 60e9 and data["total_samples"] == len(data["samples"])


def test_the_standins_fallback_ops_are_named_as_torchneuron_names_them(standin):
    captured = load("torchneuron/fallback_ops.json")
    assert standin["fallback"] == ["aten::cumsum"] and standin["after_clear"] == []
    assert all(re.fullmatch(r"aten::\w+", name) for name in captured["example_names"])


def test_the_standins_neff_key_fields_are_torchneurons(standin):
    captured = load("torchneuron/neff_cache.json")
    target, lnc = standin["key"]
    assert target in captured["platform_targets"].values() and lnc == captured["default_lnc"][target]
