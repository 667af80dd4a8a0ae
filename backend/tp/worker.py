"""Tensor-parallel worker: one process per rank, launched by torchrun, driven over a socket.

The app starts it for you (``backend.engines.worker_group.WorkerGroup``: a tensor-parallel group,
or with ``role`` replica one rank of the replica pool that loads the whole pipeline); by hand it is::

    NEURON_STUDIO_TP_CONFIG="$(python -c 'from backend.settings import Settings; \\
      from backend.tp.protocol import WorkerConfig; import json; print(WorkerConfig( \\
      settings=Settings(device="cpu", dtype="float32").to_json(), model_path="assets/tiny-flux2-klein", \\
      cores=[], warm=[], socket="/tmp/ns/tp.sock", run_dir="/tmp/ns").to_json())')" \\
    NEURON_STUDIO_TP_TOKEN=$(openssl rand -hex 32) \\
    torchrun --standalone --nproc_per_node=2 --monitor-interval=0.5 -m backend.tp.worker

Phases, as vLLM's worker names them:

1. ``init_distributed`` — before torch loads, (on Neuron) claim NeuronCore ``cores[LOCAL_RANK]`` from
   the app's core plan and set the app's cache variables; then initialise the process group
   (neuron / nccl / gloo, the device the app chose, with the collective timeout from the settings)
   before anything asks the device anything (under torchrun any ``torch.neuron`` query starts the
   Neuron runtime, and the init would then fail); only then the rank's device index (on Neuron
   ``torch.neuron.current_device()``, which TorchNeuron has made LOCAL_RANK), a gloo control
   group, and ``DeviceMesh(device, range(N))``;
2. ``load_sharded`` — the transformer with ``from_pretrained(..., parallel_config=
   TensorParallelConfig(mesh=mesh))``, the other components whole on the rank's device; each rank
   then reports what it holds (``shard_report``: parameter bytes, which weights are DTensor shards
   and their global and local shapes);
3. ``warm_up`` — compile (eager / compiled / regional, the in-process engine's modes) and run the
   configured shapes;
4. ``serve`` — rank 0 alone talks to the outside: it serves the Unix socket (0600 in a private
   directory; ``backend.tp.protocol``), answers health/cancel at once from a connection thread, and
   hands generate/shutdown jobs to its main loop, which broadcasts each job to every rank as JSON
   bytes over the control group (nothing is pickled). All ranks run the same pipeline call; at
   every step they agree (an all-reduce) on whether to stop, so a cancel never leaves a rank behind
   in a collective. Rank 0 streams step progress and returns the pixels.

Each rank writes its output to ``<run_dir>/rank<N>.log``, beats a heartbeat counter into
``<run_dir>/rank<N>.heartbeat`` from a thread (so the app can tell a rank that is silent because it
compiles from one that is stopped or frozen), and exits when the app's process is gone.

A failed request is answered and the group serves on, except where the failure may have left a
collective half done: a broken gloo/NCCL collective, and on Neuron any exception raised after the
job reached every rank (a Neuron collective error does not say it is one). Then the rank answers
with ``group_ending`` and exits; the app restarts the group. A cancel (agreed by every rank at a
step boundary) and a warm-only refusal (the same graphs on every rank) are not such failures.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from backend.errors import BackendNotReady, InvalidRequest, Unauthorized
from backend.tp import protocol as proto


def _redirect_output(run_dir: str, rank: int) -> None:
    log = open(os.path.join(run_dir, f"rank{rank}.log"), "a", buffering=1, encoding="utf-8")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log




def _heartbeat(run_dir: str, rank: int, interval: float) -> None:
    """Count up in ``rank<N>.heartbeat`` every ``interval`` seconds, from a thread: a stopped or
    frozen process stops counting; one busy in a compile (which releases the GIL) keeps on."""
    path = os.path.join(run_dir, f"rank{rank}.heartbeat")

    def beat() -> None:
        count = 0
        while True:
            count += 1
            try:
                with open(path + ".tmp", "w", encoding="ascii") as handle:
                    handle.write(str(count))
                os.replace(path + ".tmp", path)
            except OSError:
                pass
            time.sleep(interval)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


def _watch_parent(pid: int, run_dir: str = "", rank: int = 0, interval: float = 1.0,
                  exit_process=os._exit) -> threading.Thread | None:
    """Exit when the app is gone (the 'death pipe' of vLLM, by polling the parent's pid). The app
    cannot clean up after a SIGKILL, so the ranks do: before exiting, they remove the group's
    private run dir (socket, logs, heartbeats), rank 0 first of all; ``protocol.remove_run_dir``
    removes nothing but such a dir."""
    if not pid:
        return None

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print(f"app process {pid} is gone; exiting", flush=True)
                if run_dir:
                    removed = proto.remove_run_dir(run_dir, attempts=10 if rank == 0 else 2)
                    print(f"run dir {run_dir} {'removed' if removed else 'not removed'}", flush=True)
                exit_process(3)
                return
            except PermissionError:
                pass
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


class Rank0Server:
    """Rank 0's socket: authenticates, answers quick requests, queues device work.

    Bounded against whoever can reach the socket: at most ``max_connections`` connections at once
    (one more is closed as soon as it is accepted), each with ``read_timeout`` seconds to send each
    message, and a first message (the hello) of at most ``protocol.HELLO_MAX_HEADER`` bytes with
    no payload, refused before anything larger is read or allocated."""

    def __init__(self, path: str, token: str, world: int, *, max_connections: int = 16,
                 read_timeout: float = 10.0):
        self.token, self.world = token, world
        self.jobs: queue.Queue = queue.Queue()
        self.cancel = threading.Event()
        self.state = "loading"
        self.timings: dict[str, Any] = {}
        self.ranks: list[dict[str, Any]] = []
        self.error: str | None = None
        self.busy: dict[str, Any] | None = None
        self.done = 0  # requests answered with a result
        self.pixels: proto.PixelBuffer | None = None  # the app's buffer for results (None: the socket)
        self.refused = 0  # connections refused for a wrong token or a malformed hello
        self.turned_away = 0  # connections closed at once: max_connections were already open
        self.max_connections, self.read_timeout = max_connections, read_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._count_lock = threading.Lock()
        self.open_connections = 0
        self._closed = False
        self.ready = threading.Event()
        # The app takes the socket file's appearance to mean "connect now": it must not appear
        # before the socket listens (a connect between bind and listen is refused, and a start
        # that gets "connection refused" is a dead group). So it is bound under another name,
        # listening, and then renamed into place (rename is atomic; the socket goes with its inode).
        staging = path + ".new"
        old = os.umask(0o177)  # the socket file is created 0600
        try:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(staging)
        finally:
            os.umask(old)
        os.chmod(staging, 0o600)
        self.sock.listen(max_connections)
        os.rename(staging, path)
        self.path = path
        threading.Thread(target=self._accept, name="tp-accept", daemon=True).start()

    def describe(self) -> dict[str, Any]:
        return {"type": "ok", "state": self.state, "world_size": self.world, "timings": self.timings,
                "busy": self.busy, "error": self.error, "requests_done": self.done, "refused": self.refused}

    def close(self) -> None:
        """Stop accepting (the accept thread ends); open connections finish on their own."""
        self._closed = True
        for end in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                end()  # shutdown wakes a blocked accept() on Linux; close alone does not
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # e.g. out of file descriptors: do not spin
                continue
            if not self._slots.acquire(blocking=False):
                self.turned_away += 1
                conn.close()
                continue
            with self._count_lock:
                self.open_connections += 1
            try:
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
            except RuntimeError:  # can't start a thread: refuse this one, keep serving
                self._release(conn)

    def _release(self, conn: socket.socket) -> None:
        conn.close()
        with self._count_lock:
            self.open_connections -= 1
        self._slots.release()

    def _refuse(self, conn: socket.socket, why: str) -> None:
        self.refused += 1
        print(f"refused a connection: {why}", flush=True)
        try:
            proto.send_message(conn, proto.error_message(Unauthorized("bad token")))
        except OSError:
            pass

    def _serve(self, conn: socket.socket) -> None:
        try:
            try:
                hello = proto.recv_hello(conn, deadline=time.monotonic() + self.read_timeout)
            except (proto.DeadlineExceeded, proto.ConnectionLost):
                raise  # silent or gone: dropped below, not counted as refused
            except proto.ProtocolError as exc:
                self._refuse(conn, f"malformed hello ({exc})")
                return
            if not proto.token_ok(self.token, hello):
                self._refuse(conn, "missing or wrong token")
                return
            # Requests carry no payload (only results do).
            request, _ = proto.recv_message(conn, deadline=time.monotonic() + self.read_timeout, max_payload=0)
            kind = request["type"]
            if kind == "health":
                proto.send_message(conn, self.describe())
            elif kind == "cancel":
                self.cancel.set()
                proto.send_message(conn, {"type": "ok"})
            elif kind == "wait_ready":
                self.ready.wait()
                reply = ({**self.describe(), "type": "ready", "ranks": self.ranks} if self.state == "ready"
                         else proto.error_message(BackendNotReady(self.error or self.state)))
                proto.send_message(conn, reply)
            elif kind in ("generate", "shutdown"):
                if self.state != "ready":
                    proto.send_message(conn, proto.error_message(
                        BackendNotReady(f"the worker group is {self.state}")))
                    return
                finished = threading.Event()
                # When it arrived (CLOCK_MONOTONIC is one clock for every process on the machine:
                # the app reads the transport's parts off these stamps, bench.tp_transport).
                request["stamps"] = {"received": time.monotonic()}
                self.jobs.put((request, conn, finished))
                finished.wait()  # the main loop answers on this connection
            else:
                proto.send_message(conn, proto.error_message(
                    InvalidRequest("type", f"unknown request {kind[:40]!r}")))
        except (proto.ProtocolError, OSError, KeyError) as exc:
            print(f"connection dropped: {exc}", flush=True)
        finally:
            self._release(conn)


@dataclasses.dataclass
class Rank:
    """What one rank knows about itself after ``init_distributed``."""

    rank: int
    local_rank: int
    world: int
    core: int | None
    settings: Any  # backend.settings.Settings
    device: Any  # backend.device.Device
    mesh: Any  # DeviceMesh
    control: Any  # the gloo process group for jobs and stop votes


def init_distributed(cfg: proto.WorkerConfig, rank: int, local_rank: int, world: int) -> Rank:
    from backend import device_env

    # Before torch loads: this rank's NeuronCore, and the app's cache variables.
    kind = cfg.settings["device"]
    cores = [int(c) for c in cfg.cores]
    os.environ.update(device_env.tp_rank_environment(kind, cores, local_rank))
    device_env.prepare_environment(os.path.expanduser(cfg.settings["cache_dir"]), cfg.settings["compile_timeout"])

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from backend.device import Device, rank_device_info
    from backend.settings import Settings

    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))  # replicas on one CPU share its cores

    settings = Settings.from_json(cfg.settings)
    info = rank_device_info(settings)  # the app's choice; asks the device nothing
    if info.kind == "cuda":
        torch.cuda.set_device(local_rank)
    # Before anything touches the device (TorchNeuron refuses a process group after that), with a
    # timeout of minutes: a rank stuck in a collective fails the request, not the demo. On Neuron
    # the watchdog's clock starts when a collective is enqueued and eager ops compile one at a time
    # ahead of it, so a cold shape may hold a collective for a whole compile: the timeout is at
    # least the compile allowance there. A replica (one rank) has no peer to talk to: gloo, not
    # TorchNeuron's process group (whose init takes a root-comm port and an NRT barrier, and
    # replicas started together would race for the port).
    timeout = settings.tp_collective_timeout
    if info.kind == "neuron":
        timeout = max(timeout, settings.compile_timeout)
    backend = "gloo" if world == 1 else info.process_group_backend
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
    device = Device(info, max_compiled_shapes=settings.max_compiled_shapes)
    device.bind_rank(local_rank)  # the index the runtime gave this rank (neuron:LOCAL_RANK)
    # Jobs and the per-step stop vote travel over gloo on CPU tensors; an idle group may wait for
    # days between requests.
    control = dist.new_group(backend="gloo", timeout=timedelta(days=3650))
    mesh = DeviceMesh(info.kind, list(range(world))) if cfg.role == "tp" else None  # a replica shards nothing
    return Rank(rank, local_rank, world, cores[local_rank] if cores else None, settings, device, mesh, control)


def load_sharded(cfg: proto.WorkerConfig, me: Rank):
    """The pipeline with its transformer sharded across the mesh (an in-process engine, loaded); a
    replica (``role`` replica, one rank) loads it whole, as the app would in process."""
    from backend.engines.in_process import InProcessEngine

    if cfg.role == "replica":
        engine = InProcessEngine(me.device, cfg.model_path)
        engine.load()
        return engine

    def loader(device, model_path: str):
        import contextlib

        from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel
        from diffusers.models._modeling_parallel import TensorParallelConfig

        from backend.tp.cpu_shim import cpu_tensor_parallel

        shim = cpu_tensor_parallel(device.kind) if device.kind == "cpu" else contextlib.nullcontext()
        with shim:
            transformer = Flux2Transformer2DModel.from_pretrained(
                model_path, subfolder="transformer", dtype=device.dtype,
                parallel_config=TensorParallelConfig(mesh=me.mesh))
        pipe = Flux2KleinPipeline.from_pretrained(model_path, transformer=transformer, dtype=device.dtype)
        for name in ("text_encoder", "vae"):  # the sharded transformer is already placed
            getattr(pipe, name).to(device.info.torch_device)
        return pipe

    engine = InProcessEngine(me.device, cfg.model_path, loader=loader)
    engine.load()
    return engine


def shard_report(module, me: Rank) -> dict[str, Any]:
    """What this rank holds of ``module``: bytes of its local parameters, split into sharded (DTensor
    shards, with global and local shapes and the split dimension) and replicated."""
    from torch.distributed.tensor import DTensor, Shard

    sharded, sharded_bytes, replicated_bytes = [], 0, 0
    for name, param in module.named_parameters():
        if isinstance(param.data, DTensor) or isinstance(param, DTensor):
            tensor = param if isinstance(param, DTensor) else param.data
            local = tensor.to_local()
            dims = [p.dim for p in tensor.placements if isinstance(p, Shard)]
            nbytes = local.numel() * local.element_size()
            if dims:
                sharded.append({"name": name, "global_shape": list(tensor.shape), "local_shape": list(local.shape),
                                "dim": dims[0]})
                sharded_bytes += nbytes
                continue
            replicated_bytes += nbytes
        else:
            replicated_bytes += param.numel() * param.element_size()
    return {"rank": me.rank, "pid": os.getpid(), "core": me.core, "device": me.device.info.torch_device,
            "transformer_bytes": sharded_bytes + replicated_bytes,
            "sharded_bytes": sharded_bytes, "replicated_bytes": replicated_bytes, "sharded": sharded}


JOB_BYTES = 16 << 10  # one broadcast carries a job up to this long (a request's JSON is ~300 bytes)
_JOB_LEN = 8


def _bcast_json(obj: Any, me: Rank) -> Any:
    """Rank 0's JSON-able object to every rank, as bytes over the control group (no pickle).

    One collective for a job that fits ``JOB_BYTES`` (its length in the first 8 bytes); a longer
    one follows in a second broadcast of its own size. Each collective is a round of the ranks'
    threads (~0.3 ms on a CPU), paid on every request."""
    import torch
    import torch.distributed as dist

    data = json.dumps(obj).encode() if me.rank == 0 else b""
    first = torch.zeros(_JOB_LEN + JOB_BYTES, dtype=torch.uint8)
    if me.rank == 0:
        first[:_JOB_LEN] = torch.frombuffer(bytearray(len(data).to_bytes(_JOB_LEN, "little")), dtype=torch.uint8)
        if len(data) <= JOB_BYTES:
            first[_JOB_LEN:_JOB_LEN + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    dist.broadcast(first, src=0, group=me.control)
    if me.rank == 0:
        if len(data) > JOB_BYTES:
            dist.broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8), src=0, group=me.control)
        return obj
    raw = first.numpy()
    size = int.from_bytes(raw[:_JOB_LEN].tobytes(), "little")
    if size <= JOB_BYTES:
        return json.loads(raw[_JOB_LEN:_JOB_LEN + size].tobytes().decode())
    rest = torch.empty(size, dtype=torch.uint8)
    dist.broadcast(rest, src=0, group=me.control)
    return json.loads(rest.numpy().tobytes().decode())


def _pixels_of(image) -> tuple[Any, int, int]:
    """(bytes-like RGB pixels, width, height) of a result's image: the engine's uint8 array as it
    is, or a PIL image's bytes."""
    import numpy as np

    if isinstance(image, np.ndarray):  # as flat bytes: len() is the byte count the header announces
        flat = memoryview(np.ascontiguousarray(image, dtype=np.uint8)).cast("B")
        return flat, int(image.shape[1]), int(image.shape[0])
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return rgb.tobytes(), rgb.width, rgb.height


def _gather_json(obj: Any, me: Rank) -> list[Any] | None:
    """Every rank's JSON-able object to rank 0 (None elsewhere), as bytes over the control group."""
    import torch
    import torch.distributed as dist

    data = json.dumps(obj).encode()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(me.world)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=me.control)
    longest = int(max(s.item() for s in sizes))
    mine = torch.zeros(longest, dtype=torch.uint8)
    mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    bufs = [torch.zeros(longest, dtype=torch.uint8) for _ in range(me.world)]
    dist.all_gather(bufs, mine, group=me.control)
    if me.rank:
        return None
    return [json.loads(bytes(b[:int(n.item())].tolist()).decode()) for b, n in zip(bufs, sizes)]


