"""The torch_neuronx stand-in (tests/standin) obeys the TorchNeuron / Neuron Runtime rules it claims to.

Each rule has a check where correct use works and one where wrong use fails with the documented
kind of error. The runtime, its core claims and the variables read at import are per process, so
the checks run in child processes; several checks share one child (module-scoped fixtures) to keep
this file fast. Processes coordinate by states they print ("STATE ..."), never by timing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from tests.neuron.captures import load as load_capture
from tests.neuron.standin import REPO, core_holder, run_all, run_py, standin_env

# How a failed graph compile reaches Python, as TorchNeuron raised it in a real run (the captured
# text up to the compiler's own words; captures/torchneuron/errors.json): a plain RuntimeError.
_CAPTURED = next(e["message"] for e in load_capture("torchneuron/errors.json")["errors"]
                 if e["message"].startswith("Compilation error occurred"))
COMPILE_ERROR_START = "RuntimeError: " + _CAPTURED[:_CAPTURED.index("exit code 70: ") + len("exit code 70: ")]

COUNTERS = ("CompilationCache.TotalCompilations", "CompilationCache.InMemoryHits",
            "CompilationCache.PersistentHits")
TOTAL, MEMORY, PERSISTENT = COUNTERS
NEURON_API = ("is_available", "device_count", "current_device", "synchronize", "memory_allocated",
              "max_memory_allocated", "empty_cache", "get_dynamo_metrics")

PRELUDE = textwrap.dedent(f"""
    import json, os, sys
    VAR = "NEURON_RT_VISIBLE_CORES"
    COUNTERS = {COUNTERS!r}

    def error(fn):
        try:
            fn()
        except Exception as exc:
            return f"{{type(exc).__name__}}: {{exc}}"
        return None

    def counts():
        import torch_neuronx.metrics as metrics
        return {{name: metrics.get_counter_value(name) for name in COUNTERS}}

    def f(t):  # the same source in every process: the same graph signature
        return (t * 2 + 1).sin()
""")

HOLDER = PRELUDE + textwrap.dedent("""
    import torch  # TORCH_DEVICE_BACKEND_AUTOLOAD=0: nothing is loaded yet
    obs = {"torch_neuron_before": hasattr(torch, "neuron")}
    from torch._dynamo.backends.registry import lookup_backend
    backend = lookup_backend("neuron")  # through the torch_dynamo_backends entry point
    obs["backend"] = f"{backend.__module__}.{backend.__name__}"
    obs["torch_neuron_after_lookup"] = hasattr(torch, "neuron")
    import torch_neuronx
    obs["metrics_attribute_before_import"] = hasattr(torch_neuronx, "metrics")
    x = torch.ones(3, device="neuron") * 2  # first device use, NEURON_RT_VISIBLE_CORES unset: every core
    obs["metrics_off"] = counts()
    obs["pid"] = os.getpid()
    print("RESULT " + json.dumps(obs), flush=True)
    sys.stdin.read()  # hold the cores until the test closes stdin
