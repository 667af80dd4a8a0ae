"""A fake manager for UI handler tests: no model is loaded and nothing runs, but what the page reads
comes from the real manager's code.

Inside is a real ``backend.manager.Manager``, left the way ``Manager.start`` leaves it (state ready, the
CPU device, the tiny random-weight model's path and label, an in-process engine) except that the engine
is never loaded: only its ``describe()`` is used. What the fake does goes through the real manager's
structures:

- a fake generation is routed by the real ``_route`` (tensor-parallel group, degraded, "not running"),
  admitted by the real admission check (warm-only lock, graph limit), finished in the real compile
  table (``CompileTable.finish``, as ``Manager.generate`` calls it) and appended to the real records;
- the tensor-parallel group is a real ``backend.engines.worker_group.TPWorkerGroup`` (its constructor does the real
  degree check) that is never launched: its fields are set the way a launch, READY, a death and a stop
  set them, and its rank logs are files in its folder, read by the real ``rank_logs``.

So ``status()``, ``predict()``, ``validate()``, ``save_image()``, ``tp_logs()`` and the degraded sentence
are the real ones, and the handler tests follow them when they change. Only the device work is fake:
the images, the timings, warm-up (recorded, never run) and clearing the compile cache (recorded).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from PIL import Image

from backend.device import Device, resolve_device
from backend.engines.in_process import InProcessEngine
from backend.manager import Manager
from backend.model_source import resolve_model
from backend.records import GenerationResult
from backend.roles import LOCAL_OPERATOR
from backend.settings import EMBEDDED_RANDOM_MODEL, TP_MODE
from backend.engines.worker_group import STARTING, TPWorkerGroup
from tests.conftest import make_settings

# The tiny random-weight model (assets/tiny-flux2-klein).
RANDOM_MODEL = EMBEDDED_RANDOM_MODEL
# The fake's measured numbers: a run that compiles, and a steady one.
COMPILING_RUN = dict(compile_seconds=1.5, seconds=2.0, encode=0.1, denoise=1.8, decode=0.1)
STEADY_RUN = dict(compile_seconds=0.0, seconds=0.4, encode=0.1, denoise=0.2, decode=0.1)
# What each rank reports at READY (backend.tp.worker.shard_report), with made-up pids 11, 12, ...
RANK_PID = 11
LOAD_SECONDS, WARM_SECONDS = 2.0, 0.5


def _clock() -> float:
    """One fixed instant: nothing in a status depends on how long a test took."""
    return 1000.0


class FakeManager:
    def __init__(self, tmp_path, **settings):
        self.settings = make_settings(tmp_path, **{"model": RANDOM_MODEL, **settings})
        self._tmp = Path(tmp_path)
        real = self._real = Manager(self.settings, clock=_clock)
        # What Manager._start sets up, without loading the model.
        real.device = Device(resolve_device(self.settings), self.settings.max_compiled_shapes,
                             self.settings.neuron_instance_cores)
        # The model's folder and label as Manager._start resolves them (only its configs are read).
        real.model_path, real.model_label = resolve_model(self.settings.model, self.settings.cache_dir)
        real.engine = InProcessEngine(real.device, real.model_path)  # constructed, never loaded
        real.state = "ready"
        real._ready.set()
        self.calls: list[tuple] = []
        self.raise_on_generate: Exception | None = None
        self.progress_events = []

    # what the page reads: the real manager's ----------------------------------------------------
    @property
    def modes(self) -> tuple[str, ...]:
        return self._real.modes

    @property
    def warm_only(self) -> bool:
        return self._real.warm_only

    @property
    def records(self) -> list[GenerationResult]:
        return self._real.records

    @property
    def warm(self) -> set:
        """(mode, shape) pairs the real compile table holds warm."""
        return {(mode, shape) for mode in self.modes for shape in self._real.table.warm_shapes(mode)}

    @property
    def tp(self) -> dict | None:
        """The group's ``describe()``; None until the first start."""
        return self._real.tp.describe() if self._real.tp is not None else None

    def status(self):
        return self._real.status()

    def validate(self, prompt, height, width, steps=None, guidance=None, seed=None, mode=None):
        return self._real.validate(prompt, height, width, steps=steps, guidance=guidance, seed=seed, mode=mode)

    def predict(self, mode, shape, steps=None):
        return self._real.predict(mode, shape, steps)

    def save_image(self, image, result):
        return self._real.save_image(image, result)

    def set_warm_only(self, locked, *, caller=LOCAL_OPERATOR):
        self._real.set_warm_only(locked, caller=caller)

    def cancel(self, *, caller=LOCAL_OPERATOR):
        self.calls.append(("cancel",))
        return self._real.cancel(caller=caller)

    # generation: the real routing, admission, compile table and records; a fake image ----------
    def generate(self, request, progress=None, owner=None, still_wanted=None):
        self.calls.append(("generate", request))
        if self.raise_on_generate:
            raise self.raise_on_generate
        real = self._real
        _engine, run, degraded = real._route(request)
        shape = run.shape
        prediction = real.admission.predict(real.device, run.mode, shape, run.steps, False)
        real.admission.check(prediction, locked=real.warm_only)
        for event in self.progress_events:
            if event.phase == "compiling":
                real.table.mark_compiling(run.mode, shape)
            if progress is not None:
                progress(event)
        compiles = int(prediction["will_compile"])
        timings = COMPILING_RUN if compiles else STEADY_RUN
        real.table.finish(run.mode, shape, compiles=compiles, steps=run.steps, **timings)
        result = GenerationResult(
            prompt=run.prompt, width=run.width, height=run.height, mode=run.mode, steps=run.steps,
            guidance=run.guidance, seed=run.seed, device=real.device.kind, model=real.model_label or "",
            compiled=bool(compiles), compiles=compiles, **timings,
            world_size=real.tp.degree if run.mode == TP_MODE else 1,
            requested_mode=request.mode if degraded else None, degraded=degraded)
        real.records.append(result)
        color = {"eager": (200, 0, 0), "compiled": (201, 0, 0), "regional": (205, 0, 0), "tp": (200, 0, 0)}[run.mode]
        return Image.new("RGB", (run.width, run.height), color), result

    def compare(self, request, modes, progress=None):
        first, entries = None, []
        for mode in modes:
            image, result = self.generate(dataclasses.replace(request, mode=mode), progress)
            value = image.getpixel((0, 0))[0]
            first = value if first is None else first
            entries.append({"mode": mode, "image": image, "result": result, "max_diff": abs(value - first)})
        return entries

    def start_warmup(self, shapes, mode=None, *, caller=LOCAL_OPERATOR):
        caller.require_operator("Warming up shapes")
        self.calls.append(("warmup", tuple(shapes), mode))

    def export_bundle(self, path, pairs=None, *, caller=LOCAL_OPERATOR):
        return self._real.export_bundle(path, pairs, caller=caller)

    def import_bundle(self, path, *, caller=LOCAL_OPERATOR):
        return self._real.import_bundle(path, caller=caller)

    def bundle_manifest(self, entries=None):
        return self._real.bundle_manifest(entries)

    def cache_plan(self, *, caller=LOCAL_OPERATOR):
        return self._real.cache_plan(caller=caller)

    def clear_compile_cache(self, *, caller=LOCAL_OPERATOR):
        caller.require_operator("Clearing the compile cache")
        self.calls.append(("clear",))
        return 5_000_000

    # tensor-parallel group: a real TPWorkerGroup, never launched --------------------------------
    def start_tp(self, degree=None, wait=False, *, caller=LOCAL_OPERATOR):
        """Manager.start_tp, with the launch replaced by what TPWorkerGroup.start sets."""
        caller.require_operator("Starting the tensor-parallel group")
        self.calls.append(("start_tp", degree))
        real = self._real
        group = real.tp
        if group is not None and group.degree == (degree or self.settings.tp_degree) \
                and group.state in STARTING + ("ready",):
            return group.describe()
        running = TPWorkerGroup(self.settings, real.model_path, real.device, degree, clock=_clock)
        if group is not None:
            group.close()
        real.tp = running
        real.table.forget(TP_MODE)
        self._launch(running)
        return running.describe()

    def _launch(self, group: TPWorkerGroup) -> None:
        """What TPWorkerGroup.start sets, and what torchrun and each rank write first, without a process."""
        group.dir = tempfile.mkdtemp(prefix="neuron-studio-tp-", dir=self._tmp)
        group.socket_path = str(Path(group.dir) / "tp.sock")
        group.error = group.last_request_error = None
        group.timings, group.ranks, group._pids = {}, [], set()
        group.state = "launching"
        Path(group.dir, "torchrun.log").write_text("")
        for r in range(group.degree):
            Path(group.dir, f"rank{r}.log").write_text(f"rank {r}/{group.degree} starting (pid {RANK_PID + r})\n")

    def stop_tp(self, *, caller=LOCAL_OPERATOR):
        caller.require_operator("Stopping the tensor-parallel group")
        """Manager.stop_tp: the group ends ``stopped``, keeping what it last reported (as stop() does)."""
        self.calls.append(("stop_tp",))
        if self._real.tp is not None:
            self._real.tp.state = "stopped"

    def set_tp(self, state, **fields):
        """Test helper: put the group in ``state`` (starting it first if it never was); ``fields`` are
        the group's attributes (``error=``). "ready" sets what READY carries (as _await_ready does)."""
        if self._real.tp is None:
            self.start_tp()
            self.calls.pop()
        group = self._real.tp
        for name, value in fields.items():
            setattr(group, name, value)
        group.state = state
        if state == "ready":
            n = group.degree
            group.timings = {"load": LOAD_SECONDS, "warm": WARM_SECONDS, "warm_shapes": []}
            group.ranks = [{"rank": r, "pid": RANK_PID + r, "core": None, "device": "cpu", "transformer_bytes": 3 * 2**20,
                            "sharded_bytes": 2 * 2**20, "replicated_bytes": 2**20,
                            "sharded": [{"name": "blocks.0.attn.to_q.weight", "global_shape": [64, 64],
                                         "local_shape": [64 // n, 64], "dim": 0}] * 6} for r in range(n)]
            group._pids = {int(r["pid"]) for r in group.ranks}

    def tp_logs(self, lines=20, *, caller=LOCAL_OPERATOR):
        logs = self._real.tp_logs(lines, caller=caller)
        self.calls.append(("tp_logs", lines))
        return logs