def warm_up(cfg: proto.WorkerConfig, run, me: Rank) -> list[dict[str, Any]]:
    """The shapes the app asked the group to warm before READY (settings the app checked)."""
    from backend.records import GenerationRequest
    from backend.settings import TP_MODE
    from backend.shapes import parse_shape

    stats = []
    for text in cfg.warm:
        shape = parse_shape(text)
        request = GenerationRequest("warm-up", shape.height, shape.width, me.settings.steps, me.settings.guidance,
                                    0, me.settings.runs_as(TP_MODE))
        out = run(request)
        stats.append({"shape": text, "compiles": out.compiles, "compile_seconds": out.compile_seconds,
                      "seconds": out.seconds})
    return stats


def _ends_rank(exc: BaseException, me: Rank) -> bool:
    """Whether this rank must leave after ``exc`` (the app then restarts the group on Neuron): a
    broken collective anywhere; on Neuron any failure the job reached, since a failed collective
    inside the model does not say it is one and this rank may be out of step with its peers (cancels
    and warm-only refusals happen on every rank alike, at a step boundary or before the first
    collective)."""
    from backend.errors import GenerationCancelled, ShapeLocked

    suspect = me.device.kind == "neuron" and not isinstance(exc, (GenerationCancelled, ShapeLocked))
    return _collective_broken(exc) or suspect


