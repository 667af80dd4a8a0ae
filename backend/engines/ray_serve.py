"""The Ray Serve engine (docs/replicas.md, "Beyond one instance"): each Serve replica one
``InProcessEngine`` on the K accelerators Ray hands it: ``neuron_cores`` where the cluster offers them
(Ray sets ``NEURON_RT_VISIBLE_CORES``, ``ray/_private/accelerators/neuron.py``), else ``num_gpus``, else
``num_cpus``. ``StudioReplica`` runs in a replica; ``ReplicaBook`` (an actor on the app's node) holds
what each says of itself; ``RayServeEngine`` (in the app) deploys or attaches, routes through the
handle, watches the replicas and turns Ray's failures into the studio's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
from typing import Any, Callable

from backend.engines.base import PlaceBook, Route
from backend.errors import BackendNotReady, GenerationCancelled, GroupDead, InvalidRequest, StudioError
from backend.launch.protocol import error_from_message, error_message
from backend.request.records import EngineOutput, GenerationRequest, Phase, ProgressEvent
from backend.settings import IN_PROCESS_MODES, Settings

log = logging.getLogger(__name__)
APP = "neuron-studio"  # the Serve application's name
DEPLOYMENT = "StudioReplica"
BOOK = "neuron-studio-replicas"  # the ReplicaBook actor's name
NAMESPACE = "neuron-studio"


PROGRESS_EVERY = 0.1  # seconds: a replica sends its progress at most this often (StudioReplica.run)
REPORT_AFTER = 0.05  # seconds after a run's last part: the replica's report to the app (about 1 ms of its time)
# Ray sends an object of up to 100 KiB inside its message (max_direct_call_object_size), a bigger one
# through the object store. Measured (docs/performance.md P15): 192 KiB came back in about 4 ms as 2
# parts against 9 ms as one object; 768 KiB about the same either way; 3 MiB slower in parts.
PART_BYTES = 96 * 1024
INLINE_PARTS = 4


def pixel_parts(out: EngineOutput) -> tuple[EngineOutput, list[bytes], list[dict[str, Any]] | None]:
    """(the output without its pixels, the pixel parts, how to put each image back) for PIL images of a
    byte a band, PART_BYTES x INLINE_PARTS in all or less; else (out, [], None)."""
    images = out.images
    if not all(getattr(im, "mode", None) in ("RGB", "RGBA", "L") for im in images):  # latents, arrays
        return out, [], None
    if sum(im.width * im.height * len(im.getbands()) for im in images) > PART_BYTES * INLINE_PARTS:
        return out, [], None
    raw = [im.tobytes() for im in images]
    joined = b"".join(raw)
    parts = [joined[i:i + PART_BYTES] for i in range(0, len(joined), PART_BYTES)]
    layout = [{"mode": im.mode, "size": im.size, "bytes": len(data), "info": dict(im.info)}
              for im, data in zip(images, raw)]
    return dataclasses.replace(out, image=None, more_images=[]), parts, layout


def with_pixels(out: EngineOutput, parts: list[bytes], layout: list[dict[str, Any]]) -> EngineOutput:
    """``pixel_parts`` undone: the images put back from their parts, bit for bit."""
    from PIL import Image

    joined, images, at = b"".join(parts), [], 0
    for entry in layout:
        image = Image.frombytes(entry["mode"], tuple(entry["size"]), joined[at:at + entry["bytes"]])
        image.info.update(entry["info"])
        images.append(image)
        at += entry["bytes"]
    return dataclasses.replace(out, image=images[0], more_images=images[1:])


def fold(pending: list[ProgressEvent], event: ProgressEvent) -> None:
    """Hold ``event`` back, replacing a held one of its phase: every phase reaches the app, at its latest step."""
    if pending and pending[-1].phase == event.phase:
        pending[-1] = event
    else:
        pending.append(event)


def resource_ask(cluster: dict[str, float], cores: int) -> tuple[str, dict[str, Any]]:
    """(device kind, ray_actor_options) for a replica of ``cores`` accelerators on this cluster."""
    if cluster.get("neuron_cores"):
        return "neuron", {"num_cpus": 0, "resources": {"neuron_cores": cores}}
    if cluster.get("GPU"):
        return "cuda", {"num_cpus": 0, "num_gpus": cores}
    return "cpu", {"num_cpus": cores}


@dataclasses.dataclass(frozen=True)
class ReplicaDevice:
    """What admission reads of a device (``backend.hardware.device.Device``'s names), as a replica reported it."""

    kind: str
    dtype: str
    compile_backend: str | None
    eager_compiles: bool
    hbm: int | None

    @property
    def info(self) -> "ReplicaDevice":
        return self  # Device.info's dtype and compile_backend

    def hbm_bytes(self) -> int | None:
        return self.hbm


class StudioReplica:
    """One Serve replica: the in-process engine, on the accelerators Ray assigned before ``__init__``. Serve
    calls ``reconfigure`` on every replica, and on each that joins later, so a warm-up reaches them all."""

    def __init__(self, settings: dict[str, Any]):
        import ray
        from ray import serve

        from backend.engines.in_process import InProcessEngine
        from backend.hardware.device import Device, resolve_device
        from backend.models.source import resolve_model

        own_cache = os.environ.get("NEURON_STUDIO_CACHE_DIR")  # a node's own cache folder wins over the app's
        self.settings = Settings.from_json({**settings, **({"cache_dir": own_cache} if own_cache else {})})
        context = ray.get_runtime_context()
        info = resolve_device(self.settings)
        self.device = Device(info, self.settings.max_compiled_shapes)
        self.model = resolve_model(self.settings.model, self.settings.cache_dir)  # (path, label)
        self.engine = InProcessEngine(self.device, self.model[0])
        self.engine.load()
        ids = context.get_accelerator_ids()
        cores = ids.get("neuron_cores") or ids.get("GPU") or []
        self.me = {"replica": serve.get_replica_context().replica_id.unique_id, "node": context.get_node_id(),
                   "pid": os.getpid(), "device": info.kind, "cores": ",".join(map(str, cores)) or "cpu",
                   "visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"), "warm": {}, "served": 0,
                   "bundle": None, "stopped_at": None,
                   "facts": {"kind": info.kind, "dtype": info.dtype, "compile_backend": info.compile_backend,
                             "eager_compiles": self.device.eager_compiles, "hbm": self.device.hbm_bytes()}}
        self.book = ray.get_actor(BOOK, namespace=NAMESPACE)
        self._report()

    def _report(self) -> None:
        self.book.put.remote(self.me["replica"], dict(self.me, warm=dict(self.me["warm"])))

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve's user_config: ``bundle`` (a path every node reads) and ``warm`` [[mode, signature]]."""
        from backend.shapes import parse_signature

        if config.get("bundle") and self.me["bundle"] is None:
            self.me["bundle"] = self._import(config["bundle"])
        for mode, text in (self.me["bundle"] or {}).get("warm", []) + config.get("warm", []):
            if f"{mode} {text}" in self.me["warm"]:
                continue
            shape = parse_signature(text)
            request = GenerationRequest.warm_up(shape, mode, self.settings.steps, self.settings.guidance)
            try:
                self._ran(request, self.engine.run(request))
            except StudioError as exc:
                log.error("warming %s %s: %s", mode, text, exc)
        self._report()

    def _import(self, path: str) -> dict[str, Any]:
        from backend.caches import bundles

        here = bundles.describe_install(self.device, self.settings, *self.model)
        try:
            done = bundles.import_bundle(path, self.device, here)
        except StudioError as exc:
            return {"path": path, "error": str(exc)}
        return {"path": path, "written": done["written"], "already_there": done["already_there"],
                "warm": [[e["mode"], str(e["shape"])] for e in done["manifest"].entries
                         if e["mode"] in IN_PROCESS_MODES]}

    def _ran(self, request: GenerationRequest, out: EngineOutput) -> None:
        self.me["warm"].setdefault(f"{request.mode} {request.shape}", {
            "compiles": out.compiles, "neff_compiles": out.neff_compiles, "compile_seconds": out.compile_seconds})

    async def run(self, request: GenerationRequest, forbid_compile: bool = False):
        """The run as a stream of parts: {"events": [ProgressEvent]}, then a small image's pixels as
        bytes (``pixel_parts``), and last {"events", "output": EngineOutput, "layout"} or {"events",
        "error": the error message}. Each part is one more message through Ray, so the events go out
        at most every ``PROGRESS_EVERY`` seconds, folded in between; what is left rides on the last.
        A Stop cancels the stream: Serve raises ``CancelledError`` here, and the engine ends at its next step."""
        loop, events, stop = asyncio.get_running_loop(), asyncio.Queue(), threading.Event()

        def work() -> EngineOutput:
            def progress(event: ProgressEvent) -> None:
                loop.call_soon_threadsafe(events.put_nowait, event)
            return self.engine.run(request, progress, stop.is_set, forbid_compile)

        done = loop.run_in_executor(None, work)
        done.add_done_callback(lambda _f: events.put_nowait(None))
        pending: list[ProgressEvent] = []
        sent = loop.time()  # the first events go out PROGRESS_EVERY after the start, not at once
        try:
            while True:
                due = False
                try:  # held back: sent when its interval is over, or with what comes next
                    event = await asyncio.wait_for(events.get(), max(0.0, sent + PROGRESS_EVERY - loop.time())
                                                   if pending else None)
                    if event is None:
                        break
                    fold(pending, event)
                except asyncio.TimeoutError:
                    due = True
                if due or loop.time() - sent >= PROGRESS_EVERY:
                    yield {"events": pending}
                    pending, sent = [], loop.time()
            try:
                out = done.result()
            except Exception as exc:  # noqa: BLE001 - sent to the app as the studio's error
                if isinstance(exc, GenerationCancelled):
                    self.me["stopped_at"] = str(exc)
                yield {"events": pending, "error": error_message(exc)}
                return
            self.me["served"] += 1
            self._ran(request, out)
            out, parts, layout = pixel_parts(dataclasses.replace(out, place=self.me["replica"]))
            for part in parts:  # each under Ray's inline size: no object store, no transfer (PART_BYTES)
                yield part
            yield {"events": pending, "output": out, "layout": layout}
        finally:
            stop.set()  # a cancelled stream (the app's Stop): the engine ends at its next step
            if not done.done():
                done.add_done_callback(self._stopped)
            loop.call_later(REPORT_AFTER, self._report)  # after the last part has gone, not beside it

    def _stopped(self, future) -> None:
        exc = future.exception()
        self.me["stopped_at"] = str(exc) if exc else "finished"
        self._report()


