"""The page's events: which handler (``ui.handlers.Studio``) each component's event calls, with which
inputs and outputs, in which queue; tab by tab, then what runs when a page opens and on the timers.

Runs (generate, compare) are handed to the service's job board (``RUN_QUEUE``), which orders them
fairly between owners and runs as many as the engines can; bundles hold the device one at a time
(``DEVICE_QUEUE``); parsing an upload runs in its own (``UPLOAD_QUEUE``); everything that only
reads status is ``LIGHT``: it never waits for the device. Status refreshes for every open browser
on a timer. The mode is each page's own; the tensor-parallel group is shared, so only its Start/Stop
buttons (or ``--mode tp`` at launch) start or stop it. The public API's events are ``ui.api``'s.
"""

from __future__ import annotations

import gradio as gr

from ui.constants import DEVICE_QUEUE, RUN_QUEUE, RUN_SLOTS, UPLOAD_QUEUE

PRIVATE = {"api_visibility": "private"}
LIGHT = {"concurrency_limit": None, **PRIVATE}  # reads status only: never waits for the device
DEVICE = {"concurrency_id": DEVICE_QUEUE, "concurrency_limit": 1, **PRIVATE}
RUN = {"concurrency_id": RUN_QUEUE, "concurrency_limit": RUN_SLOTS, **PRIVATE}
UPLOAD = {"concurrency_id": UPLOAD_QUEUE, "concurrency_limit": 1, **PRIVATE}


def wire(studio, page, demo: gr.Blocks) -> None:
    """Every event of the page (``page``: ``ui.layout.build_page``'s components), inside the open Blocks."""
    studio_events(studio, page)
    group_events(studio, page)
    compare_events(studio, page)
    system_events(studio, page)
    performance_events(studio, page)
    page_events(studio, page, demo)


def studio_inputs(page) -> list:
    return [page.mode, page.width, page.height, page.steps, page.tp_degree, page.count, page.references]


def studio_outputs(page) -> list:
    return [page.engine_line, page.cost, page.badges, page.tp_state, page.generate_btn, page.stop_worker]


def all_outputs(page) -> list:
    """What ``Studio.refresh_all`` fills: the Studio tab's status views, then the System tab's."""
    return studio_outputs(page) + [page.system_info, page.shapes_table, page.warm_info, page.tp_system_state,
                                   page.tp_info, page.replica_info, page.status_json]


def studio_events(studio, page) -> None:
    """The size, preset and mode controls, Generate (the button and Enter), Stop, a PNG's parameters."""
    tab = studio.studio_tab
    page.preset.input(tab.preset_changed, [page.preset, page.width, page.height], [page.width, page.height], **LIGHT)
    for number in (page.width, page.height):
        number.input(tab.size_changed, [page.width, page.height], page.preset, **LIGHT)
    page.mode.change(tab.show_tp_controls, page.mode, [page.tp_degree, page.tp_controls], **LIGHT)
    for control in (page.mode, page.width, page.height, page.steps, page.preset, page.tp_degree, page.count,
                    page.references):
        control.change(tab.refresh_studio, studio_inputs(page), studio_outputs(page), **LIGHT)

    run_inputs = [page.prompt, page.width, page.height, page.mode, page.steps, page.guidance, page.seed,
                  page.randomize, page.history_state, page.references, page.count]
    run_outputs = [page.image, page.run_info, page.record, page.seed, page.history, page.history_state,
                   page.last_paths]
    page.generate_btn.click(tab.generate_from_page, run_inputs, run_outputs, show_progress_on=[page.image], **RUN).then(
        tab.refresh_studio, studio_inputs(page), studio_outputs(page), **LIGHT)
    page.prompt.submit(tab.generate_from_page, run_inputs, run_outputs, show_progress_on=[page.image], **RUN)
    # Stop must not queue behind the generation it stops.
    page.stop_btn.click(tab.stop, None, None, queue=False, **PRIVATE)
    page.stop_worker.click(tab.stop_compiling_worker, None, None, queue=False, **PRIVATE)
    page.use_reference.click(tab.use_as_reference, [page.last_paths, page.references], page.references, **LIGHT)
    page.history.select(tab.history_selected, None, page.last_paths, **LIGHT)

    # Parsing an upload is bounded (backend.images.pngmeta) and runs one at a time, apart from the
    # device queue and the status events, so no file can hold the server.
    page.png_in.upload(tab.load_png, page.png_in,
                       [page.prompt, page.width, page.height, page.preset, page.steps, page.guidance, page.seed,
                        page.randomize, page.mode, page.count], **UPLOAD)


