import errno
import json
import math
import os
import re
import struct
import threading
import time
import zlib

import pytest
from PIL import Image, PngImagePlugin

from backend.errors import StorageFull
from backend.images.folder import APP_PNG, is_app_output, prune, save_outputs
from backend.images.pngmeta import infotext, parse_infotext, read_png_parameters, save_png, unique_output_path
from backend.request.records import GenerationResult


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
    ("p\nSteps: 9999999999999999999999, Seed: -5, Size: 1e9x2, CFG scale: nan", {"prompt": "p"}),
    ("p\nSteps: 4, Size: 99999999x1", {"prompt": "p", "steps": 4}),
    ("p\nSteps: ², Seed: ٣٣, Size: ٦٤x64", {"prompt": "p"}),  # ASCII digits only
    ("x" * 70000, {}),
    ("", {}),
])
def test_hostile_infotext_is_parsed_as_plain_text(text, expected):
    assert parse_infotext(text) == expected


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


# --- bounded parsing: hostile text and hostile files -------------------------------------------

NORMAL = ("a red fox in the snow, golden hour\nSteps: 4, Sampler: FlowMatchEuler, CFG scale: 1.0, Seed: 42, "
          "Size: 256x128, Model: embedded:tiny-flux2-klein, Mode: compiled, Device: cpu")


def _best_time(fn, repeat=15):
    """The fastest of ``repeat`` calls: the least disturbed by whatever else runs on the machine."""
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def _bounded(out):
    """Every value within the app's bounds (the defaults of parse_infotext)."""
    assert set(out) <= {"prompt", "steps", "guidance", "seed", "width", "height", "mode", "model", "device"}
    assert len(out.get("prompt", "")) <= 2000
    assert 1 <= out.get("steps", 1) <= 50
    assert math.isfinite(out.get("guidance", 0.0)) and 0 <= out.get("guidance", 0.0) <= 20
    assert 0 <= out.get("seed", 0) <= 2**63 - 1
    assert ("width" in out) == ("height" in out)
    for side in (out.get("width", 64), out.get("height", 64)):
        assert 64 <= side <= 2048 and side % 16 == 0
    assert all(len(out[k]) <= 200 for k in ("mode", "model", "device") if k in out)


HOSTILE_TEXTS = {
    "letters after a field (the 26 s probe)": "Steps: 1, " + "a" * 60000,
    "many commas": "Steps: 1" + "," * 60000,
    "many colons": "Steps: 1, " + ":" * 60000,
    "many keys": "Steps: 1, " + "a: " * 20000,
    "letters, under the total cap": "p\nSteps: 1, " + "a" * 8000,
    "letters, a 2 KB params line": "p\nSteps: 1, " + "a" * 2000,
    "many keys, a 2 KB params line": "p\nSteps: 1, " + "a: " * 670,
    "many commas, a 2 KB params line": "p\nSteps: 1" + ", a" * 670,
    "many colons, a 2 KB params line": "p\nSteps: 1, " + ":" * 2000,
    "many lines": "\n" * 8000 + "Steps: 1",
    "spaces after Steps": "p\nSteps:" + " " * 2000 + "x",
}


@pytest.mark.parametrize("name", list(HOSTILE_TEXTS))
def test_hostile_infotext_costs_less_than_20_normal_parses(name):
    """No hostile text makes the parser backtrack: each costs under 20 parses of a normal infotext
    (best of 15, side by side). Bounded by construction too: a text over ``MAX_INFOTEXT`` is not read."""
    text = HOSTILE_TEXTS[name]
    normal = _best_time(lambda: parse_infotext(NORMAL))
    hostile = _best_time(lambda: parse_infotext(text))
    _bounded(parse_infotext(text))
    assert hostile < 20 * normal, f"{name}: {hostile * 1e6:.0f} µs vs {normal * 1e6:.0f} µs for a normal infotext"


