"""A failed export in the studio loses nothing the person chose: the error is shown, and the
next Export… opens on the same path and type (issue 22, "Refused means nothing changed")."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from tests.studio_helpers import open_model  # noqa: E402

from opencl_llm_studio.studio.cli import main  # noqa: E402
from opencl_llm_studio.studio.ui.dialogs.export_dialog import ExportDialog  # noqa: E402


@pytest.mark.parametrize("dtype", ["f16", "hf"])
def test_a_failed_export_keeps_the_choice(qtbot, window, tmp_path, monkeypatch, dtype):
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), "--d-model", "32", "--n-layer", "1", "--n-head",
                 "2", "--context-length", "32", "--vocab-size", "320", "--batch-size", "4",
                 "--steps", "3", "--tune-steps", "1", "--quiet"]) == 0
    open_model(qtbot, window, run / "checkpoint.npz")
    (tmp_path / "blocker").write_text("a file where a folder is needed")
    target = str(tmp_path / "blocker" / ("m" if dtype == "hf" else "m.gguf"))
    seen = []

    def accept(dialog):   # the person types a path that cannot be written, picks a type
        seen.append(dialog.choice())
        dialog.preset(target, dtype)
        return ExportDialog.Accepted
    monkeypatch.setattr(ExportDialog, "exec", accept)
    window.files.export_clicked()
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=60_000)
    assert "Export failed" in window.last_error[0]

    def look(dialog):     # and opens Export… again
        seen.append(dialog.choice())
        return ExportDialog.Rejected
    monkeypatch.setattr(ExportDialog, "exec", look)
    window.files.export_clicked()
    assert seen[-1] == (target, dtype) != seen[0]
