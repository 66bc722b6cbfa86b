"""The studio with a pretrained open model opened (issue 21): the settings panel's model is the
model's own (grouped-query attention, its vocabulary and widths, which the fields cannot all
show), says what the fields do not, and New model gives the fields back."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
pytest.importorskip("transformers")

from opencl_llm_studio.studio.protocol import LoadJob, ModelSource  # noqa: E402
from tests.open_models import build  # noqa: E402


def test_an_opened_open_model_is_shown_as_it_is(qtbot, window, tmp_path):
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from opencl_llm_studio.engine.files.hf.load import import_hf
    gguf = export_gguf(import_hf(build("smollm2", tmp_path / "smol"))[0],
                       tmp_path / "smol.gguf").path
    w = window
    with qtbot.waitSignal(w.controller.loaded, timeout=120_000):
        w.controller.load(LoadJob(str(gguf), source=ModelSource.GGUF,
                                  pretrain_text=w.data_panel.pretrain_text,
                                  tune_text=w.data_panel.tune_text or None))
    qtbot.waitUntil(lambda: w.controller.has_model, timeout=30_000)
    session = w.controller.worker.session
    panel = w.settings_panel
    assert panel.model_config() == session.model_config   # old: n_kv_head 0, RoPE base 10000
    assert panel.opened_label.isVisible()
    assert "2 key-value heads" in panel.opened_label.text()
    assert "RoPE base 100000" in panel.opened_label.text()
    # its tokenizer by its kind (old: the training choice's "BPE (SentencePiece)" stayed)
    assert panel.tokenizer_combo.currentText() == "byte-level BPE, pre-tokenizer smollm"
    w.training.new_model()
    assert not panel.opened_label.isVisible()
    assert panel.model_config().n_kv_head == 0             # the fields again
    assert panel.tokenizer_kind() == "bpe" and panel.tokenizer_combo.count() == 2