@pytest.mark.parametrize("text, expected", [
    ("p\nSteps: 0, CFG scale: inf, Seed: 1", {"prompt": "p", "seed": 1}),
    ("p\nSteps: 51, CFG scale: nan", {"prompt": "p"}),
    ("p\nSteps: 4, CFG scale: 1e400", {"prompt": "p", "steps": 4}),
    ("p\nSteps: 4, CFG scale: -1", {"prompt": "p", "steps": 4}),
    ("p\nSteps: 4, CFG scale: 20.5", {"prompt": "p", "steps": 4}),
    ("p\nSteps: 4, CFG scale: 3.5", {"prompt": "p", "steps": 4, "guidance": 3.5}),
    ("p\nSteps: 4, Seed: 12345678901234567890123", {"prompt": "p", "steps": 4}),
    ("p\nSteps: 4, Seed: 9223372036854775808", {"prompt": "p", "steps": 4}),
    ("p\nSteps: 4, Seed: 9223372036854775807", {"prompt": "p", "steps": 4, "seed": 2**63 - 1}),
    ("p\nSteps: 4, Size: 99999x99999", {"prompt": "p", "steps": 4}),
    ("p\nSteps: 4, Size: 250x256", {"prompt": "p", "steps": 4}),  # not a multiple of 16
    ("p\nSteps: 4, Size: 32x64", {"prompt": "p", "steps": 4}),
    ("p\nSteps: 4, Size: 2048x64", {"prompt": "p", "steps": 4, "width": 2048, "height": 64}),
    ("p\nSteps: 4, Mode: " + "m" * 201, {"prompt": "p", "steps": 4}),
])
def test_out_of_range_values_are_dropped(text, expected):
    assert parse_infotext(text) == expected


def test_a_long_prompt_is_cut_to_the_prompt_limit():
    out = parse_infotext("x" * 5000 + "\nSteps: 4, Seed: 3")
    assert out == {"prompt": "x" * 2000, "steps": 4, "seed": 3}
    assert parse_infotext("x" * 10_000 + "\nSteps: 4") == {}  # over the total cap: nothing at all


def test_the_bounds_are_keyword_arguments():
    text = "p\nSteps: 30, CFG scale: 7, Seed: 5, Size: 1024x1024"
    assert parse_infotext(text, max_steps=20, max_guidance=5.0, max_seed=4, max_size=512) == {"prompt": "p"}
    assert parse_infotext("abcdef", max_prompt=3) == {"prompt": "abc"}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_bytes(*chunks: bytes, size=(1, 1)) -> bytes:
    """A valid PNG of ``size`` (its IHDR says so; the pixel data is one tiny IDAT) with ``chunks``
    after the IHDR."""
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", size[0], size[1], 8, 2, 0, 0, 0))
    idat = _chunk(b"IDAT", zlib.compress(b"\0\0\0\0"))
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"".join(chunks) + idat + _chunk(b"IEND", b"")


def _pil_png(path, text, zip=False):
    info = PngImagePlugin.PngInfo()
    info.add_text("parameters", text, zip=zip)
    Image.new("RGB", (1, 1)).save(path, pnginfo=info)
    return path


def _hostile_pngs(tmp_path):
    files = {"the 26 s probe (zTXt)": _pil_png(tmp_path / "probe.png", "Steps: 1, " + "a" * 60000, zip=True)}
    for n, (name, text) in enumerate(HOSTILE_TEXTS.items()):
        files[f"tEXt: {name}"] = _pil_png(tmp_path / f"t{n}.png", text)
    bomb = zlib.compress(b"a" * (32 << 20), 9)  # 32 MiB of text in a chunk of about 32 KB
    files["zTXt bomb"] = tmp_path / "bomb.png"
    files["zTXt bomb"].write_bytes(_png_bytes(_chunk(b"zTXt", b"parameters\0\0" + bomb)))
    files["iTXt bomb"] = tmp_path / "ibomb.png"
    files["iTXt bomb"].write_bytes(_png_bytes(_chunk(b"iTXt", b"parameters\0\1\0\0\0" + bomb)))
    files["huge iTXt"] = tmp_path / "huge.png"
    files["huge iTXt"].write_bytes(_png_bytes(_chunk(b"iTXt", b"parameters\0\0\0\0\0" + b"Steps: 1, " * 500_000)))
    files["many small chunks"] = tmp_path / "chunks.png"
    files["many small chunks"].write_bytes(_png_bytes(*[_chunk(b"tEXt", b"k\0v")] * 250))
    return files


