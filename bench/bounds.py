"""The room's bounds, probed from outside (issue 33): each one as a stranger, a greedy viewer or a
hostile bundle meets it. Run by ``python -m bench.hardening``; the tests that hold each bound are
named in its function's docstring.

Against a running app (``room_bounds``):
- a Stop posted by hand without a session while an API client's run is going (it owns nothing),
- uploads from one address past its bytes (429) and one with a foreign ``Origin`` (403), with the
  bytes the app's upload folder holds before and after,
- wrong operator logins from one address (403, then 429 for the window; the right token too),
- a request past ``--max-work`` (refused naming the field before it runs),
- one viewer asking 50 runs at once against another viewer's one (the cap, round robin).

Without an app (``bundle_bounds``): a bundle refused at its last file and a disk that fills
mid-import (the cache tree's hashes before and after), and header bombs previewed by ``python
app.py cache show`` in a child process (its peak memory against the same command on junk).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tools.app_process import ROOT

UPLOAD_MB = 19.9  # just under Gradio's per-file cap the app sets (MAX_UPLOAD, 20 MB)
GREEDY_RUNS = 50


def _status(request: urllib.request.Request) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as answer:
        return answer.code, answer.read().decode(errors="replace")


def _upload(url: str, size: int, origin: str | None = None) -> tuple[int, str]:
    """POST one file of ``size`` bytes as the page's file box does, the way curl sends a large body:
    ``Expect: 100-continue`` first, the body only once the server asks for it (a refusal answers
    before the body, and the connection closes without reading it)."""
    import socket
    from urllib.parse import urlsplit

    boundary = secrets.token_hex(12)
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.png\"\r\n"
            "Content-Type: image/png\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    where = urlsplit(url)
    lines = [f"POST {where.path}gradio_api/upload HTTP/1.1", f"Host: {where.netloc}", "Expect: 100-continue",
             f"Content-Type: multipart/form-data; boundary={boundary}",
             f"Content-Length: {len(head) + size + len(tail)}", "Connection: close"]
    if origin:
        lines.append(f"Origin: {origin}")
    with socket.create_connection((where.hostname, where.port), timeout=120) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = sock.recv(65536)
        if answer.startswith(b"HTTP/1.1 100"):
            sock.sendall(head + os.urandom(size) + tail)
            answer = answer.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in answer else b""
        while True:  # the whole answer: the server closes the connection after it
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    status, _, rest = answer.partition(b"\r\n")
    body = rest.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in rest else b""
    return int(status.split()[1]), body.decode(errors="replace")


def _held(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def uploads(url: str, upload_dir: Path, tries: int = 7) -> dict[str, Any]:
    """Uploads of 19.9 MB from one address until refused, then a small one from another site.
    (tests/ui/test_guard.py holds the bounds; this measures them on a running app.)"""
    from web import guard

    size = int(UPLOAD_MB * 1e6)
    accepted, refusal = 0, None
    for _ in range(tries):
        held = _held(upload_dir)
        code, text = _upload(url, size)
        if code != 200:
            refusal = {"status": code, "says": text.strip()[:160], "kept_bytes": _held(upload_dir) - held}
            break
        accepted += 1
    code, text = _upload(url, 1024, origin="http://elsewhere.example")
    return {"accepted": accepted, "accepted_MB": round(accepted * size / 1e6, 1),
            "bound_MB": round(guard.UPLOAD_BYTES_PER_CALLER / 1e6, 1), "refusal": refusal,
            "foreign_origin": {"status": code, "says": text.strip()[:160]}}


def logins(url: str, token: str, wrong: int = 8) -> dict[str, Any]:
    """Wrong operator tokens from one address, then the right one from the same address
    (tests/ui/test_door.py::test_wrong_operator_logins_from_one_address_are_slowed_down)."""
    from tools.room_client import no_redirect_opener

    opener = no_redirect_opener()

    def login(value: str) -> int:
        try:
            with opener.open(url + f"operator?token={value}", timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as answer:
            return answer.code

    started = time.monotonic()
    codes = [login(secrets.token_urlsafe(32)) for _ in range(wrong)]
    return {"wrong": codes, "seconds": round(time.monotonic() - started, 2), "right_token_then": login(token)}


def sessionless_stop(url: str, client, size: int = 512, steps: int = 30) -> dict[str, Any]:
    """Stop posted to /gradio_api/run/predict with no session while an API client's run goes
    (tests/ui/test_roles.py::test_a_run_an_api_client_owns_cannot_be_stopped_by_a_sessionless_or_other_caller)."""
    from gradio_client.utils import Status

    from tools.room_client import config, event_index

    stop = event_index(config(url), "stop", "click")
    job = client.submit("a red circle", size, size, "eager", steps, 7, 1.0, api_name="/generate")
    deadline = time.monotonic() + 120
    while job.status().code not in (Status.PROCESSING, Status.PROGRESS):  # the run has begun
        if time.monotonic() > deadline or job.done():
            raise RuntimeError(f"the API run never started: {job.exception() if job.done() else 'timed out'}")
        time.sleep(0.05)
    code, text = _status(urllib.request.Request(url + "gradio_api/run/predict",
                                                json.dumps({"fn_index": stop, "data": []}).encode(),
                                                {"Content-Type": "application/json"}))
    try:
        _image, record = job.result(timeout=600)
        outcome = f"finished all {record['steps']} steps" if record.get("steps") == steps else f"record {record}"
    except Exception as error:  # noqa: BLE001 - the figure reports what the client got
        outcome = f"ended: {' '.join(str(error).split())[:160]}"
    answer = json.loads(text) if text.startswith("{") else {"error": text}
    return {"stop_status": code, "stop_says": " ".join(str(answer.get("error") or answer)[:160].split()),
            "api_run": outcome}


def work_bound(client, max_work: float) -> dict[str, Any]:
    """A 2048x2048, 50-step request against ``--max-work`` (tests/backend/test_validation.py)."""
    started = time.monotonic()
    try:
        client.predict("a fox", 2048, 2048, "eager", 50, 1, 1.0, api_name="/generate")
        says = "NOT REFUSED"
    except Exception as error:  # noqa: BLE001 - the refusal is the figure
        says = " ".join(str(error).split())[:200]
    return {"asked": 2048 * 2048 * 50 / 1e6, "bound": max_work, "says": says,
            "seconds": round(time.monotonic() - started, 2)}


def greedy_viewer(url: str, runs: int = GREEDY_RUNS, size: int = 256, steps: int = 8) -> dict[str, Any]:
    """One viewer asks ``runs`` at once, then another viewer asks one: how many of the first ran,
    what the refused ones were told (the service's job board caps each owner), and after how many of
    the greedy viewer's runs the other's finished (tests/ui/test_fair_queue.py)."""
    from gradio_client import Client

    greedy, other = Client(url, verbose=False), Client(url, verbose=False)
    order: list[str] = []
    lock = threading.Lock()

    def note(label: str):
        def done(future) -> None:
            if future.exception() is None:  # a refused join is done too, having run nothing
                with lock:
                    order.append(label)
        return done

    jobs = []
    for i in range(runs):
        job = greedy.submit(f"a red circle {i}", size, size, "eager", steps, i, 1.0, api_name="/generate")
        job.add_done_callback(note("greedy"))
        jobs.append(job)
    deadline = time.monotonic() + 120
    while sum(job.status().code.name not in ("STARTING", "JOINING_QUEUE") or job.done()
              for job in jobs) < runs and time.monotonic() < deadline:
        time.sleep(0.05)  # every greedy join answered (joined or refused)
    mine = other.submit("a blue square", size, size, "eager", steps, 1, 1.0, api_name="/generate")
    mine.add_done_callback(note("other"))
    outcomes = []
    for job in jobs:
        try:
            job.result(timeout=600)
            outcomes.append("ran")
        except Exception as error:  # noqa: BLE001 - refusals are the figure
            outcomes.append(" ".join(str(error).split())[:160])
    mine.result(timeout=600)
    with lock:
        finished = list(order)
    refused = [o for o in outcomes if o != "ran"]
    return {"asked": runs, "ran": outcomes.count("ran"), "refused": len(refused),
            "refused_says": refused[0] if refused else None,
            "others_run_finished_after_greedy_runs": finished.index("other")}


def room_bounds(url: str, client, token: str, upload_dir: Path, max_work: float) -> dict[str, Any]:
    """Every probe against the running app; uploads and logins last (they spend this address's windows)."""
    return {"sessionless_stop": sessionless_stop(url, client), "work_bound": work_bound(client, max_work),
            "greedy_viewer": greedy_viewer(url), "uploads": uploads(url, upload_dir), "logins": logins(url, token)}


# Without an app: bundles.

def _app(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # each command's --cache-dir decides
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def tree_hash(root: Path) -> str:
    """One hash of every path under ``root`` with its kind and bytes (folders count too)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")) if root.exists() else []:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"dir")
    return digest.hexdigest()


def _import(bundle: Path, cache: Path, tmp: Path) -> dict[str, Any]:
    before = tree_hash(cache / "inductor")
    done = _app("cache", "import", str(bundle), "--cache-dir", str(cache), "--model", "embedded-random", cwd=tmp)
    return {"exit": done.returncode, "says": " ".join(done.stderr.strip().splitlines()[-1:])[:200],
            "tree_unchanged": tree_hash(cache / "inductor") == before}


def import_atomicity(tmp: Path) -> dict[str, Any]:
    """A real bundle (``cache export`` of a compiled 64x64 run), imported where one of its folders is
    a file already, and onto a 64 KiB tmpfs with one page free (root only)
    (tests/backend/test_bundles.py: ..._refused_at_its_last_file..., ..._disk_that_fills_mid_import...)."""
    bundle, made = tmp / "warm.bundle", tmp / "made"
    done = _app("cache", "export", str(bundle), "--modes", "compiled", "--sizes", "64x64", "--cache-dir", str(made),
                "--model", "embedded-random", cwd=tmp)
    if done.returncode:
        raise RuntimeError(f"cache export failed: {done.stderr[-400:]}")
    files = sorted(p.relative_to(made / "inductor") for p in (made / "inductor").rglob("*") if p.is_file())
    report: dict[str, Any] = {"bundle_files": len(files), "bundle_MB": round(bundle.stat().st_size / 1e6, 2)}
    blocked = tmp / "blocked"
    last = files[-1]  # a file where the bundle's last folder goes: the import meets it after the others
    (blocked / "inductor" / last.parts[0]).parent.mkdir(parents=True, exist_ok=True)
    (blocked / "inductor" / last.parts[0]).write_bytes(b"a file where the bundle wants a folder")
    report["last_file_in_the_way"] = _import(bundle, blocked, tmp)
    full = tmp / "full"
    (full / "inductor").mkdir(parents=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full / "inductor")],
                           capture_output=True, text=True)
    if mount.returncode:
        report["disk_full"] = {"not_measured": "cannot mount a tmpfs here (needs root)"}
        return report
    try:
        page = os.statvfs(full / "inductor").f_frsize
        free = os.statvfs(full / "inductor").f_bavail * page
        (full / "inductor" / "filler").write_bytes(b"\0" * (free - page))
        report["disk_full"] = _import(bundle, full, tmp)
    finally:
        subprocess.run(["umount", "-l", str(full / "inductor")], check=False)
    return report


def ustar_header(name: bytes, kind: bytes, size: int) -> bytes:
    """A ustar header by hand (what a hostile bundle's author writes), its checksum right."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = f"{size:011o}\0".encode() if size < 8**11 else bytes([0x80]) + size.to_bytes(11, "big")
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block)


def header_bomb(path: Path, kind: bytes, size: int) -> Path:
    """A small file whose one header announces ``size`` bytes: a GNU long name (L), a PAX record (x,
    which also carries them), a sparse member (S), or a member past the bound (0)."""
    record = b"15 comment=abc\n"  # a PAX record: its own length first
    body = record * (size // len(record)) + b"\n" * (size % len(record)) if kind == b"x" else b"a" * 1024
    path.write_bytes(ustar_header(b"files/inductor/x", kind, size) + body)
    return path


def peak_rss_of_show(path: Path, cache: Path) -> tuple[int, str]:
    """(peak RSS in KiB, output) of ``python app.py cache show PATH``, measured by a fresh parent of
    its own (a long-lived process's RUSAGE_CHILDREN keeps its largest child ever)."""
    command = [sys.executable, "app.py", "cache", "show", str(path), "--cache-dir", str(cache),
               "--model", "embedded-random"]
    probe = ("import json, resource, subprocess, sys; "
             f"done = subprocess.run({command!r}, capture_output=True, text=True); "
             "print(json.dumps([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.stdout + done.stderr]))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    used, said = json.loads(out.stdout)
    return used, said


HEADER_BOMBS = [("GNU long name", b"L", 1 << 30), ("PAX header", b"x", 2 << 20), ("sparse member", b"S", 1 << 30),
                ("member past the total", b"0", 1 << 40)]


def header_bombs(tmp: Path) -> list[dict[str, Any]]:
    """Each bomb previewed in a child process: its file size, what it announces, the child's peak
    memory above the same command on a one-byte junk file, and the refusal's words
    (tests/backend/test_bundles.py::test_a_header_bomb_is_refused_...)."""
    junk = tmp / "junk.bundle"
    junk.write_bytes(b"x")
    baseline, _ = peak_rss_of_show(junk, tmp / "cache")
    rows = []
    for label, kind, size in HEADER_BOMBS:
        bomb = header_bomb(tmp / f"bomb-{kind.decode()}.bundle", kind, size)
        used, said = peak_rss_of_show(bomb, tmp / "cache")
        rows.append({"bomb": label, "file_bytes": bomb.stat().st_size, "announces": size,
                     "extra_peak_MiB": round((used - baseline) / 1024, 1), "says": " ".join(said.split())[-160:]})
    return rows


def bundle_bounds(tmp: Path) -> dict[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    return {"import": import_atomicity(tmp), "header_bombs": header_bombs(tmp)}
