"""What the compile stack writes in a cache folder, so that clearing a cache removes that and only that.

A cache variable may point at a folder the user also keeps other files in; "Clear compile cache"
must never delete those. So each cache is cleared by the layout its writer uses, read from the
writers themselves:

- NEFF cache (``TORCH_NEURONX_NEFF_CACHE_DIR``; TorchNeuron environment variables, caching section):
  ``<dir>/ab/cd/<hash>.neff``, ``ab`` and ``cd`` the first two byte pairs of the hex hash, and
  their atomic-write temp files beside them;
- NEFF lock files (``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR``): ``<dir>/ab/cd/<hash>.lock``;
- inductor (``TORCHINDUCTOR_CACHE_DIR``; torch/_inductor/codecache.py, as it writes on torch 2.13):
  its own sub-folders ``fxgraph``, ``aotautograd``, ``triton``, ``locks``, ``cache`` and
  ``precompiled_headers``, and generated code in two-character folders named after the code's
  hash, each file ``c<hash>.<ext>`` whose hash starts with the folder's name.

Anything else — a file at the top, a folder of another name, a file in a hash folder that is not
named like the writer's — stays. Folders emptied by the removal go too (the cache folder itself
stays).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

_HEX2 = re.compile(r"^[0-9a-f]{2}$")
_NEFF = re.compile(r"^([0-9a-f]{4,})\.neff$|^\.([0-9a-f]{4,})\.neff\.\d+\.\d+\.tmp$")
_LOCK = re.compile(r"^([0-9a-f]{4,})\.lock$")
_INDUCTOR_DIRS = ("fxgraph", "aotautograd", "triton", "locks", "cache", "precompiled_headers")
_CODE_DIR = re.compile(r"^[a-z0-9]{2}$")  # "j6", "35": the code hash's second and third characters
_INDUCTOR_CODE = re.compile(r"^c([a-z0-9]{2})[a-z0-9]{30,}(\.[A-Za-z0-9_.]+)?$")

KIND_BY_VARIABLE = {
    "TORCH_NEURONX_NEFF_CACHE_DIR": "neff",
    "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": "neff-locks",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
}


def _hashed_files(root: Path, pattern: re.Pattern) -> list[Path]:
    found = []
    for first in (p for p in _dirs(root) if _HEX2.match(p.name)):
        for second in (p for p in _dirs(first) if _HEX2.match(p.name)):
            for file in _files(second):
                match = pattern.match(file.name)
                digest = next((g for g in match.groups() if g), None) if match else None
                if digest and digest.startswith(first.name + second.name):
                    found.append(file)
    return found


def _dirs(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _files(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_file() and not p.is_symlink()]
    except OSError:
        return []


def entries(kind: str, root: str | Path) -> list[Path]:
    """The files and folders the writer of ``kind`` made under ``root`` (what clearing removes)."""
    root = Path(root)
    if not root.is_dir():
        return []
    if kind == "neff":
        return _hashed_files(root, _NEFF)
    if kind == "neff-locks":
        return _hashed_files(root, _LOCK)
    if kind != "inductor":
        raise ValueError(f"unknown cache kind {kind!r}")
    found: list[Path] = [root / name for name in _INDUCTOR_DIRS if (root / name).is_dir()
                         and not (root / name).is_symlink()]
    for folder in (p for p in _dirs(root) if _CODE_DIR.match(p.name)):
        for file in _files(folder):
            match = _INDUCTOR_CODE.match(file.name)
            if match and match.group(1) == folder.name:
                found.append(file)
    return found


def size(paths: list[Path]) -> int:
    """Bytes in ``paths`` (files, and folders with everything below them)."""
    from backend.device_env import dir_size

    total = 0
    for path in paths:
        if path.is_dir():
            total += dir_size(path)
        else:
            try:
                total += path.lstat().st_size
            except OSError:
                pass
    return total


def remove(root: str | Path, paths: list[Path]) -> int:
    """Remove ``paths`` (from ``entries``) and the folders that leaves empty; returns bytes removed."""
    root = Path(root)
    removed = 0
    for path in paths:
        bytes_here = size([path])
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        removed += bytes_here
        parent = path.parent
        while parent != root and root in parent.parents:
            try:
                parent.rmdir()  # only if empty
            except OSError:
                break
            parent = parent.parent
    return removed
