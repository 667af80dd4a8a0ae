"""What a person types, read as the embedded model's grammar (embedded.grammar), and what a model
folder says of itself (backend.models.card). No torch, no model."""

from __future__ import annotations

import json
import random

import pytest

from backend.errors import InvalidRequest, ModelNotFound
from backend.models.card import CARD_FILE, ModelCard, parse_card, read_card, scaled_presets
from backend.shapes import PRESETS, Shape
from embedded import SCENES_MODEL_DIR, grammar, scenes


@pytest.mark.parametrize("prompt, caption", [
    ("a red circle on a blue background", "a red circle in the centre, on a blue background"),
    ("A red circle in the center, on a gray background", "a red circle in the centre, on a grey background"),
    ("a white star in the middle on black", "a white star in the centre, on a black background"),
    ("a yellow ring on top, on a purple background", "a yellow ring at the top, on a purple background"),
    ("a green disc to the right on orange", "a green circle on the right, on a orange background"),
    ("a black square below, on a cyan background", "a black square at the bottom, on a cyan background"),
    ("a red square and a blue star on green stripes",
     "a red square on the left and a blue star on the right, on green stripes"),
    ("a pink ring at the top and a white circle", "a pink ring at the top and a white circle at the bottom, "
                                                    "on a black background"),
    ("a yellow star in the night sky", "a yellow star in the centre, on a night gradient"),
    ("a blue triangle", "a blue triangle in the centre, on a white background"),
    # Turkish colour, shape, place and background words (a Turkish page's prompt), read the same way.
    ("mavi arka planda kırmızı bir daire", "a red circle in the centre, on a blue background"),
    ("solda sarı bir yıldız ve sağda beyaz bir kare, siyah zeminde",
     "a yellow star on the left and a white square on the right, on a black background"),
    ("KIRMIZI DAİRE", "a red circle in the centre, on a white background"),
    ("üstte yeşil bir üçgen, gri çizgili", "a green triangle at the top, on grey stripes"),
])
def test_places_are_optional_and_synonyms_are_understood(prompt, caption):
    reading = grammar.read(prompt)
    assert reading.caption == caption and reading.understood, reading
    scenes.parse_caption(reading.caption)  # a caption of the grammar


def test_every_named_colour_can_be_a_flat_background():
    assert set(scenes.COLOURS) | {"grey"} == set(scenes.FLAT_BACKGROUNDS)
    for colour in scenes.FLAT_BACKGROUNDS:
        shape = "white" if colour != "white" else "black"
        assert grammar.read(f"a {shape} circle on a {colour} background").caption.endswith(
            f", on a {colour} background")


def test_the_grammars_own_captions_read_as_themselves():
    rng = random.Random(7)
    for _ in range(300):
        caption = scenes.sample_scene(rng, held_out=None).caption
        assert grammar.read(caption).caption == caption


def test_a_prompt_outside_the_grammar_still_becomes_a_scene_and_says_what_it_made_up():
    reading = grammar.read("A red fox jumping over the lazy dog!!")
    assert reading.caption == "a red circle in the centre, on a white background"
    assert reading.guessed == ("a shape: circle",) and {"fox", "jumping", "lazy", "dog"} <= set(reading.ignored)
    nothing = grammar.read("")
    scenes.parse_caption(nothing.caption)
    assert nothing.guessed and not nothing.understood
    grey = grammar.read("a gray square on a blue background")  # grey is a background colour only
    assert "grey (not a shape colour)" in grey.ignored and scenes.parse_caption(grey.caption)
    many = grammar.read("a red circle, a blue square and a green star")
    assert len(scenes.parse_caption(many.caption).shapes) == 2 and any("at most two" in w for w in many.ignored)
    # "top left": a corner is no place of the grammar; the square goes to the first word's place, and
    # "left" does not move on to the triangle (it went there before)
    corner = grammar.read("a blue square in the top left and a red triangle")
    assert corner.caption == "a blue square at the top and a red triangle at the bottom, on a white background"
    assert corner.ignored == ("left (no corners: read as top)",)
    assert corner.said("tr") == (("sol (köşe yok: üst olarak okundu)",), ())
    assert grammar.read("sol üstte mavi bir kare").said("tr")[0] == ("üst (köşe yok: sol olarak okundu)",)
    assert grammar.read("kedi").said("tr") == (("kedi",), ("bir şekil: daire", "bir renk: kırmızı"))
    long = grammar.read("circle " * 2000)  # bounded work for a long prompt (the app caps prompts anyway)
    assert len(scenes.parse_caption(long.caption).shapes) == 2


