"""The in-process engine and its modes, on the embedded model (aot_eager stands in for inductor)."""

import numpy as np
import torch
from diffusers import Flux2KleinPipeline

from embedded.recipe import EMBEDDED_MODEL_DIR


def _run(manager, mode, h, w, seed=7, steps=2, prompt="a red fox"):
    return manager.generate(manager.validate(prompt, h, w, steps=steps, seed=seed, mode=mode))


def test_eager_equals_a_direct_pipeline_call_pixel_for_pixel(manager):
    image, result = _run(manager, "eager", 128, 64, seed=123, steps=3)
    direct = Flux2KleinPipeline.from_pretrained(EMBEDDED_MODEL_DIR)
    expected = direct(prompt="a red fox", height=128, width=64, num_inference_steps=3,
                      guidance_scale=1.0, generator=torch.Generator("cpu").manual_seed(123)).images[0]
    assert image.size == expected.size == (64, 128)
    assert np.array_equal(np.asarray(image), np.asarray(expected))
    assert result.compiled is False and result.compiles == 0


def test_compiled_reports_compiles_per_new_shape_only(manager):
    flags = [_run(manager, "compiled", s, s)[1] for s in (64, 128, 64)]
    assert [r.compiled for r in flags] == [True, True, False]
    assert [r.compiles for r in flags] == [1, 1, 0]
    assert flags[0].compile_seconds > 0 and flags[2].compile_seconds == 0
    assert _run(manager, "eager", 64, 64)[1].compiled is False


def test_modes_share_one_set_of_weights_and_agree(manager):
    pipe = manager.engine.pipe
    ptrs = {name: p.data_ptr() for name, p in pipe.transformer.named_parameters()}
    images = {mode: np.asarray(_run(manager, mode, 64, 64, seed=5)[0]).astype(int)
              for mode in ("eager", "compiled", "regional", "eager")}
    assert manager.engine.pipe is pipe
    assert {name: p.data_ptr() for name, p in pipe.transformer.named_parameters()} == ptrs
    for mode in ("compiled", "regional"):
        assert np.abs(images[mode] - images["eager"]).max() <= 1
    # eager after compiled modes really runs eagerly: nothing is left switched on
    assert all(getattr(m, "_compiled_call_impl", None) is None for m in pipe.transformer.modules())


def test_regional_compiles_one_graph_per_block_class(manager):
    result = _run(manager, "regional", 64, 64)[1]
    assert result.compiles == 2  # Flux2TransformerBlock and Flux2SingleTransformerBlock
    assert _run(manager, "regional", 64, 64)[1].compiles == 0


def test_each_phase_is_timed_where_its_work_happens(manager, monkeypatch):
    """A text encoder and a VAE decode made 0.3 s slower: the extra time lands in the phase that
    did the work (encode, decode), not in denoise; the phases add up to the run."""
    import time

    manager.generate(manager.validate("a red fox", 64, 64, steps=2, seed=7, mode="eager"))  # loaded
    pipe = manager.engines.local.pipe
    slow = pipe.text_encoder.register_forward_hook(lambda *_: time.sleep(0.3))
    decode = pipe.vae.decode
    monkeypatch.setattr(pipe.vae, "decode", lambda *a, **k: (time.sleep(0.3), decode(*a, **k))[1])
    try:
        result = _run(manager, "eager", 64, 64)[1]
    finally:
        slow.remove()
    assert result.encode >= 0.3 and result.decode >= 0.3, result
    assert 0 < result.denoise < result.seconds - 0.6, result
    assert abs(result.encode + result.denoise + result.decode - result.seconds) < 1e-6


