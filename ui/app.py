"""The studio page: ``build_ui`` puts the layout (``ui.layout``), its events and the public API
(``/generate`` and ``/status``) together around one ``ui.handlers.Studio``. Each event's queue is one of
``ui.constants``'s; what only reads status is ``LIGHT``: it never waits for the device. The mode is each
page's own; the tensor-parallel group is shared, so only its Start/Stop buttons start or stop it.
"""

from __future__ import annotations

import gradio as gr

from ui.constants import ASSETS, DEVICE_QUEUE, RUN_QUEUE, RUN_SLOTS, UPLOAD_QUEUE
from ui.handlers import Studio
from ui.layout import build_page
from ui.views_common import load_example_prompts

PRIVATE = {"api_visibility": "private"}
LIGHT = {"concurrency_limit": None, **PRIVATE}  # reads status only: never waits for the device
DEVICE = {"concurrency_id": DEVICE_QUEUE, "concurrency_limit": 1, **PRIVATE}
RUN = {"concurrency_id": RUN_QUEUE, "concurrency_limit": RUN_SLOTS, **PRIVATE}
UPLOAD = {"concurrency_id": UPLOAD_QUEUE, "concurrency_limit": 1, **PRIVATE}


def wire(studio, page, demo: gr.Blocks) -> None:
    tab, system, performance = studio.studio_tab, studio.system_tab, studio.performance_tab
    status_inputs = [page.mode, page.width, page.height, page.steps, page.tp_degree, page.count, page.references]
    studio_views = [page.engine_line, page.cost, page.badges, page.tp_state, page.generate_btn, page.stop_worker]
    refresh = (studio.refresh_all, status_inputs, studio_views + [  # the Studio tab's views, then the System tab's
        page.system_info, page.shapes_table, page.warm_info, page.tp_system_state, page.tp_info, page.replica_info,
        page.ray_info, page.status_json])
    plots = [page.latency_plot, page.compile_plot, page.plots_note]

    def hide():
        return gr.update(visible=False)

    # The Studio tab: the size, preset and mode controls, Generate (the button and Enter), Stop, a PNG's parameters.
    page.preset.input(tab.preset_changed, page.preset, [page.width, page.height], **LIGHT)
    for number in (page.width, page.height):
        number.input(tab.size_changed, [page.width, page.height], page.preset, **LIGHT)
    page.mode.change(tab.show_tp_controls, page.mode, [page.tp_degree, page.tp_controls], **LIGHT)
    for control in (page.mode, page.width, page.height, page.steps, page.preset, page.tp_degree, page.count,
                    page.references):
        control.change(tab.refresh_studio, status_inputs, studio_views, **LIGHT)
    run_inputs = [page.prompt, page.width, page.height, page.mode, page.steps, page.guidance, page.seed,
                  page.randomize, page.history_state, page.references, page.count]
    run_outputs = [page.image, page.run_info, page.record, page.seed, page.history, page.history_state,
                   page.last_paths]
    gr.on([page.generate_btn.click, page.prompt.submit], tab.generate_from_page, run_inputs, run_outputs,
          show_progress_on=[page.image], **RUN).then(tab.refresh_studio, status_inputs, studio_views, **LIGHT)
    # Stop must not queue behind the generation it stops.
    page.stop_btn.click(tab.stop, None, page.stop_info, queue=False, **PRIVATE)
    page.stop_worker.click(tab.stop_compiling_worker, None, page.stop_info, queue=False, **PRIVATE)
    page.generate_btn.click(lambda: "", None, page.stop_info, queue=False, **PRIVATE)  # a new run: Stop's line goes
    page.use_reference.click(tab.use_as_reference, page.last_paths, page.references, **LIGHT)
    page.add_reference.click(tab.add_as_reference, [page.last_paths, page.references], page.references, **LIGHT)
    page.references.change(tab.references_shown, page.references, page.edit_panel, **LIGHT)
    page.references.select(tab.reference_selected, None, page.selected_reference, **LIGHT)
    page.remove_reference.click(tab.remove_reference, [page.references, page.selected_reference],
                                [page.references, page.selected_reference], **LIGHT)
    page.history.select(tab.history_selected, None, page.last_paths, **LIGHT)
    # Parsing an upload is bounded (backend.images.pngmeta) and runs one at a time, in its own queue.
    page.png_in.upload(tab.load_png, page.png_in,
                       [page.prompt, page.width, page.height, page.preset, page.steps, page.guidance, page.seed,
                        page.randomize, page.mode, page.count], **UPLOAD)

    # The group's buttons (on both tabs; one degree per page, copied between them) and the replica pool's
    # never wait for a generation; Stop blocks only its own worker thread until the group is gone.
    page.tp_degree.input(lambda d: d, page.tp_degree, page.tp_system_degree, **LIGHT)
    page.tp_system_degree.input(lambda d: d, page.tp_system_degree, page.tp_degree, **LIGHT)
    for button, degree in ((page.tp_start, page.tp_degree), (page.tp_system_start, page.tp_system_degree)):
        button.click(system.start_tp, degree, None, **LIGHT).then(*refresh, **LIGHT)
    gr.on([page.tp_stop.click, page.tp_system_stop.click], system.stop_tp, None, None, **LIGHT).then(*refresh, **LIGHT)
    page.tp_logs_btn.click(system.show_tp_logs, None, page.tp_log_box, **LIGHT)
    page.replica_start.click(system.start_replicas, page.replica_count, page.replica_info, **LIGHT).then(
        *refresh, **LIGHT)
    page.replica_stop.click(system.stop_replicas, None, page.replica_info, **LIGHT).then(*refresh, **LIGHT)

    page.compare_btn.click(studio.compare_tab.compare, [page.prompt, page.width, page.height, page.steps,
                                                        page.guidance, page.seed, page.randomize, page.compare_modes,
                                                        page.references],
                           [page.compare_gallery, page.compare_table], **RUN)

    # The operator's System tab: the lock, clearing the cache (after a confirmation), warm-up, bundles.
    page.warm_only.input(system.set_warm_only, page.warm_only, None, **LIGHT)
    page.clear_btn.click(system.clear_plan, None, [page.clear_plan, page.confirm_row], **LIGHT)
    page.log_out_btn.click(system.log_out, None, None, **LIGHT).success(
        None, None, None, js="() => { window.location.reload(); }")  # the page comes back a viewer's
    page.cancel_btn.click(hide, None, page.confirm_row, **LIGHT)
    page.confirm_btn.click(system.clear_cache, None, page.system_info, **LIGHT).then(hide, None, page.confirm_row,
                                                                                      **LIGHT)
    page.warm_btn.click(system.start_warmup, [page.warm_shapes, page.warm_mode], page.warm_info, **LIGHT)
    # Bundles: the export and the import hold the device (the cache must not change under them).
    page.bundle_export.click(system.export_bundle, None, page.bundle_out, **DEVICE)
    page.bundle_in.upload(system.show_bundle, page.bundle_in, [page.bundle_info, page.bundle_confirm], **UPLOAD)
    page.bundle_confirm.click(system.import_bundle, page.bundle_in, page.system_info, **DEVICE).then(
        hide, None, page.bundle_confirm, **LIGHT)

    page.plots_btn.click(performance.refresh_plots, None, plots, **LIGHT)
    page.receipt_btn.click(performance.cost_receipt, [page.receipt_price, page.receipt_ref_label,
                                                      page.receipt_ref_price, page.receipt_ref_seconds],
                           page.receipt, **LIGHT)

    # A page opening (in its language, for its role), closing, and the timers.
    demo.load(studio.page_opened, None, [page.tp_degree, page.tp_system_degree], **LIGHT)
    demo.load(studio.page_role, None, [page.role_line, *page.operator_only], **LIGHT)
    demo.load(tab.show_tp_controls, page.mode, [page.tp_degree, page.tp_controls], **LIGHT)
    demo.load(studio.page_labels, None, [page.image, page.prompt_hint, page.edit_help], **LIGHT)
    demo.load(studio.studio_tab.page_examples, None, [page.prompt, *page.example_sets], **LIGHT)
    notes = (studio.device_notes, None, [page.compare_cpu_note, page.perf_cpu_note])
    demo.load(*notes, **LIGHT)
    demo.load(studio.compare_tab.empty_compare_table, None, page.compare_table, **LIGHT)
    demo.load(*refresh, **LIGHT)
    demo.load(performance.plot_labels, None, plots[:2], **LIGHT).then(performance.refresh_plots, None, plots, **LIGHT)
    demo.unload(studio.page_closed)  # its runs leave the board: nobody is left to see them
    gr.Timer(1.0).tick(*refresh, show_progress="hidden", **LIGHT)
    gr.Timer(5.0).tick(performance.refresh_plots, None, plots, show_progress="hidden", **LIGHT)
    gr.Timer(5.0).tick(*notes, show_progress="hidden", **LIGHT)  # the device is known once the model loaded


