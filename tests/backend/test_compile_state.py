"""CompileTable with a fake clock: elapsed times and estimates without sleeping."""

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
