"""The page's two languages: the tables, the language a request gets, error codes, and what the
handlers say in Turkish."""

import ast
import re
import string
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from backend import errors
from backend.errors import (
    BackendBusy,
    BackendNotReady,
    CompileFailure,
    GenerationCancelled,
    GenerationFailed,
    GroupDead,
    InvalidRequest,
    ModelNotFound,
    ShapeLimitReached,
    ShapeLocked,
    StudioError,
)
from backend.serving import compile_state
from tests.conftest import ROOT
from tests.ui.fake_engines import a_status, calm_refusal, system_views
from ui import i18n
from ui.views_common import MODE_KEYS
from ui.views_system import system_markdown
from ui.views_tp import TP_RUNNING, tp_markdown

UI = Path(__file__).resolve().parents[2] / "ui"
TR = SimpleNamespace(headers={"accept-language": "tr-TR,tr;q=0.9,en;q=0.8"})
EN = SimpleNamespace(headers={"accept-language": "en-US,en;q=0.9"})


def _fields(template: str) -> set[str]:
    return {name for _lit, name, _spec, _conv in string.Formatter().parse(template) if name}


def test_both_languages_have_every_key_no_empty_string_and_the_same_placeholders():
    en, tr = i18n.MESSAGES["en"], i18n.MESSAGES["tr"]
    assert set(i18n.MESSAGES) == set(i18n.LANGUAGES) == {"en", "tr"}
    assert set(en) == set(tr)
    for key in en:
        assert en[key].strip() and tr[key].strip(), key
        assert _fields(en[key]) == _fields(tr[key]), key
    assert "." not in "".join(en)  # the browser's i18n would read a dot as a nested key


def test_every_key_the_page_and_the_code_use_is_in_the_table():
    used = set()
    for file in UI.glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                position = {"I18N": 0, "text": 1, "t": 0}.get(node.func.id)
                if position is not None and len(node.args) > position \
                        and isinstance(node.args[position], ast.Constant):
                    used.add(node.args[position].value)
    used |= set(MODE_KEYS.values())
    used |= {f"engine_state_{s}" for s in ("idle", "loading", "warming", "ready", "failed")}
    used |= {f"tp_state_{s}" for s in TP_RUNNING + ("stopping", "stopped", "dead")}
    used |= {f"phase_{p}" for p in ("encoding", "compiling", "denoising", "decoding")}
    used |= {f"badge_{s}" for s in ("warm", "cold", "compiling", "failed", "locked")}
    used |= {f"note_{key}" for key in compile_state.NOTES}
    used |= {"err_" + i18n.error_code(InvalidRequest(f, "x")).replace(".", "_") for f in i18n.INVALID_FIELDS}
    assert len(used) > 100 and used <= set(i18n.MESSAGES["en"]), used - set(i18n.MESSAGES["en"])


@pytest.mark.parametrize("header, lang", [
    ("tr-TR,tr;q=0.9,en;q=0.8", "tr"), ("tr", "tr"), ("TR-tr", "tr"), ("en-US,en;q=0.9", "en"),
    ("de-DE,tr;q=0.9", "en"), ("", "en"), (None, "en")])
def test_the_browsers_first_language_picks_turkish_or_english(header, lang):
    request = SimpleNamespace(headers={"accept-language": header} if header is not None else {})
    assert i18n.language(request) == lang
    assert i18n.language(None) == "en"


@pytest.mark.parametrize("exc, code", [
    (InvalidRequest("prompt", "is empty; describe the image you want"), "invalid.prompt"),
    (InvalidRequest("width", "must be a whole number of pixels, got 'x'"), "invalid.width"),
    (InvalidRequest("size", "width 1000 is not a multiple of 16; nearest valid size is 1008x1024"), "invalid.size"),
    (InvalidRequest("tp_degree", "3 does not divide 24"), "invalid.tp_degree"),
    (InvalidRequest("something_new", "bad"), "invalid"),
    (ShapeLocked("1024x1024 is not warm"), "locked"), (ShapeLimitReached("8 graphs"), "limit"),
    (BackendNotReady("the model is still loading"), "not_ready"), (BackendBusy("a warm-up is running"), "busy"),
    (GenerationCancelled("stopped after step 2"), "cancelled"), (CompileFailure("neuronx-cc failed"), "compile_failed"),
    (GroupDead("rank 1 exited"), "group_dead"), (GenerationFailed("boom"), "failed"),
    (ModelNotFound("no such model"), "model_not_found"), (StudioError("odd"), "error"),
])
def test_error_codes_and_messages_in_both_languages(exc, code):
    assert i18n.error_code(exc) == code
    key = "err_" + code.replace(".", "_")
    detail = exc.message if isinstance(exc, InvalidRequest) else str(exc)
    for lang in ("en", "tr"):
        assert i18n.error_message(exc, lang) == f"{i18n.MESSAGES[lang][key]}: {detail}"
    assert i18n.error_message(exc, "tr") != i18n.error_message(exc, "en")


