"""The Performance tab's views: steady latency against megapixels, and compile seconds per shape and
mode, each plot titled in the page's language with one colour per mode."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

from ui.i18n import DEFAULT, text


def _typed(**columns: type) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=kind) for name, kind in columns.items()})


def latency_frame(records: list[Any]) -> pd.DataFrame:
    """Steady-state seconds per image (median over runs) against megapixels, per mode."""
    rows = [{"mode": r.mode, "megapixels": r.width * r.height / 1e6, "shape": f"{r.width}x{r.height}",
             "seconds": r.seconds} for r in records if r.steady]
    if not rows:  # typed columns: an untyped empty "mode" reads as a number, and the legend said "NaN"
        return _typed(mode=str, megapixels=float, shape=str, seconds=float)
    frame = pd.DataFrame(rows).groupby(["mode", "shape", "megapixels"], as_index=False)["seconds"].median()
    return frame.sort_values(["mode", "megapixels"]).reset_index(drop=True)


def compile_frame(shapes: list[dict[str, Any]]) -> pd.DataFrame:
    """Compile seconds per (shape, mode) from ``Status.shapes``; shapes that reused a graph are left out."""
    rows = [{"shape · mode": f"{r['shape']} · {r['mode']}", "mode": r["mode"],
             "compile seconds": r["compile_seconds"]}
            for r in shapes if r["compiles"] and r["compile_seconds"]]
    if not rows:  # typed, as latency_frame's: the plot keeps the axis types of its first value (below)
        return _typed(**{"shape · mode": str, "mode": str, "compile seconds": float})
    return pd.DataFrame(rows)


# One colour per mode in both Performance plots (the plots' own palettes assign colours by order).
MODE_COLORS = {"eager": "#4c78a8", "compiled": "#f58518", "regional": "#54a24b", "tp": "#e45756"}


def plotted(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with an empty row (not drawn) for each mode it lacks. Gradio's plot builds its chart
    (axis types, a colour per mode in its value) only when a setting changes; a new value only replaces
    the points, so a mode missing then had no colour and was never drawn. Hence every value holds every
    mode, and the settings change seldom: titles once, the axes' ends in steps (``axis_end``)."""
    missing = [mode for mode in MODE_COLORS if mode not in set(frame["mode"])]

    def blank(column: str) -> list:
        return missing if column == "mode" else [float("nan") if frame[column].dtype.kind == "f" else ""] * len(missing)

    rows = pd.DataFrame({column: blank(column) for column in frame.columns}).astype(frame.dtypes.to_dict())
    return pd.concat([frame, rows], ignore_index=True)


def axis_end(largest: float) -> float:
    """The axis's end a little past ``largest``, in steps of 1, 2, 2.5 and 5 times a power of ten: a
    point is never on the edge, and the end (a setting of the plot) changes seldom."""
    wanted = max(largest, 1e-9) * 1.1
    power = 10.0 ** math.floor(math.log10(wanted))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= wanted * (1 - 1e-9))


def latency_limits(latency: pd.DataFrame, presets: Iterable[Any]) -> dict[str, list[float]]:
    """The latency plot's axes from zero: x past the largest preset (or run), y past the slowest run
    (1 s before any)."""
    widest = max([s.width * s.height / 1e6 for _name, s in presets] + list(latency["megapixels"]), default=1.0)
    return {"x_lim": [0, axis_end(widest)], "y_lim": [0, axis_end(latency["seconds"].max()) if len(latency) else 1.0]}


def plot_labels(lang: str = DEFAULT) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plots' words in ``lang``."""
    mode = {"color_title": text(lang, "axis_mode")}
    return ({"title": text(lang, "latency_title"), "x_title": text(lang, "axis_megapixels"),
             "y_title": text(lang, "axis_seconds"), **mode},
            {"title": text(lang, "compile_title"), "x_title": text(lang, "axis_shape_mode"),
             "y_title": text(lang, "axis_compile_seconds"), **mode})


def plots_note(latency: pd.DataFrame, compiles: pd.DataFrame, lang: str = DEFAULT) -> str:
    """What will fill a plot that is still empty (nothing once both hold data)."""
    return " ".join(text(lang, key) for key, frame in (("latency_empty", latency), ("compile_empty", compiles))
                    if frame.empty)
