"""Tensor-parallel worker group: one process per rank, launched by torchrun, driven over a socket.

The app starts it for you (mode "tp"); by hand it is::

    NEURON_STUDIO_TP_CONFIG='{"model_path": "assets/tiny-flux2-klein", "device": "cpu", "dtype": "float32",
      "compile_backend": "inductor", "compile_mode": "eager", "warm": [], "socket": "/tmp/ns/tp.sock",
      "run_dir": "/tmp/ns", "cache_dir": "~/.cache/neuron-studio", "parent_pid": 0, "cores": [1, 2],
      "collective_timeout": 300}' \\
    NEURON_STUDIO_TP_TOKEN=$(openssl rand -hex 32) \\
    torchrun --standalone --nproc_per_node=2 --monitor-interval=0.5 -m backend.tp_worker

Every rank: (on Neuron) claims NeuronCore ``cores[LOCAL_RANK]`` (the app's core plan) before torch
loads, then initialises
the process group (neuron / nccl / gloo from the device layer), builds ``DeviceMesh(device,
range(world))``, loads the transformer with ``from_pretrained(..., parallel_config=
TensorParallelConfig(mesh=mesh))`` and the other components on its device, optionally compiles
(eager / compiled / regional, the in-process engine's modes), and warms the configured shapes.

Rank 0 alone talks to the outside: it serves the Unix socket (mode 0600 in a private directory;
protocol in ``backend.tp_protocol``), answers health/status/cancel at once from a connection
thread, and hands generate/warm-up/shutdown jobs to its main loop, which broadcasts each job to
all ranks as JSON bytes over a gloo control group (nothing is pickled). All ranks run the same
pipeline call; at every step they agree (an all-reduce) on whether to stop, so a cancel never
leaves a rank behind in a collective. Rank 0 streams step progress and returns the pixels.

Each rank writes its output to ``<run_dir>/rank<N>.log`` (the app shows their tails) and exits when
the app's process is gone. Lifecycle: loading -> warming -> ready; a ``wait_ready`` request is
answered with a READY message (with timings) once load and warm-up are done.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Any

CONFIG_VAR = "NEURON_STUDIO_TP_CONFIG"
TOKEN_VAR = "NEURON_STUDIO_TP_TOKEN"


def _redirect_output(run_dir: str, rank: int) -> None:
    log = open(os.path.join(run_dir, f"rank{rank}.log"), "a", buffering=1, encoding="utf-8")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log


def _watch_parent(pid: int) -> None:
    """Exit when the app is gone (the 'death pipe' of vLLM, by polling the parent's pid)."""
    if not pid:
        return

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print(f"app process {pid} is gone; exiting", flush=True)
                os._exit(3)
            except PermissionError:
                pass
            time.sleep(1.0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class Rank0Server:
    """Rank 0's socket: authenticates, answers quick requests, queues device work."""

    def __init__(self, path: str, token: str, world: int):
        self.path, self.token, self.world = path, token, world
        self.jobs: queue.Queue = queue.Queue()
        self.cancel = threading.Event()
        self.state = "loading"
        self.timings: dict[str, float] = {}
        self.error: str | None = None
        self.busy: dict[str, Any] | None = None
        self.done = 0
        self.refused = 0
        self.started = time.time()
        self.ready = threading.Event()
        old = os.umask(0o177)  # the socket file is created 0600
        try:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.sock.listen(16)
        threading.Thread(target=self._accept, name="tp-accept", daemon=True).start()

    def describe(self) -> dict[str, Any]:
        return {"type": "ok", "state": self.state, "world_size": self.world, "timings": self.timings,
                "busy": self.busy, "requests_done": self.done, "refused": self.refused,
                "error": self.error, "uptime": round(time.time() - self.started, 3)}

    def _accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        from backend.tp_protocol import ProtocolError, recv_message, send_message, token_ok

        try:
            hello, _ = recv_message(conn, deadline=time.monotonic() + 10)
            if not token_ok(self.token, hello):
                self.refused += 1
                print("refused a connection with a missing or wrong token", flush=True)
                send_message(conn, {"type": "error", "kind": "unauthorized", "error": "bad token"})
                return
            request, _ = recv_message(conn, deadline=time.monotonic() + 10)
            kind = request["type"]
            if kind in ("health", "status"):
                send_message(conn, self.describe())
            elif kind == "cancel":
                self.cancel.set()
                send_message(conn, {"type": "ok"})
            elif kind == "wait_ready":
                self.ready.wait()
                if self.state == "ready":
                    send_message(conn, {"type": "ready", **self.describe()})
                else:
                    send_message(conn, {"type": "error", "kind": "failed", "error": self.error or self.state})
            elif kind in ("generate", "warmup", "shutdown"):
                if self.state != "ready":
                    send_message(conn, {"type": "error", "kind": "busy", "error": f"worker is {self.state}"})
                    return
                finished = threading.Event()
                self.jobs.put((request, conn, finished))
                finished.wait()  # the main loop answers on this connection
            else:
                send_message(conn, {"type": "error", "kind": "invalid", "error": f"unknown request {kind!r}"})
        except (ProtocolError, OSError, KeyError) as exc:
            print(f"connection dropped: {exc}", flush=True)
        finally:
            conn.close()


def _bcast_json(obj: Any, rank: int, group) -> Any:
    """Rank 0's JSON-able object to every rank, as bytes over the gloo control group (no pickle)."""
    import torch
    import torch.distributed as dist

    data = json.dumps(obj).encode() if rank == 0 else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    dist.broadcast(size, src=0, group=group)
    buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if rank == 0
           else torch.empty(int(size.item()), dtype=torch.uint8))
    dist.broadcast(buf, src=0, group=group)
    return json.loads(bytes(buf.tolist()).decode()) if rank else obj


def main() -> None:
    cfg = json.loads(os.environ[CONFIG_VAR])
    token = os.environ.pop(TOKEN_VAR, "")
    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    _redirect_output(cfg["run_dir"], rank)
    print(f"rank {rank}/{world} starting (pid {os.getpid()})", flush=True)
    _watch_parent(int(cfg.get("parent_pid") or 0))

    from backend import device_env

    # Before torch loads: this rank's NeuronCore, and the app's cache variables.
    cores = [int(c) for c in cfg.get("cores") or []] or list(range(world))
    os.environ.update(device_env.tp_rank_environment(cfg["device"], cores, local_rank))
    device_env.prepare_environment(os.path.expanduser(cfg["cache_dir"]))

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from backend.device import Device, resolve_device
    from backend.engine import InProcessEngine
    from backend.errors import CompileFailure, GenerationCancelled, InvalidRequest, ShapeLocked, StudioError
    from backend.settings import Settings
    from backend.shapes import parse_shape
    from backend.tp_protocol import send_message
    from backend.validation import validate_request

    server = Rank0Server(cfg["socket"], token, world) if rank == 0 else None
    settings = Settings(device=cfg["device"], dtype=cfg["dtype"], compile_backend=cfg["compile_backend"],
                        cache_dir=os.path.expanduser(cfg["cache_dir"]), min_size=cfg.get("min_size", 64),
                        max_size=cfg.get("max_size", 2048), max_steps=cfg.get("max_steps", 50))
    compile_mode = cfg.get("compile_mode", "eager")
    began = time.perf_counter()
    try:
        info = resolve_device(settings)
        if info.kind == "cuda":
            torch.cuda.set_device(local_rank)
        # Before anything touches the device (TorchNeuron refuses a process group after that), and
        # with a timeout of minutes: a rank stuck in a collective fails the request, not the demo.
        dist.init_process_group(backend=info.process_group_backend,
                                timeout=timedelta(seconds=float(cfg.get("collective_timeout", 300))))
        # Control messages (jobs, the per-step stop vote) always travel over gloo on CPU tensors,
        # and an idle group may wait for days between requests.
        control = dist.new_group(backend="gloo", timeout=timedelta(days=3650))
        mesh = DeviceMesh(info.kind, list(range(world)))
        device = Device(info, max_compiled_shapes=64)

        def load_sharded(device: Device, model_path: str):
            from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel
            from diffusers.models._modeling_parallel import TensorParallelConfig

            from backend.tp_cpu_shim import cpu_tensor_parallel
            import contextlib

            shim = cpu_tensor_parallel(info.kind) if info.kind == "cpu" else contextlib.nullcontext()
            with shim:
                transformer = Flux2Transformer2DModel.from_pretrained(
                    model_path, subfolder="transformer", dtype=device.dtype,
                    parallel_config=TensorParallelConfig(mesh=mesh))
            pipe = Flux2KleinPipeline.from_pretrained(model_path, transformer=transformer, dtype=device.dtype)
            for name in ("text_encoder", "vae"):  # the sharded transformer is already placed
                getattr(pipe, name).to(info.torch_device)
            return pipe

        engine = InProcessEngine(device, cfg["model_path"], loader=load_sharded)
        engine.load()
        load_seconds = time.perf_counter() - began
        if server:
            server.state = "warming"
        warm_began = time.perf_counter()
        warm_stats = []

        def vote_stop() -> bool:
            flag = torch.tensor([1 if (server and server.cancel.is_set()) else 0], dtype=torch.int64)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=control)
            return bool(flag.item())

        def run(request, progress=lambda e: None, forbid_compile=False):
            # Only rank 0 returns pixels; the others stop at the latents.
            return engine.run(request, progress, vote_stop, forbid_compile=forbid_compile, decode=rank == 0)

        for text in cfg.get("warm", []):
            shape = parse_shape(text)
            req = validate_request(settings, engine.modes, "warm-up", shape.height, shape.width, seed=0,
                                   mode=compile_mode)
            out = run(req)
            warm_stats.append({"shape": text, "compiles": out.compiles, "compile_seconds": out.compile_seconds,
                               "seconds": out.seconds})
        if server:
            server.timings = {"load": round(load_seconds, 3), "warm": round(time.perf_counter() - warm_began, 3),
                              "warm_shapes": warm_stats}
            server.state = "ready"
            server.ready.set()
        print(f"rank {rank} ready: load {load_seconds:.2f} s", flush=True)
    except Exception as exc:
        if server:
            server.state, server.error = "failed", f"{type(exc).__name__}: {exc}"
            server.ready.set()
            time.sleep(1.0)  # let a waiting wait_ready read the error before the process ends
        raise

    def answer_error(conn, exc: Exception) -> None:
        kind = ("invalid" if isinstance(exc, InvalidRequest) else "cancelled" if isinstance(exc, GenerationCancelled)
                else "compile_failed" if isinstance(exc, CompileFailure) else "locked" if isinstance(exc, ShapeLocked)
                else "failed")
        payload = {"type": "error", "kind": kind, "error": str(exc) if isinstance(exc, StudioError)
                   else f"{type(exc).__name__}: {exc}"}
        for attr in ("compiles", "compile_seconds"):
            if hasattr(exc, attr):
                payload[attr] = getattr(exc, attr)
        send_message(conn, payload)

    while True:
        if rank == 0:
            request, conn, finished = server.jobs.get()
            job = request
            if request["type"] == "generate":
                try:  # validate before anything reaches the other ranks
                    fields = {k: request.get(k) for k in ("prompt", "height", "width", "steps", "guidance", "seed")}
                    valid = validate_request(settings, engine.modes, mode=compile_mode, **fields)
                    job = {"type": "generate", **valid.to_json(), "forbid_compile": bool(request.get("forbid_compile"))}
                except StudioError as exc:
                    _safe(answer_error, conn, exc)
                    finished.set()
                    continue
            server.cancel.clear()
        else:
            job, conn, finished = None, None, None
        job = _bcast_json(job, rank, control)
        if job["type"] == "shutdown":
            if rank == 0:
                _safe(send_message, conn, {"type": "ok"})
                finished.set()
            break
        try:
            if job["type"] == "generate":
                from backend.records import GenerationRequest

                request = GenerationRequest(**{k: job[k] for k in GenerationRequest.__dataclass_fields__})
                if server:
                    server.busy = {"shape": f"{request.width}x{request.height}", "phase": "starting", "step": 0,
                                   "steps": request.steps}

                def progress(event, conn=conn):
                    if server:
                        server.busy.update(phase=event.phase, step=event.step)
                        if not _safe(send_message, conn, {"type": "progress", **event.to_json()}):
                            server.cancel.set()  # nobody is waiting for this image any more

                out = run(request, progress, forbid_compile=bool(job.get("forbid_compile")))
                if rank == 0:
                    image = out.image if out.image.mode == "RGB" else out.image.convert("RGB")
                    header = {"type": "result", "width": image.width, "height": image.height, "world_size": world,
                              "compiles": out.compiles, "compile_seconds": out.compile_seconds,
                              "neff_compiles": out.neff_compiles, "seconds": out.seconds, "encode": out.encode,
                              "denoise": out.denoise, "decode": out.decode}
                    _safe(send_message, conn, header, image.tobytes())
            elif job["type"] == "warmup":
                results = []
                for i, text in enumerate(job.get("shapes", [])):
                    shape = parse_shape(text)
                    req = validate_request(settings, engine.modes, "warm-up", shape.height, shape.width, seed=0,
                                           mode=compile_mode)
                    out = run(req)
                    results.append({"shape": text, "compiles": out.compiles, "compile_seconds": out.compile_seconds})
                    if rank == 0:
                        _safe(send_message, conn, {"type": "progress", "phase": "warmup", "step": i + 1,
                                                   "steps": len(job["shapes"]), "shape": text})
                if rank == 0:
                    _safe(send_message, conn, {"type": "result", "warmed": results})
            if rank == 0:
                server.done += 1
        except Exception as exc:  # noqa: BLE001 - a failed request is not a dead group: answer and go on
            print(f"request failed: {type(exc).__name__}: {exc}", flush=True)
            if _collective_broken(exc):
                # A peer is gone: this group cannot run another collective. Say so and leave, so
                # torchrun ends the group and the app sees it dead rather than half alive.
                if rank == 0:
                    _safe(send_message, conn, {"type": "error", "kind": "group_broken",
                                               "error": f"a collective failed: {str(exc).splitlines()[0][:300]}"})
                    finished.set()
                os._exit(1)
            if rank == 0:
                server.error = f"{type(exc).__name__}: {exc}"
                _safe(answer_error, conn, exc)
        finally:
            if rank == 0:
                server.busy = None
                finished.set()

    print(f"rank {rank} shutting down", flush=True)
    dist.barrier(group=control)
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
