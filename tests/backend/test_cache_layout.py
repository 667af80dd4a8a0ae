"""Clearing a compile cache removes what the compile stack wrote there, and nothing a user keeps beside it."""

from pathlib import Path

import pytest

from backend.hardware import cache_layout
from tests.neuron.captures import neff_layout_paths

FOREIGN = ["notes.txt", "0a/keep.txt", "0a/1b/photo.jpg", "fx/cfx123.py", "project/fxgraph.txt",
           "0a/1b/" + "ff" * 16 + ".neff",  # a NEFF name whose key does not start with its folders
           "0a/1b/.tmp.toolong1", "ab" * 32 + "/notes.txt", "ab" * 32 + "/locks/other.lock"]
FOREIGN_BESIDE_LOCKS = ["locks/readme.txt", "locks/" + "0a" * 16 + ".lock.bak"]
# Inductor's own tree as torch 2.13 wrote it (a real compile, captured with the command in the file).
CAPTURED = Path(__file__).resolve().parents[1] / "captures" / "inductor_cache_tree.txt"
INDUCTOR_WRITTEN = [line for line in CAPTURED.read_text().splitlines() if line and not line.startswith("#")]
# A user's files inside inductor's own folders: issue 33 (7), they once went with the folders.
FOREIGN_IN_INDUCTOR_DIRS = ["fxgraph/notes.txt", "fxgraph/a7/mine.txt", "aotautograd/readme.md", "locks/my.lock",
                            INDUCTOR_WRITTEN[[i for i, w in enumerate(INDUCTOR_WRITTEN)
                                              if w.startswith("fxgraph/")][0]].rsplit("/", 1)[0] + "/my notes.txt"]


def _plant(root: Path, relative: str, data: bytes = b"x" * 10) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind, written, foreign", [
    # TorchNeuron's own layout, expanded from the captured source lines (neff_cache.json).
    ("neff", neff_layout_paths("neff", "neff_temp", "python_neff", "python_neff_temp"), FOREIGN_BESIDE_LOCKS),
    ("neff-locks", neff_layout_paths("lock", "python_lock"), FOREIGN_BESIDE_LOCKS),
    ("inductor", INDUCTOR_WRITTEN + ["triton/0/k.cubin"], FOREIGN_IN_INDUCTOR_DIRS),
])
def test_only_the_writers_entries_go_and_the_size_is_what_went(tmp_path, kind, written, foreign):
    ours = [_plant(tmp_path, r, b"y" * 100) for r in written]
    theirs = [_plant(tmp_path, r) for r in FOREIGN + foreign]
    found = cache_layout.entries(kind, tmp_path)
    if kind != "inductor":  # inductor's triton/ goes whole
        assert sorted(found) == sorted(ours)
    assert cache_layout.size(found) == 100 * len(written)
    assert cache_layout.remove(tmp_path, found) == 100 * len(written)
    assert not any(p.exists() for p in ours) and all(p.exists() for p in theirs)
    assert tmp_path.is_dir()


def test_the_device_clears_by_layout_and_reports_what_it_removed(tmp_path, monkeypatch):
    from backend.hardware import env as device_env
    from backend.hardware.device import Device, resolve_device
    from tests.conftest import make_settings

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "shared"))  # a folder the user named
    device = Device(resolve_device(make_settings(tmp_path)))
    assert device_env.prepared_environment()["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "shared")
    graph = next(w for w in INDUCTOR_WRITTEN if w.startswith("fxgraph/"))  # an FX graph entry as inductor writes it
    mine = _plant(tmp_path / "shared", graph, b"z" * 1000)
    keep = _plant(tmp_path / "shared", "thesis.tex")
    plan = device.cache_plan()
    assert plan[0]["entries"] == 1 and plan[0]["remove_bytes"] == 1000
    assert device.clear_caches() == 1000
    assert not mine.exists() and keep.read_bytes() == b"x" * 10