class ReplicaBook:
    """Each replica's own account of itself, by replica id (the app forgets the dead ones)."""

    def __init__(self):
        self.entries: dict[str, dict[str, Any]] = {}

    def put(self, replica: str, entry: dict[str, Any]) -> None:
        self.entries[replica] = entry

    def drop(self, replica: str) -> None:
        self.entries.pop(replica, None)

    def all(self) -> dict[str, dict[str, Any]]:
        return self.entries


def build(args: dict[str, Any]):
    """A RayService's ``import_path`` (deploy/rayservice-trn2.yaml): the deployment, its settings
    from the ``NEURON_STUDIO_*`` environment where Serve builds it (each replica resolves its device)."""
    from ray import serve

    from backend.settings import load_settings

    return serve.deployment(StudioReplica, name=DEPLOYMENT).bind(load_settings({}, os.environ).to_json())


def serve_details() -> dict[str, Any]:
    """The Serve controller's details (``ServeInstanceDetails``, captured in tests/standin/captures/ray/)."""
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    return client.get_serve_details() if client is not None else {}


def _text(value: Any) -> Any:
    return getattr(value, "value", value)  # Serve's str enums (ReplicaState, DeploymentStatus) as their text


class RayServeEngine:
    name = "ray"
    status_key = "ray"
    modes = IN_PROCESS_MODES

    def __init__(self, settings: Settings, device, model_path: str, book: PlaceBook, *,
                 details: Callable[[], dict[str, Any]] = serve_details):
        self.settings, self.device, self.book, self._details = settings, device, book, details
        self.state, self.error, self.last_error = "stopped", None, None
        self.handle = self._streaming = None
        self.kind: str | None = None
        self.actor_options: dict[str, Any] = {}
        self.replicas: dict[str, dict[str, Any]] = {}  # replica id -> Serve's view merged with the replica's
        self.nodes: dict[str, dict[str, Any]] = {}
        self.restarts, self.retried, self.target = 0, 0, 0
        self.sent, self._sent_lock = 0, threading.Lock()  # requests handed to Serve and not yet answered
        self.warm: list[list[str]] = [[settings.mode, str(s)] for s in settings.prewarm] \
            if settings.mode in self.modes else []
        self._warmed: set[tuple[str, str]] = set()  # (replica, "mode shape") already told to the table
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._monitor: threading.Thread | None = None
        self._book, self.attached = None, False
        self.scale = (settings.ray_min_replicas, settings.ray_max_replicas)  # autoscaling's bounds; max 0: fixed

    @property
    def configured(self) -> bool:
        return self.settings.ray is not None

    def route(self, request: GenerationRequest) -> Route | None:
        if request.mode not in self.modes or self.state == "stopped":
            return None
        from backend.engines.in_process import in_signature_order

        return Route(in_signature_order(request), self)

    def degraded(self) -> None:
        return None

    def places(self, mode: str) -> list[str]:
        return [r["place"] for r in self.replicas.values() if r["state"] == "RUNNING" and r.get("place")]

    def running(self) -> int:
        return sum(r["state"] == "RUNNING" for r in self.replicas.values())

    def capacity(self) -> int:
        """Requests the job board hands the deployment at once: one a running replica, and under
        autoscaling one more while below its upper bound. Serve scales on the requests its handle
        holds, queued ones included (target_ongoing_requests 1: one a replica); a board that handed it
        only what runs would show it no demand, and it would never grow."""
        running, most = self.running(), self.scale[1]
        return running + 1 if most and running < most else running

    def cores_wanted(self) -> tuple[int, None]:
        return 0, None  # the cluster's cores, not this instance's

    def busy_with_cache(self) -> None:
        return None  # the replicas' caches are their nodes'

    def logs(self, lines: int = 20) -> dict[str, str]:
        return {r["place"] or r["id"]: f"{r['state']} on {r['node_ip']} (pid {r['pid']}): {r['log']}"
                for r in self.replicas.values()}

    def load(self) -> None:
        self.start(wait=True)

    def start(self, size: int | None = None, wait: bool = False) -> dict[str, Any]:
        import ray
        from ray import serve
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        count = self.settings.ray_replicas if size is None else size
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 256:
            raise InvalidRequest("replicas", f"must be a whole number from 1 to 256, got {count!r}")
        with self._lock:
            if not ray.is_initialized():
                ray.init(address=self.settings.ray, namespace=NAMESPACE, log_to_driver=False,
                         logging_level=logging.WARNING)
            self.kind, self.actor_options = resource_ask(ray.cluster_resources(), self.settings.ray_cores_per_replica)
            here = ray.get_runtime_context().get_node_id()
            self._book = ray.remote(ReplicaBook).options(
                name=BOOK, namespace=NAMESPACE, get_if_exists=True, num_cpus=0, lifetime=None,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
            self.target, self.state, self.error = count, "launching", None
        serve.start(proxy_location="Disabled")  # the studio's page is the ingress, not Serve's HTTP proxy
        app = self._details().get("applications", {}).get(APP) or {}
        self.attached = app.get("source") == "declarative"  # a RayService's (serveConfigV2): its config rules
        if self.attached:
            config = (app.get("deployments") or {}).get(DEPLOYMENT, {}).get("deployment_config") or {}
            self.warm = list((config.get("user_config") or {}).get("warm") or [])
            bounds = config.get("autoscaling_config") or {}
            self.scale = (bounds.get("min_replicas") or 0, bounds.get("max_replicas") or 0)
            self.handle = serve.get_app_handle(APP)
            self._streaming = self.handle.options(stream=True)  # made once: every run shares its router
        else:
            self._deploy(count)
        self.state = "ready"
        if self._monitor is None:
            self._stop.clear()
            self._monitor = threading.Thread(target=self._watch, name="ray-monitor", daemon=True)
            self._monitor.start()
        self.refresh()
        return self.describe()

    def _deploy(self, count: int) -> None:
        """serve.run: at once for a user_config change (Serve reconfigures every replica in place),
        a rolling update otherwise; returns when the application is running again."""
        from ray import serve

        settings = dataclasses.replace(self.settings, device=self.kind, prewarm=[])
        scale = {"num_replicas": count}
        if self.settings.ray_max_replicas:
            scale = {"autoscaling_config": {"min_replicas": self.settings.ray_min_replicas,
                                            "initial_replicas": count, "target_ongoing_requests": 1,
                                            "max_replicas": self.settings.ray_max_replicas}}
        config = {"warm": self.warm, "bundle": str(self.settings.cache_from) if self.settings.cache_from else None}
        deployment = serve.deployment(StudioReplica, name=DEPLOYMENT, max_ongoing_requests=1,
                                      ray_actor_options=self.actor_options, user_config=config, **scale)
        try:
            self.handle = serve.run(deployment.bind(settings.to_json()), name=APP, route_prefix=None)
            self._streaming = self.handle.options(stream=True)  # made once: every run shares its router
        except Exception as exc:
            self.state, self.error = "dead", f"{type(exc).__name__}: {exc}"
            raise BackendNotReady(f"the Ray Serve deployment did not start: {self.error}") from exc

    def close(self) -> None:
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(5)
            self._monitor = None
        if self.state == "stopped":
            return
        from ray import serve

        for replica in list(self.replicas.values()):
            if replica.get("place"):
                self.book.lost_place(replica["place"])
        try:
            if not self.attached:  # a RayService's application is its operator's to end
                serve.delete(APP)
        except Exception as exc:  # noqa: BLE001 - the cluster may be gone already
            log.warning("deleting the Serve application: %s", exc)
        self.replicas, self.state = {}, "stopped"
        self.book.capacity_changed()

    stop = close  # the cluster's replicas end; the operator's Start deploys them again

    def warm_everywhere(self, mode: str, shape) -> None:
        """Add (mode, shape) to the deployment's warm set: Serve reconfigures every replica."""
        if [mode, str(shape)] in self.warm or self.attached:  # (a RayService's warm set is its serveConfigV2's)
            return
        self.warm.append([mode, str(shape)])
        self._deploy(self.target)
        self.refresh()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the cluster may be briefly unreachable
                self.error = f"reading the cluster: {type(exc).__name__}: {exc}"

    def refresh(self) -> None:
        """Serve's replicas merged with their own reports; lost places and capacity told to the table."""
        import ray

        app = self._details().get("applications", {}).get(APP) or {}
        deployment = (app.get("deployments") or {}).get(DEPLOYMENT) or {}
        reports = self.reports()
        before, capacity = self.replicas, self.capacity()
        seen = {}
        for r in deployment.get("replicas", []):
            rid, mine = r["replica_id"], reports.get(r["replica_id"], {})
            cores, node = mine.get("cores"), r.get("node_id") or ""  # a replica still being placed has no node
            place = f"ray {rid} · node {node[:8]} · core {cores}" if cores and node else None
            seen[rid] = {"id": rid, "state": _text(r["state"]), "node": node, "node_ip": r.get("node_ip"),
                         "pid": r.get("pid"), "cores": cores, "place": place, "warm": sorted(mine.get("warm", {})),
                         "served": mine.get("served", 0), "bundle": mine.get("bundle"),
                         "stopped_at": mine.get("stopped_at"), "log": r.get("log_file_path"),
                         "visible_cores": mine.get("visible_cores"), "facts": mine.get("facts")}
            for key, counts in (mine.get("warm") or {}).items():
                if place and (rid, key) not in self._warmed:
                    self.book.warmed(place, *key.split(" ", 1), counts)
                    self._warmed.add((rid, key))
        target = deployment.get("target_num_replicas", self.target)  # Serve's, as its autoscaler moves it
        # Serve stops a replica it no longer wants (autoscaling down, a smaller count) as it stops a dead
        # one (STOPPING, then gone): only its target tells them apart, held against the replicas that
        # were up, since a dead one's replacement may be listed, starting, before the dead one goes.
        was_up = sum(1 for r in before.values() if r["state"] != "STARTING")
        for gone in set(before) - set(seen):
            old = before[gone]
            if old.get("place"):
                self.book.lost_place(old["place"])
            self._book.drop.remote(gone)
            if target < was_up:
                log.info("replica %s stopped: Serve scaled the deployment down to %s", gone, target)
            elif self.state == "ready":
                self.restarts += 1
                self.last_error = (f"replica {gone} on node {old['node'][:8] or '?'} is gone (it was "
                                   f"{old['state'].lower()}); Serve starts another")
                log.warning("%s", self.last_error)
        self.replicas = seen
        self.nodes = {n["NodeID"]: {"ip": n["NodeManagerAddress"], "alive": n["Alive"],
                                    "neuron_cores": n["Resources"].get("neuron_cores", 0),
                                    "gpus": n["Resources"].get("GPU", 0), "cpus": n["Resources"].get("CPU", 0),
                                    "head": "node:__internal_head__" in n["Resources"]}
                      for n in ray.nodes()}
        self.status, self.message = _text(deployment.get("status")), deployment.get("message")
        self.target = target
        if self.capacity() != capacity:
            self.book.capacity_changed()

    def admission_device(self) -> ReplicaDevice | None:
        """The device the replicas run on, for admission (None before one reports): a head without
        Neuron serves Neuron replicas, whose every new shape compiles, eager too."""
        facts = next((r["facts"] for r in self.replicas.values() if r.get("facts")), None)
        return ReplicaDevice(**facts) if facts else None

    def reports(self) -> dict[str, dict[str, Any]]:
        """What each replica last said of itself (its warm set with each shape's compile counts)."""
        import ray

        return ray.get(self._book.all.remote(), timeout=10)

    def describe(self) -> dict[str, Any]:
        alive = [n for n in self.nodes.values() if n["alive"]]
        return {"state": self.state, "address": self.settings.ray, "device": self.kind,
                "resources": self.actor_options, "target": self.target, "ready": self.running(),
                "autoscaling": list(self.scale) if self.scale[1] else None,
                "deployment": getattr(self, "status", None), "message": getattr(self, "message", None),
                "restarts": self.restarts, "retried": self.retried, "attached": self.attached, "error": self.error,
                "last_error": self.last_error, "warm_set": [" ".join(w) for w in self.warm],
                "nodes": len(alive), "cluster_neuron_cores": sum(n["neuron_cores"] for n in alive),
                "node_list": [{"id": node, **seen} for node, seen in  # the head first, then by id
                              sorted(self.nodes.items(), key=lambda kv: (not kv[1]["head"], kv[0]))],
                "replicas": sorted(self.replicas.values(), key=lambda r: (r["node"], r["cores"] or ""))}

    def run(self, request: GenerationRequest, on_progress: Callable[[ProgressEvent], None],
            should_stop: Callable[[], bool], forbid_compile: bool = False,
            warming: bool = False) -> EngineOutput:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        if self.handle is None:
            raise BackendNotReady("the Ray Serve engine is not started")
        request = dataclasses.replace(request, reading=None)
        with self._sent_lock:
            self.sent += 1
            queued = self.sent > self.running()
        try:
            if queued:  # every running replica has one (capacity's one more under autoscaling): Serve holds it
                on_progress(ProgressEvent(Phase.REPLICA, 0, request.steps, request.mode, str(request.shape)))
            for attempt in (1, 2):
                try:
                    out = self._stream(request, on_progress, should_stop, forbid_compile)
                    break
                except (RayActorError, ActorDiedError, ActorUnavailableError) as exc:
                    why = str(exc).strip().splitlines()[0][:300]
                    if attempt == 2 or should_stop():
                        raise GroupDead(f"the Ray replica serving this request died twice ({why}); Serve restarts "
                                        f"replicas, and the page shows when they are back — try again") from None
                    self.retried += 1
                    log.warning("a Ray replica died under a request (%s); another replica serves it", why)
        finally:
            with self._sent_lock:
                self.sent -= 1
        if not self.replicas.get(out.place, {}).get("place"):
            self.refresh()
        out.place = self.replicas.get(out.place, {}).get("place") or f"ray {out.place}"
        if warming:
            self.warm_everywhere(request.mode, request.shape)
        return out

    def _stream(self, request, on_progress, should_stop, forbid_compile) -> EngineOutput:
        from ray.serve.exceptions import RequestCancelledError

        stream = self._streaming.run.remote(request, forbid_compile)
        done = threading.Event()

        def watch() -> None:  # a Stop reaches the replica at once, not at the next part
            while not done.wait(0.05):
                if should_stop():
                    stream.cancel()
                    return

        threading.Thread(target=watch, name="ray-stop", daemon=True).start()
        try:
            pixels = []
            for part in stream:
                if isinstance(part, bytes):
                    pixels.append(part)
                    continue
                for event in part["events"]:
                    on_progress(event)
                if "error" in part:
                    raise error_from_message(part["error"])
                if "output" in part:
                    return with_pixels(part["output"], pixels, part["layout"]) if part["layout"] else part["output"]
                if should_stop():  # a Stop asked from a progress callback goes out now
                    stream.cancel()
        except RequestCancelledError:
            raise GenerationCancelled("stopped: the Ray replica ended the run at its next step") from None
        finally:
            done.set()
        raise BackendNotReady("the Ray replica ended the stream without an answer")
