"""Mutation check: break a guard on purpose, in a throw-away copy, and see that a test notices.

    python -m tools.mutations              # every mutation in MUTATIONS, one copy each
    python -m tools.mutations --only M03,G2
    python -m tools.mutations --list

Each mutation names the tests that must catch it (issue 32: the ten mutations that once passed
the suite, and one per guard the README promises). For each, the working tree's files (tracked,
and untracked ones git does not ignore) are copied to a temporary folder, the one edit is made
there (it must match the source exactly once: a stale mutation is reported, not skipped), and
``python -m pytest -q -x -p no:cacheprovider`` runs the named tests in the copy. *killed*: the
tests failed, as they should; *survived*: they passed with the guard broken — a test that
cannot fail for the reason in its name. Exit status 1 when any survived or is stale.

Not part of CI's time budget (a few minutes): run it before changing one of these guards or
the tests that hold them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Mutation:
    id: str
    what: str  # the guard it breaks, in a line
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    more: tuple[tuple[str, str], ...] = ()  # further (old, new) edits in the same file: one guard in layers


MUTATIONS = (
    # The ten that once passed the suite (issue 32's table: rows 1, 5, 9, 10, 11 twice, 14, 15, 16, 25).
    Mutation("M01", "Compare's gallery is empty (row 1)", "ui/handlers.py",
             "            gallery.append((r.path,", "            (lambda *a: None)((r.path,",
             ("tests/ui/test_handlers.py::test_compare_shows_side_by_side_with_max_difference",)),
    Mutation("M02", "a bundle's '..' and absolute paths are not refused, in the manifest or a member (row 5)",
             "backend/caches/bundles.py",
             "                    tarfile.data_filter(member, str(staging))", "                    pass",
             ("tests/backend/test_bundles.py",),
             more=(("        raise BundleRefused(f\"member {name!r}: absolute paths",
                    "        pass  # BundleRefused(f\"member {name!r}: absolute paths"),)),
    Mutation("M03", "the real group's last-call timing is renamed (row 9)", "backend/launch/group.py",
             'self.timings["last_round_trip"] =', 'self.timings["round_trip_last"] =',
             ("tests/backend/test_tp.py::test_two_rank_image_matches_the_one_process_eager_image",)),
    Mutation("M04", "the ranks' READY load time is renamed (row 10)", "backend/workers/worker.py",
             'server.timings = {"load":', 'server.timings = {"load_s":',
             ("tests/backend/test_tp.py::test_two_rank_image_matches_the_one_process_eager_image",)),
    Mutation("M05", "a group starts again while it runs (row 11: the real start guard)", "backend/launch/group.py",
             'if self.state not in (GroupState.STOPPED, GroupState.DEAD):\n                raise BackendNotReady',
             'if False:\n                raise BackendNotReady',
             ("tests/ui/test_handlers.py", "tests/backend/test_tp_group.py")),
    Mutation("M06", "a stopped group stays 'stopping' (row 11: the real stop)", "backend/launch/group.py",
             "                if final_state == GroupState.STOPPED or self.state != GroupState.DEAD:\n"
             "                    self.state = final_state",
             "                if final_state == GroupState.STOPPED or self.state != GroupState.DEAD:\n"
             "                    self.state = GroupState.STOPPING",
             ("tests/ui/test_handlers.py",)),
    Mutation("M07", "the bench reports no child CPU time (row 14)", "bench/harness.py",
             "    child_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)",
             "    child_cpu = 0.0",
             ("tests/bench/test_bench.py::test_child_compile_reports_the_childs_cpu_time",)),
    Mutation("M08", "the SIGTERM test's request is refused, so nothing runs (row 15)", "backend/settings.py",
             "    max_steps: int = 50", "    max_steps: int = 40",
             ("tests/test_hardening.py::test_sigterm_mid_generation_exits_cleanly_with_no_orphan[compiled]",)),
    Mutation("M09", "the status reads the rank logs on every poll (row 16)", "backend/launch/group.py",
             '            "socket": self.socket_path,\n',
             '            "socket": self.socket_path, "logs": self.rank_logs(),\n',
             ("tests/ui/test_handlers.py::test_the_timer_reads_no_logs_and_the_logs_button_does",)),
    Mutation("M10", "a killed group restarts as if its ranks had ended themselves (row 25)",
             "backend/engines/tensor_parallel.py",
             "self._sign(group, said=group.ended_itself, died=True)", "self._sign(group, said=True, died=True)",
             ("tests/backend/test_tp_group.py",)),
    # One per guard the README and SECURITY.md promise.
    Mutation("G1", "a viewer may do what is the operator's", "backend/serving/roles.py",
             "        if not self.is_operator:\n            raise NotAllowed(",
             "        if False:\n            raise NotAllowed(",
             ("tests/ui/test_roles.py",)),
    Mutation("G2", "the warm-only lock lets a cold shape compile", "backend/serving/admission.py",
             "        if locked:\n            warm_shapes =", "        if False:\n            warm_shapes =",
             ("tests/backend/test_manager.py",)),
    Mutation("G3", "a bundle file whose hash is not the manifest's is imported", "backend/caches/bundles.py",
             'if digest.hexdigest() != meta.get("sha256"):', "if False:",
             ("tests/backend/test_bundles.py",)),
    Mutation("G4", "the output folder keeps every PNG", "backend/images/folder.py",
             "    for path in mine[max(0, keep):]:", "    for path in mine[len(mine):]:",
             ("tests/backend/test_pngmeta.py",)),  # retention's test (it moved there with issue 53)
    Mutation("G5", "rank 0 takes a 17th connection", "backend/workers/rank0_server.py",
             "if not self._slots.acquire(blocking=False):", "if not self._slots.acquire(blocking=False) and False:",
             ("tests/backend/test_tp_protocol.py",)),
    Mutation("G6", "rank 0 serves a peer without the key", "backend/launch/protocol.py",
             "    return _handshake(Connection(sock.detach()), key, first=True)\n",
             "    return Connection(sock.detach())\n",
             ("tests/backend/test_tp_protocol.py",)),
    Mutation("G7", "a job longer than the ranks' broadcast is queued", "backend/workers/rank0_server.py",
             "if len(encode_job(request)) > self.max_job:", "if False:",
             ("tests/backend/test_tp_protocol.py",)),
    Mutation("G8", "the app opens its runs' connection only at the first run (strangers may hold every slot)",
             "backend/launch/calls.py",
             "on_message=on_message,\n                                persistent=True)",
             "on_message=on_message)",
             ("tests/backend/test_tp.py::test_a_process_that_fills_rank0s_connection_slots_does_not_keep_requests_out",)),
    Mutation("G9", "a bundle import that fails midway keeps what it had written", "backend/caches/bundles.py",
             "        for path in placed + [temp for temp, _ in temps]:", "        for path in []:",
             ("tests/backend/test_bundles.py",)),
    Mutation("G10", "a bundle's tar headers reach the tar reader unbounded", "backend/caches/bundles.py",
             "        _check_headers(path, MAX_TOTAL_BYTES + MAX_MANIFEST_BYTES)\n", "        pass\n",
             ("tests/backend/test_bundles.py",)),
    Mutation("G11", "one caller may upload without end", "web/guard.py",
             "        if self._uploads.spent(caller) + self._arriving[caller] + more > UPLOAD_BYTES_PER_CALLER:",
             "        if False:", ("tests/ui/test_guard.py",)),
    Mutation("G13", "wrong operator logins are not slowed down", "web/guard.py",
             "return self._window.wait(caller) if self._window.spent(caller) >= LOGIN_FAILURES else None",
             "return None", ("tests/ui/test_guard.py",)),
    Mutation("G14", "a viewer's status shows the worker socket and the pids", "backend/serving/status.py",
             '        for key in ("socket", "pids", "rank_pids"):\n            tp.pop(key, None)\n', "",
             ("tests/ui/test_roles.py",)),
    Mutation("G15", "one owner may hold runs without end", "backend/serving/jobs.py",
             "            if cap is not None and len(held) >= cap:", "            if False:",
             ("tests/backend/test_jobs.py",)),
    Mutation("G16", "the operator's Log out leaves the old cookie an operator's", "backend/serving/roles.py",
             "        self.session_key = secrets.token_urlsafe(32)\n        if self.token is not None:",
             "        if self.token is not None:", ("tests/ui/test_roles.py",)),
    Mutation("G17", "a request past --max-work runs", "backend/request/validation.py",
             "    if s.max_work and work(shape, steps) > s.max_work:", "    if False:",
             ("tests/backend/test_validation.py", "tests/ui/test_handlers.py")),
    Mutation("G18", "the job board is first come first served (no round robin)", "backend/serving/jobs.py",
             "            owner = min(queues, key=lambda o: (served.get(o, 0), queues[o][0].id))",
             "            owner = min(queues, key=lambda o: queues[o][0].id)",
             ("tests/backend/test_jobs.py", "tests/ui/test_fair_queue.py")),
    Mutation("G31", "a Stop ends jobs of an owner spelled like the caller's session", "backend/serving/jobs.py",
             "(owner is not None and j.owner == owner)", "(owner is not None and j.owner.ident == owner.ident)",
             ("tests/backend/test_jobs.py", "tests/ui/test_roles.py")),
    Mutation("G32", "the job board runs one job at a time whatever the engines can take", "backend/serving/jobs.py",
             "len(running) < max(1, self._capacity(job.engine))", "len(running) < 1",
             ("tests/backend/test_jobs.py", "tests/ui/test_handlers.py")),
    Mutation("G50", "under autoscaling the board hands Serve only what runs (it never grows)",
             "backend/engines/ray_serve.py", "return running + 1 if most and running < most else running",
             "return running", ("tests/backend/test_ray_manifest.py",)),
    Mutation("G53", "a request in Serve's queue (beyond the running replicas) says nothing until a replica takes it",
             "backend/engines/ray_serve.py", "queued = self.sent > self.running()", "queued = False",
             ("tests/backend/test_ray_serve.py::test_a_request_beyond_the_running_replicas_says_it_waits_for_one_then_"
              "runs",)),
    Mutation("G54", "a group's run dir is made under a TMPDIR too long for rank 0's socket path",
             "backend/launch/protocol.py", "if fits and os.path.isdir(root)", "if os.path.isdir(root)",
             ("tests/backend/test_tp_protocol.py::test_a_run_dir_goes_where_rank_0s_socket_path_fits",)),
    Mutation("G55", "an edit the model cannot draw (a shape's kind) runs as the reader's stand-in caption",
             "backend/serving/manager.py",
             '            if reading is not None and getattr(reading, "refusal", None):',
             "            if False:",
             ("tests/backend/test_scene_edits.py::test_an_edit_the_model_cannot_draw_is_refused_by_the_service_before_"
              "it_runs",)),
    Mutation("G56", "a group whose launcher cannot start keeps its empty run dir until a close",
             "backend/launch/group.py", "                self._cleanup_dir()\n                self.dir = None\n",
             "                pass\n",
             ("tests/backend/test_tp_group.py::test_a_start_whose_launcher_cannot_start_leaves_no_run_dir",)),
    Mutation("G57", "the pipeline is called at its default 512 tokens where the card names the model's length",
             "backend/engines/in_process.py", "max_sequence_length=self.prompt_tokens,", "",
             ("tests/backend/test_prompt_reading.py::test_a_card_that_names_its_prompt_length_is_served_and_checked_"
              "at_that_length",)),
    Mutation("G58", "a prompt longer than the card's length is cut off in silence, not refused",
             "backend/serving/manager.py",
             "            self.settings = dataclasses.replace(settings, max_prompt_tokens=tokens)\n",
             "            pass\n",
             ("tests/backend/test_prompt_reading.py::test_a_card_that_names_its_prompt_length_is_served_and_checked_"
              "at_that_length",)),
    Mutation("G59", "an edit round at the served prompt length trains at random cuts instead",
             "embedded/edit_training.py", "                cut = cfg.prompt_tokens\n",
             "                cut = rng.randint(int(lengths[rows].max()), SHORT_PROMPT_TOKENS)\n",
             ("tests/backend/test_scene_model.py::test_an_edit_round_at_a_served_prompt_length_reads_every_prompt_at_"
              "that_length",)),
    Mutation("G51", "under --ray the shapes' memory rows are planned for the app's device, not the replicas'",
             "backend/serving/status.py", 'devices[row["mode"]] = s.device_for(row["mode"])',
             'devices[row["mode"]] = s.device', ("tests/backend/test_ray_serve.py",)),
    Mutation("G52", "a group whose rank ended itself is said frozen when the heartbeats' stall is seen first",
             "backend/launch/group.py", "                if rank_failures(self.dir):\n",
             "                if False:\n",
             ("tests/backend/test_tp_group.py::test_a_ready_group_whose_heartbeat_stands_still_is_dead_within_the_stall_"
              "timeout",)),
    Mutation("G19", "clearing takes inductor's fxgraph/ folder whole, a user's files in it too",
             "backend/hardware/cache_layout.py",
             '_INDUCTOR_WHOLE_DIRS = ("triton", "cache", "precompiled_headers")',
             '_INDUCTOR_WHOLE_DIRS = ("triton", "cache", "precompiled_headers", "fxgraph")',
             ("tests/backend/test_cache_layout.py",)),
    Mutation("G12", "an upload the app has read is kept", "ui/temp_dir.py",
             "        os.unlink(target)\n", "        pass\n", ("tests/ui/test_guard.py",)),
    Mutation("G20", "a reference's pixel count is not checked before it is decoded", "backend/request/references.py",
             "    if width * height > MAX_SOURCE_PIXELS:\n", "    if False:\n",
             ("tests/backend/test_editing.py",)),
    Mutation("G21", "a reference's bytes are read whole, unbounded", "backend/request/references.py",
             "    if len(data) > limit:\n", "    if False:\n", ("tests/backend/test_editing.py",)),
    Mutation("G22", "a page event's reference path is read wherever it points", "ui/handlers_base.py",
             "            if not (is_upload(path) or is_app_output(path, self.door.manager.settings.output_dir)):\n",
             "            if False:\n", ("tests/ui/test_handlers.py",)),
    Mutation("G23", "a reference does not change the signature (every edit shares the plain size's graph)",
             "backend/request/records.py",
             "        return Shape(self.height, self.width).with_inputs(self.count, "
             "(r.size for r in self.references))\n",
             "        return Shape(self.height, self.width)\n", ("tests/backend/test_editing.py",)),
    Mutation("G24", "any API key opens the Images API", "web/api.py",
             "        name = self.keys.name_of(token)\n", "        name = \"anyone\"\n", ("tests/web/test_door.py",)),
    Mutation("G25", "the Images API answers any address without keys", "web/api.py",
             "            if not _loopback(request):\n                raise ApiError(403, \"this app's",
             "            if False:\n                raise ApiError(403, \"this app's", ("tests/web/test_door.py",)),
    Mutation("G27", "/metrics answers any scraper", "web/api.py",
             "        if not _loopback(request):\n            refusal = ApiError(403, \"/metrics",
             "        if False:\n            refusal = ApiError(403, \"/metrics", ("tests/web/test_door.py",)),
    Mutation("G33", "a multipart part is read whole, past its bound", "web/images.py",
             "        if self._bounded_size > MAX_REFERENCE_BYTES:", "        if False:", ("tests/web/test_door.py",)),
    Mutation("G34", "references are decoded before the sequence budget is checked", "backend/serving/manager.py",
             "            planned = planned_references(images, sizes, fit, most)",
             "            planned = load_references(images, sizes, fit, most)", ("tests/backend/test_editing.py",)),
    # Issue 53, the web layer.
    Mutation("G35", "an upload body is counted only by what it declares, not as it arrives", "web/guard.py",
             "                answer = self._upload_refusal(caller, size, held)\n", "                answer = None\n",
             ("tests/web/test_room.py::test_a_chunked_upload_is_cut_at_the_callers_bound_and_another_callers_upload_still_works",)),
    Mutation("G36", "uploads arriving at once are not held together", "web/guard.py",
             "        if held + sum(self._arriving.values()) + more > UPLOADS_TOTAL_BYTES:",
             "        if held + more > UPLOADS_TOTAL_BYTES:",
             ("tests/web/test_room.py::test_the_uploads_in_flight_count_towards_the_held_bound",)),
    Mutation("G37", "an Origin on another port of this host is this server's", "web/guard.py",
             "    return None if theirs is not None and theirs == ours else origin",
             "    return None if theirs is not None and theirs[1] == ours[1] else origin",
             ("tests/web/test_room.py::test_a_credentialed_request_from_another_port_of_this_host_is_refused_and_cors_grants_it_nothing",)),
    Mutation("G38", "Gradio's CORS answers any localhost origin with credentials", "server.py",
             "    app.add_middleware(CORSMiddleware, allow_origins=[])\n", "",
             ("tests/web/test_room.py::test_a_credentialed_request_from_another_port_of_this_host_is_refused_and_cors_grants_it_nothing",)),
    Mutation("G39", "wrong viewer passwords are not slowed down", "web/guard.py",
             "        wait = self.failures.wait(caller, credential)\n        if wait is not None:\n"
             "            return await",
             "        wait = None\n        if wait is not None:\n            return await",
             ("tests/web/test_room.py::test_twenty_wrong_viewer_passwords_meet_429_and_another_users_login_still_works",)),
    Mutation("G40", "X-Forwarded-For is believed from loopback (uvicorn's default)", "server.py",
             'proxy_headers=bool(forwarded_allow_ips), forwarded_allow_ips=forwarded_allow_ips or "")',
             'proxy_headers=True, forwarded_allow_ips=forwarded_allow_ips or "127.0.0.1")',
             ("tests/web/test_room.py::test_a_forged_forwarded_for_from_loopback_changes_no_bound",)),
    Mutation("G41", "a neighbour's wrong API keys lock out the right one", "web/api.py",
             "        name = self.keys.name_of(token)\n        if name is None:",
             "        name = None if self.failures.wait(address, \"API key\") else self.keys.name_of(token)\n"
             "        if name is None:", ("tests/web/test_door.py",)),
    Mutation("G42", "wrong metrics keys are not slowed down", "web/api.py",
             "            raise refusal if token is None else self._wrong(",
             "            raise refusal if True else self._wrong(",
             ("tests/web/test_room.py::test_a_short_metrics_key_is_refused_and_wrong_ones_meet_the_window",)),
    Mutation("G43", "a short --metrics-key is taken", "web/api.py",
             "if self.metrics_key is not None and _weak(self.metrics_key):",
             "if False and _weak(self.metrics_key):",
             ("tests/web/test_room.py::test_a_short_metrics_key_is_refused_and_wrong_ones_meet_the_window",)),
    Mutation("G44", "a NUL byte in a path reaches the file checks (a traceback)", "web/guard.py",
             '        elif "\\0" in path or "%00" in path:', "        elif False:",
             ("tests/web/test_room.py::test_malformed_input_is_answered_400_with_no_traceback",)),
    Mutation("G45", "a refused PNG prints a traceback", "ui/handlers_studio.py",
             'title=text(lang, "title_error"), print_exception=False)', 'title=text(lang, "title_error"))',
             ("tests/web/test_room.py::test_the_load_png_handler_refuses_malformed_paths_without_a_traceback",)),
    Mutation("G46", "an image's URL opens for any key", "web/images.py",
             "        if path is None or owner != caller.owner or not Path(path).is_file():",
             "        if path is None or not Path(path).is_file():", ("tests/web/test_door.py",)),
    Mutation("G47", "a full output disk is a generic 500", "web/images.py",
             '    (errors.StorageFull, 507, {"code": "storage_full", "kind": "server_error"}),\n', "",
             ("tests/web/test_door.py",)),
    Mutation("G48", "references past 1 MB are spooled to TMPDIR", "web/images.py",
             "    spool_max_size = MAX_REFERENCE_BYTES + 1\n", "    spool_max_size = 2**20\n",
             ("tests/web/test_door.py",)),
    Mutation("G49", "a full disk during an upload leaves Gradio's part file", "web/guard.py",
             "                os.unlink(os.path.join(self.upload_dir, name))\n", "                pass\n",
             ("tests/web/test_room.py::test_a_full_disk_while_an_upload_is_written_answers_507_and_keeps_nothing_partial",)),
    # Issue 52, the chip's memory.
    Mutation("K01", "a signature past a NeuronCore's memory is admitted", "backend/serving/admission.py",
             "        if needs.fits:\n            return None", "        if True:\n            return None",
             ("tests/backend/test_kernels.py",)),
    Mutation("K02", "the attention rule forgets the head size (the VAE's 512-wide head takes the kernel)",
             "backend/hardware/kernels.py", "        if self.head_dim > MAX_HEAD_DIM:", "        if False:",
             ("tests/backend/test_kernels.py",)),
    # Issue 53, the backend's bounds.
    Mutation("BK06", "a killed import's staging folder and temporary copies stay after the next start",
             "backend/serving/manager.py", "            sweep_leftovers(self.device)  #",
             "            (self.device)  #",
             ("tests/backend/test_bundles.py::test_an_import_killed_outright_leaves_nothing_after_the_next_start",)),
    Mutation("BK06L", "the sweep removes a live import's staging and copies", "backend/caches/bundles.py",
             "                    and not _alive(int(match[1])):\n", "                    and True:\n",
             ("tests/backend/test_bundles.py::test_the_sweep_takes_only_a_dead_imports_own_leftovers",),
             more=(("if match and match[1] == _HOST and not _alive(int(match[2])) and", "if match and"),)),
    Mutation("BK06H", "the sweep removes another host's copy in a shared cache (its pid means nothing here)",
             "backend/caches/bundles.py", "if match and match[1] == _HOST and not", "if match and not",
             ("tests/backend/test_bundles.py::test_the_sweep_takes_only_a_dead_imports_own_leftovers",)),
    Mutation("BK06C", "a file another import placed meanwhile with other contents is taken as the bundle's",
             "backend/caches/bundles.py",
             "if destination.is_symlink() or not destination.is_file() or _sha256(destination) != _sha256(temp):",
             "if False:",
             ("tests/backend/test_bundles.py::test_an_import_beside_another_of_the_same_bundle_keeps_what_the_other_placed",)),
    Mutation("BK06P", "an import reports its files placed and places none (a fresh install compiles afresh)",
             "backend/caches/bundles.py", "        theirs = _place_all(moves)\n", "        theirs = 0\n",
             ("tests/backend/test_bundles.py::test_a_fresh_install_serves_the_bundled_shapes_warm_without_a_fresh_compile",)),
    Mutation("BK12", "a ready group's heartbeat is not watched (a stopped replica waits for the next request)",
             "backend/launch/group.py", "            if rank is not None:\n                # A rank that failed",
             "            if False:\n                # A rank that failed",
             ("tests/backend/test_tp_group.py::test_a_ready_group_whose_heartbeat_stands_still_is_dead_within_the_stall_timeout",)),
    Mutation("BK12R", "a request on a replica that froze under it fails instead of going to another",
             "backend/engines/replicas.py", "                if group.froze and retries and not should_stop():\n",
             "                if False:\n",
             ("tests/backend/test_tp_group.py::test_a_request_on_a_replica_that_froze_under_it_is_served_by_another",)),
    Mutation("BK07", "an output's name has no random part (a chosen seed finds another caller's image)",
             "backend/images/pngmeta.py", "{secrets.token_hex(NAME_RANDOM_BITS // 8)}.png", "{'0' * 16}.png",
             ("tests/backend/test_pngmeta.py::test_an_output_name_cannot_be_derived_from_its_parameters",)),
    Mutation("BK11", "retention deletes by name (a user's file named like the app's goes)", "backend/images/folder.py",
             "APP_PNG.match(p.name) and is_own_png(p)]", "APP_PNG.match(p.name) and p.is_file()]",
             ("tests/backend/test_pngmeta.py::test_retention_removes_only_the_apps_own_pngs",)),
    Mutation("BK10", "a full disk is a generic failure", "backend/images/pngmeta.py",
             "        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:\n", "        if False:\n",
             ("tests/backend/test_pngmeta.py::test_a_full_output_folder_raises_storage_full_and_leaves_nothing_partial",)),
    Mutation("BK09", "/readyz prints the load error (--model's path)", "backend/serving/status.py",
             "            return False, LOAD_FAILED",
             "            return False, \"the model failed to load: \" + (s.load_error or \"\")",
             ("tests/backend/test_manager.py::test_readiness_names_no_path_when_the_model_fails_to_load",)),
)


def copy_tree(dest: Path) -> None:
    """The working tree as git sees it (tracked files and untracked ones it does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, listed):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def apply(mutation: Mutation, tree: Path) -> bool:
    """Make the edit in ``tree``; False when the source no longer holds it exactly once (stale)."""
    path = tree / mutation.path
    text = path.read_text(encoding="utf-8")
    for old, new in ((mutation.old, mutation.new), *mutation.more):
        if text.count(old) != 1:
            return False
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    return True


