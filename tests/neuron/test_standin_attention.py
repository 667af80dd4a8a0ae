"""The stand-in's attention and memory obey TorchNeuron's captured rule
(``captures/torchneuron/attention.json``): the NKI kernel's calls allocate no score matrix, the
fallback's allocate all of it on the core, and past the core's capacity an allocation fails in
TorchNeuron's words. The app's plan (``backend.hardware.memory``) is held to what the stand-in counts."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.neuron.captures import load
from tests.neuron.standin import run_py, standin_env

PROBE = textwrap.dedent("""
    import json, os, torch, torch_neuronx, torch.nn.functional as F
    from torch_neuronx import _attention
    out = {"total_memory": torch_neuronx.get_device_properties(0).total_memory}

    def extra(seq, compiled=False, dtype=torch.float32):
        q = torch.randn(1, 2, seq, 16, device="neuron", dtype=dtype)
        def attend(a):
            return F.scaled_dot_product_attention(a, a, a)
        run = torch.compile(attend, backend="neuron", dynamic=False) if compiled else attend
        torch.neuron.reset_peak_memory_stats()
        base = torch.neuron.memory_allocated()
        result = run(q)
        error = (result.cpu().float() - F.scaled_dot_product_attention(*(q.cpu().float(),) * 3)).abs().max().item()
        return {"extra": torch.neuron.max_memory_allocated() - base, "error": error, "path": _attention.paths()[-1]}

    out["fast"] = extra(1024)
    out["slow"] = extra(1000)
    out["compiled_slow"] = extra(1000, compiled=True, dtype=torch.bfloat16)
    os.environ["TORCH_NEURONX_ENABLE_NKI_SDPA"] = "0"
    out["compiled_off"] = extra(1024, compiled=True)
    os.environ["NEURON_STANDIN_HBM_BYTES"] = str(torch.neuron.memory_allocated() + 4_000_000)
    try:
        extra(1000)
        out["oom"] = None
    except RuntimeError as exc:
        out["oom"] = str(exc)
    out["fast_under_the_knob"] = extra(1024)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    proc = run_py(PROBE, standin_env(tmp_path_factory.mktemp("attention")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_core_reports_its_share_of_the_chips_memory(probed):
    chip = load("hardware/hbm.json")["chips"]["trn2"]  # the default stand-in is a trn2.3xlarge at LNC 2
    assert probed["total_memory"] == chip["hbm_gib"] * 2**30 * 2 // chip["physical_cores"]


def test_the_nki_path_allocates_no_score_matrix_and_the_fallback_allocates_all_of_it(probed):
    fast, slow = probed["fast"], probed["slow"]
    assert fast["path"]["nki"] and fast["extra"] < 1024 * 1024 * 2 * 4 and fast["error"] < 1e-5
    assert not slow["path"]["nki"] and slow["path"]["why"] == "seq % 512"
    assert slow["extra"] >= 2 * 1000 * 1000 * 4 and slow["error"] < 1e-5  # eager: float32 logits
    compiled = probed["compiled_slow"]
    assert compiled["path"]["compiled"] and 2 * 1000 * 1000 * 2 <= compiled["extra"] < 2 * 1000 * 1000 * 4


def test_the_switch_turns_the_compiled_kernel_off(probed):
    off = probed["compiled_off"]
    assert off["path"] == {"nki": False, "why": "TORCH_NEURONX_ENABLE_NKI_SDPA off", "compiled": True,
                           "shape": [1, 2, 1024, 1024, 16]}
    assert off["extra"] >= 2 * 1024 * 1024 * 4


def test_past_the_cores_capacity_the_fallback_fails_in_torchneurons_words_and_the_kernel_runs(probed):
    expected = load("torchneuron/attention.json")["out_of_memory"]["format"].format(size=2 * 1000 * 1000 * 4)
    assert probed["oom"] == expected
    assert probed["fast_under_the_knob"]["path"]["nki"]


VAE = textwrap.dedent("""
    import json, torch, torch_neuronx
    from diffusers import AutoencoderKLFlux2
    from torch_neuronx import _attention
    from backend.hardware.memory import Geometry, plan
    from backend.shapes import Shape
    torch.manual_seed(0)
    vae = AutoencoderKLFlux2(**json.loads(__import__("sys").argv[1])).eval()
    latents = torch.randn(1, 32, 8, 8)
    with torch.no_grad():
        expected = vae.decode(latents).sample
        on_device = vae.to("neuron")
        torch.neuron.reset_peak_memory_stats()
        got = on_device.decode(latents.to("neuron")).sample.cpu()
    geometry = Geometry(24, 128, 3.0, 32, 128, 9728, tuple(vae.config.block_out_channels),
                        vae.config.mid_block_add_attention, 0, 0, 0)
    planned = next(a for a in plan(geometry, Shape(64, 64), compiled=False, dtype="float32").attentions
                   if a["name"] == "VAE decode")
    print(json.dumps({"paths": _attention.paths(), "planned": planned,
                      "error": (got - expected).abs().max().item()}))
""")


@pytest.mark.slow
def test_the_real_vaes_attention_runs_on_the_fallback_as_the_app_plans_it(tmp_path):
    """The real VAE's geometry with its attention on (the embedded models switch it off), at 64x64."""
    config = load("models/flux2-klein-4b.json")["vae"]["config"]
    proc = run_py(VAE.replace('__import__("sys").argv[1]', repr(json.dumps(config))), standin_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["paths"] == [{"nki": False, "why": "head_dim > 128", "compiled": False, "shape": [1, 1, 64, 64, 512]}]
    assert out["planned"]["why"] == "head size 512 > 128" and out["planned"]["sequence"] == 64
    assert out["planned"]["score_bytes"] == 64 * 64 * 4
    assert out["error"] < 1e-3
