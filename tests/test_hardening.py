"""Hardening: bad input, load, faults and access, held to what SECURITY.md promises.

The cases and measurements live in bench/bad_input.py, bench/traffic.py, bench/faults.py and
bench/foreign_files.py (``python -m bench.hardening`` prints them as figures); these tests run the
same functions and hold every figure to its promise."""

import urllib.error
import urllib.request
from pathlib import Path

import pytest
from gradio_client import Client

from bench import bad_input, faults, foreign_files, traffic
from tests.conftest import LAUNCHED_KEEP
from tools.app_process import running_app


@pytest.fixture(scope="module")
def app(launched_app):
    """The app the API and browser tests use too (tests/conftest.py): (url, workdir)."""
    return launched_app[:2]


@pytest.fixture(scope="module")
def app_url(app):
    return app[0]


@pytest.mark.slow
def test_bad_inputs_through_the_api_are_answered_clearly_and_change_nothing(app_url, own_tempdir):
    client = Client(app_url, verbose=False)
    rows = bad_input.run_api_cases(client, lambda: client.predict(api_name="/status"))
    unclear = [r for r in rows if not r["clear"]]
    assert not unclear, unclear
    _image, record = client.predict("still works", 64, 64, "eager", 2, 7, 1.0, api_name="/generate")
    assert record["seed"] == 7


def test_bad_inputs_through_the_cli_are_one_clear_line(tmp_path):
    rows = bad_input.run_cli_cases(tmp_path)  # the CLI's --output-dir is tmp_path itself
    unclear = [r for r in rows if not r["clear"]]
    assert not unclear, unclear
    assert not list(tmp_path.rglob("*.png")), list(tmp_path.rglob("*"))  # nothing written where it writes


@pytest.mark.slow
def test_concurrent_clients_are_all_answered_in_order(app_url):
    load = traffic.run_load(app_url)
    assert load["answered"] == load["sent"] == 20 and not load["errors"]
    assert not load["lost_or_duplicated"] and load["each_client_in_order"] and load["queue_position_seen"]


@pytest.mark.slow
def test_memory_is_stable_over_50_requests():
    mem = traffic.run_memory(50)  # bench.hardening runs 100
    assert mem["growth_MiB"] < 64, mem


@pytest.mark.slow
def test_injected_faults_end_with_a_clear_status_and_a_working_app():
    """``python -m bench.hardening`` also kills and hangs rank 1; other tests hold those (a killed
    rank reported dead with its log: tests/backend/test_tp.py; a hung rank timed out, the group
    torn down and restarted: the tensor-parallel scenario of tests/neuron), so here rank 0 dies."""
    rows = faults.run_faults(tp_faults=faults.TP_FAULTS[:1])
    assert [r["fault"] for r in rows] == ["compile failure", "exception in the pipeline",
                                         "TP group fails to start (bad torchrun arguments)", "TP rank 0 killed",
                                         "stop after the faults"]
    for r in rows[:-1]:  # each says what happened (bench.faults.SAYS), and the app works after it
        assert r["clear_error"] is True and r["recovered"] and r["orphans"] == 0, r
    assert rows[-1]["clear_error"] is None and rows[-1]["recovered"] and rows[-1]["orphans"] == 0, rows[-1]
    assert "no-such-torchrun-flag" in rows[2]["error"] or "unrecognized" in rows[2]["error"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["compiled", "tp"])
def test_sigterm_mid_generation_exits_cleanly_with_no_orphan(tmp_path, mode):
    """It exits, cleanly, leaving nothing (no process, no half-written PNG, nothing in its temp
    folder): in process mid-compile (eager and regional run in the same
    engine; ``python -m bench.hardening`` signals all four modes), and with a worker group. How fast
    (under 3 s on a quiet machine) is a figure of
    ``python -m bench.hardening``; here the bound is one a loaded machine meets (no wall-clock goal)."""
    result = faults.run_sigterm(tmp_path, mode)
    # Mid-generation for real: the status said a run was in flight when the signal went.
    assert result["busy_when_signalled"] in ("encoding", "compiling", "denoising", "decoding"), result
    assert result["exit_code"] == 0 and result["orphans"] == 0 and result["half_written_pngs"] == 0, result
    assert result["left_in_tmp"] == [], result  # Gradio's folder, the group's run dir, torchrun's logs


