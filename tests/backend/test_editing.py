"""Issue 34: editing with reference images and several images per prompt, each a static signature.

The random-weight tiny model on the CPU, references fitted to three small reference sizes (the
presets' role for a real model), the compiled mode on aot_eager: a new signature is a new graph."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from backend.errors import InvalidRequest, ShapeLocked
from backend.request.references import MAX_REFERENCE_BYTES, MAX_SOURCE_PIXELS
from backend.serving.manager import Manager
from backend.shapes import Shape, parse_shape_list, parse_signature
from tests.conftest import make_settings

SIZES = "64x64,96x64,64x96"


@pytest.fixture
def editor(tmp_path):
    mgr = Manager(make_settings(tmp_path, reference_sizes=parse_shape_list(SIZES)))
    mgr.start()
    yield mgr
    mgr.close()


def _png(path: Path, size: tuple[int, int], colour: str = "red") -> str:
    Image.new("RGB", size, colour).save(path)
    return str(path)


def test_the_signature_spelling_round_trips_and_orders_references():
    shape = parse_signature("1024x1024*2+ref1024x1024x2+ref768x512")
    assert shape == Shape(1024, 1024, 2, ((512, 768), (1024, 1024), (1024, 1024)))
    assert str(shape) == "1024x1024*2+ref768x512+ref1024x1024x2" and parse_signature(str(shape)) == shape
    assert shape.tokens == 64 * 64 + 32 * 48 + 2 * 64 * 64 and shape.graph_key == (2, shape.tokens)
    assert str(parse_signature("64x64")) == "64x64" and parse_signature("64x64").plain  # unchanged for text-to-image
    for bad in ("64x64*0", "64x64*5x", "64x64+ref", "64x64+ref64", "64x64+ref64x64x0", "64x64+ref16x16x17"):
        with pytest.raises(ValueError, match="WIDTHxHEIGHT"):
            parse_signature(bad)


def test_a_reference_changes_the_signature_and_compiles_once(editor, tmp_path):
    plain = editor.generate(editor.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled"))[1]
    assert plain.compiled and plain.signature == "64x64"
    ref = _png(tmp_path / "wide.png", (300, 200))
    request = editor.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled", images=[ref])
    assert str(request.shape) == "64x64+ref96x64"  # 3:2 fitted to the 3:2 reference size
    assert editor.predict("compiled", request.shape)["will_compile"] is True
    first = editor.generate(request)[1]
    assert first.compiled and first.signature == "64x64+ref96x64"
    assert first.references == [{"sha256": first.references[0]["sha256"], "source": "300x200", "fitted": "96x64",
                                 "fit": "crop"}]
    again = editor.generate(request)[1]
    assert again.compiled is False  # warm now
    assert {r["shape"]: r["state"] for r in editor.status().shapes if r["mode"] == "compiled"} == {
        "64x64": "warm", "64x64+ref96x64": "warm"}
    batch = editor.generate(editor.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled", images=[ref],
                                            count=2))[1]
    assert batch.compiled and batch.signature == "64x64*2+ref96x64" and len(batch.images) == 2


def test_size_auto_is_the_services_choice_from_the_first_reference_to_the_nearest_warm_signature(editor, tmp_path):
    """Issue 51: the Images API's ``size: auto`` is chosen in the service (``nearest_warm``), from the
    references' headers: the first reference's fitted size while nothing is warm, then the nearest
    warm signature with the same references."""
    plain = editor.validate("a fox", steps=2, mode="compiled", nearest_warm=True)  # no reference: the start size
    assert (plain.width, plain.height) == (editor.card.start_shape.width, editor.card.start_shape.height)
    ref = _png(tmp_path / "wide.png", (300, 200))
    cold = editor.validate("a fox", steps=2, mode="compiled", images=[ref], nearest_warm=True)
    assert str(cold.shape) == "96x64+ref96x64" and cold.references[0].rgb  # decoded once, at the end
    editor.generate(editor.validate("a fox", 64, 64, steps=2, mode="compiled", images=[ref]))
    warm = editor.validate("a fox", steps=2, mode="compiled", images=[ref], nearest_warm=True)
    assert str(warm.shape) == "64x64+ref96x64"


def test_a_fitted_reference_at_a_warm_size_does_not_compile(editor, tmp_path):
    editor.generate(editor.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled",
                                    images=[_png(tmp_path / "a.png", (96, 64))]))
    # Another source size with the same aspect ratio reaches the same reference size: no compile.
    other = editor.validate("a fox", 64, 64, steps=2, seed=2, mode="compiled",
                            images=[_png(tmp_path / "b.png", (640, 400), "blue")])
    assert str(other.shape) == "64x64+ref96x64"
    assert editor.predict("compiled", other.shape)["state"] == "warm"
    result = editor.generate(other)[1]
    assert result.compiled is False and result.references[0]["fit"] == "crop"
    assert result.references[0]["source"] == "640x400"


def test_a_warm_edit_with_its_references_in_another_order_runs_in_the_signatures_order(tmp_path, monkeypatch):
    """Issue 52 (6b): the signature sorts reference sizes and the pipeline concatenates references
    in the order it gets them, so under --warm-only (A 64x64, B 64x128) warm and the same edit sent
    as (B, A) reaches the pipeline as (A, B) (on Neuron every eager op compiles per input shapes:
    the other order would compile there), compiles nothing, and its record lists the order that ran."""
    mgr = Manager(make_settings(tmp_path, reference_sizes=parse_shape_list("64x64,64x128")))
    mgr.start()
    try:
        a, b = _png(tmp_path / "a.png", (64, 64), "red"), _png(tmp_path / "b.png", (64, 128), "blue")
        pipe, reached = mgr.local.pipe, []
        encode = pipe.prepare_image_latents

        def spy(images, *args, **kwargs):
            reached.append([tuple(image.shape[-2:]) for image in images])  # (height, width) of each
            return encode(images, *args, **kwargs)

        monkeypatch.setattr(pipe, "prepare_image_latents", spy)
        mgr.generate(mgr.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled", images=[a, b]))
        mgr.set_warm_only(True)
        swapped = mgr.generate(mgr.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled", images=[b, a]))[1]
        assert reached == [[(64, 64), (128, 64)], [(64, 64), (128, 64)]]
        assert swapped.signature == "64x64+ref64x64+ref64x128" and not swapped.compiled and swapped.compiles == 0
        assert [r["fitted"] for r in swapped.references] == ["64x64", "64x128"]
    finally:
        mgr.close()


def test_the_warm_only_lock_refuses_a_cold_signature_before_anything_runs(editor, tmp_path):
    editor.warmup([parse_signature("64x64+ref64x64")], mode="compiled")  # grey references of that size
    assert editor.predict("compiled", parse_signature("64x64+ref64x64"))["state"] == "warm"
    editor.set_warm_only(True)
    runs = len(editor.records)
    cold = editor.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled",
                           images=[_png(tmp_path / "tall.png", (100, 150))])
    assert editor.predict("compiled", cold.shape)["refused"]
    with pytest.raises(ShapeLocked, match=r"64x64\+ref64x96 is not warm .*nearest: 64x64\+ref64x64"):
        editor.generate(cold)
    assert len(editor.records) == runs  # refused before anything ran
    square = editor.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled",
                             images=[_png(tmp_path / "sq.png", (200, 200))])
    assert editor.generate(square)[1].compiled is False


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR announces width x height and whose one IDAT holds almost nothing: a
    decompression bomb's header (decoding would allocate width x height x 3 bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def _animation(path: Path) -> str:
    frames = [Image.new("RGB", (32, 32), c) for c in ("red", "blue")]
    frames[0].save(path, save_all=True, append_images=frames[1:])
    return str(path)


@pytest.mark.parametrize("case, words", [
    ("text", "reference 1 is not an image"),
    ("bomb", "announces more pixels than an image may have"),
    ("large", "is 5000x5000 \\(25.0 megapixels\\); the limit is 16.8 megapixels"),
    ("huge file", "reference 1 is over 20 MB"),
    ("huge bytes", "reference 1 is over 20 MB"),  # an API client's part, bounded by the service too
    ("animation", "is an animation"),
    ("gif", "is GIF; references are PNG, JPEG or WebP"),
    ("five", "5 reference images; at most 4"),
])
def test_hostile_images_are_refused_naming_the_field_before_decoding(editor, tmp_path, case, words, monkeypatch):
    decoded, load = [], Image.Image.load
    monkeypatch.setattr(Image.Image, "load", lambda self, *a: decoded.append(self.size) or load(self))
    ok = _png(tmp_path / "ok.png", (64, 64))
    if case == "text":
        (tmp_path / "x.png").write_text("not an image")
        images = [str(tmp_path / "x.png")]
    elif case == "bomb":
        (tmp_path / "bomb.png").write_bytes(_png_header_only(100_000, 100_000))
        images = [str(tmp_path / "bomb.png")]
    elif case == "large":
        (tmp_path / "large.png").write_bytes(_png_header_only(5000, 5000))
        images = [str(tmp_path / "large.png")]
    elif case == "huge file":
        with open(tmp_path / "huge.png", "wb") as handle:
            handle.write(Path(ok).read_bytes())
            handle.truncate(MAX_REFERENCE_BYTES + 1)  # sparse: no 20 MB written
        images = [str(tmp_path / "huge.png")]
    elif case == "huge bytes":
        images = [Path(ok).read_bytes() + bytes(MAX_REFERENCE_BYTES)]
    elif case == "animation":
        images = [_animation(tmp_path / "anim.png")]
    elif case == "gif":
        Image.new("RGB", (32, 32)).save(tmp_path / "x.gif")
        images = [str(tmp_path / "x.gif")]
    else:
        images = [ok] * 5
    with pytest.raises(InvalidRequest, match=words) as refused:
        editor.validate("a fox", 64, 64, steps=2, mode="eager", images=images)
    assert refused.value.field == "images"
    assert not [size for size in decoded if size[0] * size[1] > MAX_SOURCE_PIXELS]  # nothing past the bound decoded


def test_a_reference_set_past_the_sequence_budget_and_a_bad_count_are_refused(editor, tmp_path):
    ref = _png(tmp_path / "r.png", (64, 64))
    with pytest.raises(InvalidRequest, match="count: must be between 1 and 4") as bad_count:
        editor.validate("a fox", 64, 64, mode="eager", count=5)
    assert bad_count.value.field == "count"
    tight = Manager(make_settings(tmp_path, reference_sizes=parse_shape_list(SIZES), max_sequence_tokens=40))
    with pytest.raises(InvalidRequest, match="64x64\\+ref64x64x3 is 64 image tokens.*at most 40 per request") as over:
        tight.validate("a fox", 64, 64, mode="eager", images=[ref] * 3)
    assert over.value.field == "images"  # the output alone fits: the references are what is over


def test_a_size_past_the_budget_blames_the_size_and_suggests_one_that_runs(tmp_path):
    """Issue 54 (2): 1024x1024 on a model whose budget is 1024 tokens named "images" with no reference
    loaded; 1000x1000 suggested 1008x1008, itself over the budget."""
    manager = Manager(make_settings(tmp_path, max_sequence_tokens=1024))
    with pytest.raises(InvalidRequest) as over:
        manager.validate("a fox", 1024, 1024, mode="eager")
    assert over.value.field == "size"
    assert "1024x1024 is 4096 image tokens; this model takes at most 1024" in str(over.value)
    assert "the largest size of that shape within it is 512x512" in str(over.value)
    with pytest.raises(InvalidRequest, match="nearest valid size is 512x512") as odd:
        manager.signature(1000, 1000)  # what the cost line asks before the click
    assert odd.value.field == "size"
    manager.validate("a fox", 512, 512, mode="eager")  # the suggestion runs


def test_the_record_and_the_png_keep_the_references_and_the_count(editor, tmp_path):
    from backend.images.pngmeta import read_png_parameters

    ref = _png(tmp_path / "r.png", (64, 64))
    image, result = editor.generate(editor.validate("a fox", 64, 64, steps=2, seed=5, mode="eager", images=[ref],
                                                    count=2))
    editor.save_image(image, result)
    assert len(result.paths) == 2 and all(Path(p).is_file() for p in result.paths)
    import hashlib

    params = read_png_parameters(result.paths[1])
    assert params["count"] == 2 and params["references"] == [{
        "sha256": hashlib.sha256(Path(ref).read_bytes()).hexdigest(), "source": "64x64", "fitted": "64x64",
        "fit": "as is"}]
    assert io.BytesIO(Path(result.paths[0]).read_bytes()).getvalue() != Path(result.paths[1]).read_bytes()


def test_references_past_the_budget_are_refused_from_their_headers_before_any_decode(tmp_path, monkeypatch):
    """Issue 51 (4): 20 edits of 4 large references each, whose headers alone put them past the
    sequence budget, are refused without one reference decoded, and the process barely grows
    (the probe: 5 such edits took the app +1.8 GiB and 30 s)."""
    import psutil

    from backend.request import references

    big = []
    for number in range(4):  # each 4096x4096 (the most a reference may be), a few KB on disk
        path = tmp_path / f"big-{number}.png"
        Image.new("RGB", (4096, 4096), "red").save(path, optimize=True)
        big.append(str(path))
    manager = Manager(make_settings(tmp_path, reference_sizes=parse_shape_list("1024x1024"), max_references=4,
                                    max_size=1024, max_sequence_tokens=4096 * 4))
    decoded = []
    monkeypatch.setattr(references, "_decode", lambda image, which: decoded.append(which))
    process = psutil.Process()
    before = process.memory_info().rss
    for _ in range(20):
        with pytest.raises(InvalidRequest, match="image tokens.*at most 16384 per request"):
            manager.validate("make it blue", 1024, 1024, images=big)
    assert decoded == []
    assert process.memory_info().rss - before < 50 * 2**20
