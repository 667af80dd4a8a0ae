"""Fakes behind the engine seam, so the page's handler tests drive the real ``Manager``.

The manager, its routing, admission, compile table, records, warm-ups, status, roles, cache
clearing and bundles are the real ones (``start_manager`` builds and starts a real ``Manager`` on
the CPU with the tiny random-weight model). Only what a UI test need not run is faked, at the two
seams the backend offers:

- ``FakeEngine`` (``Manager(engine_factory=...)``) is the in-process engine without a pipeline: a
  run computes nothing and returns a small image of one colour per mode, with fixed timings;
- ``FakeLaunches`` (an engine's ``group_factory``) stands in for torchrun: it makes
  ``FakeWorkerGroup``s, real ``WorkerGroup``s whose start, stop and run set the fields the way a
  launch, READY, a death and a stop set them, with no process; their rank logs are files in a tmp
  folder, read by the real ``WorkerGroup.rank_logs``.

Nothing here sleeps for a duration: a test that needs a run in flight holds it at a step
(``FakeEngine.hold``) and waits for that state; a background warm-up is waited for with ``until``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from PIL import Image

from backend.engines.in_process import WOULD_COMPILE, InProcessEngine
from backend.errors import GenerationCancelled, GroupDead, ShapeLocked
from backend.launch.group import STARTING, WorkerGroup
from backend.request.records import EngineOutput, GenerationRequest, ProgressEvent
from backend.serving.compile_state import COMPILED_MODES
from backend.serving.status import Status
from backend.settings import EMBEDDED_RANDOM_MODEL

# The fakes' measured numbers: a run that compiles, and a steady one (4 steps: 0.1 + 4 x 0.05 + 0.1 s).
COMPILING_RUN = dict(compile_seconds=1.5, seconds=2.0, encode=0.1, denoise=1.8, decode=0.1)
STEADY_RUN = dict(compile_seconds=0.0, seconds=0.4, encode=0.1, denoise=0.2, decode=0.1)
# One colour per mode: a compare of eager, compiled and regional differs by 0, 1 and 5.
COLOURS = {"eager": (200, 0, 0), "compiled": (201, 0, 0), "regional": (205, 0, 0), "tp": (200, 0, 0)}
# What READY carries (backend.workers.worker.shard_report): made-up pids, never signalled (no fake kills).
RANK_PID, REPLICA_PID = 11, 31
LOAD_SECONDS, WARM_SECONDS = 2.0, 0.5
ROUND_TRIP_EXTRA = 0.005  # a worker call's socket overhead, as the group measures it
WAIT = 60.0  # the most a test waits for a state it expects (a bound against hanging, never a pause)


def _fixed_clock() -> float:
    """One instant: nothing a status says depends on how long a test took."""
    return 1000.0


def until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Wait for a state (a background warm-up finishing); fails the test if it never comes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.005)


def _compiles(graphs: set, mode: str, request: GenerationRequest) -> bool:
    """Dynamo's rule on this device, as the fakes keep it: a compiled mode builds a graph the first
    time it meets a (batch, image-token count), and eager builds none."""
    return mode in COMPILED_MODES and (mode, request.shape.graph_key) not in graphs


def _steps(request: GenerationRequest, emit: Callable[..., None], should_stop: Callable[[], bool],
           compiles: bool, at_step: Callable[[int], None] = lambda step: None) -> None:
    """The progress a real run reports, in its order: encoding, denoising 0, (compiling: the first
    transformer call), each step, decoding, done; stopped at a step boundary as the pipeline is."""
    if should_stop():
        raise GenerationCancelled("stopped before it started")
    emit("encoding")
    emit("denoising", 0)
    if compiles:
        emit("compiling")
        at_step(0)  # a hold at step 0 is a hold while it compiles
    for step in range(1, request.steps + 1):
        emit("denoising", step)
        at_step(step)
        if should_stop():
            timings = COMPILING_RUN if compiles else STEADY_RUN
            raise GenerationCancelled(f"stopped after step {step} of {request.steps}", compiles=int(compiles),
                                      compile_seconds=timings["compile_seconds"], neff_compiles=0)
    emit("decoding", request.steps)
    emit("done", request.steps)


class FakeEngine(InProcessEngine):
    """The in-process engine with no pipeline: stands in for the device work (loading the model,
    denoising, compiling) that a UI test need not run. Its route, places, capacity, exclusive lock
    and queueing are the real engine's; ``_load`` and ``_run`` are fake.

    A run in a compiled mode "compiles" the first time the engine meets its image-token count (the
    engine remembers its own graphs, as dynamo does; the manager's compile table learns it from the
    run), and returns ``COMPILING_RUN`` or ``STEADY_RUN`` timings and a ``COLOURS[mode]`` image.
    ``fail_with``: an error every run raises (after encoding) while it is set. ``hold``: a run held
    after a step, so a test can act while it is in flight."""

    def __init__(self, device, model_path: str):
        super().__init__(device, model_path)
        self.graphs: set[tuple[str, int]] = set()
        self.fail_with: Exception | None = None
        self._hold_at: int | None = None
        self._held = threading.Event()
        self._resume = threading.Event()

    def _load(self) -> None:
        self.pipe = object()  # loaded: the state says ready; nothing is read from the model folder
        self._variants = {"eager": []}
        self.active_mode = "eager"
        self.load_seconds = LOAD_SECONDS

    def _run(self, request, on_progress, should_stop, forbid_compile, decode, image_as="pil") -> EngineOutput:
        def emit(phase: str, step: int = 0) -> None:
            on_progress(ProgressEvent(phase, step, request.steps, request.mode, str(request.shape)))

        def at_step(step: int) -> None:
            if step == self._hold_at:
                self._held.set()
                self._resume.wait(WAIT)

        compiles = _compiles(self.graphs, request.mode, request)
        if compiles and forbid_compile:  # what torch's fail_on_recompile stance makes of it
            raise ShapeLocked(WOULD_COMPILE)
        self.active_mode = request.mode
        self._variants.setdefault(request.mode, [])
        if self.fail_with is not None:
            emit("encoding")
            raise self.fail_with
        _steps(request, emit, should_stop, compiles, at_step)
        if compiles:
            self.graphs.add((request.mode, request.shape.graph_key))
        images = [Image.new("RGB", (request.width, request.height), COLOURS[request.mode]) if decode else None
                  for _ in range(request.count)]  # a batch: one image per count
        return EngineOutput(image=images[0], more_images=images[1:], compiles=int(compiles), neff_compiles=0,
                            **(COMPILING_RUN if compiles else STEADY_RUN))

    @contextlib.contextmanager
    def hold(self, work: Callable[[], Any], after_step: int = 1) -> Iterator[dict[str, Any]]:
        """Run ``work`` (a call that generates) in a thread, held after denoising step ``after_step``
        until the block ends; yields a dict that then has its "result" or its "error"."""
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = work()
            except Exception as exc:  # noqa: BLE001 - handed to the test
                outcome["error"] = exc

        self._hold_at = after_step
        self._held.clear()
        self._resume.clear()
        thread = threading.Thread(target=run, name="held-run", daemon=True)
        thread.start()
        try:
            if not self._held.wait(WAIT):
                raise AssertionError(f"the run never reached step {after_step}: {outcome}")
            yield outcome
        finally:
            self._hold_at = None
            self._resume.set()
            thread.join(WAIT)
        assert not thread.is_alive(), "the held run never finished"


class FakeProcess:
    """Stands in for the torchrun launcher process a UI test does not start: its pid, nothing else."""

    def __init__(self, pid: int):
        self.pid = pid


class FakeWorkerGroup(WorkerGroup):
    """A worker group that never launches a process: stands in for torchrun and its ranks (loading
    the model in each, READY, the socket, signals), which a UI test need not run. Everything but
    the processes is the real group's — its state machine included (``start``, ``stop``, ``close``,
    the READY and exit transitions): this double replaces only the three steps that touch
    processes (``_spawn``, ``_watch``, ``_end_processes``) and drives the real transitions where a
    process would (``ready``, ``die``), so a test passes only while the real lifecycle does.

    ``_spawn`` writes each rank's first log line in the run dir; ``_watch`` says READY at once
    unless its ``FakeLaunches`` holds starts; ``phase`` is what a health reply sets during the
    start. ``log_reads`` counts reads of its log files. ``at_step``: called at each step (0: while
    it compiles); a group stopped meanwhile fails the run with ``GroupDead``, as the real group's
    call does when its socket closes."""

    def __init__(self, *args, launches: "FakeLaunches", **kwargs):
        super().__init__(*args, **kwargs)
        self._launches = launches
        self.run_root = str(launches.root)
        self.graphs: set[tuple[str, int]] = set()
        self.log_reads = 0
        self.at_step: Callable[[int], None] = lambda step: None

    def _pid_base(self) -> int:
        if self.role == "tp":
            return RANK_PID
        earlier = sum(1 for g in self._launches.made if g.place == self.place and g is not self)
        return REPLICA_PID + int(self.place.rsplit(" ", 1)[-1]) + 10 * earlier

    # the steps that touch processes ---------------------------------------------------------------
    def _spawn(self) -> FakeProcess:
        self.graphs = set()
        Path(self.dir, "torchrun.log").write_text("")
        for r in range(self.degree):
            Path(self.dir, f"rank{r}.log").write_text(f"rank {r}/{self.degree} starting (pid {self._pid_base() + r})\n")
        return FakeProcess(self._pid_base() + 100)

    def _watch(self, proc) -> None:
        if not self._launches.hold:
            self.ready()

    def _end_processes(self, proc, polite: bool) -> set[int]:
        return set(self._pids)

    # what a process would do: the real transitions, driven -------------------------------------
    def ready(self) -> None:
        """READY from rank 0: timings, and per rank its pid, core and the weights it holds."""
        n, base = self.degree, self._pid_base()
        ranks = [{"rank": r, "pid": base + r, "core": self.cores[r] if self.cores else None,
                  "device": self.device_kind, "transformer_bytes": 3 * 2**20,
                  "sharded_bytes": 2 * 2**20, "replicated_bytes": 2**20,
                  "sharded": [{"name": "blocks.0.attn.to_q.weight", "global_shape": [64, 64],
                               "local_shape": [64 // n, 64], "dim": 0}] * 6} for r in range(n)]
        timings = {"load": LOAD_SECONDS, "warm": WARM_SECONDS, "warm_shapes": list(self._config.warm)}
        self._became_ready(self.proc, timings, ranks)
        self._ready.set()

    def phase(self, state: str) -> None:
        """What rank 0 says while the group starts: ``loading`` or ``warming`` (the real transition)."""
        assert state in STARTING, state
        self._phase(self.proc, state)

    def die(self, reason: str) -> None:
        """A rank exited: what the real monitor does when torchrun ends (dead with the reason, every
        process ended, a pool restarts a replica that was ready through its ``on_dead``)."""
        proc = self.proc
        if self._exited(proc, reason):
            self.stop(final_state="dead")
            self._report_death(proc)

    def health(self, timeout: float = 2.0) -> dict[str, Any]:
        return {"state": self.state, "error": self.error}  # no socket to ask; the phase is set by ``phase``

    def _tail(self, name: str, lines: int = 20) -> str:
        self.log_reads += 1  # every read of a log file goes through here, whoever asks
        return super()._tail(name, lines)

    # requests --------------------------------------------------------------------------------
    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False) -> EngineOutput:
        self.require_ready()

        def emit(phase: str, step: int = 0) -> None:
            on_progress(ProgressEvent(phase, step, request.steps, request.mode, str(request.shape)))

        mode = self.compile_mode or request.mode  # each tensor-parallel rank runs --tp-compile
        compiles = _compiles(self.graphs, mode, request)
        if compiles and forbid_compile:
            raise ShapeLocked(WOULD_COMPILE)
        def at_step(step: int) -> None:
            self.at_step(step)
            if self.state != "ready":
                raise GroupDead(f"lost the worker group: it is {self.state}")

        _steps(request, emit, should_stop, compiles, at_step)
        if compiles:
            self.graphs.add((mode, request.shape.graph_key))
        timings = COMPILING_RUN if compiles else STEADY_RUN
        self.timings["last_round_trip"] = timings["seconds"] + ROUND_TRIP_EXTRA
        self.timings["last_worker_seconds"] = timings["seconds"]
        images = [Image.new("RGB", (request.width, request.height), COLOURS[request.mode])
                  for _ in range(request.count)]
        return EngineOutput(image=images[0], more_images=images[1:], compiles=int(compiles), neff_compiles=0,
                            world_size=self.degree, place=self.place, **timings)


class FakeLaunches:
    """The engines' ``group_factory``: stands in for launching torchrun, which a UI test need not
    do. Makes a ``FakeWorkerGroup`` per launch (``made``: every one, in order) with its run dir
    under ``root``; while ``hold`` is set, a start stays ``launching`` until the test calls the
    group's ``ready()``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.hold = False
        self.made: list[FakeWorkerGroup] = []

    def __call__(self, *args, **kwargs) -> FakeWorkerGroup:
        group = FakeWorkerGroup(*args, launches=self, **kwargs)
        self.made.append(group)
        return group


