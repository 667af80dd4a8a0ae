"""Warm-start bundles (docs/bundles.md): a plain tar, ``manifest.json`` first, then
``files/<cache>/<path>`` — what the compile stack wrote in the app's caches.

The manifest's match fields include what TorchNeuron puts in every NEFF's key besides the program
(chip target, LNC, opt-level override, ``NEURON_CC_FLAGS``: ``KernelExecution.cpp``, captured in
``tests/standin/captures/torchneuron/neff_cache.json``): a NEFF made with other values is never hit.

A bundle is untrusted code (NEFF programs, inductor's pickles and shared libraries): every member is
verified in a private staging folder before anything reaches the caches (docs/bundles.md, "Importing").
An import killed outright (SIGKILL, a power cut) cannot clean up after itself: its staging folder and
its temporary copies in the caches carry its pid in their names (``STAGING_PREFIX``, ``TEMP_SUFFIX``),
and ``sweep_leftovers`` (at every import and at the app's start) removes those of a pid that is no
longer alive, and nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import logging
import os
import platform
import re
import shutil
import socket
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from backend.errors import BundleRefused
from backend.hardware import cache_layout
from backend.hardware import env as device_env

FORMAT = "neuron-studio-bundle/2"  # 2: the NEFF key fields (target, opt level, NEURON_CC_FLAGS)
APP_VERSION = "2026.12"
MAX_FILES = 20_000
MAX_FILE_BYTES = 2 * 2**30  # one NEFF of a large graph stays well under this
MAX_TOTAL_BYTES = 16 * 2**30
MAX_MANIFEST_BYTES = 8 * 2**20
STAGING_PREFIX = "neuron-studio-bundle-"  # + "<pid>-" + mkdtemp's letters, in the temp folder
# ".<name>" + this + "<host>-<pid>": a copy on its way into a cache. A cache may be shared between
# hosts (a NEFF cache on shared storage), where a pid names a process of one host only (of one pod,
# where each has its own pid numbers): the host keeps two imports' copies apart, and the sweep to its own.
TEMP_SUFFIX = ".neuron-studio-import-"
_HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:253] or "host"
_STAGING = re.compile(re.escape(STAGING_PREFIX) + r"(\d{1,10})-[A-Za-z0-9_]{1,32}")
_TEMP = re.compile(r"\..+" + re.escape(TEMP_SUFFIX) + r"([A-Za-z0-9._-]{1,253})-(\d{1,10})", re.DOTALL)
log = logging.getLogger(__name__)
# Fields that must match this install for a bundle to apply, in the order they are checked.
MATCH_FIELDS = ("format", "app_version", "torch", "diffusers", "torch_neuronx", "neuronx_cc", "device",
                "neuron_target", "lnc", "neuron_opt_level", "neuron_cc_flags",
                "dtype", "compile_backend", "model_hash", "tp_degree")


@dataclasses.dataclass
class Manifest:
    format: str
    app_version: str
    torch: str | None
    diffusers: str | None
    torch_neuronx: str | None
    neuronx_cc: str | None
    device: str
    neuron_target: str | None  # the NEFF key's chip target (trn2, trn3); None off Neuron
    lnc: int | None  # the NEFF key's logical-core config in force
    neuron_opt_level: str | None  # NEURON_COMPILER_OPT_LEVEL (None: TorchNeuron's -O1 eager, -O2 compiled)
    neuron_cc_flags: str | None  # NEURON_CC_FLAGS ("" none); None off Neuron
    dtype: str
    compile_backend: str
    model: str
    model_hash: str
    tp_degree: int | None
    entries: list[dict[str, Any]]  # {"mode", "shape", "compile_seconds"} measured where it was made
    files: list[dict[str, Any]]  # {"cache", "path", "bytes", "sha256"}
    created: str = ""
    python: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "Manifest":
        if not isinstance(data, dict):
            raise BundleRefused("the bundle's manifest is not a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        if missing := [n for n in names if n not in data and n not in ("created", "python")]:
            raise BundleRefused(f"the bundle's manifest lacks {', '.join(sorted(missing))}")
        if data.get("format") != FORMAT:
            raise BundleRefused(f"format: the bundle is {data.get('format')!r}, this app reads {FORMAT!r}")
        manifest = cls(**{k: v for k, v in data.items() if k in names})
        if not isinstance(manifest.files, list) or not isinstance(manifest.entries, list):
            raise BundleRefused("the bundle's manifest lists no files or entries")
        return manifest


def installed_version(dist: str) -> str | None:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(dist)
    return None


def model_hash(model_path: str | Path) -> str:
    """SHA-256 over the model folder's files (relative paths and contents)."""
    root = Path(model_path)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def describe_install(device, settings, model_path: str, model_label: str,
                     entries: list[dict[str, Any]] | None = None) -> Manifest:
    return Manifest(
        format=FORMAT, app_version=APP_VERSION, torch=installed_version("torch"),
        diffusers=installed_version("diffusers"), torch_neuronx=installed_version("torch-neuronx"),
        neuronx_cc=installed_version("neuronx-cc"), device=device.kind,
        **device.neff_key_fields(), dtype=device.info.dtype,
        compile_backend=device.info.compile_backend, model=model_label, model_hash=model_hash(model_path),
        tp_degree=settings.tp_degree if any(e["mode"] == "tp" for e in entries or []) else None,
        entries=list(entries or []), files=[], created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        python=platform.python_version())