# Fields the backend names that never reach a page: the worker's own protocol checks (a request's
# type, a job too long for the ranks' broadcast) and the manager's engine names (the page sends
# only its own). A refusal naming any of them still gets the generic sentence.
NOT_ON_A_PAGE = {"type", "request", "engine", "value"}  # "value": a flag's number, turned into ValueError


def test_every_field_the_backend_names_has_a_sentence():
    """The fields are collected from the backend's source (every ``InvalidRequest("field", ...)``
    and every whole-number or number check that names one), not from the UI's own list."""
    named = set()
    for path in (ROOT / "backend").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        named |= set(re.findall(r'(?:InvalidRequest|whole_number|_number|_as_int)\(\s*"([a-z_]+)"', source))
    assert {"prompt", "width", "height", "size", "steps", "tp_degree"} <= named  # the scan finds what it should
    for field in sorted(named - NOT_ON_A_PAGE):
        assert field in i18n.INVALID_FIELDS, field
    for field in i18n.INVALID_FIELDS:
        for lang in i18n.LANGUAGES:
            assert f"err_invalid_{field}" in i18n.MESSAGES[lang], (lang, field)
    for code in errors.codes():
        assert f"err_{code}" in i18n.MESSAGES["en"]


def test_a_turkish_page_gets_turkish_errors_that_still_name_the_nearest_size(studio):
    line = calm_refusal(studio.studio_tab.generate_from_page("a fox", 1000, 128, "eager", 4, 1.0, 0, True, [], page=TR))
    # The field and the reason in Turkish (the API and the CLI say the backend's English).
    assert line == ("**Çalıştırılmadı.** Görsel boyutu geçerli değil: genişlik 1000, 16 sayısının katı değil; "
                    "en yakın geçerli boyut 1008x128")
    assert re.search("The image size is not valid: width 1000 .* 1008x128", calm_refusal(
        studio.studio_tab.generate_from_page("a fox", 1000, 128, "eager", 4, 1.0, 0, True, [], page=EN)))
    assert "İstem geçerli değil: boş; istediğiniz görseli anlatın" in calm_refusal(
        studio.studio_tab.generate_from_page("", 64, 64, "eager", 4, 1.0, 0, True, [], page=TR))
    with pytest.raises(gr.Error, match="TP derecesi geçerli değil: tam sayı olmalı, 2.5 verildi"):
        studio.system_tab.start_tp(2.5, TR)


def test_a_turkish_page_gets_turkish_status_lines_with_the_same_numbers(studio):
    _p, info, *_ = studio.studio_tab.generate_from_page("a fox", 256, 128, "compiled", 4, 1.0, 7, False, [], page=TR)
    assert info.startswith("**256x128**, compiled, 4 adım, tohum `7` — toplam **2.0 s**:")
    assert "derlendi: 1.5 s içinde 1 graf" in info
    # the estimate for a cold shape is the compile just measured (the nearest in token count)
    engine, cost, badges, tp_badge = studio.studio_tab.refresh_studio("compiled", 1024, 1024, 4, None, page=TR)[:4]
    assert cost == ("**Soğuk** — **compiled** modunda **1024x1024**: önce derlenecek "
                    "(yaklaşık 1.5 s, geçmiş 1 derlemeye göre). En yakın sıcak imza: **256x128**.")
    assert studio.studio_tab.refresh_studio("compiled", 1024, 1024, 4, None, page=EN)[1] == (
        "**Cold** — **1024x1024** in **compiled** mode: it will compile first (about 1.5 s, from 1 past compile). "
        "Nearest warm: **256x128**.")
    assert '<span class="ns-badge ns-cold" data-shape="1024x1024" data-state="cold"' in badges
    assert "1:1 · 1024x1024 · soğuk</span>" in badges
    assert "Tensör paralel grup: durdu" in tp_badge and 'data-state="stopped"' in tp_badge
    assert "**Geçersiz** — Görsel boyutu geçerli değil:" in studio.studio_tab.refresh_studio(
        "eager", 1000, 1024, 4, None, page=TR)[1]
    system, _table, _warm, _badge, tp_md, replicas, _ray, _status = system_views(studio, TR)
    assert "| Sistem | |" in system and "| Aygıt |" in system
    assert replicas.startswith("Çalışan kopya yok.")
    assert "Rank günlüğü yok: tensör paralel grup başlatılmadı." == studio.system_tab.show_tp_logs(TR)
    assert studio.studio_tab.refresh_studio("tp", 64, 64, 4, 2, page=TR)[1].startswith(
        "**Durdu** — tensör paralel grup çalışmıyor")
    assert studio.page_labels(TR)[0]["label"] == "Görsel" and studio.page_labels(None)[0]["label"] == "Image"
    with pytest.raises(gr.Error, match="Kopya sayısı geçerli değil: tam sayı olmalı, 1.5 verildi"):
        studio.system_tab.start_replicas(1.5, TR)
    assert "**Kopyalar**: 2 kopyanın 2 tanesi hazır, 0 meşgul, 0 yeniden başlatıldı" in \
        studio.system_tab.start_replicas(2, TR)
    assert "| Kopya | durum | NeuronCore | pid | Sunulan | Sıcak boyutlar |" in system_views(studio, TR)[5]


