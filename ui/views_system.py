"""The System tab's views: the device and caches table, the per-shape compile table, warm-up, the
replica pool and an uploaded warm-start bundle (the tensor-parallel group's are ``ui.views_tp``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pandas as pd

from backend.hardware.core_plan import plan_text as core_plan_text
from ui.i18n import DEFAULT, text
from ui.views_common import column_names, format_bytes, markdown_table, shorten, word
from ui.views_tp import tp_state_name

# The device layer's reason for its choice is English; its fragments, in the page's language.
_REASON_WORDS = {"tr": (("TorchNeuron not installed", "TorchNeuron kurulu değil"),
                        ("no CUDA device", "CUDA aygıtı yok"),
                        ("no NeuronCore visible", "görünür NeuronCore yok"),
                        ("TorchNeuron installed and", "TorchNeuron kurulu ve"),
                        ("NeuronCore(s) visible", "NeuronCore görünüyor"), ("CUDA device(s)", "CUDA aygıtı"),
                        ("requested", "istendi"), ("auto:", "otomatik:"))}

if TYPE_CHECKING:
    from backend.serving.status import Status


def device_reason(reason: str, lang: str = DEFAULT) -> str:
    for english, local in _REASON_WORDS.get(lang, ()):
        reason = reason.replace(english, local)
    return reason


def system_markdown(status: Status, lang: str = DEFAULT) -> str:
    dev = status.device or {}
    cache = status.cache or {}
    mem = status.memory or {}
    engine = status.engine or {}
    serving = [engine["engine"]] if engine.get("engine") else list(status.engines or ())
    t = functools.partial(text, lang)
    rows = [
        (t("sys_device"), f"{dev.get('kind', '…')} — "
                          + (device_reason(dev["reason"], lang) if dev.get("reason") else t("resolving"))),
        (t("sys_model"), status.model.get("label") or status.model["spec"]),
        (t("sys_dtype"), status.dtype or "…"),
        (t("sys_default_mode"), status.default_mode),
        # Under --ray the app loads no pipeline of its own: the engines that serve are named.
        (t("sys_engine"), f"{', '.join(t('engine_name_' + name.replace('-', '_')) for name in serving) or '…'} · "
                          f"{word(lang, 'engine_state_', status.state)}"
                          + (t("sys_active_mode", mode=engine["active_mode"]) if engine.get("active_mode") else "")),
        (t("sys_compile_backend"), dev.get("compile_backend", "…")),
        *[(t("sys_cache"), f"`{c['dir']}` ({format_bytes(c['bytes'], lang)}, {c['variable']})" if c.get("dir")
           else f"{format_bytes(c['bytes'], lang)} ({c['variable']})")
          for c in cache.get("caches") or [{"dir": "…", "bytes": None, "variable": ""}]],  # a viewer's: no dir
        *([(t("sys_cores"), core_plan_text(status.neuron_cores))] if status.neuron_cores else []),
        (t("sys_memory"), t("sys_memory_value", rss=format_bytes(mem.get("rss_bytes"), lang),
                            device=format_bytes(mem.get("device_allocated_bytes"), lang))),
        (t("sys_lock"), t("on") if status.warm_only else t("off")),
        *([(t("sys_host_ops"), "; ".join(f"`{op}` ({', '.join(where)})" for op, where in status.fallback_ops.items()))]
          if status.fallback_ops else []),
        (t("sys_last_error"), status.last_error or t("none")),
    ]
    table = markdown_table([t("sys_head"), ""], rows)
    chip = chip_markdown(status.chip, lang)
    return f"{table}\n\n{chip}" if chip else table


def _owner(owner: str, lang: str) -> str:
    """``app``, ``tp-rank-N``, ``replica-N``, ``other`` (backend.hardware.monitor), in the page's words."""
    for prefix, key in (("tp-rank-", "chip_owner_rank"), ("replica-", "chip_owner_replica")):
        if owner.startswith(prefix):
            return text(lang, key, index=owner.removeprefix(prefix))
    return text(lang, "chip_owner_app" if owner == "app" else "chip_owner_other")


