"""One settings object for the whole app, read from flags, then environment, then defaults.

Every environment variable the app reads is declared here, next to its flag and its default, so
there is one place to look (the vLLM ``envs.py`` habit). This module imports no torch: it runs
before the device layer has set the cache variables that must exist before torch loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
from pathlib import Path
from typing import Any

from backend.core_lists import NO_CORES, check_on_instance, format_cores, parse_cores
from backend.errors import InvalidRequest
from backend.shapes import MAX_COUNT, Shape, parse_shape_list, validate_shape, whole_number

IN_PROCESS_MODES = ("eager", "compiled", "regional")
TP_MODE = "tp"
MODES = IN_PROCESS_MODES + (TP_MODE,)
DEVICES = ("auto", "neuron", "cuda", "cpu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
EMBEDDED_MODEL = "embedded"  # the tiny model trained on the scene grammar (embedded.scenes)
EMBEDDED_RANDOM_MODEL = "embedded-random"  # the same classes with random weights: fastest, draws noise


_SECRETS = ("auth", "operator_auth", "metrics_key")


def _default_cache_root() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("neuron-studio"))


@dataclasses.dataclass
class Settings:
    """Each field's parser and meaning are in ``OPTIONS``, its flag and variable are ``names``' (all in
    docs/settings.md); the comments here say only what the table does not."""

    model: str = EMBEDDED_MODEL
    device: str = "auto"
    dtype: str = "auto"
    compile_backend: str | None = None  # None: the device's own ("neuron" on Trainium, "inductor" elsewhere)
    mode: str = "eager"  # of a request that names none
    tp_degree: int = 2
    tp_compile: str = "eager"
    tp_stall_timeout: float = 60.0  # no progress message for this long (outside compiles): hung
    tp_start_timeout: float = 600.0
    tp_torchrun_args: str = ""
    tp_collective_timeout: float = 300.0  # on Neuron raised to at least compile_timeout (collective_seconds)
    # On Neuron the NEFF cache's lock timeout is kept at least this long too (TorchNeuron breaks
    # another process's compile lock after TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT).
    compile_timeout: float = 1800.0
    replicas: int = 0
    ray: str | None = None  # a Ray cluster's address: the Ray Serve engine (backend.engines.ray_serve)
    ray_replicas: int = 2
    ray_cores_per_replica: int = 1
    ray_min_replicas: int = 1
    ray_max_replicas: int = 0  # 0: --ray-replicas, fixed
    neuron_cores: str | None = None  # None: backend.hardware.core_plan.claim_app_cores decides
    neuron_instance_cores: int | None = None  # None: ask neuron-ls (its JSON, else its table)
    # Request defaults and bounds. FLUX.2-klein is step-distilled: 4 steps, guidance ignored.
    steps: int = 4
    max_steps: int = 50
    guidance: float = 1.0
    max_guidance: float = 20.0
    min_size: int = 64
    max_size: int = 2048
    max_prompt_chars: int = 2000
    max_prompt_tokens: int = 512  # the pipeline's max_sequence_length: longer prompts are cut off
    max_aspect: float = 4.0  # long side / short side
    prewarm: list[Shape] = dataclasses.field(default_factory=list)
    warm_only: bool = False
    max_compiled_shapes: int = 32  # dynamo's recompile limit is raised to match
    cache_dir: Path = dataclasses.field(default_factory=_default_cache_root)
    output_dir: Path = Path("outputs")
    host: str = "127.0.0.1"
    port: int = 7860
    # No share link: the app serves itself with uvicorn; reach it from elsewhere with --host behind
    # a proxy or tunnel you control.
    auth: str | None = None
    operator_auth: str | None = None  # None: a random token printed at start as an operator link
    cache_from: Path | None = None
    keep_outputs: int = 200
    max_queued_per_viewer: int = 4
    max_work: float = 0.0
    max_references: int = 4
    reference_sizes: list[Shape] = dataclasses.field(default_factory=list)  # empty: the model's presets
    reference_fit: str = "crop"
    max_sequence_tokens: int = 0  # 0: the output and three references at the largest preset's size
    api_keys: Path | None = None
    metrics_key: str | None = None
    forwarded_allow_ips: str | None = None  # None: X-Forwarded-* trusted from no one (the peer's address)
    price_per_hour: float = 0.0

    def runs_as(self, mode: str) -> str:
        """How a request in ``mode`` runs on a process: itself, except ``tp``, whose ranks (and the
        app, serving tp in process while the group is down) run ``--tp-compile``. The one place
        that decides it."""
        return self.tp_compile if mode == TP_MODE else mode

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self)):
            if name in _SECRETS:
                value = "set" if value else None  # never echo credentials
            elif isinstance(value, (Path, list)):
                value = str(value) if isinstance(value, Path) else [str(s) for s in value]
            out[name] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Settings":
        """The inverse of ``to_json`` (credentials are never carried: ``auth`` comes back None)."""
        values = dict(data)
        for field in dataclasses.fields(cls):
            value = values.get(field.name)
            if field.name in _SECRETS:
                values[field.name] = None
            elif field.type == "list[Shape]":
                values[field.name] = parse_shape_list(",".join(value or []))
            elif field.type.startswith("Path"):
                values[field.name] = Path(value) if value else None
        values["cache_dir"] = values["cache_dir"].expanduser()
        return cls(**values).check()

    def collective_seconds(self, device: str) -> float:
        """The worker group's collective timeout: on Neuron at least ``--compile-timeout`` (TorchNeuron's
        watchdog starts a collective's clock when it is enqueued, and eager ops compile one at a time
        ahead of it)."""
        return (max(self.tp_collective_timeout, self.compile_timeout) if device == "neuron"
                else self.tp_collective_timeout)

    def check(self) -> "Settings":
        """The checks across fields (ValueError naming the flag), made wherever Settings are built from
        outside: the flags and environment (``load_settings``) and a worker's config (``from_json``)."""
        if self.min_size % 16 or self.max_size % 16 or self.min_size > self.max_size:
            raise ValueError(f"--min-size/--max-size: bounds must be multiples of 16 with min <= max, "
                             f"got {self.min_size}..{self.max_size}")
        if self.ray_max_replicas and not self.ray_min_replicas <= self.ray_replicas <= self.ray_max_replicas:
            raise ValueError(f"--ray-replicas {self.ray_replicas} must lie within --ray-min-replicas "
                             f"{self.ray_min_replicas} and --ray-max-replicas {self.ray_max_replicas}")
        if self.neuron_cores is not None and self.neuron_instance_cores is not None:
            check_on_instance(self.neuron_cores, self.neuron_instance_cores)  # ValueError names the flag
        for shape in self.prewarm:
            try:
                validate_shape(shape.height, shape.width, self.min_size, self.max_size)
            except InvalidRequest as exc:
                raise ValueError(f"--prewarm {shape}: {exc}") from None
            if len(shape.refs) > self.max_references:
                raise ValueError(f"--prewarm {shape}: {len(shape.refs)} references; --max-references is "
                                 f"{self.max_references}")
            if self.reference_sizes and not set(shape.refs) <= {(s.height, s.width) for s in self.reference_sizes}:
                raise ValueError(f"--prewarm {shape}: a reference size is not one of --reference-sizes")
            if shape.count > MAX_COUNT:
                raise ValueError(f"--prewarm {shape}: at most {MAX_COUNT} images per prompt")
        return self


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0, true/false), got {text!r}")


