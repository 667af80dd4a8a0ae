"""The page's words in English and Turkish, the language of a request, and error codes.

One table (``MESSAGES``) serves both sides: ``ui.app`` hands it whole to ``gr.I18n``, so the
browser translates the static labels itself (Gradio picks the table from ``navigator.language``:
``tr-TR`` finds ``tr``, anything else falls back to ``en``); handlers and views render their
Markdown and messages on the server with ``text(lang, key)``, ``lang`` coming from the request's
``Accept-Language`` header by the same rule. Numbers and sizes are written the same way in both
languages (``1024x1024``, ``2.3 s``, dot decimals): only words are translated.

Backend errors carry no translation of their own: ``error_code`` is the exception class's own code
(``backend.errors``, the one table of errors; for ``InvalidRequest``, with its field), ``error_message`` puts the translated
sentence for that code before the backend's own English detail, which names the specifics (such as
the nearest valid size). No gradio and no torch here.
"""

from __future__ import annotations

from typing import Any

from backend.errors import InvalidRequest, StudioError

LANGUAGES = ("en", "tr")
DEFAULT = "en"

# InvalidRequest fields the backend names (validation, shapes, the TP degree, compare, warm-up).
INVALID_FIELDS = ("prompt", "width", "height", "size", "steps", "guidance", "seed", "mode", "modes", "shapes",
                  "tp_degree", "replicas")

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
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
        "compare_hint": "Pick two or three modes and press **Compare**: the same prompt and seed run through each, "
                        "the images appear side by side and their timings in the table below.",
        "refresh_plots": "Refresh plots",
        # errors: a sentence per code; the backend's English detail follows it
        "err_invalid": "A value is not valid", "err_invalid_prompt": "The prompt is not valid",
        "err_invalid_width": "The width is not valid", "err_invalid_height": "The height is not valid",
        "err_invalid_size": "The image size is not valid", "err_invalid_steps": "The number of steps is not valid",
        "err_invalid_guidance": "The guidance is not valid", "err_invalid_seed": "The seed is not valid",
        "err_invalid_mode": "The mode is not valid", "err_invalid_modes": "Choose two or three modes",
        "err_invalid_shapes": "Choose at least one preset", "err_invalid_tp_degree": "The TP degree is not valid",
        "err_invalid_replicas": "The number of replicas is not valid",
        "err_locked": "Refused",
        "err_limit": "Refused: this mode holds as many compiled shapes as allowed",
        "err_not_ready": "Not ready", "err_busy": "Busy", "err_cancelled": "Stopped",
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
        "role_viewer": "You are a **viewer**: generate, compare and watch. Starting and stopping engines, "
                       "caches, the warm-shape lock and warm-ups belong to the operator.",
        "err_compile_failed": "The compile failed", "err_group_dead": "The tensor-parallel group died",
        "err_failed": "The generation failed", "err_model_not_found": "The model was not found",
        "cost_warm_on": " · warm on {warm} of {of} replicas",
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
        "err_error": "Something went wrong", "err_not_png": "That file is not a readable PNG.",
        "title_error": "Error", "title_info": "Info", "title_warning": "Warning",
        # messages and progress
        "info_stopping": "Stopping at the next denoising step…", "info_nothing": "Nothing is running.",
        "info_stopping_compile": "Stopping — the compile that is running finishes first (about {left} left), "
                                 "then the run stops before its next step.",
        "info_stopping_compile_operator": "Stopping — the compile that is running finishes first (about {left} "
                                          "left); to end it now, press End the compile (it stops the worker that "
                                          "compiles).",
        "progress_compiling": "compiling — {elapsed} so far, about {estimate} expected",
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
        "cost_estimate": "estimated {estimate} from past compiles",
        "cost_no_estimate": "no compile measured yet in this mode to estimate from",
        "cost_prior": "about {estimate} — a prior for this compile backend, until this machine measures its first compile",
        "cost_failed_before": "failed before; ", "cost_ready": "**Ready** — {where}: {tail}{extra}.",
        "cost_expected": "expected {seconds}", "cost_no_timing": "no steady timing yet",
        "col_mode": "mode", "col_shape": "shape", "col_state": "state", "col_compile_s": "compile s",
        "steady_of": "{seconds} (median of {count} lone runs)",
        "col_steady_s": "steady s", "col_runs": "runs", "col_error": "error", "col_seconds": "seconds",
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
        "run_degraded": " **Degraded** — {reason}.",
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
        "run_and": " and ", "run_in_process": "served in process ({mode}) instead of {requested}",
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
        "sys_last_error": "Last error", "on": "on", "off": "off", "none": "none", "resolving": "resolving",
        "tp_head": "Tensor parallel", "tp_row_state": "State", "tp_row_ranks": "Ranks",
        "tp_row_each": "Each rank runs", "tp_row_cores": "NeuronCores", "tp_no_cores": "n/a on this device",
        "tp_row_pids": "Rank pids", "tp_row_error": "Group error", "tp_row_request": "Last failed request",
        "tp_row_load": "Load / warm-up", "tp_row_call": "Last call",
        "tp_call_value": "{round_trip} round trip, {overhead} over the workers' own time",
    },
    "tr": {
        "title": "# Neuron Studio\nAWS Trainium üzerinde FLUX.2-klein — neyin derlendiğini, yeni bir boyutun neye mal "
                 "olacağını ve modların nasıl karşılaştırıldığını görün.",
        "starting": "Başlatılıyor…",
        "tab_studio": "Stüdyo", "tab_compare": "Karşılaştır", "tab_system": "Sistem", "tab_performance": "Performans",
        "prompt": "İstem", "prompt_placeholder": "Görseli tarif edin…", "examples": "Örnekler",
        "resolution": "Çözünürlük", "custom": "Özel", "width": "Genişlik", "height": "Yükseklik", "mode": "Mod",
        "tp_degree": "TP derecesi (rank sayısı)", "start_group": "Grubu başlat", "stop_group": "Grubu durdur",
        "steps": "Adım", "guidance": "Yönlendirme (damıtılmış modeller yok sayar)", "seed": "Tohum",
        "randomize": "Tohumu rastgele seç", "generate": "Oluştur", "stop": "Durdur",
        "stop_worker": "Derlemeyi bitir", "info_worker_stopped": "{engines} işçileri durduruldu: derleme bitti; Sistem "
        "sekmesinden yeniden başlatın.", "info_no_worker_compiling": "Derleyen bir işçi yok.",
        "png_accordion": "Parametreleri bir PNG'den yükle",
        "png_file": "Neuron Studio'nun yaptığı (ya da A1111 tarzı) PNG",
        "image": "Görsel", "record_accordion": "Kayıt (JSON)", "record": "Kayıt", "history": "Bu oturum",
        "mode_eager": "eager (derlemesiz)", "mode_compiled": "derlenmiş (tüm transformer)",
        "mode_regional": "bölgesel (tekrarlanan bloklar)", "mode_tp": "tensör paralel (torchrun işçi grubu)",
        "compare_intro": "Stüdyo sekmesindeki istemi, boyutu, adımları ve tohumu seçilen her modda çalıştırır; "
                         "görselleri süreleri ve ilk moddan en büyük piksel farkıyla yan yana gösterir.",
        "compare_modes": "Modlar (iki ya da üç)", "compare": "Karşılaştır", "side_by_side": "Yan yana",
        "timings": "Süreler",
        "warm_only": "Sıcak boyutlarla sınırla (yeni derlemeleri reddet)",
        "clear_cache": "Derleme önbelleğini temizle…",
        "confirm_clear": "Diskteki tüm derlenmiş çıktılar silinsin mi? Sıcak boyutlar bu süreçte sıcak kalır; "
                         "sonraki başlangıç sıfırdan derler.",
        "confirm_yes": "Evet, temizle", "confirm_no": "Kalsın", "shapes": "Boyutlar",
        "warm_shapes": "Bu hazır boyutları ısıt", "warm_mode": "şu modda", "warm_button": "Arka planda ısıt",
        "show_logs": "Rank günlüklerini göster",
        "rank_logs": "Rank günlükleri (son satırlar, Göster'e basınca okunur)",
        "raw_status": "Ham durum (JSON)", "status": "Durum",
        "perf_intro": "Bu süreçte ölçülenler: görsel boyutuna göre görsel başına kararlı durum saniyesi (medyan, "
                      "derleme yapmayan çalıştırmalar) ve her boyutun mod başına derleme süresi.",
        "latency_title": "Gecikme ve görsel boyutu (kararlı durum)",
        "compile_title": "Boyut ve mod başına derleme süresi",
        "latency_empty": "Gecikme ve görsel boyutu — henüz kararlı çalıştırma yok: bir görsel üretin, burada görünür",
        "compile_empty": "Boyut ve mod başına derleme süresi — henüz derleme yok: yeni bir boyutta derlenmiş ya da "
                         "bölgesel bir çalıştırma buraya bir çubuk ekler",
        "compare_hint": "İki ya da üç mod seçip **Karşılaştır**'a basın: aynı istem ve tohum her birinden geçer, "
                        "görseller yan yana, süreleri aşağıdaki tabloda görünür.",
        "refresh_plots": "Grafikleri yenile",
        "err_not_allowed": "İzleyici için izin yok",
        "from_bundle": "paketten", "bundle_accordion": "Sıcak başlangıç paketi", "bundle_export": "Sıcak boyutları paket olarak dışa aktar",
        "bundle_file": "İndirilecek paket", "bundle_upload": "İçe aktarılacak paket (burada en çok 20 MB; daha "
        "büyüğü: `python app.py cache import`)", "bundle_import": "Bu paketi içe aktar",
        "bundle_entries": "Isıttıkları", "bundle_applies": "Bu kuruluma uyuyor.",
        "bundle_mismatch": "Burada uymuyor: {why}",
        "bundle_trust": "Bir paketi içe aktarmak, yazarının kodunu çalıştırır (aygıt programları, pickle önbellek "
                        "girdileri): yalnızca güvendiğiniz paketleri içe aktarın.",
        "info_bundle_exported": "Paket yazıldı: {entries} (mod, boyut) girdisi, {files} dosya.",
        "info_bundle_imported": "Paket içe aktarıldı: {written} dosya yazıldı, {already} zaten vardı.",
        "clear_plan_line": "- `{dir}` içinde {entries} derleme önbelleği girdisi, {mb} MB (oradaki diğer dosyalar kalır)",
        "role_operator": "**Operatörsünüz**: Sistem sekmesinin denetimleri sizin.",
        "role_viewer": "**İzleyicisiniz**: üretin, karşılaştırın ve izleyin. Motorları başlatıp durdurmak, "
                       "önbellekler, sıcak boyut kilidi ve ısıtmalar operatörün işidir.",
        "err_invalid": "Bir değer geçerli değil", "err_invalid_prompt": "İstem geçerli değil",
        "err_invalid_width": "Genişlik geçerli değil", "err_invalid_height": "Yükseklik geçerli değil",
        "err_invalid_size": "Görsel boyutu geçerli değil", "err_invalid_steps": "Adım sayısı geçerli değil",
        "err_invalid_guidance": "Yönlendirme değeri geçerli değil", "err_invalid_seed": "Tohum geçerli değil",
        "err_invalid_mode": "Mod geçerli değil", "err_invalid_modes": "İki ya da üç mod seçin",
        "err_invalid_shapes": "En az bir hazır boyut seçin", "err_invalid_tp_degree": "TP derecesi geçerli değil",
        "err_invalid_replicas": "Kopya sayısı geçerli değil",
        "err_locked": "Reddedildi",
        "err_limit": "Reddedildi: bu mod izin verilen sayıda derlenmiş boyut tutuyor",
        "err_not_ready": "Hazır değil", "err_busy": "Meşgul", "err_cancelled": "Durduruldu",
        "err_compile_failed": "Derleme başarısız oldu", "err_group_dead": "Tensör paralel grup çöktü",
        "err_failed": "Üretim başarısız oldu", "err_model_not_found": "Model bulunamadı",
        "cost_warm_on": " · {of} kopyanın {warm} tanesinde sıcak",
        "engine_replicas": " · kopyalar {ready}/{size} hazır, {busy} meşgul",
        "replicas_none": "Çalışan kopya yok. Aynı anda birkaç istek sunmak için başlatın, her kopyaya bir istek.",
        "replicas_none_viewer": "Çalışan kopya yok: istekler uygulamada tek tek çalışır (operatör aynı anda birkaç "
                                "istek sunmak için kopya başlatabilir).",
        "replicas_head": "**Kopyalar**: {size} kopyanın {ready} tanesi hazır, {busy} meşgul, {restarts} yeniden başlatıldı",
        "col_replica": "Kopya", "col_core": "NeuronCore", "col_served": "Sunulan", "col_warm": "Sıcak boyutlar",
        "replica_busy": "meşgul", "replicas_count": "Kopyalar", "start_replicas": "Kopyaları başlat",
        "stop_replicas": "Kopyaları durdur", "info_replicas_starting": "{count} kopya başlatılıyor…",
        "info_replicas_stopped": "Kopyalar durduruldu.", "info_replicas_not_running": "Çalışan kopya yok.",
        "err_unauthorized": "Reddedildi: bu başlatmanın işçi belirteci değil", "err_bundle_refused": "Paket reddedildi",
        "err_device_unavailable": "Aygıt kullanılamıyor",
        "err_error": "Bir şeyler ters gitti", "err_not_png": "Bu dosya okunabilir bir PNG değil.",
        "title_error": "Hata", "title_info": "Bilgi", "title_warning": "Uyarı",
        "info_stopping": "Bir sonraki gürültü giderme adımında duruluyor…", "info_nothing": "Çalışan bir şey yok.",
        "info_stopping_compile": "Duruluyor — süren derleme önce bitecek (yaklaşık {left} kaldı), sonra çalıştırma "
                                 "bir sonraki adımdan önce duracak.",
        "info_stopping_compile_operator": "Duruluyor — süren derleme önce bitecek (yaklaşık {left} kaldı); hemen "
                                          "bitirmek için Derlemeyi bitir'e basın (derleyen işçiyi durdurur).",
        "progress_compiling": "derleniyor — şimdiye dek {elapsed}, beklenen yaklaşık {estimate}",
        "info_stopped": "Durduruldu: {detail}",
        "run_stopped": "Görsel bitmeden **durduruldu** (tohum `{seed}`).",
        "warn_no_params": "Bu PNG üretim parametresi taşımıyor.",
        "info_tp_already": "Tensör paralel grup zaten {state}, {ranks} rank ile.",
        "info_tp_replacing": "{old} ranklı tensör paralel grup {ranks} ranklı grupla değiştiriliyor…",
        "info_tp_starting": "Tensör paralel grup başlatılıyor ({ranks} rank)…",
        "info_tp_not_running": "Tensör paralel grup çalışmıyor.",
        "info_tp_stopped": "Tensör paralel grup durduruldu.",
        "info_cache_cleared": "Derleme önbelleği temizlendi ({mb} MB).",
        "info_locked": "Sıcak boyutlarla sınırlandı.", "info_unlocked": "Yeni boyutlar yeniden derlenebilir.",
        "phase_encoding": "kodlanıyor", "phase_compiling": "derleniyor", "phase_denoising": "gürültü gideriliyor",
        "phase_decoding": "çözülüyor", "progress_step": "gürültü giderme adımı {step}/{steps}",
        "progress_loading": "model yükleniyor ({seconds} sn); görseliniz hazır olur olmaz üretilecek",
        "run_refused": "**Çalıştırılmadı.** {reason}",
        "cost_invalid": "**Geçersiz** — {error}", "cost_waiting": "Modelin yüklenmesi bekleniyor…",
        "cost_where": "**{mode}** modunda **{shape}**", "cost_refused": "**Reddedildi** — {where}: {reason}",
        "cost_compiling": "**Derleniyor** — {where} şu anda derleniyor ({elapsed} geçti",
        "cost_compiling_of": ", tahmini ~{estimate})",
        "cost_cold": "**Soğuk** — {where}: {prefix}önce derlenecek ({guess}).",
        "cost_prior": "yaklaşık {estimate} — bu derleme arka ucu için bir ön tahmin; bu makine ilk derlemesini ölçene dek",
        "cost_estimate": "geçmiş derlemelere göre tahmini {estimate}",
        "cost_no_estimate": "bu modda tahmin için henüz ölçülmüş derleme yok",
        "cost_failed_before": "daha önce başarısız oldu; ", "cost_ready": "**Hazır** — {where}: {tail}{extra}.",
        "cost_expected": "beklenen {seconds}", "cost_no_timing": "henüz kararlı süre yok",
        "col_mode": "mod", "col_shape": "boyut", "col_state": "durum", "col_compile_s": "derleme s",
        "steady_of": "{seconds} (tek başına {count} çalıştırmanın medyanı)",
        "col_steady_s": "kararlı s", "col_runs": "çalıştırma", "col_error": "hata", "col_seconds": "saniye",
        "col_compiled": "derlendi", "col_max_diff": "ilkine göre en büyük |Δ| (0-255)",
        "badge_warm": "sıcak", "badge_cold": "soğuk", "badge_compiling": "derleniyor", "badge_failed": "başarısız",
        "badge_locked": "kilitli",
        "engine_failed": "**Model yüklenemedi** — {model}: {error}",
        "engine_loading": "**{model}** {where} üzerinde yükleniyor…",
        "engine_ready": "**{model}**, **{where}** üzerinde · {state}", "engine_locked": " · sıcak boyutlarla sınırlı",
        "engine_busy": " · **meşgul**: {mode} {shape} {phase}{step} ({elapsed})", "engine_step": " adım {step}/{steps}",
        "engine_warming": " · {mode} modunda ısıtılıyor {done}/{total}",
        "engine_state_idle": "boşta", "engine_state_loading": "yükleniyor", "engine_state_warming": "ısınıyor",
        "engine_state_ready": "hazır", "engine_state_failed": "başarısız",
        "engine_name_in_process": "süreç içi", "engine_name_tensor_parallel": "tensör paralel",
        "engine_name_replicas": "kopyalar",
        "run_line": "**{size}**, {mode}, {steps} adım, tohum `{seed}` — toplam **{total}**: kodlama {encode}, "
                    "gürültü giderme {denoise}, çözme {decode}; {compiled}.",
        "run_degraded": " **Yedek yolda** — {reason}.",
        "run_drawn_as": " “{caption}” olarak çizildi (istem, modelin dilbilgisiyle okundu).",
        "run_host_ops": " {count} işlem NeuronCore yerine ana makinede çalıştı (CPU'ya geri dönüş): {ops}.",
        "cost_beyond_training": " **Eğitimin ötesinde**: bu model en çok {pixels} piksellik ({side}) boyutları "
                                "öğrendi; burada sahneyi değil, bozuk ya da boş bir alan çizer.",
        "cost_nearest_preset": " İyi çizdiği en yakın boyut: **{preset}**.",
        "read_ignored": "**Anlaşılmadı**: {words}", "read_guessed": "uyduruldu (istem söylemedi): {what}",
        "read_try": " En yakın örnek: “{example}”.",
        "run_warm": "derleme yok (sıcak)",
        "run_graphs": "{seconds} içinde {count} graf", "run_neffs": "{count} NEFF", "run_compiled": "derlendi: {parts}",
        "run_and": " ve ", "run_in_process": "{requested} yerine süreç içinde ({mode}) çalıştı",
        "run_tp": "tp ({ranks} rank)",
        "caption_degraded": "süreç içinde {mode} ({requested} kapalı)",
        "axis_megapixels": "megapiksel", "axis_seconds": "görsel başına saniye", "axis_mode": "mod",
        "axis_shape_mode": "boyut · mod", "axis_compile_seconds": "derleme saniyesi",
        "warmup_running": "{mode} ısıtılıyor: {done}/{total} bitti, şimdi {current}",
        "warmup_stopped": "**Isıtma durdu** — {error}", "warmup_done": "Isıtma bitti: {mode} modunda {total} boyut",
        "tp_badge": "Tensör paralel grup: {text}", "tp_badge_ready": "hazır · {ranks} rank",
        "tp_badge_starting": "{state}… · {ranks} rank",
        "tp_state_launching": "başlatılıyor", "tp_state_loading": "yükleniyor", "tp_state_warming": "ısınıyor",
        "tp_state_ready": "hazır", "tp_state_stopping": "durduruluyor", "tp_state_stopped": "durdu",
        "tp_state_dead": "çöktü",
        "tp_engine": "tensör paralel grup **{state}**", "tp_engine_ranks": " ({ranks} rank)",
        "tp_meanwhile": " Bu arada Oluştur süreç içinde çalışır ({mode}); çalıştırma satırı bunu belirtir.",
        "tp_cost_starting": "**Başlıyor** — tensör paralel grup ({ranks} rank): {state}…{meanwhile}",
        "tp_cost_stopping": "**Duruyor** — tensör paralel grup durduruluyor; durunca **Grubu başlat**'a basın.",
        "tp_cost_dead": "**Çöktü** — tensör paralel grup çöktü: {error}. Yeniden başlatmak için **Grubu başlat**'a "
                        "basın{cost}.{meanwhile}",
        "tp_cost_stopped": "**Durdu** — tensör paralel grup çalışmıyor — **Grubu başlat**'a basın{cost}."
                           "{meanwhile}",
        "tp_cost_stopped_viewer": "**Çalışmıyor** — operatör tensör paralel grubu başlatmadı.{meanwhile}",
        "tp_cost_dead_viewer": "**Çöktü** — tensör paralel grup çalışmayı bıraktı; operatör yeniden başlatabilir."
                               "{meanwhile}",
        "tp_no_reason": "neden bildirilmedi",
        "tp_start_unmeasured": ": her biri modeli yükleyen {degree} süreç başlatır (süreyi tahmin etmek için henüz "
                               "ölçülmüş başlangıç yok)",
        "tp_start_measured": " ({degree} rank; son başlangıcı{with_ranks} yükleme ve ısınma için {seconds} sürdü)",
        "tp_with_ranks": " ({ranks} rank ile)",
        "tp_note_other": " {degree} değil, {ranks} ranklı hazır grupta çalışır: **Grubu başlat** onu değiştirir{cost}.",
        "tp_note": " {ranks} ranklı hazır grupta çalışır.",
        "tp_no_logs": "Rank günlüğü yok: tensör paralel grup başlatılmadı.",
        "sys_head": "Sistem", "sys_device": "Aygıt", "sys_model": "Model", "sys_dtype": "Veri türü",
        "sys_default_mode": "Varsayılan mod", "sys_engine": "Motor", "sys_active_mode": " · etkin mod {mode}",
        "sys_compile_backend": "Derleme arka ucu", "sys_cache": "Derleme önbelleği", "sys_cores": "NeuronCore'lar",
        "sys_memory": "Bellek", "sys_memory_value": "RSS {rss}, aygıt {device}", "sys_lock": "Yalnızca sıcak kilidi",
        "sys_host_ops": "Ana makinede çalışan işlemler (CPU'ya geri dönüş)",
        "sys_last_error": "Son hata", "on": "açık", "off": "kapalı", "none": "yok", "resolving": "belirleniyor",
        "tp_head": "Tensör paralel", "tp_row_state": "Durum", "tp_row_ranks": "Rank sayısı",
        "tp_row_each": "Her rank çalıştırır", "tp_row_cores": "NeuronCore'lar", "tp_no_cores": "bu aygıtta yok",
        "tp_row_pids": "Rank pid'leri", "tp_row_error": "Grup hatası", "tp_row_request": "Son başarısız istek",
        "tp_row_load": "Yükleme / ısınma", "tp_row_call": "Son çağrı",
        "tp_call_value": "{round_trip} gidiş-dönüş, işçilerin kendi süresinin {overhead} üstünde",
    },
}


