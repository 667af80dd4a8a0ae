"""The headless commands behind ``app.py``: generate, doctor, cost and cache (docs/bundles.md).

Expected failures (bad input, missing model or device, refused shapes) print one line on stderr and
exit 2; a generation that fails at run time exits 1. No tracebacks for either.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from backend.errors import GenerationCancelled, GenerationFailed, InvalidRequest, StudioError
from backend.settings import IN_PROCESS_MODES, Settings
from backend.shapes import Shape, parse_shape_list

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
COST_PROMPT = "a red circle in the centre, on a white background"
TRUST_WARNING = ("importing a bundle runs its author's code (device programs, pickled cache entries, shared "
                 "libraries): use only bundles you trust")


def _fail(message: str, code: int = EXIT_BAD_INPUT, command: str = "app.py") -> int:
    print(f"{command}: error: {' '.join(message.split())}", file=sys.stderr)  # one line
    return code


# The flag (or argument) of ``generate`` behind each request field, so an error names what to change.
FIELD_FLAGS = {"prompt": "prompt", "size": "--size", "width": "--size", "height": "--size", "steps": "--steps",
               "guidance": "--guidance", "seed": "--seed", "mode": "--mode", "images": "--image", "count": "--count",
               "work": "--max-work"}


def _refusal(exc: StudioError) -> str:
    if isinstance(exc, InvalidRequest):
        return f"{FIELD_FLAGS.get(exc.field, exc.field)}: {exc.message}"
    return str(exc)


def _unwritable(out: str | None, default_dir: Path) -> str | None:
    """Why PNGs cannot be written where ``--out`` (or the output dir) points, or None. Leaves
    nothing behind (a missing folder is not created here)."""
    target = Path(out) if out else default_dir
    flag = "--out" if out else "--output-dir"
    png = target.suffix.lower() == ".png"
    if png and target.is_dir():
        return f"{flag}: {target} is a folder, not a .png file name"
    folder = target.parent if png else target
    probe_in = folder
    while not probe_in.exists() and probe_in.parent != probe_in:  # the rest is created on save
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        return f"{flag}: {probe_in} is not a folder"
    try:
        if probe_in == folder:  # a file can be created in it
            fd, probe = tempfile.mkstemp(prefix=".write-test-", suffix=".png", dir=folder)
            os.close(fd)
            os.unlink(probe)
        else:  # the missing folders can be created under it
            os.rmdir(tempfile.mkdtemp(prefix=".write-test-", dir=probe_in))
    except OSError as exc:
        return f"{flag}: cannot write PNGs in {folder}: {exc.strerror or exc}"
    return None


def _out_paths(out: str | None, default_dir: Path, n: int):
    """A function naming each image's file: a folder gets unique names, a .png gets suffixes."""
    from backend.images.pngmeta import unique_output_path

    target = Path(out) if out else default_dir
    if target.suffix.lower() != ".png":
        return lambda result, index=0: unique_output_path(target, result)
    if n == 1:
        return lambda result, index=0: target

    def named(result, index=0) -> Path:
        batch = f"-{index + 1}" if result.count > 1 else ""
        return target.with_name(f"{target.stem}-{result.width}x{result.height}{batch}{target.suffix}")

    return named


class _TerminalProgress:
    """A progress line on stderr, rewritten in place: while a shape compiles, the seconds so far are
    redrawn every second (a cold shape on Neuron compiles for minutes without a step)."""

    def __init__(self, request):
        self.request, self.phase, self.since = request, "starting", None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(2)
        print("\r\033[K", end="", file=sys.stderr, flush=True)

    def _tick(self) -> None:
        while not self._done.wait(1.0):
            if self.since is not None:
                self._draw()

    def __call__(self, event) -> None:
        if event.phase == "compiling":
            self.since = self.since or time.monotonic()
        elif event.phase != "loading":
            self.since = None
        self.phase = (f"denoising step {event.step}/{event.steps}" if event.phase == "denoising"
                      else f"loading the model ({event.step} s)" if event.phase == "loading" else event.phase)
        self._draw()

    def _draw(self) -> None:
        what = f"compiling ({time.monotonic() - self.since:.0f} s)" if self.since is not None else self.phase
        print(f"\r\033[K{self.request.width}x{self.request.height} {self.request.mode}: {what}", end="",
              file=sys.stderr, flush=True)


