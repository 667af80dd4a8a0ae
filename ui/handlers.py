"""The page's event handlers. They talk to the backend only through the manager's public methods.

Each handler turns the backend's StudioError into ``gr.Error`` (a message in the page, never a
generic "Error") and returns plain values, so tests can drive them with a fake manager.
"""

from __future__ import annotations

import threading
from typing import Callable

import gradio as gr

from backend.errors import GenerationCancelled, InvalidRequest, StudioError
from backend.pngmeta import read_png_parameters
from backend.shapes import PRESETS, validate_shape
from ui import views

HISTORY_KEEP = 24


def _noop_progress(*_args, **_kwargs) -> None:
    return None


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
        caption = f"{result.width}x{result.height} · {result.mode} · {views._seconds(result.seconds)}"
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

    def refresh_studio(self, mode, width, height, steps):
        """Engine line, cost of the chosen (mode, shape), and the preset badges for that mode."""
        return self._studio_views(self.manager.status(), mode, width, height, steps)

    def refresh_system(self):
        return self._system_views(self.manager.status())

    def refresh_all(self, mode, width, height, steps):
        """The timer's tick: one status read for both the studio line and the system panel."""
        status = self.manager.status()
        return self._studio_views(status, mode, width, height, steps) + self._system_views(status)

    def _studio_views(self, status, mode, width, height, steps):
        engine = views.engine_markdown(status)
        tp = status.get("tp") or {}
        if mode == "tp" and tp.get("state") != "ready":
            return engine, views.tp_cost_markdown(tp), views.badges_html([])
        try:
            bounds = self.manager.settings
            shape = validate_shape(height, width, bounds.min_size, bounds.max_size)
        except InvalidRequest as exc:
            shape, error = None, str(exc)
        else:
            error = None
        steps = steps if isinstance(steps, (int, float)) and steps >= 1 else None
        ready = status["state"] not in ("idle", "loading", "failed")
        cost = views.cost_markdown(self.manager.predict(mode, shape, steps) if ready and shape else None, error)
        badges = views.badges_html([(views.preset_label(n, s), self.manager.predict(mode, s, steps))
                                    for n, s in PRESETS]) if ready else views.badges_html([])
        return engine, cost, badges

    @staticmethod
    def _system_views(status):
        tp = status.get("tp") or {}
        return (views.system_markdown(status), views.shapes_frame(status), views.warmup_markdown(status),
                views.tp_markdown(tp), views.tp_logs(tp), status)

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

    # tensor parallel -------------------------------------------------------------------------
    def mode_changed(self, mode: str, degree) -> None:
        """Selecting tensor-parallel starts the worker group; selecting another mode stops it."""
        try:
            if mode == "tp":
                self.manager.start_tp(int(degree) if degree else None)
                gr.Info(f"Starting the tensor-parallel group ({int(degree or 0) or 'default'} ranks)…")
            elif (self.manager.status().get("tp") or {}).get("state") not in (None, "stopped", "dead"):
                threading.Thread(target=self.manager.stop_tp, name="tp-stop", daemon=True).start()
                gr.Info("Stopping the tensor-parallel group.")
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        except (TypeError, ValueError):
            raise gr.Error(f"tp_degree: must be a whole number, got {degree!r}") from None

    def restart_tp(self, degree) -> str:
        try:
            self.manager.stop_tp()
            self.manager.start_tp(int(degree) if degree else None)
        except StudioError as exc:
            raise gr.Error(str(exc)) from None
        except (TypeError, ValueError):
            raise gr.Error(f"tp_degree: must be a whole number, got {degree!r}") from None
        return views.tp_markdown(self.manager.status().get("tp") or {})

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
            gallery.append((r.path, f"{r.mode} · {views._seconds(r.seconds)} · max |Δ| {e['max_diff']}"))
            table.append({**e, "result": r.to_json()})
        return gallery, views.compare_frame(table)