def group_events(studio, page) -> None:
    """The tensor-parallel group's buttons (on the Studio and System tabs) and the replica pool's."""
    # One degree per page, shown in both tabs: a user's edit in one is copied to the other.
    page.tp_degree.input(lambda d: d, page.tp_degree, page.tp_system_degree, **LIGHT)
    page.tp_system_degree.input(lambda d: d, page.tp_system_degree, page.tp_degree, **LIGHT)
    # Start/Stop are light events: they never wait for a generation, and Stop blocks only its own
    # worker thread until the group is gone; the timer shows the phases meanwhile.
    refresh, system = (studio.refresh_all, studio_inputs(page), all_outputs(page)), studio.system_tab
    for button, degree in ((page.tp_start, page.tp_degree), (page.tp_system_start, page.tp_system_degree)):
        button.click(system.start_tp, degree, None, **LIGHT).then(*refresh, **LIGHT)
    for button in (page.tp_stop, page.tp_system_stop):
        button.click(system.stop_tp, None, None, **LIGHT).then(*refresh, **LIGHT)
    page.tp_logs_btn.click(system.show_tp_logs, None, page.tp_log_box, **LIGHT)
    page.replica_start.click(system.start_replicas, page.replica_count, page.replica_info, **LIGHT).then(
        *refresh, **LIGHT)
    page.replica_stop.click(system.stop_replicas, None, page.replica_info, **LIGHT).then(*refresh, **LIGHT)


def compare_events(studio, page) -> None:
    """Compare: the Studio tab's prompt and settings through the chosen modes."""
    page.compare_btn.click(studio.compare_tab.compare, [page.prompt, page.width, page.height, page.steps,
                                                        page.guidance, page.seed, page.randomize, page.compare_modes,
                                                        page.references],
                           [page.compare_gallery, page.compare_table], **RUN)


def system_events(studio, page) -> None:
    """The operator's System tab: the lock, clearing the cache (after a confirmation), warm-up, bundles."""
    system = studio.system_tab
    page.warm_only.input(system.set_warm_only, page.warm_only, None, **LIGHT)
    page.clear_btn.click(system.clear_plan, None, [page.clear_plan, page.confirm_row], **LIGHT)
    page.log_out_btn.click(system.log_out, None, None, **LIGHT).success(
        None, None, None, js="() => { window.location.reload(); }")  # the page comes back a viewer's
    page.cancel_btn.click(lambda: gr.update(visible=False), None, page.confirm_row, **LIGHT)
    page.confirm_btn.click(system.clear_cache, None, page.system_info, **LIGHT).then(
        lambda: gr.update(visible=False), None, page.confirm_row, **LIGHT)
    page.warm_btn.click(system.start_warmup, [page.warm_shapes, page.warm_mode], page.warm_info, **LIGHT)
    # Bundles: the export and the import hold the device (the cache must not change under them).
    page.bundle_export.click(system.export_bundle, None, page.bundle_out, **DEVICE)
    page.bundle_in.upload(system.show_bundle, page.bundle_in, [page.bundle_info, page.bundle_confirm], **UPLOAD)
    page.bundle_confirm.click(system.import_bundle, page.bundle_in, page.system_info, **DEVICE).then(
        lambda: gr.update(visible=False), None, page.bundle_confirm, **LIGHT)


def performance_events(studio, page) -> None:
    """The plots' button, and the cost receipt's."""
    tab = studio.performance_tab
    page.plots_btn.click(tab.refresh_plots, None, [page.latency_plot, page.compile_plot], **LIGHT)
    page.receipt_btn.click(tab.cost_receipt, [page.receipt_price, page.receipt_ref_label, page.receipt_ref_price,
                                              page.receipt_ref_seconds], page.receipt, **LIGHT)


def page_events(studio, page, demo: gr.Blocks) -> None:
    """What runs when a page opens (in its language, for its role) and on the timers."""
    plots = [page.latency_plot, page.compile_plot]
    demo.load(studio.page_opened, None, [page.tp_degree, page.tp_system_degree], **LIGHT)
    demo.load(studio.page_role, None, [page.role_line, *page.operator_only], **LIGHT)
    demo.load(studio.studio_tab.show_tp_controls, page.mode, [page.tp_degree, page.tp_controls], **LIGHT)
    # Labels set per language on the server.
    demo.load(studio.page_labels, None, [page.image, page.prompt, page.edit_help], **LIGHT)
    demo.load(studio.compare_tab.empty_compare_table, None, page.compare_table, **LIGHT)
    demo.load(studio.refresh_all, studio_inputs(page), all_outputs(page), **LIGHT)
    demo.load(studio.performance_tab.refresh_plots, None, plots, **LIGHT)
    demo.unload(studio.page_closed)  # its runs leave the board: nobody is left to see them
    gr.Timer(1.0).tick(studio.refresh_all, studio_inputs(page), all_outputs(page), show_progress="hidden", **LIGHT)
    gr.Timer(5.0).tick(studio.performance_tab.refresh_plots, None, plots, show_progress="hidden", **LIGHT)