def _choice(choices: tuple[str, ...]):
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


def _number(text: str, read, ok, what: str):
    """``read(text)`` if ``ok`` accepts it, else ValueError saying ``what`` was expected. Whole
    numbers are read by ``shapes.whole_number``'s rule: ASCII digits only."""
    try:
        value = read(text)
    except ValueError:  # InvalidRequest is one too
        raise ValueError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise ValueError(f"expected {what}, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    return _number(text, functools.partial(whole_number, "value"), lambda v: v >= 1, "a positive whole number")


def _whole(text: str) -> int:
    return _number(text, functools.partial(whole_number, "value"), lambda v: v >= 0, "a whole number of 0 or more")


def _positive_float(text: str) -> float:
    return _number(text, float, lambda v: v > 0, "a positive number of seconds")


def _non_negative_float(text: str) -> float:
    return _number(text, float, lambda v: math.isfinite(v) and v >= 0, "a number of at least 0")


def _plain_shape_list(text: str) -> list[Shape]:
    """Sizes (WIDTHxHEIGHT, no batch or references), each a multiple of 16 with area up to
    1024x1024 (the pipeline resizes a larger reference itself, which would undo the fit)."""
    shapes = parse_shape_list(text)
    for shape in shapes:
        if not shape.plain or shape.width % 16 or shape.height % 16 or shape.pixels > 1024 * 1024 or not shape.pixels:
            raise ValueError(f"expected sizes WIDTHxHEIGHT, multiples of 16 of at most 1024x1024 pixels, got {shape}")
    return shapes


def _core_list(text: str) -> str:
    return NO_CORES if text.strip().lower() == NO_CORES else format_cores(parse_cores(text))


# field -> (parser, help). The one table of the app's knobs; each one's flag and variable are ``names``.
OPTIONS: dict[str, tuple[Any, str]] = {
    "model": (str, "'embedded' (default: a tiny offline model trained to draw scene prompts), 'embedded-random' "
              "(tiny, random weights), a hub id such as black-forest-labs/FLUX.2-klein-4B, or a local diffusers "
              "folder"),
    "device": (_choice(DEVICES), "auto|neuron|cuda|cpu"),
    "dtype": (_choice(DTYPES), "auto (bf16 on neuron/cuda, fp32 on cpu)|float32|bfloat16|float16"),
    "compile_backend": (str, "torch.compile backend (default: neuron on Trainium, inductor elsewhere; aot_eager "
                        "compiles fast on CPU)"),
    "mode": (_choice(MODES), "eager|compiled|regional|tp (tensor-parallel)"),
    "tp_degree": (_positive_int, "ranks (devices) of the tensor-parallel group; must divide the attention-head count"),
    "tp_compile": (_choice(IN_PROCESS_MODES), "how each tensor-parallel rank runs its shard: eager|compiled|regional"),
    "tp_stall_timeout": (float, "seconds without progress from the group before it is declared hung"),
    "tp_torchrun_args": (str, "extra torchrun options for the worker group (quoted, shell-style)"),
    "compile_timeout": (_positive_float, "seconds one shape's compile may take (a silent worker is not hung "
                        "meanwhile; on Neuron the NEFF lock and collective timeouts are kept at least this long)"),
    "tp_collective_timeout": (float, "seconds a collective of the worker group may wait before it fails"),
    "replicas": (_whole, "replicas started at launch: worker processes, each a whole pipeline on its own NeuronCore "
                 "(CUDA device; share of the CPU) serving eager/compiled/regional requests side by side (0: none; "
                 "the System tab starts and stops them)"),
    "ray": (str, "serve eager/compiled/regional from a Ray Serve deployment on this Ray cluster (an address such as "
            "head:6379, or auto), each replica a whole pipeline on --ray-cores-per-replica neuron_cores (GPUs; CPUs) "
            "(default: none; docs/replicas.md)"),
    "ray_replicas": (_positive_int, "Serve replicas of the pipeline (the initial count under autoscaling)"),
    "ray_cores_per_replica": (_positive_int, "neuron_cores (GPUs; CPUs where the cluster has neither) each Serve "
                              "replica holds"),
    "ray_min_replicas": (_whole, "autoscaling's lower bound (with --ray-max-replicas)"),
    "ray_max_replicas": (_whole, "autoscaling's upper bound: Serve scales on ongoing requests, one per replica (0: a "
                         "fixed --ray-replicas)"),
    "neuron_cores": (_core_list, "NeuronCores the app process claims, e.g. 0 or 0-1 (default: inherited "
                     "NEURON_RT_VISIBLE_CORES, else the instance's last core); tensor-parallel ranks and replicas "
                     "get cores from the rest. 'none': the app claims none and runs nothing on the device itself, so "
                     "every core can go to the group or the replicas (degree 4 on a trn2.3xlarge)"),
    "neuron_instance_cores": (_positive_int, "logical NeuronCores on this instance, as NEURON_RT_VISIBLE_CORES "
                              "counts them (default: from neuron-ls); 4 on a trn2.3xlarge"),
    "tp_start_timeout": (float, "seconds the group may take to load and warm up"),
    "steps": (_positive_int, "default denoising steps"),
    "max_steps": (_positive_int, "most steps a request may ask"),
    "guidance": (float, "default guidance scale"),
    "min_size": (_positive_int, "smallest height/width"),
    "max_size": (_positive_int, "largest height/width"),
    "prewarm": (parse_shape_list, "shapes to compile at start, e.g. 1024x1024,768x1344 (WIDTHxHEIGHT)"),
    "warm_only": (_bool, "refuse shapes that are not warm instead of compiling them (1/0)"),
    "max_compiled_shapes": (_positive_int, "distinct compiled graphs per mode before new shapes are refused"),
    "cache_dir": (Path, "app-owned compile cache root"),
    "output_dir": (Path, "where PNGs are written"),
    "host": (str, "address the web UI binds (default 127.0.0.1)"),
    "port": (_positive_int, "web UI port"),
    "auth": (str, "require a login: a file with one user:pass per line (or user:pass, which ps shows: prefer the "
             "file or the environment variable)"),
    "operator_auth": (str, "the operator's login at /operator: a file of user:pass lines (or user:pass); default: a "
                      "random operator link printed at start"),
    "cache_from": (Path, "a warm-start bundle to import at start (its shapes then run once, so they are warm); "
                   "importing a bundle runs its author's code: use only bundles you trust"),
    "max_queued_per_viewer": (_positive_int, "runs one owner (a page session, an API key or address) may have "
                              "waiting on the job board besides its running one; one more is refused with its place "
                              "in line"),
    "max_work": (_non_negative_float, "megapixel-steps one request may ask (width x height x steps / 1e6; 2048x2048 "
                 "at 50 steps is 210); the cost line states it before the click (0: no bound beyond --max-size and "
                 "--max-steps)"),
    "max_references": (_whole, "reference images one edit may take (0: no editing)"),
    "reference_sizes": (_plain_shape_list, "the sizes references are fitted to, e.g. 1024x1024,768x1344 (default: "
                        "the model's presets); each is a compile on Trainium, so keep them few"),
    "reference_fit": (_choice(("crop", "pad")), "how a reference reaches its size: crop (cover, cut the middle) or "
                      "pad (fit, white around)"),
    "max_sequence_tokens": (_whole, "image tokens (the output's and every reference's, 256 pixels each) one request "
                            "may ask (0: four times the largest preset's)"),
    "api_keys": (Path, "a file of API keys for /v1/images (one per line, or name:key; # comments): each caller a "
                 "viewer (default: no key, loopback callers only)"),
    "metrics_key": (str, "a key (or a file holding it) that lets a non-loopback scraper read /metrics as a Bearer "
                    "token, at least 16 characters (default: loopback scrapers only)"),
    "forwarded_allow_ips": (str, "the reverse proxies (comma-separated addresses or networks, uvicorn's "
                            "forwarded_allow_ips) whose X-Forwarded-For and X-Forwarded-Proto are believed: the "
                            "caller's address and scheme for every bound (default: none, the peer's address)"),
    "price_per_hour": (_non_negative_float, "the instance's price per hour (USD) for the cost receipt (0: the dated "
                       "on-demand table for the instance type neuron-ls reports, if it lists it)"),
    "keep_outputs": (_positive_int, "generated PNGs kept in the output dir; the app's oldest are removed past it"),
}


def names(dest: str) -> tuple[str, str]:
    """A setting's flag and environment variable: ``max_steps`` -> --max-steps, NEURON_STUDIO_MAX_STEPS."""
    return "--" + dest.replace("_", "-"), "NEURON_STUDIO_" + dest.upper()


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """Add every setting as a flag whose default is 'not given', so env and defaults can fill in."""
    group = parser.add_argument_group("settings (flag > NEURON_STUDIO_* environment > default)")
    for dest, (parse, help_text) in OPTIONS.items():
        flag, env = names(dest)
        switch = {"nargs": "?", "const": "1"} if parse is _bool else {}  # `--warm-only` alone means on
        group.add_argument(flag, dest=dest, default=argparse.SUPPRESS, metavar=dest.upper(),
                           help=f"{help_text} [env {env}]", **switch)


def load_settings(flags: dict[str, Any] | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Settings from raw flag strings (as argparse left them) and the environment; ValueError naming
    the flag or variable for any value that does not parse."""
    flags = flags or {}
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for dest, (parse, _help) in OPTIONS.items():
        flag, env = names(dest)
        if dest in flags:
            raw, source = flags[dest], flag
        elif environ.get(env, "") != "":
            raw, source = environ[env], env
        else:
            continue
        try:
            values[dest] = parse(raw) if isinstance(raw, str) else raw
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
    return Settings(**values).check()


def settings_table() -> str:
    """The settings as a Markdown table (flag, environment variable, default, meaning), made from
    ``OPTIONS`` and ``Settings``' defaults: docs/settings.md holds it between its ``settings:``
    markers (``python -m backend.settings`` rewrites them; a test checks they agree)."""
    defaults = Settings.__dataclass_fields__
    rows = ["| flag | environment | default | meaning |", "| --- | --- | --- | --- |"]
    for dest, (_parse, help_text) in OPTIONS.items():
        flag, env = names(dest)
        default = defaults[dest].default  # MISSING for a default_factory: only cache_dir's is not empty
        if default is dataclasses.MISSING:
            default = "user cache dir/neuron-studio" if dest == "cache_dir" else None
        shown = {None: "unset", True: "1", False: "0", "": "unset"}.get(default, default)
        rows.append(f"| `{flag}` | `{env}` | {shown} | {help_text.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # rewrite docs/settings.md's table from OPTIONS
    doc = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
    head, rest = doc.read_text().split("<!-- settings:start -->\n", 1)
    _old, tail = rest.split("<!-- settings:end -->", 1)
    doc.write_text(head + "<!-- settings:start -->\n" + settings_table() + "<!-- settings:end -->" + tail)
    print(f"updated {doc}")
