"""CompileTable with a fake clock: elapsed times and estimates without sleeping."""

import json

import pytest

from backend.serving.compile_state import CompileTable
from backend.shapes import Shape


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_compiling_elapsed_and_estimate_come_from_the_clock_and_past_compiles():
    clock = FakeClock()
    table = CompileTable(clock)
    table.mark_compiling("compiled", Shape(64, 64))
    clock.now += 7.5
    p = table.predict("compiled", Shape(64, 64), steps=4, compiles_here=True)
    assert p["state"] == "compiling" and p["elapsed_seconds"] == 7.5 and p["estimate_compile_seconds"] is None
    assert table.snapshot()[0]["compiling_elapsed"] == 7.5
    table.finish("compiled", Shape(64, 64), compiles=1, compile_seconds=7.4, seconds=8.0,
                 encode=0.2, denoise=7.6, decode=0.2, steps=4)
    table.finish("compiled", Shape(64, 64), compiles=0, compile_seconds=0.0, seconds=0.6,
                 encode=0.1, denoise=0.4, decode=0.1, steps=4)
    warm = table.predict("compiled", Shape(64, 64), steps=8, compiles_here=True)
    assert warm["state"] == "warm" and warm["expected_seconds"] == 0.2 + 0.1 * 8
    cold = table.predict("compiled", Shape(512, 512), steps=4, compiles_here=True)
    assert cold["will_compile"] and cold["estimate_compile_seconds"] == 7.4
    row = table.snapshot()[0]
    assert row["compile_seconds"] == 7.4 and row["steady_seconds"] == 0.6 and row["runs"] == 2


def test_a_failure_is_kept_when_a_replaced_group_forgets_its_mode():
    table = CompileTable(FakeClock())
    table.fail("tp", Shape(64, 64), "boom")
    p = table.predict("tp", Shape(64, 64), steps=4, compiles_here=True)
    assert p["state"] == "failed" and p["will_compile"] and "boom" in p["note"]
    table.finish("tp", Shape(128, 128), compiles=1, compile_seconds=1.0, seconds=2.0, steps=1)
    table.finish("eager", Shape(64, 64), compiles=0, compile_seconds=0.0, seconds=0.1, steps=1)
    table.forget("tp")  # its worker group was replaced: its graphs are gone
    assert table.state("tp", Shape(128, 128)) == "cold"
    assert table.state("tp", Shape(64, 64)) == "failed"  # the same compiler fails it in the new group too
    assert table.state("eager", Shape(64, 64)) == "warm"  # another mode keeps its state


def test_on_neuron_a_warm_size_at_a_new_step_count_still_compiles_and_the_lock_refuses_it():
    """The scheduler's per-step tensors (sigmas: steps + 1) change length with the step count, and
    on Neuron every eager op compiles per shape: warm at 4 steps is not warm at 8 there; elsewhere it is."""
    from backend.errors import ShapeLocked
    from backend.serving.admission import Admission
    from backend.settings import Settings

    table = CompileTable(FakeClock())
    table.finish("eager", Shape(64, 64), compiles=0, compile_seconds=0.0, seconds=0.5, steps=4, neff_compiles=30)
    neuron = table.predict("eager", Shape(64, 64), steps=8, compiles_here=True, exact_shapes=True)
    assert neuron["will_compile"] and "warm at 4 steps; 8 steps compiles" in neuron["note"]
    assert not table.predict("eager", Shape(64, 64), steps=4, compiles_here=True, exact_shapes=True)["will_compile"]
    assert not table.predict("eager", Shape(64, 64), steps=8, compiles_here=True)["will_compile"]  # CPU/CUDA

    neuron_device = type("NeuronDevice", (), {"eager_compiles": True,
                                              "info": type("Info", (), {"compile_backend": "neuron"})()})()
    decision = Admission(Settings(), table).decide(neuron_device, "eager", Shape(64, 64), 8, locked=True)
    assert isinstance(decision.refusal, ShapeLocked) and "use a step count it is warm at" in str(decision.refusal)
    assert Admission(Settings(), table).decide(neuron_device, "eager", Shape(64, 64), 4, locked=True).refusal is None


