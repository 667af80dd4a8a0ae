"""Hardening figures: bad input, load, faults, orphans. ``python -m bench.hardening [--quick]``.

Prints: inputs tried / answered clearly (through the public API and the CLI), requests sent /
answered under concurrent load, RSS growth over sequential requests, faults injected / recovered,
and orphan worker processes found. The tests (tests/test_hardening.py) run the same functions and
hold each figure to its promise; this script is how a person reads them.

The probes live by topic: ``bench.bad_input`` (API, CLI and PNG cases), ``bench.traffic`` (concurrent
clients, RSS over sequential requests), ``bench.faults`` (injected faults, SIGTERM, orphans),
``bench.foreign_files`` (clearing caches), ``bench.room`` (a replica killed under load) and
``bench.bounds`` (the room's bounds: a sessionless Stop, uploads, logins, the work bound, a greedy
viewer, import atomicity, header bombs); this module runs them all and prints their figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.bad_input import run_api_cases, run_cli_cases, run_png_cases
from bench.bounds import bundle_bounds, room_bounds
from bench.faults import run_faults, run_sigterm
from bench.foreign_files import run_foreign_files
from bench.room import replica_killed
from bench.traffic import run_load, run_memory

KEEP_OUTPUTS = 5  # the app under test keeps this many PNGs (--keep-outputs)
MAX_WORK = 100.0  # megapixel-steps (--max-work): 1024x1024 at 50 steps is 52, 2048x2048 at 50 is 210


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from gradio_client import Client

    from tools.app_process import running_app

    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        uploads = tmp / "gradio"  # the app's upload folder, so that the probe can weigh what it holds
        os.environ["GRADIO_TEMP_DIR"] = str(uploads)
        with running_app(tmp, "--compile-backend", "aot_eager", "--keep-outputs", str(KEEP_OUTPUTS),
                         "--max-work", str(MAX_WORK)) as url:
            from tools.app_process import operator_token
            from tools.room_client import refused_operator_events

            client = Client(url, verbose=False)
            report["api"] = run_api_cases(client, lambda: client.predict(api_name="/status"))
            report["load"] = run_load(url)
            report["operator_events"] = [{"event": e, "refused": r, "caller": who, "answer": m} for who, cookie in
                                         (("anonymous", None), ("forged key", "forged")) for e, r, m in
                                         refused_operator_events(url, cookie)]
            report["png"] = run_png_cases(url, tmp)
            report["outputs_kept"] = len(list((tmp / "outputs").glob("*.png")))
            report["bounds"] = room_bounds(url, client, operator_token(tmp), uploads, MAX_WORK)
        os.environ.pop("GRADIO_TEMP_DIR")
        report["bundles"] = bundle_bounds(tmp / "bundles")
        report["foreign_files"] = run_foreign_files(tmp / "caches")
        report["cli"] = run_cli_cases(tmp / "cli-out")
        report["memory"] = run_memory()
        report["faults"] = run_faults()
        report["sigterm"] = [run_sigterm(tmp / mode, mode) for mode in ("eager", "compiled", "regional", "tp")]
        report["replica_killed"] = replica_killed(tmp)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    tried = report["api"] + report["cli"]
    faults = report["faults"]
    print(f"inputs tried / answered clearly: {len(tried)} / {sum(r['clear'] for r in tried)} "
          f"(API {len(report['api'])}, CLI {len(report['cli'])})")
    for r in tried:
        if not r["clear"]:
            print(f"  NOT CLEAR: {r['case']}: {r['message']}")
    load = report["load"]
    print(f"requests sent / answered under load: {load['sent']} / {load['answered']} "
          f"(lost or duplicated: {load['lost_or_duplicated']}, each client in order: {load['each_client_in_order']}, "
          f"queue position seen: {load['queue_position_seen']})")
    mem = report["memory"]
    print(f"RSS growth over {mem['requests']} sequential requests: {mem['growth_MiB']:.1f} MiB "
          f"({mem['rss_before_MiB']:.0f} -> {mem['rss_after_MiB']:.0f} MiB)")
    print(f"faults injected / recovered: {len(faults) - 1} / {sum(r['recovered'] for r in faults[:-1])}")
    for r in faults:
        print(f"  {r['fault']}: {'recovered' if r['recovered'] else 'NOT RECOVERED'}"
              f"{'; ERROR UNCLEAR' if r['clear_error'] is False else ''}; {r['error'][:120]}")
    for sig in report["sigterm"]:
        print(f"SIGTERM mid-generation ({sig['mode']}): exit {sig['exit_code']} after {sig['seconds_to_exit']} s, "
              f"half-written PNGs {sig['half_written_pngs']}, orphans {sig['orphans']}, "
              f"left in its temp folder {len(sig['left_in_tmp'])}")
    rk = report["replica_killed"]
    print(f"a replica killed under {rk['sent']} requests from 5 clients (2 replicas): answered {rk['answered']} / "
          f"{rk['sent']} (served {rk['served']}, clear errors {rk['clear_errors']} of {rk['errors']}), lost "
          f"{rk['lost']}, duplicated {rk['duplicated']}, replica back: {rk['restarted']}")
    orphans = sum(r["orphans"] for r in faults) + sum(s["orphans"] for s in report["sigterm"])
    print(f"orphan processes found: {orphans}")
    events = report["operator_events"]
    print(f"operator events posted by fn_index as a viewer / refused: {len(events)} / "
          f"{sum(e['refused'] for e in events)} (anonymous and forged key)")
    for e in events:
        if not e["refused"]:
            print(f"  NOT REFUSED as a viewer's: {e['event']} ({e['caller']}): {e['answer']}")
    for row in report["png"]:
        print(f"hostile PNG '{row['case']}' ({row['bytes']} bytes): answered {row['answered']}, "
              f"{row['ratio_to_normal']}x a normal PNG's time, slowest /status meanwhile {row['slowest_status_s']} s")
    ff = report["foreign_files"]
    print(f"foreign files in cache folders kept / planted: {ff['foreign_kept']} / {ff['foreign_planted']} "
          f"(compile entries removed {ff['entries_removed']} / {ff['entries_written']})")
    print(f"output PNGs kept after {len(report['api']) + report['load']['sent']} requests: "
          f"{report['outputs_kept']} (limit --keep-outputs {KEEP_OUTPUTS})")
    print_bounds(report["bounds"], report["bundles"])
    return 0


def print_bounds(room: dict[str, Any], bundles: dict[str, Any]) -> None:
    stop = room["sessionless_stop"]
    print(f"Stop posted without a session during an API client's run: {stop['stop_status']} "
          f"\"{stop['stop_says']}\"; the API run {stop['api_run']}")
    work = room["work_bound"]
    print(f"a request of {work['asked']:.0f} megapixel-steps with --max-work {work['bound']:g}: refused in "
          f"{work['seconds']} s: \"{work['says']}\"")
    greedy = room["greedy_viewer"]
    print(f"one viewer asks {greedy['asked']} runs at once: {greedy['ran']} ran, {greedy['refused']} refused "
          f"(\"{greedy['refused_says']}\"); another viewer's one run finished after "
          f"{greedy['others_run_finished_after_greedy_runs']} of the first viewer's")
    up = room["uploads"]
    refusal = up["refusal"] or {}
    print(f"uploads of 19.9 MB from one address: {up['accepted']} taken ({up['accepted_MB']} MB, bound "
          f"{up['bound_MB']} MB), the next answered {refusal.get('status')} \"{refusal.get('says')}\" with "
          f"{refusal.get('kept_bytes')} bytes kept; from another site: {up['foreign_origin']['status']} "
          f"\"{up['foreign_origin']['says']}\"")
    logins = room["logins"]
    print(f"{len(logins['wrong'])} wrong operator logins in {logins['seconds']} s answered {logins['wrong']}; "
          f"the right token from that address then: {logins['right_token_then']}")
    imports = bundles["import"]
    for case in ("last_file_in_the_way", "disk_full"):
        row = imports[case]
        if "not_measured" in row:
            print(f"bundle import, {case}: not measured ({row['not_measured']})")
            continue
        print(f"bundle import ({imports['bundle_files']} files, {imports['bundle_MB']} MB), {case}: exit "
              f"{row['exit']}, cache tree's hash unchanged: {row['tree_unchanged']}; \"…{row['says'][-110:]}\"")
    for row in bundles["header_bombs"]:
        print(f"header bomb '{row['bomb']}' ({row['file_bytes']} bytes announcing {row['announces']}): peak memory "
              f"{row['extra_peak_MiB']:+.1f} MiB over a junk file's; \"{row['says'][-100:]}\"")


if __name__ == "__main__":
    sys.exit(main())