def language(request: Any = None) -> str:
    """``tr`` when the browser's first language is Turkish (``Accept-Language: tr-TR,…``), else ``en``.
    ``request`` is a ``gr.Request`` (or anything with ``headers``); None means English."""
    headers = getattr(request, "headers", None) or {}
    accept = headers.get("accept-language") or ""
    first = accept.split(",")[0].split(";")[0].strip().lower()
    return "tr" if first.split("-")[0] == "tr" else DEFAULT


def text(lang: str, key: str, **values: Any) -> str:
    """The sentence for ``key`` in ``lang`` (English when the language is unknown), filled in."""
    table = MESSAGES.get(lang) or MESSAGES[DEFAULT]
    template = table.get(key) or MESSAGES[DEFAULT][key]
    return template.format(**values) if values else template


def error_code(exc: BaseException) -> str:
    """The error class's own code (``backend.errors``: ``locked``, ``not_ready``, ``group_dead``, ...),
    ``invalid.<field>`` for InvalidRequest naming a field the page knows; ``error`` for anything else."""
    if isinstance(exc, InvalidRequest):
        return f"invalid.{exc.field}" if exc.field in INVALID_FIELDS else "invalid"
    return exc.code if isinstance(exc, StudioError) else "error"


def error_detail(exc: BaseException) -> str:
    """The backend's own words (English): for InvalidRequest without the field, which the code names."""
    return exc.message if isinstance(exc, InvalidRequest) else str(exc)


def error_message(exc: BaseException, lang: str = DEFAULT) -> str:
    """The translated sentence for the error's code, then the backend's detail."""
    sentence = text(lang, "err_" + error_code(exc).replace(".", "_"))
    detail = error_detail(exc)
    return f"{sentence}: {detail}" if detail else sentence