def _hint_lists() -> dict[str, list[str]]:
    """The words the page's hint (``ScenesReader.prompt_help``, ``embedded.words.describe``) lists,
    read off its text: what a person is told the model understands."""
    import re

    from embedded.serving import ScenesReader

    hint = ScenesReader().prompt_help("en")

    def listed(pattern: str, sep: str = ", ") -> list[str]:
        found = re.search(pattern, hint)
        assert found, (pattern, hint)
        return found.group(1).split(sep)

    return {"shapes": listed(r"up to two shapes \(([^)]*)\)"), "colours": listed(r"in a colour \(([^)]*)\)"),
            "places": listed(r"each (.*?) \(left out"), "gradients": listed(r"a ([\w/]+) gradient", "/"),
            "patterns": listed(r"or ([\w/]+) stripes or checkerboard", "/"),
            "backgrounds": listed(r"those colours or (\w+), a")}


def test_every_word_the_page_hint_lists_is_read():
    # The hint says what to type; "on a checkerboard" came back "Not understood" though it lists it.
    # Every word it lists, alone and in the forms it suggests, is read and nothing is ignored.
    words = _hint_lists()
    assert words["shapes"] == list(scenes.SHAPES) and words["colours"] == list(scenes.COLOURS)
    assert len(words["places"]) == len(scenes.POSITIONS) and words["patterns"] == list(scenes.PATTERN_COLOURS)
    prompts = {f"a {c} {s} {p}": (c, s, p) for c in words["colours"] for s in words["shapes"] for p in words["places"]}
    for prompt, (colour, shape, place) in prompts.items():
        reading = grammar.read(prompt)
        assert not reading.ignored, (prompt, reading)
        assert f"{colour} {shape} {place}" in reading.caption, (prompt, reading)
    backgrounds = {f"on a {g} gradient": f"a {g} gradient" for g in words["gradients"]}
    backgrounds |= {f"on {p} stripes": f"{p} stripes" for p in words["patterns"]}
    backgrounds |= {f"on a {p} checkerboard": f"a {p} checkerboard" for p in words["patterns"]}
    backgrounds |= {f"on a {c} background": f"a {c} background" for c in words["colours"] + words["backgrounds"]}
    backgrounds |= {f"on {c}": f"a {c} background" for c in words["backgrounds"]}
    for said, phrase in backgrounds.items():
        reading = grammar.read(f"a black star {said}" if "black" not in said else f"a white star {said}")
        assert reading.understood and reading.caption.endswith(", on " + phrase), (said, reading)
    # Named without its colour, a pattern or a gradient is read, and the colour chosen is said.
    for said, kind in (("on a checkerboard", "checkerboard"), ("on stripes", "stripes"),
                       ("on a striped background", "stripes"), ("on a gradient", "gradient"),
                       ("on a checkered background", "checkerboard")):
        for colour in words["colours"]:
            reading = grammar.read(f"a {colour} triangle {said}")
            scene = scenes.parse_caption(reading.caption)
            assert not reading.ignored and scene.background.kind == kind, (said, reading)
            names = scenes.GRADIENTS if kind == "gradient" else scenes.PATTERN_COLOURS
            if any(scenes.colour_fits(colour, scenes.Background(kind, n)) for n in names):  # not white on a pattern
                assert scenes.colour_fits(colour, scene.background), reading  # the shape shows on it
            assert reading.guessed == (f"a colour for the {kind}: {scene.background.name}" if kind != "gradient"
                                       else f"a gradient: {scene.background.name}",), reading
    bare = grammar.read("a red circle on a background")
    assert bare.understood and bare.caption == "a red circle in the centre, on a white background"
    edit = grammar.read_edit("on a checkerboard instead")
    assert edit.caption == "on a grey checkerboard instead" and not edit.ignored


def test_every_word_the_turkish_hint_lists_is_read():
    """A Turkish page's hint lists the grammar's Turkish words: each, in the forms it suggests, reads
    into the caption its English word would."""
    import re

    from embedded import words as grammar_words

    hint = grammar_words.describe("tr")

    def listed(pattern: str, sep: str = ", ") -> list[str]:
        return re.search(pattern, hint).group(1).split(sep)

    shapes, colours = listed(r"iki şekil \(([^)]*)\)"), listed(r"bir renkte \(([^)]*)\)")
    places = listed(r"bir yerde \(([^;]*);")
    gradients, patterns = listed(r"bir ([\w/]+) gradyanı", "/"), listed(r"ya da ([\w/]+) çizgili", "/")
    assert (len(shapes), len(colours), len(places)) == (len(scenes.SHAPES), len(scenes.COLOURS), len(scenes.POSITIONS))
    for place, where in zip(places, scenes.POSITIONS.values()):
        for colour, en_colour in zip(colours, scenes.COLOURS):
            for shape, en_shape in zip(shapes, scenes.SHAPES):
                reading = grammar.read(f"{place} {colour} bir {shape}")
                assert not reading.ignored and f"{en_colour} {en_shape} {where[0]}" in reading.caption, reading
    backgrounds = {f"{g} gradyanı": f"a {en} gradient" for g, en in zip(gradients, scenes.GRADIENTS)}
    backgrounds |= {f"{p} çizgili": f"{en} stripes" for p, en in zip(patterns, scenes.PATTERN_COLOURS)}
    backgrounds |= {f"{p} damalı": f"a {en} checkerboard" for p, en in zip(patterns, scenes.PATTERN_COLOURS)}
    backgrounds |= {f"{c} zeminde": f"a {en} background" for c, en in zip(colours + ["gri"], [*scenes.COLOURS, "grey"])}
    for said, phrase in backgrounds.items():
        star = "beyaz" if "siyah" in said else "siyah"
        reading = grammar.read(f"{star} bir yıldız, {said}")
        assert reading.understood and reading.caption.endswith(", on " + phrase), (said, reading)


