"""Warm-start bundles: export -> import round trip, and every refusal leaves the caches as they were."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from backend.caches import bundles
from backend.hardware import env as device_env
from tests.conftest import beside

CODE = "j6/cj6za2bike3u7tduddk6hzww7rezwfxjykobuwzmevoumg5c2rey.py"
# an FX graph entry as inductor writes it (tests/captures/inductor_cache_tree.txt)
GRAPH = ("fxgraph/a7/fa7lpgotpuddcmkfmmuaswn5ur2nagb4ofwukojqjaq4laqexsbg/"
         "ulq5tkt4tknoy7t4ble5gz3fh3khcltyv4gyza3mbu42n5altkf")


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """A CPU device whose inductor cache can be switched between two folders (made here, then 'elsewhere')."""
    from backend.hardware.device import Device, resolve_device
    from tests.conftest import make_settings

    def use(name: str):
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / name))
        device = Device(resolve_device(make_settings(tmp_path)))
        assert device_env.prepared_environment()["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / name)
        return device

    return use


def _here(dev, model=None, **changes):
    from backend.models.source import resolve_model
    from tests.conftest import make_settings

    path, label = resolve_model("embedded-random", Path(device_env.prepared_environment()["TORCHINDUCTOR_CACHE_DIR"]))
    manifest = bundles.describe_install(dev, make_settings(), model or path, label,
                                        [{"mode": "compiled", "shape": "64x64", "compile_seconds": 1.5}])
    return dataclasses.replace(manifest, **changes)


def _made(tmp_path, caches):
    device = caches("made")
    root = tmp_path / "made"
    for relative, data in ((GRAPH, b"graph"), (CODE, b"print('kernel')"), ("notes.txt", b"mine")):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    manifest = bundles.export(tmp_path / "warm.bundle", _here(device), device)
    return manifest, tmp_path / "warm.bundle"


def test_export_then_import_elsewhere_brings_exactly_the_compile_entries(tmp_path, caches):
    manifest, bundle = _made(tmp_path, caches)
    assert sorted(f["path"] for f in manifest.files) == sorted([GRAPH, CODE])  # not notes.txt
    assert bundles.read_manifest(bundle).entries == [{"mode": "compiled", "shape": "64x64", "compile_seconds": 1.5}]
    device = caches("elsewhere")
    result = bundles.import_bundle(bundle, device, _here(device))
    assert result["written"] == 2 and result["already_there"] == 0
    assert (tmp_path / "elsewhere" / CODE).read_bytes() == b"print('kernel')"
    assert not (tmp_path / "elsewhere" / "notes.txt").exists()
    again = bundles.import_bundle(bundle, device, _here(device))  # idempotent: same files are no change
    assert again["written"] == 0 and again["already_there"] == 2


def test_an_import_beside_another_of_the_same_bundle_keeps_what_the_other_placed(tmp_path, caches, monkeypatch):
    """Two replicas on one node share its cache and import the same bundle as they start: a file (and
    its folder) the other placed between this import's check and its link is the same file, so it
    counts as already there; a different file placed meanwhile is still refused, nothing left."""
    _manifest, bundle = _made(tmp_path, caches)
    device = caches("shared")
    real_copy = shutil.copyfile

    def another_import_places(contents):
        """shutil.copyfile for this import's temporary copy, while another import links ``contents``
        (None: the bundle's own file) under the destination's name, the first time only."""
        calls = []

        def copyfile(src, dst, **kw):
            destination = Path(dst).with_name(Path(dst).name[1:].split(bundles.TEMP_SUFFIX)[0])
            if not calls:
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(Path(src).read_bytes() if contents is None else contents)
            calls.append(destination)
            return real_copy(src, dst, **kw)
        return copyfile

    monkeypatch.setattr(bundles.shutil, "copyfile", another_import_places(None))
    result = bundles.import_bundle(bundle, device, _here(device))
    assert result["written"] == 1 and result["already_there"] == 1, result
    assert (tmp_path / "shared" / CODE).read_bytes() == b"print('kernel')"
    assert (tmp_path / "shared" / GRAPH).read_bytes() == b"graph"
    assert not [p for p in (tmp_path / "shared").rglob("*") if bundles.TEMP_SUFFIX in p.name]
    other = caches("other")
    monkeypatch.setattr(bundles.shutil, "copyfile", another_import_places(b"not the same"))
    with pytest.raises(bundles.BundleRefused, match="written meanwhile with other contents"):
        bundles.import_bundle(bundle, other, _here(other))
    assert [p.read_bytes() for p in (tmp_path / "other").rglob("*") if p.is_file()] == [b"not the same"]


def _rewrite(bundle: Path, out: Path, change) -> Path:
    """Copy a bundle member by member, letting ``change(name, data, manifest)`` alter it."""
    with tarfile.open(bundle) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar]
    manifest = json.loads(members[0][1])
    with tarfile.open(out, "w") as tar:
        for member, data in change(members, manifest):
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return out


def _snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()} \
        if root.exists() else {}


def _tampered(members, manifest):
    return [(m, d[:-1] + b"!" if m.name.endswith(GRAPH) else d) for m, d in members]  # same size


def _dotdot(members, manifest):
    """A bundle true to itself (its one file's size and hash are the manifest's) that names a path
    outside the cache: only the path guards stand between it and the disk."""
    manifest["files"] = [dict(manifest["files"][0], path="../../escape.py", bytes=1,
                              sha256=hashlib.sha256(b"x").hexdigest())]
    first = members[0][0]
    evil = tarfile.TarInfo("files/inductor/../../escape.py")
    return [(first, json.dumps(manifest).encode()), (evil, b"x")]


def _link(members, manifest):
    link = tarfile.TarInfo(f"files/inductor/{manifest['files'][0]['path']}")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return [members[0], (link, b"")]


def _unlisted(members, manifest):
    return members + [(tarfile.TarInfo("files/inductor/fxgraph/zz/extra"), b"x")]


@pytest.mark.parametrize("change, words", [
    (_tampered, "SHA-256 is not the manifest's"), (_dotdot, "'..'"), (_link, "only regular files"),
    (_unlisted, "not in the manifest"),
])
def test_a_tampered_or_hostile_bundle_is_refused_with_one_line_and_changes_nothing(tmp_path, caches, change, words):
    _manifest, bundle = _made(tmp_path, caches)
    bad = _rewrite(bundle, tmp_path / "bad.bundle", change)
    device = caches("elsewhere")
    before = _snapshot(tmp_path / "elsewhere")
    with pytest.raises(bundles.BundleRefused, match=words) as refused:
        bundles.import_bundle(bad, device, _here(device))
    assert "\n" not in str(refused.value)
    assert _snapshot(tmp_path / "elsewhere") == before
    assert not [p for p in (tmp_path, tmp_path.parent, tmp_path / "elsewhere") if (p / "escape.py").exists()]


def test_a_bundle_for_another_model_or_install_is_refused_naming_the_field(tmp_path, caches):
    _manifest, bundle = _made(tmp_path, caches)
    device = caches("elsewhere")
    other_model = tmp_path / "other-model"
    other_model.mkdir()
    (other_model / "model_index.json").write_text("{}")
    for here, words in ((_here(device, model=other_model), "the model's contents"),
                        (_here(device, torch="9.9.9"), "torch: the bundle was made with"),
                        (_here(device, device="neuron"), "device: the bundle was made with 'cpu'"),
                        (_here(device, compile_backend="inductor"), "compile_backend")):
        with pytest.raises(bundles.BundleRefused, match=words):
            bundles.import_bundle(bundle, device, here)
    assert _snapshot(tmp_path / "elsewhere") == {}


def test_an_existing_cache_file_with_other_contents_is_never_overwritten(tmp_path, caches):
    _manifest, bundle = _made(tmp_path, caches)
    device = caches("elsewhere")
    (tmp_path / "elsewhere" / GRAPH).parent.mkdir(parents=True)
    (tmp_path / "elsewhere" / GRAPH).write_bytes(b"local compile")
    with pytest.raises(bundles.BundleRefused, match="exists with other contents"):
        bundles.import_bundle(bundle, device, _here(device))
    assert _snapshot(tmp_path / "elsewhere") == {GRAPH: b"local compile"}


def test_not_a_bundle_is_a_clear_refusal(tmp_path):
    junk = tmp_path / "junk.bundle"
    junk.write_bytes(b"\x89PNG not a tar")
    with pytest.raises(bundles.BundleRefused, match="not a readable bundle"):
        bundles.read_manifest(junk)


def _tree(root: Path) -> dict:
    """Every path under ``root`` with its kind and bytes: folders count too."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else "dir")
            for p in root.rglob("*")} if root.exists() else {}


