"""The trained embedded model (assets/scenes-flux2-klein), the app's default: it draws what it is
told on prompts it never saw, its modes give the same picture, and its recipe is deterministic."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from backend.serving.manager import Manager
from embedded import scenes
from tests.conftest import make_settings

# The committed weights' floors and the recipe's bits: minutes of CPU each, which a busy machine (load
# 10 on 2 cores) stretched past the suite's 300 s hang guard; their guard is longer, not their work.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
PROMPT = "a cyan circle at the top and a black square at the bottom, on a white background"


def test_it_draws_held_out_prompts_and_as_people_write_them(tmp_path, monkeypatch):
    # The benchmark rows themselves (python -m bench --only P9), in a form smaller than their quick
    # one: 8 held-out prompts (colour x shape x background triples that training never drew) at the
    # square preset, and 8 written as people write them (no place, "gray"). The quick run (16 each,
    # and the two ends of the aspect ratios) and the full one are model-quality rows: bench/, not the
    # suite's time.
    from bench import agreement

    monkeypatch.setattr(agreement, "P9_PROMPTS", (agreement.P9_PROMPTS[0], 8))
    monkeypatch.setattr(agreement, "P9_QUICK_PRESETS", ("1:1",))
    rows = agreement.p9_prompt_agreement(tmp_path, quick=True)
    rows, kinds = rows[:2], rows[2:]
    assert [r["absolute"]["total"] for r in rows] == [8, 8]
    # and per shape kind: how many of each kind the rows' prompts name were drawn as that kind
    assert [k["name"].split("each ")[1].split()[0] for k in kinds] == list(scenes.SHAPES)
    for kind in kinds:
        shape = kind["name"].split("each ")[1].split()[0]
        assert kind["absolute"]["named"] == sum(r["absolute"]["by_shape"][shape]["named"] for r in rows)
        assert kind["absolute"]["right"] == sum(r["absolute"]["by_shape"][shape]["right"] for r in rows)
    assert sum(k["absolute"]["named"] for k in kinds) > 0
    assert ["256x256" in rows[0]["name"], "people write" in rows[1]["name"]] == [True] * 2
    for row in rows:
        # Colours, places and backgrounds: the judge without outlines, as before issue 54.
        assert row["absolute"]["agree_without_outlines"] >= 0.8 * 8, (row["name"], row["absolute"]["failures"])
        # With the outlines judged (P9's value) the committed weights draw about half (squares, and
        # most stars, as blobs): a floor against losing more, far from the goal (issue 54, item 7).
        assert row["value"] >= 0.25, (row["name"], row["absolute"]["by_shape"], row["absolute"]["failures"])
        assert row["ci"][0] <= row["value"] <= row["ci"][1] and row["goal"] == ">= 0.8"
        # The verdict follows the interval (8 prompts leave a wide one).
        assert row["verdict"] == ("pass" if row["ci"][0] >= 0.8 else "fail" if row["ci"][1] < 0.8 else "inconclusive")


def test_it_edits_held_out_references(monkeypatch):
    # P12's accuracy row at the square preset (python -m bench --only P12 --quick runs it at the two
    # ends of the aspect ratios too; a model-quality row: bench/, not the suite's time): 10 held-out
    # edits, two of each kind. Returning the reference unedited scores 0 (embedded.editing.judge_edit
    # refuses it for every kind: tests/backend/test_scene_edits.py), so a floor of 5 of 10 says the
    # committed weights edit; the full row (80 edits) reports how well.
    from bench import editing as p12

    monkeypatch.setattr(p12, "P12_QUICK_PRESETS", ("1:1",))
    rows = p12.p12_edit_accuracy(quick=True)
    assert len(rows) == 1 and "256x256" in rows[0]["name"]
    for row in rows:
        assert row["absolute"]["total"] == 10 and row["goal"] == ">= 0.8"
        assert row["absolute"]["agree"] >= 5, (row["name"], row["absolute"]["failures"])
        assert row["verdict"] == ("pass" if row["ci"][0] >= 0.8 else "fail" if row["ci"][1] < 0.8 else "inconclusive")


def test_the_judges_take_the_ground_truth_as_the_model_can_draw_it():
    # The best the model can draw is the ground truth through its VAE (encode, decode): edges come
    # back soft, and a soft edge between two colours has a third colour's pixels (red on white: a
    # pink rim; a purple and white checkerboard's cell edges: pink lines). The judges count a
    # colour's place and what an edit left behind on solid foreground, as they count dominance: the
    # held-out edits P12 asks, at the presets where a rim or a cell edge failed a perfect edit when
    # they counted every pixel (1:1: "make the pink triangle red"; 21:9: "make the yellow square
    # pink" on a purple checkerboard).
    import random

    from diffusers import AutoencoderKLFlux2

    from embedded import SCENES_MODEL_DIR, editing
    from embedded.components import _to_tensor

    vae = AutoencoderKLFlux2.from_pretrained(SCENES_MODEL_DIR, subfolder="vae")

    def round_trip(image: np.ndarray) -> np.ndarray:  # one at a time: faster on the CPU than a batch of 40
        with torch.no_grad():
            decoded = vae.decode(vae.encode(_to_tensor([image])).latent_dist.mode()).sample[0].clamp(-1, 1)
        return ((decoded.permute(1, 2, 0) + 1) * 127.5).round().to(torch.uint8).numpy()

    for height, width in ((256, 256), (160, 384)):
        for i, edit in enumerate(editing.held_out_edits(40)):
            verdict = editing.judge_edit(round_trip(editing.render_pair(edit, height, width, random.Random(i))[1]),
                                         edit)
            assert verdict.agrees, (height, width, edit.instruction, edit.reference.caption, verdict.reason)
    # The outlines too (issue 54): every kind, alone and as one of two, through the VAE at every preset,
    # is judged the kind it is (P9's judge), but for a rare small star or triangle that a rim of the
    # pattern behind it blurs into the other (seen: 2 of ~300 shapes over the presets).
    from backend.models.card import read_card

    rng = random.Random(3)
    wrong, judged = [], 0
    for _label, shape in read_card(SCENES_MODEL_DIR).presets:
        for _ in range(4):
            scene = scenes.sample_scene(rng, held_out=None, two_shapes=0.5)
            verdict = scenes.judge(round_trip(scenes.render(scene, shape.height, shape.width, rng)), scene)
            judged += len(scene.shapes)
            wrong += [(str(shape), scene.caption, verdict.reason) for e, s in zip(verdict.shapes, scene.shapes)
                      if e.get("drawn") != s.shape]
    assert len(wrong) <= 1, (judged, wrong)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    manager = Manager(make_settings(tmp_path_factory.mktemp("scenes"), model="embedded"))
    manager.start()
    yield manager
    manager.close()


def test_eager_compiled_and_regional_draw_the_same_scene(trained):
    assert trained.status().model["label"] == "embedded:scenes-flux2-klein"
    images = {}
    for mode in ("eager", "compiled", "regional"):  # at the square preset: the kinds phase's sizes
        request = trained.validate(PROMPT, 256, 256, steps=4, seed=3, mode=mode)
        images[mode] = np.asarray(trained.generate(request)[0]).astype(int)
    for mode in ("compiled", "regional"):
        assert np.abs(images[mode] - images["eager"]).max() <= 1, mode
    verdict = scenes.judge(images["eager"].astype(np.uint8), PROMPT)
    assert verdict.agrees, verdict.reason
    # served at its card's 64 tokens, the model is given the reading's caption: a long prompt as
    # typed is read, not refused (its bound stays the pipeline's 512)
    typed = "a cyan circle at the top of a field of tall grass under a clear white sky, " * 4
    assert trained.validate(typed, 256, 256, steps=4).prompt.startswith("a cyan circle at the top")


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for part in ("transformer/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors",
                 "text_encoder/model.safetensors"):
        out.update({f"{part}:{k}": v for k, v in load_file(folder / part).items()})
    return out


def test_training_is_deterministic_for_a_seed(tmp_path):
    # Every phase of the recipe (the first phases, the kinds phase, the edit phase), a few steps each:
    # not the untrained bits; then the first phases again, the kinds phase alone from their saved
    # folder (python -m embedded train-kinds), the edit phase's first round alone from that, saved,
    # and the rest from that folder (train-edits --from-round 2): the whole recipe's bits again (the
    # VAE and text encoder from the first phases, the transformer from the kinds phase on).
    from embedded import edit_training, kinds_training
    from embedded.recipe import (
        SCENES_GEOMETRY,
        build_pipeline,
        train_and_save,
        train_edits_and_save,
        train_kinds_and_save,
    )
    from embedded.training import TrainConfig

    tiny = dict(vae_steps=2, vae_batch=2, captions=12, images_per_caption=1, steps=3, finetune_steps=2,
                finetune_captions=4, batch=2, reader_steps=2)
    kinds = kinds_training.rounds(steps=3, captions=6, batch=2)
    edits = edit_training.rounds(pairs=6, captions=3, steps=3, batch=2)
    assert len(kinds) == 3 and len(edits) == 2
    train_and_save(tmp_path / "a", TrainConfig(seed=0, **tiny), kinds_cfgs=kinds, edit_cfgs=edits)
    train_and_save(tmp_path / "base", TrainConfig(seed=0, **tiny), kinds_cfgs=kinds_training.rounds(steps=0),
                   edit_cfgs=edit_training.rounds(steps=0))
    train_kinds_and_save(tmp_path / "base", tmp_path / "k", kinds)
    train_edits_and_save(tmp_path / "k", tmp_path / "b1", edits[:1])
    train_edits_and_save(tmp_path / "b1", tmp_path / "c", edits, first=1)
    recorded = [json.loads((tmp_path / n / "training.json").read_text()) for n in ("a", "c")]
    assert recorded[0]["kinds_rounds"] == recorded[1]["kinds_rounds"] and len(recorded[0]["kinds_rounds"]) == 3
    assert recorded[0]["edit_rounds"] == recorded[1]["edit_rounds"]
    # the card says the prompt length the last rounds trained at; the base folder's, none (512)
    assert json.loads((tmp_path / "c" / "neuron_studio.json").read_text())["prompt_tokens"] == 64
    assert "prompt_tokens" not in json.loads((tmp_path / "base" / "neuron_studio.json").read_text())
    build_pipeline(SCENES_GEOMETRY).save_pretrained(tmp_path / "untrained")
    a, c, base, untrained = (_weights(tmp_path / n) for n in ("a", "c", "base", "untrained"))
    assert a.keys() == c.keys() and base.keys() == untrained.keys()
    assert all(torch.equal(a[k], c[k]) for k in a)
    for part in ("transformer", "vae", "text_encoder"):
        assert not all(torch.equal(base[k], untrained[k]) for k in base if k.startswith(part)), part
    # the kinds phase's fresh transformer has the edit phase's single-stream blocks; the later
    # phases train the transformer only
    names = [k.split(":", 1)[1] for k in a if k.startswith("transformer/")]
    blocks = {n.split(".")[1] for n in names if n.startswith("single_transformer_blocks.")}
    assert len(blocks) == kinds[0].single_layers == edits[0].single_layers > SCENES_GEOMETRY.num_single_layers
    assert json.loads((tmp_path / "a" / "transformer" / "config.json").read_text())["num_single_layers"] \
        == edits[0].single_layers
    assert all(torch.equal(a[k], base[k]) for k in base if not k.startswith("transformer"))
    assert all(torch.equal(a[k], base[k]) for k in base if not k.startswith("transformer"))
    with pytest.raises(ValueError, match="trained to edit already"):  # not a second edit phase on top of one
        train_edits_and_save(tmp_path / "a", tmp_path / "d", edits)


def test_an_edit_round_at_a_served_prompt_length_reads_every_prompt_at_that_length():
    # EditConfig.prompt_tokens: every step's text states are the served length's (the card's
    # prompt_tokens), never a random cut or the pipeline's 512; the renders' shapes sized by area
    import dataclasses

    from embedded.edit_training import EditConfig, train_edits
    from embedded.recipe import SCENES_GEOMETRY, build_pipeline

    pipe = build_pipeline(SCENES_GEOMETRY)
    seen = []
    cfg = dataclasses.replace(EditConfig(), pairs=4, captions=4, steps=4, batch=2, threads=1, prompt_tokens=40,
                              shape_size="area", sizes=((64, 64, 1),), text_to_image_sizes=((64, 96, 1),),
                              text_to_image_share=0.5, single_layers=SCENES_GEOMETRY.num_single_layers)
    pipe.transformer.register_forward_hook(lambda _m, _a, kwargs, _o: seen.append(
        kwargs["encoder_hidden_states"].shape[1]), with_kwargs=True)
    train_edits(pipe, cfg, log=lambda _line: None)
    assert seen == [40] * 4
