"""The System tab's handlers, the operator's (the manager refuses a viewer's), and the tab's views."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import gradio as gr

from ui.handlers_base import REPLICA_ENGINE, TP_ENGINE, Door, _whole, refusals
from ui.i18n import language, text
from ui.temp_dir import discard_upload
from ui.views_common import preset_shape
from ui.views_system import (
    bundle_markdown,
    ray_markdown,
    replicas_markdown,
    shapes_frame,
    system_markdown,
    warmup_markdown,
)
from ui.views_tp import TP_RUNNING, tp_logs_text, tp_markdown, tp_state_html, tp_state_name


class SystemTab:
    def __init__(self, door: Door):
        self.door, self.manager, self.key = door, door.manager, door.key

    @staticmethod
    def views(status, lang: str = "en", operator: bool = True):
        tp = status.tp or {}
        return (system_markdown(status, lang), shapes_frame(status.shapes, lang), warmup_markdown(status, lang),
                tp_state_html(tp, lang), tp_markdown(tp, lang),
                replicas_markdown(status, lang, operator), ray_markdown(status, lang), status.to_json())

    def start_tp(self, degree, page: gr.Request | None = None) -> None:
        """Start the group with this page's degree (a running group of another degree is replaced)."""
        lang = language(page)
        wanted = _whole(degree, strict=True, lang=lang)
        before = self.manager.status().tp or {}
        ranks = self.door.call(page, self.manager.start_engine, TP_ENGINE, wanted).get("world_size", wanted)
        if before.get("state") not in TP_RUNNING:
            self.door.info(page, "info_tp_starting", ranks=ranks)
        elif before.get("world_size") == ranks:
            self.door.info(page, "info_tp_already", state=tp_state_name(before["state"], lang), ranks=ranks)
        else:
            self.door.info(page, "info_tp_replacing", old=before.get("world_size"), ranks=ranks)

    def stop_tp(self, page: gr.Request | None = None) -> None:
        """Returns once no process of the group is left (the timer shows "stopping" meanwhile)."""
        self.door.require_operator(page, "Stopping the tensor-parallel group")
        if ((self.manager.status().tp or {}).get("state") or "stopped") == "stopped":
            self.door.info(page, "info_tp_not_running")
            return
        self.door.call(page, self.manager.stop_engine, TP_ENGINE)
        self.door.info(page, "info_tp_stopped")

    def show_tp_logs(self, page: gr.Request | None = None) -> str:
        """The logs are read now, only because someone asked."""
        return tp_logs_text(self.door.call(page, self.manager.engine_logs, TP_ENGINE, lines=20), language(page))

    def start_replicas(self, count, page: gr.Request | None = None) -> str:
        """A running pool of another size is replaced; checked, cores included, before anything starts."""
        lang = language(page)
        wanted = _whole(count, strict=True, lang=lang, field="replicas")
        pool = self.door.call(page, self.manager.start_engine, REPLICA_ENGINE, wanted)
        self.door.info(page, "info_replicas_starting", count=pool.get("size", wanted))
        return replicas_markdown(self.manager.status(), lang)

    def stop_replicas(self, page: gr.Request | None = None) -> str:
        running = (self.manager.status().replicas or {}).get("size")
        self.door.call(page, self.manager.stop_engine, REPLICA_ENGINE)
        self.door.info(page, "info_replicas_stopped" if running else "info_replicas_not_running")
        return replicas_markdown(self.manager.status(), language(page))

    def log_out(self, page: gr.Request | None = None) -> None:
        """A new operator key: this page and the old link are a viewer's from now on; the new link is
        printed where the app was started."""
        self.door.require_operator(page, "Logging out")
        self.key.rotate()
        link = self.key.link(getattr(self.key, "base_url", "") or "")
        print("the operator logged out" + (f"; the new operator link: {link}" if link else ""), flush=True)

    def clear_plan(self, page: gr.Request | None = None):
        lang = language(page)
        lines = [text(lang, "clear_plan_line", entries=c["entries"], mb=f"{c['remove_bytes'] / 1e6:.1f}", dir=c["dir"])
                 for c in self.door.call(page, self.manager.cache_plan)]
        return "\n".join([text(lang, "confirm_clear"), *lines]), gr.update(visible=True)

    def export_bundle(self, page: gr.Request | None = None):
        self.door.require_operator(page, "Exporting a warm-start bundle")  # before anything is written
        # In Gradio's temp folder (the app's own, removed at exit); gone at once if the export fails.
        folder = tempfile.mkdtemp(prefix="bundle-", dir=os.environ.get("GRADIO_TEMP_DIR") or None)
        path = os.path.join(folder, f"neuron-studio-{time.strftime('%Y%m%d-%H%M%S')}.bundle")
        try:
            manifest = self.door.call(page, self.manager.export_bundle, path)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self.door.info(page, "info_bundle_exported", entries=len(manifest.entries), files=len(manifest.files))
        return path

    def show_bundle(self, path, page: gr.Request | None = None):
        from backend.caches import bundles

        lang = language(page)
        with refusals(lang):
            try:
                self.door.caller(page).require_operator("Importing a warm-start bundle")
            except Exception:
                discard_upload(path)  # a viewer's upload is not kept
                raise
            manifest = bundles.read_manifest(path)
            mismatch = bundles.check(manifest, self.manager.bundle_manifest())
        return bundle_markdown(manifest.to_json(), mismatch, lang), gr.update(visible=mismatch is None)

    def import_bundle(self, path, page: gr.Request | None = None) -> str:
        try:
            result = self.door.call(page, self.manager.import_bundle, path)
        finally:
            discard_upload(path)  # imported or refused: the upload is not kept
        self.door.info(page, "info_bundle_imported", written=result["written"], already=result["already_there"])
        return system_markdown(self.manager.status(), language(page))

    def clear_cache(self, page: gr.Request | None = None) -> str:
        freed = self.door.call(page, self.manager.clear_compile_cache)
        self.door.info(page, "info_cache_cleared", mb=f"{freed / 1e6:.1f}")
        return system_markdown(self.manager.status(), language(page))

    def set_warm_only(self, locked: bool, page: gr.Request | None = None) -> None:
        self.door.call(page, self.manager.set_warm_only, bool(locked))
        self.door.info(page, "info_locked" if locked else "info_unlocked")

    def start_warmup(self, labels: list[str], mode: str, page: gr.Request | None = None) -> str:
        shapes = [s for s in (preset_shape(label, self.manager.card.presets) for label in labels or [])
                  if s is not None]
        self.door.call(page, self.manager.start_warmup, shapes, mode)
        return warmup_markdown(self.manager.status(), language(page))
