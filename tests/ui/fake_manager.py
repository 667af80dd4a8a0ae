"""A fake manager for UI handler tests: the manager's public surface, no model, no torch.

Validation is the real Manager.validate (pure Python), so messages match what users see.
"""

from __future__ import annotations

from PIL import Image

from backend.errors import ShapeLocked
from backend.manager import Manager
from backend.records import GenerationResult
from backend.shapes import Shape
from tests.conftest import make_settings


class FakeManager:
    modes = ("eager", "compiled", "regional", "tp")

    def __init__(self, tmp_path, **settings):
        self.settings = make_settings(tmp_path, **settings)
        self._validator = Manager(self.settings)
        self.warm_only = False
        self.records: list[GenerationResult] = []
        self.calls: list[tuple] = []
        self.raise_on_generate: Exception | None = None
        self.warm: set[tuple[str, Shape]] = set()
        self.progress_events = []
        self.tp: dict | None = None  # the group's describe(); None until the first start

    def validate(self, *args, **kwargs):
        return self._validator.validate(*args, **kwargs)

    def predict(self, mode, shape, steps=None):
        warm = (mode, shape) in self.warm
        refused = None
        if self.warm_only and not warm and mode != "eager":
            refused = f"{shape} is not warm in {mode} mode and the app is locked to warm shapes"
        return {"mode": mode, "shape": str(shape), "state": "warm" if warm else "cold",
                "will_compile": not warm and mode != "eager", "estimate_compile_seconds": 2.0 if not warm else None,
                "expected_seconds": 0.5 if warm else None, "note": "warm" if warm else "will compile first",
                "refused": refused}

    def generate(self, request, progress=None):
        import dataclasses

        from backend.errors import BackendNotReady

        self.calls.append(("generate", request))
        if self.raise_on_generate:
            raise self.raise_on_generate
        requested_mode, degraded, world_size = request.mode, None, 1
        if request.mode == "tp":
            if self.tp is None:
                raise BackendNotReady("the tensor-parallel group is not running; start it (the Start button "
                                      "beside the mode, the System tab, or --mode tp at launch)")
            degraded = self._degraded()
            if degraded:
                request = dataclasses.replace(request, mode=self.settings.tp_compile)
            else:
                world_size = self.tp["world_size"]
        if self.warm_only and (request.mode, request.shape) not in self.warm and request.mode != "eager":
            raise ShapeLocked(f"{request.shape} is not warm in {request.mode} mode")
        for event in self.progress_events:
            progress(event)
        compiled = (request.mode, request.shape) not in self.warm and request.mode != "eager"
        self.warm.add((request.mode, request.shape))
        result = GenerationResult(
            prompt=request.prompt, width=request.width, height=request.height, mode=request.mode,
            steps=request.steps, guidance=request.guidance, seed=request.seed, device="cpu", model="fake",
            compiled=compiled, compiles=int(compiled), compile_seconds=1.5 if compiled else 0.0,
            seconds=2.0 if compiled else 0.4, encode=0.1, denoise=1.8 if compiled else 0.2, decode=0.1,
            world_size=world_size, requested_mode=requested_mode if degraded else None, degraded=degraded)
        self.records.append(result)
        color = {"eager": (200, 0, 0), "compiled": (201, 0, 0), "regional": (205, 0, 0), "tp": (200, 0, 0)}[
            request.mode]
        return Image.new("RGB", (request.width, request.height), color), result

    def compare(self, request, modes, progress=None):
        first, entries = None, []
        for mode in modes:
            image, result = self.generate(request.__class__(**{**request.to_json(), "mode": mode}), progress)
            value = image.getpixel((0, 0))[0]
            first = value if first is None else first
            entries.append({"mode": mode, "image": image, "result": result, "max_diff": abs(value - first)})
        return entries

    def save_image(self, image, result):
        from backend.pngmeta import save_png, unique_output_path

        result.path = str(save_png(image, result, unique_output_path(self.settings.output_dir, result)))
        return result.path

    # tensor-parallel group: the manager's API (start_tp / stop_tp / tp_logs / status()["tp"]) ----
    def start_tp(self, degree=None, wait=False):
        from backend.errors import InvalidRequest

        if degree is not None and 4 % degree:
            raise InvalidRequest("tp_degree", f"{degree} does not divide the model's 4 attention heads; "
                                              "use one of 1, 2, 4")
        self.calls.append(("start_tp", degree))
        degree = degree or self.settings.tp_degree
        if not (self.tp and self.tp["world_size"] == degree and self.tp["state"] in
                ("launching", "loading", "warming", "ready")):
            self.tp = {"state": "launching", "world_size": degree, "compile_mode": self.settings.tp_compile,
                       "device": "cpu", "cores": None, "pids": [10], "rank_pids": {}, "error": None,
                       "last_request_error": None, "timings": {}, "socket": "/tmp/fake/tp.sock", "ranks": []}
        return dict(self.tp)

    def stop_tp(self):
        self.calls.append(("stop_tp",))
        if self.tp is not None:
            self.tp.update(state="stopped", pids=[], rank_pids={}, ranks=[])

    def set_tp(self, state, **fields):
        """Test helper: put the group in ``state`` (starting it first if it never was)."""
        if self.tp is None:
            self.start_tp()
            self.calls.pop()
        self.tp.update(state=state, **fields)
        if state == "ready":
            n = self.tp["world_size"]
            self.tp.setdefault("timings", {}).update(load=2.0, warm=0.5)
            self.tp.update(rank_pids={str(r): 11 + r for r in range(n)}, ranks=[
                {"rank": r, "pid": 11 + r, "core": None, "transformer_bytes": 3 * 2**20,
                 "sharded_bytes": 2 * 2**20, "replicated_bytes": 2**20,
                 "sharded": [{"name": "blocks.0.attn.to_q.weight", "global_shape": [64, 64],
                              "local_shape": [64 // n, 64], "dim": 0}] * 6} for r in range(n)])

    def tp_logs(self, lines=20):
        self.calls.append(("tp_logs", lines))
        if self.tp is None:
            return {}
        n = self.tp["world_size"]
        return {**{f"rank {r}": f"rank {r}/{n} starting (pid {11 + r})\n" for r in range(n)}, "torchrun": ""}

    def _degraded(self):
        if self.tp is None or self.tp["state"] not in ("dead", "launching", "loading", "warming"):
            return None
        why = f"the tensor-parallel group is {self.tp['state']}" + (
            f" ({self.tp['error']})" if self.tp["state"] == "dead" else "")
        return f"degraded: {why}; tensor-parallel requests run in process ({self.settings.tp_compile}) meanwhile"

    def cancel(self):
        self.calls.append(("cancel",))
        return True

    def set_warm_only(self, locked):
        self.warm_only = locked

    def start_warmup(self, shapes, mode=None):
        self.calls.append(("warmup", tuple(shapes), mode))

    def clear_compile_cache(self):
        self.calls.append(("clear",))
        return 5_000_000

    def status(self):
        return {
            "state": "ready", "model": {"spec": "embedded", "label": "fake-model"},
            "device": {"kind": "cpu", "reason": "auto: fake", "compile_backend": "aot_eager"},
            "dtype": "float32", "default_mode": "eager", "modes": list(self.modes),
            "engine": {"engine": "fake", "active_mode": "eager"}, "warm_only": self.warm_only,
            "busy": None, "cache": {"dir": "/tmp/x", "bytes": 2048, "variable": "TORCHINDUCTOR_CACHE_DIR",
                      "caches": [{"dir": "/tmp/x", "bytes": 2048, "variable": "TORCHINDUCTOR_CACHE_DIR"}]},
            "memory": {"rss_bytes": 10 * 2**20, "device_allocated_bytes": None}, "load_error": None,
            "last_error": None, "warmup": None,
            "tp": dict(self.tp) if self.tp else {"state": "stopped", "world_size": self.settings.tp_degree},
            "neuron_cores": None, "degraded": self._degraded(),
            "shapes": [{"mode": m, "shape": str(s), "width": s.width, "height": s.height, "tokens": s.tokens,
                        "state": "warm", "compile_seconds": 1.5 if m != "eager" else 0.0,
                        "compiles": int(m != "eager"), "steady_seconds": 0.4, "runs": 1,
                        "compiling_elapsed": None, "error": None} for m, s in sorted(self.warm)],
        }
