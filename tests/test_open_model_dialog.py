"""File › Open model… (issue 21): the dialog's model card equals the model's config on random
models of each open family (tests/open_models.py), as a folder and as a GGUF; a model the engine
cannot run shows the reason with Open off; opening imports it into a new run that chats as the
run does; and every place naming a tokenizer kind says byte-level BPE for one (not
SentencePiece, the old combo's text)."""

import json
import os
import shutil

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
pytest.importorskip("transformers")

from opencl_llm_studio.engine.files.model_card import tokenizer_name  # noqa: E402
from tests.open_models import CONFIGS, FAMILIES  # noqa: E402

PRE = {"smollm2": "smollm", "llama32": "llama-bpe"}   # llama.cpp's pre-tokenizer names


def _dialog(qtbot, path, **kw):
    from opencl_llm_studio.studio.ui.dialogs.open_model_dialog import OpenModelDialog
    d = OpenModelDialog(**kw)
    qtbot.addWidget(d)
    with qtbot.waitSignal(d.cardRead, timeout=120_000):
        d.set_path(path)
    return d


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("form", ["folder", "gguf"])
def test_the_card_shows_the_models_own_config(qtbot, family, form, open_folders, open_ggufs):
    folder = open_folders[family]
    hf = json.loads((folder / "config.json").read_text())
    d = _dialog(qtbot, folder if form == "folder" else open_ggufs[family], batch_size=4)
    assert d.open_button.isEnabled() and d.refusal.isHidden() and d.is_open()
    card = d.card()
    assert (card["layers"], card["heads"], card["kv_heads"], card["vocab_size"],
            card["context_length"], card["tied_embeddings"]) == (
        hf["num_hidden_layers"], hf["num_attention_heads"], hf["num_key_value_heads"],
        hf["vocab_size"], hf["max_position_embeddings"], hf["tie_word_embeddings"])
    assert card["rope_base"] == CONFIGS[family]["rope_theta"]
    assert d.row_text("heads").startswith(
        f"{hf['num_attention_heads']} / {hf['num_key_value_heads']} (grouped-query")
    assert d.row_text("layers").startswith(str(hf["num_hidden_layers"]))
    assert d.row_text("vocabulary") == f"{hf['vocab_size']:,} tokens"
    assert d.row_text("embeddings") == ("tied" if hf["tie_word_embeddings"] else "untied")
    assert d.row_text("file_type") == "F32"
    tok = d.row_text("tokenizer")
    if family in PRE:
        assert tok == f"byte-level BPE, pre-tokenizer {PRE[family]}"
    else:
        assert tok == "SentencePiece BPE (Llama-2 layout)"
    jinja = folder / "chat_template.jinja"   # where transformers writes it, else in the config
    template = jinja.read_text() if jinja.is_file() else json.loads(
        (folder / "tokenizer_config.json").read_text())["chat_template"]
    first = template.strip().splitlines()[0]
    assert d.row_text("template").splitlines()[0] == first
    scaling = CONFIGS[family].get("rope_scaling")
    assert ("llama3 x32 scaling" in d.row_text("rope")) == bool(scaling)
    assert "GiB at batch 4" in d.row_text("memory")


def test_a_quantized_gguf_shows_its_file_type(qtbot, open_folders, tmp_path):
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from opencl_llm_studio.engine.files.hf.load import import_hf
    bundle = import_hf(open_folders["smollm2"])[0]
    path = export_gguf(bundle, tmp_path / "q8.gguf", dtype="q8_0").path
    d = _dialog(qtbot, path)
    assert d.row_text("file_type") == "Q8_0"


@pytest.mark.parametrize("change,reason", [({"attention_bias": True}, "bias"),
                                           ({"hidden_act": "gelu"}, "gelu")])
def test_a_model_the_engine_cannot_run_shows_why_and_cannot_be_opened(qtbot, open_folders,
                                                                      tmp_path, change, reason):
    folder = tmp_path / "bad"
    shutil.copytree(open_folders["smollm2"], folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **change}))
    d = _dialog(qtbot, folder)
    assert not d.open_button.isEnabled() and d.card() is None
    assert not d.refusal.isHidden() and reason in d.refusal.text()
    assert d.refusal.text() == d.reason and "Traceback" not in d.reason


