"""The page's layout: every component, one function per tab, and the words on it (``I18N`` keys the
browser translates). Nothing here reacts to anything: the events are ``ui.app``'s. ``build_page``
returns the components by their names here, and ``page.operator_only``: the groups only the
operator's page shows.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from backend.request.references import MAX_COUNT
from ui.constants import I18N
from ui.views_common import CUSTOM, MODE_KEYS, preset_label
from ui.views_performance import MODE_COLORS, compile_frame, latency_frame, latency_limits, plotted
from ui.views_studio import badges_html, compare_frame, hint_html
from ui.views_system import shapes_frame
from ui.views_tp import tp_state_html


def mode_choices(manager) -> list[tuple]:
    return [(I18N(MODE_KEYS[m]) if m in MODE_KEYS else m, m) for m in manager.modes]


def _components(scope: dict) -> dict:
    return {name: value for name, value in scope.items() if isinstance(value, gr.blocks.Block)}


def build_page(manager, examples: dict[str, list[str]]) -> SimpleNamespace:
    gr.Markdown(I18N("title"), elem_id="title")
    with gr.Row(elem_id="lines"):  # who you are, and what runs: one line each, side by side
        page = SimpleNamespace(role_line=gr.Markdown("", elem_id="role-line"),
                               engine_line=gr.Markdown(I18N("starting"), elem_id="engine-line"),
                               history_state=gr.State([]))
    for tab in (studio_tab(manager, examples), compare_tab(manager), system_tab(manager), performance_tab(manager)):
        assert not vars(page).keys() & tab.keys(), vars(page).keys() & tab.keys()  # one name, one component
        vars(page).update(tab)
    # The groups only the operator's page shows (``Studio.page_role`` hides them for viewers).
    page.operator_only = [page.system_ops, page.warm_group, page.tp_buttons, page.tp_system_start,
                          page.tp_system_stop, page.tp_log_panel, page.bundle_panel]
    if manager.settings.ray is None:
        page.operator_only.append(page.replica_controls)
    return page


def studio_tab(manager, examples: dict[str, list[str]]) -> dict:
    """``examples``: the example prompts by language (a page shows its own language's, else English's)."""
    s, card = manager.settings, manager.card
    start_shape = card.start_shape
    named = card.preset_name(start_shape)
    default_preset = preset_label(named, start_shape) if named else CUSTOM
    embedded = card.prompt_grammar is not None  # a model that reads its own grammar: start with an example
    with gr.Tab(I18N("tab_studio"), id="studio"):
        # What a presenter uses on every click fits a laptop's first screen (1280x800; docs/ui.md).
        with gr.Row():
            with gr.Column(scale=2):
                first = (examples.get("en") or [""])[0]
                prompt = gr.Textbox(first if embedded else "",
                                    label=I18N("prompt"), lines=2, max_lines=4, elem_id="prompt",
                                    placeholder=I18N("prompt_placeholder"))
                prompt_hint = gr.HTML(hint_html(card.prompt_help()), elem_id="prompt-hint",
                                      visible=card.prompt_help() is not None)
                # The references an edit starts from, next to the prompt; each can be removed (its x).
                with gr.Accordion(I18N("edit_accordion"), open=False, elem_id="edit") as edit_panel:
                    # Four thumbnails a row, whole (one alone stretched to the strip's width showed its middle).
                    references = gr.Gallery(label=I18N("references"), type="filepath",
                                            interactive=True, columns=4, rows=1, height=165, object_fit="contain",
                                            fit_columns=False, file_types=["image"], elem_id="references")
                    with gr.Row():
                        remove_reference = gr.Button(I18N("remove_reference"), size="sm", elem_id="remove-reference",
                                                     scale=0, min_width=160)
                        edit_help = gr.Markdown(card.edit_help() or "", visible=card.edit_help() is not None,
                                                elem_id="edit-help")
                selected_reference = gr.State(None)  # the reference clicked last (Remove takes it out)
                # One set a language, the English shown until the page says its own (StudioTab.page_examples).
                example_sets = [gr.Examples([[e] for e in prompts], inputs=[prompt], label=I18N("examples"),
                                            examples_per_page=3, elem_id="examples" if lang == "en" else
                                            f"examples-{lang}", visible=lang == "en").dataset
                                for lang, prompts in examples.items()]
                with gr.Row():
                    generate_btn = gr.Button(I18N("generate"), variant="primary", elem_id="generate", scale=3)
                    # Not red while nothing runs: it is not the page's loudest button.
                    stop_btn = gr.Button(I18N("stop"), variant="secondary", elem_id="stop", scale=1)
                    # The operator's, shown while a worker compiles: the one way to end a compile early.
                    stop_worker = gr.Button(I18N("stop_worker"), variant="secondary", elem_id="stop-worker",
                                            scale=1, visible=False)
                stop_info = gr.Markdown("", elem_id="stop-info")  # what Stop did, at once
                cost = gr.Markdown("", elem_id="cost")
                with gr.Row():
                    # The presets by their own names (sizes read the same in every language), then "Custom".
                    presets = [(preset_label(name, shape),) * 2 for name, shape in card.presets]
                    preset = gr.Dropdown(presets + [(I18N("custom"), CUSTOM)], value=default_preset,
                                         label=I18N("resolution"), elem_id="preset", scale=2, min_width=150)
                    # No min/max here: the backend's check answers with the nearest valid size.
                    width = gr.Number(start_shape.width, label=I18N("width"), precision=0, step=16, elem_id="width",
                                      scale=1, min_width=80)
                    height = gr.Number(start_shape.height, label=I18N("height"), precision=0, step=16,
                                       elem_id="height", scale=1, min_width=80)
                with gr.Row():
                    mode = gr.Dropdown(mode_choices(manager), value=s.mode, label=I18N("mode"), elem_id="mode",
                                       allow_custom_value=True, scale=2, min_width=150)
                    steps = gr.Slider(1, s.max_steps, value=s.steps, step=1, label=I18N("steps"), elem_id="steps",
                                      scale=2, min_width=120)
                badges = gr.HTML(badges_html([]), elem_id="badges")
                # The state on its own line (it never runs into the buttons), the buttons below.
                with gr.Column(visible=s.mode == "tp", elem_id="tp-controls") as tp_controls:
                    tp_state = gr.HTML(tp_state_html({}), elem_id="tp-state")
                    with gr.Row():
                        tp_degree = gr.Number(s.tp_degree, label=I18N("tp_degree"), precision=0, minimum=1,
                                              maximum=64, elem_id="tp-degree", scale=1, visible=s.mode == "tp")
                        with gr.Row(visible=False, elem_id="tp-buttons") as tp_buttons:  # the operator's
                            tp_start = gr.Button(I18N("start_group"), variant="primary", elem_id="tp-start",
                                                 scale=1, min_width=100, size="sm")
                            tp_stop = gr.Button(I18N("stop_group"), variant="secondary", elem_id="tp-stop",
                                                scale=1, min_width=100, size="sm")
                with gr.Row():
                    count = gr.Number(1, label=I18N("count"), precision=0, minimum=1, maximum=MAX_COUNT, step=1,
                                      elem_id="count", scale=1, min_width=80)
                    guidance = gr.Slider(0, s.max_guidance, value=s.guidance, step=0.1,
                                         label=I18N("guidance"), scale=2)
                with gr.Row():
                    seed = gr.Number(0, label=I18N("seed"), precision=0, elem_id="seed")
                    randomize = gr.Checkbox(True, label=I18N("randomize"), elem_id="randomize")
                with gr.Accordion(I18N("png_accordion"), open=False):
                    png_in = gr.File(label=I18N("png_file"),
                                     file_types=[".png"], type="filepath", elem_id="png-in")
            with gr.Column(scale=3):
                image = gr.Image(label="Image", type="filepath", format="png", interactive=False,
                                 elem_id="image", height=420)
                with gr.Row():
                    run_info = gr.Markdown("", elem_id="run-info")
                    use_reference = gr.Button(I18N("use_as_reference"), size="sm", scale=0, min_width=150,
                                              elem_id="use-reference")
                    add_reference = gr.Button(I18N("add_as_reference"), size="sm", scale=0, min_width=150,
                                              elem_id="add-reference")
                last_paths = gr.State([])  # the last run's image files (a batch: all of them)
                # No preview opened on its own (it showed the first image as a zoomed strip).
                history = gr.Gallery(label=I18N("history"), columns=6, rows=1, height=140, object_fit="contain",
                                     preview=False, allow_preview=True, fit_columns=False, elem_id="history")
                with gr.Accordion(I18N("record_accordion"), open=False):
                    record = gr.JSON(label=I18N("record"))
    return {**_components(locals()), "example_sets": example_sets}


def compare_tab(manager) -> dict:
    with gr.Tab(I18N("tab_compare"), id="compare"):
        gr.Markdown(I18N("compare_intro"))
        compare_modes = gr.CheckboxGroup(mode_choices(manager),
                                         value=[m for m in ("eager", "compiled", "regional") if m in manager.modes],
                                         label=I18N("compare_modes"), elem_id="compare-modes")
        compare_btn = gr.Button(I18N("compare"), variant="primary", elem_id="compare-run")
        with gr.Row():  # the timings beside the images, both on the first screen
            compare_gallery = gr.Gallery(label=I18N("side_by_side"), columns=3, height=360,
                                         object_fit="contain", elem_id="compare-gallery", scale=3)
            with gr.Column(scale=2):
                compare_table = gr.Dataframe(compare_frame([]), label=I18N("timings"), interactive=False,
                                             elem_id="compare-table")
                gr.Markdown(I18N("compare_hint"), elem_id="compare-hint")
                compare_cpu_note = gr.Markdown(I18N("cpu_caveat"), visible=False, elem_id="compare-cpu-note")
    return _components(locals())


def system_tab(manager) -> dict:
    """Device, caches, the per-shape table, warm-up, the lock, the tensor-parallel group, replicas,
    bundles; the operator's controls start hidden (``page_role`` shows them on the operator's page)."""
    s, card = manager.settings, manager.card
    with gr.Tab(I18N("tab_system"), id="system"):
        system_info = gr.Markdown("", elem_id="system-info")
        with gr.Row(visible=False) as system_ops:
            warm_only = gr.Checkbox(manager.warm_only, label=I18N("warm_only"),
                                    elem_id="warm-only")
            clear_btn = gr.Button(I18N("clear_cache"), elem_id="clear-cache")
            log_out_btn = gr.Button(I18N("log_out"), elem_id="log-out", scale=0, min_width=280)
        with gr.Row(visible=False) as confirm_row:
            clear_plan = gr.Markdown(I18N("confirm_clear"), elem_id="clear-plan")
            confirm_btn = gr.Button(I18N("confirm_yes"), variant="stop", elem_id="confirm-clear")
            cancel_btn = gr.Button(I18N("confirm_no"), elem_id="cancel-clear")
        shapes_table = gr.Dataframe(shapes_frame([]), label=I18N("shapes"), interactive=False,
                                    elem_id="shapes-table")
        with gr.Group(visible=False) as warm_group:
            warm_shapes = gr.CheckboxGroup([preset_label(n, sh) for n, sh in card.presets],
                                           label=I18N("warm_shapes"), elem_id="warm-shapes")
            warm_mode = gr.Dropdown(mode_choices(manager),
                                    value="compiled" if "compiled" in manager.modes else s.mode,
                                    label=I18N("warm_mode"), elem_id="warm-mode")
            warm_btn = gr.Button(I18N("warm_button"), elem_id="warm-up")
            warm_info = gr.Markdown("", elem_id="warm-info")
        # Panels, not groups: a group draws its buttons flat (its "Stop group" read as plain text).
        with gr.Column(variant="panel", elem_id="tp-panel"):
            with gr.Row(equal_height=True):
                tp_system_state = gr.HTML(tp_state_html({}), elem_id="tp-system-state", scale=2)
                tp_system_degree = gr.Number(s.tp_degree, label=I18N("tp_degree"), precision=0, minimum=1,
                                             maximum=64, elem_id="tp-system-degree", scale=1)
                tp_system_start = gr.Button(I18N("start_group"), variant="primary", elem_id="tp-system-start",
                                            scale=1, visible=False)
                tp_system_stop = gr.Button(I18N("stop_group"), variant="stop", elem_id="tp-system-stop", scale=1,
                                           visible=False)
            tp_info = gr.Markdown("", elem_id="tp-info")
        with gr.Column(variant="panel", elem_id="replica-panel"):
            with gr.Row(visible=False, equal_height=True) as replica_controls:
                replica_count = gr.Number(max(s.replicas, 2), label=I18N("replicas_count"), precision=0,
                                          minimum=1, maximum=64, elem_id="replica-count", scale=1)
                replica_start = gr.Button(I18N("start_replicas"), variant="primary", elem_id="replica-start",
                                          scale=1)
                replica_stop = gr.Button(I18N("stop_replicas"), variant="stop", elem_id="replica-stop", scale=1)
            # Under --ray the Serve replicas are the replicas: the in-instance pool's line and buttons go.
            replica_info = gr.Markdown("", elem_id="replica-info", visible=s.ray is None)
            ray_info = gr.Markdown("", elem_id="ray-info", visible=s.ray is not None)  # --ray's cluster
            with gr.Column(visible=False) as tp_log_panel:
                tp_logs_btn = gr.Button(I18N("show_logs"), elem_id="tp-logs-show")
                tp_log_box = gr.Textbox(label=I18N("rank_logs"), lines=8,
                                        max_lines=20, interactive=False, elem_id="tp-logs")
        with gr.Accordion(I18N("bundle_accordion"), open=False, visible=False) as bundle_panel:
            bundle_export = gr.Button(I18N("bundle_export"), elem_id="bundle-export")
            bundle_out = gr.File(label=I18N("bundle_file"), interactive=False, elem_id="bundle-out")
            bundle_in = gr.File(label=I18N("bundle_upload"), file_types=[".bundle", ".tar"], type="filepath",
                                elem_id="bundle-in")
            bundle_info = gr.Markdown("", elem_id="bundle-info")
            bundle_confirm = gr.Button(I18N("bundle_import"), variant="stop", visible=False,
                                       elem_id="bundle-import")
        with gr.Accordion(I18N("raw_status"), open=False):
            status_json = gr.JSON(label=I18N("status"))
    return _components(locals())


def performance_tab(manager) -> dict:
    with gr.Tab(I18N("tab_performance"), id="performance"):
        gr.Markdown(I18N("perf_intro"))
        perf_cpu_note = gr.Markdown(I18N("cpu_caveat"), visible=False, elem_id="perf-cpu-note")
        plots_note = gr.Markdown("", elem_id="plots-note")  # what will fill a plot still empty
        # The settings change seldom and each value holds every mode (ui.views_performance.plotted).
        latency_plot = gr.ScatterPlot(plotted(latency_frame([])), x="megapixels", y="seconds", color="mode",
                                      color_map=MODE_COLORS, **latency_limits(latency_frame([]), manager.card.presets),
                                      title=I18N("latency_title"), elem_id="latency-plot")
        compile_plot = gr.BarPlot(plotted(compile_frame([])), x="shape · mode", y="compile seconds", color="mode",
                                  color_map=MODE_COLORS, y_lim=[0, None], title=I18N("compile_title"),
                                  elem_id="compile-plot")
        plots_btn = gr.Button(I18N("refresh_plots"))
        gr.Markdown(I18N("receipt_title"))
        gr.Markdown(I18N("receipt_intro"))
        with gr.Row():
            receipt_price = gr.Number(manager.settings.price_per_hour, label=I18N("receipt_price"), minimum=0,
                                      elem_id="receipt-price")
            receipt_ref_label = gr.Textbox("", label=I18N("receipt_ref_label"), max_length=40,
                                           elem_id="receipt-ref-label")
            receipt_ref_price = gr.Number(None, label=I18N("receipt_ref_price"), minimum=0, elem_id="receipt-ref-price")
            receipt_ref_seconds = gr.Number(None, label=I18N("receipt_ref_seconds"), minimum=0,
                                            elem_id="receipt-ref-seconds")
        receipt_btn = gr.Button(I18N("receipt_button"), elem_id="receipt-button")
        receipt = gr.Markdown("", elem_id="cost-receipt")
    return _components(locals())
