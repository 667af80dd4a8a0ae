"""Trainium's kernels and memory, planned by FLUX.2-klein-4B's real geometry (arithmetic over its
configs and tensor shapes: no weights): which attention takes TorchNeuron's NKI kernel, what a
signature needs of a NeuronCore, and admission's refusal of what would not fit."""

from __future__ import annotations

import types

import pytest

from backend.errors import DoesNotFit
from backend.hardware import kernels, memory
from backend.hardware.kernels import Attention
from backend.hardware.metrics import OUT_OF_MEMORY, out_of_memory
from backend.models.card import read_card
from backend.serving.admission import Admission
from backend.serving.compile_state import CompileTable
from backend.settings import Settings
from backend.shapes import NEURON_PRESETS, PRESETS, Shape, parse_signature
from tests.neuron.captures import load

GIB = 2**30


@pytest.fixture(scope="module")
def klein(tmp_path_factory):
    from tests.backend.real_model import build

    return memory.Geometry.read(build(tmp_path_factory.mktemp("klein") / "FLUX.2-klein-4B"))


def transformer(geometry, shape, compiled=True, environ=None, dtype="bfloat16"):
    needs = memory.plan(geometry, shape, compiled=compiled, dtype=dtype, environ=environ or {})
    return next(a for a in needs.attentions if a["name"] == "transformer")


def test_the_rule_is_torchneurons_captured_one():
    captured = load("torchneuron/attention.json")
    eager, compiled = captured["eager"], captured["compiled"]
    assert kernels.SEQ_MULTIPLE == eager["rule"]["seq_multiple"] == compiled["rule"]["seq_multiple"]
    assert kernels.MAX_HEAD_DIM == eager["rule"]["max_head_dim"] == compiled["rule"]["max_head_dim"]
    assert kernels.COMPILED_Q_MULTIPLE == compiled["rule"]["q_multiple"]
    assert kernels.NKI_SWITCH == compiled["rule"]["switch"]
    assert kernels.EAGER_SCORE_BYTES == eager["fallback_score_bytes"]
    # ... and each number is in the source line that makes it
    assert "seq_len_q % 512 != 0 or seq_len_k % 512 != 0" in eager["nki"]["text"]
    assert "head_dim > 128" in eager["nki"]["text"] and "attn_bias is None" in eager["nki"]["text"]
    assert "L % 128 == 0 and S % 128 == 0 and D <= 128" in compiled["nki"]["text"]
    assert f'_getenv_bool("{kernels.NKI_SWITCH}", True)' in compiled["nki"]["text"]
    assert '("1", "true", "yes")' in compiled["switch"]["text"]
    assert "acc_dtype = torch.float32 if mixed_precision" in eager["fallback"]["text"]
    assert "True,  # mixed_precision" in eager["fallback_precision"]["text"]
    assert "return SDPBackend_overrideable;" in captured["dispatch"]["text"]
    size = 123_456
    assert out_of_memory(RuntimeError(captured["out_of_memory"]["format"].format(size=size))) == size
    assert '"NRT allocation failed for size "' in captured["out_of_memory"]["source"]["text"]
    assert OUT_OF_MEMORY.fullmatch(captured["out_of_memory"]["format"].format(size=size))


def test_the_chip_table_and_the_text_length_are_the_captured_ones():
    chips = load("hardware/hbm.json")["chips"]
    assert memory.CHIPS == {**{k: (c["physical_cores"], c["hbm_gib"]) for k, c in chips.items()}, "inf2": (2, 32)}
    assert memory.hbm_per_core("trn2", 2) == 24 * GIB and memory.hbm_per_core("trn2", 1) == 12 * GIB
    assert memory.hbm_per_core("trn3", 2) == 36 * GIB and memory.hbm_per_core("unknown", 2) is None
    assert memory.TEXT_TOKENS == load("models/flux2-klein-4b.json")["text"]["max_sequence_length"]


