"""Bad input, answered clearly: argument cases through the public API (``run_api_cases``: a
refusal must name the problem and leave the backend unchanged) and the CLI (``run_cli_cases``: exit
status 2 and one line), and hostile PNGs through the page's "load parameters" event
(``run_png_cases``: parsed about as fast as a normal one, with other calls answered meanwhile).
Figures of ``python -m bench.hardening``; tests/test_hardening.py holds each to its promise."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from pathlib import Path
from typing import Any

OK = "ok"  # a case that must succeed

# (name, (prompt, width, height, mode, steps, seed, guidance), words the refusal must contain | OK).
# NaN and infinity cannot travel in JSON at all: the client library refuses to send them (the CLI
# cases show the backend's own answer to them).
API_CASES: list[tuple[str, tuple, str]] = [
    ("size 0x0", ("a fox", 0, 0, "eager", 2, 1, 1.0), "nearest valid size is 64x64"),
    ("negative size", ("a fox", -64, 64, "eager", 2, 1, 1.0), "nearest valid size"),
    ("not a multiple of 16", ("a fox", 1000, 1024, "eager", 2, 1, 1.0), "not a multiple of 16"),
    ("below the minimum", ("a fox", 32, 64, "eager", 2, 1, 1.0), "outside 64..2048; nearest valid size is 64x64"),
    ("above the maximum", ("a fox", 4096, 4096, "eager", 2, 1, 1.0), "outside 64..2048"),
    ("non-numeric size", ("a fox", "wide", 64, "eager", 2, 1, 1.0), "width: must be a whole number of pixels"),
    ("huge aspect ratio", ("a fox", 2048, 64, "eager", 2, 1, 1.0), "aspect ratio 32.00:1"),
    ("zero steps", ("a fox", 64, 64, "eager", 0, 1, 1.0), "steps: must be between 1 and 50"),
    ("negative steps", ("a fox", 64, 64, "eager", -3, 1, 1.0), "steps: must be between 1 and 50"),
    ("too many steps", ("a fox", 64, 64, "eager", 500, 1, 1.0), "steps: must be between 1 and 50"),
    ("non-integer steps", ("a fox", 64, 64, "eager", 2.5, 1, 1.0), "steps: must be a whole number"),
    ("negative seed", ("a fox", 64, 64, "eager", 2, -5, 1.0), "seed: must be between"),
    ("seed above 2^63", ("a fox", 64, 64, "eager", 2, 2**63, 1.0), "seed: must be between"),
    ("largest seed (2^63-1) is exact", ("a fox", 64, 64, "eager", 1, 2**63 - 1, 1.0), OK),
    ("text seed", ("a fox", 64, 64, "eager", 2, "lucky", 1.0), "seed: must be a whole number"),
    ("NaN guidance", ("a fox", 64, 64, "eager", 2, 1, float("nan")), "not JSON compliant"),
    ("infinite guidance", ("a fox", 64, 64, "eager", 2, 1, float("inf")), "not JSON compliant"),
    ("negative guidance", ("a fox", 64, 64, "eager", 2, 1, -1.0), "guidance: must be between 0 and 20"),
    ("empty prompt", ("", 64, 64, "eager", 2, 1, 1.0), "prompt: is empty"),
    ("whitespace prompt", ("  \n\t ", 64, 64, "eager", 2, 1, 1.0), "prompt: is empty"),
    ("100 kB prompt", ("x" * 100_000, 64, 64, "eager", 2, 1, 1.0), "characters; the limit is 2000"),
    ("control characters", ("a\x00fox\x1b[31m", 64, 64, "eager", 2, 1, 1.0), "control character U+0000"),
    ("prompt past the tokenizer", ("fox " * 400, 64, 64, "eager", 2, 1, 1.0), "tokens with the chat template"),
    ("unknown mode", ("a fox", 64, 64, "turbo", 2, 1, 1.0), "mode: must be one of"),
    ("emoji and right-to-left text", ("a fox 🦊 in snow ثعلب في الثلج", 64, 64, "eager", 2, 1, 1.0), OK),
]

# (name, argv, words the one-line error must contain)
CLI_CASES: list[tuple[str, list[str], str]] = [
    ("no size", ["generate", "fox"], "at least one --size"),
    ("malformed size", ["generate", "fox", "--size", "64by64"], "expected WIDTHxHEIGHT"),
    ("not a multiple of 16", ["generate", "fox", "--size", "100x64"], "nearest valid size is 96x64"),
    ("huge aspect ratio", ["generate", "fox", "--size", "2048x64"], "aspect ratio"),
    ("zero steps", ["generate", "fox", "--size", "64x64", "--steps", "0"], "--steps"),
    ("text seed", ["generate", "fox", "--size", "64x64", "--seed", "lucky"], "seed: must be a whole number"),
    ("seed above 2^63", ["generate", "fox", "--size", "64x64", "--seed", str(2**63)], "seed: must be between"),
    ("NaN guidance", ["generate", "fox", "--size", "64x64", "--guidance", "nan"], "guidance"),
    ("empty prompt", ["generate", "  ", "--size", "64x64"], "prompt: is empty"),
    ("prompt past the tokenizer", ["generate", "fox " * 400, "--size", "64x64"], "tokens with the chat template"),
    ("unknown mode", ["generate", "fox", "--size", "64x64", "--mode", "turbo"], "--mode: expected one of"),
    ("TP degree not dividing the heads", ["generate", "fox", "--size", "64x64", "--mode", "tp", "--tp-degree", "3"],
     "does not divide the model's 4 attention heads"),
    ("missing model", ["generate", "fox", "--size", "64x64", "--model", "/no/such/model"], "no such folder"),
]


def run_api_cases(client, status_fn) -> list[dict[str, Any]]:
    """Each case through gradio_client; a refusal must be clear and leave the backend unchanged."""
    rows = []
    for name, args, expect in API_CASES:
        before = status_fn()
        try:
            _image, record = client.predict(*args, api_name="/generate")
            outcome, message = "answered", f"seed {record['seed']}"
        except Exception as exc:  # noqa: BLE001 - the message is what is judged
            outcome, message = "refused", str(exc)
        after = status_fn()
        unchanged = (before["shapes"] == after["shapes"] and before["generations"] == after["generations"])
        clear = (outcome == "answered") if expect == OK else (outcome == "refused" and expect in message and unchanged)
        rows.append({"case": name, "clear": clear, "outcome": outcome, "message": message[:200],
                     "state_unchanged": unchanged if expect != OK else None})
    return rows


def run_cli_cases(output_dir: Path) -> list[dict[str, Any]]:
    """Each case through app.main in this process: exit status 2 and one line on stderr."""
    import app

    rows = []
    for name, argv, expect in CLI_CASES:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = app.main(argv + ["--output-dir", str(output_dir)])
            except SystemExit as exc:
                code = exc.code
        lines = err.getvalue().strip().splitlines()
        clear = code == 2 and len(lines) == 1 and expect in lines[0] and "Traceback" not in err.getvalue()
        rows.append({"case": name, "clear": clear, "exit": code, "message": (lines or [""])[-1][:200]})
    return rows


def png_with_text(path: Path, text: str, key: str = "parameters", compressed: bool = False) -> Path:
    """A 1x1 PNG whose ``key`` text chunk holds ``text`` (the probe's 201-byte file and its variants)."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text(key, text, zip=compressed)
    Image.new("RGB", (1, 1)).save(path, pnginfo=info)
    return path


# The probe's freezing PNG and variants: (name, text of the parameters chunk, zTXt?).
PNG_CASES = [
    ("Steps: 1, + 60,000 letters", "Steps: 1, " + "a" * 60_000, False),
    ("60,000 letters, compressed", "Steps: 1, " + "a" * 60_000, True),
    ("20,000 'a: ' pairs", "Steps: 1, " + "a: " * 20_000, False),
    ("30,000 commas", "Steps: 1" + "," * 30_000, False),
    ("64 kB prompt line", "x" * 65_000 + "\nSteps: 4, Seed: 1", False),
]
NORMAL_INFOTEXT = ("a red circle on the left, on a sky gradient\nSteps: 4, Sampler: FlowMatchEuler, CFG scale: 1.0, "
                   "Seed: 42, Size: 256x256, Model: embedded:scenes-flux2-klein, Mode: compiled, Device: cpu")


def run_png_cases(url: str, tmp: Path) -> list[dict[str, Any]]:
    """Each hostile PNG through the page's "load parameters" event, with /status called meanwhile:
    the parse's time against a normal PNG's (measured side by side), and the slowest /status answer."""
    from gradio_client import Client

    from tools.room_client import config, event_index, post_event, upload

    index = event_index(config(url), "png-in", "upload")
    client = Client(url, verbose=False)

    def through_page(path: Path) -> tuple[float, dict]:
        data = upload(url, str(path))
        began = time.perf_counter()
        answer = post_event(url, index, [data])
        return time.perf_counter() - began, answer

    normal = png_with_text(tmp / "normal.png", NORMAL_INFOTEXT)
    rows = []
    for name, text, compressed in PNG_CASES:
        path = png_with_text(tmp / "hostile.png", text, compressed=compressed)
        status_seconds: list[float] = []
        stop = threading.Event()

        def poll(stop=stop, status_seconds=status_seconds) -> None:
            while not stop.is_set():
                began = time.perf_counter()
                client.predict(api_name="/status")
                status_seconds.append(time.perf_counter() - began)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            normal_seconds = min(through_page(normal)[0] for _ in range(3))
            hostile_seconds, answer = min((through_page(path) for _ in range(3)), key=lambda r: r[0])
        finally:
            stop.set()
            poller.join(60)
        rows.append({"case": name, "bytes": path.stat().st_size, "answered": "output" in answer,
                     "normal_s": round(normal_seconds, 4),
                     "ratio_to_normal": round(hostile_seconds / normal_seconds, 2),
                     "slowest_status_s": round(max(status_seconds or [0.0]), 3)})
    return rows