def chip_markdown(chip: dict[str, Any] | None, lang: str = DEFAULT) -> str:
    """neuron-monitor's latest reading: per NeuronCore its holder, utilisation and HBM by category;
    off Neuron, what it would show and why it cannot. Empty before the device is known."""
    if not chip:
        return ""
    t = functools.partial(text, lang)
    if chip["device"] != "neuron":
        return f"**{t('chip_title')}** · {t('chip_off', kind=chip['device'])}"
    if chip.get("why"):
        return f"**{t('chip_title')}** · {t('chip_unavailable', why=chip['why'])}"
    period = f"{chip['period']:g}"
    if chip.get("age_seconds") is None:
        return f"**{t('chip_title')}** · {t('chip_waiting', period=period)}"
    head = t("chip_head", age=f"{chip['age_seconds']:g}", period=period)
    rows = [[core["core"], _owner(core["owner"], lang), f"{100 * core['utilization']:.1f} %",
             format_bytes(core["memory_bytes"], lang),
             ", ".join(f"{name} {format_bytes(size)}" for name, size in core["memory"].items() if size) or "—"]
            for core in chip["cores"]]
    columns = ["chip_col_core", "chip_col_owner", "chip_col_util", "chip_col_hbm", "chip_col_breakdown"]
    table = markdown_table(column_names(columns, lang), rows or [["—", t("chip_none"), "", "", ""]])
    return f"**{t('chip_title')}** · {head}\n\n{table}"


SHAPE_COLUMNS = ["col_mode", "col_shape", "col_state", "col_compile_s", "col_steady_s", "col_runs", "col_error"]


def shapes_frame(shapes: list[dict[str, Any]], lang: str = DEFAULT) -> pd.DataFrame:
    # A shape warmed from a bundle shows the bundle's compile seconds, labelled so, until it runs here.
    rows = [[r["mode"], r["shape"], text(lang, f"badge_{r['state']}") + (
                 f" ({text(lang, 'from_bundle')})" if r.get("bundle_compile_seconds") is not None else ""),
             (f"{r['bundle_compile_seconds']:.2f} ({text(lang, 'from_bundle')})"
              if r.get("bundle_compile_seconds") is not None else
              None if r["compile_seconds"] is None else round(r["compile_seconds"], 2)),
             None if r["steady_seconds"] is None else text(lang, "steady_of", seconds=f"{r['steady_seconds']:.3f}",
                                                           count=r.get("steady_runs", 1)),
             r["runs"], r["error"] or ""] for r in shapes]
    columns = list(SHAPE_COLUMNS)
    if any("attention" in r for r in shapes):  # on Neuron: the transformer's path (backend.hardware.kernels)
        columns.insert(3, "col_attention")
        for row, r in zip(rows, shapes):
            a = r.get("attention")
            row.insert(3, "" if a is None else text(lang, "attention_fast") if a["fast"]
                       else text(lang, "attention_slow", size=format_bytes(a["score_bytes"])))
    return pd.DataFrame(rows, columns=column_names(columns, lang))


def warmup_markdown(status: Status, lang: str = DEFAULT) -> str:
    w = status.warmup
    if not w:
        return ""
    if w.get("running"):
        return text(lang, "warmup_running", mode=w["mode"], done=w["done"], total=w["total"],
                    current=w.get("current") or "…")
    if w.get("error"):
        return text(lang, "warmup_stopped", error=w["error"])
    return text(lang, "warmup_done", total=w["total"], mode=w["mode"])


def bundle_markdown(manifest: dict[str, Any], mismatch: str | None, lang: str = DEFAULT) -> str:
    """An uploaded bundle before it is imported: what it warms, what made it, whether it applies here."""
    rows = [(key, manifest.get(key)) for key in ("created", "model", "device", "neuron_target", "lnc",
                                                 "neuron_opt_level", "neuron_cc_flags", "dtype", "compile_backend",
                                                 "torch", "torch_neuronx", "tp_degree")]
    entries = ", ".join(f"{e.get('mode')} {e.get('shape')}" for e in manifest.get("entries") or []) or "—"
    size = sum(f.get("bytes", 0) for f in manifest.get("files") or [])
    verdict = text(lang, "bundle_applies") if mismatch is None else text(lang, "bundle_mismatch", why=mismatch)
    return "\n".join([f"**{text(lang, 'bundle_entries')}:** {entries} · {len(manifest.get('files') or [])} "
                      f"files, {size / 1e6:.1f} MB", "", markdown_table(["", ""], rows), "", verdict, "",
                      text(lang, "bundle_trust")])


