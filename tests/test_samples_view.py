"""The Samples tab (studio.ui.panels.samples_panel) shows what the model wrote without blank screens."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")


def test_a_sample_of_only_line_breaks_is_one_short_line(qtbot):
    """A tiny model's tune sample is often 32 line breaks: shown as one muted "↵ × 32" (was 32
    empty lines, a blank half-screen between the prompt and the next sample); the text around a
    run, and single or double line breaks, stay as written."""
    from opencl_llm_studio.studio.ui.panels.samples_panel import SamplesPanel
    panel = SamplesPanel()
    qtbot.addWidget(panel)
    panel.add(6, "tune", [("Q?", "Q?" + "\n" * 32),
                          ("Paris is the", "Paris is the city\n\nof light\n \n\n\nand more")])
    shown = panel.text()
    assert "Q?\n↵ × 32\nParis is the" in shown and "\n\n\n" not in shown
    assert "city\n\nof light\n↵ × 4\nand more" in shown