def test_the_cost_lines_notes_speak_turkish_too(studio):
    """The backend's notes on a ready (mode, shape) reach a Turkish page in Turkish."""
    assert studio.studio_tab.refresh_studio("eager", 64, 64, 4, None, page=TR)[1] == (
        "**Hazır** — **eager** modunda **64x64**: henüz kararlı süre yok (eager modu bu cihazda derlenmez).")
    studio.studio_tab.generate_from_page("a fox", 256, 128, "compiled", 4, 1.0, 7, False, [], page=TR)
    cost = studio.studio_tab.refresh_studio("compiled", 128, 256, 4, None, page=TR)[1]
    assert "(büyük olasılıkla 256x128 grafiğini yeniden kullanır: aynı toplu iş ve token sayısı)." in cost, cost
    assert "probably" not in cost
    assert "(probably reuses the graph of 256x128: the same batch and token count)." in \
        studio.studio_tab.refresh_studio("compiled", 128, 256, 4, None, page=EN)[1]


def test_the_grammar_and_edit_help_speak_the_pages_language(tmp_path):
    """The embedded model's card reads a grammar: its help sentences (under the prompt, and in the
    Edit area: what an edit may ask) are Turkish on a Turkish page, the hint with the grammar's
    Turkish words (it reads both)."""
    from types import SimpleNamespace as NS

    from backend.models.card import card_for
    from ui.handlers import Studio

    studio = Studio(NS(card=card_for("embedded", tmp_path)))
    _image, turkish, turkish_edits = studio.page_labels(TR)
    _image, english, english_edits = studio.page_labels(EN)
    assert "<summary>Küçük bir dilbilgisiyle" in turkish and "</summary>Bu model en fazla iki şekil (daire" in turkish
    assert "İngilizce sözcükleri de okur" in turkish  # its Turkish words, and the English ones too
    assert "</summary>This model draws up to two shapes (circle" in english
    assert (turkish_edits["value"].startswith("Bu model bir referans görselde")
            and "“remove the pink star”" in turkish_edits["value"])
    assert (english_edits["value"].startswith("This model changes one thing")
            and "“make the red circle blue”" in english_edits["value"])


def test_the_table_has_each_key_once_per_language(tmp_path):
    """A key written twice in one language's table would silently keep the last: the first meaning is
    lost without a trace. The loader refuses it."""
    for lang in i18n.LANGUAGES:
        assert i18n.load_table(i18n.LOCALES / f"{lang}.json") == i18n.MESSAGES[lang]
    twice = tmp_path / "en.json"
    twice.write_text('{"a": "one", "b": "two", "a": "three"}')
    with pytest.raises(ValueError, match=r"\['a'\]"):
        i18n.load_table(twice)


def test_the_system_tabs_values_speak_turkish_too():
    status = a_status(device={"kind": "cpu", "reason": "auto: TorchNeuron not installed, no CUDA device"},
                      engine={"engine": "in-process"}, cache={}, memory={}, dtype="float32")
    shown = system_markdown(status, "tr")
    assert "| Aygıt | cpu — otomatik: TorchNeuron kurulu değil, CUDA aygıtı yok |" in shown
    assert "| Motor | süreç içi · hazır |" in shown
    assert "durdu" in tp_markdown({"state": "stopped"}, "tr")