def test_the_real_models_geometry_is_read_from_its_configs_and_tensor_headers(klein):
    assert (klein.heads, klein.head_dim, klein.text_heads, klein.vae_channels[-1]) == (24, 128, 32, 512)
    assert klein.vae_attention
    parameters = klein.weights()
    assert 7.9e9 < parameters < 8.1e9  # a 3.9B transformer, the 4.0B Qwen3 encoder, an 84M VAE: ~16 GB in bf16
    assert klein.weights(2) < parameters and klein.weights(4) < klein.weights(2)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_of_the_nine_usual_presets_only_1_1_takes_the_fast_path(klein, compiled):
    paths = {name: transformer(klein, shape, compiled)["fast"] for name, shape in PRESETS}
    assert paths == {name: name == "1:1" for name, _ in PRESETS}
    slow = transformer(klein, PRESETS[1][1], compiled)
    assert "is not a multiple of" in slow["why"] and slow["sequence"] == 512 + 72 * 56


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_every_neuron_preset_takes_the_fast_path_and_so_do_its_edits(klein, compiled):
    for _name, shape in NEURON_PRESETS:
        assert transformer(klein, shape, compiled)["fast"], shape
    # references fitted to those sizes (the default reference sizes are the presets) keep it so
    edit = Shape(1024, 1792).with_inputs(2, [(768, 1024), (1024, 1024), (1536, 768)])
    assert transformer(klein, edit, compiled)["fast"]


def test_a_16_9_edit_with_three_16_9_references_holds_12_4_gib_of_scores_per_image(klein):
    edit = parse_signature("1344x768+ref1344x768x3")
    compiled = transformer(klein, edit, compiled=True)
    assert compiled["sequence"] == 16_640 and not compiled["fast"]
    assert compiled["score_bytes"] == 24 * 16_640**2 * 2 and round(compiled["score_bytes"] / GIB, 1) == 12.4
    assert transformer(klein, edit, compiled=False)["score_bytes"] == 24 * 16_640**2 * 4  # eager: float32 logits


def test_the_switch_turns_the_compiled_kernel_off_and_eager_never_reads_it(klein):
    off = {kernels.NKI_SWITCH: "0"}
    square = Shape(1024, 1024)
    assert transformer(klein, square, True, off)["why"] == f"{kernels.NKI_SWITCH} is off"
    assert transformer(klein, square, False, off)["fast"]
    assert transformer(klein, square, True, {kernels.NKI_SWITCH: "True"})["fast"]


def test_the_vae_attention_is_never_on_the_fast_path_and_2048_decodes_16_gib_of_scores(klein):
    needs = memory.plan(klein, Shape(2048, 2048), compiled=True, dtype="bfloat16")
    decode = next(a for a in needs.attentions if a["name"] == "VAE decode")
    assert not decode["fast"] and decode["why"] == "head size 512 > 128"
    assert decode["score_bytes"] == 65_536**2 * 4  # eager (the VAE is not compiled): float32
    assert needs.peak_phase == "decode"


def test_the_text_encoders_masked_attention_takes_the_fallback():
    text = Attention("text encoder", 1, 32, 512, 512, 128, compiled=False, bias=True)
    assert text.why_slow({}) and text.score_bytes(2, {}) == 32 * 512 * 512 * 4


def neuron_device(hbm=24 * GIB):
    info = types.SimpleNamespace(dtype="bfloat16", compile_backend="neuron")
    return types.SimpleNamespace(kind="neuron", info=info, eager_compiles=True, hbm_bytes=lambda: hbm)


@pytest.fixture
def admission(klein):
    out = Admission(Settings(), CompileTable())
    out.geometry = klein
    return out


def test_admission_refuses_what_would_not_fit_a_core_naming_the_estimate_and_what_would(admission):
    edit = parse_signature("1344x768+ref1344x768x3")
    decision = admission.decide(neuron_device(), "compiled", edit, 4, locked=False)
    assert isinstance(decision.refusal, DoesNotFit)
    message = str(decision.refusal)
    assert "needs about 29.0 GiB of one NeuronCore's 24.0 GiB" in message
    assert "slow attention, 12.4 GiB of scores" in message and "fewer or smaller references" in message
    assert "a fast-attention size such as" in message
    assert decision.prediction["refused"] == message and decision.prediction["memory"]["fits"] is False
    with pytest.raises(DoesNotFit):
        decision.enforce()