def test_a_file_that_is_no_model_is_refused(qtbot, tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    d = _dialog(qtbot, junk)
    assert not d.open_button.isEnabled() and not d.refusal.isHidden() and d.reason


def test_open_imports_a_run_that_chats_and_names_its_tokenizer(qtbot, window, open_ggufs,
                                                                tmp_path):
    from opencl_llm_studio.engine.files import checkpoint
    from opencl_llm_studio.engine.data.dialogue import Message
    from opencl_llm_studio.engine.training.opening import load_session
    from tests.studio_helpers import chat
    w = window
    runs_before = set(w.autosave_box.runs_root().glob("*"))
    d = w.files.pretrained.open_model()   # the window's child, deleted on close
    with qtbot.waitSignal(d.cardRead, timeout=120_000):
        d.set_path(open_ggufs["smollm2"])
    with qtbot.waitSignal(w.modelOpened, timeout=120_000) as opened:
        d.open_button.click()
    info = opened.args[0]
    run = next(iter(set(w.autosave_box.runs_root().glob("*")) - runs_before))
    assert checkpoint.checkpoint_path(run).exists() and info.path == str(run)
    # the settings' tokenizer field names the model's tokenizer (old: "BPE (SentencePiece)")
    name = "byte-level BPE, pre-tokenizer smollm"
    assert w.settings_panel.tokenizer_combo.currentText() == name == info.tokenizer
    w.chat_panel.top_k.setValue(1)      # greedy: the same answer as the run's own chat
    w.chat_panel.max_tokens.setValue(8)
    answer = chat(qtbot, w, "Hello there")
    assert answer is not None
    want = load_session(run).chat([Message("user", "Hello there")], top_k=1,
                                          max_new_tokens=8)
    assert str(answer) == str(want)
    w.training.new_model()   # the field gives the person's own choice back
    assert w.settings_panel.tokenizer_kind() == "bpe"
    assert w.settings_panel.tokenizer_combo.currentText() == tokenizer_name("bpe")
    from opencl_llm_studio.studio.runs import scan
    listed = next(r for r in scan([w.autosave_box.runs_root()]) if r.name == run.name)
    assert listed.tokenizer.startswith(name)   # the Runs list and `llm-studio runs` too


def test_the_cli_import_card_and_runs_name_the_tokenizer_by_its_kind(open_folders, tmp_path,
                                                                      capsys):
    from opencl_llm_studio.studio.cli import main
    assert main(["import", str(open_folders["llama32"]), str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "tokenizer byte-level BPE, pre-tokenizer llama-bpe" in out   # old: "byte_bpe (...)"
    assert main(["runs", str(tmp_path)]) == 0
    assert "byte-level BPE, pre-tokenizer llama-bpe" in capsys.readouterr().out


def test_screenshot_of_the_dialog(qtbot, open_folders, tmp_path):
    """STUDIO_SCREENSHOTS=1 writes it to docs/screenshots/ (as test_studio_screenshots)."""
    from pathlib import Path

    from opencl_llm_studio.studio.ui import theme
    d = _dialog(qtbot, open_folders["llama32"], batch_size=8)
    d.setStyleSheet(theme.STYLESHEET)
    d.resize(640, d.sizeHint().height())
    d.show()
    qtbot.waitExposed(d)
    out = tmp_path
    if os.environ.get("STUDIO_SCREENSHOTS") == "1":
        out = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
    path = out / "10-open-model.png"
    assert d.grab().save(str(path)) and path.stat().st_size > 10_000


def test_a_failed_import_says_so_and_gives_the_claimed_run_folder_back(qtbot, window, tmp_path):
    from opencl_llm_studio.studio.protocol import LoadJob
    from opencl_llm_studio.studio.run_folder import new_run_dir
    w = window
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    run = new_run_dir(w.autosave_box.runs_root())
    assert run.is_dir()
    with qtbot.waitSignal(w.errorShown, timeout=60_000) as shown:
        w.controller.load(LoadJob(str(junk), import_to=str(run)))
    assert shown.args[0] == "Could not open the model" and "junk.gguf" in shown.args[1]
    assert not run.exists() and not w.controller.has_model


def test_the_dialog_grows_to_show_the_whole_card(qtbot, open_folders, tmp_path):
    """File › Open model… shows the dialog empty and fills the card in when it has been read:
    the dialog grows so that no row is cut (was: the empty dialog's height stayed, and the
    chat template's two lines and the wrapped memory row were clipped; the documented
    screenshot resized the dialog after the read, which hid it). A refusal's text too."""
    from opencl_llm_studio.studio.ui import theme
    from opencl_llm_studio.studio.ui.dialogs.open_model_dialog import OpenModelDialog
    from tests.studio_helpers import settle
    (tmp_path / "bad.gguf").write_bytes(b"\x00" * 64)
    for path in (open_folders["smollm2"], tmp_path / "bad.gguf"):
        d = OpenModelDialog(batch_size=8)
        qtbot.addWidget(d)
        d.setStyleSheet(theme.STYLESHEET)
        d.show()                               # as the menu does: before the card is read
        qtbot.waitExposed(d)
        with qtbot.waitSignal(d.cardRead, timeout=120_000):
            d.set_path(path)
        settle()
        shown = [*d.values.values(), d.refusal]
        cut = [w.objectName() for w in shown if w.isVisible()
               and w.height() < w.heightForWidth(w.width())]
        assert not cut, (path, cut)
        assert d.height() >= d.layout().totalHeightForWidth(d.width())
