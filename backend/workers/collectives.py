"""The ranks' collectives over the gloo control group, outside the model: a job broadcast from rank 0
and reports gathered to it, each one collective of a fixed size of JSON bytes (nothing is pickled);
every rank's compile counters folded into one record; whether an error is a broken collective."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


@dataclasses.dataclass
class Rank:
    rank: int
    local_rank: int
    world: int
    core: int | None
    settings: Any  # backend.settings.Settings
    device: Any  # backend.hardware.device.Device
    mesh: Any  # DeviceMesh
    control: Any  # the gloo process group for jobs and stop votes


_JOB_LEN = 8
REFERENCE_JOB_BYTES = 512  # one reference described in a job (its hash, sizes, fit; its pixels go apart)


def job_bytes(max_prompt_chars: int, max_references: int = 0) -> int:
    """The longest job's JSON: the prompt and what was typed (``max_prompt_chars`` of at most 4 bytes
    each), each reference's description, 8 KiB for the rest. Rank 0 refuses a longer one at its door."""
    return 2 * 4 * max_prompt_chars + max_references * REFERENCE_JOB_BYTES + (8 << 10)


def encode_job(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _pack(obj: Any, size: int, what: str):
    """``obj``'s JSON in a uint8 tensor of 8 + ``size`` bytes, its length first (ValueError: too long)."""
    import torch

    data = encode_job(obj)
    if len(data) > size:
        raise ValueError(f"{what} of {len(data)} bytes is over the collective's {size}")
    buf = torch.zeros(_JOB_LEN + size, dtype=torch.uint8)
    buf[:_JOB_LEN] = torch.frombuffer(bytearray(len(data).to_bytes(_JOB_LEN, "little")), dtype=torch.uint8)
    buf[_JOB_LEN:_JOB_LEN + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return buf


def _unpack(buf) -> Any:
    raw = buf.numpy()
    length = int.from_bytes(raw[:_JOB_LEN].tobytes(), "little")
    return json.loads(raw[_JOB_LEN:_JOB_LEN + length].tobytes().decode("utf-8"))


def _bcast_json(obj: Any, me: Rank) -> Any:
    import torch
    import torch.distributed as dist

    size = job_bytes(me.settings.max_prompt_chars, me.settings.max_references)
    # On rank 0 the door refused a longer job already: never broadcast half a job.
    buf = _pack(obj, size, "a job") if me.rank == 0 else torch.zeros(_JOB_LEN + size, dtype=torch.uint8)
    dist.broadcast(buf, src=0, group=me.control)
    return obj if me.rank == 0 else _unpack(buf)


REPORT_BYTES = 256 << 10  # a rank's READY report (its shard: the names of the weights it holds)
COUNTERS_BYTES = 4 << 10  # a rank's compile counters after a job


def _gather_json(obj: Any, me: Rank, size: int = REPORT_BYTES) -> list[Any] | None:
    """Every rank's object to rank 0 (None elsewhere), ``size`` bytes a rank."""
    import torch
    import torch.distributed as dist

    mine = _pack(obj, size, "a report")
    bufs = [torch.empty_like(mine) for _ in range(me.world)] if me.rank == 0 else None
    dist.gather(mine, bufs, dst=0, group=me.control)
    return [_unpack(buf) for buf in bufs] if me.rank == 0 else None


def _counters(out) -> dict[str, Any] | None:
    """A rank's counters and peak device memory, its op names (device, then host) cut to fit ``COUNTERS_BYTES``."""
    if out is None:
        return None
    report = {"neff": out.neff_compiles, "seconds": out.compile_seconds, "peak": out.peak_bytes,
              "host": list(out.fallback_ops), "device": list(out.device_ops)}
    for key, whole in (("device", out.device_ops), ("host", out.fallback_ops)):  # cut the device's list first
        kept = list(whole)
        while len(encode_job(report)) > COUNTERS_BYTES and kept:
            kept = kept[:len(kept) // 2]
            report[key] = kept + [f"(and {len(whole) - len(kept)} more)"]
    return report


def every_ranks_compiles(out, me: Rank):
    """Every rank's compiles in one record (each compiles for itself, counted per process): NEFFs
    summed, seconds the longest rank's (side by side), each rank's peak memory, op lists the union. Every rank that
    stays calls it once per job (``out`` None where its run failed); one that leaves fails the gather."""
    if me.world == 1:
        return out
    every = _gather_json(_counters(out), me, COUNTERS_BYTES)  # rank 0's list; None on the others
    if out is None or every is None or any(part is None for part in every):
        return out
    return dataclasses.replace(out, neff_compiles=sum(p["neff"] for p in every),
                               rank_neff_compiles=[p["neff"] for p in every],
                               compile_seconds=max(p["seconds"] for p in every),
                               fallback_ops=sorted({op for p in every for op in p["host"]}),
                               device_ops=sorted({op for p in every for op in p["device"]}),
                               rank_peak_bytes=[p["peak"] for p in every],
                               peak_bytes=max((p["peak"] for p in every if p["peak"] is not None), default=None))


def _collective_broken(exc: BaseException) -> bool:
    """The error (or its cause) is a failed collective: a peer rank died or hung up."""
    import torch.distributed as dist

    seen = exc
    while seen is not None:
        text = str(seen).lower()
        if isinstance(seen, dist.DistError) or "gloo" in text or "nccl" in text or "closed by peer" in text:
            return True
        seen = seen.__cause__
    return False
