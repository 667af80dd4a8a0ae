"""The Performance tab's views: steady latency against megapixels, and compile seconds per shape and
mode, each plot titled in the page's language with one colour per mode."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ui.i18n import DEFAULT, text


def latency_frame(records: list[Any]) -> pd.DataFrame:
    """Steady-state seconds per image (median over runs) against megapixels, per mode."""
    rows = [{"mode": r.mode, "megapixels": r.width * r.height / 1e6, "shape": f"{r.width}x{r.height}",
             "seconds": r.seconds} for r in records if r.steady]
    if not rows:  # typed columns: an untyped empty "mode" reads as a number, and the legend said "NaN"
        return pd.DataFrame({"mode": pd.Series(dtype=str), "megapixels": pd.Series(dtype=float),
                             "shape": pd.Series(dtype=str), "seconds": pd.Series(dtype=float)})
    frame = pd.DataFrame(rows).groupby(["mode", "shape", "megapixels"], as_index=False)["seconds"].median()
    return frame.sort_values(["mode", "megapixels"]).reset_index(drop=True)


def compile_frame(shapes: list[dict[str, Any]]) -> pd.DataFrame:
    """Compile seconds per (shape, mode) from ``Status.shapes``; shapes that reused a graph are left out."""
    rows = [{"shape · mode": f"{r['shape']} · {r['mode']}", "mode": r["mode"],
             "compile seconds": r["compile_seconds"]}
            for r in shapes if r["compiles"] and r["compile_seconds"]]
    return pd.DataFrame(rows, columns=["shape · mode", "mode", "compile seconds"])


# One colour per mode in both Performance plots (the plots' own palettes assign colours by order).
MODE_COLORS = {"eager": "#4c78a8", "compiled": "#f58518", "regional": "#54a24b", "tp": "#e45756"}


def plot_axes(lang: str = DEFAULT, latency: pd.DataFrame | None = None,
              compile_empty: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plots' words in ``lang``; the latency plot's axes from zero to a little past its data (a
    range fitted to the points alone spread three sizes of 0.06 MP over the whole width)."""
    empty = latency is None or latency.empty
    colors = {"color_title": text(lang, "axis_mode"), "color_map": MODE_COLORS}
    latency_axes = {"title": text(lang, "latency_empty" if empty else "latency_title"),
                    "x_title": text(lang, "axis_megapixels"), "y_title": text(lang, "axis_seconds"), **colors}
    if not empty:
        latency_axes.update(x_lim=[0, float(latency["megapixels"].max()) * 1.15],
                            y_lim=[0, float(latency["seconds"].max()) * 1.15])
    return latency_axes, {"title": text(lang, "compile_empty" if compile_empty else "compile_title"),
                          "x_title": text(lang, "axis_shape_mode"), "y_title": text(lang, "axis_compile_seconds"),
                          **colors}
