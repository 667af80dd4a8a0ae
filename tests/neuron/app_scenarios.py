"""The app's backend on the CPU-backed "neuron" stand-in, one scenario per process.

Run by ``tests/neuron/test_app_on_standin.py`` with ``tests/standin`` on PYTHONPATH (see
``tests.neuron.standin``); each scenario prints one JSON object on its last stdout line. A process is
the unit here because the Neuron runtime is: cores are claimed per process until it exits, and the
NEFF cache's persistent hits are only visible to a later process.

    python -m tests.neuron.app_scenarios inprocess|second|tp|tp_all_cores|replicas WORKDIR
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path


def _group(manager):
    """The tensor-parallel engine's worker group (None before its first start)."""
    return manager.engines["tensor-parallel"].group

ROOT = Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "assets" / "tiny-flux2-klein")
PROMPT = "a red circle on a blue background"
# The group's stall timeout in the tensor-parallel scenario (seconds): short, so a stopped rank is
# found soon, yet longer than a busy machine keeps a heartbeat waiting (2 s was not, once).
STALL = 4.0
EAGER_COMPILE_SECONDS = 0.2  # simulated neuronx-cc time per new eager op signature on the ranks: the
# cold shape's silence (about 7 s) is longer than STALL


def _settings(workdir: Path, **overrides):
    from backend.settings import Settings

    base = dict(model=MODEL, device="neuron", dtype="float32", compile_backend=None, cache_dir=workdir / "cache",
                output_dir=workdir / "outputs", tp_stall_timeout=30.0,
                tp_start_timeout=240.0)
    base.update(overrides)
    return Settings(**base)


def _pixels(image):
    import numpy as np

    return np.asarray(image.convert("RGB"), dtype=np.int16)


