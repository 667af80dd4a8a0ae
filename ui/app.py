"""The studio page: Gradio Blocks wired to the handlers. Gradio only; no torch.

Panels: Studio (controls, cost of the chosen shape, badges, image, history), Compare (one prompt
through two or three modes), System (device, caches, per-shape table, warm-up, lock, the
tensor-parallel group) and Performance (latency and compile-time plots). Device work runs in one
concurrency group, so the queue serialises it; status refreshes for every open browser on a timer.
The mode is each page's own; the tensor-parallel group is shared, so only its Start/Stop buttons
(or ``--mode tp`` at launch) start or stop it. Every static word is an ``I18N(key)`` from
``ui.i18n.MESSAGES``, which the browser translates (Turkish for ``tr``, else English); the handlers
render what they return in the same language on the server.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gradio as gr

from ui import gradio_queue, views
from ui.handlers import Studio
from ui.i18n import MESSAGES

I18N = gr.I18n(**MESSAGES)

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DEVICE_QUEUE = "device"

# Enter in the prompt generates (a presenter types and presses Enter); Ctrl+Enter (or Shift+Enter,
# which Gradio also takes as submit) is a new line. Keys pressed while an input method composes
# (CJK) are left alone.
PROMPT_KEYS = """
() => {
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key !== "Enter" || event.isComposing || !box.closest || !box.closest("#prompt")) return;
    if (event.ctrlKey || event.metaKey) {
      event.preventDefault();
      const at = box.selectionStart;
      box.value = box.value.slice(0, at) + "\\n" + box.value.slice(box.selectionEnd);
      box.selectionStart = box.selectionEnd = at + 1;
      box.dispatchEvent(new Event("input", {bubbles: true}));
    } else if (!event.shiftKey && !event.altKey) {
      event.preventDefault();
      event.stopPropagation();
      const button = document.querySelector("#generate");
      if (button && !button.disabled) button.click();
    }
  }, true);
}
"""

CSS = """
.toast-title-row > span:first-child {display: none;}
.ns-badges {display: flex; flex-wrap: wrap; gap: 6px;}
.ns-badge {border-radius: 999px; padding: 2px 10px; font-size: 0.85em; border: 1px solid #8884;}
.ns-badge i {display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 6px;}
.ns-warm i {background: #16a34a;} .ns-cold i {background: #9ca3af;} .ns-compiling i {background: #eab308;}
.ns-failed i {background: #dc2626;} .ns-locked i {background: #6366f1;}
.ns-tp {display: inline-flex; align-items: center; padding: 6px 0; white-space: nowrap;}
.ns-tp i {display: inline-block; flex: none; width: 10px; height: 10px; border-radius: 50%; margin-right: 8px;
          background: #9ca3af;}
.ns-tp-ready i {background: #16a34a;} .ns-tp-dead i {background: #dc2626;}
.ns-tp-launching i, .ns-tp-loading i, .ns-tp-warming i, .ns-tp-stopping i {background: #eab308;}
#history .caption-label {white-space: normal; max-width: calc(100% - 8px); font-size: 11px; line-height: 1.25;}
"""

class RawNumber(gr.Number):
    """A number input for the API that hands its value to the backend as sent (int, float or text):
    no float conversion (seeds above 2^53 stay exact) and no range check of its own — the backend's
    validation answers every bad value, naming the field. ``api_type`` and ``api_text`` are what
    ``view_api`` shows."""

    api_type, api_text = "number", ""

    def get_block_name(self) -> str:
        return "number"

    def preprocess(self, payload):
        return payload

    def api_info(self) -> dict:
        return {"type": self.api_type, "additional_description": self.api_text}


def _api_field(component, text: str, api_type: str | None = None):
    """A hidden API input with a one-line description (and type) for view_api."""
    component.api_text = text
    if api_type:
        component.api_type = api_type
    return component


class ApiText(gr.Textbox):
    """A text input for the API whose view_api line carries a description."""

    api_text = ""

    def get_block_name(self) -> str:
        return "textbox"

    def api_info(self) -> dict:
        return {"type": "string", "additional_description": self.api_text}


def mode_choices(manager) -> list[tuple]:
    return [(I18N(views.MODE_KEYS[m]) if m in views.MODE_KEYS else m, m) for m in manager.modes]


def preset_choices(presets) -> list[tuple]:
    """The model's presets by their own names (sizes read the same in every language), then "Custom"."""
    return [(label, label) for label in views.preset_choices(presets)[:-1]] + [(I18N("custom"), views.CUSTOM)]


MAX_UPLOAD = "20mb"  # a parameters PNG is kilobytes; nothing bigger is read, or kept
UPLOAD_QUEUE = "uploads"  # events that parse an upload run one at a time, apart from the device


def build_ui(manager, operator_key=None) -> gr.Blocks:
    """The page. ``operator_key`` (``backend.roles.OperatorKey``) tells each event's caller: the
    operator's controls show only on the operator's page, and the manager refuses them for viewers."""
    studio = Studio(manager, operator_key)
    studio.examples = views.load_example_prompts(ASSETS / "prompts.txt")
    s = manager.settings
    # The model's card (backend.model_card): its presets, its start size, the grammar it reads.
    card = manager.card
    start_shape = card.start_shape
    named = card.preset_name(start_shape)
    default_preset = views.preset_label(named, start_shape) if named else views.CUSTOM
    embedded = card.prompt_grammar is not None  # a model that reads its own grammar: start with an example
    examples = views.load_example_prompts(ASSETS / "prompts.txt")

    # Gradio's temporary copies (images, uploads) older than an hour are deleted every 10 minutes.
    with gr.Blocks(title="Neuron Studio", delete_cache=(600, 3600)) as demo:
        gr.Markdown(I18N("title"))
        role_line = gr.Markdown("", elem_id="role-line")
        engine_line = gr.Markdown(I18N("starting"), elem_id="engine-line")
        history_state = gr.State([])

        with gr.Tab(I18N("tab_studio"), id="studio"):
            # What a presenter uses on every click sits on the first screen of a laptop (1280x800):
            # the prompt, Generate, the cost line and the image (with its progress) side by side;
            # the settings follow below the buttons, the examples and PNG loading fold away.
            with gr.Row():
                with gr.Column(scale=2):
                    prompt = gr.Textbox(examples[0] if examples and embedded else "",
                                        label=I18N("prompt"), lines=2, max_lines=4, elem_id="prompt",
                                        placeholder=I18N("prompt_placeholder"), info=card.prompt_help())
                    with gr.Row():
                        generate_btn = gr.Button(I18N("generate"), variant="primary", elem_id="generate", scale=3)
                        # Not red while nothing runs: it is not the page's loudest button.
                        stop_btn = gr.Button(I18N("stop"), variant="secondary", elem_id="stop", scale=1)
                        # The operator's, shown only while a worker process compiles: killing it is
                        # the one way to end a compile before it finishes.
                        stop_worker = gr.Button(I18N("stop_worker"), variant="secondary", elem_id="stop-worker",
                                                scale=1, visible=False)
                    cost = gr.Markdown("", elem_id="cost")
                    preset = gr.Radio(preset_choices(card.presets), value=default_preset, label=I18N("resolution"),
                                      elem_id="preset")
                    badges = gr.HTML(views.badges_html([]), elem_id="badges")
                    with gr.Row():
                        # No min/max here: the backend's check answers with the nearest valid size.
                        width = gr.Number(start_shape.width, label=I18N("width"), precision=0, step=16, elem_id="width")
                        height = gr.Number(start_shape.height, label=I18N("height"), precision=0, step=16,
                                           elem_id="height")
                        mode = gr.Dropdown(mode_choices(manager), value=s.mode, label=I18N("mode"), elem_id="mode",
                                           allow_custom_value=True, scale=2)
                        tp_degree = gr.Number(s.tp_degree, label=I18N("tp_degree"), precision=0, minimum=1,
                                              maximum=64, elem_id="tp-degree", scale=1, visible=s.mode == "tp")
                    # The group is shared by every page: only these buttons (or the System tab's)
                    # start or stop it; picking a mode starts and stops nothing.
                    # The state on its own line (it never runs into the buttons), the buttons below.
                    with gr.Column(visible=s.mode == "tp", elem_id="tp-controls") as tp_controls:
                        tp_state = gr.HTML(views.tp_state_html({}), elem_id="tp-state")
                        with gr.Row(visible=False, elem_id="tp-buttons") as tp_buttons:  # the operator's (no empty row for viewers)
                            tp_start = gr.Button(I18N("start_group"), variant="primary", elem_id="tp-start",
                                                 scale=1, min_width=100, size="sm")
                            tp_stop = gr.Button(I18N("stop_group"), variant="secondary", elem_id="tp-stop",
                                                scale=1, min_width=100, size="sm")
                    with gr.Row():
                        steps = gr.Slider(1, s.max_steps, value=s.steps, step=1, label=I18N("steps"), elem_id="steps")
                        guidance = gr.Slider(0, s.max_guidance, value=s.guidance, step=0.1,
                                             label=I18N("guidance"))
                    with gr.Row():
                        seed = gr.Number(0, label=I18N("seed"), precision=0, elem_id="seed")
                        randomize = gr.Checkbox(True, label=I18N("randomize"), elem_id="randomize")
                    if examples:
                        with gr.Accordion(I18N("examples"), open=False, elem_id="examples"):
                            gr.Examples([[e] for e in examples], inputs=[prompt], label=I18N("examples"))
                    with gr.Accordion(I18N("png_accordion"), open=False):
                        png_in = gr.File(label=I18N("png_file"),
                                         file_types=[".png"], type="filepath", elem_id="png-in")
                with gr.Column(scale=3):
                    image = gr.Image(label="Image", type="filepath", format="png", interactive=False,
                                     elem_id="image", height=420)
                    run_info = gr.Markdown("", elem_id="run-info")
                    # Thumbnails in a row (no preview opened on its own: it showed the first image as
                    # a zoomed strip); a click enlarges one.
                    history = gr.Gallery(label=I18N("history"), columns=6, rows=1, height=140, object_fit="contain",
                                         preview=False, allow_preview=True, fit_columns=False, elem_id="history")
                    with gr.Accordion(I18N("record_accordion"), open=False):
                        record = gr.JSON(label=I18N("record"))

        with gr.Tab(I18N("tab_compare"), id="compare"):
            gr.Markdown(I18N("compare_intro"))
            compare_modes = gr.CheckboxGroup(mode_choices(manager),
                                             value=[m for m in ("eager", "compiled", "regional") if m in manager.modes],
                                             label=I18N("compare_modes"), elem_id="compare-modes")
            compare_btn = gr.Button(I18N("compare"), variant="primary", elem_id="compare-run")
            compare_gallery = gr.Gallery(label=I18N("side_by_side"), columns=3, height="auto",
                                         elem_id="compare-gallery")
            gr.Markdown(I18N("compare_hint"), elem_id="compare-hint")
            compare_table = gr.Dataframe(views.compare_frame([]), label=I18N("timings"), interactive=False,
                                         elem_id="compare-table")

        with gr.Tab(I18N("tab_system"), id="system"):
            system_info = gr.Markdown("", elem_id="system-info")
            with gr.Row(visible=False) as system_ops:
                warm_only = gr.Checkbox(manager.warm_only, label=I18N("warm_only"),
                                        elem_id="warm-only")
                clear_btn = gr.Button(I18N("clear_cache"), elem_id="clear-cache")
            with gr.Row(visible=False) as confirm_row:
                clear_plan = gr.Markdown(I18N("confirm_clear"), elem_id="clear-plan")
                confirm_btn = gr.Button(I18N("confirm_yes"), variant="stop", elem_id="confirm-clear")
                cancel_btn = gr.Button(I18N("confirm_no"), elem_id="cancel-clear")
            shapes_table = gr.Dataframe(views.shapes_frame({"shapes": []}), label=I18N("shapes"), interactive=False,
                                        elem_id="shapes-table")
            with gr.Group(visible=False) as warm_group:
                warm_shapes = gr.CheckboxGroup([views.preset_label(n, sh) for n, sh in card.presets],
                                               label=I18N("warm_shapes"), elem_id="warm-shapes")
                warm_mode = gr.Dropdown(mode_choices(manager),
                                        value="compiled" if "compiled" in manager.modes else s.mode,
                                        label=I18N("warm_mode"), elem_id="warm-mode")
                warm_btn = gr.Button(I18N("warm_button"), elem_id="warm-up")
                warm_info = gr.Markdown("", elem_id="warm-info")
            with gr.Group():
                with gr.Row():
                    tp_system_state = gr.HTML(views.tp_state_html({}), elem_id="tp-system-state", scale=2)
                    tp_system_degree = gr.Number(s.tp_degree, label=I18N("tp_degree"), precision=0, minimum=1,
                                                 maximum=64, elem_id="tp-system-degree", scale=1)
                    tp_system_start = gr.Button(I18N("start_group"), variant="primary", elem_id="tp-system-start",
                                                scale=1, visible=False)
                    tp_system_stop = gr.Button(I18N("stop_group"), variant="secondary", elem_id="tp-system-stop", scale=1,
                                               visible=False)
                tp_info = gr.Markdown("", elem_id="tp-info")
            with gr.Group():
                with gr.Row(visible=False) as replica_controls:
                    replica_count = gr.Number(max(s.replicas, 2), label=I18N("replicas_count"), precision=0,
                                              minimum=1, maximum=64, elem_id="replica-count", scale=1)
                    replica_start = gr.Button(I18N("start_replicas"), variant="primary", elem_id="replica-start",
                                              scale=1)
                    replica_stop = gr.Button(I18N("stop_replicas"), variant="secondary", elem_id="replica-stop", scale=1)
                replica_info = gr.Markdown("", elem_id="replica-info")
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

        with gr.Tab(I18N("tab_performance"), id="performance"):
            gr.Markdown(I18N("perf_intro"))
            latency_plot = gr.ScatterPlot(views.latency_frame([]), x="megapixels", y="seconds", color="mode",
                                          title=I18N("latency_empty"), elem_id="latency-plot")
            compile_plot = gr.BarPlot(views.compile_frame({}), x="shape · mode", y="compile seconds",
                                      color="mode", title=I18N("compile_empty"),
                                      elem_id="compile-plot")
            plots_btn = gr.Button(I18N("refresh_plots"))

        # wiring ------------------------------------------------------------------------------
        private = {"api_visibility": "private"}
        studio_inputs = [mode, width, height, steps, tp_degree]
        studio_outputs = [engine_line, cost, badges, tp_state, generate_btn, stop_worker]
        system_outputs = [system_info, shapes_table, warm_info, tp_system_state, tp_info, replica_info, status_json]
        light = {"concurrency_limit": None, **private}  # reads status only: never waits for the device

        preset.input(studio.preset_changed, [preset, width, height], [width, height], **light)
        for number in (width, height):
            number.input(studio.size_changed, [width, height], preset, **light)
        mode.change(studio.show_tp_controls, mode, [tp_degree, tp_controls], **light)
        for control in (mode, width, height, steps, preset, tp_degree):
            control.change(studio.refresh_studio, studio_inputs, studio_outputs, **light)
        # One degree per page, shown in both tabs: a user's edit in one is copied to the other.
        tp_degree.input(lambda d: d, tp_degree, tp_system_degree, **light)
        tp_system_degree.input(lambda d: d, tp_system_degree, tp_degree, **light)
        # Start/Stop are light events: they never wait for a generation, and Stop blocks only its own
        # worker thread until the group is gone; the timer shows the phases meanwhile.
        for button, degree in ((tp_start, tp_degree), (tp_system_start, tp_system_degree)):
            button.click(studio.start_tp, degree, None, **light).then(
                studio.refresh_all, studio_inputs, studio_outputs + system_outputs, **light)
        for button in (tp_stop, tp_system_stop):
            button.click(studio.stop_tp, None, None, **light).then(
                studio.refresh_all, studio_inputs, studio_outputs + system_outputs, **light)
        tp_logs_btn.click(studio.show_tp_logs, None, tp_log_box, **light)
        replica_start.click(studio.start_replicas, replica_count, replica_info, **light).then(
            studio.refresh_all, studio_inputs, studio_outputs + system_outputs, **light)
        replica_stop.click(studio.stop_replicas, None, replica_info, **light).then(
            studio.refresh_all, studio_inputs, studio_outputs + system_outputs, **light)

        gen_event = generate_btn.click(
            studio.generate_from_page, [prompt, width, height, mode, steps, guidance, seed, randomize, history_state],
            [image, run_info, record, seed, history, history_state], show_progress_on=[image],
            concurrency_id=DEVICE_QUEUE, concurrency_limit=1, **private)
        gen_event.then(studio.refresh_studio, studio_inputs, studio_outputs, **light)
        prompt.submit(studio.generate_from_page, [prompt, width, height, mode, steps, guidance, seed, randomize,
                                        history_state],
                      [image, run_info, record, seed, history, history_state], show_progress_on=[image],
                      concurrency_id=DEVICE_QUEUE, concurrency_limit=1, **private)
        # Stop must not queue behind the generation it stops.
        stop_btn.click(studio.stop, None, None, queue=False, **private)
        stop_worker.click(studio.stop_compiling_worker, None, None, queue=False, **private)

        # Parsing an upload is bounded (backend.pngmeta) and runs one at a time, apart from the
        # device queue and the status events, so no file can hold the server.
        png_in.upload(studio.load_png, png_in,
                      [prompt, width, height, preset, steps, guidance, seed, randomize, mode],
                      concurrency_id=UPLOAD_QUEUE, concurrency_limit=1, **private)

        compare_btn.click(studio.compare, [prompt, width, height, steps, guidance, seed, randomize, compare_modes],
                          [compare_gallery, compare_table], concurrency_id=DEVICE_QUEUE, concurrency_limit=1,
                          **private)

        warm_only.input(studio.set_warm_only, warm_only, None, **light)
        clear_btn.click(studio.clear_plan, None, [clear_plan, confirm_row], **light)
        cancel_btn.click(lambda: gr.update(visible=False), None, confirm_row, **light)
        confirm_btn.click(studio.clear_cache, None, system_info, **light).then(
            lambda: gr.update(visible=False), None, confirm_row, **light)
        warm_btn.click(studio.start_warmup, [warm_shapes, warm_mode], warm_info, **light)
        plots_btn.click(studio.refresh_plots, None, [latency_plot, compile_plot], **light)

        demo.load(studio.page_opened, None, [tp_degree, tp_system_degree], **light)
        # Bundles: the export and the import hold the device (the cache must not change under them).
        bundle_export.click(studio.export_bundle, None, bundle_out, concurrency_id=DEVICE_QUEUE,
                            concurrency_limit=1, **private)
        bundle_in.upload(studio.show_bundle, bundle_in, [bundle_info, bundle_confirm],
                         concurrency_id=UPLOAD_QUEUE, concurrency_limit=1, **private)
        bundle_confirm.click(studio.import_bundle, bundle_in, system_info, concurrency_id=DEVICE_QUEUE,
                             concurrency_limit=1, **private).then(
            lambda: gr.update(visible=False), None, bundle_confirm, **light)
        operator_controls = [system_ops, warm_group, tp_buttons, tp_system_start, tp_system_stop, tp_log_panel,
                             bundle_panel, replica_controls]
        studio.operator_controls = len(operator_controls)
        studio.blocks = demo
        gradio_queue.follow(studio, Studio.follow_capacity)
        demo.load(studio.page_role, None, [role_line, *operator_controls], **light)
        demo.load(studio.show_tp_controls, mode, [tp_degree, tp_controls], **light)
        demo.load(studio.page_labels, None, [image, prompt], **light)  # set per language on the server
        demo.load(studio.empty_compare_table, None, compare_table, **light)
        demo.load(studio.refresh_all, studio_inputs, studio_outputs + system_outputs, **light)
        demo.load(studio.refresh_plots, None, [latency_plot, compile_plot], **light)
        gr.Timer(1.0).tick(studio.refresh_all, studio_inputs, studio_outputs + system_outputs,
                           show_progress="hidden", **light)
        gr.Timer(5.0).tick(studio.refresh_plots, None, [latency_plot, compile_plot], show_progress="hidden",
                           **light)

        # Public API: the two named endpoints gradio_client users call. The generate endpoint has
        # inputs of its own that pass values through untouched, so every bad value is answered by
        # the backend's validation (naming the field and the fix), not by a widget's range check.
        modes = ", ".join(manager.modes)
        api_inputs = [
            _api_field(ApiText(visible=False, label="prompt"), "what to draw (required)"),
            _api_field(RawNumber(start_shape.width, visible=False, label="width"),
                       f"pixels, a multiple of 16 from {s.min_size} to {s.max_size}", "integer"),
            _api_field(RawNumber(start_shape.height, visible=False, label="height"),
                       f"pixels, a multiple of 16 from {s.min_size} to {s.max_size}", "integer"),
            _api_field(ApiText(s.mode, visible=False, label="mode"), f"one of {modes}"),
            _api_field(RawNumber(s.steps, visible=False, label="steps"),
                       f"denoising steps, 1 to {s.max_steps}", "integer"),
            _api_field(RawNumber(-1, visible=False, label="seed"), "0 to 2^63-1, or -1 for a random one",
                       "integer"),
            _api_field(RawNumber(s.guidance, visible=False, label="guidance"),
                       f"guidance scale, 0 to {s.max_guidance:g} (ignored by distilled models)"),
        ]
        api_image = gr.Image(type="filepath", format="png", visible=False)
        api_record = gr.JSON(visible=False)
        api_button = gr.Button(visible=False)  # never shown: the endpoint is for API clients
        api_button.click(studio.api_generate, api_inputs, [api_image, api_record], api_name="generate",
                         concurrency_id=DEVICE_QUEUE, concurrency_limit=1)

        def status() -> dict:
            """The manager's status snapshot: device, model, engine state, per-shape compile states, caches."""
            return manager.status()

        gr.api(status, api_name="status", concurrency_limit=None)
    return demo


def parse_auth(spec: str | None) -> list[tuple[str, str]] | None:
    """'user:pass', or a file with one user:pass per line (# comments allowed) -> Gradio auth list."""
    from backend.roles import parse_pairs

    return parse_pairs(spec, "--auth") if spec else None


def launch(manager, settings, block: bool = True) -> gr.Blocks:
    """Serve the page now; the caller starts the model load after this returns (page first)."""
    import atexit
    import shutil

    from starlette.middleware import Middleware

    from backend.roles import OperatorKey, parse_pairs
    from ui.guard import RoomGuard, allowed_hosts

    auth = parse_auth(settings.auth)
    for flag, spec in (("--auth", settings.auth), ("--operator-auth", settings.operator_auth)):
        if spec and not Path(spec).expanduser().is_file() and any(a.startswith(flag) for a in sys.argv):
            print(f"warning: {flag} user:pass on the command line is visible to every local user (ps); "
                  f"give a file of user:pass lines or the environment variable instead", file=sys.stderr)
    key = OperatorKey(parse_pairs(settings.operator_auth, "--operator-auth") if settings.operator_auth else None)
    if settings.host not in ("127.0.0.1", "localhost", "::1") and not auth:
        print(f"warning: serving on {settings.host} without --auth: anyone who can reach this address "
              "can use the app", file=sys.stderr)
    # Gradio's copies of images and uploads: a private folder of the app's own (``ui.serve`` makes
    # it before Gradio loads and removes it at exit; for other callers, removed at exit here).
    from ui.serve import own_temp_dir

    made = own_temp_dir()
    if made:
        atexit.register(shutil.rmtree, made, ignore_errors=True)
    demo = build_ui(manager, key)
    demo.queue(default_concurrency_limit=1)
    guard = Middleware(RoomGuard, key=key, hosts=allowed_hosts(settings.host),
                       output_dir=str(Path(settings.output_dir).resolve()))
    demo.launch(server_name=settings.host, server_port=settings.port, share=settings.share, auth=auth,
                enable_monitoring=False, show_error=False, prevent_thread_lock=True, css=CSS, js=PROMPT_KEYS, i18n=I18N,
                allowed_paths=[str(Path(settings.output_dir).resolve())], quiet=False,
                max_file_size=MAX_UPLOAD, app_kwargs={"middleware": [guard]})
    gradio_queue.calm(demo)  # an idle app should not poll 1,000 times a second
    shown = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    link = key.link(f"http://{'[' + shown + ']' if ':' in shown else shown}:{demo.server_port}")
    print(f"operator link (keep it to yourself; other pages are viewers): {link}" if link else
          "operator: log in at /operator with the --operator-auth credentials", flush=True)
    if block:
        demo.block_thread()
    return demo
