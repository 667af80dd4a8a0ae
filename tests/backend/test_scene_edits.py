"""The embedded model's edits (embedded.editing): what an edit asks, how its pairs are drawn, the judge
that decides from pixels whether an image is the edit of its reference, and how a person's edit
prompt is read (embedded.grammar.read_edit). No torch, no model."""

from __future__ import annotations

import random

import numpy as np
import pytest

from embedded import editing, grammar, scenes

SIZES = ((256, 256), (128, 128), (160, 384), (224, 288))


@pytest.mark.parametrize("kind", editing.KINDS)
def test_the_judge_takes_the_edit_and_refuses_the_unedited_reference(kind):
    """The judge can fail for the reason in its name: the reference itself (nothing edited) is refused,
    the drawn target accepted, at every preset's aspect ratio, for held-out and training references."""
    rng = random.Random(kind)
    for i in range(12):
        edit = editing.sample_edit(rng, held_out=bool(i % 2), kinds=(kind,))
        height, width = SIZES[i % len(SIZES)]
        reference, target = editing.render_pair(edit, height, width, rng)
        assert editing.judge_edit(target, edit).agrees, (edit.instruction, editing.judge_edit(target, edit).reason)
        verdict = editing.judge_edit(reference, edit)
        assert not verdict.agrees, (edit.instruction, edit.reference.caption)


def test_a_shape_the_edit_should_have_taken_away_is_named():
    rng = random.Random(3)
    for kind, says in (("recolour", "old colour"), ("remove", "still covers"), ("move", "is still")):
        edit = editing.sample_edit(rng, kinds=(kind,))
        ref_place, target_place = editing.placements(edit, rng)
        both = scenes.draw(edit.target.background, target_place + [p for p in ref_place
                                                                    if p.spec in edit.changed], 256, 256)
        verdict = editing.judge_edit(both, edit)
        assert not verdict.agrees and says in verdict.reason, (kind, verdict.reason)


def test_an_edit_keeps_what_it_does_not_name_where_the_reference_had_it():
    rng = random.Random(5)
    for _ in range(100):
        edit = editing.sample_edit(rng)
        reference, target = editing.render_pair(edit, 128, 128, rng)
        changed = np.any(reference != target, axis=-1)
        if edit.kind == "background":
            assert changed.mean() > 0.3  # the background is most of the picture
            continue
        # outside the edited shape(s) nothing moves: the rest is copied from the reference
        assert changed.mean() < 0.3, edit.instruction
        kept = [s for s in edit.reference.shapes if s in edit.target.shapes]
        ref_at, target_at = editing.placements(edit, random.Random(0))
        for spec in kept:
            assert next(p for p in ref_at if p.spec == spec) == next(p for p in target_at if p.spec == spec)


def test_held_out_edits_come_from_held_out_references_and_training_never_draws_one():
    held = editing.held_out_edits(50)
    assert {e.kind for e in held} == set(editing.KINDS)
    for edit in held:
        assert all(scenes.is_held_out(s.colour, s.shape, edit.reference.background) for s in edit.reference.shapes)
    rng = random.Random(9)
    for _ in range(500):
        edit = editing.sample_edit(rng)
        for scene in (edit.reference, edit.target):
            assert not any(scenes.is_held_out(s.colour, s.shape, scene.background) for s in scene.shapes)
        assert edit.instruction in editing.instruction_words()


@pytest.mark.parametrize("prompt, instruction", [
    ("make the circle blue", "make the circle blue"),
    ("Turn the disc green", "make the circle green"),
    ("paint the red square yellow", "make the red square yellow"),
    ("make the red circle blue", "make the red circle blue"),
    ("on a green background instead", "on a green background instead"),
    ("change the background to green", "on a green background instead"),
    ("make it a sunset", "on a sunset gradient instead"),
    ("put it on grey stripes", "on grey stripes instead"),
    ("move the square to the left", "move the square to the left"),
    ("move the star up", "move the star to the top"),
    ("add a yellow star at the top", "add a yellow star at the top"),
    ("remove the star", "remove the star"),
    ("delete the red triangle", "remove the red triangle"),
    ("move the blue square left", "move the blue square to the left"),
    # Turkish: the object's accusative and the place's dative suffixes come off
    ("daireyi mavi yap", "make the circle blue"),
    ("kareyi sola taşı", "move the square to the left"),
    ("üste sarı bir yıldız ekle", "add a yellow star at the top"),
    ("yıldızı kaldır", "remove the star"),
    ("kırmızı kareyi mavi yap", "make the red square blue"),
    ("beyaz yıldızı kaldır", "remove the white star"),
])
def test_edit_prompts_as_people_write_them_read_as_the_grammars_instruction(prompt, instruction):
    reading = grammar.read_edit(prompt)
    assert reading is not None and reading.caption == instruction, reading
    assert reading.caption in editing.instruction_words()


