"""Two benchmark runs side by side: ``python -m bench.compare OLD.json NEW.json``.

For every row found in both runs (matched by id and by name, with the figures a name quotes in
parentheses left out) it prints old and new values, the ratio new / old with an interval, and a
verdict from the two runs' own intervals, never from the medians alone:

- ``regressed`` / ``improved``: the intervals do not overlap and the new one lies on the worse /
  better side of the old (worse is higher for a row whose goal is ``<=`` or ``=``, lower for
  ``>=``); a row without a goal is ``changed`` in that case;
- ``same``: the intervals overlap, so the runs cannot tell the rows apart.

The ratio's interval is the widest the two intervals allow (new low / old high .. new high /
old low). Rows in only one run are listed as ``new`` or ``gone``. Exit status 1 when a row
regressed, so a script can stop on it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bench.table import fmt


def _key(row: dict) -> tuple[str, str]:
    name = re.sub(r"\s*\([^)]*\)", "", row["name"])
    return row["id"], " ".join(name.split())


def _interval(row: dict) -> tuple[float, float]:
    ci = row.get("ci")
    if ci and None not in ci:
        return float(ci[0]), float(ci[1])
    return float(row["value"]), float(row["value"])


def _lower_is_better(row: dict) -> bool | None:
    goal = (row.get("goal") or "").strip()
    if goal.startswith(("<=", "=", "<")):
        return True
    if goal.startswith((">=", ">")):
        return False
    return None


def compare_rows(old: dict, new: dict) -> list[dict]:
    """One entry per row: key, old, new (values), ratio, ratio_ci, verdict."""
    olds = {_key(r): r for r in old["rows"]}
    news = {_key(r): r for r in new["rows"]}
    out = []
    for key in list(olds) + [k for k in news if k not in olds]:
        a, b = olds.get(key), news.get(key)
        entry = {"id": key[0], "name": key[1], "old": a and a["value"], "new": b and b["value"],
                 "unit": (b or a).get("unit"), "ratio": None, "ratio_ci": None}
        if a is None or b is None:
            entry["verdict"] = "new" if a is None else "gone"
            out.append(entry)
            continue
        (a_lo, a_hi), (b_lo, b_hi) = _interval(a), _interval(b)
        if a["value"]:
            entry["ratio"] = b["value"] / a["value"]
            if a_lo > 0 and a_hi > 0:
                entry["ratio_ci"] = [b_lo / a_hi, b_hi / a_lo]
        apart = b_lo > a_hi or b_hi < a_lo
        lower = _lower_is_better(b)
        if not apart:
            entry["verdict"] = "same"
        elif lower is None:
            entry["verdict"] = "changed"
        else:
            worse = b_lo > a_hi if lower else b_hi < a_lo
            entry["verdict"] = "regressed" if worse else "improved"
        out.append(entry)
    return out


def format_table(entries: list[dict], old_name: str, new_name: str) -> str:
    lines = [f"| row | {old_name} | {new_name} | new / old | verdict |", "| --- | --- | --- | --- | --- |"]
    for e in entries:
        ratio = "—" if e["ratio"] is None else f"{e['ratio']:.3f}"
        if e["ratio_ci"]:
            ratio += f" [{e['ratio_ci'][0]:.3f}–{e['ratio_ci'][1]:.3f}]"
        unit = f" {e['unit']}" if e["unit"] else ""
        lines.append(f"| {e['id']} {e['name']} | {fmt(e['old'])}{unit if e['old'] is not None else ''} | "
                     f"{fmt(e['new'])}{unit if e['new'] is not None else ''} | {ratio} | {e['verdict']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--json", action="store_true", help="print the entries as JSON")
    args = parser.parse_args(argv)
    try:
        old, new = (json.loads(p.read_text()) for p in (args.old, args.new))
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    entries = compare_rows(old, new)
    print(json.dumps(entries, indent=2) if args.json else format_table(entries, args.old.stem, args.new.stem))
    return 1 if any(e["verdict"] == "regressed" for e in entries) else 0


if __name__ == "__main__":
    sys.exit(main())
