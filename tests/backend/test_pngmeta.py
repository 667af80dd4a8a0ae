import json

import pytest
from PIL import Image, PngImagePlugin

from backend.pngmeta import infotext, parse_infotext, read_png_parameters, save_png
from backend.records import GenerationResult


def _result(**kw):
    base = dict(prompt="a red fox\nin snow", width=256, height=128, mode="compiled", steps=4, guidance=1.0,
                seed=42, device="cpu", model="embedded:tiny-flux2-klein", compiled=True, compiles=1,
                compile_seconds=1.5, seconds=2.0, encode=0.1, denoise=1.8, decode=0.1)
    base.update(kw)
    return GenerationResult(**base)


def test_png_carries_a1111_infotext_and_json(tmp_path):
    path = save_png(Image.new("RGB", (256, 128)), _result(), tmp_path / "sub" / "x.png")
    with Image.open(path) as img:
        text, record = img.info["parameters"], json.loads(img.info["neuron_studio"])
    assert text == ("a red fox\nin snow\nSteps: 4, Sampler: FlowMatchEuler, CFG scale: 1.0, Seed: 42, "
                    "Size: 256x128, Model: embedded:tiny-flux2-klein, Mode: compiled, Device: cpu")
    assert record["seed"] == 42 and record["compiled"] is True
    assert read_png_parameters(path) == {"prompt": "a red fox\nin snow", "steps": 4, "guidance": 1.0,
                                         "seed": 42, "width": 256, "height": 128,
                                         "model": "embedded:tiny-flux2-klein", "mode": "compiled",
                                         "device": "cpu"}
    assert [p.name for p in path.parent.iterdir()] == ["x.png"]  # no temp file left behind


def test_png_without_metadata_gives_nothing(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "plain.png")
    assert read_png_parameters(tmp_path / "plain.png") == {}


@pytest.mark.parametrize("text, expected", [
    ("__import__('os').system('x')", {"prompt": "__import__('os').system('x')"}),
    ("p\nSteps: 9999999999999999999999, Seed: -5, Size: 1e9x2, CFG scale: nan", {"prompt": "p", "steps": 9999999999999999999999}),
    ("p\nSteps: 4, Size: 99999999x1", {"prompt": "p", "steps": 4}),
    ("x" * 70000, {}),
    ("", {}),
])
def test_hostile_infotext_is_parsed_as_plain_text(text, expected):
    out = parse_infotext(text)
    out.pop("guidance", None)  # 'nan' parses as a float; validation rejects it later
    assert out == expected


def test_hostile_png_chunk_is_not_evaluated(tmp_path):
    info = PngImagePlugin.PngInfo()
    info.add_text("parameters", "evil\nSteps: 4, Seed: 1, Size: 64x64, Mode: eager; rm -rf /")
    Image.new("RGB", (8, 8)).save(tmp_path / "h.png", pnginfo=info)
    params = read_png_parameters(tmp_path / "h.png")
    assert params["seed"] == 1 and params["mode"] == "eager; rm -rf /"  # kept as text; validation refuses it


def test_a_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    def broken_save(self, fp, *args, **kwargs):
        fp.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(Image.Image, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_png(Image.new("RGB", (8, 8)), _result(), tmp_path / "x.png")
    assert list(tmp_path.iterdir()) == []


def test_infotext_matches_result():
    assert infotext(_result()).splitlines()[-1].startswith("Steps: 4, Sampler: FlowMatchEuler")
