"""What the compile stack writes in a cache folder, so that clearing a cache removes that and only that.

A cache variable may point at a folder the user also keeps other files in; "Clear compile cache"
must never delete those. So each cache is cleared by the layout its writer uses, read from the
writers themselves:

- NEFF cache (``TORCH_NEURONX_NEFF_CACHE_DIR``), as TorchNeuron's source writes it (captured in
  ``tests/standin/captures/torchneuron/neff_cache.json``): the C++ path's
  ``<dir>/ab/cd/<key>.neff``, ``key`` 32 hex characters (XXH3_128), ``ab``/``cd`` its first two
  pairs, with its atomic-write temp files ``.tmp.XXXXXX`` (mkstemp) beside it; the Python path's
  ``<dir>/<sha256>/<sha256>.neff`` with its temp files ``tmpXXXXXXXX.tmp`` (NamedTemporaryFile);
- NEFF locks (``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR``): ``<dir>/locks/<key>.lock`` (C++ path) and
  ``<dir>/<sha256>/locks/compile.lock`` (Python path);
- inductor (``TORCHINDUCTOR_CACHE_DIR``; torch/_inductor/codecache.py, as it writes on torch 2.13,
  captured in ``tests/captures/inductor_cache_tree.txt``): generated code in two-character folders
  named after the code's hash, each file ``c<hash>.<ext>`` whose hash starts with the folder's
  name; FX graphs as ``fxgraph/<key[1:3]>/f<key>/<entry>``; AOT autograd entries as
  ``aotautograd/a<key>/<entry>``; locks as ``locks/c<hash>.lock`` (hashes and entries are base32,
  lower case). ``triton``, ``cache`` and ``precompiled_headers`` (not written on a CPU, so not
  captured here) still go whole.

Anything else — a file at the top, a folder of another name, a file in a hash folder that is not
named like the writer's — stays. Folders emptied by the removal go too (the cache folder itself
stays).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

_HEX2 = re.compile(r"^[0-9a-f]{2}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NEFF = re.compile(r"^([0-9a-f]{32})\.neff$")
_NEFF_TEMP = re.compile(r"^\.tmp\.[A-Za-z0-9]{6}$")
_PY_NEFF_TEMP = re.compile(r"^tmp[a-z0-9_]{8}\.tmp$")
_LOCK = re.compile(r"^([0-9a-f]{32})\.lock$")
_INDUCTOR_WHOLE_DIRS = ("triton", "cache", "precompiled_headers")
_FX_KEY = re.compile(r"^f([a-z0-9]{2})[a-z0-9]{40,}$")
_AOT_KEY = re.compile(r"^a[a-z0-9]{40,}$")
_ENTRY = re.compile(r"^[a-z0-9]{40,}$")
_INDUCTOR_LOCK = re.compile(r"^c[a-z0-9]{40,}\.lock$")
_CODE_DIR = re.compile(r"^[a-z0-9]{2}$")  # "j6", "35": the code hash's second and third characters
_INDUCTOR_CODE = re.compile(r"^c([a-z0-9]{2})[a-z0-9]{30,}(\.[A-Za-z0-9_.]+)?$")

KIND_BY_VARIABLE = {
    "TORCH_NEURONX_NEFF_CACHE_DIR": "neff",
    "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": "neff-locks",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
}


def _neff_files(root: Path) -> list[Path]:
    found = []
    for first in (p for p in _dirs(root) if _HEX2.match(p.name)):
        for second in (p for p in _dirs(first) if _HEX2.match(p.name)):
            for file in _files(second):
                match = _NEFF.match(file.name)
                if (match and match.group(1).startswith(first.name + second.name)) or _NEFF_TEMP.match(file.name):
                    found.append(file)
    for folder in (p for p in _dirs(root) if _SHA256.match(p.name)):
        found.extend(f for f in _files(folder) if f.name == f"{folder.name}.neff" or _PY_NEFF_TEMP.match(f.name))
    return found


def _lock_files(root: Path) -> list[Path]:
    found = [f for f in _files(root / "locks") if _LOCK.match(f.name)] if (root / "locks").is_dir() else []
    for folder in (p for p in _dirs(root) if _SHA256.match(p.name)):
        lock = folder / "locks" / "compile.lock"
        if lock.is_file() and not lock.is_symlink():
            found.append(lock)
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
        return _neff_files(root)
    if kind == "neff-locks":
        return _lock_files(root)
    if kind != "inductor":
        raise ValueError(f"unknown cache kind {kind!r}")
    found: list[Path] = [root / name for name in _INDUCTOR_WHOLE_DIRS if (root / name).is_dir()
                         and not (root / name).is_symlink()]
    for first in (p for p in _dirs(root / "fxgraph") if _CODE_DIR.match(p.name)):
        for key in _dirs(first):
            match = _FX_KEY.match(key.name)
            if match and match.group(1) == first.name:
                found.extend(f for f in _files(key) if _ENTRY.match(f.name))
    for key in (p for p in _dirs(root / "aotautograd") if _AOT_KEY.match(p.name)):
        found.extend(f for f in _files(key) if _ENTRY.match(f.name))
    found.extend(f for f in _files(root / "locks") if _INDUCTOR_LOCK.match(f.name))
    for folder in (p for p in _dirs(root) if _CODE_DIR.match(p.name)):
        for file in _files(folder):
            match = _INDUCTOR_CODE.match(file.name)
            if match and match.group(1) == folder.name:
                found.append(file)
    return found


def size(paths: list[Path]) -> int:
    """Bytes in ``paths`` (files, and folders with everything below them)."""
    from backend.hardware.env import dir_size

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
