"""The Compare tab's views: the timings table of one prompt run through several modes."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ui.i18n import DEFAULT
from ui.views_common import column_names
from ui.views_studio import mode_caption

COMPARE_COLUMNS = ["col_mode", "col_seconds", "col_compiled", "col_compile_s", "col_max_diff"]


def compare_frame(entries: list[dict[str, Any]], lang: str = DEFAULT) -> pd.DataFrame:
    rows = [[mode_caption(e["result"], lang) if e["result"].get("degraded") else e["mode"],
             round(e["result"]["seconds"], 3), e["result"]["compiled"], round(e["result"]["compile_seconds"], 2),
             e["max_diff"]] for e in entries]
    return pd.DataFrame(rows, columns=column_names(COMPARE_COLUMNS, lang))