def start_manager(tmp_path: Path, **settings):
    """The real ``Manager``, started the real way (``Manager.start``: CPU device, the tiny random
    model unless ``model=`` says otherwise, settings from ``tests.conftest.make_settings``), with
    the in-process engine a ``FakeEngine`` and the launched engines' groups from a ``FakeLaunches``.
    Returns (manager, launches); close the manager when done."""
    from backend.serving.manager import Manager
    from tests.conftest import make_settings, own_compile_history

    manager = Manager(make_settings(tmp_path, **{"model": EMBEDDED_RANDOM_MODEL, **settings}),
                      engine_factory=FakeEngine, clock=_fixed_clock)
    manager.start()
    own_compile_history(manager, Path(tmp_path))
    manager.table.cpu_bound = False  # a FakeEngine's seconds are made up, not slowed by the machine's load
    launches = FakeLaunches(Path(tmp_path) / "runs")
    for name in ("tensor-parallel", "replicas"):
        manager.engines[name]._group_factory = launches
    return manager, launches


def calm_refusal(outputs) -> str:
    """The Generate button's outputs for a refused click: the last image, record, seed and gallery
    left as they were (``gr.skip()``), a notice in the run line instead of "Error" badges over every
    output. Returns the run line."""
    import gradio as gr

    image, line, record, seed, gallery, state, paths = outputs
    assert all(value == gr.skip() for value in (image, record, seed, gallery, state, paths)), outputs
    assert isinstance(line, str) and line.startswith(("**Not run.**", "**Çalıştırılmadı.**")), line
    return line


def system_views(studio, page=None) -> tuple:
    """The System tab's views as the page's timer fills them (``Studio.refresh_all``, after the Studio
    tab's six): system table, shapes table, warm-up, group badge, group table, replicas, the Ray cluster
    (empty without --ray), raw status."""
    return studio.refresh_all("eager", 64, 64, 4, page=page)[6:]


def a_status(**given) -> Status:
    """A status snapshot for the views, with ``given`` fields over an empty, ready service's."""
    empty = {f.name: None for f in dataclasses.fields(Status)}
    empty.update(state="ready", model={"label": "m", "spec": "m"}, default_mode="eager", modes=[], engines={},
                 warm_only=False, max_compiled_shapes=0, running=[], waiting=[], compiling_workers=[], shapes=[],
                 generations=0, warmup={}, fallback_ops={})
    return Status(**{**empty, **given})