def test_hostile_pngs_are_read_in_bounded_time(tmp_path):
    normal = _pil_png(tmp_path / "normal.png", NORMAL)
    assert read_png_parameters(normal)["seed"] == 42
    files = _hostile_pngs(tmp_path)
    assert os.path.getsize(files["the 26 s probe (zTXt)"]) < 400
    for name, path in files.items():
        baseline = _best_time(lambda: read_png_parameters(normal))
        took = _best_time(lambda path=path: read_png_parameters(path), repeat=5)
        out = read_png_parameters(path)
        _bounded(out)
        assert out in ({}, {"steps": 1}) or "prompt" in out, name
        assert took < 20 * baseline, f"{name}: {took * 1e6:.0f} µs vs {baseline * 1e6:.0f} µs for a normal PNG"


def test_pixels_are_never_decoded(tmp_path):
    # An IHDR of 100000x100000 (a decompression bomb for a decoder) is never looked at as an image.
    path = tmp_path / "big.png"
    path.write_bytes(_png_bytes(_chunk(b"tEXt", b"parameters\0p\nSteps: 3"), size=(100_000, 100_000)))
    assert read_png_parameters(path) == {"prompt": "p", "steps": 3}


def test_compressed_utf8_itxt_is_read_but_text_after_the_pixels_is_not(tmp_path):
    text = "a fox 🦊\nSteps: 2, Seed: 5".encode()
    chunk = _chunk(b"iTXt", b"parameters\0\1\0en\0\0" + zlib.compress(text))
    (tmp_path / "itxt.png").write_bytes(_png_bytes(chunk))
    assert read_png_parameters(tmp_path / "itxt.png") == {"prompt": "a fox 🦊", "steps": 2, "seed": 5}
    data = _png_bytes()
    iend = data.rindex(b"IEND") - 4
    (tmp_path / "late.png").write_bytes(data[:iend] + chunk + data[iend:])
    assert read_png_parameters(tmp_path / "late.png") == {}  # as PIL's Image.open sees it


def test_a_damaged_chunk_is_not_trusted(tmp_path):
    good = _chunk(b"tEXt", b"parameters\0p\nSteps: 3")
    path = tmp_path / "crc.png"
    path.write_bytes(_png_bytes(good[:-4] + b"\0\0\0\0"))
    assert read_png_parameters(path) == {}


@pytest.mark.parametrize("make, problem", [
    (lambda p: p.write_text("hello, not a PNG"), "not a PNG"),
    (lambda p: p.write_bytes(b""), "not a PNG"),
    (lambda p: p.write_bytes(_png_bytes(_chunk(b"tEXt", b"parameters\0p\nSteps: 3"))[:40]), "truncated"),
    (lambda p: p.write_bytes(_png_bytes()[:20]), "truncated"),
    (lambda p: p.write_bytes(_png_bytes()[:33]), "truncated"),  # IHDR and nothing after it
    (lambda p: p.write_bytes(_png_bytes(*[_chunk(b"tEXt", b"k\0v")] * 300)), "more than 256 chunks"),
    (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"tEXt", b"parameters\0p")), "first chunk is not IHDR"),
    (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 2**31) + b"IHDR"), "truncated"),
    (lambda p: os.truncate(p.write_bytes(_png_bytes()) and p, 21 << 20), "over 21 MB"),
    (lambda p: p.mkdir(), "regular file"),
    (lambda p: os.mkfifo(p), "regular file"),
])
def test_a_malformed_file_is_a_clear_value_error(tmp_path, make, problem):
    path = tmp_path / "x.png"
    make(path)
    outcome = []

    def read():
        try:
            read_png_parameters(path)
        except ValueError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # a FIFO must not block the read: a bound a loaded machine meets, not a figure
    assert not reader.is_alive() and len(outcome) == 1 and re.search(problem, str(outcome[0])), outcome