def every_ranks_compiles(out, me: Rank):
    """Each rank compiles for itself (its shard's graphs, and on Neuron its own NEFFs, counted by
    TorchNeuron per process): the record counts every rank's. NEFFs add up over the ranks, compile
    seconds are the longest rank's (they compile side by side), host-run ops are the union. Every
    rank that stays calls this once per job, with ``out`` None where its run failed; a rank that
    leaves (``_ends_rank``) does not, and its exit fails its peers' gather."""
    if me.world == 1:
        return out
    import torch.distributed as dist

    mine = None if out is None else {"neff": out.neff_compiles, "seconds": out.compile_seconds,
                                     "host": out.fallback_ops}
    every: list = [None] * me.world
    dist.all_gather_object(every, mine, group=me.control)
    if out is None or any(part is None for part in every):
        return out
    return dataclasses.replace(out, neff_compiles=sum(p["neff"] for p in every),
                               rank_neff_compiles=[p["neff"] for p in every],
                               compile_seconds=max(p["seconds"] for p in every),
                               fallback_ops=sorted({op for p in every for op in p["host"]}))


def serve(server: Rank0Server | None, run, me: Rank, replica: bool = False) -> None:
    """The job loop: rank 0 takes a job from its socket, every rank runs it, rank 0 answers."""
    from backend.records import GenerationRequest

    while True:
        job, conn, finished = None, None, None
        if server:
            job, conn, finished = server.jobs.get()
            if job["type"] == "generate":
                # The app validated the request and resolved the mode it runs in (``Settings.runs_as``)
                # before it sent it over the authenticated socket: the job is trusted as it is.
                stamps = {**(job.pop("stamps", None) or {}), "taken": time.monotonic()}
            server.cancel.clear()
        job = _bcast_json(job, me)
        if server and job["type"] == "generate":
            stamps["broadcast"] = time.monotonic()
        if job["type"] == "shutdown":
            if server:
                _safe(proto.send_message, conn, {"type": "ok"})
                finished.set()
            return
        try:
            request = GenerationRequest(**{k: job[k] for k in GenerationRequest.__dataclass_fields__})
            if server:
                server.busy = {"shape": f"{request.width}x{request.height}", "phase": "starting", "step": 0,
                               "steps": request.steps}

            def progress(event, conn=conn):
                if server:
                    server.busy.update(phase=event.phase, step=event.step)
                    if not _safe(proto.send_message, conn, {"type": "progress", **event.to_json()}):
                        server.cancel.set()  # nobody is waiting for this image any more

            out = failure = None
            try:
                out = run(request, progress, forbid_compile=bool(job.get("forbid_compile")))
            except Exception as exc:  # noqa: BLE001 - a rank that stays joins the counters' gather below
                if _ends_rank(exc, me):
                    raise  # it leaves at once (below); its peers' gather fails on its exit
                failure = exc
            out = every_ranks_compiles(out, me)
            if failure is not None:
                raise failure
            if server:
                stamps["ran"] = time.monotonic()
                pixels, width, height = _pixels_of(out.image)
                # Into the app's buffer when there is one (written before the header goes out).
                shared = server.pixels is not None and server.pixels.write(pixels)
                stamps["sending"] = time.monotonic()
                header = {"type": "result", "width": width, "height": height, **out.to_json(),
                          "ran": request.to_json(),
                          "world_size": me.world, "stamps": stamps, **({"pixels": "shared"} if shared else {})}
                _safe(proto.send_message, conn, header, b"" if shared else pixels)
                server.done += 1
        except Exception as exc:  # noqa: BLE001 - a failed request is not a dead group: answer and go on
            print(f"request failed: {type(exc).__name__}: {exc}", flush=True)
            from backend.errors import GenerationFailed, GroupDead

            broken = _collective_broken(exc)
            if _ends_rank(exc, me):
                if server:
                    # On Neuron the app restarts the group at once; elsewhere a broken collective
                    # leaves it dead for the operator, as a rank that died does.
                    ending = me.device.kind == "neuron"
                    if broken:
                        answer = GroupDead(f"a collective failed: {str(exc).splitlines()[0][:300]}",
                                           group_ending=ending)
                    else:
                        failed = exc if isinstance(exc, GenerationFailed) else GenerationFailed(
                            f"{type(exc).__name__}: {exc}")
                        answer = failed.evolve(group_ending=ending)
                    _safe(proto.send_message, conn, proto.error_message(answer))
                    finished.set()
                print("ending this rank: the group must be restarted", flush=True)
                os._exit(1 if broken else proto.RESTART_EXIT)
            if server:
                server.error = f"{type(exc).__name__}: {exc}"
                _safe(proto.send_message, conn, proto.error_message(exc))
        finally:
            if server:
                server.busy = None
                finished.set()


