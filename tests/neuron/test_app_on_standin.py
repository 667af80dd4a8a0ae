"""The app on the CPU-backed "neuron" stand-in (tests/standin): what it calls, which cores it holds,
what it counts and caches. Nothing here measures or claims Trainium speed or memory.

Each scenario runs in its own process (``tests/neuron/app_scenarios.py``): the Neuron runtime claims
cores per process, and NEFF persistent hits show only in a later process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import beside
from tests.neuron.captures import load
from tests.neuron.standin import run_all, standin_env

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _start(name: str, workdir, env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.neuron.app_scenarios", name, str(workdir)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen, timeout: int = 280) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def _scenario(name: str, workdir, env, timeout: int = 280) -> dict:
    return _result(_start(name, workdir, env), timeout)


ALL_CORES = "test_with_neuron_cores_none_a_degree_4_group_holds_every_core_of_a_trn2_3xlarge"
MEMORY = "test_a_signature_that_would_not_fit_the_core_is_refused_and_a_fast_one_of_its_size_runs"


@pytest.fixture(scope="module", autouse=True)
def scenarios_beside(request, tmp_path_factory):
    """The scenarios with an instance (state dir) of their own and nothing timed, started when the
    module starts (``tests.conftest.beside``); their tests, last in the module, read them."""
    def start(name: str, **extra: str):
        workdir = tmp_path_factory.mktemp(name)
        return lambda: _start(name, workdir, standin_env(workdir / "state", **extra))

    with beside(request, {ALL_CORES: start("tp_all_cores"),
                          MEMORY: start("memory", NEURON_STANDIN_HBM_BYTES=str(10**9))}) as started:
        yield lambda test: _result(started[test])


@pytest.fixture(scope="module")
def neuron_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("neuron-app")
    env = standin_env(root / "state")
    return root, env


def test_doctor_says_neuron_and_shows_the_core_plan(neuron_env):
    root, _ = neuron_env
    cache = ["--cache-dir", str(root / "cache")]
    # three processes side by side, each with its own core claims
    proc, text, four = run_all((["app.py", "doctor", "--json", *cache], standin_env(root / "doctor-1")),
                               (["app.py", "doctor", "--neuron-cores", "1", *cache], standin_env(root / "doctor-2")),
                               (["app.py", "doctor", "--json", "--tp-degree", "4", *cache],
                                standin_env(root / "doctor-3")),
                               timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["device"]["kind"] == "neuron" and report["device"]["compile_backend"] == "neuron"
    assert report["device"]["neuron_cores"] == 1 and report["device"]["neuron_visible_cores"] == "3"
    plan = report["torch_neuronx"]["core_plan"]
    # A trn2.3xlarge as neuron-ls prints it (4 logical cores at LNC=2): the app on its last core,
    # the default degree 2 on the first two.
    assert plan == {"instance_cores": 4, "physical_cores": 8, "lnc": 2, "source": "neuron-ls", "app_cores": "3",
                    "free_cores": "0-2",
                    "engines": {"tensor-parallel": {"count": 2, "cores": "0-1", "error": None, "held": False,
                                                    "degrees": [1, 2, 4]}},  # divide the heads, fit one chip
                    "devices": [{"device": 0, "cores": "0-3", "memory_bytes": 96 * 2**30}],
                    "hbm_per_core_bytes": 24 * 2**30, "whole_banks": False, "instance_type": "trn2.3xlarge"}
    nx = report["torch_neuronx"]
    assert nx["fallback_execution_disabled"] == "1"
    assert nx["neff_key"] == {"neuron_target": "trn2", "lnc": 2, "neuron_opt_level": None, "neuron_cc_flags": ""}
    assert nx["lock_timeout"] == "1800" and nx["neuronx_cc"]["path"] is None  # the stand-in ships no compiler
    assert {"TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"} <= set(report["caches"])
    assert text.returncode == 0, text.stderr
    text = text.stdout
    assert ("NeuronCores   app 1 · tensor-parallel ranks 0,2 · instance 4 logical = 8 physical / LNC 2 on 1 device "
            "(from neuron-ls, trn2.3xlarge), HBM 24 GiB per core") in text
    assert "neuronx-cc    NOT ON PATH" in text and "NEFF key      target trn2, LNC 2" in text
    refusal = json.loads(four.stdout)["torch_neuronx"]["core_plan"]["engines"]["tensor-parallel"]["error"]
    assert "3 are free (0-2; a tensor-parallel group stays on one chip" in refusal
    assert "so degrees that fit are 1, 2 (or give the app fewer cores: --neuron-cores none" in refusal


@pytest.mark.slow
def test_modes_run_on_neuron_match_the_cpu_and_count_compiles_apart(neuron_env):
    root, env = neuron_env
    out = _scenario("inprocess", root, dict(env, NEURON_STANDIN_COMPILE_SECONDS="0.5",
                                            NEURON_STANDIN_FALLBACK_OPS="aten::silu"))
    assert out["status_device"]["kind"] == "neuron"
    assert all(diff <= 2 for diff in out["max_diff_vs_cpu"].values()), out["max_diff_vs_cpu"]
    assert set(out["max_diff_vs_cpu"]) == {"eager", "compiled", "regional"}
    eager, c64, c128, c64_again, regional = out["records"]
    assert all(r["device"] == "neuron" for r in out["records"])
    # Eager compiles on Neuron too (one NEFF per new op signature), but builds no torch.compile graph.
    assert eager["compiles"] == 0 and eager["neff_compiles"] > 0 and eager["compiled"]
    assert [c64["compiled"], c128["compiled"], c64_again["compiled"]] == [True, True, False]
    assert c64["compiles"] == 1 and c128["compiles"] == 1
    # The neuron backend compiles at the first execution: the record's compile time has the
    # compiler's (simulated, 0.5 s a NEFF) seconds from TorchNeuron's metric (in nanoseconds), not
    # just dynamo's — and reads seconds, not thousands of them.
    for record in (c64, c128, regional):
        assert 0.5 <= record["compile_seconds"] < 20, record
    rows = {(r["mode"], r["shape"]): r for r in out["status"]["shapes"]}
    assert 0.5 <= rows[("compiled", "64x64")]["compile_seconds"] < 20
    # The op the stand-in runs on the host (NEURON_STANDIN_FALLBACK_OPS) is in every run's record
    # (the text encoder runs eagerly in every mode), the run line and the System tab.
    assert all(r["fallback_ops"] == ["aten::silu"] for r in out["records"])
    assert "1 op(s) ran on the host" in out["run_line"] and "aten::silu" in out["run_line"]
    row = next(line for line in out["system"].splitlines() if "Ops run on the host (CPU fallback)" in line)
    assert "`aten::silu` (" in row and "eager 64x64" in row and "compiled 64x64" in row
    # Graphs and NEFFs are counted apart: never summed into one number.
    assert c64["neff_compiles"] >= 1 and c64_again["neff_compiles"] == 0
    assert regional["compiles"] >= 1
    # The app claimed only its own core: the instance's last.
    assert out["claims"] == {"3": out["pid"]}
    assert {c["variable"] for c in out["status"]["cache"]["caches"]} == {
        "TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"}
    assert out["status"]["cache"]["bytes"] > 0


@pytest.fixture(scope="module")
def second_process(neuron_env) -> dict:
    """The "second" scenario, run once for the tests that read it."""
    root, env = neuron_env
    if not (root / "cache" / "neff").exists():
        _scenario("inprocess", root, env)
    # The same op runs on the host here as in the first process (an unsupported op is so everywhere).
    return _scenario("second", root, dict(env, NEURON_STANDIN_FAIL_COMPILE_DIM="36",
                                          NEURON_STANDIN_FALLBACK_OPS="aten::silu"))


@pytest.mark.slow
def test_a_second_process_hits_the_neff_cache_and_warm_only_refuses_what_would_compile(second_process):
    out = second_process
    first = out["first_compiled_64"]
    assert first["compiles"] == 1 and first["neff_compiles"] == 0  # a new dynamo graph, its NEFF from disk
    assert out["locked_warm_64"]["neff_compiles"] == 0
    for key in ("locked_eager_128", "locked_compiled_128"):
        assert out[key]["class"] == "ShapeLocked", out[key]
    assert out["predict_locked_eager_128"]["will_compile"] and out["predict_locked_eager_128"]["refused"]
    assert out["unlocked_eager_128"]["neff_compiles"] > 0  # the refusal was right: eager at 128 compiled
    failed = out["failed_compiled_96"]
    # TorchNeuron's text (captures/torchneuron/errors.json), shown from its compiler line.
    assert failed["class"] == "CompileFailure" and "COMPILATION FAILED: " in failed["message"], failed
    rows = {(r["mode"], r["shape"]): r for r in out["status"]["shapes"]}
    assert rows[("compiled", "96x96")]["state"] == "failed"
    assert out["after_failure_compiled_64"]["neff_compiles"] == 0


@pytest.mark.slow
def test_a_second_reference_size_compiles_once_then_is_warm(second_process):
    """Issue 34: on the stand-in (NEFFs keyed by shape, as TorchNeuron's), an edit's reference adds
    its tokens to the sequence: each new reference size compiles NEFFs once; a repeat, and a
    reference of another source size fitted to a warm size, compile none."""
    out = second_process["edits"]
    assert out["square"]["signature"] == "64x64+ref64x64" and out["square"]["neff_compiles"] > 0
    assert out["square"]["predicted_state"] == "cold"
    assert out["square again"]["neff_compiles"] == 0 and out["square again"]["predicted_state"] == "warm"
    assert out["wide"]["signature"] == "64x64+ref96x64" and out["wide"]["neff_compiles"] > 0  # a new length
    assert out["wide again"]["neff_compiles"] == 0 and out["wide again"]["compiled"] is False
    fitted = out["big square fitted"]
    assert fitted["signature"] == "64x64+ref64x64" and fitted["fit"] == "crop" and fitted["neff_compiles"] == 0
    assert {r["shape"]: r["state"] for r in out["status"]} == {"64x64+ref64x64": "warm", "64x64+ref96x64": "warm"}


@pytest.mark.slow
def test_a_warm_edit_with_its_references_in_another_order_compiles_no_neff(second_process):
    """Issue 52 (6b): the pipeline concatenates references in the order it gets them and every eager
    op compiles per input shapes; the app hands them over in the signature's order, so the other
    order of a warm edit compiles nothing under --warm-only (before, one NEFF: the concatenation)."""
    swapped = second_process["edits"]["swapped under warm-only"]
    assert swapped == {"signature": "64x64+ref64x64+ref96x64", "neff_compiles": 0, "fitted": ["64x64", "96x64"]}


@pytest.mark.slow
def test_tensor_parallel_on_neuron_keeps_cores_disjoint_and_restarts(neuron_env):
    root, env = neuron_env
    out = _scenario("tp", root, dict(env, NEURON_STANDIN_FAIL_COLLECTIVE=str(root / "fail-collective")))
    app = out["app_pid"]
    too_many = out["too_many_ranks"]  # a trn2.3xlarge (4 logical cores, found by neuron-ls), refused up front
    assert too_many["class"] == "InvalidRequest" and "degrees that fit are 1, 2" in too_many["message"]
    assert "8 physical at LNC 2" in too_many["message"]
    steps = {s["step"]: s for s in out["steps"]}
    assert steps["in process"]["claims"] == {"3": app}  # no flags: the app on the instance's last core
    for name in ("group started", "tp generate", "back in process", "group restarted", "after automatic restart"):
        step = steps[name]
        ranks = {str(p) for p in step["rank_pids"].values()}
        assert step["tp_cores"] == [0, 1]  # started by the Start button's handler with the default degree
        assert step["claims"]["3"] == app
        assert {str(step["claims"][c]) for c in ("0", "1")} == ranks and str(app) not in ranks, step
        # Each rank used the index TorchNeuron bound it to after init (the stand-in refuses neuron:0 on rank 1).
        assert step["rank_devices"] == ["neuron:0", "neuron:1"]
    cold = steps["tp generate"]
    assert cold["record"]["world_size"] == 2 and cold["max_diff_vs_eager"] <= 2
    # Every rank's NEFFs are counted, not rank 0's alone (TorchNeuron counts per process).
    per_rank = cold["record"]["rank_neff_compiles"]
    assert len(per_rank) == 2 and min(per_rank) > 0 and cold["record"]["neff_compiles"] == sum(per_rank)
    # The cold shape's compiles were silent for longer than the stall timeout, and it succeeded.
    assert cold["longest_silence"] > out["stall_timeout"], cold
    stopped = steps["rank 1 stopped"]  # SIGSTOP: alive but hung; its heartbeat stopped
    assert stopped["request"]["class"] == "GroupDead" and (
        "no progress" in stopped["request"]["message"] or "heartbeat has not moved" in stopped["request"]["message"])
    assert stopped["tp_state"] == "dead" and "rank" in (stopped["error"] or "")
    degraded = steps["degraded"]["record"]
    assert degraded["degraded"] and degraded["world_size"] == 1 and steps["degraded"]["claims"].get("3") == app
    assert set(steps["degraded"]["claims"]) <= {"0", "1", "3"}
    restarted = steps["group restarted"]
    assert restarted["tp_state"] == "ready" and restarted["record"]["world_size"] == 2
    assert restarted["max_diff_vs_eager"] <= 2 and restarted["hung_survivors"] == []
    # A failed Neuron collective ends the ranks (no serving on a suspect communicator); the app restarts them.
    failed = steps["collective failed"]
    assert failed["request"]["class"] == "GroupDead", failed
    assert ("rank 1 ended itself after a failed request (GenerationFailed: NeuronCollectiveError"
            in failed["old_error"]), failed  # from rank 1's torchelastic error file
    assert failed["restarted"] and failed["tp_state"] == "ready"
    after = steps["after automatic restart"]
    assert after["record"]["world_size"] == 2 and after["max_diff_vs_eager"] <= 2
    assert out["cleared_while_running"]["class"] == "BackendBusy"
    assert "stop the group first" in out["cleared_while_running"]["message"]
    assert (out["neuron_cores"]["app_cores"] == "3"
            and out["neuron_cores"]["engines"]["tensor-parallel"]["cores"] == "0-1")
    assert out["neff_files"] and all(name.endswith(".neff") for name in out["neff_files"]), out["neff_files"]


@pytest.mark.slow
def test_a_bundle_makes_every_neff_a_persistent_hit_in_a_fresh_cache(neuron_env):
    """Exported where the shape compiled, imported into an empty NEFF cache: the first run there
    compiles no NEFF (the text encoder's and VAE's eager ops included); without the bundle it does."""
    root, env = neuron_env

    def app(*argv, cache, **extra):  # an app.py call: (argv, env) for run_all
        return (["app.py", *argv, "--device", "neuron", "--dtype", "float32", "--cache-dir", str(root / cache)],
                {**env, **extra})

    def outputs(*calls) -> list[str]:  # independent calls side by side (each imports the model stack)
        procs = run_all(*calls, timeout=240)
        for proc in procs:
            assert proc.returncode == 0, proc.stderr[-3000:]
        return [proc.stdout for proc in procs]

    bundle = str(root / "neuron.bundle")
    # The graph's NEFF takes a simulated 3 s: the manifest says 3 s (TorchNeuron's metric is in
    # nanoseconds; read as microseconds it would say 3000).
    outputs(app("cache", "export", bundle, "--mode", "compiled", "--sizes", "80x80", cache="bundle-made",
                NEURON_STANDIN_COMPILE_SECONDS="3"))
    generate = ("generate", "a fox", "--mode", "compiled", "--size", "80x80", "--json", "--no-save")
    shown, trn3, _imported, without = outputs(
        app("cache", "show", bundle, "--json", cache="bundle-shown"),
        # The NEFF key holds the chip target: on a trn3 every NEFF would miss, so the bundle is refused.
        app("cache", "show", bundle, "--json", cache="bundle-trn3", NEURON_STANDIN_INSTANCE="trn3.3xlarge"),
        app("cache", "import", bundle, cache="bundle-fresh"),
        app(*generate, cache="bundle-none"))
    shown, trn3 = json.loads(shown), json.loads(trn3)
    assert shown["device"] == "neuron" and shown["lnc"] == 2 and shown["applies_here"] is True
    assert shown["neuron_target"] == "trn2" and 3 <= shown["entries"][0]["compile_seconds"] < 30, shown
    assert trn3["applies_here"] is False and trn3["mismatch"].startswith(
        "neuron_target: the bundle was made with 'trn2'")
    assert shown["file_count"] > 0 and shown["entries"][0]["shape"] == "80x80"
    with_bundle = json.loads(outputs(app(*generate, cache="bundle-fresh"))[0].strip().splitlines()[-1])
    without = json.loads(without.strip().splitlines()[-1])
    assert with_bundle["neff_compiles"] == 0 and with_bundle["compiles"] == 1, with_bundle  # dynamo still traces
    assert without["neff_compiles"] > 0


@pytest.mark.slow
def test_replicas_hold_disjoint_cores_beside_the_app_and_a_group(tmp_path):
    """Two Trainium2 devices (8 logical cores): the app on the last (7), replicas 0-1 and the
    tensor-parallel ranks 2-3, all on the first chip; a killed replica comes back on its own core."""
    out = _scenario("replicas", tmp_path, standin_env(tmp_path / "state", devices=2))
    app = out["app_pid"]
    started = out["started"]
    assert [r["core"] for r in started["replicas"]] == [0, 1] and started["tp_cores"] == [2, 3]
    holders = {str(r["core"]): r["pid"] for r in started["replicas"]}
    holders.update({str(core): pid for core, pid in zip((2, 3), started["tp_pids"])})
    # The app reserves core 7 for itself (NEURON_RT_VISIBLE_CORES=7 before torch loads); it holds it
    # once its runtime starts, which a pool-served app never needs.
    assert started["claims"].pop("7", app) == app and started["claims"] == holders, started
    assert len(set(holders.values())) == 4  # four worker processes, one core each
    too_many = out["too_many_replicas"]
    assert too_many["class"] == "InvalidRequest" and "replica counts that fit are" in too_many["message"], too_many
    assert not out["errors"] and set(out["served"]) == {"replica 0", "replica 1"} and len(out["served"]) == 4
    after = out["after_restart"]
    assert after["replicas"][0]["core"] == 0 and after["replicas"][0]["pid"] != started["replicas"][0]["pid"]
    assert after["claims"]["0"] == after["replicas"][0]["pid"] and after["claims"].get("7", app) == app
    assert out["after_restart_record"]["engine"] == "replicas"
    engines = out["neuron_cores"]["engines"]
    assert engines["replicas"]["cores"] == "0-1" and engines["tensor-parallel"]["cores"] == "2-3"
    gauges = out["core_gauges"]  # /metrics' NeuronCore gauges: the plan, and the cores held
    assert {k: v for k, v in gauges.items() if "planned" in k} == {
        "neuron_studio_neuron_cores_planned app": 1, "neuron_studio_neuron_cores_planned replicas": 2,
        "neuron_studio_neuron_cores_planned tensor-parallel": 2}, gauges
    assert gauges["neuron_studio_neuron_cores_in_use replicas"] == 2, gauges
    assert gauges["neuron_studio_neuron_cores_in_use tensor-parallel"] == 2, gauges


@pytest.mark.slow
def test_with_neuron_cores_none_a_degree_4_group_holds_every_core_of_a_trn2_3xlarge(scenarios_beside):
    """Issue 52 (5): the app kept one of the 4 cores, so degree 4 could not run; with ``--neuron-cores
    none`` the four ranks hold cores 0-3, the app holds none (it never started its runtime), and a
    request for the app's own process is refused naming the flag."""
    out = scenarios_beside(ALL_CORES)
    assert (out["plan"]["app_cores"] == "none"
            and out["plan"]["engines"]["tensor-parallel"]["degrees"] == [1, 2, 4])  # 4 heads
    assert out["record"]["world_size"] == 4 and out["tp"]["cores"] == [0, 1, 2, 3]
    ranks = {int(pid) for pid in out["tp"]["rank_pids"].values()}
    assert set(out["claims"]) == {"0", "1", "2", "3"} and set(out["claims"].values()) == ranks
    assert out["app_pid"] not in ranks
    assert out["eager"]["class"] == "BackendNotReady" and "--neuron-cores none" in out["eager"]["message"]


@pytest.mark.slow
def test_a_signature_that_would_not_fit_the_core_is_refused_and_a_fast_one_of_its_size_runs(scenarios_beside):
    """The stand-in's core holds 1 GB (its knob, scaled for the tiny model): 2032x1024 puts its
    transformer's attention on the fallback (8640 tokens with the text: not a multiple of 512), whose
    score matrix the app's plan counts past the core; 2048x1024 (8704 tokens) takes the NKI kernel."""
    out = scenarios_beside(MEMORY)  # its stand-in's core holds 10**9 bytes
    assert out["hbm"] == 10**9
    refused = out["slow_refused"]
    assert refused["class"] == "DoesNotFit" and "of one NeuronCore's 0.9 GiB" in refused["message"]
    assert "transformer: slow attention" in refused["message"] and "a fast-attention size such as" in refused["message"]
    assert out["slow_prediction"]["refused"] == refused["message"]
    assert out["compiles_after_refusal"] == 0  # refused before anything ran
    fast = out["fast"]
    assert fast["shape"] == "2048x1024" and fast["prediction"]["fits"] and fast["peak"] <= 10**9
    forced = out["forced"]
    expected = load("torchneuron/attention.json")["out_of_memory"]["format"].format(size=4 * 8640 * 8640 * 4)
    assert forced["class"] == "GenerationFailed" and expected in forced["message"]
    assert "the NeuronCore's memory is full" in forced["message"]
