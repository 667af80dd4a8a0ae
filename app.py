"""Neuron Studio: FLUX.2-klein on AWS Trainium (or CUDA, or the CPU), in the browser or headless.

The commands (serve, the default; demo, generate, doctor, cost, cache) are README's table; their flags
come from ``backend.settings`` (flag > NEURON_STUDIO_* env > default). No torch is imported before the
device layer has set the cache variables TorchNeuron reads when it loads.
"""

from __future__ import annotations

import argparse
import os
import sys

from backend.hardware import env as device_env
from backend.settings import IN_PROCESS_MODES, OPTIONS, add_setting_flags, load_settings
from backend.shapes import parse_shape


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line on stderr, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def _shape_arg(text: str):
    try:
        return parse_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)  # every command takes the settings' flags
    add_setting_flags(common)
    parser = _Parser(prog="app.py", description=__doc__.split("\n\n")[0], parents=[common])
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("serve", parents=[common], help="serve the web UI (the default command)")

    demo_help = ("serve, warm every preset in --demo-modes, optionally start the group, lock to warm shapes: "
                 "a demo in one command")
    demo = sub.add_parser("demo", parents=[common], help=demo_help,
                          description=demo_help[0].upper() + demo_help[1:] + ". The page is served at once; /readyz "
                          "answers 503 until the warm set is warm. Each setting below falls back to its "
                          "NEURON_STUDIO_* variable, then to its default (docs/settings.md).")
    demo.add_argument("--demo-modes", default=None,
                      help="comma-separated modes whose presets are warmed (default: --mode)")
    demo.add_argument("--tp", action="store_true", help="also start the tensor-parallel group (--tp-degree ranks)")

    gen = sub.add_parser("generate", parents=[common], help="generate images headless, one per --size")
    gen.add_argument("prompt")
    gen.add_argument("--size", action="append", type=_shape_arg, metavar="WxH",
                     help="image size, WIDTHxHEIGHT; repeat for several images in one process")
    gen.add_argument("--image", action="append", default=None, metavar="PATH",
                     help="a reference image to edit from (repeat for several, up to --max-references)")
    gen.add_argument("--count", default=None, metavar="N", help="images per prompt, 1 to 4 (one batch)")
    gen.add_argument("--seed", default=None, help="seed (default: random; the used seed is reported)")
    gen.add_argument("--out", default=None,
                     help="output folder, or a .png file name (default: the output dir setting)")
    gen.add_argument("--json", action="store_true", help="print one JSON object per image on stdout")
    gen.add_argument("--no-save", action="store_true", help="do not write PNG files")
    # generate takes --mode/--steps/--guidance from the settings flags above.

    cost = sub.add_parser("cost", parents=[common], help="measure what an image costs here: warm each size, time "
                          "--runs runs, print the receipt (images/hour, price of 1,000 at --price-per-hour)")
    cost.add_argument("--sizes", default=None, help="comma-separated WIDTHxHEIGHT (default: --prewarm, else the "
                                                    "model's first preset)")
    cost.add_argument("--runs", type=int, default=3, help="steady runs per size after its warm-up (default 3)")
    cost.add_argument("--reference-price", type=float, default=None, metavar="USD_PER_HOUR",
                      help="another machine's price per hour, shown beside this one (with --reference-seconds)")
    cost.add_argument("--reference-seconds", type=float, default=None, metavar="S",
                      help="that machine's seconds per image (your figure: it is not measured here)")
    cost.add_argument("--reference-label", default="reference", help="its name in the receipt")
    cost.add_argument("--json", action="store_true")

    doctor = sub.add_parser("doctor", parents=[common], help="print versions, the chosen device and why, cache dirs")
    doctor.add_argument("--json", action="store_true")

    cache = sub.add_parser("cache", help="warm-start bundles: export, import or show one (backend.cli)")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, parser_class=_Parser)
    for name, what in (("export", "write a bundle that warms --modes x --sizes"),
                       ("import", "put a bundle's compile entries in this install's caches"),
                       ("show", "print a bundle's manifest and whether it applies here")):
        verb = cache_sub.add_parser(name, parents=[common], help=what)
        verb.add_argument("bundle", help="the bundle file")
        if name == "export":
            verb.add_argument("--modes", default=None, help="comma-separated modes (default: --mode)")
            verb.add_argument("--sizes", default=None, help="comma-separated WIDTHxHEIGHT (default: --prewarm)")
        if name == "show":
            verb.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings({k: v for k, v in vars(args).items() if k in OPTIONS})
    except ValueError as exc:
        parser.error(str(exc))
    # Before anything imports torch (and TorchNeuron): the cache variables and this process's NeuronCores.
    device_env.prepare_environment(settings.cache_dir, settings.compile_timeout)
    from backend import cli
    from backend.hardware.core_plan import claim_app_cores

    claim_app_cores(settings.neuron_cores, settings.neuron_instance_cores)
    command = args.command or "serve"
    if command == "generate":
        return cli.generate(settings, args)
    if command == "doctor":
        return cli.doctor(settings, as_json=args.json)
    if command == "cost":
        from backend.serving.cost import Reference

        if args.runs < 1 or args.runs > 100:
            parser.error("--runs: between 1 and 100")
        reference = None
        if (args.reference_price is None) != (args.reference_seconds is None):
            parser.error("--reference-price and --reference-seconds go together")
        if args.reference_price is not None:
            try:
                reference = Reference(args.reference_label, args.reference_price, args.reference_seconds)
            except ValueError as exc:
                parser.error(str(exc))
        return cli.cost(settings, args.sizes, args.runs, reference, args.json)
    if command == "cache":
        if args.cache_command == "export":
            return cli.cache_export(settings, args.bundle, args.modes, args.sizes)
        if args.cache_command == "import":
            return cli.cache_import(settings, args.bundle)
        return cli.cache_show(settings, args.bundle, as_json=args.json)
    from server import serve

    demo_modes = None
    if command == "demo":
        demo_modes = [m.strip() for m in (args.demo_modes or settings.mode).split(",") if m.strip()]
        if bad := [m for m in demo_modes if m not in IN_PROCESS_MODES]:
            parser.error(f"--demo-modes: {', '.join(bad)} is not one of eager, compiled, regional "
                         "(the group is --tp)")
    code = serve(settings, demo_modes, command == "demo" and args.tp)
    # Everything is closed and written by now; the interpreter's teardown of the model stack would take
    # seconds more for nothing, so a stopped server leaves at once (SIGTERM exits within a few seconds).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
