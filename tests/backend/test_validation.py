"""Manager.validate: every field checked up front with a message that names it."""

import pytest

from backend.errors import InvalidRequest
from backend.manager import Manager
from backend.validation import MAX_SEED
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