def check(manifest: Manifest, here: Manifest) -> str | None:
    """The first field where the bundle does not apply here, as one line; None if it applies."""
    for name in MATCH_FIELDS:
        theirs, ours = getattr(manifest, name), getattr(here, name)
        if name == "tp_degree" and theirs is None:
            continue  # no tensor-parallel entries: any degree
        if theirs != ours:
            what = "the model's contents" if name == "model_hash" else name
            return (f"{what}: the bundle was made with {theirs!r}"
                    + (f" ({manifest.model})" if name == "model_hash" else "")
                    + f", this install has {ours!r}")
    return None


def _cache_dirs(device) -> dict[str, Path]:
    env = device_env.prepared_environment()
    return {cache_layout.KIND_BY_VARIABLE[var]: Path(env[var]) for var in device.cache_vars() if env.get(var)}


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def export(path: str | Path, manifest: Manifest, device) -> Manifest:
    """Write the bundle (lock files excluded) to a temp name, then rename it."""
    files, sources = [], []
    for kind, root in _cache_dirs(device).items():
        if kind == "neff-locks":
            continue
        for entry in cache_layout.entries(kind, root):
            for file in ([entry] if entry.is_file() else sorted(p for p in entry.rglob("*") if p.is_file()
                                                                   and not p.is_symlink())):
                relative = file.relative_to(root).as_posix()
                if kind == "inductor" and relative.startswith("locks/"):
                    continue
                files.append({"cache": kind, "path": relative, "bytes": file.stat().st_size, "sha256": _sha256(file)})
                sources.append(file)
    manifest = dataclasses.replace(manifest, files=files)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".partial-", suffix=".tar", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle, tarfile.open(fileobj=handle, mode="w") as tar:
            data = json.dumps(manifest.to_json(), indent=1).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
            for meta, source in zip(files, sources):
                info = tarfile.TarInfo(f"files/{meta['cache']}/{meta['path']}")
                info.size, info.mtime, info.mode = meta["bytes"], int(source.stat().st_mtime), 0o600
                with open(source, "rb") as body:
                    tar.addfile(info, body)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return manifest


