"""The page's event handlers. They talk to the backend only through the manager's public methods.

Each handler turns the backend's StudioError into ``gr.Error`` (a message in the page, never a
generic "Error") and returns plain values, so tests can drive them with a fake manager.
"""

from __future__ import annotations

import math
from typing import Callable

import gradio as gr

from backend.errors import GenerationCancelled, InvalidRequest, StudioError
from backend.pngmeta import read_png_parameters
from backend.shapes import PRESETS, validate_shape
from ui import views

HISTORY_KEEP = 24


def _noop_progress(*_args, **_kwargs) -> None:
    return None


def _whole(value, strict: bool = False) -> int | None:
    """A TP degree from a Number box: a whole number, or None (the default degree). With ``strict``
    anything else is a page error naming the field; without, it is ignored (for the status views)."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number != int(number):
        if strict:
            raise gr.Error(f"tp_degree: must be a whole number, got {value!r}")
        return None
    return int(number)


class Studio:
    """Handlers bound to one manager (real or fake)."""

    def __init__(self, manager):
        self.manager = manager

    # helpers ---------------------------------------------------------------------------------
    def _validate(self, prompt, width, height, mode, steps, guidance, seed):
        try:
            return self.manager.validate(prompt, height, width, steps=steps, guidance=guidance,
                                         seed=seed, mode=mode)
        except StudioError as exc:
            raise gr.Error(str(exc)) from None

    @staticmethod
    def _progress_adapter(progress: Callable) -> Callable:
        def on_progress(event) -> None:
            if event.phase == "denoising":
                progress((event.step, event.steps), desc=f"denoising step {event.step}/{event.steps}")
            elif event.phase in ("encoding", "compiling", "decoding"):
                progress(None if event.phase == "compiling" else 0.0 if event.phase == "encoding" else 1.0,
                         desc=f"{event.phase}…")
        return on_progress

    def _run(self, request, progress: Callable):
        try:
            image, result = self.manager.generate(request, self._progress_adapter(progress))
        except GenerationCancelled as exc:
            gr.Info(f"Stopped: {exc}")
            return None
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        self.manager.save_image(image, result)
        if result.degraded:
            gr.Warning(result.degraded)
        return result

    # generate / stop -------------------------------------------------------------------------
    def generate_from_page(self, prompt, width, height, mode, steps, guidance, seed, randomize, history,
                 progress: Callable = _noop_progress):
        """The Generate button: returns image, run line, record, used seed, gallery, history state."""
        request = self._validate(prompt, width, height, mode, steps, guidance, -1 if randomize else seed)
        result = self._run(request, progress)
        if result is None:
            return (gr.skip(), f"**Stopped** before the image was finished (seed `{request.seed}`).", gr.skip(),
                    gr.skip(), gr.skip(), gr.skip())
        record = result.to_json()
        caption = (f"{result.width}x{result.height} · {views.mode_caption(record)} · "
                   f"{views._seconds(result.seconds)}")
        history = ([(result.path, caption)] + list(history or []))[:HISTORY_KEEP]
        return result.path, views.run_markdown(record), record, result.seed, history, history

    def api_generate(self, prompt, width, height, mode, steps, seed, guidance,
                     progress: Callable = _noop_progress):
        """Public API: (prompt, width, height, mode, steps, seed, guidance) -> (PNG, JSON record)."""
        request = self._validate(prompt, width, height, mode, steps, guidance, seed)
        result = self._run(request, progress)
        if result is None:
            raise gr.Error("the generation was stopped")
        # The PNG itself is the first output; the server-side path means nothing to a remote
        # client (and gradio_client would mistake a dict with a "path" key for a file).
        record = result.to_json()
        record.pop("path")
        return result.path, record

    def stop(self) -> None:
        if self.manager.cancel():
            gr.Info("Stopping at the next denoising step…")
        else:
            gr.Info("Nothing is running.")

    # controls --------------------------------------------------------------------------------
    @staticmethod
    def preset_changed(label: str, width, height):
        shape = views.preset_shape(label)
        if shape is None:
            return gr.skip(), gr.skip()
        return shape.width, shape.height

    @staticmethod
    def size_changed(width, height) -> str:
        for name, shape in PRESETS:
            if (shape.width, shape.height) == (width, height):
                return views.preset_label(name, shape)
        return views.CUSTOM

    def refresh_studio(self, mode, width, height, steps, degree=None):
        """Engine line, cost of the chosen (mode, shape), preset badges for that mode, TP group badge."""
        return self._studio_views(self.manager.status(), mode, width, height, steps, degree)

    def refresh_system(self):
        return self._system_views(self.manager.status())

    def refresh_all(self, mode, width, height, steps, degree=None):
        """The timer's tick: one status read for both the studio line and the system panel. It reads
        no rank logs: those are read only when someone presses "Show rank logs"."""
        status = self.manager.status()
        return self._studio_views(status, mode, width, height, steps, degree) + self._system_views(status)

    def _studio_views(self, status, mode, width, height, steps, degree=None):
        engine = views.engine_markdown(status)
        tp = status.get("tp") or {}
        tp_badge = views.tp_state_html(tp)
        degree = _whole(degree)
        if mode == "tp" and tp.get("state") != "ready":
            cost = views.tp_cost_markdown(tp, degree, status.get("degraded"))
            return engine, cost, views.badges_html([]), tp_badge
        try:
            bounds = self.manager.settings
            shape = validate_shape(height, width, bounds.min_size, bounds.max_size)
        except InvalidRequest as exc:
            shape, error = None, str(exc)
        else:
            error = None
        steps = steps if isinstance(steps, (int, float)) and steps >= 1 else None
        ready = status["state"] not in ("idle", "loading", "failed")
        prediction = self.manager.predict(mode, shape, steps) if ready and shape else None
        cost = views.cost_markdown(prediction, error)
        if mode == "tp" and prediction is not None and not prediction.get("refused"):
            cost += views.tp_group_note(tp, degree)
        badges = views.badges_html([(views.preset_label(n, s), self.manager.predict(mode, s, steps))
                                    for n, s in PRESETS]) if ready else views.badges_html([])
        return engine, cost, badges, tp_badge

    @staticmethod
    def _system_views(status):
        tp = status.get("tp") or {}
        return (views.system_markdown(status), views.shapes_frame(status), views.warmup_markdown(status),
                views.tp_state_html(tp), views.tp_markdown(tp), status)

    def refresh_plots(self):
        return views.latency_frame(self.manager.records), views.compile_frame(self.manager.status())

    # PNG parameters --------------------------------------------------------------------------
    def load_png(self, path):
        """Fill the controls from a PNG's parameters: prompt, size, steps, guidance, seed, mode."""
        if not path:
            return (gr.skip(),) * 9
        try:
            params = read_png_parameters(path)
        except Exception:  # noqa: BLE001 - not a PNG (or a broken one): say so, change nothing
            raise gr.Error("That file is not a readable PNG.") from None
        if not params:
            gr.Warning("This PNG carries no generation parameters.")
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
    @staticmethod
    def show_tp_controls(mode):
        """Picking a mode only shows or hides this page's TP degree and Start/Stop; it starts and stops
        nothing."""
        return gr.update(visible=mode == "tp"), gr.update(visible=mode == "tp")

    def page_opened(self):
        """A new page's TP degree: the running group's, so its Start does not replace it by accident."""
        tp = self.manager.status().get("tp") or {}
        if tp.get("state") in views.TP_RUNNING and tp.get("world_size"):
            return tp["world_size"], tp["world_size"]
        return gr.skip(), gr.skip()

    def start_tp(self, degree) -> None:
        """Start the group with this page's degree (a running group of another degree is replaced)."""
        wanted = _whole(degree, strict=True)
        before = self.manager.status().get("tp") or {}
        try:
            group = self.manager.start_tp(wanted)
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        ranks = group.get("world_size", wanted)
        if before.get("state") in views.TP_RUNNING and before.get("world_size") == ranks:
            gr.Info(f"The tensor-parallel group is already {before['state']} with {ranks} ranks.")
        elif before.get("state") in views.TP_RUNNING:
            gr.Info(f"Replacing the {before.get('world_size')}-rank tensor-parallel group with {ranks} ranks…")
        else:
            gr.Info(f"Starting the tensor-parallel group ({ranks} ranks)…")

    def stop_tp(self) -> None:
        """Stop the group; returns once no process of it is left (the timer shows "stopping" meanwhile)."""
        if ((self.manager.status().get("tp") or {}).get("state") or "stopped") == "stopped":
            gr.Info("The tensor-parallel group is not running.")
            return
        try:
            self.manager.stop_tp()
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        gr.Info("The tensor-parallel group is stopped.")

    def show_tp_logs(self) -> str:
        """The "Show rank logs" button: the logs are read now, only because someone asked."""
        return views.tp_logs_text(self.manager.tp_logs(lines=20))

    # system panel ----------------------------------------------------------------------------
    def clear_cache(self) -> str:
        try:
            freed = self.manager.clear_compile_cache()
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        gr.Info(f"Compile cache cleared ({freed / 1e6:.1f} MB).")
        return views.system_markdown(self.manager.status())

    def set_warm_only(self, locked: bool) -> None:
        self.manager.set_warm_only(bool(locked))
        gr.Info("Locked to warm shapes." if locked else "New shapes may compile again.")

    def start_warmup(self, labels: list[str], mode: str) -> str:
        shapes = [s for s in (views.preset_shape(label) for label in labels or []) if s is not None]
        try:
            self.manager.start_warmup(shapes, mode)
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        return views.warmup_markdown(self.manager.status())

    # compare ---------------------------------------------------------------------------------
    def compare(self, prompt, width, height, steps, guidance, seed, randomize, modes,
                progress: Callable = _noop_progress):
        request = self._validate(prompt, width, height, (modes or ["eager"])[0], steps, guidance,
                                 -1 if randomize else seed)
        try:
            entries = self.manager.compare(request, modes or [], self._progress_adapter(progress))
        except GenerationCancelled as exc:
            gr.Info(f"Stopped: {exc}")
            return gr.skip(), gr.skip()
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        gallery, table = [], []
        for e in entries:
            self.manager.save_image(e["image"], e["result"])
            r = e["result"]
            gallery.append((r.path, f"{views.mode_caption(r.to_json())} · {views._seconds(r.seconds)} · "
                                    f"max |Δ| {e['max_diff']}"))
            table.append({**e, "result": r.to_json()})
        return gallery, views.compare_frame(table)
