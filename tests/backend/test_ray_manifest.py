"""deploy/rayservice-trn2.yaml against the app: its Serve application is the one the studio attaches
to, its resource names are the ones Ray and the Neuron device plugin use, its flags and variables
are the app's own. (Parsed here; never applied to a cluster in this project's tests.)"""

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.engines import ray_serve
from backend.settings import IN_PROCESS_MODES, OPTIONS, load_settings, names
from backend.shapes import parse_signature

yaml = pytest.importorskip("yaml")
MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "rayservice-trn2.yaml"


def _containers(spec):
    return spec["template"]["spec"]["containers"]


def test_the_trn2_manifest_deploys_what_the_studio_attaches_to_with_the_apps_own_names():
    import app as app_module

    service, ingress = yaml.safe_load_all(MANIFEST.read_text())
    assert service["kind"] == "RayService" and ingress["kind"] == "Service"
    application = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]
    assert application["name"] == ray_serve.APP
    module, attr = application["import_path"].split(":")
    assert getattr(importlib.import_module(module), attr) is ray_serve.build
    deployment = application["deployments"][0]
    assert deployment["name"] == ray_serve.DEPLOYMENT and deployment["max_ongoing_requests"] == 1
    assert deployment["ray_actor_options"] == ray_serve.resource_ask({"neuron_cores": 4}, 1)[1]
    for mode, text in deployment["user_config"]["warm"]:
        assert mode in IN_PROCESS_MODES and parse_signature(text)
    cluster = service["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # nothing is scheduled on the head but Serve's own actors
    assert all("aws.amazon.com/neuroncore" not in str(c.get("resources")) for c in _containers(head))
    studio = next(c for c in _containers(head) if c["name"] == "studio")
    argv = studio["command"][2:]
    assert studio["command"][:2] == ["python", "app.py"]
    args = app_module.build_parser().parse_args(argv)
    settings = load_settings({k: v for k, v in vars(args).items() if k in OPTIONS}, environ={})
    assert settings.ray == "auto" and settings.ray_replicas == deployment["num_replicas"]
    assert settings.ray_cores_per_replica == deployment["ray_actor_options"]["resources"]["neuron_cores"]
    assert ingress["spec"]["ports"][0]["targetPort"] == settings.port == studio["ports"][0]["containerPort"]
    known = {names(dest)[1] for dest in OPTIONS}
    for group in (head, *cluster["workerGroupSpecs"]):
        for container in _containers(group):
            named = [e["name"] for e in container.get("env", []) if e["name"].startswith("NEURON_STUDIO_")]
            assert set(named) <= known, named
    (workers,) = cluster["workerGroupSpecs"]
    granted = int(_containers(workers)[0]["resources"]["limits"]["aws.amazon.com/neuroncore"])
    declared = yaml.safe_load(yaml.safe_load(workers["rayStartParams"]["resources"]))
    assert declared == {"neuron_cores": granted}


class _Book:
    """The manager's side of PlaceBook, recorded."""

    def __init__(self):
        self.lost, self.warm, self.changes = [], [], 0

    def lost_place(self, place):
        self.lost.append(place)

    def warmed(self, place, mode, signature, counts):
        self.warm.append((place, mode, signature, counts["neff_compiles"]))

    def capacity_changed(self):
        self.changes += 1


def _on_captures(monkeypatch, book=None, dropped=None):
    """A RayServeEngine that reads Ray's captured output (tests/standin/captures/ray), ready, no
    replica reporting yet, its ReplicaBook actor replaced by ``dropped.append``; returns (engine,
    Serve's details)."""
    import json

    ray = pytest.importorskip("ray")
    from tests.conftest import make_settings

    captures = MANIFEST.parents[1] / "tests" / "standin" / "captures" / "ray"
    details = json.loads((captures / "serve_details.json").read_text())
    monkeypatch.setattr(ray, "nodes", lambda: json.loads((captures / "nodes.json").read_text()))
    engine = ray_serve.RayServeEngine(make_settings(ray="auto"), None, "", book or _Book(), details=lambda: details)
    monkeypatch.setattr(engine, "reports", lambda: {})
    engine._book = SimpleNamespace(drop=SimpleNamespace(remote=(dropped if dropped is not None else []).append))
    engine.state = "ready"
    return engine, details


def _deployment(details):
    return details["applications"][ray_serve.APP]["deployments"][ray_serve.DEPLOYMENT]


def test_the_engine_reads_serves_captured_details_and_tells_the_table_what_changed(monkeypatch):
    """Ray's captured output (tests/standin/captures/ray): each RUNNING replica a place naming its node
    and core, its warm report told to the table once; a replica gone from Serve's list is a lost
    place and a restart, and the capacity follows."""
    book, dropped = _Book(), []
    engine, details = _on_captures(monkeypatch, book, dropped)
    replicas = _deployment(details)["replicas"]
    reports = {r["replica_id"]: {"cores": "0", "warm": {"compiled 80x80": {"neff_compiles": 0}}} for r in replicas}
    monkeypatch.setattr(engine, "reports", lambda: reports)
    engine.refresh()
    places = engine.places("eager")
    assert engine.capacity() == 2 and book.changes == 1 and len(places) == 2
    assert all(f" · node {r['node_id'][:8]} · core 0" in " ".join(places) for r in replicas)
    assert sorted(book.warm) == sorted((p, "compiled", "80x80", 0) for p in places)
    described = engine.describe()
    assert described["nodes"] == 3 and described["cluster_neuron_cores"] == 2 and described["deployment"] == "HEALTHY"
    engine.refresh()
    assert len(book.warm) == 2  # told once
    gone = replicas.pop(0)
    engine.refresh()
    assert book.lost == [p for p in places if gone["replica_id"] in p] and engine.restarts == 1
    assert engine.capacity() == 1 and book.changes == 2 and gone["replica_id"] in engine.last_error
    assert dropped == [gone["replica_id"]]


def test_a_dead_replica_gone_after_its_replacement_was_listed_is_a_restart_not_a_scale_down(monkeypatch):
    """The order a dry run met (a node's death found after 10 s): Serve lists the replacement,
    STARTING and unplaced, while the dead replica is still listed; then the dead one goes. Three
    listed and a target of two is not a scale-down: the replicas that were up were two."""
    import copy

    engine, details = _on_captures(monkeypatch)
    deployment = _deployment(details)
    engine.refresh()
    assert deployment["target_num_replicas"] == 2 and len(engine.replicas) == 2
    replacement = dict(copy.deepcopy(deployment["replicas"][0]), replica_id="replacement", state="STARTING",
                       node_id=None, node_ip=None, pid=None)
    deployment["replicas"].append(replacement)
    engine.refresh()
    assert engine.restarts == 0
    gone = deployment["replicas"].pop(0)
    engine.refresh()
    assert engine.restarts == 1 and gone["replica_id"] in engine.last_error


def test_under_autoscaling_the_board_hands_serve_one_request_more_than_runs_until_the_upper_bound(monkeypatch):
    """Serve scales on the requests its handle holds (target 1 a replica): the board must let one
    more through than the replicas running, or Serve sees no demand and never grows; at the upper
    bound, and without autoscaling, one a running replica. The page says the bounds."""
    import json

    ray = pytest.importorskip("ray")
    from tests.conftest import make_settings
    from ui.views_system import ray_markdown

    captures = MANIFEST.parents[1] / "tests" / "standin" / "captures" / "ray"
    monkeypatch.setattr(ray, "nodes", lambda: json.loads((captures / "nodes.json").read_text()))
    details = json.loads((captures / "serve_details.json").read_text())
    deployment = details["applications"][ray_serve.APP]["deployments"][ray_serve.DEPLOYMENT]

    def engine(**settings):
        made = ray_serve.RayServeEngine(make_settings(ray="auto", **settings), None, "", _Book(),
                                        details=lambda: details)
        monkeypatch.setattr(made, "reports", lambda: {})
        made._book, made.state = SimpleNamespace(drop=SimpleNamespace(remote=lambda _rid: None)), "ready"
        made.refresh()
        return made

    assert engine().capacity() == 2  # two RUNNING in the capture, a fixed deployment
    scaled = engine(ray_min_replicas=1, ray_max_replicas=4)
    assert scaled.running() == 2 and scaled.capacity() == 3
    assert scaled.describe()["autoscaling"] == [1, 4] and scaled.describe()["ready"] == 2
    deployment["target_num_replicas"] = 3  # Serve's autoscaler moved its target
    scaled.refresh()
    assert scaled.describe()["target"] == 3
    status = SimpleNamespace(ray=scaled.describe(), waiting=[], running=[])
    assert "autoscaling between 1 and 4" in ray_markdown(status, "en")
    assert engine(ray_min_replicas=1, ray_max_replicas=2).capacity() == 2  # at its upper bound
    # Serve scales down: a replica it stopped is gone from its list and its target is lower; no restart
    deployment["target_num_replicas"] = 1
    gone = deployment["replicas"].pop(0)
    scaled.refresh()
    assert scaled.restarts == 0 and scaled.running() == 1 and scaled.capacity() == 2
    assert gone["replica_id"] not in scaled.replicas and scaled.last_error is None