def test_compile_estimates_learn_from_this_installs_compiles_across_restarts(tmp_path):
    """The compiles a run measured are an estimate for the next run's first compile (same device,
    compile backend and model only), the median of the nearest in token count, saying how many."""
    path = tmp_path / "compile-history.json"
    first = CompileTable(FakeClock())
    first.history.open(path, "cpu inductor tiny")
    for side, seconds in ((64, 4.0), (128, 6.0), (256, 20.0)):
        first.finish("compiled", Shape(side, side), compiles=1, compile_seconds=seconds, seconds=seconds + 1, steps=1)
    first.finish("eager", Shape(64, 64), compiles=0, compile_seconds=0.0, seconds=0.5, steps=1)  # no compile: none
    later = CompileTable(FakeClock())
    later.history.open(path, "cpu inductor tiny")
    cold = later.predict("compiled", Shape(96, 96), steps=4, compiles_here=True, prior=60.0)
    assert (cold["estimate_compile_seconds"], cold["estimate_compiles"],
            cold["estimate_source"]) == (6.0, 3, "measured")
    other = CompileTable(FakeClock())
    other.history.open(path, "cpu inductor another-model")  # another model's compiles say nothing of this one
    assert other.predict("compiled", Shape(96, 96), 4, True, prior=60.0)["estimate_source"] == "prior"
    assert later.predict("regional", Shape(96, 96), 4, True, prior=25.0)["estimate_source"] == "prior"
    for junk in (b"{not json", b"[1, 2]", b'{"cpu inductor tiny": [{"mode": "compiled", "tokens": -1, "seconds": 3}]}',
                 b" " * (300 * 1024)):
        path.write_bytes(junk)
        hostile = CompileTable(FakeClock())
        hostile.history.open(path, "cpu inductor tiny")
        assert hostile.predict("compiled", Shape(96, 96), 4, True)["estimate_source"] is None
    hostile.finish("compiled", Shape(64, 64), compiles=1, compile_seconds=2.0, seconds=3.0, steps=1)
    assert json.loads(path.read_text())["cpu inductor tiny"][0]["seconds"] == 2.0  # a foreign file is replaced


def test_steady_figures_leave_out_first_runs_and_read_a_busy_machine_as_a_quiet_one():
    """A first run at a place pays first-time costs; a run under load took longer: the estimate is
    the lower quartile of the steady runs read as on a quiet machine, then scaled by the load now."""
    table = CompileTable(FakeClock())
    table.cpu_bound = True
    shape = Shape(64, 64)
    args = dict(compiles=0, compile_seconds=0.0, steps=4)
    assert not table.finish("eager", shape, seconds=13.6, encode=1.6, denoise=12.0, decode=0.0, **args)
    assert table.predict("eager", shape, 4, False)["expected_seconds"] is None  # the first run is no figure
    assert table.finish("eager", shape, seconds=2.0, encode=0.4, denoise=1.6, decode=0.0, load=0.5, **args)
    assert table.finish("eager", shape, seconds=1.2, encode=0.2, denoise=1.0, decode=0.0, load=0.0, **args)
    quiet = table.predict("eager", shape, 4, False)
    assert quiet["expected_seconds"] == quiet["quiet_seconds"] == pytest.approx(1.0)  # 2.0 s at half the CPU
    busy = table.predict("eager", shape, 4, False, load=0.5)
    assert busy["expected_seconds"] == pytest.approx(1.5) and busy["load"] == 0.5  # the cores shared with it
    row = table.snapshot()[0]
    assert (row["steady_runs"], row["runs"], row["steady_quiet_seconds"], row["steady_load"]) == (2, 3, 1.0, 0.25)
    table.cpu_bound = False  # a device's time is not the host CPU's: figures as measured, load not applied
    assert table.predict("eager", shape, 4, False, load=0.5)["expected_seconds"] == pytest.approx(1.2)
