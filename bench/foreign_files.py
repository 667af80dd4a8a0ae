"""Clearing a compile cache keeps a user's files (``run_foreign_files``): each cache layout with the
compile stack's entries and foreign files beside them. A figure of ``python -m bench.hardening``;
tests/test_hardening.py holds it."""

from __future__ import annotations

from pathlib import Path


def run_foreign_files(tmp: Path) -> dict[str, int]:
    """Each compile cache layout with the compile stack's entries and a user's files beside them:
    clearing must remove the former and keep every one of the latter."""
    from backend.hardware import cache_layout

    # TorchNeuron's layouts (tests/standin/captures/torchneuron/neff_cache.json)
    key, sha = "0a1b" + "c" * 28, "0a1b" + "d" * 60
    written = {"neff": [f"0a/1b/{key}.neff", "0a/1b/.tmp.Ab3xY9", f"{sha}/{sha}.neff"],
               "neff-locks": [f"locks/{key}.lock", f"{sha}/locks/compile.lock"],
               # inductor's layouts (tests/captures/inductor_cache_tree.txt)
               "inductor": ["fxgraph/a7/fa7" + "l" * 49 + "/" + "u" * 51,
                            "j6/cj6za2bike3u7tduddk6hzww7rezwfxjykobuwzmevoumg5c2rey.py"]}
    foreign = ["notes.txt", "0a/keep.txt", "0a/1b/photo.jpg", "fx/cfx123.py", "results/model.safetensors",
               "fxgraph/notes.txt"]
    planted = kept = removed = 0
    for kind, ours in written.items():
        root = tmp / kind
        for relative in ours + foreign:
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_bytes(b"x")
        cache_layout.remove(root, cache_layout.entries(kind, root))
        planted += len(foreign)
        kept += sum((root / r).exists() for r in foreign)
        removed += sum(not (root / r).exists() for r in ours)
    return {"foreign_planted": planted, "foreign_kept": kept,
            "entries_written": sum(map(len, written.values())), "entries_removed": removed}