# A bundle's tar headers, bounded before Python's tar reader sees them. ``tarfile`` reads a GNU
# long-name (``L``, ``K``) or a PAX (``x``, ``g``) header whole, whatever size it announces, before
# anything of the app can look at the member it describes: a 2 MB file that announces a huge one
# takes gigabytes of memory. So ``_check_headers`` walks the container first, one 512-byte header at
# a time, reading no member's data (each is skipped by its announced size). It refuses a compressed
# bundle (its headers cannot be reached without inflating what comes before them; ``export`` writes a
# plain tar), a long-name or PAX header over ``MAX_META_BYTES``, a sparse member (GNU ``S``; a PAX
# sparse map needs a PAX header, bounded, and the importer refuses ``issparse()`` members: a few
# kilobytes must not expand to gigabytes), and members announcing over ``max_total`` bytes together.
# The header layout is POSIX ustar's (size 124-136 in octal or GNU base-256, type 156, magic 257).
TAR_BLOCK = 512
MAX_META_BYTES = 64 << 10  # a path of a few hundred characters, or a PAX record or two, is far less
META_TYPES = {b"L": "GNU long name", b"K": "GNU long link", b"x": "PAX", b"g": "PAX global"}
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}


class HeaderRefused(ValueError):
    """The container is not a tar the importer will hand to ``tarfile`` (says why)."""


def _header_size(header: bytes) -> int:
    field = header[124:136]
    if field[0] & 0x80:  # GNU base-256: a big-endian number in the remaining bytes
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip() or b"0"
    try:
        return int(text, 8)
    except ValueError:
        raise HeaderRefused(f"a header's size field is not a number ({text[:12]!r})") from None