def test_an_edit_prompt_that_leaves_something_out_says_what_was_made_up_and_a_caption_is_no_edit():
    reading = grammar.read_edit("add a star")
    assert reading.caption == "add a red star on the right" and reading.guessed == ("a colour: red", "a place: right")
    assert grammar.read_edit("a red circle on the left, on a blue background") is None
    # A shape's kind is no edit the model learnt: it is refused, saying what to ask instead (it ran as
    # a recolour, to a guessed colour or to the new kind's).
    for prompt, kind in (("make it a triangle", "triangle"), ("turn the circle into a star", "star"),
                         ("turn the red circle into a blue star", "star"), ("make the circle a star", "star"),
                         ("daireyi üçgen yap", "triangle"), ("üçgen yap", "triangle"),
                         ("kırmızı daireyi yıldız yap", "star")):
        reading = grammar.read_edit(prompt)
        assert reading.refusal == f"an edit cannot change a shape's kind: remove the shape, then add a {kind}", prompt
    # An edit changes one shape: a second one asked for is said, not dropped in silence.
    reading = grammar.read_edit("remove the circle and the star")
    assert reading.caption == "remove the circle" and reading.ignored == (
        "star (an edit changes one shape: ask for it next)",)
    for prompt, caption in (("paint a circle blue", "make the circle blue"),
                            ("üçgeni mavi yap", "make the triangle blue"),
                            ("kırmızı daireyi mavi yap", "make the red circle blue")):
        assert grammar.read_edit(prompt).caption == caption and grammar.read_edit(prompt).refusal is None
    assert grammar.read_edit("make the circle blue").understood  # a recolour says nothing of the kind
    rng = random.Random(11)
    for _ in range(300):
        edit = editing.sample_edit(rng)
        assert grammar.read_edit(edit.instruction).caption == edit.instruction
        assert grammar.read_edit(editing.without_colour(edit)).caption == editing.without_colour(edit)


def test_a_request_with_references_reads_its_prompt_as_an_edit_and_without_as_a_caption():
    """The serving side (backend.models.card): the embedded model's card reads an edit prompt as the
    grammar's instruction only when the request carries references; every instruction the page's
    help names is one the model was trained on."""
    from backend.models.card import ModelCard
    from embedded.words import EDIT_EXAMPLES

    card = ModelCard(prompt_grammar="scenes")
    assert card.read_prompt("turn the disc blue", editing=True).caption == "make the circle blue"
    scenes.parse_caption(card.read_prompt("turn the disc blue").caption)  # without references: a caption
    caption = "a red circle on the left, on a blue background"
    assert card.read_prompt(caption, editing=True).caption == caption
    assert ModelCard().read_prompt("turn the disc blue", editing=True) is None
    assert all(example in editing.instruction_words() for example in EDIT_EXAMPLES)


def test_an_edit_the_model_cannot_draw_is_refused_by_the_service_before_it_runs(tmp_path):
    """"make it a triangle" with a reference ran as "make the triangle red" (the colour guessed). The
    service refuses it as a bad prompt, in the page's language, and runs nothing; without a
    reference the same words are a caption (a triangle), and a recolour still runs."""
    from PIL import Image

    from backend.errors import InvalidRequest
    from backend.models.card import ModelCard
    from backend.serving.manager import Manager
    from tests.conftest import make_settings
    from ui.i18n import error_message

    mgr = Manager(make_settings(tmp_path))
    mgr.start()
    try:
        mgr.card = ModelCard(prompt_grammar="scenes")
        ref = tmp_path / "ref.png"
        Image.new("RGB", (64, 64), "red").save(ref)
        with pytest.raises(InvalidRequest) as refused:
            mgr.validate("make it a triangle", 64, 64, steps=1, images=[str(ref)])
        assert refused.value.field == "prompt"
        assert error_message(refused.value) == ("The prompt is not valid: an edit cannot change a shape's kind: "
                                                "remove the shape, then add a triangle")
        assert error_message(refused.value, "tr") == ("İstem geçerli değil: bir düzenleme şeklin türünü "
                                                      "değiştiremez: şekli kaldırın, sonra bir üçgen ekleyin")
        caption = mgr.validate("make it a triangle", 64, 64, steps=1).prompt
        assert caption == "a red triangle in the centre, on a white background"
        assert mgr.validate("make the circle blue", 64, 64, steps=1, images=[str(ref)]).prompt == "make the circle blue"
    finally:
        mgr.close()


def test_train_edits_goes_on_only_from_the_round_its_folder_ends_with(tmp_path, capsys):
    # python -m embedded train-edits --from-round N: round N again from the folder committed after
    # round N-1; a folder holding another number of rounds, or rounds the recipe does not have, is
    # refused before anything loads or trains (the committed folder holds both); so is the kinds
    # phase on a folder past it
    import json
    import shutil

    from embedded import SCENES_MODEL_DIR
    from embedded.recipe import main

    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(SCENES_MODEL_DIR / "training.json", folder / "training.json")
    recorded = json.loads((folder / "training.json").read_text())
    assert len(recorded["edit_rounds"]) == 2 and len(recorded["kinds_rounds"]) == 3
    for command, argv, said in (
            ("train-edits", ["--from-round", "2"],
             "holds 2 edit round(s); round 2 goes on from a folder that holds the 1"),
            ("train-edits", [], "trained to edit already"),
            ("train-edits", ["--from-round", "3"], "there is no round 3"),
            ("train-edits", ["--from-round", "2", "--to-round", "1"], "--to-round must be from --from-round (2) to 2"),
            ("train-kinds", [], "has been through the kinds or edit phase already")):
        with pytest.raises(SystemExit) as exited:
            main([command, str(folder), *argv])
        assert exited.value.code == 2 and said in capsys.readouterr().err
    recorded["edit_rounds"] = recorded["edit_rounds"][:1]  # one round, another recipe's
    (folder / "training.json").write_text(json.dumps(recorded))
    with pytest.raises(SystemExit):  # the committed rounds' outlines weigh 8
        main(["train-edits", str(folder), "--from-round", "2", "--outline-weight", "2"])
    assert "edit round 1 is not this recipe's round 1 (it differs in outline_weight)" in capsys.readouterr().err
    recorded["edit_rounds"][0]["lr"] = 1e-3
    (folder / "training.json").write_text(json.dumps(recorded))
    with pytest.raises(SystemExit):
        main(["train-edits", str(folder), "--from-round", "2", "--to-round", "2"])
    assert "edit round 1 is not this recipe's round 1 (it differs in lr)" in capsys.readouterr().err
