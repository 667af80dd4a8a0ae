"""The output folder's retention: the app keeps its newest ``--keep-outputs`` PNGs and removes older
ones it wrote itself: a name ``unique_output_path`` makes (``YYYYMMDD-HHMMSS-WxH-mode-seed-<16 hex>.png``)
*and* the app's own ``neuron_studio`` chunk inside (``pngmeta.is_own_png``). Anything else in the
folder is the user's and stays, a file named like the app's included."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from backend.images.pngmeta import NAME_RANDOM_BITS, is_own_png, save_png, unique_output_path

APP_PNG = re.compile(r"^\d{8}-\d{6}-\d{1,5}x\d{1,5}-[a-z]+-\d{1,20}-[0-9a-f]{%d}\.png$" % (NAME_RANDOM_BITS // 4))


def prune(folder: str | Path, keep: int) -> list[Path]:
    """Remove the app's own PNGs beyond the newest ``keep``; returns what was removed."""
    folder = Path(folder)
    try:
        mine = [p for p in folder.iterdir() if APP_PNG.match(p.name) and is_own_png(p)]
    except OSError:
        return []
    mine.sort(key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
    removed = []
    for path in mine[max(0, keep):]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def is_app_output(path, folder: str | Path) -> bool:
    """Whether ``path`` is a PNG this app wrote in ``folder`` (its own name and chunk, a plain file there)."""
    target = Path(os.path.realpath(str(path))) if path else None
    return bool(target and target.parent == Path(os.path.realpath(str(folder))) and APP_PNG.match(target.name)
                and not Path(str(path)).is_symlink() and is_own_png(target))


def save_outputs(folder: str | Path, keep: int, image, result, name=None) -> str:
    """Write a run's PNGs (with its parameters) to ``folder``: its one image, or every image of a
    batch; sets ``result.paths`` and ``result.path`` (the first) and returns it. The folder keeps
    the app's newest ``keep`` images, and always the whole of this batch. ``name(result, index)``:
    the path of each image instead (the CLI's ``--out``; nothing is pruned there)."""
    images = result.images if len(result.images) > 1 else [image]
    result.paths = [str(save_png(each, result, name(result, index) if name else unique_output_path(folder, result))
                        .resolve()) for index, each in enumerate(images)]
    result.path = result.paths[0]
    if name is None:
        prune(folder, max(keep, len(result.paths)))
    return result.path