def run_one(mutation: Mutation) -> dict:
    with tempfile.TemporaryDirectory(prefix="ns-mutation-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        if not apply(mutation, tree):
            return {"id": mutation.id, "outcome": "stale", "seconds": 0.0}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(tree)  # the copy's code, not the installed checkout's
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                               *mutation.tests], cwd=tree, env=env, capture_output=True, text=True)
        outcome = "survived" if done.returncode == 0 else ("killed" if done.returncode == 1 else
                                                            f"error (pytest exit {done.returncode})")
        tail = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
        return {"id": mutation.id, "outcome": outcome, "seconds": time.monotonic() - began, "last_line": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated mutation ids")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args(argv)
    chosen = MUTATIONS
    if args.only:
        wanted = {part.strip() for part in args.only.split(",")}
        unknown = wanted - {m.id for m in MUTATIONS}
        if unknown:
            parser.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
        chosen = tuple(m for m in MUTATIONS if m.id in wanted)
    if args.list:
        for m in chosen:
            print(f"{m.id:4} {m.what}  [{m.path}] -> {' '.join(m.tests)}")
        return 0
    bad = 0
    for m in chosen:
        result = run_one(m)
        bad += result["outcome"] != "killed"
        print(f"{m.id:4} {result['outcome']:9} {result['seconds']:6.1f} s  {m.what}", flush=True)
    print(f"{len(chosen) - bad} of {len(chosen)} killed" + (f"; {bad} survived or stale" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