def main() -> None:
    cfg = proto.WorkerConfig.from_json(os.environ[proto.CONFIG_VAR])
    token = os.environ.pop(proto.TOKEN_VAR, "")
    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    _redirect_output(cfg.run_dir, rank)
    print(f"rank {rank}/{world} starting (pid {os.getpid()})", flush=True)
    _watch_parent(cfg.parent_pid, cfg.run_dir, rank)
    stall = float(cfg.settings.get("tp_stall_timeout") or 60.0)
    _heartbeat(cfg.run_dir, rank, max(0.1, min(5.0, stall / 5)))
    server = Rank0Server(cfg.socket, token, world) if rank == 0 else None
    if server:
        server.pixels = proto.PixelBuffer.open(cfg.pixels, cfg.pixels_bytes)
        if cfg.pixels and server.pixels is None:
            print("the app's pixel buffer could not be opened: results carry their pixels on the socket", flush=True)
    try:
        began = time.perf_counter()
        me = init_distributed(cfg, rank, local_rank, world)
        engine = load_sharded(cfg, me)
        load_seconds = time.perf_counter() - began
        report = shard_report(engine.pipe.transformer, me)
        if server:
            server.state = "warming"

        def vote_stop() -> bool:
            import torch
            import torch.distributed as dist

            flag = torch.tensor([1 if (server and server.cancel.is_set()) else 0], dtype=torch.int64)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=me.control)
            return bool(flag.item())

        def run(request, progress=lambda e: None, forbid_compile=False):
            # The engine asks before it starts and after each step. The first question comes right
            # after the job's broadcast, which rank 0 made just after clearing its cancel flag: a
            # collective (~0.3 ms a request) to vote on nothing. Every rank skips that one alike,
            # so the votes stay in step; a cancel is seen at the first step's vote.
            asked = []

            def should_stop() -> bool:
                if not asked:
                    asked.append(True)
                    return False
                return vote_stop()

            # Only rank 0 returns pixels (as the array it ships); the others stop at the latents.
            return engine.run(request, progress, should_stop, forbid_compile=forbid_compile, decode=rank == 0,
                              image_as="array")

        warm_began = time.perf_counter()
        warm_stats = warm_up(cfg, run, me)
        reports = _gather_json(report, me)
        if server:
            server.timings = {"load": round(load_seconds, 3), "warm": round(time.perf_counter() - warm_began, 3),
                              "warm_shapes": warm_stats}
            server.ranks = reports
            server.state = "ready"
            server.ready.set()
        print(f"rank {rank} ready: load {load_seconds:.2f} s, {report['transformer_bytes']} transformer bytes "
              f"({len(report['sharded'])} weights sharded)", flush=True)
    except Exception as exc:
        if server:
            server.state, server.error = "failed", f"{type(exc).__name__}: {exc}"
            server.ready.set()
            time.sleep(1.0)  # let a waiting wait_ready read the error before the process ends
        raise
    serve(server, run, me, replica=cfg.role == "replica")
    print(f"rank {rank} shutting down", flush=True)
    import torch.distributed as dist

    dist.barrier(group=me.control)
    # After DTensor collectives a normal interpreter exit sometimes aborts; leave at once instead.
    os._exit(0)


def _collective_broken(exc: BaseException) -> bool:
    """True when the error (or its cause) is a failed collective, i.e. a peer rank died or hung up."""
    import torch.distributed as dist

    seen = exc
    while seen is not None:
        text = str(seen).lower()
        if isinstance(seen, dist.DistError) or "gloo" in text or "nccl" in text or "closed by peer" in text:
            return True
        seen = seen.__cause__
    return False


def _safe(fn, *args) -> bool:
    """Send to a client that may have gone away; the group must not die of a closed socket."""
    try:
        fn(*args)
        return True
    except OSError as exc:
        print(f"client went away: {exc}", flush=True)
        return False


if __name__ == "__main__":
    main()