def test_the_turkish_examples_read_as_the_english_ones_they_stand_for():
    from ui.constants import ASSETS
    from ui.views_common import load_example_prompts

    english, turkish = (load_example_prompts(ASSETS / name) for name in ("prompts.txt", "prompts-tr.txt"))
    assert len(turkish) == len(english)
    for en, tr in zip(english, turkish):
        reading = grammar.read(tr)
        assert reading.understood and reading.caption == grammar.read(en).caption, (tr, reading)



    from embedded.serving import ScenesReader
    from embedded.words import EDIT_EXAMPLES

    hint = ScenesReader().edit_help("en")
    for example in EDIT_EXAMPLES:
        assert example in hint
        reading = grammar.read_edit(example)
        assert reading is not None and reading.understood and reading.caption == example, (example, reading)


def test_prompts_as_people_write_them_read_as_the_captions_they_came_from():
    pairs = grammar.people_prompts(48)
    assert len({p for p, _ in pairs}) == 48
    assert all(", on " not in p for p, _ in pairs)  # the place is left out: no "<shapes>, on <background>"
    assert any("gray" in p for p, _ in pairs) and any("in the middle" in p or "center" in p for p, _ in pairs)
    for prompt, caption in pairs:
        assert grammar.read(prompt).caption == caption
        scene = scenes.parse_caption(caption)
        assert all(scenes.is_held_out(s.colour, s.shape, scene.background) for s in scene.shapes)


def test_the_embedded_card_scales_the_megapixel_presets_to_its_trained_size():
    card = read_card(SCENES_MODEL_DIR)
    from embedded.recipe import CARD_FILE as WRITTEN
    from embedded.recipe import SCENES_CARD

    written = json.loads((SCENES_MODEL_DIR / CARD_FILE).read_text())
    assert WRITTEN == CARD_FILE and written == {**SCENES_CARD, "prompt_tokens": 64}
    assert [n for n, _ in card.presets] == [n for n, _ in PRESETS]
    assert dict(card.presets)["4:3"] == Shape(224, 288) and dict(card.presets)["9:21"] == Shape(384, 160)
    for (name, big), (_, small) in zip(PRESETS, card.presets):
        assert small.width % 16 == small.height % 16 == 0
        assert abs(small.width / small.height - big.width / big.height) < 0.08, name
        assert not card.beyond_training(small) and 0.9 * 256 ** 2 <= small.pixels <= 256 ** 2
    assert card.beyond_training(Shape(512, 512)) and card.start_shape == Shape(256, 256)
    assert card.prompt_grammar == "scenes" and card.read_prompt("a red circle").caption.startswith("a red circle in")
    assert card.prompt_tokens == 64  # the kinds and edit phases' prompt length


def test_a_folder_without_a_card_keeps_the_megapixel_presets_and_reads_prompts_as_typed(tmp_path):
    card = read_card(tmp_path)
    assert card == ModelCard() and card.presets == PRESETS and card.read_prompt("a red fox") is None
    assert not card.beyond_training(Shape(1536, 1536)) and card.prompt_help() is None


@pytest.mark.parametrize("data, says", [
    ([], "expected a JSON object"),
    ({"presets": {"1:1": "256x256"}, "preset_scale": 256}, "not both"),
    ({"presets": {}}, "1 to"),
    ({"presets": {f"p{i}": "256x256" for i in range(40)}}, "1 to"),
    ({"presets": {"1:1": "250x256"}}, "multiples of 16"),
    ({"presets": {"1:1": "99999x99999"}}, "multiples of 16"),
    ({"presets": {"x" * 40: "256x256"}}, "printable"),
    ({"presets": {"1:1": 256}}, "WIDTHxHEIGHT"),
    ({"preset_scale": True}, "whole number"),
    ({"preset_scale": 10 ** 9}, "whole number"),
    ({"trained_pixels": -1}, "whole number"),
    ({"prompt_grammar": "python:os.system"}, "one of scenes"),
    ({"start": "12x12"}, "multiples of 16"),
    ({"prompt_tokens": 8}, "prompt_tokens: expected a whole number from 16 to 512"),
    ({"prompt_tokens": 4096}, "from 16 to 512"),
    ({"prompt_tokens": True}, "from 16 to 512"),
    ({"run": "rm -rf /"}, "unknown key 'run'"),
])
def test_a_bad_card_is_refused_naming_what_is_wrong(data, says):
    with pytest.raises(ValueError, match=says):
        parse_card(data)