def generate(settings: Settings, args: argparse.Namespace) -> int:
    from backend.serving.manager import Manager

    sizes = args.size
    if not sizes:
        return _fail("generate needs at least one --size WIDTHxHEIGHT, e.g. --size 512x512")
    manager = Manager(settings)
    try:
        # Validate everything before loading anything: a typo should not cost a model load.
        edit = {"images": list(args.image or []), "count": args.count}
        first, _cost = manager.plan(dict(prompt=args.prompt, height=sizes[0].height, width=sizes[0].width,
                                         seed=args.seed, **edit))
        edit["images"] = first.references  # read and fitted once
        # One seed for the whole batch (a random one if none was given), reported per image.
        requests = [first] + [manager.plan(dict(prompt=args.prompt, height=s.height, width=s.width, seed=first.seed,
                                                **edit))[0] for s in sizes[1:]]
        unwritable = None if args.no_save else _unwritable(args.out, settings.output_dir)
        if unwritable:
            manager.close()
            return _fail(unwritable)
        manager.start()  # the service holds each prompt to the text encoder's limit when it runs (Manager.generate)
    except StudioError as exc:
        manager.close()
        return _fail(_refusal(exc))
    name = _out_paths(args.out, settings.output_dir, sum(r.count for r in requests))
    try:
        for request in requests:
            try:
                with _TerminalProgress(request) if sys.stderr.isatty() else contextlib.nullcontext() as progress:
                    _image, result = manager.run(request, progress=progress, save=False if args.no_save else name)
            except (GenerationFailed, GenerationCancelled) as exc:
                return _fail(str(exc), EXIT_FAILED)
            except StudioError as exc:
                return _fail(_refusal(exc))
            except OSError as exc:
                flag = "--out" if args.out else "--output-dir"
                return _fail(f"{flag}: cannot write {exc.filename or name(request)}: {exc.strerror or exc}",
                             EXIT_FAILED)
            if args.json:
                print(json.dumps(result.to_json(), ensure_ascii=False), flush=True)
            else:
                how = (f"compiled ({result.compiles} graph(s), {result.compile_seconds:.2f} s"
                       + (f"; {result.neff_compiles} NEFF(s)" if result.neff_compiles else "") + ")"
                       if result.compiled else "no compile")
                saved = ", ".join(result.paths)
                print(f"{result.signature or f'{result.width}x{result.height}'} {result.mode}: {result.seconds:.2f} s, "
                      f"{how}, seed {result.seed}" + (f" -> {saved}" if saved else ""), flush=True)
                for number, reference in enumerate(result.references, 1):
                    print(f"  reference {number}: {reference['source']} -> {reference['fitted']} "
                          f"({reference['fit']}), sha256 {reference['sha256'][:12]}…", flush=True)
                if result.caption:  # the model read the prompt as a caption of its grammar
                    print(f"  drawn as: {result.caption}", flush=True)
                if result.fallback_ops:
                    print(f"  {len(result.fallback_ops)} op(s) ran on the host (CPU fallback): "
                          f"{', '.join(result.fallback_ops)}", flush=True)
    finally:
        manager.close()  # stops a tensor-parallel group too
    return 0