@pytest.mark.slow
def test_only_the_apps_own_images_can_be_fetched(app, own_tempdir):
    """Nothing outside the output folder, and in it only the PNGs the app wrote: a user's own file
    kept there, or an HTML file that would be served as a page from the app's address, is not."""
    app_url, workdir = app
    outputs = (workdir / "outputs").resolve()
    (outputs / "sub").mkdir(parents=True, exist_ok=True)
    (outputs / "notes.html").write_text("<script>alert(1)</script>")
    (outputs / "sub" / "20261202-000000-64x64-eager-1.png").write_bytes(b"not the app's")
    png, _record = Client(app_url, verbose=False).predict("a fox", 64, 64, "eager", 1, 5, 1.0, api_name="/generate")
    mine = max(outputs.glob("*.png"), key=lambda p: p.stat().st_mtime)  # the image the app just wrote
    with urllib.request.urlopen(f"{app_url}gradio_api/file={mine}", timeout=10) as response:
        assert response.status == 200 and response.headers["content-type"] == "image/png"
    for path in ("/etc/passwd", "../../../../etc/passwd", str(Path(__file__).resolve()),
                 str(outputs / "notes.html"), str(outputs / "sub" / "20261202-000000-64x64-eager-1.png")):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{app_url}gradio_api/file={path}", timeout=10)
        assert err.value.code in (403, 404), path


@pytest.mark.slow
def test_output_names_cannot_be_steered_by_the_prompt(app_url, own_tempdir):
    client = Client(app_url, verbose=False)
    client.predict("../../../../tmp/evil", 64, 64, "eager", 1, 5, 1.0, api_name="/generate")
    status = client.predict(api_name="/status")
    assert status["state"] == "ready"
    assert not Path("/tmp/evil.png").exists() and not Path("/tmp/evil").exists()


@pytest.mark.slow
def test_a_public_address_without_auth_prints_a_warning(tmp_path):
    with running_app(tmp_path, "--host", "0.0.0.0", ready=False):
        pass
    assert "without --auth" in (tmp_path / "app.log").read_text()


@pytest.mark.slow
def test_hostile_pngs_are_answered_like_a_normal_one_and_hold_no_other_call(app_url, tmp_path):
    """The probe's 201-byte PNG (Steps: 1, + 60,000 letters) held the server for 26 s; now each
    hostile file's parse is within a small factor of a normal one's, measured side by side, and
    /status is answered meanwhile."""
    rows = bad_input.run_png_cases(app_url, tmp_path)
    assert len(rows) == len(bad_input.PNG_CASES)
    for row in rows:
        assert row["answered"] and row["ratio_to_normal"] < 10, row
        assert row["slowest_status_s"] < 20 * row["normal_s"] + 1.0, row


@pytest.mark.slow
def test_the_output_folder_keeps_only_its_newest_pngs(app, own_tempdir):
    url, workdir = app
    client = Client(url, verbose=False)
    (workdir / "outputs").mkdir(exist_ok=True)
    (workdir / "outputs" / "mine.png").write_bytes(b"a user's file")
    for seed in range(LAUNCHED_KEEP + 2):
        client.predict("keep", 64, 64, "eager", 1, seed, 1.0, api_name="/generate")
    made = [p for p in (workdir / "outputs").glob("*.png") if p.name != "mine.png"]
    assert len(made) == LAUNCHED_KEEP and (workdir / "outputs" / "mine.png").exists()
    kept_seeds = {int(p.stem.split("-")[4]) for p in made}  # <date>-<time>-64x64-eager-<seed>
    assert kept_seeds == set(range(2, LAUNCHED_KEEP + 2))  # the newest: the first two made are the ones gone
    assert all(p.stat().st_mode & 0o077 == 0 for p in made)  # not readable by other users


def test_clearing_caches_keeps_every_foreign_file(tmp_path):
    figures = foreign_files.run_foreign_files(tmp_path)
    assert figures["foreign_kept"] == figures["foreign_planted"] > 0
    assert figures["entries_removed"] == figures["entries_written"]


@pytest.mark.slow
def test_the_running_app_refuses_an_upload_from_another_site(app_url):
    """The upload door (web.guard; its bounds: tests/ui/test_guard.py) is in the running app's
    chain, before Gradio's upload route."""
    request = urllib.request.Request(f"{app_url}gradio_api/upload", data=b"--x--\r\n", method="POST",
                                     headers={"Origin": "https://evil.example",
                                              "Content-Type": "multipart/form-data; boundary=x"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403 and b"another site" in refused.value.read()