def test_a_broken_card_file_is_one_clear_error_naming_the_file(tmp_path):
    (tmp_path / CARD_FILE).write_text("{not json")
    with pytest.raises(ModelNotFound, match=f"{CARD_FILE}: .*fix or remove the file"):
        read_card(tmp_path)
    (tmp_path / CARD_FILE).write_text(json.dumps({"start": "256x256", "pad": "x" * 20000}))
    with pytest.raises(ModelNotFound, match="larger than 16 KiB"):
        read_card(tmp_path)


def test_a_card_that_names_its_prompt_length_is_served_and_checked_at_that_length(tmp_path):
    """The text encoder reads every prompt padded to the card's ``prompt_tokens`` (the pipeline's
    max_sequence_length), a longer prompt is refused naming it, and the memory plan counts it."""
    import shutil

    from backend.hardware.memory import TEXT_TOKENS, Geometry
    from backend.serving.manager import Manager
    from tests.conftest import ROOT, make_settings

    folder = tmp_path / "model"
    shutil.copytree(ROOT / "assets" / "tiny-flux2-klein", folder)
    assert Geometry.read(folder).text_tokens == TEXT_TOKENS == 512
    (folder / CARD_FILE).write_text(json.dumps({"prompt_tokens": 48}))
    assert read_card(folder).prompt_tokens == 48 and Geometry.read(folder).text_tokens == 48
    manager = Manager(make_settings(tmp_path, model=str(folder)))
    manager.start()
    try:
        seen = []
        pipe = manager.engine.pipe
        hook = pipe.text_encoder.register_forward_hook(lambda _m, args, kwargs, _out: seen.append(
            kwargs["input_ids"].shape[-1]), with_kwargs=True)
        try:
            manager.run(manager.validate("a red fox", 64, 64, steps=1), save=False)
        finally:
            hook.remove()
        assert seen == [48]
        with pytest.raises(InvalidRequest, match="tokens with the chat template; the text encoder reads 48"):
            manager.validate("a red fox " * 8, 64, 64, steps=1)
    finally:
        manager.close()


def test_every_caption_and_instruction_the_grammar_gives_fits_the_embedded_models_prompt_length():
    # The embedded model is served at its card's 64 tokens and given the reading's caption, not what
    # was typed (which keeps the pipeline's 512 as its bound): every caption of two shapes and every
    # edit instruction the grammar can give must fit, or its end would be cut off
    from backend.models.source import prompt_token_counter
    from embedded import editing

    count, limit = prompt_token_counter(str(SCENES_MODEL_DIR)), read_card(SCENES_MODEL_DIR).prompt_tokens
    rng = random.Random(0)
    longest = max(count(scenes.sample_scene(rng, held_out=None, two_shapes=1.0).caption) for _ in range(300))
    assert longest <= limit and max(count(text) for text in editing.instruction_words()) <= limit
    typed = "a red circle on the left of a field of tall grass under a night sky, " * 4
    assert count(typed) > limit and grammar.read(typed).caption  # read into a short caption


def test_scaled_presets_round_to_multiples_of_16():
    assert dict(scaled_presets(512))["16:9"] == Shape(384, 672)
    assert all(s.width % 16 == s.height % 16 == 0 for _, s in scaled_presets(200))


def test_a_model_folder_with_a_bad_card_fails_the_start_with_that_line(tmp_path):
    import shutil

    from backend.serving.manager import Manager
    from tests.conftest import ROOT, make_settings

    folder = tmp_path / "model"
    shutil.copytree(ROOT / "assets" / "tiny-flux2-klein", folder)
    (folder / CARD_FILE).write_text(json.dumps({"presets": {"1:1": "1000x1000"}}))
    manager = Manager(make_settings(tmp_path, model=str(folder)))
    assert manager.card == ModelCard()  # the page can still be built, with the defaults
    with pytest.raises(ModelNotFound, match=r"neuron_studio.json: presets\['1:1'\]: 1000x1000 — sides must be"):
        manager.start()
    assert manager.state == "failed" and CARD_FILE in manager.load_error
    manager.close()

