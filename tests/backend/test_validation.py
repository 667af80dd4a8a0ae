"""Manager.validate: every field checked up front with a message that names it."""

import pytest

from backend.errors import InvalidRequest
from backend.request.validation import MAX_SEED
from backend.serving.manager import Manager
from tests.conftest import make_settings


@pytest.fixture
def mgr():
    return Manager(make_settings())  # validation needs no loaded model


def test_valid_request_is_normalised(mgr):
    r = mgr.validate("  a red fox  ", 256, "512", steps="8", guidance=0, seed="42", mode="compiled")
    assert (r.prompt, r.height, r.width, r.steps, r.guidance, r.seed, r.mode) == (
        "a red fox", 256, 512, 8, 0.0, 42, "compiled")


def test_defaults_and_random_seed(mgr):
    r = mgr.validate("fox", 64, 64)
    assert r.steps == 4 and r.guidance == 1.0 and r.mode == "eager"
    assert 0 <= r.seed <= MAX_SEED
    assert mgr.validate("fox", 64, 64, seed=-1).seed != mgr.validate("fox", 64, 64, seed=-1).seed


@pytest.mark.parametrize("kwargs, field", [
    ({"prompt": ""}, "prompt"),
    ({"prompt": "   \n "}, "prompt"),
    ({"prompt": "x" * 2001}, "prompt"),
    ({"prompt": "bell\x07"}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"height": 100}, "size"),
    ({"width": "wide"}, "width"),
    ({"steps": 0}, "steps"),
    ({"steps": -3}, "steps"),
    ({"steps": 51}, "steps"),
    ({"steps": 2.5}, "steps"),
    ({"steps": "four"}, "steps"),
    ({"seed": -2}, "seed"),
    ({"seed": 2**63}, "seed"),
    ({"seed": "lucky"}, "seed"),
    ({"guidance": float("nan")}, "guidance"),
    ({"guidance": float("inf")}, "guidance"),
    ({"guidance": -1}, "guidance"),
    ({"guidance": "strong"}, "guidance"),
    ({"mode": "turbo"}, "mode"),
])
def test_bad_fields_are_named(mgr, kwargs, field):
    args = {"prompt": "fox", "height": 64, "width": 64, **kwargs}
    with pytest.raises(InvalidRequest) as err:
        mgr.validate(**args)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_unicode_prompts_are_accepted(mgr):
    assert mgr.validate("a fox 🦊 ثعلب", 64, 64).prompt == "a fox 🦊 ثعلب"
    assert mgr.validate("line one\nline two\tend", 64, 64).prompt.startswith("line one")


@pytest.mark.parametrize("kwargs, field, words", [
    ({"steps": "--4"}, "steps", "digits 0-9"),
    ({"steps": "²"}, "steps", "digits 0-9"),
    ({"steps": "٣"}, "steps", "digits 0-9"),  # Arabic-Indic three: int() would take it
    ({"steps": "+4"}, "steps", "digits 0-9"),
    ({"steps": "4_0"}, "steps", "digits 0-9"),
    ({"steps": "9" * 5000}, "steps", "at most 24 digits, got 5000 digits"),
    ({"steps": 10**5000}, "steps", "about 5001 digits"),  # too long for int -> str
    ({"seed": "9" * 5000}, "seed", "at most 24 digits"),
    ({"seed": "²"}, "seed", "digits 0-9"),
    ({"seed": "--1"}, "seed", "digits 0-9"),
    ({"seed": "99999999999999999999999"}, "seed", "2^63-1 (or -1 for random), got 99999999999999999999999"),
    ({"seed": 10**400}, "seed", "got a number of 401 digits"),
    ({"width": "9" * 5000}, "width", "at most 24 digits"),
    ({"width": 10**400}, "size", "width (a number of 401 digits) is outside 64..2048"),
    ({"width": float("inf")}, "width", "whole number of pixels"),
    ({"width": "1e400"}, "width", "whole number of pixels"),
    ({"width": "٦٤"}, "width", "digits 0-9"),
    ({"height": "6_4"}, "height", "digits 0-9"),
    ({"guidance": 10**400}, "guidance", "must be a number"),
    ({"guidance": "٣"}, "guidance", "must be a number"),
    ({"guidance": "1e400"}, "guidance", "must be between 0 and 20"),
    ({"prompt": "a fox \ud800 in snow"}, "prompt", "unpaired surrogate U+D800 at position 6"),
    ({"prompt": "a fox\x00"}, "prompt", "control character U+0000"),
    ({"mode": "m" * 10_000}, "mode", "(10000 characters)"),
])
def test_malformed_numbers_and_text_are_refused_naming_the_field(mgr, kwargs, field, words):
    args = {"prompt": "fox", "height": 64, "width": 64, **kwargs}
    with pytest.raises(InvalidRequest) as err:
        mgr.validate(**args)
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")
    assert words in err.value.message
    assert len(str(err.value)) < 300  # a 5000-digit input is not echoed back whole


def test_ascii_numbers_in_text_are_still_accepted(mgr):
    r = mgr.validate("fox", " 64 ", "128.0", steps=" 7 ", guidance="2.5", seed="0012")
    assert (r.height, r.width, r.steps, r.guidance, r.seed) == (64, 128, 7, 2.5, 12)
    assert mgr.validate("fox", 64.0, 64, steps=4.0, seed=2**63 - 1).seed == 2**63 - 1


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200f", "\u061c"])
def test_bidirectional_control_characters_are_refused_naming_the_position(char):
    """A prompt (typed, from the API, the CLI or a loaded PNG — all pass here) holding a bidi
    override would show other words than it holds; refused like any control character."""
    from backend.errors import InvalidRequest
    from backend.request.validation import validate_request
    from backend.settings import Settings

    with pytest.raises(InvalidRequest, match=rf"bidirectional control character U\+{ord(char):04X} at position 2"):
        validate_request(Settings(), ("eager",), f"a {char}red fox", 64, 64)


def test_a_request_past_the_operators_work_bound_is_refused_naming_it():
    """Issue 33 (8): ``--max-work`` bounds one request's megapixel-steps (0: no bound)."""
    bounded = Manager(make_settings(max_work=30.0))
    assert bounded.validate("a fox", 1024, 1024, steps=28).steps == 28  # 29.4 megapixel-steps
    with pytest.raises(InvalidRequest) as refused:
        bounded.validate("a fox", 1024, 1024, steps=29)
    assert refused.value.field == "work"
    assert "1024x1024 at 29 steps is 30.4 megapixel-steps; the limit is 30" in refused.value.message
    assert Manager(make_settings()).validate("a fox", 2048, 2048, steps=50).steps == 50  # unbounded by default
