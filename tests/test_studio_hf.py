"""The studio's side of issue 14: the export dialog writes a Hugging Face folder, and File ›
Open Hugging Face folder opens one (a folder from scale-out/train_ddp.py carries its texts)."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
from PySide6.QtCore import QObject  # noqa: E402

from tests.studio_helpers import configure, train  # noqa: E402
from opencl_llm_studio.studio.protocol import ModelSource, Outcome  # noqa: E402


def test_export_dialog_checks_the_target_by_format(qtbot, tmp_path):
    from opencl_llm_studio.engine.config import ModelConfig
    from opencl_llm_studio.studio.ui.dialogs.export_dialog import ExportDialog
    d = ExportDialog(ModelConfig(vocab_size=512, d_model=64, n_layer=1, n_head=2,
                                 context_length=32), tmp_path / "model.gguf")
    qtbot.addWidget(d)
    d.format_combo.setCurrentIndex(d.format_combo.findData("hf"))
    assert d.path_edit.text() == str(tmp_path / "model") and not d.dtype_combo.isEnabled()
    assert d.export_button.isEnabled() and d.choice() == (str(tmp_path / "model"), "hf")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("taken")
    d.path_edit.setText(str(tmp_path / "taken"))
    assert not d.export_button.isEnabled() and "not empty" in d.export_button.toolTip()
    d.format_combo.setCurrentIndex(d.format_combo.findData("gguf"))
    assert d.path_edit.text().endswith("taken.gguf") and d.dtype_combo.isEnabled()


def test_export_hf_then_open_it(qtbot, window, tmp_path, monkeypatch):
    configure(window, pretrainStepsSpin=6, tuneStepsSpin=4)
    assert train(qtbot, window).outcome is Outcome.FINISHED
    folder = tmp_path / "hf-model"
    from opencl_llm_studio.studio.ui.dialogs.export_dialog import ExportDialog

    def accept(dialog):   # the person picks "Hugging Face folder" and a new folder
        dialog.format_combo.setCurrentIndex(dialog.format_combo.findData("hf"))
        dialog.path_edit.setText(str(folder))
        return ExportDialog.Accepted
    monkeypatch.setattr(ExportDialog, "exec", accept)
    with qtbot.waitSignal(window.exportFinished, timeout=60_000) as blocker:
        window.findChild(QObject, "exportButton").click()
    assert blocker.args[0].dtype == "hf" and (folder / "config.json").is_file()
    from opencl_llm_studio.engine.files.hf.load import import_hf
    assert import_hf(folder)[0].config == window.controller.model_config
    with qtbot.waitSignal(window.controller.host.worker.loaded, timeout=60_000) as loaded:
        window.files.open_hf(str(folder))
    info = loaded.args[0]
    assert info is not None and info.source is ModelSource.HF and info.step == 10
    assert window.last_error is None