def test_a_bundle_refused_at_its_last_file_leaves_the_cache_as_it_was(tmp_path, caches):
    """Issue 33 (3): a new file, then one *under* a file the cache already has — refused before
    anything moves, so the new one does not stay."""
    _manifest, bundle = _made(tmp_path, caches)
    device = caches("elsewhere")
    (tmp_path / "elsewhere" / "fxgraph").mkdir(parents=True)
    (tmp_path / "elsewhere" / "fxgraph" / "a7").write_bytes(b"a file where the bundle wants a folder")
    before = _tree(tmp_path / "elsewhere")
    with pytest.raises(bundles.BundleRefused, match="in the way"):
        bundles.import_bundle(bundle, device, _here(device))
    assert _tree(tmp_path / "elsewhere") == before


def test_a_disk_that_fills_mid_import_leaves_the_cache_as_it_was(tmp_path, caches):
    """Issue 33 (3), on a real full disk: the cache on a 64 KiB tmpfs with room for one file's
    page, not two. The import fails at the second copy; the first is taken back, and so are the
    folders it made."""
    _manifest, bundle = _made(tmp_path, caches)
    mount = tmp_path / "elsewhere"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root): the full disk cannot be made")
    try:
        device = caches("elsewhere")
        page = os.statvfs(mount).f_frsize
        free = os.statvfs(mount).f_bavail * page
        (mount / "filler").write_bytes(b"\0" * (free - page))  # one page left
        before = _tree(mount)
        with pytest.raises(bundles.BundleRefused, match="No space left on device.*nothing was imported"):
            bundles.import_bundle(bundle, device, _here(device))
        assert _tree(mount) == before
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("kind, size, words", [
    (b"L", 1 << 30, "GNU long name header announces 1073741824 bytes"),
    (b"x", 2 << 20, "PAX header announces 2097152 bytes"),  # and carries them: 2 MB of records
    (b"S", 1 << 30, "sparse member"),
    (b"0", 1 << 40, "members announce over"),
])
def test_a_header_bomb_is_refused_before_the_tar_reader_sees_it_within_a_fixed_memory_bound(tmp_path, kind, size,
                                                                                              words):
    """Issue 33 (4): a 2 KB file whose header announces a gigabyte (a long name, a PAX record, a
    sparse member, a member past the total). ``python app.py cache show`` in a child process
    refuses it naming what is wrong, and its peak memory stays that of a process that read
    nothing (measured by the kernel: the child's ru_maxrss, against the same command on a
    one-byte junk file)."""
    from bench.bounds import header_bomb, peak_rss_of_show

    bomb = header_bomb(tmp_path / "bomb.bundle", kind, size)
    junk = tmp_path / "junk.bundle"
    junk.write_bytes(b"x")
    baseline, _ = peak_rss_of_show(junk, tmp_path / "cache")
    used, said = peak_rss_of_show(bomb, tmp_path / "cache")
    assert words in said, said
    assert used < baseline + 64 * 1024, (used, baseline)  # KiB: well under the gigabyte it announces