def doctor_report(settings: Settings) -> dict[str, Any]:
    from backend.caches.bundles import installed_version
    from backend.hardware import env as device_env
    from backend.hardware.device import Device, DeviceUnavailable, compiler_on_path, neuron_installed, resolve_device
    from backend.models.source import resolve_model, transformer_heads

    report: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {d: installed_version(d) for d in
                     ("torch", "torch-neuronx", "diffusers", "transformers", "accelerate", "gradio")},
        "settings": settings.to_json(),
    }
    neuron: dict[str, Any] = {"installed": neuron_installed(), "importable": False, "cores": 0, "error": None}
    try:
        info = resolve_device(settings)
        report["device"] = vars(info)
        neuron["importable"] = info.neuron_installed and settings.device in ("auto", "neuron")
        neuron["cores"] = info.neuron_cores
    except DeviceUnavailable as exc:
        report["device"] = {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - doctor reports import failures instead of dying on them
        report["device"] = {"error": f"{type(exc).__name__}: {exc}"}
        neuron["error"] = f"{type(exc).__name__}: {exc}"
    report["torch_neuronx"] = neuron
    prepared = device_env.prepared_environment()
    report["caches"] = {var: {"dir": prepared[var], "bytes": device_env.dir_size(prepared[var])}
                        for var in device_env.CACHE_VARS if var in prepared}
    if report["device"].get("kind") == "neuron":
        # The same plan the app would run with: the cores app.py claimed before torch loaded.
        device = Device(info, instance_cores=settings.neuron_instance_cores)
        heads = None
        with contextlib.suppress(StudioError, OSError, KeyError, ValueError):
            heads = transformer_heads(resolve_model(settings.model, settings.cache_dir)[0])
        wanted = {"tensor-parallel": (settings.tp_degree, heads)}
        if settings.replicas:
            wanted["replicas"] = (settings.replicas, None)
        neuron["core_plan"] = device.core_plan.describe(wanted=wanted)
        neuron["fallback_execution_disabled"] = os.environ.get(device_env.FALLBACK_VAR)
        # TorchNeuron runs neuronx-cc by name from PATH, for every compile (eager mode's too).
        neuron["neuronx_cc"] = compiler_on_path()
        neuron["neff_key"] = device.neff_key_fields()
        neuron["lock_timeout"] = os.environ.get(device_env.LOCK_TIMEOUT_VAR)
        neuron["collective_timeout"] = settings.collective_seconds("neuron")
    try:
        path, label = resolve_model(settings.model, settings.cache_dir)
        report["model"] = {"spec": settings.model, "path": path, "label": label}
    except StudioError as exc:
        report["model"] = {"spec": settings.model, "error": str(exc)}
    return report


def doctor(settings: Settings, as_json: bool = False) -> int:
    report = doctor_report(settings)
    if as_json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    print(f"python        {report['python']} on {report['platform']}")
    for dist, version in report["versions"].items():
        print(f"{dist:<13} {version or 'not installed'}")
    dev = report["device"]
    if "error" in dev:
        print(f"device        ERROR: {dev['error']}")
    else:
        print(f"device        {dev['kind']} ({dev['reason']}); dtype {dev['dtype']}, "
              f"compile backend {dev['compile_backend']}, process group {dev['process_group_backend']}")
    nx = report["torch_neuronx"]
    print(f"TorchNeuron   installed: {nx['installed']}, importable: {nx['importable']}, "
          f"NeuronCores visible: {nx['cores']}" + (f", error: {nx['error']}" if nx["error"] else ""))
    if nx.get("core_plan"):
        from backend.hardware.core_plan import plan_text

        print(f"NeuronCores   {plan_text(nx['core_plan'])}")
        fallback = nx["fallback_execution_disabled"]
        print(f"fallback      TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION={fallback} ("
              + ("a failed torch.compile graph fails the request" if fallback == "1"
                 else "a failed torch.compile graph silently runs eagerly")
              + "); eager ops TorchNeuron cannot run go to the CPU silently: each run's record lists them")
        cc = nx["neuronx_cc"]
        print(f"neuronx-cc    "
              f"{cc['path'] or 'NOT ON PATH: every compile will fail (activate the venv or add its bin/ to PATH)'}"
              + (f" ({cc['version']})" if cc.get("version") else ""))
        key = nx["neff_key"]
        print(f"NEFF key      target {key['neuron_target']}, LNC {key['lnc']}, opt level "
              f"{key['neuron_opt_level'] or 'default (-O1 eager, -O2 compiled)'}, NEURON_CC_FLAGS "
              f"{key['neuron_cc_flags'] or 'none'}")
        print(f"timeouts      NEFF lock {nx['lock_timeout']} s, collectives {nx['collective_timeout']:g} s "
              f"(at least --compile-timeout {settings.compile_timeout:g} s)")
    for var, cache in report["caches"].items():
        print(f"cache         {var}={cache['dir']} ({cache['bytes'] / 1e6:.1f} MB)")
    model = report["model"]
    print(f"model         {model.get('label') or model['spec']}: {model.get('path') or model.get('error')}")
    return 0


def cost(settings: Settings, sizes: str | None, runs: int, reference, as_json: bool) -> int:
    """``python app.py cost``: the cost receipt measured here (``reference``: a
    ``backend.serving.cost.Reference`` to compare with, or None)."""
    from backend.serving.cost import format_receipt
    from backend.serving.manager import Manager

    manager = Manager(settings)
    try:
        shapes = parse_shape_list(sizes) if sizes else (settings.prewarm or [manager.card.start_shape])
        requests = [manager.plan(dict(prompt=COST_PROMPT, height=s.height, width=s.width, seed=1, count=s.count))[0]
                    for s in shapes]
    except (ValueError, StudioError) as exc:
        manager.close()
        return _fail(str(exc), command="app.py cost")
    try:
        manager.start()
        for request in requests:
            manager.run(request, save=False)  # compiles (or not) and warms
            for _ in range(runs):
                manager.run(request, save=False)
            print(f"cost: {request.shape} in {request.mode} mode: 1 warm-up + {runs} runs", file=sys.stderr)
        data = manager.receipt(reference=reference)
    except StudioError as exc:
        return _fail(str(exc), EXIT_FAILED, "app.py cost")
    finally:
        manager.close()
    print(json.dumps(data) if as_json else format_receipt(data))
    return 0


def _install(settings: Settings):
    """This install's device and bundle manifest fields, without loading the pipeline."""
    from backend.caches import bundles
    from backend.hardware.device import Device, resolve_device
    from backend.models.source import resolve_model

    device = Device(resolve_device(settings), settings.max_compiled_shapes, settings.neuron_instance_cores)
    path, label = resolve_model(settings.model, settings.cache_dir)
    return device, bundles.describe_install(device, settings, path, label)


def cache_export(settings: Settings, bundle: str, modes: str | None, sizes: str | None) -> int:
    from backend.serving.manager import Manager

    try:
        wanted_modes = [m.strip() for m in (modes or settings.mode).split(",") if m.strip()]
        for mode in wanted_modes:
            if mode not in IN_PROCESS_MODES:
                return _fail(f"--modes: {mode!r} cannot be bundled here; choose from {', '.join(IN_PROCESS_MODES)}")
        shapes: list[Shape] = parse_shape_list(sizes) if sizes else list(settings.prewarm)
    except ValueError as exc:
        return _fail(f"--sizes: {exc}")
    if not shapes:
        return _fail("--sizes: name the shapes to bundle, e.g. --sizes 256x256,128x128")
    manager = Manager(settings)
    try:
        manager.start()
        manifest = manager.export_bundle(bundle, [(m, s) for m in wanted_modes for s in shapes])
    except StudioError as exc:
        return _fail(str(exc))
    finally:
        manager.close(wait=5)
    total = sum(f["bytes"] for f in manifest.files)
    print(f"wrote {bundle}: {len(manifest.entries)} (mode, shape) entries, {len(manifest.files)} files, "
          f"{total / 1e6:.1f} MB; model {manifest.model}, {manifest.device}/{manifest.compile_backend}")
    return 0


def cache_show(settings: Settings, bundle: str, as_json: bool = False) -> int:
    from backend.caches import bundles

    try:
        manifest = bundles.read_manifest(bundle)
        _device, here = _install(settings)
    except StudioError as exc:
        return _fail(str(exc))
    mismatch = bundles.check(manifest, here)
    summary: dict[str, Any] = {**{k: v for k, v in manifest.to_json().items() if k != "files"},
                               "file_count": len(manifest.files),
                               "bytes": sum(f["bytes"] for f in manifest.files),
                               "applies_here": mismatch is None, "mismatch": mismatch}
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    for key in ("created", "app_version", "torch", "diffusers", "torch_neuronx", "neuronx_cc", "device",
                "neuron_target", "lnc", "neuron_opt_level", "neuron_cc_flags",
                "dtype", "compile_backend", "model", "model_hash", "tp_degree", "file_count", "bytes"):
        print(f"{key:16} {summary[key]}")
    for entry in manifest.entries:
        seconds = entry.get("compile_seconds")
        print(f"entry            {entry['mode']} {entry['shape']}"
              + (f" (compiled in {seconds:.1f} s where it was made)" if isinstance(seconds, (int, float)) else ""))
    print("applies here     " + ("yes" if mismatch is None else f"no: {mismatch}"))
    print(f"note             {TRUST_WARNING}")
    return 0


def cache_import(settings: Settings, bundle: str) -> int:
    from backend.caches import bundles

    print(f"app.py: {TRUST_WARNING}", file=sys.stderr)
    try:
        device, here = _install(settings)
        result = bundles.import_bundle(Path(bundle), device, here)
    except StudioError as exc:
        return _fail(str(exc))
    manifest = result["manifest"]
    print(f"imported {bundle}: {result['written']} files written, {result['already_there']} already there; "
          f"warms {', '.join(e['mode'] + ' ' + e['shape'] for e in manifest.entries)}")
    return 0