def _check_headers(path: str | Path, max_total: int) -> int:
    """Walk the headers of the tar at ``path``; returns how many members it has. HeaderRefused
    names the first thing that is over its bound or not a plain tar."""
    members, total = 0, 0
    with open(path, "rb") as handle:
        start = handle.read(6)
        for magic, kind in _COMPRESSED.items():
            if start.startswith(magic):
                raise HeaderRefused(f"it is {kind}-compressed; a bundle is the plain tar `cache export` writes")
        handle.seek(0)
        while True:
            header = handle.read(TAR_BLOCK)
            if len(header) < TAR_BLOCK:
                raise HeaderRefused("it ends inside a header (not a whole tar)")
            if header == bytes(TAR_BLOCK):
                return members  # the end-of-archive marker
            if header[257:262] != b"ustar":
                raise HeaderRefused("a header is not a ustar header")
            kind, size = header[156:157], _header_size(header)
            if kind in META_TYPES and size > MAX_META_BYTES:
                raise HeaderRefused(f"a {META_TYPES[kind]} header announces {size} bytes "
                                    f"(at most {MAX_META_BYTES} are read)")
            if kind == b"S":
                raise HeaderRefused("it holds a sparse member (a bundle's files are whole)")
            if kind not in META_TYPES:
                members += 1
                total += size
                if total > max_total:
                    raise HeaderRefused(f"its members announce over {max_total} bytes")
            handle.seek((size + TAR_BLOCK - 1) // TAR_BLOCK * TAR_BLOCK, 1)


def read_manifest(path: str | Path) -> Manifest:
    """The manifest (the first member), bounded; its headers are checked first (``_check_headers``)."""
    try:
        _check_headers(path, MAX_TOTAL_BYTES + MAX_MANIFEST_BYTES)
        with tarfile.open(path, mode="r:") as tar:
            first = tar.next()
            if first is None or first.name != "manifest.json" or not first.isfile():
                raise BundleRefused(f"{path}: not a Neuron Studio bundle (no manifest.json first)")
            if first.size > MAX_MANIFEST_BYTES:
                raise BundleRefused(f"{path}: its manifest is {first.size} bytes, more than a manifest can be")
            data = json.loads(tar.extractfile(first).read().decode("utf-8"))
    except HeaderRefused as exc:
        raise BundleRefused(f"{path}: not a readable bundle ({exc})") from None
    except (tarfile.TarError, OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleRefused(f"{path}: not a readable bundle ({type(exc).__name__}: {exc})") from None
    return Manifest.from_json(data)


def _safe_relative(name: str) -> PurePosixPath:
    pure = PurePosixPath(name)
    if pure.is_absolute() or name.startswith("/") or "\\" in name or any(p in ("..", "") for p in pure.parts):
        raise BundleRefused(f"member {name!r}: absolute paths, '..' and empty parts are refused")
    return pure


def _place_all(moves: list[tuple[Path, Path]]) -> int:
    """Every staged file in place, or none: each is copied beside its destination under a temporary
    name (the step that may fail: ENOSPC), then linked into place (no space needed). A name taken
    meanwhile by the same file (another import of this bundle: replicas on one node share its cache)
    is kept as it is; by another file, refused. A failure removes everything this import made.
    Returns how many were already placed by another."""
    made_dirs: list[Path] = []
    temps: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    theirs = 0
    try:
        for source, destination in moves:
            missing = [p for p in (destination.parent, *destination.parent.parents) if not p.exists()]
            for folder in reversed(missing):
                try:
                    folder.mkdir()
                except FileExistsError:
                    continue  # made meanwhile by another import: not this one's to remove
                made_dirs.append(folder)
            temp = destination.with_name(f".{destination.name}{TEMP_SUFFIX}{_HOST}-{os.getpid()}")
            temps.append((temp, destination))
            shutil.copyfile(source, temp)
        for temp, destination in temps:
            try:
                os.link(temp, destination)
            except FileExistsError:
                if destination.is_symlink() or not destination.is_file() or _sha256(destination) != _sha256(temp):
                    raise FileExistsError(errno.EEXIST, "written meanwhile with other contents",
                                          str(destination)) from None
                theirs += 1
                continue
            placed.append(destination)
        for temp, _destination in temps:
            temp.unlink()
    except OSError as exc:
        for path in placed + [temp for temp, _ in temps]:
            path.unlink(missing_ok=True)
        for folder in reversed(made_dirs):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise BundleRefused(f"the bundle could not be written into the caches ({type(exc).__name__}: {exc}); "
                            "nothing was imported, the caches are as they were") from None
    return theirs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or no such number): not ours to judge, left alone
    return True


def sweep_leftovers(device) -> list[Path]:
    """Remove what an import killed outright left: staging folders in the temp folder and temporary
    copies in ``device``'s caches, by their names only (``STAGING_PREFIX``, ``TEMP_SUFFIX``), only
    this user's, only this host's, only when the pid in the name is not alive. Returns what was removed."""
    removed: list[Path] = []
    with contextlib.suppress(OSError), os.scandir(tempfile.gettempdir()) as found:
        for entry in found:
            match = _STAGING.fullmatch(entry.name)
            if match and entry.is_dir(follow_symlinks=False) \
                    and entry.stat(follow_symlinks=False).st_uid == os.getuid() \
                    and not _alive(int(match[1])):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
    for root in _cache_dirs(device).values():
        for folder, _dirs, files in os.walk(root):
            for name in files:
                match = _TEMP.fullmatch(name)
                path = Path(folder) / name
                if match and match[1] == _HOST and not _alive(int(match[2])) and not path.is_symlink():
                    with contextlib.suppress(OSError):
                        path.unlink()
                        removed.append(path)
    if removed:
        log.warning("removed %d leftovers of an import that was killed: %s", len(removed),
                    ", ".join(str(p) for p in removed[:5]))
    return removed


def import_bundle(path: str | Path, device, here: Manifest) -> dict[str, Any]:
    """Returns {"manifest", "written", "already_there"}, or BundleRefused with nothing changed."""
    sweep_leftovers(device)
    manifest = read_manifest(path)
    if mismatch := check(manifest, here):
        raise BundleRefused(f"the bundle does not apply here: {mismatch}")
    listed, total = {}, 0
    if len(manifest.files) > MAX_FILES:
        raise BundleRefused(f"the bundle lists {len(manifest.files)} files; at most {MAX_FILES} are read")
    for meta in manifest.files:
        if not isinstance(meta, dict) or meta.get("cache") not in cache_layout.KIND_BY_VARIABLE.values():
            raise BundleRefused(f"the manifest lists a file of no known cache: {str(meta)[:200]}")
        name = f"files/{meta['cache']}/{_safe_relative(str(meta.get('path', '')))}"
        if not isinstance(meta.get("bytes"), int) or not 0 <= meta["bytes"] <= MAX_FILE_BYTES:
            raise BundleRefused(f"{name}: size {meta.get('bytes')!r} is outside 0..{MAX_FILE_BYTES}")
        total += meta["bytes"]
        listed[name] = meta
    if total > MAX_TOTAL_BYTES:
        raise BundleRefused(f"the bundle holds {total} bytes; at most {MAX_TOTAL_BYTES} are imported")
    dirs = _cache_dirs(device)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-"))
    try:
        seen = set()
        with tarfile.open(path, mode="r:") as tar:
            for member in tar:
                if member.name == "manifest.json":
                    continue
                if not member.isfile() or member.issparse():
                    raise BundleRefused(f"member {member.name!r}: only regular files are read, whole (no "
                                        "links, devices or sparse files)")
                try:  # the standard library's rule for extracting untrusted archives (PEP 706)
                    tarfile.data_filter(member, str(staging))
                except tarfile.FilterError as exc:
                    raise BundleRefused(f"member {member.name!r}: {exc} "
                                        "(absolute paths and '..' are refused)") from None
                _safe_relative(member.name)  # and, as for the manifest's paths, no empty parts
                if (meta := listed.get(member.name)) is None:
                    raise BundleRefused(f"member {member.name!r} is not in the manifest")
                if member.name in seen:
                    raise BundleRefused(f"member {member.name!r} appears twice")
                if member.size != meta["bytes"]:
                    raise BundleRefused(f"member {member.name!r}: {member.size} bytes, "
                                        f"the manifest says {meta['bytes']}")
                seen.add(member.name)
                target = staging / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                with tar.extractfile(member) as body, open(target, "wb") as out:
                    for block in iter(lambda: body.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
                if digest.hexdigest() != meta.get("sha256"):
                    raise BundleRefused(f"member {member.name!r}: its SHA-256 is not the manifest's (a tampered file)")
        if missing := sorted(set(listed) - seen):  # seen holds listed names only: a member not listed is refused
            raise BundleRefused(f"the bundle lacks {len(missing)} file(s) its manifest lists, e.g. {missing[0]!r}")
        # Every file is verified. Plan the moves; refuse before moving anything if one would overwrite.
        moves, already = [], 0
        for name, meta in listed.items():
            if meta["cache"] not in dirs:
                raise BundleRefused(f"{name}: this device has no {meta['cache']} cache")
            destination = dirs[meta["cache"]] / meta["path"]
            blocked = next((parent for parent in destination.parents if parent.exists() and not parent.is_dir()), None)
            if blocked is not None or destination.is_symlink():
                raise BundleRefused(f"{destination}: {blocked or destination} is in the way (a file, not a "
                                    "folder); the import overwrites nothing")
            if destination.exists():
                if destination.is_file() and _sha256(destination) == meta["sha256"]:
                    already += 1
                    continue
                raise BundleRefused(f"{destination} exists with other contents; the import overwrites nothing "
                                    "(clear the compile cache first if the bundle should replace it)")
            moves.append((staging / name, destination))
        theirs = _place_all(moves)
        device.cache_info(fresh=True)
        return {"manifest": manifest, "written": len(moves) - theirs, "already_there": already + theirs}
    except (tarfile.TarError, OSError) as exc:
        raise BundleRefused(f"{path}: could not be read whole ({type(exc).__name__}: {exc}); nothing was imported") \
            from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