def test_a_system_tab_export_keeps_an_edits_signature_and_its_import_warms_it(tmp_path, monkeypatch):
    """Issue 52 (4): with ``64x64*2+ref64x64`` warm, the System tab's export lists that signature (not
    the plain 64x64 it once rebuilt from height and width, warming it cold on the way), and a fresh
    app started from the bundle with ``--warm-only`` warms it and serves the edit."""
    from PIL import Image

    from backend.serving.manager import Manager
    from backend.shapes import parse_shape_list, parse_signature
    from tests.conftest import make_settings
    from ui.handlers import Studio

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # where the handler writes the bundle
    edit = parse_signature("64x64*2+ref64x64")
    made = Manager(make_settings(tmp_path / "made", reference_sizes=parse_shape_list("64x64")))
    made.start()
    try:
        made.warmup([edit], "compiled")
        path = Studio(made).system_tab.export_bundle()
        assert {(r["mode"], r["shape"]) for r in made.status().shapes} == {("compiled", "64x64*2+ref64x64")}
    finally:
        made.close()
    assert [(e["mode"], e["shape"]) for e in bundles.read_manifest(path).entries] == [("compiled", str(edit))]
    served = Manager(make_settings(tmp_path / "served", reference_sizes=parse_shape_list("64x64"),
                                   cache_from=Path(path), warm_only=True))
    served.start()
    try:
        row = next(r for r in served.status().shapes if (r["mode"], r["shape"]) == ("compiled", str(edit)))
        assert row["state"] == "warm" and served.bundle["entries"][0]["shape"] == str(edit)
        Image.new("RGB", (64, 64), "red").save(tmp_path / "ref.png")
        request = served.validate("a fox", 64, 64, steps=2, seed=1, mode="compiled",
                                  images=[str(tmp_path / "ref.png")], count=2)
        assert served.generate(request)[1].compiled is False
    finally:
        served.close()


