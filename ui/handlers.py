"""The page's event handlers. They talk to the backend only through the manager's public methods.

Each handler turns the backend's StudioError into ``gr.Error`` (a message in the page, never a
generic "Error") and returns plain values, so tests can drive them against the real manager with a
fake engine behind it (``tests/ui/fake_engines.py``).

Words follow the browser: a handler that says something takes the ``gr.Request`` Gradio passes
in (None in tests: English), and renders in ``i18n.language(request)``. ``request`` always comes
before ``progress``: Gradio inserts the request at its position among the inputs.
"""

from __future__ import annotations

import logging
import math
from typing import Callable

import gradio as gr

from backend.errors import GenerationCancelled, InvalidRequest, StudioError
from backend.pngmeta import read_png_parameters
from backend.roles import COOKIE, LOCAL_OPERATOR, Caller
from backend.shapes import Shape, parse_shape, validate_shape
from ui import gradio_queue, views
from ui.i18n import error_message, language, text

log = logging.getLogger("neuron_studio.ui")
HISTORY_KEEP = 24
OPERATOR_CONTROLS = 9  # the groups ui.app shows only to the operator (page_role's visibility updates)
TP_ENGINE, REPLICA_ENGINE = "tensor-parallel", "replicas"  # the manager's names for them


def _page_error(exc: StudioError, lang: str) -> gr.Error:
    """The one place a backend error becomes a page error: the translated sentence for its code, then
    the backend's own detail. A refusal is no bug: one line in the terminal, no traceback."""
    log.info("refused (%s): %s", exc.code, exc)
    return gr.Error(_titled(lang, "title_error", error_message(exc, lang)), title=text(lang, "title_error"),
                    print_exception=False)


def _titled(lang: str, title: str, message: str) -> str:
    """A toast's message led by its title in the page's language: Gradio 6.31 heads a toast with its
    type in English ("Warning"), whatever title it is given; the page's CSS hides that heading."""
    return f"{text(lang, title)} — {message}"


def _api_error(exc: StudioError) -> gr.Error:
    """An API client's error: the backend's own words; one line in the terminal, no traceback."""
    log.info("refused an API call (%s): %s", exc.code, exc)
    return gr.Error(str(exc), print_exception=False)


def _info(lang: str, message: str) -> None:
    gr.Info(_titled(lang, "title_info", message), title=text(lang, "title_info"))


def _warning(lang: str, message: str) -> None:
    gr.Warning(_titled(lang, "title_warning", message), title=text(lang, "title_warning"))