def test_a_truncated_png_still_gives_what_it_read(tmp_path):
    data = _png_bytes(_chunk(b"tEXt", b"parameters\0p\nSteps: 3"))
    path = tmp_path / "cut.png"
    path.write_bytes(data[:-20])  # cut inside the image data: the parameters came before it
    assert read_png_parameters(path) == {"prompt": "p", "steps": 3}


# --- output names, retention and a full disk (issue 53) -----------------------------------------

def test_an_output_name_cannot_be_derived_from_its_parameters(tmp_path, monkeypatch):
    """Issue 53 (7): with a chosen seed another caller's image was found in 237 guesses. Two runs with
    the same parameters in the same second (each in an empty folder, so no counter differs) get
    names whose ends are 64 random bits."""
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20261201-100000")
    names = []
    for run in ("a", "b"):
        result = _result()
        save_outputs(tmp_path / run, 10, Image.new("RGB", (8, 8)), result)
        names.append(os.path.basename(result.path))
    prefix = "20261201-100000-256x128-compiled-42-"
    assert names[0] != names[1] and all(n.startswith(prefix) and APP_PNG.match(n) for n in names)
    tails = [n[len(prefix):-len(".png")] for n in names]
    assert all(len(t) * 4 >= 64 and int(t, 16) >= 0 for t in tails) and tails[0] != tails[1]


def _app_png(folder, seed, mtime):
    path = save_png(Image.new("RGB", (8, 8)), _result(seed=seed), unique_output_path(folder, _result(seed=seed)))
    os.utime(path, (mtime, mtime))
    return path


def test_retention_removes_only_the_apps_own_pngs(tmp_path):
    """Issue 53 (11): a user's file named like an app PNG was deleted. Retention removes the oldest
    PNGs that carry the app's own chunk; a file with the app's name pattern but not its chunk (older
    than all of them), a PNG with only A1111's infotext, and a user's photo all stay."""
    mine = [_app_png(tmp_path, seed, 2000 + seed) for seed in range(5)]
    foreign = unique_output_path(tmp_path, _result(seed=98))  # a name the app would give
    Image.new("RGB", (8, 8)).save(foreign)
    infotext_only = _pil_png(unique_output_path(tmp_path, _result(seed=99)), "fox\nSteps: 4, Seed: 2")
    for path in (foreign, infotext_only):
        os.utime(path, (1000, 1000))
    user = tmp_path / "holiday.png"
    user.write_bytes(b"x" * 10)
    assert APP_PNG.match(foreign.name) and APP_PNG.match(infotext_only.name)
    removed = prune(tmp_path, keep=2)
    assert sorted(removed) == sorted(mine[:3])
    assert sorted(tmp_path.iterdir()) == sorted(mine[3:] + [foreign, infotext_only, user])
    assert is_app_output(mine[4], tmp_path) and not is_app_output(foreign, tmp_path)


def test_a_full_output_folder_raises_storage_full_and_leaves_nothing_partial(tmp_path, monkeypatch):
    """Issue 53 (10): ENOSPC (or EDQUOT) at the write is StorageFull ("storage_full"), not a generic
    failure, and the temp file is gone."""
    for code in (errno.ENOSPC, errno.EDQUOT):
        def full(self, fp, *args, code=code, **kwargs):
            fp.write(b"half a png")
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(Image.Image, "save", full)
        with pytest.raises(StorageFull, match="full") as err:
            save_outputs(tmp_path, 10, Image.new("RGB", (8, 8)), _result())
        assert err.value.code == "storage_full"
        assert list(tmp_path.iterdir()) == []
