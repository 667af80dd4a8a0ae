"""The page's English words, one sentence per key, ``{placeholders}`` filled in by ``ui.i18n.text``; English
is also the fallback. A key holds no dot: the browser's translation would read it as a nested key."""

EN: dict[str, str] = {
    # static page text (translated in the browser by gr.I18n)
    "title": "# Neuron Studio\nFLUX.2-klein on AWS Trainium — see what is compiled, what a new shape will "
             "cost, and how the modes compare.",
    "starting": "Starting…",
    "tab_studio": "Studio", "tab_compare": "Compare", "tab_system": "System", "tab_performance": "Performance",
    "prompt": "Prompt", "prompt_placeholder": "Describe the image…", "examples": "Examples",
    "resolution": "Resolution", "custom": "Custom", "width": "Width", "height": "Height", "mode": "Mode",
    "tp_degree": "TP degree (ranks)", "start_group": "Start group", "stop_group": "Stop group",
    "steps": "Steps", "guidance": "Guidance (ignored by distilled models)", "seed": "Seed",
    "randomize": "Randomize seed", "generate": "Generate", "stop": "Stop",
    "stop_worker": "End the compile", "info_worker_stopped": "Stopped the {engines} workers: the compile ended; "
    "start them again from the System tab.", "info_no_worker_compiling": "No worker is compiling.",
    "png_accordion": "Load parameters from a PNG", "png_file": "PNG made by Neuron Studio (or A1111-style)",
    "image": "Image", "record_accordion": "Record (JSON)", "record": "Record", "history": "This session",
    "mode_eager": "eager", "mode_compiled": "compiled (whole transformer)",
    "mode_regional": "regional (repeated blocks)", "mode_tp": "tensor-parallel (torchrun worker group)",
    "compare_intro": "Runs the Studio tab's prompt, size, steps and seed through each chosen mode and shows "
                     "the images side by side, with their timings and the largest pixel difference from the "
                     "first mode.",
    "compare_modes": "Modes (two or three)", "compare": "Compare", "side_by_side": "Side by side",
    "timings": "Timings",
    "warm_only": "Lock to warm shapes (refuse new compiles)", "clear_cache": "Clear compile cache…",
    "log_out": "Log out (operator)",
    "confirm_clear": "Delete every compiled artifact on disk? Warm shapes stay warm in this process; the next "
                     "start compiles from scratch.",
    "confirm_yes": "Yes, clear it", "confirm_no": "Keep it", "shapes": "Shapes",
    "warm_shapes": "Warm up these presets", "warm_mode": "in mode", "warm_button": "Warm up in the background",
    "show_logs": "Show rank logs", "rank_logs": "Rank logs (tails, read when you press Show)",
    "raw_status": "Raw status (JSON)", "status": "Status",
    "perf_intro": "Measured in this process: steady-state seconds per image (median, runs that did not "
                  "compile) against image size, and the compile time of each shape per mode.",
    "latency_title": "Latency vs image size (steady state)", "compile_title": "Compile time per shape and mode",
    "latency_empty": "Latency vs image size — no steady run yet: generate an image and it appears here",
    "compile_empty": "Compile time per shape and mode — nothing compiled yet: a compiled or regional run at a "
                     "new shape adds a bar here",
    "receipt_title": "### Cost receipt",
    "receipt_intro": "What an image costs here, from this machine's steady runs of each warm shape and the "
                     "instance's price per hour. Enter another machine's price and seconds per image to set it "
                     "beside this one.",
    "receipt_price": "This instance's price (USD/hour; 0: the dated on-demand table)",
    "receipt_ref_label": "Reference machine", "receipt_ref_price": "Its price (USD/hour)",
    "receipt_ref_seconds": "Its seconds per image", "receipt_button": "Make the receipt",
    "receipt_head": "Measured on **{measured_on}**; price {price} ({source}).", "receipt_price_unit": "${price:g}/hour", "receipt_unknown": "unknown",
    "receipt_columns": "mode|signature|s/run, quiet|steady runs|load seen|images/hour|per 1,000 images",
    "receipt_reference_column": "{label} per 1,000", "receipt_at_once": "{n} at once",
    "receipt_none": "no warm shape with a steady run yet",
    "receipt_reference": "{label}: ${price:g}/hour at {seconds:g} s/image ({per_hour:,.0f} images/hour) — figures "
                         "you entered, not measured here.",
    "receipt_caveat": "Each figure is the lower quartile of this machine's warm runs that ran alone, read as on a "
                      "quiet machine (on a CPU, a run's seconds times the share of the CPU it got; load seen: the "
                      "median share other work took meanwhile); idle time, compiles and other requests are not in "
                      "it. It says nothing of hardware this app has not run on.",
    "receipt_bad": "The reference needs a positive price and seconds per image: {reason}",
    "compare_hint": "Pick two or three modes and press **Compare**: the same prompt and seed run through each, "
                    "the images appear side by side and their timings in the table beside them.",
    "refresh_plots": "Refresh plots",
    # errors: a sentence per code; the backend's English detail follows it
    "err_invalid": "A value is not valid", "err_invalid_prompt": "The prompt is not valid",
    "err_invalid_width": "The width is not valid", "err_invalid_height": "The height is not valid",
    "err_invalid_size": "The image size is not valid", "err_invalid_steps": "The number of steps is not valid",
    "err_invalid_work": "The request is more work than one run may be",
    "err_invalid_images": "A reference image is not valid", "err_invalid_count": "The number of images is not valid",
    "cost_work": " · {work} of the {limit} megapixel-steps a run may take",
    "err_invalid_guidance": "The guidance is not valid", "err_invalid_seed": "The seed is not valid",
    "err_invalid_mode": "The mode is not valid", "err_invalid_modes": "Choose two or three modes",
    "err_invalid_shapes": "Choose at least one preset", "err_invalid_tp_degree": "The TP degree is not valid",
    "err_invalid_replicas": "The number of replicas is not valid",
    "err_locked": "Refused",
    "err_limit": "Refused: this mode holds as many compiled shapes as allowed",
    "err_does_not_fit": "Refused: it would not fit a NeuronCore's memory",
    "err_not_ready": "Not ready", "err_queue_full": "Too many runs waiting", "err_busy": "Busy", "err_cancelled": "Stopped",
    "err_not_allowed": "Not allowed for a viewer",
    "from_bundle": "from a bundle", "bundle_accordion": "Warm-start bundle", "bundle_export": "Export warm shapes as a bundle",
    "bundle_file": "Bundle to download", "bundle_upload": "Bundle to import (up to 20 MB here; larger: "
    "`python app.py cache import`)", "bundle_import": "Import this bundle",
    "bundle_entries": "Warms", "bundle_applies": "It applies to this install.",
    "bundle_mismatch": "It does not apply here: {why}",
    "bundle_trust": "Importing a bundle runs its author's code (device programs, pickled cache entries): "
                    "import only bundles you trust.",
    "info_bundle_exported": "Bundle written: {entries} (mode, shape) entries, {files} files.",
    "info_bundle_imported": "Bundle imported: {written} files written, {already} already there.",
    "clear_plan_line": "- {entries} compile-cache entries, {mb} MB, in `{dir}` (other files there stay)",
    "role_operator": "You are the **operator**: the System tab's controls are yours.",
    "role_viewer": "You are a **viewer**: generate, compare, watch (engines, caches, the lock: the operator's).",
    "err_compile_failed": "The compile failed", "err_group_dead": "The tensor-parallel group died",
    "err_failed": "The generation failed", "err_model_not_found": "The model was not found",
    "cost_warm_on": " · warm on {warm} of {of} replicas",
    "badge_warm_on": "warm on {warm} of {of} replicas",
    "cost_attention_fast": " **Fast attention** (the NKI flash kernel)",
    "cost_attention_slow": " **Slow attention**: {size} of scores ({why})",
    "cost_memory": "; about {total} of a NeuronCore's {hbm}",
    "cost_nearest_warm": " Nearest warm: **{signature}**.",
    "fit_crop": "cropped", "fit_pad": "padded", "fit_as_is": "as is",
    "edit_accordion": "Edit: reference images", "references": "Reference images (each is fitted to a reference size: "
    "a new size compiles once)", "count": "Images per prompt",
    "use_as_reference": "Use as reference", "info_reference_added": "Added as reference {n}.",
    "add_as_reference": "Add as reference",
    "info_reference_used": "This image is now the reference (Add as reference keeps several).",
    "warn_references_full": "Already {n} references, the most an edit takes.",
    "run_references": " Edited from {refs}.", "run_batch": " {count} images in one batch.",
    "warn_png_references": "This image was an edit of {count} reference image(s): {refs}. Add those files "
    "under “Edit: reference images” to run it again.",
    "engine_replicas": " · replicas {ready}/{size} ready, {busy} busy",
    "replicas_none": "No replicas running. Start some to serve several requests at once, one per replica.",
    "replicas_none_viewer": "No replicas running: requests run one at a time in the app (the operator can "
                            "start replicas to serve several at once).",
    "replicas_head": "**Replicas**: {ready} of {size} ready, {busy} busy, {restarts} restarted",
    "col_replica": "Replica", "col_core": "NeuronCore", "col_served": "Served", "col_warm": "Warm shapes",
    "replica_busy": "busy", "replicas_count": "Replicas", "start_replicas": "Start replicas",
    "stop_replicas": "Stop replicas", "info_replicas_starting": "Starting {count} replicas…",
    "info_replicas_stopped": "The replicas are stopped.", "info_replicas_not_running": "No replicas are running.",
    "err_unauthorized": "Refused: not this launch's worker token", "err_bundle_refused": "The bundle was refused",
    "err_device_unavailable": "The device cannot be used",
    "err_storage_full": "The output folder is full: the image was not saved",
    "err_error": "Something went wrong", "err_not_png": "That file is not a readable PNG.",
    "title_error": "Error", "title_info": "Info", "title_warning": "Warning",
    # messages and progress
    "info_stopping": "Stopping at the next denoising step…", "info_nothing": "Nothing is running.",
    "info_stopping_compile": "Stopping — the compile that is running finishes first (about {left} left), "
                             "then the run stops before its next step.",
    "info_stopping_compile_operator": "Stopping — the compile that is running finishes first (about {left} "
                                      "left); to end it now, press End the compile (it stops the worker that "
                                      "compiles).",
    "progress_queued": "waiting for your turn — place {place} of {waiting}",
    "progress_queued_about": "waiting for your turn — place {place} of {waiting}, about {seconds}",
    "progress_compiling": "compiling — {elapsed} so far, about {estimate} expected; Stop ends the run once the compile is done",
    "info_stopped": "Stopped: {detail}",
    "run_stopped": "**Stopped** before the image was finished (seed `{seed}`).",
    "warn_no_params": "This PNG carries no generation parameters.",
    "info_tp_already": "The tensor-parallel group is already {state} with {ranks} ranks.",
    "info_tp_replacing": "Replacing the {old}-rank tensor-parallel group with {ranks} ranks…",
    "info_tp_starting": "Starting the tensor-parallel group ({ranks} ranks)…",
    "info_tp_not_running": "The tensor-parallel group is not running.",
    "info_tp_stopped": "The tensor-parallel group is stopped.",
    "info_cache_cleared": "Compile cache cleared ({mb} MB).",
    "info_locked": "Locked to warm shapes.", "info_unlocked": "New shapes may compile again.",
    "phase_encoding": "encoding", "phase_compiling": "compiling", "phase_denoising": "denoising",
    "phase_decoding": "decoding", "progress_step": "denoising step {step}/{steps}",
    "progress_loading": "loading the model ({seconds} s); your image runs as soon as it is ready",
    "run_refused": "**Not run.** {reason}",
    # the cost line
    "cost_invalid": "**Invalid** — {error}", "cost_waiting": "Waiting for the model to load…",
    "cost_where": "**{shape}** in **{mode}** mode", "cost_refused": "**Refused** — {where}: {reason}",
    "cost_compiling": "**Compiling** — {where} is compiling now ({elapsed} elapsed",
    "cost_compiling_of": " of ~{estimate})",
    "cost_cold": "**Cold** — {where}: {prefix}it will compile first ({guess}).",
    "cost_estimate": "about {estimate}, from {count} past compiles", "cost_estimate_one": "about {estimate}, from 1 past compile",
    "cost_no_estimate": "no compile measured yet in this mode to estimate from",
    "cost_prior": "about {estimate} — a prior for this compile backend, until this machine measures its first compile",
    "cost_failed_before": "failed before; ", "cost_ready": "**Ready** — {where}: {tail}{extra}.",
    "cost_expected": "expected {seconds}",
    "prompt_hint": "It draws shapes, colours, places and a background, from a small grammar",
    "remove_reference": "Remove the reference",
    "tp_ranks_columns": "Rank | pid | NeuronCore | device | transformer MB | sharded MB | replicated MB | weights",
    "tp_ranks_sharded": "{n} weights sharded", "na": "n/a",
    # A refused field's reason, by its key (backend InvalidRequest.why); the English page says the backend's own words.
    "why_outside": "{field} {value} is outside {low}..{high}", "why_not_multiple": "{field} {value} is not a multiple "
    "of {multiple}", "why_nearest": "nearest valid size is {size}", "why_tokens": "{size} is {tokens} image tokens; "
    "this model takes at most {budget} per request", "why_largest": "the largest size of that shape within it is {size}",
    "why_aspect": "aspect ratio {ratio}:1 is beyond {limit}:1", "why_between": "must be between {low} and {high}, "
    "got {got}", "why_empty_prompt": "is empty; describe the image you want",
    "why_long_prompt": "is {chars} characters; the limit is {limit}", "field_width": "width", "field_height": "height",
    "why_whole": "must be a whole number, got {got}", "why_whole_between": "must be a whole number from {low} to "
    "{high}, got {got}",
    "cpu_caveat": "**On a CPU, compiled runs about as fast as eager and tensor parallel is slower**: on Trainium "
                  "compiling removes the per-op dispatch a NeuronCore pays, and tensor parallel splits a model that "
                  "one NeuronCore cannot hold; here the ranks share the same few cores.",
    "cost_loaded": " ({quiet} on a quiet machine; other work takes {load}% of the CPU now)", "cost_no_timing": "no steady timing yet",
    "note_no_compile": "{mode} mode does not compile on this device",
    "note_shares_graph": "probably reuses the graph of {shape}: the same batch and token count",
    "col_mode": "mode", "col_shape": "shape", "col_state": "state", "col_compile_s": "compile s",
    "steady_of": "{seconds} (median of {count} steady runs: no compile, nothing beside them)",
    "col_steady_s": "steady s", "col_runs": "runs", "col_error": "error", "col_seconds": "seconds",
    "col_attention": "attention", "attention_fast": "fast", "attention_slow": "slow: {size} of scores",
    "col_compiled": "compiled", "col_max_diff": "max |Δ| vs first (0-255)",
    "badge_warm": "warm", "badge_cold": "cold", "badge_compiling": "compiling", "badge_failed": "failed",
    "badge_locked": "locked",
    # the engine line
    "engine_failed": "**Model failed to load** — {model}: {error}",
    "engine_loading": "Loading **{model}** on {where}…",
    "engine_ready": "**{model}** on **{where}** · {state}", "engine_locked": " · locked to warm shapes",
    "engine_busy": " · **busy**: {mode} {shape} {phase}{step} ({elapsed})", "engine_step": " step {step}/{steps}",
    "engine_warming": " · warming up {done}/{total} in {mode}",
    "engine_state_idle": "idle", "engine_state_loading": "loading", "engine_state_warming": "warming",
    "engine_state_ready": "ready", "engine_state_failed": "failed",
    "engine_name_in_process": "in-process", "engine_name_tensor_parallel": "tensor-parallel",
    "engine_name_replicas": "replicas",
    # the run line
    "run_line": "**{size}**, {mode}, {steps} steps, seed `{seed}` — **{total}** total: encode {encode}, "
                "denoise {denoise}, decode {decode}; {compiled}.",
    "run_degraded": " It ran on the app's own core because {reason}.",
    "engine_degraded": " · **degraded**: {why}", "warn_degraded": "Served in process ({mode}), degraded: {why}.",
    "run_drawn_as": " Drawn as “{caption}” (the prompt read in the model's grammar).",
    "run_host_ops": " {count} op(s) ran on the host, not the NeuronCore (CPU fallback): {ops}.",
    "cost_beyond_training": " **Beyond training**: this model learnt sizes up to {pixels} pixels ({side}); "
                            "here it draws a broken or empty field, not the scene.",
    "cost_nearest_preset": " The nearest size it draws well: **{preset}**.",
    "read_ignored": "**Not understood**: {words}", "read_guessed": "made up (the prompt did not say): {what}",
    "read_try": " Closest example: “{example}”.",
    "run_warm": "no compile (warm)",
    "run_graphs": "{count} graph(s) in {seconds}", "run_neffs": "{count} NEFF(s)",
    "run_compiled": "compiled {parts}",
    "run_and": " and ", "run_in_process": "{mode} on the app's own core instead of {requested}",
    "run_own_core": "{mode} on the app's own core",
    "run_tp": "tp ({ranks} ranks)",
    "caption_degraded": "{mode} in process ({requested} down)",
    "axis_megapixels": "megapixels", "axis_seconds": "seconds per image", "axis_mode": "mode",
    "axis_shape_mode": "shape · mode", "axis_compile_seconds": "compile seconds",
    # warm-up
    "warmup_running": "Warming up {mode}: {done}/{total} done, now {current}",
    "warmup_stopped": "**Warm-up stopped** — {error}",
    "warmup_done": "Warm-up finished: {total} shape(s) in {mode} mode",
    # the tensor-parallel group
    "tp_badge": "Tensor-parallel group: {text}", "tp_badge_ready": "ready · {ranks} ranks",
    "tp_badge_starting": "{state}… · {ranks} ranks",
    "tp_state_launching": "launching", "tp_state_loading": "loading", "tp_state_warming": "warming",
    "tp_state_ready": "ready", "tp_state_stopping": "stopping", "tp_state_stopped": "stopped",
    "tp_state_dead": "dead",
    "tp_engine": "tensor-parallel group **{state}**", "tp_engine_ranks": " ({ranks} ranks)",
    "tp_meanwhile": " Meanwhile Generate runs in process ({mode}), and the run line says so.",
    "tp_cost_starting": "**Starting** — the tensor-parallel group ({ranks} ranks) is {state}…{meanwhile}",
    "tp_cost_stopping": "**Stopping** — the tensor-parallel group is stopping; press **Start group** once it "
                        "has stopped.",
    "tp_cost_dead": "**Down** — the tensor-parallel group died: {error}. Press **Start group** to launch it "
                    "again{cost}.{meanwhile}",
    "tp_cost_stopped": "**Stopped** — the tensor-parallel group is not running — press **Start group**{cost}."
                       "{meanwhile}",
    "tp_cost_stopped_viewer": "**Not running** — the operator has not started the tensor-parallel group."
                              "{meanwhile}",
    "tp_cost_dead_viewer": "**Down** — the tensor-parallel group stopped working; the operator can restart it."
                           "{meanwhile}",
    "tp_no_reason": "no reason given",
    "tp_start_unmeasured": ": it launches {degree} processes that each load the model (no start measured yet "
                           "to estimate the time)",
    "tp_start_measured": " ({degree} ranks; its last start{with_ranks} took {seconds} to load and warm up)",
    "tp_with_ranks": ", with {ranks} ranks,",
    "tp_note_other": " Runs on the ready group of {ranks} ranks, not {degree}: **Start group** replaces it{cost}.",
    "tp_note": " Runs on the ready group of {ranks} ranks.",
    "tp_no_logs": "No rank logs: the tensor-parallel group has not been started.",
    # the System tab's tables (row names; values stay as the backend reports them)
    "sys_head": "System", "sys_device": "Device", "sys_model": "Model", "sys_dtype": "Dtype",
    "sys_default_mode": "Default mode", "sys_engine": "Engine", "sys_active_mode": " · active mode {mode}",
    "sys_compile_backend": "Compile backend", "sys_cache": "Compile cache", "sys_cores": "NeuronCores",
    "sys_memory": "Memory", "sys_memory_value": "RSS {rss}, device {device}", "sys_lock": "Warm-only lock",
    "sys_host_ops": "Ops run on the host (CPU fallback)",
    "chip_title": "The chip, live (neuron-monitor)",
    "chip_off": "on Trainium this shows each NeuronCore's utilisation and the HBM each process holds on it by "
                "category (the app, each tensor-parallel rank, each replica), read from neuron-monitor. The app "
                "runs on {kind}: there is no Neuron runtime to read.",
    "chip_unavailable": "cannot read the chip: {why}.",
    "chip_waiting": "waiting for neuron-monitor's first report (one every {period} s).",
    "chip_head": "report {age} s old, one every {period} s.", "chip_none": "no process holds a NeuronCore",
    "chip_col_core": "NeuronCore", "chip_col_owner": "Held by", "chip_col_util": "Utilisation",
    "chip_col_hbm": "HBM used", "chip_col_breakdown": "By category",
    "chip_owner_app": "the app", "chip_owner_rank": "tensor-parallel rank {index}",
    "chip_owner_replica": "replica {index}", "chip_owner_other": "another process",
    "sys_last_error": "Last error", "on": "on", "off": "off", "none": "none", "resolving": "resolving",
    "tp_head": "Tensor parallel", "tp_row_state": "State", "tp_row_ranks": "Ranks",
    "tp_row_each": "Each rank runs", "tp_row_cores": "NeuronCores", "tp_no_cores": "n/a on this device",
    "tp_row_pids": "Rank pids", "tp_row_error": "Group error", "tp_row_request": "Last failed request",
    "tp_row_load": "Load / warm-up", "tp_row_call": "Last call",
    "tp_row_degrees": "Degrees offered (divide the heads; on Neuron within one chip)",
    "tp_call_value": "{round_trip} round trip, {overhead} over the workers' own time",
    # the System tab's Ray Serve cluster (ui.views_system.ray_markdown; issue 55)
    "ray_head": "**Ray Serve cluster** ({device}): engine {state} · deployment {deployment} · {ready} of {target} "
                "replicas running · {restarts} restarted, {retried} requests retried · queue: {waiting} waiting, "
                "{running} running",
    "ray_col_node": "Node", "ray_col_address": "Address", "ray_col_replicas": "Replicas", "ray_col_replica": "Replica",
    "ray_col_cores": "Cores", "ray_col_state": "State", "ray_node_head": "head", "ray_node_lost": "lost",
    "ray_no_replicas": "no replica yet", "ray_error": "Ray says: {error}",
    "ray_engine_launching": "launching", "ray_engine_ready": "ready", "ray_engine_dead": "dead",
    "ray_engine_stopped": "stopped",
    "ray_deployment_healthy": "healthy", "ray_deployment_updating": "updating", "ray_deployment_unhealthy": "unhealthy",
    "ray_deployment_deploy_failed": "failed to deploy", "ray_deployment_upscaling": "scaling up",
    "ray_deployment_downscaling": "scaling down",
    "ray_replica_starting": "starting", "ray_replica_updating": "updating", "ray_replica_recovering": "recovering",
    "ray_replica_running": "running", "ray_replica_stopping": "stopping",
    "ray_replica_pending_migration": "waiting to move",
}