def _whole(value, strict: bool = False, lang: str = "en", field: str = "tp_degree") -> int | None:
    """A TP degree (or a replica count: ``field``) from a Number box: a whole number, or None (the
    default). With ``strict`` anything else is a page error naming the field; without, it is
    ignored (for the status views)."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number != int(number):
        if strict:
            raise _page_error(InvalidRequest(field, f"must be a whole number, got {value!r}"), lang)
        return None
    return int(number)


def _cookie(page, name: str) -> str | None:
    cookies = getattr(page, "cookies", None)
    if cookies is not None and hasattr(cookies, "get"):
        return cookies.get(name)
    header = (getattr(page, "headers", None) or {}).get("cookie") or ""
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


class Studio:
    """Handlers bound to one manager (real or fake).

    ``operator_key`` (``backend.roles.OperatorKey``) decides each event's caller from the page's
    cookie: the operator or a viewer; the manager refuses a viewer's operator actions. Without a
    key (handlers driven directly, as the handler tests do) there is no room: the caller is the
    local operator."""

    def __init__(self, manager, operator_key=None):
        self.manager = manager
        self.key = operator_key
        self.blocks = None  # set by ui.app once the page exists: its queue says who still waits
        self.examples: list[str] = []  # the page's example prompts (ui.app sets them): a note offers the closest
        self.operator_controls = OPERATOR_CONTROLS

    def _still_wanted(self, page: gr.Request | None) -> Callable[[], bool] | None:
        """False once the page that asked has gone (``gradio_queue.page_alive``)."""
        return gradio_queue.page_alive(self.blocks, getattr(page, "session_hash", None))

    def _caller(self, page: gr.Request | None) -> Caller:
        if self.key is None:
            return LOCAL_OPERATOR
        return self.key.caller(_cookie(page, COOKIE) if page is not None else None,
                               getattr(page, "session_hash", None))

    # helpers ---------------------------------------------------------------------------------
    def _validate(self, prompt, width, height, mode, steps, guidance, seed, lang: str | None = None):
        """A GenerationRequest, or a page error: translated when ``lang`` is given (the page), the
        backend's own words when not (the API)."""
        try:
            return self.manager.validate(prompt, height, width, steps=steps, guidance=guidance,
                                         seed=seed, mode=mode)
        except StudioError as exc:
            raise (_page_error(exc, lang) if lang else _api_error(exc)) from None

    def _progress_adapter(self, progress: Callable, lang: str = "en") -> Callable:
        """Step progress for the page's bar; while a shape compiles (silently: no step for seconds,
        on Neuron minutes) the bar says so every second with the time so far and the estimate. Its
        ``close()`` ends that ticking when the run ends, however it ends (a failed compile sends no
        further step)."""
        import threading
        import time

        compiling = {"since": None, "stop": threading.Event()}

        def tick(estimate: float | None) -> None:
            while not compiling["stop"].wait(1.0):
                since = compiling["since"]
                if since is None:
                    return
                elapsed = views._seconds(time.monotonic() - since)
                progress(None, desc=text(lang, "progress_compiling", elapsed=elapsed,
                                         estimate=views._seconds(estimate) if estimate else "?"))

        def on_progress(event) -> None:
            if event.phase == "compiling" and compiling["since"] is None:
                compiling["since"], compiling["stop"] = time.monotonic(), threading.Event()
                estimate = None
                try:
                    estimate = self.manager.predict(event.mode, parse_shape(event.shape)).get("estimate_compile_seconds")
                except Exception:  # noqa: BLE001 - an estimate is a nicety; the bar still says "compiling"
                    pass
                threading.Thread(target=tick, args=(estimate,), name="compile-progress", daemon=True).start()
            elif event.phase != "compiling" and compiling["since"] is not None:
                compiling["since"] = None
                compiling["stop"].set()
            if event.phase == "denoising":
                progress((event.step, event.steps),
                         desc=text(lang, "progress_step", step=event.step, steps=event.steps))
            elif event.phase == "loading":  # the model is still loading: the request waits for it
                progress(None, desc=text(lang, "progress_loading", seconds=event.step))
            elif event.phase in ("encoding", "compiling", "decoding"):
                progress(None if event.phase == "compiling" else 0.0 if event.phase == "encoding" else 1.0,
                         desc=text(lang, f"phase_{event.phase}") + "…")

        def close() -> None:
            compiling["since"] = None
            compiling["stop"].set()

        on_progress.close = close
        return on_progress

    def _run(self, request, progress: Callable, lang: str | None = None, page: gr.Request | None = None):
        adapter = self._progress_adapter(progress, lang or "en")
        try:
            image, result = self.manager.generate(request, adapter, owner=getattr(page, "session_hash", None),
                                                  still_wanted=self._still_wanted(page))
        except GenerationCancelled as exc:
            _info(lang or "en", text(lang or "en", "info_stopped", detail=exc))
            return None
        except StudioError as exc:
            raise (_page_error(exc, lang) if lang else _api_error(exc)) from None
        finally:
            adapter.close()
        self.manager.save_image(image, result)
        if result.degraded:
            _warning(lang or "en", result.degraded)
        return result

    # generate / stop -------------------------------------------------------------------------
    def generate_from_page(self, prompt, width, height, mode, steps, guidance, seed, randomize, history,
                           page: gr.Request | None = None, progress: Callable = gr.Progress()):
        """The Generate button: returns image, run line, record, used seed, gallery, history state."""
        lang = language(page)
        try:
            request = self._validate(prompt, width, height, mode, steps, guidance, -1 if randomize else seed, lang)
            result = self._run(request, progress, lang, page)
        except gr.Error as refusal:
            # A refusal (a bad prompt, a cold shape under the lock, a failed run): a calm notice in
            # the run line and a toast, the last image, gallery and seed left as they are — not an
            # "Error" badge over every output.
            reason = str(refusal.message).removeprefix(text(lang, "title_error") + " — ")
            _warning(lang, reason)
            return (gr.skip(), text(lang, "run_refused", reason=reason), gr.skip(), gr.skip(), gr.skip(), gr.skip())
        if result is None:
            return (gr.skip(), text(lang, "run_stopped", seed=request.seed), gr.skip(), gr.skip(), gr.skip(),
                    gr.skip())
        record = result.to_json()
        caption = (f"{result.width}x{result.height} · {views.mode_caption(record, lang)} · "
                   f"{views._seconds(result.seconds)}")
        history = ([(result.path, caption)] + list(history or []))[:HISTORY_KEEP]
        line = views.run_markdown(record, lang)
        reading = self.manager.card.read_prompt(result.typed) if result.typed else None
        if reading is not None:  # the model drew its reading of the prompt: say what it did not understand
            line += views.reading_note(reading, self.examples, lang)
        return result.path, line, record, result.seed, history, history

    def api_generate(self, prompt, width, height, mode, steps, seed, guidance, page: gr.Request | None = None,
                     progress: Callable = gr.Progress()):
        """Generate one image; returns the PNG (with its parameters inside) and the run's record as JSON.
        Every value is checked by the backend: a bad one is refused naming the field (and, for a
        size, the nearest valid one)."""
        request = self._validate(prompt, width, height, mode, steps, guidance, seed)
        result = self._run(request, progress, page=page)  # owned by the API client's session
        if result is None:
            raise gr.Error("the generation was stopped")
        # The PNG itself is the first output; the server-side path means nothing to a remote
        # client (and gradio_client would mistake a dict with a "path" key for a file).
        record = result.to_json()
        record.pop("path")
        return result.path, record

    def stop(self, page: gr.Request | None = None) -> None:
        """Stop this page's run (the operator's: every run) at its next step, and say so at once —
        while a shape compiles, that the compile finishes first and about when."""
        lang = language(page)
        caller = self._caller(page)
        try:
            running = self.manager.cancel(caller=caller)
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        if not running:
            _info(lang, text(lang, "info_nothing"))
            return
        compiling = [job for job in self.manager.status().get("running") or [] if job.get("phase") == "compiling"]
        if not compiling:
            _info(lang, text(lang, "info_stopping"))
            return
        job = compiling[0]
        prediction = self.manager.predict(job["mode"], parse_shape(job["shape"]))
        estimate = prediction.get("estimate_compile_seconds")
        left = views._seconds(max(0.0, estimate - (prediction.get("elapsed_seconds") or 0.0))) if estimate else "?"
        key = "info_stopping_compile_operator" if caller.is_operator and job.get("engine") != "in-process" \
            else "info_stopping_compile"
        _info(lang, text(lang, key, left=left))

    def stop_compiling_worker(self, page: gr.Request | None = None) -> list[str]:
        """The operator's: end a compile now by stopping the worker process that runs it."""
        lang = language(page)
        try:
            stopped = self.manager.stop_compiling_workers(caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        names = ", ".join(text(lang, "engine_name_" + name.replace("-", "_")) for name in stopped)
        _info(lang, text(lang, "info_worker_stopped", engines=names) if stopped
              else text(lang, "info_no_worker_compiling"))
        return stopped

    # controls --------------------------------------------------------------------------------
    def preset_changed(self, label: str, width, height):
        shape = views.preset_shape(label, self.manager.card.presets)
        if shape is None:
            return gr.skip(), gr.skip()
        return shape.width, shape.height

    def size_changed(self, width, height) -> str:
        card = self.manager.card
        name = card.preset_name(Shape(height, width))  # the boxes may hold floats: label the preset's own
        return views.preset_label(name, dict(card.presets)[name]) if name else views.CUSTOM

    def refresh_studio(self, mode, width, height, steps, degree=None, page: gr.Request | None = None):
        """Engine line, cost of the chosen (mode, shape), preset badges for that mode, TP group badge,
        whether Generate may be pressed."""
        return self._studio_views(self.manager.status(), mode, width, height, steps, degree, language(page),
                                  self._caller(page).is_operator)

    def refresh_system(self, page: gr.Request | None = None):
        """The System tab's views (tests read them; the page's timer takes them from ``refresh_all``)."""
        return self._system_views(self.manager.status(), language(page), self._caller(page).is_operator)

    def refresh_all(self, mode, width, height, steps, degree=None, page: gr.Request | None = None):
        """The timer's tick: one status read for both the studio line and the system panel. It reads
        no rank logs: those are read only when someone presses "Show rank logs"."""
        status, lang, operator = self.manager.status(), language(page), self._caller(page).is_operator
        return (self._studio_views(status, mode, width, height, steps, degree, lang, operator)
                + self._system_views(status, lang, operator))

    def follow_capacity(self) -> bool:
        """Let the page's device queue through as many requests at once as the engines can run now
        (``Manager.capacity``: a replica pool runs one per ready replica; each engine still queues
        what it cannot run, so this keeps Gradio's queue positions honest, nothing more). False when
        there is no queue to follow (yet)."""
        from ui.app import DEVICE_QUEUE

        return gradio_queue.set_width(self.blocks, DEVICE_QUEUE, self.manager.capacity())

    def _studio_views(self, status, mode, width, height, steps, degree=None, lang: str = "en", operator: bool = True):
        engine = views.engine_markdown(status, lang)
        tp = status.get("tp") or {}
        tp_badge = views.tp_state_html(tp, lang)
        degree = _whole(degree)
        # The operator may end a compile a worker process runs (``stop_compiling_worker``).
        end_compile = gr.update(visible=operator and any(
            job.get("phase") == "compiling" and job.get("engine") != "in-process" for job in status.get("running") or []))
        if mode == "tp" and tp.get("state") != "ready":
            # Not ready: a click runs in process meanwhile (and says so), so Generate stays on.
            cost = views.tp_cost_markdown(tp, degree, operator, lang)
            # Its requests run in process meanwhile: the badges are that mode's.
            badges = self._badges(status, self.manager.settings.tp_compile, steps, lang)
            return engine, cost, badges, tp_badge, gr.update(interactive=True), end_compile
        try:
            bounds = self.manager.settings
            shape = validate_shape(height, width, bounds.min_size, bounds.max_size)
        except InvalidRequest as exc:
            shape, error = None, error_message(exc, lang)
        else:
            error = None
        steps = steps if isinstance(steps, (int, float)) and steps >= 1 else None
        ready = status["state"] not in ("idle", "loading", "failed")
        prediction = self.manager.predict(mode, shape, steps) if ready and shape else None
        cost = views.cost_markdown(prediction, error, lang)
        card = self.manager.card
        if shape is not None and card.beyond_training(shape):
            nearest = min((s for _n, s in card.presets if not card.beyond_training(s)),
                          key=lambda s: abs(s.width / s.height - shape.width / shape.height), default=None)
            name = card.preset_name(nearest) if nearest else None
            cost += views.beyond_training_note(card.trained_pixels, views.preset_label(name, nearest) if name else None,
                                               lang)
        if mode == "tp" and prediction is not None and not prediction.get("refused"):
            cost += views.tp_group_note(tp, degree, lang)
        badges = self._badges(status, mode, steps, lang)
        # Generate waits while the cost line says the click would be refused (a bad size, a cold
        # shape under the lock); while the model loads it stays on: the click waits for the model.
        refused = error is not None or bool(prediction and prediction.get("refused"))
        return engine, cost, badges, tp_badge, gr.update(interactive=not refused), end_compile

    def _badges(self, status, mode: str, steps, lang: str) -> str:
        """One badge per preset: its state in ``mode`` (none until the model has loaded)."""
        if status["state"] in ("idle", "loading", "failed"):
            return views.badges_html([])
        steps = steps if isinstance(steps, (int, float)) and steps >= 1 else None
        return views.badges_html([(views.preset_label(n, s), self.manager.predict(mode, s, steps))
                                  for n, s in self.manager.card.presets], lang)

    @staticmethod
    def _system_views(status, lang: str = "en", operator: bool = True):
        tp = status.get("tp") or {}
        return (views.system_markdown(status, lang), views.shapes_frame(status, lang), views.warmup_markdown(status, lang),
                views.tp_state_html(tp, lang), views.tp_markdown(tp, lang),
                views.replicas_markdown(status, lang, operator), status)

    def refresh_plots(self, page: gr.Request | None = None):
        latency, compiles = views.latency_frame(self.manager.records), views.compile_frame(self.manager.status())
        latency_axes, compile_axes = views.plot_axes(language(page), latency.empty, compiles.empty)
        return gr.ScatterPlot(latency, **latency_axes), gr.BarPlot(compiles, **compile_axes)

    # PNG parameters --------------------------------------------------------------------------
    def load_png(self, path, page: gr.Request | None = None):
        """Fill the controls from a PNG's parameters: prompt, size, steps, guidance, seed, mode."""
        if not path:
            return (gr.skip(),) * 9
        lang = language(page)
        bounds = self.manager.settings  # the app's own bounds: a PNG it made at 80 of --max-steps 100 loads whole
        try:
            params = read_png_parameters(path, max_prompt=bounds.max_prompt_chars, max_steps=bounds.max_steps,
                                         max_guidance=bounds.max_guidance, min_size=bounds.min_size,
                                         max_size=bounds.max_size)
        except Exception:  # noqa: BLE001 - not a PNG (or a broken one): say so, change nothing
            raise gr.Error(text(lang, "err_not_png"), title=text(lang, "title_error")) from None
        if not params:
            _warning(lang, text(lang, "warn_no_params"))
            return (gr.skip(),) * 9
        width, height = params.get("width"), params.get("height")
        mode = params.get("mode")
        if mode not in self.manager.modes:
            mode = None
        return (
            params.get("prompt", gr.skip()),
            width if width else gr.skip(),
            height if height else gr.skip(),
            self.size_changed(width, height) if width and height else gr.skip(),
            params.get("steps", gr.skip()),
            params.get("guidance", gr.skip()),
            params.get("seed", gr.skip()),
            False if "seed" in params else gr.skip(),  # a loaded seed is meant to be reused
            mode or gr.skip(),
        )

    # tensor-parallel group: started and stopped only by its buttons, never by the mode list ---
    def show_tp_controls(self, mode, page: gr.Request | None = None):
        """Picking a mode only shows or hides this page's TP degree and the group's row (its state;
        Start/Stop for the operator); it starts and stops nothing. The degree is the operator's: a
        viewer's would do nothing."""
        operator = self._caller(page).is_operator
        return gr.update(visible=mode == "tp" and operator), gr.update(visible=mode == "tp")

    def page_opened(self):
        """A new page's TP degree: the running group's, so its Start does not replace it by accident."""
        tp = self.manager.status().get("tp") or {}
        if tp.get("state") in views.TP_RUNNING and tp.get("world_size"):
            return tp["world_size"], tp["world_size"]
        return gr.skip(), gr.skip()

    def page_role(self, page: gr.Request | None = None):
        """This page's role line, and whether its operator controls show (the backend refuses a
        viewer's operator events whatever the page shows). Returns the line, then one visibility
        update per operator control."""
        lang = language(page)
        operator = self._caller(page).is_operator
        line = text(lang, "role_operator" if operator else "role_viewer")
        return (line, *[gr.update(visible=operator) for _ in range(self.operator_controls)])

    def page_labels(self, page: gr.Request | None = None):
        """Words the browser's translation does not reach, set when the page opens, in its language:
        the image's label (gr.Image's block label shows "[object Object]" for an ``I18N`` key in
        Gradio 6.31) and, for a model with a prompt grammar, what it understands (from its card)."""
        lang = language(page)
        helps = self.manager.card.prompt_help(lang)
        return gr.update(label=text(lang, "image")), (gr.update(info=helps) if helps else gr.skip())

    @staticmethod
    def empty_compare_table(page: gr.Request | None = None):
        """The Compare tab's timings table before any comparison: its column names in the page's
        language, no rows (a bare Dataframe shows headers "1 2 3")."""
        return views.compare_frame([], language(page))

    def start_tp(self, degree, page: gr.Request | None = None) -> None:
        """Start the group with this page's degree (a running group of another degree is replaced)."""
        lang = language(page)
        wanted = _whole(degree, strict=True, lang=lang)
        before = self.manager.status().get("tp") or {}
        try:
            group = self.manager.start_engine(TP_ENGINE, wanted, caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        ranks = group.get("world_size", wanted)
        if before.get("state") in views.TP_RUNNING and before.get("world_size") == ranks:
            _info(lang, text(lang, "info_tp_already", state=views._tp_state(before["state"], lang), ranks=ranks))
        elif before.get("state") in views.TP_RUNNING:
            _info(lang, text(lang, "info_tp_replacing", old=before.get("world_size"), ranks=ranks))
        else:
            _info(lang, text(lang, "info_tp_starting", ranks=ranks))

    def stop_tp(self, page: gr.Request | None = None) -> None:
        """Stop the group; returns once no process of it is left (the timer shows "stopping" meanwhile)."""
        lang = language(page)
        caller = self._caller(page)
        try:
            caller.require_operator("Stopping the tensor-parallel group")
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        if ((self.manager.status().get("tp") or {}).get("state") or "stopped") == "stopped":
            _info(lang, text(lang, "info_tp_not_running"))
            return
        try:
            self.manager.stop_engine(TP_ENGINE, caller=caller)
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        _info(lang, text(lang, "info_tp_stopped"))

    def show_tp_logs(self, page: gr.Request | None = None) -> str:
        """The "Show rank logs" button: the logs are read now, only because someone asked."""
        lang = language(page)
        try:
            logs = self.manager.engine_logs(TP_ENGINE, lines=20, caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        return views.tp_logs_text(logs, lang)

    # replicas: started, resized and stopped only by their buttons (System tab) ---------------
    def start_replicas(self, count, page: gr.Request | None = None) -> str:
        """Start ``count`` replicas (a running pool of another size is replaced); checked, cores
        included, before anything starts."""
        lang = language(page)
        wanted = _whole(count, strict=True, lang=lang, field="replicas")
        try:
            pool = self.manager.start_engine(REPLICA_ENGINE, wanted, caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        _info(lang, text(lang, "info_replicas_starting", count=pool.get("size", wanted)))
        return views.replicas_markdown(self.manager.status(), lang)

    def stop_replicas(self, page: gr.Request | None = None) -> str:
        lang = language(page)
        try:
            running = (self.manager.status().get("replicas") or {}).get("size")
            self.manager.stop_engine(REPLICA_ENGINE, caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        _info(lang, text(lang, "info_replicas_stopped" if running else "info_replicas_not_running"))
        return views.replicas_markdown(self.manager.status(), lang)

    # system panel ----------------------------------------------------------------------------
    def clear_plan(self, page: gr.Request | None = None):
        """The clear button: what will be removed, and its size, before the operator confirms."""
        lang = language(page)
        try:
            plan = self.manager.cache_plan(caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        lines = [text(lang, "confirm_clear")] + [
            text(lang, "clear_plan_line", entries=c["entries"], mb=f"{c['remove_bytes'] / 1e6:.1f}", dir=c["dir"])
            for c in plan]
        return "\n".join(lines), gr.update(visible=True)

    # warm-start bundles ------------------------------------------------------------------------
    def export_bundle(self, page: gr.Request | None = None):
        """Export the warm in-process shapes as a bundle to download (the operator's)."""
        import os
        import shutil
        import tempfile
        import time as _time

        lang = language(page)
        caller = self._caller(page)
        try:
            caller.require_operator("Exporting a warm-start bundle")  # before anything is written
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        # In Gradio's temp folder (the app's own, removed at exit); gone at once if the export fails.
        folder = tempfile.mkdtemp(prefix="bundle-", dir=os.environ.get("GRADIO_TEMP_DIR") or None)
        path = os.path.join(folder, f"neuron-studio-{_time.strftime('%Y%m%d-%H%M%S')}.bundle")
        try:
            manifest = self.manager.export_bundle(path, caller=caller)
        except BaseException as exc:
            shutil.rmtree(folder, ignore_errors=True)
            if isinstance(exc, StudioError):
                raise _page_error(exc, lang) from None
            raise
        _info(lang, text(lang, "info_bundle_exported", entries=len(manifest.entries), files=len(manifest.files)))
        return path

    def show_bundle(self, path, page: gr.Request | None = None):
        """An uploaded bundle: its manifest and whether it applies here, then the confirm row."""
        from backend import bundles

        lang = language(page)
        try:
            self._caller(page).require_operator("Importing a warm-start bundle")
            manifest = bundles.read_manifest(path)
            mismatch = bundles.check(manifest, self.manager.bundle_manifest())
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        return views.bundle_markdown(manifest.to_json(), mismatch, lang), gr.update(visible=mismatch is None)

    def import_bundle(self, path, page: gr.Request | None = None) -> str:
        lang = language(page)
        try:
            result = self.manager.import_bundle(path, caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        _info(lang, text(lang, "info_bundle_imported", written=result["written"], already=result["already_there"]))
        return views.system_markdown(self.manager.status(), lang)

    def clear_cache(self, page: gr.Request | None = None) -> str:
        lang = language(page)
        try:
            freed = self.manager.clear_compile_cache(caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        _info(lang, text(lang, "info_cache_cleared", mb=f"{freed / 1e6:.1f}"))
        return views.system_markdown(self.manager.status(), lang)

    def set_warm_only(self, locked: bool, page: gr.Request | None = None) -> None:
        lang = language(page)
        try:
            self.manager.set_warm_only(bool(locked), caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        _info(lang, text(lang, "info_locked" if locked else "info_unlocked"))

    def start_warmup(self, labels: list[str], mode: str, page: gr.Request | None = None) -> str:
        lang = language(page)
        shapes = [s for s in (views.preset_shape(label, self.manager.card.presets) for label in labels or []) if s is not None]
        try:
            self.manager.start_warmup(shapes, mode, caller=self._caller(page))
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        return views.warmup_markdown(self.manager.status(), lang)

    # compare ---------------------------------------------------------------------------------
    def compare(self, prompt, width, height, steps, guidance, seed, randomize, modes,
                page: gr.Request | None = None, progress: Callable = gr.Progress()):
        lang = language(page)
        request = self._validate(prompt, width, height, (modes or ["eager"])[0], steps, guidance,
                                 -1 if randomize else seed, lang)
        adapter = self._progress_adapter(progress, lang)
        try:
            entries = self.manager.compare(request, modes or [], adapter, owner=getattr(page, "session_hash", None))
        except GenerationCancelled as exc:
            _info(lang, text(lang, "info_stopped", detail=exc))
            return gr.skip(), gr.skip()
        except StudioError as exc:
            raise _page_error(exc, lang) from None
        finally:
            adapter.close()
        gallery, table = [], []
        for e in entries:
            self.manager.save_image(e["image"], e["result"])
            r = e["result"]
            gallery.append((r.path, f"{views.mode_caption(r.to_json(), lang)} · {views._seconds(r.seconds)} · "
                                    f"max |Δ| {e['max_diff']}"))
            table.append({**e, "result": r.to_json()})
        return gallery, views.compare_frame(table, lang)
