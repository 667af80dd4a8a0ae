"""Phase 4 of a rank, ``serve``: the job loop. Rank 0 takes each job from its socket server, every
rank runs it (the job broadcast over the control group), rank 0 streams progress and answers; a
failure that may have left a collective half done ends the rank (``_ends_rank``)."""

from __future__ import annotations

import hashlib
import os
import time

from backend.errors import GenerationCancelled, GenerationFailed, GroupDead, InvalidRequest, ShapeLocked
from backend.launch import protocol as proto
from backend.request.records import GenerationRequest
from backend.request.references import expected_rgb_bytes, from_job
from backend.workers.collectives import Rank, _bcast_json, _collective_broken, every_ranks_compiles
from backend.workers.rank0_server import Rank0Server


def _read_references(job: dict, server: Rank0Server) -> list[bytes] | None:
    """Rank 0: each reference's pixels from the app's buffer where the job says, bounded and checked
    whole (SHA-256). None when the description is wrong: the job then fails on every rank alike."""
    described, layout = job.get("references") or [], job.pop("reference_pixels", None) or []
    try:
        if len(described) != len(layout):
            return None
        rgbs = []
        for item, part in zip(described, layout):
            size, offset = expected_rgb_bytes(item), int(part["offset"])
            if int(part["bytes"]) != size or offset < 0 or offset + size > server.pixels.size:
                return None
            data = bytes(server.pixels.view[offset:offset + size])
            if hashlib.sha256(data).hexdigest() != part.get("sha256"):
                return None
            rgbs.append(data)
        return rgbs
    except (TypeError, ValueError, KeyError, AttributeError, InvalidRequest):  # a wrong description fails the job
        return None


def _bcast_references(job: dict, rgbs: list[bytes] | None, me: Rank) -> list[bytes]:
    """Rank 0's reference pixels to every rank: a one-byte verdict (rank 0 read them whole, or not),
    then one broadcast per reference of exactly its bytes."""
    import torch
    import torch.distributed as dist

    described = job.get("references") or []
    if not described:
        return []
    ok = rgbs is not None
    if me.world > 1:
        verdict = torch.tensor([1 if (me.rank != 0 or ok) else 0], dtype=torch.uint8)
        dist.broadcast(verdict, src=0, group=me.control)
        ok = bool(verdict.item())
    if not ok:
        raise InvalidRequest("images", "the references did not arrive whole (size or SHA-256)")
    if me.world == 1:
        return rgbs
    out = []
    for index, item in enumerate(described):
        buf = (torch.frombuffer(bytearray(rgbs[index]), dtype=torch.uint8) if me.rank == 0
               else torch.empty(expected_rgb_bytes(item), dtype=torch.uint8))
        dist.broadcast(buf, src=0, group=me.control)
        out.append(rgbs[index] if me.rank == 0 else buf.numpy().tobytes())
    return out


def _ends_rank(exc: BaseException, me: Rank) -> bool:
    """A broken collective anywhere; on Neuron any failure but a cancel or a warm-only refusal (alike
    on every rank), since a Neuron collective error does not say it is one."""
    suspect = me.device.kind == "neuron" and not isinstance(exc, (GenerationCancelled, ShapeLocked))
    return _collective_broken(exc) or suspect


def serve(server: Rank0Server | None, run, me: Rank) -> None:
    while True:
        job = conn = finished = stamps = rgbs = None
        if server:
            # The app validated the job and sent it over the authenticated connection: trusted as it is.
            job, conn, finished = server.jobs.get()
            stamps = job.pop("stamps", None)  # a benchmark's trace, when it asked for one
            _stamp(stamps, "taken")
            server.cancel.clear()
        if server and job.get("type") == "generate":  # from the app's buffer, before a result overwrites it
            rgbs = _read_references(job, server)
        job = _bcast_json(job, me)
        _stamp(stamps, "broadcast")
        if job["type"] == "shutdown":
            if server:
                _send(conn, {"type": "ok"})
                finished.set()
            return
        try:
            rgbs = _bcast_references(job, rgbs, me)
            fields = {k: job[k] for k in GenerationRequest.__dataclass_fields__ if k in job}
            request = GenerationRequest(**{**fields, "references": from_job(job.get("references") or [], rgbs)})
            if server:
                server.busy = {"shape": f"{request.width}x{request.height}", "phase": "starting", "step": 0,
                               "steps": request.steps}

            def progress(event, conn=conn):
                if server:
                    server.busy.update(phase=event.phase, step=event.step)
                    if not _send(conn, {"type": "progress", **event.to_json()}):
                        server.cancel.set()  # nobody is waiting for this image any more

            out = failure = None
            try:
                out = run(request, progress, forbid_compile=bool(job.get("forbid_compile")))
            except Exception as exc:  # noqa: BLE001 - a rank that stays joins the counters' gather below
                if _ends_rank(exc, me):
                    raise  # it leaves at once (below); its peers' gather fails on its exit
                failure = exc
            _stamp(stamps, "run")
            out = every_ranks_compiles(out, me)
            if failure is not None:
                raise failure
            if server:
                _stamp(stamps, "ran")
                images = [image if image.mode == "RGB" else image.convert("RGB") for image in out.images]
                # into the app's buffer, one after the other, before the result says they are there
                server.pixels.write(b"".join(image.tobytes() for image in images))
                _stamp(stamps, "sending")
                _send(conn, {"type": "result", "width": images[0].width, "height": images[0].height, **out.to_json(),
                             "ran": request.to_json(), "world_size": me.world,
                             **({"stamps": stamps} if stamps is not None else {})})
                server.done += 1
        except Exception as exc:  # noqa: BLE001 - a failed request is not a dead group: answer and go on
            what = f"{type(exc).__name__}: {exc}"
            print(f"request failed: {what}", flush=True)
            broken = _collective_broken(exc)
            if _ends_rank(exc, me):
                if server:
                    if broken:
                        answer = GroupDead(f"a collective failed: {str(exc).splitlines()[0][:300]}")
                    else:
                        answer = exc if isinstance(exc, GenerationFailed) else GenerationFailed(what)
                    # On Neuron the app restarts the group at once; elsewhere a broken collective
                    # leaves it dead for the operator, as a rank that died does.
                    _send(conn, proto.error_message(answer.evolve(group_ending=me.device.kind == "neuron")))
                    finished.set()
                print("ending this rank: the group must be restarted", flush=True)
                record_exit(exc if broken else proto.RankEnding(what))
                os._exit(1 if broken else proto.RESTART_EXIT)
            if server:
                server.error = what
                _send(conn, proto.error_message(exc))
        finally:
            if server:
                server.busy = None
                finished.set()


def _send(conn: proto.Connection, message: dict) -> bool:
    """The group must not die of a client that went away."""
    try:
        proto.send(conn, message)
        return True
    except (OSError, proto.ProtocolError) as exc:
        print(f"client went away: {exc}", flush=True)
        return False


def record_exit(exc: BaseException) -> None:
    """To this rank's torchelastic error file (``TORCHELASTIC_ERROR_FILE``), by torch's own writer."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    ErrorHandler().record_exception(exc)


def _stamp(stamps: dict[str, float] | None, name: str) -> None:
    """A benchmark's trace (``bench.tp_transport``), on CLOCK_MONOTONIC: one clock for every process."""
    if stamps is not None:
        stamps[name] = time.monotonic()