def replicas_markdown(status: Status, lang: str = DEFAULT, operator: bool = True) -> str:
    pool = status.replicas or {}
    if not pool.get("size"):
        return text(lang, "replicas_none" if operator else "replicas_none_viewer")
    head = text(lang, "replicas_head", ready=pool["ready"], size=pool["size"], busy=pool["busy"],
                restarts=pool.get("restarts", 0))
    rows = []
    for r in pool["replicas"]:
        state = tp_state_name(r["state"], lang) + (f" · {text(lang, 'replica_busy')}" if r.get("busy") else "")
        if r.get("error") and r["state"] == "dead":
            state += f" ({shorten(r['error'], 80)})"
        rows.append([r["index"], state, "—" if r.get("core") is None else r["core"], r.get("pid") or "—",
                     r.get("served", 0), ", ".join(r.get("warm") or []) or "—"])
    columns = [text(lang, "col_replica"), text(lang, "col_state"), text(lang, "col_core"), "pid",
               text(lang, "col_served"), text(lang, "col_warm")]
    error = f"\n\n{pool['error']}" if pool.get("error") else ""
    return head + "\n\n" + markdown_table(columns, rows) + error


def _ray_state(lang: str, prefix: str, name: str | None) -> str:
    """A Serve state (``RUNNING``, ``DEPLOY_FAILED``…) in the page's words; an unknown one as Ray says it."""
    return word(lang, prefix, (name or "").lower()) if name else "…"


def ray_markdown(status: Status, lang: str = DEFAULT) -> str:
    """The Ray Serve cluster (``status.ray``, ``backend.engines.ray_serve``): a line of totals and the
    queue, its nodes and the studio's replicas. Empty when the app has no Ray engine."""
    ray = status.ray
    if not ray:
        return ""
    t = functools.partial(text, lang)
    queued = sum(job.get("engine") == "ray" for job in status.waiting)
    running = sum(job.get("engine") == "ray" for job in status.running)
    replicas = ray.get("replicas") or []
    head = t("ray_head", state=_ray_state(lang, "ray_engine_", ray.get("state")), device=ray.get("device") or "…",
             deployment=_ray_state(lang, "ray_deployment_", ray.get("deployment")), ready=ray.get("ready", 0),
             target=ray.get("target", 0), restarts=ray.get("restarts", 0), retried=ray.get("retried", 0),
             waiting=queued, running=running)
    if ray.get("autoscaling"):
        head += t("ray_autoscaling", low=ray["autoscaling"][0], high=ray["autoscaling"][1])
    nodes = ray.get("node_list") or []
    addressed = any("ip" in n for n in nodes)  # a viewer's status has no addresses (Status.for_viewer)
    node_rows = []
    for n in nodes:
        name = f"`{n['id'][:8]}`" + (f" ({t('ray_node_head')})" if n.get("head") else "") \
            + ("" if n.get("alive", True) else f" — {t('ray_node_lost')}")
        node_rows.append([name, *([n.get("ip") or "—"] if addressed else []), f"{n.get('neuron_cores', 0):g}",
                          f"{n.get('cpus', 0):g}", f"{n.get('gpus', 0):g}",
                          sum(r.get("node") == n["id"] for r in replicas) or "—"])
    node_head = [t("ray_col_node"), *([t("ray_col_address")] if addressed else []), "NeuronCores", "CPU", "GPU",
                 t("ray_col_replicas")]
    replica_rows = [[f"`{r['id']}`", f"`{r['node'][:8]}`" if r.get("node") else "—",  # still being placed: none
                     r.get("cores") or "—", _ray_state(lang, "ray_replica_", r.get("state")),
                     len(r.get("warm") or []), r.get("served", 0)] for r in replicas]
    replica_head = [t("ray_col_replica"), t("ray_col_node"), t("ray_col_cores"), t("ray_col_state"), t("col_warm"),
                    t("col_served")]
    lines = [head, "", markdown_table(node_head, node_rows or [["—"] + [""] * (len(node_head) - 1)]), "",
             markdown_table(replica_head, replica_rows or [["—", "", "", t("ray_no_replicas"), "", ""]])]
    error = ray.get("error") or (ray.get("message") if ray.get("deployment") != "HEALTHY" else None)
    return "\n".join(lines) + (f"\n\n{t('ray_error', error=error)}" if error else "")