def test_a_tp_plan_shares_the_weights_over_the_running_groups_ranks_not_the_flags(klein):
    """A group started from the page at another degree than --tp-degree: each rank holds 1/degree."""
    degree = [2]
    admission = Admission(Settings(tp_degree=2), CompileTable(), tp_degree=lambda: degree[0])
    admission.geometry = klein
    two = admission.decide(neuron_device(), "tp", Shape(1024, 1024), 4, locked=False).prediction["memory"]
    degree[0] = 4
    four = admission.decide(neuron_device(), "tp", Shape(1024, 1024), 4, locked=False).prediction["memory"]
    assert four["weights"] < two["weights"]
    assert four == memory.plan(klein, Shape(1024, 1024), compiled=False, dtype="bfloat16", degree=4,
                               hbm=24 * GIB).to_json()


def test_admission_lets_a_fast_square_run_and_refuses_a_2048_decode(admission):
    square = admission.decide(neuron_device(), "compiled", Shape(1024, 1024), 4, locked=False)
    assert square.refusal is None and square.prediction["memory"]["fits"]
    big = admission.decide(neuron_device(), "eager", Shape(2048, 2048), 4, locked=False)
    assert isinstance(big.refusal, DoesNotFit) and "while decode" in str(big.refusal)
    assert "VAE decode: slow attention, 16.0 GiB of scores (head size 512 > 128)" in str(big.refusal)


def test_off_neuron_nothing_is_planned(admission):
    cpu = types.SimpleNamespace(kind="cpu", info=types.SimpleNamespace(dtype="float32", compile_backend="inductor"),
                                eager_compiles=False, hbm_bytes=lambda: None)
    decision = admission.decide(cpu, "compiled", parse_signature("1344x768+ref1344x768x3"), 4, locked=False)
    assert decision.refusal is None and "memory" not in decision.prediction


def test_a_model_without_presets_gets_the_fast_path_presets_on_neuron(tmp_path):
    assert read_card(None, neuron=True).presets == NEURON_PRESETS
    assert read_card(None).presets == PRESETS
    (tmp_path / "neuron_studio.json").write_text('{"trained_pixels": 1048576}')
    assert read_card(tmp_path, neuron=True).presets == NEURON_PRESETS
    (tmp_path / "neuron_studio.json").write_text('{"preset_scale": 512}')
    assert read_card(tmp_path, neuron=True).presets != NEURON_PRESETS  # a card's own presets stay its own


def test_the_cost_line_says_the_attention_path_and_the_cores_memory(admission):
    from ui.views_studio import cost_markdown

    fast = admission.decide(neuron_device(), "compiled", Shape(1024, 1024), 4, locked=False).prediction
    line = cost_markdown(fast)
    assert "**Fast attention**" in line and "about 17.1 GB of a NeuronCore's 24.0 GB." in line
    slow = admission.decide(neuron_device(), "compiled", Shape(896, 1152), 4, locked=False).prediction
    assert "**Slow attention**: 945.2 MB of scores" in cost_markdown(slow)
    assert "**Yavaş dikkat**" in cost_markdown(slow, lang="tr")


def test_the_shapes_table_says_each_signatures_attention_on_neuron_only():
    from ui.views_system import shapes_frame

    row = {"mode": "compiled", "shape": "1152x896", "state": "warm", "compile_seconds": 1.0, "steady_seconds": 0.5,
           "steady_runs": 2, "runs": 3, "error": None}
    assert "attention" not in shapes_frame([row]).columns
    slow = shapes_frame([{**row, "attention": {"fast": False, "score_bytes": 987_758_592}}])
    assert slow["attention"].tolist() == ["slow: 942.0 MB of scores"]
    fast = shapes_frame([{**row, "attention": {"fast": True, "score_bytes": 0}}], lang="tr")
    assert fast["dikkat"].tolist() == ["hızlı"]