class RawNumber(gr.Number):
    """An API input that hands its value to the backend as sent: no float conversion (seeds above 2^53
    stay exact) and no range check of its own (the backend's validation names the field)."""

    def get_block_name(self) -> str:
        return "number"

    def preprocess(self, payload):
        return payload


def _api_input(kind, label: str, value, text: str, api_type: str | None = None, **kwargs):
    """A hidden API input whose ``view_api`` line carries a one-line description (and its type)."""
    component = kind(value, visible=False, label=label, **kwargs)
    info = {**component.api_info(), "additional_description": text, **({"type": api_type} if api_type else {})}
    component.api_info = lambda: info
    return component


def add_api(studio, manager) -> None:
    s, start_shape = manager.settings, manager.card.start_shape
    pixels = f"pixels, a multiple of 16 from {s.min_size} to {s.max_size}"
    api_inputs = [
        _api_input(gr.Textbox, "prompt", None, "what to draw (required)"),
        _api_input(RawNumber, "width", start_shape.width, pixels, "integer"),
        _api_input(RawNumber, "height", start_shape.height, pixels, "integer"),
        _api_input(gr.Textbox, "mode", s.mode, f"one of {', '.join(manager.modes)}"),
        _api_input(RawNumber, "steps", s.steps, f"denoising steps, 1 to {s.max_steps}", "integer"),
        _api_input(RawNumber, "seed", -1, "0 to 2^63-1, or -1 for a random one", "integer"),
        _api_input(RawNumber, "guidance", s.guidance,
                   f"guidance scale, 0 to {s.max_guidance:g} (ignored by distilled models)"),
        _api_input(gr.File, "images", None, "reference images to edit from (gradio_client's handle_file), 0 to "
                   "--max-references; each is fitted to a reference size (a new size compiles)",
                   file_count="multiple", type="filepath"),
        _api_input(RawNumber, "count", 1, "images per prompt, 1 to 4 (the image output is the batch's first; the "
                   "record lists them)", "integer"),
    ]
    outputs = [gr.Image(type="filepath", format="png", visible=False), gr.JSON(visible=False)]
    gr.Button(visible=False).click(studio.api.api_generate, api_inputs, outputs, api_name="generate",  # never shown
                                   concurrency_id=RUN_QUEUE, concurrency_limit=RUN_SLOTS)

    def status(request: gr.Request) -> dict:
        """The manager's status snapshot: device, model, engine state, per-shape compile states, caches
        (a viewer's without the operator's details: ``backend.serving.status.Status.for_viewer``)."""
        return studio.status_for(request).to_json()

    gr.api(status, api_name="status", concurrency_limit=None)


def build_ui(manager, operator_key=None) -> gr.Blocks:
    """The page. ``operator_key`` (``backend.serving.roles.OperatorKey``) tells each event's caller."""
    files = {"en": "prompts.txt"} | ({"tr": "prompts-tr.txt"} if manager.card.prompt_grammar is not None else {})
    # by language, those with prompts only (the embedded grammar also reads Turkish words)
    examples = {lang: prompts for lang, name in files.items() if (prompts := load_example_prompts(ASSETS / name))}
    studio = Studio(manager, operator_key, examples)
    # Gradio's temporary copies (images, uploads) older than an hour are deleted every 10 minutes.
    with gr.Blocks(title="Neuron Studio", delete_cache=(600, 3600)) as demo:
        page = build_page(manager, examples)
        wire(studio, page, demo)
        add_api(studio, manager)
    studio.operator_controls = len(page.operator_only)
    return demo
