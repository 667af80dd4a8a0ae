"""The System tab's Ray Serve cluster (``ui.views_system.ray_markdown``) from a real run's
``status().ray`` (tests/standin/captures/ray/status_ray.json: the app on a local Ray cluster of a head
and two worker nodes, two Serve replicas), in English and Turkish, the operator's and a viewer's."""

import copy
import json
import re
from pathlib import Path

from tests.ui.fake_engines import a_status
from ui.handlers_system import SystemTab
from ui.views_system import ray_markdown

CAPTURE = Path(__file__).resolve().parents[1] / "standin" / "captures" / "ray" / "status_ray.json"
SEEN = json.loads(CAPTURE.read_text())
HEAD, A, B = (n["id"] for n in SEEN["node_list"])
QUEUE = {"waiting": [{"engine": "ray", "state": "waiting"}, {"engine": "ray", "state": "waiting"},
                     {"engine": "in-process", "state": "waiting"}],
         "running": [{"engine": "ray", "state": "running"}]}


def _status(ray=SEEN, **given):
    return a_status(ray=copy.deepcopy(ray), **{**QUEUE, **given})


def _rows(markdown: str, first: str) -> list[list[str]]:
    """The table whose header's first cell is ``first``, as rows of cells (the header left out)."""
    tables = [block.splitlines() for block in markdown.split("\n\n") if block.startswith(f"| {first} |")]
    assert len(tables) == 1, markdown
    return [[c.strip() for c in line.strip("|").split("|")] for line in tables[0][2:]]


def test_the_operator_sees_each_node_with_its_cores_and_each_replica_where_it_runs():
    shown = ray_markdown(_status())
    assert shown.startswith("**Ray Serve cluster** (neuron): engine ready · deployment healthy · 2 of 2 replicas "
                            "running · 0 restarted, 0 requests retried · queue: 2 waiting, 1 running"), shown
    assert _rows(shown, "Node") == [[f"`{HEAD[:8]}` (head)", "192.0.2.2", "0", "1", "0", "—"],
                                    [f"`{A[:8]}`", "192.0.2.2", "1", "1", "0", "1"],
                                    [f"`{B[:8]}`", "192.0.2.2", "1", "1", "0", "1"]]
    by_id = {r["id"]: r for r in SEEN["replicas"]}
    assert _rows(shown, "Replica") == [[f"`{rid}`", f"`{r['node'][:8]}`", "0", "running", "1", str(r["served"])]
                                       for rid, r in by_id.items()]
    assert "Ray says" not in shown  # nothing went wrong in that run


def test_a_turkish_page_reads_the_cluster_in_turkish_with_the_same_figures():
    shown = ray_markdown(_status(), "tr")
    assert shown.startswith("**Ray Serve kümesi** (neuron): motor hazır · dağıtım sağlıklı · 2 kopyanın 2 tanesi "
                            "çalışıyor · 0 yeniden başlatıldı, 0 istek yeniden denendi · kuyruk: 2 bekliyor, "
                            "1 çalışıyor"), shown
    assert _rows(shown, "Düğüm")[0] == [f"`{HEAD[:8]}` (baş düğüm)", "192.0.2.2", "0", "1", "0", "—"]
    assert [row[3] for row in _rows(shown, "Kopya")] == ["çalışıyor", "çalışıyor"]
    # Every word outside the ids (in backticks) is Turkish, or a name: Ray Serve, neuron, the units.
    words = set(re.findall(r"[A-Za-zçğıöşüÇĞİÖŞÜ]+", re.sub(r"`[^`]*`", "", shown)))
    english = {"cluster", "engine", "ready", "deployment", "healthy", "of", "replicas", "running", "restarted",
               "requests", "retried", "queue", "waiting", "Node", "Address", "Replicas", "Replica", "Cores", "State",
               "Warm", "shapes", "Served", "head"}
    assert not words & english, words & english
    assert {"Ray", "Serve", "neuron", "NeuronCores", "CPU", "GPU", "Düğüm", "Adres", "Çekirdekler"} <= words


def test_a_lost_node_and_a_replica_being_placed_are_said_so_and_a_viewer_sees_no_address():
    ray = copy.deepcopy(SEEN)
    ray["node_list"][1]["alive"] = False
    ray["replicas"][0].update(state="STARTING", node="", cores=None, warm=[], served=0)
    ray.update(ready=1, restarts=1, deployment="UPDATING", message="Deploying new version.")
    viewer = _status(ray).for_viewer()
    for lang, lost, starting, said in (("en", "lost", "starting", "Ray says: Deploying new version."),
                                       ("tr", "kayıp", "başlıyor", "Ray'in iletisi: Deploying new version.")):
        shown = ray_markdown(viewer, lang)
        assert "192.0.2.2" not in shown and len(_rows(shown, "Node" if lang == "en" else "Düğüm")[0]) == 5
        assert _rows(shown, "Node" if lang == "en" else "Düğüm")[1][0] == f"`{A[:8]}` — {lost}"
        assert _rows(shown, "Replica" if lang == "en" else "Kopya")[0][1:5] == ["—", "—", starting, "0"]
        assert shown.endswith(said)
    assert "1 of 2 replicas running · 1 restarted" in ray_markdown(viewer)


def test_the_system_tab_shows_it_only_under_ray():
    """SystemTab.views, what the page's timer fills: the cluster after the replica pool, empty without --ray."""
    assert SystemTab.views(_status(), "tr")[6] == ray_markdown(_status(), "tr")
    assert SystemTab.views(a_status(), "en")[6] == ""


def test_under_ray_the_engine_row_names_ray_serve_where_no_pipeline_runs_in_the_app():
    """The app loads no pipeline of its own under --ray: the row said "… · ready"."""
    from ui.views_system import system_markdown

    status = _status(engine=None, engines={"ray": {"state": "ready", "modes": ["eager"], "capacity": 2}})
    assert "| Engine | Ray Serve · ready |" in system_markdown(status, "en")
    assert "| Motor | Ray Serve · hazır |" in system_markdown(status, "tr")