_KILLED_IMPORT = """
import os, shutil, sys, tarfile
from pathlib import Path
from backend.caches import bundles
from backend.hardware.device import Device, resolve_device
from tests.backend.test_bundles import _here
from tests.conftest import make_settings

state, bundle = sys.argv[1], sys.argv[2]
os.environ["TORCHINDUCTOR_CACHE_DIR"] = sys.argv[3]  # (after tests.conftest, which sets its own)
device = Device(resolve_device(make_settings()))
here = _here(device)

def hold(what):  # say where the import is, then wait for the SIGKILL
    print(what, flush=True)
    sys.stdin.read()

if state == "staging":  # the first member is staged; the second is next
    real_filter, seen = tarfile.data_filter, []
    def data_filter(member, dest):
        seen.append(member.name)
        if len(seen) == 2:
            hold("staging")
        return real_filter(member, dest)
    tarfile.data_filter = data_filter
else:  # inside _place_all: a temporary copy is in the cache
    real_copy = shutil.copyfile
    def copyfile(src, dst, **kw):
        out = real_copy(src, dst, **kw)
        hold("placing")
        return out
    shutil.copyfile = copyfile
bundles.import_bundle(bundle, device, here)
print("imported", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("state", ["staging", "placing"])
def test_an_import_killed_outright_leaves_nothing_after_the_next_start(tmp_path, caches, monkeypatch, state):
    """Issue 53 (6): a SIGKILL during an import left its staging folder in the temp folder and its
    temporary copies in the cache until the same bundle was imported again. The import is killed
    where it says it is (staging its members, or placing them); the next start — the app's
    (Manager.start) after a kill while staging, the CLI's cache import after one while placing —
    removes both, and the import then goes through."""
    import signal
    import tempfile

    from backend import cli
    from backend.serving.manager import Manager
    from tests.conftest import make_settings

    _manifest, bundle = _made(tmp_path, caches)
    caches("elsewhere")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen([sys.executable, "-c", _KILLED_IMPORT, state, str(bundle), str(tmp_path / "elsewhere")],
                             env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    said = child.stdout.readline().strip()
    child.kill()  # SIGKILL: nothing of the import's own clean-up runs
    assert child.wait() == -signal.SIGKILL and said == state, child.stderr.read()[-2000:]
    def staged():  # (the child's conftest import leaves a test cache folder there too: not the import's)
        return [p.name for p in temp.iterdir() if p.name.startswith("neuron-studio-bundle-")]

    assert len(staged()) == 1
    temps = [p for p in (tmp_path / "elsewhere").rglob("*") if "neuron-studio-import" in p.name]
    assert len(temps) == (1 if state == "placing" else 0)

    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    if state == "staging":
        manager = Manager(make_settings(tmp_path))
        try:
            manager.start()
        finally:
            manager.close()
    else:
        assert cli.cache_import(make_settings(tmp_path), str(bundle)) == 0
    assert staged() == []
    assert not [p for p in (tmp_path / "elsewhere").rglob("*") if "neuron-studio-import" in p.name]


def test_the_sweep_takes_only_a_dead_imports_own_leftovers(tmp_path, caches, monkeypatch):
    """What the sweep may remove: its own names with a pid that is not alive, and for copies in a
    cache, this host's (a cache on shared storage holds other hosts' imports, whose pids mean nothing
    here). A live import's (this process's) staging and copies, and anything named otherwise, stay."""
    import tempfile

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = int(done.stdout), os.getpid()  # (the child has been reaped: its pid is free)
    temp, cache = tmp_path / "tmp", tmp_path / "elsewhere"
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    device = caches("elsewhere")
    host = bundles._HOST
    gone = [temp / f"neuron-studio-bundle-{dead}-ab_c1",
            cache / "fxgraph" / f".entry.neuron-studio-import-{host}-{dead}"]
    kept = [temp / f"neuron-studio-bundle-{alive}-ab_c1", temp / "neuron-studio-bundle-x1", temp / "my-bundle-1-a",
            cache / "fxgraph" / f".entry.neuron-studio-import-{host}-{alive}", cache / ".notes.neuron-studio-import",
            cache / "fxgraph" / f".entry.neuron-studio-import-another-host-{dead}",  # its pid is another host's
            cache / f"entry.neuron-studio-import-{host}-{dead}",
            cache / f".entry.neuron-studio-import-{host}-{dead}.txt"]
    for path in gone + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent == temp:
            (path / "files").mkdir(parents=True)
        else:
            path.write_bytes(b"x")
    assert sorted(bundles.sweep_leftovers(device)) == sorted(gone)
    assert not any(p.exists() for p in gone) and all(p.exists() for p in kept)


FRESH_INSTALL = "test_a_fresh_install_serves_the_bundled_shapes_warm_without_a_fresh_compile"
# Each process's caches are its --cache-dir's alone: without the suite's cache variables
# (tests/conftest.py), which the app would take over its flag, maker and clone would share one cache.
_SUITE_CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR")
_ENV = {**{k: v for k, v in os.environ.items() if k not in _SUITE_CACHES}, "HF_HUB_OFFLINE": "1"}
_INDUCTOR_CPU = ["--model", "embedded-random", "--device", "cpu", "--compile-backend", "inductor"]
_APP = Path(__file__).resolve().parents[2] / "app.py"


@pytest.fixture(scope="module", autouse=True)
def exported(request, tmp_path_factory):
    """The fresh-install test's bundle, exported by the CLI (a real inductor compile) when the module
    starts (``tests.conftest.beside``), while the in-process tests run: (the process, its folder)."""
    made = tmp_path_factory.mktemp("made")
    start = {FRESH_INSTALL: lambda: subprocess.Popen(
        [sys.executable, str(_APP), "cache", "export", str(made / "warm.bundle"), *_INDUCTOR_CPU,
         "--mode", "compiled", "--sizes", "64x64", "--cache-dir", str(made / "cache")],
        cwd=made, env=_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)}
    with beside(request, start) as started:
        yield started.get(FRESH_INSTALL), made


@pytest.mark.slow
def test_a_fresh_install_serves_the_bundled_shapes_warm_without_a_fresh_compile(tmp_path, exported, monkeypatch,
                                                                                 own_tempdir):
    """Issue 21's 'done when': made in one cache, served from another folder's empty cache with
    --cache-from --mode compiled --warm-only: the bundled shape is warm with no fresh inductor
    compile, others are refused; a bundle for another model is refused by the CLI in one line."""
    from gradio_client import Client

    from tools.app_process import running_app

    for var in _SUITE_CACHES:  # for running_app's process, as _ENV
        monkeypatch.delenv(var)
    maker, made = exported
    stdout, stderr = maker.communicate(timeout=280)
    assert maker.returncode == 0 and "1 (mode, shape) entries" in stdout, stderr[-2000:]
    bundle = made / "warm.bundle"
    # Refused by the CLI while the second clone starts (two processes side by side: each imports the
    # model stack): the trained model, not the random-weight one the bundle was made for.
    refusing = subprocess.Popen([sys.executable, str(_APP), "cache", "import", str(bundle),
                                 "--model", "embedded", "--device", "cpu", "--compile-backend", "inductor",
                                 "--cache-dir", str(tmp_path / "wrong")],
                                cwd=tmp_path, env=_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        serve = tmp_path / "second-clone"
        serve.mkdir()
        with running_app(serve, *_INDUCTOR_CPU, "--cache-from", str(bundle), "--mode", "compiled", "--warm-only",
                         "--cache-dir", str(serve / "cache"), timeout=240) as url:
            _out, err = refusing.communicate(timeout=120)
            errors = [line for line in err.splitlines() if line.startswith("app.py: error")]
            assert refusing.returncode == 2 and len(errors) == 1 and "the model's contents" in errors[0], err
            assert not any((tmp_path / "wrong" / "inductor").rglob("*.py"))
            client = Client(url, verbose=False)
            status = client.predict(api_name="/status")
            assert status["bundle"]["fresh_compiles"] == 0 and status["bundle"]["fxgraph_hits"] >= 1, status["bundle"]
            row = next(r for r in status["shapes"] if (r["mode"], r["shape"]) == ("compiled", "64x64"))
            assert row["state"] == "warm" and row["bundle_compile_seconds"] > 0
            _image, record = client.predict("a fox", 64, 64, "compiled", 2, 1, 1.0, api_name="/generate")
            assert record["compiled"] is False
            with pytest.raises(Exception, match="locked to warm shapes"):
                client.predict("a fox", 96, 96, "compiled", 2, 1, 1.0, api_name="/generate")
    finally:
        if refusing.poll() is None:
            refusing.kill()
            refusing.wait()
