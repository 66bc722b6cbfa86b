"""Presets (engine/training/presets.py) and the CLI's --preset / --dropout: one table, explicit options win,
dropout reaches the checkpoint header."""

import argparse

import pytest

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.training.presets import PRESETS, get_preset
from opencl_llm_studio.engine.training.opening import load_session
from opencl_llm_studio.studio.cli import build_parser, main
from opencl_llm_studio.studio.cli.options import configs
from tests.helpers import TINY


def train_args(*argv) -> argparse.Namespace:
    return build_parser().parse_args(["train", "--out", "unused", *argv])


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_is_valid_and_says_what_to_expect(name):
    p = get_preset(name)
    mc, tc = p.configs()
    mc.validate(), tc.validate()
    assert set(p.model) <= set(ModelConfig.__dataclass_fields__)
    assert set(p.train) <= set(TrainConfig.__dataclass_fields__)
    text = p.description.lower()
    assert "validation" in text and ("minute" in text or " s " in text)
    assert "tinyshakespeare" in text


def test_unknown_preset_names_the_choices():
    with pytest.raises(ConfigError) as e:
        get_preset("laptop")
    assert all(name in e.value.hint for name in PRESETS)


def test_cli_preset_fills_the_configs_and_explicit_options_win():
    p = PRESETS["cpu"]
    mc, tc = configs(train_args("--preset", "cpu"))
    for field, value in p.model.items():
        assert getattr(mc, field) == value, field
    for field, value in p.train.items():
        assert getattr(tc, field) == value, field
    mc, tc = configs(train_args("--preset", "cpu", "--d-model", "64", "--lr", "1e-3",
                                 "--dropout", "0.3", "--steps", "7"))
    assert (mc.d_model, tc.learning_rate, tc.dropout, tc.pretrain_steps) == (64, 1e-3, 0.3, 7)
    assert mc.n_layer == p.model["n_layer"] and tc.warmup_steps == p.train["warmup_steps"]


def test_cli_without_preset_keeps_its_defaults():
    mc, tc = configs(train_args())
    assert (mc.d_model, mc.context_length, tc.dropout, tc.pretrain_steps) == (128, 64, 0.0, 600)


def test_bad_preset_or_dropout_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--out", str(tmp_path / "a"), "--preset", "laptop"])
    assert e.value.code == 2 and "gpu-discrete" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:   # range-checked by the parser (studio/cli/inputs.py)
        main(["train", "--out", str(tmp_path / "b"), "--dropout", "1.2", *TINY])
    assert e.value.code == 2 and "--dropout" in capsys.readouterr().err


def test_dropout_is_stored_in_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "3", "--no-tune", "--dropout", "0.25",
                 *TINY]) == 0
    assert load_session(out).train_config.dropout == 0.25


def test_studio_preset_box_sets_the_fields_and_editing_shows_custom(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    combo = panel.preset_combo
    assert combo.currentData() == "" and panel.train_config().dropout == 0.0
    name = "gpu-discrete"
    combo.activated.emit(combo.findData(name))
    p = PRESETS[name]
    mc, tc = panel.model_config(), panel.train_config()
    assert all(getattr(mc, k) == v for k, v in p.model.items())
    assert all(getattr(tc, k) == v for k, v in p.train.items())  # beta2 too: no field for it
    assert combo.currentData() == name and panel.is_valid()
    panel.set_value("dropoutSpin", 0.35)  # an explicit value wins; the box says so
    assert panel.train_config().dropout == 0.35 and combo.currentData() == ""
    assert panel.train_config().beta2 == p.train["beta2"]
    s = QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat)
    combo.activated.emit(combo.findData("cpu"))
    panel.save(s)
    other = SettingsPanel()
    qtbot.addWidget(other)
    other.restore(s)
    assert other.preset_combo.currentData() == "cpu"
    assert other.train_config() == panel.train_config()