""")

MAIN = PRELUDE + textwrap.dedent("""
    import torch  # autoloads torch_neuronx through its torch.backends entry point
    import importlib.metadata as md
    obs = {"autoloaded": hasattr(torch, "neuron") and "torch_neuronx" in sys.modules}
    obs["visible_at_import"] = os.environ.get(VAR)  # LOCAL_RANK=3 must not replace a chosen value
    obs["version"] = md.version("torch-neuronx")
    obs["torch_backends"] = sorted(ep.value for ep in md.entry_points(group="torch.backends"))
    obs["dynamo_entry_points"] = {ep.name: ep.value for ep in md.entry_points(group="torch_dynamo_backends")}
    obs["missing_api"] = [n for n in API if not hasattr(torch.neuron, n)]
    obs["device"] = str(torch.device("neuron"))
    obs["listed"] = "neuron" in torch._dynamo.list_backends()
    from diffusers.utils import is_torch_neuronx_available
    obs["diffusers_sees_it"] = is_torch_neuronx_available()
    obs["counters_at_start"] = counts()

    # device_count follows NEURON_RT_VISIBLE_CORES and does not start the runtime
    obs["counts"] = {}
    for text in ("3", "0-3", "0,2", "0,2-3", None):
        os.environ.pop(VAR, None) if text is None else os.environ.__setitem__(VAR, text)
        obs["counts"][str(text)] = torch.neuron.device_count()
    obs["bad_counts"] = {}
    for text in ("abc", "7", "2-1"):
        os.environ[VAR] = text
        obs["bad_counts"][text] = error(torch.neuron.device_count)
    os.environ[VAR] = "0-3"
    obs["started_by_counts"] = torch.neuron.is_initialized()

    # the holder reserved every core: starting the runtime here must fail, naming core and holder
    obs["claim_error"] = error(lambda: torch.ones(1, device="neuron"))
    obs["started_after_refusal"] = torch.neuron.is_initialized()
    print("STATE refused", flush=True)
    sys.stdin.readline()  # the test stops the holder first
    os.environ[VAR] = "0-1"
    a = torch.arange(6.0).reshape(2, 3).to("neuron")  # first device use: the runtime starts now
    obs["started"] = torch.neuron.is_initialized()
    obs["count_after_start"] = torch.neuron.device_count()
    os.environ[VAR] = "0-3"  # too late: the runtime read it when it started
    obs["count_after_late_change"] = torch.neuron.device_count()
    print("STATE started", flush=True)
    sys.stdin.readline()  # the test looks at the claim files

    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        seen = {"bad_fork": torch.neuron._is_in_bad_fork(), "error": error(lambda: torch.ones(1, device="neuron"))}
        os.write(write_end, json.dumps(seen).encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    obs["fork"] = json.loads(os.read(read_end, 65536))

    import torch.distributed as dist
    obs["pg_after_device_use"] = error(
        lambda: dist.init_process_group("neuron", rank=0, world_size=1, store=dist.HashStore()))

    b = (a * 2 + 1).sum(0)
    obs["sum"] = [str(b.device), b.cpu().tolist()]
    column = a[:, 1]
    column.add_(100)
    obs["view_writes_through"] = a.cpu().tolist()
    linear = torch.nn.Linear(3, 2)
    reference = linear(a.cpu()).detach()
    linear.to("neuron")
    obs["module_devices"] = sorted({str(p.device) for p in linear.parameters()})
    obs["linear_matches_cpu"] = torch.allclose(linear(a).detach().cpu(), reference)

    obs["mixed_devices"] = {
        "cpu_tensor": error(lambda: a + torch.ones(2, 3)),
        "cpu_module": error(lambda: torch.nn.Linear(3, 2)(a)),
        "cpu_scalar": error(lambda: a * torch.tensor(2.0)),
        "cpu_index": error(lambda: a[torch.tensor([1, 0])]),
    }

    obs["float64"] = {
        "factory": error(lambda: torch.zeros(2, device="neuron", dtype=torch.float64)),
        "cast_on_device": error(lambda: a.double()),
        "copy_to_device": error(lambda: torch.ones(2, dtype=torch.float64).to("neuron")),
        "float32": error(lambda: torch.zeros(2, device="neuron", dtype=torch.float32)),
        "bfloat16": error(lambda: a.to(torch.bfloat16)),
    }

    import gc
    before = torch.neuron.memory_allocated()
    block = torch.empty(1024, device="neuron")
    during = torch.neuron.memory_allocated()
    del block
    gc.collect()
    obs["memory"] = [before, during, torch.neuron.memory_allocated(), torch.neuron.max_memory_allocated()]

    x56 = torch.ones(5, 6, device="neuron")
    x57 = torch.ones(5, 7, device="neuron")
    steps = [counts()]
    for t in (x56, x56, x57):
        t * 3
        steps.append(counts())
    obs["eager_steps"] = steps

    compiled = torch.compile(f, backend="neuron", fullgraph=True, dynamic=False)
    x49 = torch.randn(4, 9, device="neuron")
    steps = [counts()]
    out = compiled(x49)
    steps.append(counts())
    obs["compiled_matches"] = torch.allclose(out.cpu(), f(x49.cpu()), atol=1e-6)
    torch._dynamo.reset()  # forget dynamo's graphs: the backend sees the same signature again
    compiled(x49)
    steps.append(counts())
    obs["compile_steps"] = steps

    def g(t):
        return t.cos() * 2
    obs["dynamic"] = error(lambda: torch.compile(g, backend="neuron", dynamic=True)(torch.randn(3, 5, device="neuron")))

    def h(t):
        return t.tanh() + 1
    x72 = torch.randn(7, 2, device="neuron")
    obs["neffs_before_fault"] = counts()[COUNTERS[0]]
    os.environ["NEURON_STANDIN_FAIL_COMPILE_DIM"] = "7"
    obs["fault"] = error(lambda: torch.compile(h, backend="neuron", fullgraph=True, dynamic=False)(x72))
    obs["neffs_after_fault"] = counts()[COUNTERS[0]]
    obs["dynamo_metrics"] = torch.neuron.get_dynamo_metrics()
    print("RESULT " + json.dumps(obs), flush=True)
""").replace("API", repr(NEURON_API))

LATER = PRELUDE + textwrap.dedent("""
    import datetime, warnings
    import torch
    import torch.distributed as dist
    obs = {"visible_under_torchrun": os.environ.get(VAR)}  # LOCAL_RANK=1 and the variable unset

    os.environ[VAR] = "0-1"
    obs["pg_two_cores"] = error(lambda: dist.init_process_group("neuron", rank=0, world_size=1, store=dist.HashStore()))
    obs["started_after_refusal"] = torch.neuron.is_initialized()
    os.environ[VAR] = "1"
    dist.init_process_group("neuron", rank=0, world_size=1, store=dist.HashStore())
    obs["started_by_init"] = torch.neuron.is_initialized()
    t = torch.full((3,), 2.0, device="neuron")
    dist.all_reduce(t)
    obs["all_reduce"] = [str(t.device), t.cpu().tolist(), dist.get_backend()]
    dist.destroy_process_group()
    obs["pg_timeout"] = error(lambda: dist.init_process_group(
        "neuron", rank=0, world_size=2, store=dist.HashStore(), timeout=datetime.timedelta(seconds=1)))

    x56 = torch.ones(5, 6, device="neuron")
    x49 = torch.randn(4, 9, device="neuron")
    steps = [counts()]
    x56 * 3
    steps.append(counts())
    torch.compile(f, backend="neuron", fullgraph=True, dynamic=False)(x49)
    steps.append(counts())
    obs["later_steps"] = steps

    def h(t):
        return t.tanh() + 1
    x72 = torch.randn(7, 2, device="neuron")
    os.environ["NEURON_STANDIN_FAIL_COMPILE_DIM"] = "7"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(h, backend="neuron", fullgraph=True, dynamic=False)(x72)
    obs["fallback_warning"] = [str(w.message) for w in caught if "neuronx-cc" in str(w.message)]
    obs["fallback_result"] = torch.allclose(out.cpu(), h(x72.cpu()))
    obs["dynamo_metrics"] = torch.neuron.get_dynamo_metrics()
    print("RESULT " + json.dumps(obs), flush=True)
""")


def _result(text: str) -> dict:
    lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
    assert lines, text
    return json.loads(lines[-1][len("RESULT "):])


def _expect_line(proc: subprocess.Popen, wanted: str) -> str:
    """Read the child's stdout up to the line starting with ``wanted`` (a state it reached)."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(wanted):
            return line
    raise AssertionError(f"child exited before {wanted!r}:\n{''.join(seen)}\n{proc.stderr.read()}")


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    """A holder process, the main rule process and a later process, sharing one state and NEFF cache."""
    root = tmp_path_factory.mktemp("standin")
    state, neff, locks = root / "state", root / "neff", root / "locks"
    common = dict(TORCH_NEURONX_NEFF_CACHE_DIR=str(neff), TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR=str(locks))
    popen = dict(cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    holder = subprocess.Popen([sys.executable, "-c", HOLDER], **popen,  # its own NEFF cache: it counts nothing
                              env=standin_env(state, TORCH_DEVICE_BACKEND_AUTOLOAD="0",
                                              TORCH_NEURONX_NEFF_CACHE_DIR=str(root / "holder-neff"),
                                              TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR=str(root / "holder-locks")))
    main = None
    try:
        found = {"holder": _result(_expect_line(holder, "RESULT "))}  # it holds its cores now
        main = subprocess.Popen([sys.executable, "-c", MAIN], **popen,
                                env=standin_env(state, TORCH_NEURONX_METRICS_ENABLED="1", LOCAL_RANK="3",
                                                NEURON_RT_VISIBLE_CORES="0-3", **common))
        found["held_by_holder"] = [core_holder(state, core) for core in range(4)]
        _expect_line(main, "STATE refused")
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
        found["held_after_holder_exit"] = [core_holder(state, core) for core in range(4)]
        main.stdin.write("go\n")
        main.stdin.flush()
        _expect_line(main, "STATE started")
        found["held_by_main"] = [core_holder(state, core) for core in range(4)]
        found["main_pid"] = main.pid
        main.stdin.write("go\n")
        main.stdin.flush()
        found["main"] = _result(_expect_line(main, "RESULT "))
        main.stdin.close()
        assert main.wait(timeout=60) == 0, main.stderr.read()
        found["held_after_main_exit"] = [core_holder(state, core) for core in range(4)]
        found["neff_files"] = sorted(str(p.relative_to(neff)) for p in neff.rglob("*") if p.is_file())
        found["lock_files"] = [str(p.relative_to(locks)) for p in locks.rglob("*.lock")]
    finally:
        for proc in (holder, main):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()

    later = run_py(LATER, standin_env(state, TORCH_NEURONX_METRICS_ENABLED="1", LOCAL_RANK="1",
                                      TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION="0", **common), timeout=240)
    assert later.returncode == 0, later.stderr
    found["later"] = _result(later.stdout)
    return found


# --- registration, entry points, the device module ---------------------------------------------

def test_import_torch_autoloads_the_package_and_registers_the_device(rules):
    main = rules["main"]
    assert main["autoloaded"] and main["device"] == "neuron"
    assert main["version"] == "2.13.0+standin" and main["diffusers_sees_it"]
    assert "torch_neuronx:_autoload" in main["torch_backends"]
    assert main["dynamo_entry_points"] == {"neuron": "torch_neuronx._compile:neuron_backend"}
    assert main["missing_api"] == [] and main["listed"]


def test_with_autoload_off_nothing_loads_until_the_backend_is_looked_up_through_its_entry_point(rules):
    holder = rules["holder"]
    assert holder["torch_neuron_before"] is False
    assert holder["backend"] == "torch_neuronx._compile.neuron_backend"
    assert holder["torch_neuron_after_lookup"] is True


def test_metrics_is_a_submodule_the_package_does_not_import(rules):
    assert rules["holder"]["metrics_attribute_before_import"] is False


def test_counters_are_none_before_the_first_increment_and_always_none_when_metrics_are_off(rules):
    assert rules["main"]["counters_at_start"] == dict.fromkeys(COUNTERS)
    assert rules["holder"]["metrics_off"] == dict.fromkeys(COUNTERS)  # it ran ops, metrics unset


# --- NeuronCores: visibility, claims, fork --------------------------------------------------------

def test_device_count_follows_visible_cores_without_starting_the_runtime(rules):
    main = rules["main"]
    assert main["counts"] == {"3": 1, "0-3": 4, "0,2": 2, "0,2-3": 3, "None": 4}
    assert main["started_by_counts"] is False


def test_invalid_visible_cores_or_cores_beyond_the_instance_are_clear_errors(rules):
    bad = rules["main"]["bad_counts"]
    assert "not a valid NeuronCore list" in bad["abc"] and "not a valid NeuronCore list" in bad["2-1"]
    assert "NeuronCore 7" in bad["7"] and "NeuronCores 0-3" in bad["7"]


def test_a_process_that_starts_with_visible_cores_unset_reserves_every_core(rules):
    holder_pid = rules["holder"]["pid"]
    assert rules["held_by_holder"] == [holder_pid] * 4
    assert rules["held_after_holder_exit"] == [None] * 4  # released when the holder exited


def test_a_held_core_cannot_be_claimed_by_another_process(rules):
    error = rules["main"]["claim_error"]
    assert error.startswith("NeuronRuntimeError") and "NeuronCore 0 is already reserved" in error
    assert f"process {rules['holder']['pid']}" in error
    assert rules["main"]["started_after_refusal"] is False


def test_the_runtime_starts_on_first_device_use_and_claims_only_visible_cores(rules):
    main, pid = rules["main"], rules["main_pid"]
    assert main["started"] and main["count_after_start"] == 2
    assert main["count_after_late_change"] == 2  # NEURON_RT_VISIBLE_CORES is read when the runtime starts
    assert rules["held_by_main"] == [pid, pid, None, None]
    assert rules["held_after_main_exit"] == [None] * 4


def test_a_forked_child_cannot_use_the_device(rules):
    fork = rules["main"]["fork"]
    assert fork["bad_fork"] is True
    assert "cannot be re-initialized in a forked child" in fork["error"]


# --- tensors, ops, dtypes, memory ---------------------------------------------------------------

def test_tensors_and_modules_compute_on_the_device_with_cpu_numerics(rules):
    main = rules["main"]
    assert main["sum"] == ["neuron:0", [8.0, 12.0, 16.0]]
    assert main["view_writes_through"] == [[0.0, 101.0, 2.0], [3.0, 104.0, 5.0]]
    assert main["module_devices"] == ["neuron:0"] and main["linear_matches_cpu"]


def test_one_op_takes_tensors_of_one_device(rules):
    mixed = rules["main"]["mixed_devices"]
    for case in ("cpu_tensor", "cpu_module"):
        assert "Expected all tensors to be on the same device" in mixed[case], case
    assert mixed["cpu_scalar"] is None and mixed["cpu_index"] is None  # as on CUDA


def test_float64_on_the_device_is_refused(rules):
    f64 = rules["main"]["float64"]
    for case in ("factory", "cast_on_device", "copy_to_device"):
        assert f64[case].startswith("TypeError") and "float64" in f64[case], case
    assert f64["float32"] is None and f64["bfloat16"] is None


def test_memory_allocated_tracks_live_device_bytes(rules):
    before, during, after, peak = rules["main"]["memory"]
    assert during - before >= 4096 and after == before and peak >= during


# --- compilation: eager ops, torch.compile, the NEFF cache ---------------------------------------

def test_each_new_eager_op_signature_compiles_once(rules):
    s0, s1, s2, s3 = rules["main"]["eager_steps"]
    assert s1[TOTAL] == s0[TOTAL] + 1  # new (mul, f32[5,6])
    assert s2[TOTAL] == s1[TOTAL] and s2[MEMORY] == (s1[MEMORY] or 0) + 1  # the same again: in memory
    assert s3[TOTAL] == s2[TOTAL] + 1  # a new shape


def test_a_compiled_graph_is_one_neff_and_a_repeat_is_an_in_memory_hit(rules):
    main = rules["main"]
    c0, c1, c2 = main["compile_steps"]
    assert c1[TOTAL] == c0[TOTAL] + 1  # the ops inside the graph do not compile one by one
    assert c2[TOTAL] == c1[TOTAL] and c2[MEMORY] == (c1[MEMORY] or 0) + 1
    assert main["compiled_matches"]


def test_neffs_are_files_in_the_cache_dir_with_lock_files_in_the_local_dir(rules):
    files = rules["neff_files"]
    assert len(files) == rules["main"]["neffs_after_fault"]  # one file per compilation
    # TorchNeuron's layouts, as its source writes them (captures/torchneuron/neff_cache.json): the C++
    # path's ab/cd/<32 hex>.neff and the Python path's <sha256>/<sha256>.neff (the attention kernel).
    for name in files:
        assert (re.fullmatch(r"([0-9a-f]{2})/([0-9a-f]{2})/\1\2[0-9a-f]{28}\.neff", name)
                or re.fullmatch(r"([0-9a-f]{64})/\1\.neff", name)), name
    assert rules["lock_files"] and all(
        re.fullmatch(r"locks/[0-9a-f]{32}\.lock|[0-9a-f]{64}/locks/compile\.lock", name)
        for name in rules["lock_files"])


def test_a_later_process_finds_neffs_on_disk_instead_of_compiling(rules):
    s0, s1, s2 = rules["later"]["later_steps"]
    assert s1[TOTAL] == s0[TOTAL] and s1[PERSISTENT] == (s0[PERSISTENT] or 0) + 1  # eager op
    assert s2[TOTAL] == s1[TOTAL] and s2[PERSISTENT] == s1[PERSISTENT] + 1  # compiled graph


def test_dynamic_shapes_are_rejected(rules):
    error = rules["main"]["dynamic"]
    assert error is not None and "does not support dynamic shapes" in error and "dynamic=False" in error


def test_a_failed_compile_raises_by_default(rules):
    main = rules["main"]
    assert main["fault"].startswith(COMPILE_ERROR_START), main["fault"]
    assert main["neffs_after_fault"] == main["neffs_before_fault"]  # nothing written
    assert main["dynamo_metrics"]["failures"] == 1 and main["dynamo_metrics"]["fallbacks"] == 0


def test_a_failed_compile_runs_eagerly_with_a_warning_when_fallback_is_enabled(rules):
    later = rules["later"]
    assert later["fallback_warning"] and later["fallback_result"]
    assert later["dynamo_metrics"]["fallbacks"] == 1


# --- the process group ---------------------------------------------------------------------------

def test_init_process_group_after_device_use_fails(rules):
    error = rules["main"]["pg_after_device_use"]
    assert error is not None and "before touching the device" in error


def test_under_torchrun_each_rank_defaults_to_the_core_local_rank_only_if_unset(rules):
    assert rules["later"]["visible_under_torchrun"] == "1"  # LOCAL_RANK=1, variable unset
    assert rules["main"]["visible_at_import"] == "0-3"  # LOCAL_RANK=3, variable set: kept


def test_a_rank_must_see_exactly_one_core(rules):
    later = rules["later"]
    assert "must own exactly one NeuronCore" in later["pg_two_cores"]
    assert later["started_after_refusal"] is False
    assert later["started_by_init"] is True  # the world group starts the rank's runtime
    assert later["all_reduce"] == ["neuron:0", [2.0, 2.0, 2.0], "neuron"]


def test_the_group_honours_the_init_timeout(rules):
    error = rules["later"]["pg_timeout"]  # rank 1 never comes; a 1 s timeout ends the wait
    assert error is not None and "timeout" in error.lower()


# --- the real thing: the tiny FLUX.2-klein pipeline ----------------------------------------------

# The tiny FLUX.2-klein pipeline on "neuron" (eager, compiled, regional) against the CPU is checked
# through the app in tests/neuron/test_app_on_standin.py.


# --- the second reading: logical cores, asynchronous and slow compiles, rank binding, collectives -------

SECOND = PRELUDE + textwrap.dedent("""
    import time
    import torch
    import torch_neuronx.metrics as metrics
    from torch._dynamo.backends.registry import lookup_backend
    obs = {}

    # Logical cores: one Trainium2 device = 8 physical cores, 4 logical at the default LNC=2.
    os.environ.pop(VAR, None)
    obs["lnc_default"] = torch.neuron.device_count()
    os.environ["NEURON_LOGICAL_NC_CONFIG"] = "1"
    obs["lnc_1"] = torch.neuron.device_count()
    os.environ["NEURON_LOGICAL_NC_CONFIG"] = "3"
    obs["lnc_3"] = error(torch.neuron.device_count)
    os.environ.pop("NEURON_LOGICAL_NC_CONFIG")
    os.environ[VAR] = "4"
    obs["beyond_logical"] = error(torch.neuron.device_count)
    os.environ[VAR] = "0"

    def time_of(name):
        data = metrics.get_metric_data(name)
        return None if data is None else data["accumulator"]

    TIME = "CompilationCache.CompilationTime"
    obs["time_before"] = time_of(TIME)
    # Eager ops compile silently and take the simulated time (0.3 s each here).
    x = torch.ones(3, 5, device="neuron")
    began = time.perf_counter()
    x * 7
    obs["eager_op_seconds"] = time.perf_counter() - began
    obs["time_after_eager"] = time_of(TIME)

    # The backend returns at once; the NEFF is built at the first execution (simulated 0.6 s).
    gm = torch.fx.symbolic_trace(f)
    backend = lookup_backend("neuron")
    x49 = torch.randn(4, 9, device="neuron")
    before = [counts(), time_of(TIME)]
    run = backend(gm, [x49])
    obs["after_backend"] = [counts(), before[0], time_of(TIME), before[1]]
    began = time.perf_counter()
    run(x49)
    obs["first_run_seconds"] = time.perf_counter() - began
    obs["after_first_run"] = [counts(), time_of(TIME)]

    # ... or at synchronize, if that comes first.
    def g(t):
        return t.cos() + 3
    run_g = backend(torch.fx.symbolic_trace(g), [x49])
    total = counts()[COUNTERS[0]]
    torch.neuron.synchronize()
    obs["sync_compiled"] = counts()[COUNTERS[0]] - total

    # A compiler error surfaces at the first execution, not when dynamo hands the graph over.
    def h(t):
        return t.tanh() + 1
    os.environ["NEURON_STANDIN_FAIL_COMPILE_DIM"] = "7"
    x72 = torch.randn(7, 2, device="neuron")
    handed = error(lambda: backend(torch.fx.symbolic_trace(h), [x72]))
    obs["fault_at_backend"] = handed
    run_h = backend(torch.fx.symbolic_trace(h), [x72])
    obs["fault_at_run"] = error(lambda: run_h(x72))
    obs["fault_through_compile"] = error(lambda: torch.compile(h, backend="neuron", fullgraph=True, dynamic=False)(x72))
    print("RESULT " + json.dumps(obs), flush=True)
""")

QUERY_FIRST = PRELUDE + textwrap.dedent("""
    import torch
    import torch.distributed as dist
    obs = {"count": torch.neuron.device_count(), "started_by_query": torch.neuron.is_initialized()}
    obs["init_after_query"] = error(lambda: dist.init_process_group("neuron", rank=0, world_size=1,
                                                                    store=dist.HashStore()))
    print("RESULT " + json.dumps(obs), flush=True)
""")

BOUND_RANK = PRELUDE + textwrap.dedent("""
    import torch
    import torch.distributed as dist
    obs = {"started_before_init": torch.neuron.is_initialized()}
    dist.init_process_group("neuron", rank=0, world_size=1, store=dist.HashStore())
    obs["current_device"] = torch.neuron.current_device()
    obs["device_count"] = torch.neuron.device_count()
    obs["to_neuron"] = error(lambda: torch.ones(2).to("neuron"))
    obs["own_index"] = [error(lambda: torch.ones(2).to("neuron:1")), error(lambda: torch.zeros(2, device="neuron:1")),
                        error(lambda: torch.neuron.set_device(1))]
    obs["hard_coded_0"] = [error(lambda: torch.ones(2).to("neuron:0")),
                           error(lambda: torch.nn.Linear(2, 2).to("neuron:0")),
                           error(lambda: torch.neuron.set_device(0))]
    t = torch.full((3,), 2.0, device="neuron")
    dist.all_reduce(t)
    obs["all_reduce"] = t.cpu().tolist()
    with open(os.environ["FAIL_FILE"], "w") as handle:
        handle.write("0")
    obs["injected"] = error(lambda: dist.all_reduce(t))
    obs["file_left"] = os.path.exists(os.environ["FAIL_FILE"])
    obs["after_injection"] = error(lambda: dist.all_reduce(t))
    print("RESULT " + json.dumps(obs), flush=True)
""")


@pytest.fixture(scope="module")
def second(tmp_path_factory):
    root = tmp_path_factory.mktemp("standin-second")

    # each child its own state and caches: none sees another's NEFFs
    def own(name: str, **extra: str) -> dict[str, str]:
        return standin_env(root / name, TORCH_NEURONX_NEFF_CACHE_DIR=str(root / name / "neff"),
                           TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR=str(root / name / "l"), TORCH_NEURONX_METRICS_ENABLED="1",
                           **extra)

    torchrun = dict(LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", RANK="1", TORCHELASTIC_RUN_ID="standin-test")
    procs = run_all(  # three independent processes, side by side
        (["-c", SECOND], own("s1", NEURON_STANDIN_COMPILE_SECONDS="0.6", NEURON_STANDIN_EAGER_COMPILE_SECONDS="0.3")),
        (["-c", QUERY_FIRST], own("s2", **torchrun)),
        (["-c", BOUND_RANK], own("s3", FAIL_FILE=str(root / "fail"), NEURON_STANDIN_FAIL_COLLECTIVE=str(root / "fail"),
                                 **torchrun)))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
    found = {name: _result(proc.stdout) for name, proc in zip(("second", "query_first", "bound"), procs)}
    return found


def test_core_indices_count_logical_cores_physical_over_lnc(second):
    obs = second["second"]
    assert obs["lnc_default"] == 4 and obs["lnc_1"] == 8  # one Trainium2 device: 8 physical cores
    assert "1 or 2 physical NeuronCores per logical" in obs["lnc_3"]
    assert "logical NeuronCores 0-3" in obs["beyond_logical"] and "8 physical cores" in obs["beyond_logical"]


def test_neuron_ls_shows_the_logical_cores_and_their_ids_to_any_user(tmp_path):
    """As the captured trn2 tables do (tests/standin/captures/neuron-ls): NEURON CORES is the
    logical count at LNC=2, with the ids NEURON_RT_VISIBLE_CORES takes."""
    env = standin_env(tmp_path, devices=2)
    out = subprocess.run(["neuron-ls"], env=env, capture_output=True, text=True, timeout=60).stdout
    rows = [line for line in out.splitlines() if line.startswith("| 0 ") or line.startswith("| 1 ")]
    assert "logical-neuroncore-config: 2" in out and len(rows) == 2
    assert [[c.strip() for c in row.split("|")[2:4]] for row in rows] == [["4", "0-3"], ["4", "4-7"]]


def test_eager_op_compiles_take_their_simulated_time_silently_and_are_timed(second):
    obs = second["second"]
    assert obs["time_before"] is None
    assert obs["eager_op_seconds"] >= 0.3  # a sleep never ends early
    assert obs["time_after_eager"] >= 0.3e9  # nanoseconds, as TORCH_NEURONX_TIME_METRIC stores them


def test_the_backend_returns_before_compiling_and_the_first_run_pays_the_compile(second):
    obs = second["second"]
    after_backend, before, time_then, time_before = obs["after_backend"]
    assert after_backend == before and time_then == time_before  # nothing compiled yet
    counted, time_after = obs["after_first_run"]
    assert counted["CompilationCache.TotalCompilations"] == before["CompilationCache.TotalCompilations"] + 1
    assert obs["first_run_seconds"] >= 0.6 and time_after - time_then >= 0.6e9
    assert obs["sync_compiled"] == 1  # a pending NEFF is built at synchronize at the latest


def test_a_compiler_error_surfaces_at_the_first_execution_not_at_compile(second):
    obs = second["second"]
    assert obs["fault_at_backend"] is None
    assert obs["fault_at_run"].startswith(COMPILE_ERROR_START), obs["fault_at_run"]
    assert obs["fault_through_compile"].startswith(COMPILE_ERROR_START)  # not dynamo's BackendCompilerFailed


def test_under_torchrun_a_query_before_init_starts_the_runtime_and_init_then_fails(second):
    obs = second["query_first"]
    assert obs["count"] == 1 and obs["started_by_query"] is True
    assert "before touching the device" in obs["init_after_query"]


def test_after_init_a_rank_is_neuron_local_rank_and_a_hard_coded_index_fails(second):
    obs = second["bound"]
    assert obs["started_before_init"] is False
    assert obs["current_device"] == 1 and obs["device_count"] == 2  # LOCAL_RANK, LOCAL_WORLD_SIZE
    assert obs["to_neuron"] is None and obs["own_index"] == [None, None, None]
    assert all("neuron:0 is not this rank's NeuronCore" in (e or "") for e in obs["hard_coded_0"]), obs["hard_coded_0"]
    assert obs["all_reduce"] == [2.0, 2.0, 2.0]


def test_an_injected_collective_failure_is_a_neuron_error_not_gloo_or_nccl(second):
    obs = second["bound"]
    assert obs["injected"].startswith("NeuronCollectiveError: NRT: collective allreduce failed")
    assert "gloo" not in obs["injected"].lower() and "nccl" not in obs["injected"].lower()
    assert obs["file_left"] is False and obs["after_injection"] is None  # one failure per file
