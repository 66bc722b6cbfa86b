"""Issue 16: the memory the studio shows is the engine's own number (engine.model.memory, what
check_fits enforces), for the chosen device; before, the studio had its own formula that showed
1.4-1.7x less than the engine refused at."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from opencl_llm_studio.engine.errors import ConfigError  # noqa: E402
from opencl_llm_studio.engine.model.memory import check_fits, training_bytes  # noqa: E402
from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel, human_bytes  # noqa: E402


@pytest.mark.parametrize("d,L,T,B", [(128, 4, 64, 16), (512, 8, 512, 32), (96, 3, 33, 5)])
def test_shown_estimate_is_the_engines(qtbot, rt, d, L, T, B):
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    panel.set_device(rt.info)
    for name, value in (("dModelSpin", d), ("nLayerSpin", L), ("contextLengthSpin", T),
                        ("batchSizeSpin", B), ("nHeadSpin", 4)):
        panel.set_value(name, value)
    cfg = panel.model_config()
    need = training_bytes(cfg, B, rt.info)[0]
    assert f"≈ {human_bytes(need)} to train" in panel.estimate_label.text()
    assert panel.training_bytes(cfg, B) == need
    try:                                   # the number shown is the number enforced
        assert check_fits(cfg, B, rt.info) == need
    except ConfigError as e:
        assert f"{need / 2**30:.2f} GiB" in str(e)


def test_estimate_follows_the_device(qtbot, rt):
    import dataclasses
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    panel.set_value("contextLengthSpin", 512)
    cfg = panel.model_config()
    B = panel.spins["batchSizeSpin"].value()
    big = dataclasses.replace(rt.info, type="GPU", global_mem_bytes=141 * 2**30,
                              max_alloc_bytes=35 * 2**30)
    panel.set_device(big)   # a big GPU keeps (T, T) attention buffers: more memory
    assert panel.training_bytes(cfg, B) == training_bytes(cfg, B, big)[0]
    assert panel.training_bytes(cfg, B) > training_bytes(cfg, B, None)[0]
