"""The headless CLI: generate, doctor, and one-line errors with exit status 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import app
from backend.images.pngmeta import read_png_parameters
from embedded import scenes
from tests.conftest import beside

ROOT = Path(__file__).resolve().parent.parent


def _env(env_extra=None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_STUDIO_") or k == "NEURON_STUDIO_CACHE_DIR"}
    return {**env, **(env_extra or {})}


def _run(args, cwd, env_extra=None, timeout=240):  # under pyproject.toml's 300 s per test
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], cwd=cwd, env=_env(env_extra),
                          capture_output=True, text=True, timeout=timeout)


OFFLINE = "test_generate_works_offline_with_no_flags"
COMPILED_SIZES = "test_compiled_sizes_in_one_process_report_measured_compiles"
# Typed as people type (no comma), read as the grammar's caption; the record keeps what was typed.
TYPED, CAPTION = "a red circle on the left on a sky gradient", "a red circle on the left, on a sky gradient"


@pytest.fixture(scope="module", autouse=True)
def generations(request, tmp_path_factory):
    """The two real-process generations, started when the module starts (``tests.conftest.beside``),
    each in a folder of its own; their tests, last in the module, read them: {test: (process, folder)}."""
    folders = {name: tmp_path_factory.mktemp(name[:20]) for name in (OFFLINE, COMPILED_SIZES)}
    argv = {OFFLINE: ["generate", TYPED, "--size", "256x256", "--seed", "1", "--json"],
            COMPILED_SIZES: ["generate", "a red fox", "--mode", "compiled", "--compile-backend", "aot_eager",
                             "--size", "64x64", "--size", "128x128", "--size", "64x64", "--steps", "2", "--seed", "3",
                             "--json", "--out", str(folders[COMPILED_SIZES] / "fox.png")]}

    def start(name):
        return lambda: subprocess.Popen([sys.executable, str(ROOT / "app.py"), *argv[name]], cwd=folders[name],
                                        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    with beside(request, {name: start(name) for name in argv}) as started:
        def finished(name):
            proc = started[name]
            stdout, stderr = proc.communicate(timeout=240)
            assert proc.returncode == 0, stderr
            return stdout, folders[name]
        yield finished


@pytest.mark.slow
def test_bad_input_in_a_real_process_is_one_line_without_traceback(tmp_path):
    proc = _run(["generate", "fox", "--size", "250x256"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("app.py: error: --size: width 250 is not a multiple of 16; "
                                   "nearest valid size is 256x256")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("argv, message", [
    (["generate", "fox"], "at least one --size"),
    (["generate", "fox", "--size", "abc"], "expected WIDTHxHEIGHT"),
    (["generate", "", "--size", "64x64"], "prompt: is empty"),
    (["generate", "fox", "--size", "64x64", "--steps", "0"], "--steps"),
    (["generate", "fox", "--size", "64x64", "--seed", "-7"], "seed: must be between"),
    (["generate", "fox", "--size", "64x64", "--mode", "turbo"], "--mode: expected one of"),
    (["generate", "fox", "--size", "64x64", "--model", "/no/such/model"], "no such folder"),
    (["generate", "fox", "--size", "64x64", "--model", "someone/not-cached"], "not in the local Hugging Face cache"),
    (["generate", "fox", "--size", "64x64", "--compile-backend", "warp9"], "not a registered torch.compile backend"),
    (["--device", "tpu", "doctor"], "--device: expected one of"),
])
def test_bad_input_exits_2_with_one_line(argv, message, capsys, tmp_path):
    argv = argv + ["--output-dir", str(tmp_path / "out")] if argv[0] == "generate" else argv
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(app.main(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize("flags, message", [
    (["--seed=²"], "app.py: error: --seed: must be a whole number (digits 0-9), got '²'"),
    (["--seed=--1"], "app.py: error: --seed: must be a whole number (digits 0-9), got '--1'"),
    (["--seed=99999999999999999999999"], "app.py: error: --seed: must be between 0 and 2^63-1"),
    (["--size", "10x10"], "app.py: error: --size: width 10 is outside 64..2048"),
    (["--out", "/proc/x.png"], "app.py: error: --out: cannot write PNGs in /proc"),
])
def test_bad_flags_in_a_real_process_exit_2_naming_the_flag(flags, message, tmp_path):
    """Each refused while the arguments are checked: no model is loaded (the process would print
    'loading' lines and take seconds), nothing is written."""
    size = [] if "--size" in flags else ["--size", "64x64"]
    proc = _run(["generate", "x", *size, *flags, "--output-dir", str(tmp_path / "out")], cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(message), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("out, message", [
    ("/proc/x.png", "--out: cannot write PNGs in /proc"),
    ("/proc/sub/folder", "--out: cannot write PNGs in /proc/sub/folder"),
    ("{file}/x.png", "--out: {file} is not a folder"),
    ("{folder}.png", "--out: {folder}.png is a folder, not a .png file name"),
])
def test_an_unwritable_out_is_refused_before_the_model_loads(out, message, tmp_path, capsys, monkeypatch):
    from backend.serving.manager import Manager

    (tmp_path / "file").write_text("x")
    (tmp_path / "folder.png").mkdir()
    fill = {"file": str(tmp_path / "file"), "folder": str(tmp_path / "folder")}
    monkeypatch.setattr(Manager, "start", lambda self: pytest.fail("the model was loaded"))
    code = app.main(["generate", "x", "--size", "64x64", "--out", out.format(**fill),
                     "--output-dir", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("app.py: error: " + message.format(**fill)) and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder.png"]  # nothing left behind


def test_a_missing_out_folder_is_fine_and_made_on_save(tmp_path, capsys):
    out = tmp_path / "new" / "deeper"
    assert app.main(["generate", "a fox", "--size", "64x64", "--steps", "1", "--seed", "2", "--out", str(out)]) == 0
    assert len(list(out.glob("*.png"))) == 1


def test_generate_in_process_writes_pngs_and_text(capsys, tmp_path):
    code = app.main(["generate", "a fox", "--size", "64x64", "--steps", "1", "--seed", "9",
                     "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "64x64 eager" in out and "seed 9" in out
    (png,) = tmp_path.glob("*.png")
    assert read_png_parameters(png)["seed"] == 9


def test_doctor_reports_versions_device_and_caches(capsys):
    assert app.main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["versions"]["torch"].startswith("2.13")
    assert report["device"]["kind"] == "cpu" and "TorchNeuron not installed" in report["device"]["reason"]
    assert report["torch_neuronx"] == {"installed": False, "importable": False, "cores": 0, "error": None}
    assert "TORCH_NEURONX_NEFF_CACHE_DIR" in report["caches"] and "TORCHINDUCTOR_CACHE_DIR" in report["caches"]
    assert report["model"]["label"] == "embedded:tiny-flux2-klein"
    assert app.main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "device        cpu" in text and "NeuronCores visible: 0" in text


@pytest.mark.slow
def test_generate_works_offline_with_no_flags(generations):
    # No --model: the trained embedded model, which draws what its grammar's prompt says.
    typed, prompt = TYPED, CAPTION
    stdout, tmp_path = generations(OFFLINE)
    lines = stdout.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    for key in ("prompt", "width", "height", "mode", "steps", "seed", "device", "compiled", "compiles",
                "seconds", "encode", "denoise", "decode", "path"):
        assert key in record, key
    assert (record["width"], record["height"], record["mode"], record["device"]) == (256, 256, "eager", "cpu")
    assert record["compiled"] is False and record["compiles"] == 0
    path = Path(record["path"])
    assert path.parent == tmp_path / "outputs" and path.is_file()
    params = read_png_parameters(path)
    assert params["seed"] == record["seed"] == 1 and params["prompt"] == typed and params["width"] == 256
    assert record["model"] == "embedded:scenes-flux2-klein"
    # The record and the PNG keep what was typed (loading it reads it again) and what was drawn.
    assert (record["prompt"], record["caption"]) == (typed, prompt)
    verdict = scenes.judge(Image.open(path), prompt)
    assert verdict.agrees, verdict.reason


@pytest.mark.slow
def test_compiled_sizes_in_one_process_report_measured_compiles(generations):
    stdout, _folder = generations(COMPILED_SIZES)
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [r["compiled"] for r in records] == [True, True, False]
    assert [r["seed"] for r in records] == [3, 3, 3]
    assert {Path(r["path"]).name for r in records} == {"fox-64x64.png", "fox-128x128.png"}