def _cpu_pixels(size: int, steps: int, seed: int):
    """The same request straight through diffusers on the CPU: the reference the device must match."""
    import torch
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(MODEL, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(prompt=PROMPT, height=size, width=size, num_inference_steps=steps, guidance_scale=1.0,
               generator=torch.Generator("cpu").manual_seed(seed))
    return _pixels(out.images[0])


def claims(state_dir: str) -> dict[str, int]:
    """Which process holds which NeuronCore right now, as the stand-in's claim locks say ({core: pid})."""
    from tests.neuron.standin import core_holder

    held = {str(core): core_holder(state_dir, core) for core in range(16)}
    return {core: pid for core, pid in held.items() if pid}


def _run(mgr, size: int, mode: str, steps: int = 2, seed: int = 0):
    image, result = mgr.generate(mgr.validate(PROMPT, size, size, steps=steps, seed=seed, mode=mode))
    return image, result.to_json()


def _error(fn) -> dict | None:
    from backend.errors import StudioError

    try:
        fn()
    except StudioError as exc:
        return {"class": type(exc).__name__, "message": str(exc)}
    return None


def inprocess(workdir: Path) -> dict:
    """Eager, compiled and regional on "neuron" vs the CPU; compiled flags at 64, 128, 64."""
    from backend.serving.manager import Manager
    from ui.views_studio import run_markdown
    from ui.views_system import system_markdown

    mgr = Manager(_settings(workdir))
    mgr.start()
    out: dict = {"status_device": mgr.status().device, "pid": os.getpid()}
    cpu = _cpu_pixels(64, 2, 0)
    diffs, records = {}, []
    for size, mode in ((64, "eager"), (64, "compiled"), (128, "compiled"), (64, "compiled"), (64, "regional")):
        image, record = _run(mgr, size, mode)
        records.append(record)
        if size == 64:
            diffs.setdefault(mode, int(abs(_pixels(image) - cpu).max()))
    # The cache's size as it is now: the status re-reads it at most every 10 s, and these runs may
    # all fit in that time.
    status = dataclasses.replace(mgr.status(), cache=mgr.device.cache_info(fresh=True))
    out.update(records=records, max_diff_vs_cpu=diffs, status=status.to_json(),
               claims=claims(os.environ["NEURON_STANDIN_STATE_DIR"]),
               run_line=run_markdown(records[0]), system=system_markdown(status))
    mgr.close()
    return out


def second(workdir: Path) -> dict:
    """A later process on the same caches: persistent NEFF hits, the warm-only lock, a failed compile;
    then edits (``_edits``)."""
    from backend.serving.manager import Manager
    from backend.shapes import parse_shape_list

    mgr = Manager(_settings(workdir, reference_sizes=parse_shape_list("64x64,96x64")))
    mgr.start()
    out: dict = {}
    _img, out["first_compiled_64"] = _run(mgr, 64, "compiled")
    mgr.set_warm_only(True)
    _img, out["locked_warm_64"] = _run(mgr, 64, "compiled")
    out["locked_eager_128"] = _error(lambda: _run(mgr, 128, "eager"))
    out["locked_compiled_128"] = _error(lambda: _run(mgr, 128, "compiled"))
    out["predict_locked_eager_128"] = mgr.predict("eager", __import__("backend.shapes").shapes.Shape(128, 128))
    mgr.set_warm_only(False)
    _img, out["unlocked_eager_128"] = _run(mgr, 128, "eager")
    # NEURON_STANDIN_FAIL_COMPILE_DIM=36 makes the stand-in's compiler fail any graph at 96x96 (36 tokens).
    out["failed_compiled_96"] = _error(lambda: _run(mgr, 96, "compiled"))
    _img, out["after_failure_compiled_64"] = _run(mgr, 64, "compiled")
    out["status"] = mgr.status().to_json()
    out["edits"] = _edits(mgr, workdir)
    mgr.close()
    return out


def _edits(mgr, workdir: Path) -> dict:
    """Issue 34 on "neuron": a reference's tokens join the sequence, so a new reference size is a new
    compile (NEFFs keyed by shape, as TorchNeuron's are) and a fitted reference at a warm size is not.
    (The manager's reference sizes are 64x64 and 96x64.)"""
    from PIL import Image

    refs = {}
    for name, size in (("square", (64, 64)), ("wide", (96, 64)), ("big square", (200, 200))):
        refs[name] = str(workdir / f"{name.replace(' ', '-')}.png")
        Image.new("RGB", size, "red").save(refs[name])
    out: dict = {}
    for label, ref in (("square", "square"), ("square again", "square"), ("wide", "wide"),
                       ("wide again", "wide"), ("big square fitted", "big square")):
        request = mgr.validate(PROMPT, 64, 64, steps=2, seed=0, mode="compiled", images=[refs[ref]])
        predicted = mgr.predict("compiled", request.shape, 2)
        _img, result = mgr.generate(request)
        out[label] = {"signature": result.signature, "neff_compiles": result.neff_compiles,
                      "compiled": result.compiled, "predicted_state": predicted["state"],
                      "fit": result.references[0]["fit"]}
    out["status"] = [r for r in mgr.status().shapes if r["mode"] == "compiled" and "+ref" in r["shape"]]
    # Issue 52 (6b): two references warm in one order, then sent in the other under --warm-only.
    mgr.generate(mgr.validate(PROMPT, 64, 64, steps=2, seed=0, mode="compiled", images=[refs["square"], refs["wide"]]))
    mgr.set_warm_only(True)
    _img, swapped = mgr.generate(mgr.validate(PROMPT, 64, 64, steps=2, seed=0, mode="compiled",
                                              images=[refs["wide"], refs["square"]]))
    mgr.set_warm_only(False)
    out["swapped under warm-only"] = {"signature": swapped.signature, "neff_compiles": swapped.neff_compiles,
                                      "fitted": [r["fitted"] for r in swapped.references]}
    return out


def _gaps(mgr, request) -> tuple:
    """Generate and return (image, record, longest silence between progress messages in seconds)."""
    stamps = [time.monotonic()]
    image, result = mgr.generate(request, progress=lambda event: stamps.append(time.monotonic()))
    stamps.append(time.monotonic())
    return image, result.to_json(), max(b - a for a, b in zip(stamps, stamps[1:]))


def _wait_state(mgr, wanted: tuple, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while (_group(mgr) is None or _group(mgr).state not in wanted) and time.monotonic() < deadline:
        time.sleep(0.1)


def tp(workdir: Path) -> dict:
    """In process, then the group (silent cold compiles longer than the stall timeout), then back;
    a SIGSTOPped rank; a restart; a Neuron collective failure and the automatic restart — cores
    disjoint throughout."""
    from backend.serving.manager import Manager

    state_dir = os.environ["NEURON_STANDIN_STATE_DIR"]
    mgr = Manager(_settings(workdir, tp_degree=2, tp_stall_timeout=STALL))
    mgr.start()
    out: dict = {"app_pid": os.getpid(), "stall_timeout": STALL}
    steps: list[dict] = []

    def note(name: str, **extra) -> None:
        group = _group(mgr).describe() if _group(mgr) is not None else {}
        steps.append({"step": name, "claims": claims(state_dir), "tp_state": group.get("state"),
                      "tp_cores": group.get("cores"), "rank_pids": group.get("rank_pids"),
                      "rank_devices": [r.get("device") for r in group.get("ranks") or []], **extra})

    image, record = _run(mgr, 64, "eager")
    eager_pixels = _pixels(image)
    note("in process", record=record)
    out["too_many_ranks"] = _error(lambda: mgr.start_engine("tensor-parallel", 4))
    # From here on every new eager op signature costs the ranks simulated compiler time: the cold
    # shape's sharded ops go silent for longer than the stall timeout.
    os.environ["NEURON_STANDIN_EAGER_COMPILE_SECONDS"] = str(EAGER_COMPILE_SECONDS)
    from ui.handlers import Studio

    Studio(mgr).system_tab.start_tp(2)  # the operator's Start group button, with the default degree
    _wait_state(mgr, ("ready", "dead"), 240)
    os.environ.pop("NEURON_STANDIN_EAGER_COMPILE_SECONDS")
    note("group started")
    image, record, silence = _gaps(mgr, mgr.validate(PROMPT, 64, 64, steps=2, seed=0, mode="tp"))
    note("tp generate", record=record, longest_silence=silence,
         max_diff_vs_eager=int(abs(_pixels(image) - eager_pixels).max()))
    _img, record = _run(mgr, 64, "eager")
    note("back in process", record=record)
    victim = int(_group(mgr).rank_pids()[1])
    os.kill(victim, signal.SIGSTOP)  # hung, not dead: its process stays, its heartbeat stops
    began = time.monotonic()
    stopped = _error(lambda: _run(mgr, 64, "tp"))
    note("rank 1 stopped", error=_group(mgr).error, request=stopped, dead_after=time.monotonic() - began)
    _wait_state(mgr, ("dead",))
    _img, record = _run(mgr, 64, "tp")  # served in process (degraded) while the group is down
    note("degraded", record=record)
    hung_group = _group(mgr)
    mgr.start_engine("tensor-parallel", 2, wait=True)  # joins the hung group's teardown first
    image, record = _run(mgr, 64, "tp")
    note("group restarted", record=record, max_diff_vs_eager=int(abs(_pixels(image) - eager_pixels).max()),
         hung_survivors=hung_group.survivors())
    old_group = _group(mgr)
    Path(os.environ["NEURON_STANDIN_FAIL_COLLECTIVE"]).write_text("1")  # rank 1's next collective fails
    failed = _error(lambda: _run(mgr, 64, "tp"))
    deadline = time.monotonic() + 240  # a bound for a broken restart, not a wait: the loop ends on the state
    while (_group(mgr) is old_group or _group(mgr).state != "ready") and time.monotonic() < deadline:
        time.sleep(0.1)
    note("collective failed", request=failed, restarted=_group(mgr) is not old_group,
         old_error=old_group.error)
    image, record = _run(mgr, 64, "tp")
    note("after automatic restart", record=record,
         max_diff_vs_eager=int(abs(_pixels(image) - eager_pixels).max()))
    out["cleared_while_running"] = _error(mgr.clear_compile_cache)
    # Both ranks compiled into one NEFF cache at once: only whole .neff files are left (each is
    # written to a temp file and renamed into place).
    out["neff_files"] = [p.name for p in Path(os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"]).rglob("*") if p.is_file()]
    out["steps"] = steps
    out["neuron_cores"] = mgr.status().neuron_cores
    mgr.close()
    return out


def tp_all_cores(workdir: Path) -> dict:
    """Issue 52 (5): ``--neuron-cores none`` on a trn2.3xlarge (4 logical cores): a degree-4 group holds
    every core and the app none; work in the app's own process is refused, naming the flag."""
    from backend.serving.manager import Manager

    mgr = Manager(_settings(workdir, mode="tp", tp_degree=4, neuron_cores="none"))
    mgr.start()  # --mode tp: the group starts and warms before the app is ready
    out: dict = {"app_pid": os.getpid(), "plan": mgr.status().neuron_cores}
    _img, out["record"] = _run(mgr, 64, "tp")
    out.update(claims=claims(os.environ["NEURON_STANDIN_STATE_DIR"]), tp=mgr.status().tp,
               eager=_error(lambda: _run(mgr, 64, "eager")))
    mgr.close()
    return out


def replicas(workdir: Path) -> dict:
    """Two replicas and a tensor-parallel group beside the app on an 8-core instance (two Trainium2
    devices at LNC 2): who holds which core, two requests at once, a killed replica's return."""
    import threading

    from backend.serving.manager import Manager

    state_dir = os.environ["NEURON_STANDIN_STATE_DIR"]
    mgr = Manager(_settings(workdir, replicas=2, tp_degree=2))
    mgr.start()  # --replicas 2: the app claims its core, then the pool claims the next two
    pool, tp = mgr.engines["replicas"], mgr.engines["tensor-parallel"]
    out: dict = {"app_pid": os.getpid()}
    out["too_many_replicas"] = _error(lambda: mgr.start_engine("replicas", 8))
    mgr.start_engine("tensor-parallel", 2, wait=True)

    def holders() -> dict:
        return {"claims": claims(state_dir),
                "replicas": [{"core": g.cores[0], "pid": g.rank_pids().get(0), "state": g.state}
                             for g in pool.replicas],
                "tp_cores": tp.group.cores, "tp_pids": sorted(tp.group.rank_pids().values())}

    out["started"] = holders()
    results, errors = [], []

    def run(seed: int) -> None:
        try:
            results.append(_run(mgr, 64, "eager", seed=seed)[1])
        except Exception as exc:  # noqa: BLE001 - reported in the output
            errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    out["served"] = sorted(r["place"] for r in results)
    out["errors"] = errors
    victim = pool.replicas[0]
    os.kill(int(victim.rank_pids()[0]), signal.SIGKILL)
    deadline = time.monotonic() + 240
    while (pool.replicas[0] is victim or pool.replicas[0].state != "ready") and time.monotonic() < deadline:
        time.sleep(0.1)
    out["after_restart"] = holders()
    out["after_restart_record"] = _run(mgr, 64, "eager", seed=5)[1]
    out["neuron_cores"] = mgr.status().neuron_cores
    # What /metrics says of the same cores (web.api serves this registry's text).
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    out["core_gauges"] = {f"{s.name} {s.labels['owner']}": s.value
                          for family in text_string_to_metric_families(generate_latest(mgr.metrics.registry).decode())
                          for s in family.samples if s.name.startswith("neuron_studio_neuron_cores")}
    mgr.close()
    return out


def memory(workdir: Path) -> dict:
    """A NeuronCore of ``NEURON_STANDIN_HBM_BYTES`` (the test sets it): a signature whose plan does not
    fit is refused before it runs; one of about the same pixel count on the fast attention path runs;
    the refused one, forced through the engine, fails on the stand-in in TorchNeuron's words."""
    import torch

    from backend.serving.manager import Manager

    mgr = Manager(_settings(workdir, mode="eager", max_sequence_tokens=20_000))
    mgr.start()
    before = mgr.device.compile_snapshot()["neff_compiles"]
    out: dict = {"hbm": mgr.device.hbm_bytes()}
    slow = dict(prompt=PROMPT, height=1024, width=2032, steps=1, seed=0)
    out["slow_prediction"] = mgr.plan(dict(slow, mode="eager"))[1]
    out["slow_refused"] = _error(lambda: mgr.run(slow, save=False))
    out["compiles_after_refusal"] = mgr.device.compile_snapshot()["neff_compiles"] - before
    torch.neuron.reset_peak_memory_stats()
    _image, result = mgr.run(dict(slow, width=2048), save=False)
    out["fast"] = {"shape": str(result.shape), "peak": torch.neuron.max_memory_allocated(),
                   "prediction": mgr.predict("eager", result.shape, 1)["memory"]}
    forced = mgr.validate(**dict(slow, mode="eager"))
    out["forced"] = _error(lambda: mgr.local.run(forced, lambda event: None, lambda: False))
    mgr.close()
    return out


def main() -> None:
    scenario, workdir = sys.argv[1], Path(sys.argv[2])
    from backend.hardware import env as device_env

    device_env.prepare_environment(workdir / "cache")
    result = {"inprocess": inprocess, "second": second, "tp": tp, "tp_all_cores": tp_all_cores,
              "replicas": replicas, "memory": memory}[scenario](workdir)
    print(json.dumps(result, default=str))
    sys.stdout.flush()
    os._exit(0)  # after DTensor collectives a normal exit may abort (DESIGN.md)


if __name__ == "__main__":
    main()
