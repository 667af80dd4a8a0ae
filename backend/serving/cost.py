"""The cost receipt: what an image costs here, from what this machine measured.

For each warm (mode, signature) with steady runs: its seconds as on a quiet machine (the lower quartile of
its steady runs, each on a CPU times the share of the CPU it got; with the median load they ran under),
the batch, and how many runs the mode's engines take at once give images per hour; the price per hour
(``--price-per-hour``, else ``ON_DEMAND`` for the instance type neuron-ls reported) gives the price of
1,000 images. A reference the user enters sits beside it. Nothing is guessed: no price, no price column.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from backend.shapes import parse_signature

# USD per hour, on-demand, Linux, us-east-1, from the AWS Price List (AmazonEC2 offer file
# 20260924211011, as published in a public price table; docs/api.md). Trn2 types are not listed there.
PRICES_AS_OF = "2026-09-24"
ON_DEMAND = {
    "trn1.2xlarge": 1.34375, "trn1.32xlarge": 21.50, "trn1n.32xlarge": 24.78,
    "inf2.xlarge": 0.7582, "inf2.8xlarge": 1.96786, "inf2.24xlarge": 6.49063, "inf2.48xlarge": 12.98127,
}


@dataclasses.dataclass(frozen=True)
class Reference:
    """Another machine's figures, entered by the user."""

    label: str
    price_per_hour: float
    seconds_per_image: float

    def __post_init__(self):
        for name in ("price_per_hour", "seconds_per_image"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value < 1e9:
                raise ValueError(f"reference {name.replace('_', ' ')}: must be a positive number, got {value!r}")

    @property
    def images_per_hour(self) -> float:
        return 3600.0 / self.seconds_per_image

    @property
    def per_thousand(self) -> float:
        return self.price_per_hour / self.images_per_hour * 1000


def hourly_price(price_per_hour: float, instance_type: str | None) -> tuple[float | None, str]:
    """(USD per hour or None, where it came from)."""
    if price_per_hour:
        return price_per_hour, "--price-per-hour"
    if instance_type and instance_type in ON_DEMAND:
        return ON_DEMAND[instance_type], f"on-demand list price of {instance_type}, us-east-1, as of {PRICES_AS_OF}"
    if instance_type:
        return None, f"no listed price for {instance_type}: give --price-per-hour"
    return None, "no instance type known here: give --price-per-hour"


def receipt(status: dict[str, Any], capacity: dict[str, int], price_per_hour: float = 0.0,
            reference: Reference | None = None) -> dict[str, Any]:
    """The receipt (JSON-able); ``capacity`` maps a mode to the runs its engines take at once."""
    device = status.get("device") or {}
    plan = status.get("neuron_cores") or {}
    instance = plan.get("instance_type")
    price, source = hourly_price(price_per_hour, instance)
    measured_on = ", ".join(str(v) for v in (device.get("torch_device"), device.get("dtype"), instance,
                                              status.get("model") and f"model {status['model']}") if v) or "unknown"
    rows = []
    for row in status.get("shapes") or []:
        seconds = row.get("steady_quiet_seconds")
        if row["state"] != "warm" or not seconds:
            continue
        shape = parse_signature(row["shape"])
        places = max(1, capacity.get(row["mode"], 1))
        per_hour = 3600.0 / seconds * shape.count * places
        rows.append({"mode": row["mode"], "signature": row["shape"], "seconds": seconds,
                     "load": row.get("steady_load"),
                     "runs": row["steady_runs"], "images_per_run": shape.count, "parallel": places,
                     "images_per_hour": per_hour,
                     "per_thousand": price / per_hour * 1000 if price is not None else None})
    return {"measured_on": measured_on, "device": device.get("kind"), "instance_type": instance,
            "price_per_hour": price, "price_source": source, "rows": rows,
            "reference": dataclasses.asdict(reference) | {"images_per_hour": reference.images_per_hour,
                                                           "per_thousand": reference.per_thousand}
            if reference else None}


# The receipt's words (``format_receipt``); the page passes its language's (ui.i18n: ``receipt_*``).
WORDS = {
    "head": "Measured on **{measured_on}**; price {price} ({source}).",
    "unknown": "unknown",
    "price": "${price:g}/hour",
    "columns": "mode|signature|s/run, quiet|steady runs|load seen|images/hour|per 1,000 images",
    "reference_column": "{label} per 1,000",
    "at_once": "{n} at once",
    "none": "no warm shape with a steady run yet",
    "reference": "{label}: ${price:g}/hour at {seconds:g} s/image ({per_hour:,.0f} images/hour) — figures you "
                 "entered, not measured here.",
    "caveat": "Each figure is the lower quartile of this machine's warm runs that ran alone, read as on a quiet "
              "machine (on a CPU, a run's seconds times the share of the CPU it got; load seen: the median share "
              "other work took meanwhile); idle time, compiles and other requests are not in it. It says nothing "
              "of hardware this app has not run on.",
}


def format_receipt(data: dict[str, Any], words: dict[str, str] | None = None) -> str:
    """The receipt as a Markdown table with its caveat, in ``words``' language."""
    words = {**WORDS, **(words or {})}
    ref = data["reference"]
    price = data["price_per_hour"]
    head = words["columns"].split("|")
    if ref:
        head.append(words["reference_column"].format(label=ref["label"]))
    lines = [words["head"].format(measured_on=data["measured_on"], source=data["price_source"],
                                  price=words["price"].format(price=price) if price is not None else words["unknown"]),
             "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in data["rows"]:
        per_hour = f"{row['images_per_hour']:,.0f}"
        if row["parallel"] > 1:
            per_hour += " (" + words["at_once"].format(n=row["parallel"]) + ")"
        load = "—" if row["load"] is None else f"{row['load']:.0%}"
        cells = [row["mode"], row["signature"], f"{row['seconds']:.2f}", str(row["runs"]), load, per_hour,
                 f"${row['per_thousand']:,.2f}" if row["per_thousand"] is not None else "—"]
        if ref:
            cells.append(f"${ref['per_thousand']:,.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    if not data["rows"]:
        lines.append("| " + " | ".join([words["none"]] + [""] * (len(head) - 1)) + " |")
    if ref:
        lines += ["", words["reference"].format(label=ref["label"], price=ref["price_per_hour"],
                                                seconds=ref["seconds_per_image"], per_hour=ref["images_per_hour"])]
    return "\n".join(lines + ["", words["caveat"]])
