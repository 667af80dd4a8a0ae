"""What the compile stack writes in a cache folder, so that clearing a cache removes that and only
that: a cache variable may point at a folder that also holds a user's files. Each layout is its
writer's own:

- NEFF cache (``TORCH_NEURONX_NEFF_CACHE_DIR``), as TorchNeuron's source writes it (captured in
  ``tests/standin/captures/torchneuron/neff_cache.json``): the C++ path's ``<dir>/ab/cd/<key>.neff``
  (``key`` 32 hex characters, XXH3_128; ``ab``/``cd`` its first two pairs) with its ``.tmp.XXXXXX``
  temp files (mkstemp); the Python path's ``<dir>/<sha256>/<sha256>.neff`` with ``tmpXXXXXXXX.tmp``;
- NEFF locks (``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR``): ``<dir>/locks/<key>.lock`` (C++) and
  ``<dir>/<sha256>/locks/compile.lock`` (Python);
- inductor (``TORCHINDUCTOR_CACHE_DIR``; torch/_inductor/codecache.py on torch 2.13, captured in
  ``tests/captures/inductor_cache_tree.txt``): code in two-character folders, each file
  ``c<hash>.<ext>`` whose hash starts with the folder's name; ``fxgraph/<key[1:3]>/f<key>/<entry>``;
  ``aotautograd/a<key>/<entry>``; ``locks/c<hash>.lock`` (base32, lower case). ``triton``, ``cache``
  and ``precompiled_headers`` (not written on a CPU, so not captured) go whole.

Anything else stays. Folders emptied by the removal go too (the cache folder itself stays).
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

from backend.hardware.env import dir_size

_HEX2 = re.compile(r"^[0-9a-f]{2}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NEFF = re.compile(r"^([0-9a-f]{32})\.neff$")
_NEFF_TEMP = re.compile(r"^\.tmp\.[A-Za-z0-9]{6}$")
_PY_NEFF_TEMP = re.compile(r"^tmp[a-z0-9_]{8}\.tmp$")
_LOCK = re.compile(r"^([0-9a-f]{32})\.lock$")
_PY_LOCK = re.compile(r"compile\.lock\Z")  # the one name, exactly
_INDUCTOR_WHOLE_DIRS = ("triton", "cache", "precompiled_headers")
_FX_KEY = re.compile(r"^f([a-z0-9]{2})[a-z0-9]{40,}$")
_AOT_KEY = re.compile(r"^a[a-z0-9]{40,}$")
_ENTRY = re.compile(r"^[a-z0-9]{40,}$")
_INDUCTOR_LOCK = re.compile(r"^c[a-z0-9]{40,}\.lock$")
_CODE_DIR = re.compile(r"^[a-z0-9]{2}$")  # "j6", "35": the code hash's second and third characters
_INDUCTOR_CODE = re.compile(r"^c([a-z0-9]{2})[a-z0-9]{30,}(\.[A-Za-z0-9_.]+)?$")

KIND_BY_VARIABLE = {"TORCH_NEURONX_NEFF_CACHE_DIR": "neff", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": "neff-locks",
                    "TORCHINDUCTOR_CACHE_DIR": "inductor"}


def _dirs(folder: Path, name: re.Pattern | None = None, kind=Path.is_dir) -> list[Path]:
    """The real (not linked) folders in ``folder`` (named like ``name``); ``kind=Path.is_file``: files."""
    try:
        return [p for p in folder.iterdir() if kind(p) and not p.is_symlink() and (not name or name.match(p.name))]
    except OSError:
        return []


def _files(folder: Path, name: re.Pattern | None = None) -> list[Path]:
    return _dirs(folder, name, Path.is_file)


def _neff_files(root: Path) -> list[Path]:
    found = []
    for first in _dirs(root, _HEX2):
        for second in _dirs(first, _HEX2):
            for file in _files(second):
                match = _NEFF.match(file.name)
                if (match and match.group(1).startswith(first.name + second.name)) or _NEFF_TEMP.match(file.name):
                    found.append(file)
    for folder in _dirs(root, _SHA256):
        found.extend(f for f in _files(folder) if f.name == f"{folder.name}.neff" or _PY_NEFF_TEMP.match(f.name))
    return found


def _lock_files(root: Path) -> list[Path]:
    found = _files(root / "locks", _LOCK)
    for folder in _dirs(root, _SHA256):
        found.extend(_files(folder / "locks", _PY_LOCK))
    return found


def _inductor_files(root: Path) -> list[Path]:
    found = [root / name for name in _INDUCTOR_WHOLE_DIRS if (root / name).is_dir() and not (root / name).is_symlink()]
    for first in _dirs(root / "fxgraph", _CODE_DIR):
        for key in _dirs(first):
            match = _FX_KEY.match(key.name)
            if match and match.group(1) == first.name:
                found.extend(_files(key, _ENTRY))
    for key in _dirs(root / "aotautograd", _AOT_KEY):
        found.extend(_files(key, _ENTRY))
    found.extend(_files(root / "locks", _INDUCTOR_LOCK))
    for folder in _dirs(root, _CODE_DIR):
        for file in _files(folder):
            match = _INDUCTOR_CODE.match(file.name)
            if match and match.group(1) == folder.name:
                found.append(file)
    return found


_ENTRIES = {"neff": _neff_files, "neff-locks": _lock_files, "inductor": _inductor_files}


def entries(kind: str, root: str | Path) -> list[Path]:
    """The files and folders the writer of ``kind`` made under ``root`` (what clearing removes)."""
    root = Path(root)
    if not root.is_dir():
        return []
    if kind not in _ENTRIES:
        raise ValueError(f"unknown cache kind {kind!r}")
    return _ENTRIES[kind](root)


def size(paths: list[Path]) -> int:
    """Bytes in ``paths`` (files, and folders with everything below them)."""
    total = 0
    for path in paths:
        if path.is_dir():
            total += dir_size(path)
        else:
            with contextlib.suppress(OSError):
                total += path.lstat().st_size
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
