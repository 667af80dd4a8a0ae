import pytest

from backend.errors import InvalidRequest
from backend.settings import load_settings
from backend.shapes import PRESETS, Shape, parse_shape, parse_shape_list, validate_shape


def test_parse_shape_is_width_by_height():
    assert parse_shape("768x1344") == Shape(height=1344, width=768)
    assert str(Shape(height=1344, width=768)) == "768x1344"
    assert parse_shape_list("1024x1024, 768x1344") == [Shape(1024, 1024), Shape(1344, 768)]
    assert parse_shape_list("") == []


@pytest.mark.parametrize("text", ["", "1024", "10x", "ax10", "1x2x3", "-16x16"])
def test_parse_shape_rejects_malformed(text):
    with pytest.raises(ValueError, match="WIDTHxHEIGHT"):
        parse_shape(text)


def test_presets_are_valid_and_about_one_megapixel():
    for _name, shape in PRESETS:
        assert validate_shape(shape.height, shape.width, 64, 2048) == shape
        assert 0.9e6 < shape.pixels < 1.1e6


@pytest.mark.parametrize("h, w, nearest", [
    (250, 256, "256x256"),      # not a multiple of 16
    (256, 1000, "1008x256"),    # a half rounds up
    (256, 1001, "1008x256"),    # width rounds to the nearest multiple
    (256, 999, "992x256"),
    (16, 256, "256x64"),        # below the minimum
    (4096, 512, "512x2048"),    # above the maximum
    (-16, 256, "256x64"),       # negative
    (0, 0, "64x64"),
])
def test_invalid_sizes_name_the_nearest_valid_size(h, w, nearest):
    with pytest.raises(InvalidRequest) as err:
        validate_shape(h, w, 64, 2048)
    assert f"nearest valid size is {nearest}" in str(err.value)


@pytest.mark.parametrize("value", ["abc", None, 12.5, float("nan"), True])
def test_non_numeric_sizes_are_refused(value):
    with pytest.raises(InvalidRequest, match="whole number"):
        validate_shape(value, 256, 64, 2048)


def test_settings_precedence_flag_over_env_over_default():
    s = load_settings({}, environ={})
    assert s.mode == "eager" and s.device == "auto" and s.steps == 4
    s = load_settings({}, environ={"NEURON_STUDIO_MODE": "compiled", "NEURON_STUDIO_PREWARM": "64x64,128x64"})
    assert s.mode == "compiled" and s.prewarm == [Shape(64, 64), Shape(64, 128)]
    s = load_settings({"mode": "regional"}, environ={"NEURON_STUDIO_MODE": "compiled"})
    assert s.mode == "regional"


def test_settings_errors_name_their_source():
    with pytest.raises(ValueError, match="NEURON_STUDIO_DEVICE"):
        load_settings({}, environ={"NEURON_STUDIO_DEVICE": "tpu"})
    with pytest.raises(ValueError, match="--steps"):
        load_settings({"steps": "0"}, environ={})
    with pytest.raises(ValueError, match="--min-size/--max-size"):
        load_settings({"min_size": "100"}, environ={})
    with pytest.raises(ValueError, match="--prewarm 1000x1000: size: .*nearest valid size is 1008x1008"):
        load_settings({"prewarm": "1024x1024,1000x1000"}, environ={})


def test_the_settings_page_is_made_from_the_settings_table():
    """docs/settings.md lists every setting as ``OPTIONS`` declares it (``python -m backend.settings``
    rewrites it): a setting added, renamed or given another default shows there."""
    from pathlib import Path

    from backend.settings import OPTIONS, names, settings_table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()
    assert settings_table() in doc, "run `python -m backend.settings`"
    assert all(f"`{names(dest)[0]}`" in doc for dest in OPTIONS)
