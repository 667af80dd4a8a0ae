"""The embedded model: same classes as FLUX.2-klein, loads through from_pretrained, defaults work."""

from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline, Flux2Transformer2DModel
from safetensors.torch import load_file
from transformers import Qwen2TokenizerFast, Qwen3ForCausalLM

from embedded.recipe import EMBEDDED_MODEL_DIR, save_pipeline


@pytest.fixture(scope="module")
def pipe():
    return Flux2KleinPipeline.from_pretrained(EMBEDDED_MODEL_DIR)


def test_same_classes_as_the_real_model(pipe):
    assert isinstance(pipe.transformer, Flux2Transformer2DModel)
    assert isinstance(pipe.vae, AutoencoderKLFlux2)
    assert isinstance(pipe.text_encoder, Qwen3ForCausalLM)
    assert isinstance(pipe.tokenizer, Qwen2TokenizerFast)
    assert isinstance(pipe.scheduler, FlowMatchEulerDiscreteScheduler)
    assert pipe.config.is_distilled is True
    assert pipe.vae_scale_factor == 8
    assert pipe.text_encoder.config.num_hidden_layers >= 27
    assert pipe.transformer.config.joint_attention_dim == 3 * pipe.text_encoder.config.hidden_size
    assert pipe.transformer.config.in_channels == 4 * pipe.vae.config.latent_channels


def test_byte_level_tokenizer_never_yields_unknown_ids(pipe):
    tok = pipe.tokenizer
    ids = tok("a fox 🦊 ثعلب \x00 ~")["input_ids"]
    assert ids and all(0 <= i < len(tok) for i in ids)
    text = tok.apply_chat_template([{"role": "user", "content": "fox"}], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=False)
    assert text == "<|im_start|>user\nfox<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_runs_with_the_pipelines_default_call_arguments(pipe):
    # Only prompt and a small size are given: default steps, layers, sequence length, guidance.
    out = pipe(prompt="a red fox", height=64, width=64,
               generator=torch.Generator("cpu").manual_seed(0), output_type="np")
    image = out.images[0]
    assert image.shape == (64, 64, 3)
    assert np.isfinite(image).all() and image.std() > 0.01


def test_recipe_rebuilds_the_committed_folder(tmp_path):
    save_pipeline(tmp_path / "rebuilt")
    for part in ("transformer/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors",
                 "text_encoder/model.safetensors"):
        committed, rebuilt = load_file(EMBEDDED_MODEL_DIR / part), load_file(tmp_path / "rebuilt" / part)
        assert committed.keys() == rebuilt.keys()
        for key in committed:
            assert torch.equal(committed[key], rebuilt[key]), f"{part}:{key} differs"


def test_random_model_is_built_on_first_use_when_the_folder_is_missing(tmp_path, monkeypatch):
    from backend.models import source as model_source
    from embedded.serving import RANDOM

    monkeypatch.setattr(RANDOM, "_folder", tmp_path / "absent" / "tiny-flux2-klein")
    path, label = model_source.resolve_model("embedded-random", tmp_path / "cache")
    assert label == "embedded:tiny-flux2-klein"
    assert Path(path) == tmp_path / "cache" / "embedded" / "tiny-flux2-klein"
    assert (Path(path) / "model_index.json").is_file()
    assert Flux2KleinPipeline.from_pretrained(path).config.is_distilled is True


def test_the_default_is_the_trained_model_and_a_missing_one_says_how_to_rebuild_it(tmp_path, monkeypatch):
    from backend.errors import ModelNotFound
    from backend.models import source as model_source
    from backend.settings import Settings
    from embedded.recipe import SCENES_MODEL_DIR

    assert Settings().model == "embedded"
    path, label = model_source.resolve_model("embedded", tmp_path / "cache")
    assert (Path(path), label) == (SCENES_MODEL_DIR, "embedded:scenes-flux2-klein")
    from embedded.serving import SCENES

    monkeypatch.setattr(SCENES, "_folder", tmp_path / "absent")
    with pytest.raises(ModelNotFound, match="python -m embedded train.*--model embedded-random"):
        model_source.resolve_model("embedded", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # nothing is trained or built behind the user's back
