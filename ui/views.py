"""The page's views under one name: status snapshots and predictions in, Markdown, HTML and pandas
frames out. Each lives in the module of the tab that shows it; this module only gathers them, for
callers outside the page (the tests, ``tests/ui/screenshot.py``, the Neuron scenarios):

- ``ui.views_common``: presets and modes by name, numbers and sizes written one way;
- ``ui.views_studio``: the engine line, the cost line, the preset badges, the run line;
- ``ui.views_compare``: the Compare tab's timings table;
- ``ui.views_system``: the System tab's tables, warm-up, replicas, an uploaded bundle;
- ``ui.views_tp``: the tensor-parallel group, on the Studio and System tabs;
- ``ui.views_performance``: the Performance tab's plots.

No gradio and no torch in any of them, so every view is unit-testable with plain dicts. Views that
say words take ``lang`` ("en" or "tr", English by default) and take them from ``ui.i18n``; numbers,
sizes, mode names and the backend's own texts are written the same in both languages.
"""

from __future__ import annotations

from ui.views_common import (
                             CUSTOM,
                             MESSAGES_EN,
                             MODE_KEYS,
                             column_names,
                             format_bytes,
                             format_seconds,
                             load_example_prompts,
                             preset_choices,
                             preset_label,
                             preset_shape,
                             shorten,
)
from ui.views_compare import COMPARE_COLUMNS, compare_frame
from ui.views_performance import MODE_COLORS, compile_frame, latency_frame, plot_axes
from ui.views_studio import (
                             badge_state,
                             badges_html,
                             beyond_training_note,
                             compile_text,
                             cost_markdown,
                             engine_markdown,
                             mode_caption,
                             mode_text,
                             reading_note,
                             run_markdown,
                             warm_on_text,
)
from ui.views_system import (
                             SHAPE_COLUMNS,
                             bundle_markdown,
                             device_reason,
                             replicas_markdown,
                             shapes_frame,
                             system_markdown,
                             warmup_markdown,
)
from ui.views_tp import (
                             TP_RUNNING,
                             TP_STARTING,
                             tp_cost_markdown,
                             tp_engine_text,
                             tp_group_note,
                             tp_logs_text,
                             tp_markdown,
                             tp_ranks_markdown,
                             tp_state_html,
                             tp_state_name,
)

__all__ = [
    "CUSTOM", "MESSAGES_EN", "MODE_KEYS", "column_names", "format_bytes", "format_seconds", "load_example_prompts",
    "preset_choices", "preset_label", "preset_shape", "shorten",
    "COMPARE_COLUMNS", "compare_frame",
    "MODE_COLORS", "compile_frame", "latency_frame", "plot_axes",
    "badge_state", "badges_html", "beyond_training_note", "compile_text", "cost_markdown", "engine_markdown",
    "mode_caption", "mode_text", "reading_note", "run_markdown", "warm_on_text",
    "SHAPE_COLUMNS", "bundle_markdown", "device_reason", "replicas_markdown", "shapes_frame", "system_markdown",
    "warmup_markdown",
    "TP_RUNNING", "TP_STARTING", "tp_cost_markdown", "tp_engine_text", "tp_group_note", "tp_logs_text",
    "tp_markdown", "tp_ranks_markdown", "tp_state_html", "tp_state_name",
]
