"""``python app.py cache export|import|show BUNDLE``: warm-start bundles from the command line.

    python app.py cache export warm.bundle --mode compiled --sizes 256x256,128x128 [--modes compiled,regional]
    python app.py cache show warm.bundle [--json]      # the manifest, and whether it applies here
    python app.py cache import warm.bundle             # put its compile entries in this install's caches
    python app.py --cache-from warm.bundle --mode compiled --warm-only   # serve its shapes warm

``export`` loads the model, runs each (mode, size) that is not warm yet and writes the bundle;
``import`` and ``show`` load no model (they hash its files). Importing a bundle runs its author's
code (NEFF programs, inductor's pickles and shared libraries): use only bundles you trust. Expected
failures print one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from backend.errors import StudioError
from backend.settings import IN_PROCESS_MODES, Settings
from backend.shapes import Shape, parse_shape_list

EXIT_BAD_INPUT = 2
TRUST_WARNING = ("importing a bundle runs its author's code (device programs, pickled cache entries, shared "
                 "libraries): use only bundles you trust")


def _fail(message: str) -> int:
    print(f"app.py: error: {' '.join(str(message).split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _here(settings: Settings):
    """This install's device and manifest fields, without loading the pipeline."""
    from backend.caches import bundles
    from backend.hardware.device import Device, resolve_device
    from backend.models.source import resolve_model

    device = Device(resolve_device(settings), settings.max_compiled_shapes, settings.neuron_instance_cores)
    path, label = resolve_model(settings.model, settings.cache_dir)
    return device, bundles.describe_install(device, settings, path, label)


def export(settings: Settings, bundle: str, modes: str | None, sizes: str | None) -> int:
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


def show(settings: Settings, bundle: str, as_json: bool = False) -> int:
    from backend.caches import bundles

    try:
        manifest = bundles.read_manifest(bundle)
        _device, here = _here(settings)
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


def import_(settings: Settings, bundle: str) -> int:
    from backend.caches import bundles

    print(f"app.py: {TRUST_WARNING}", file=sys.stderr)
    try:
        device, here = _here(settings)
        result = bundles.import_bundle(Path(bundle), device, here)
    except StudioError as exc:
        return _fail(str(exc))
    manifest = result["manifest"]
    print(f"imported {bundle}: {result['written']} files written, {result['already_there']} already there; "
          f"warms {', '.join(e['mode'] + ' ' + e['shape'] for e in manifest.entries)}")
    return 0
