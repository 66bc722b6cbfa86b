"""Issue 34, the studio's half of LoRA: the settings column's Tuning method (off with the reason
where LoRA cannot run, on for a run imported from a GGUF at step 0, fixed for a LoRA run), the
estimate that follows it, Continue with LoRA through the worker (a LoRA session over the
quantized base, trained and saved), and the export dialog's adapter formats."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from opencl_llm_studio.engine.config import LORA_LR_FACTOR, LoraConfig, ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.errors import ConfigError  # noqa: E402
from opencl_llm_studio.studio.protocol import LoraOption  # noqa: E402
from opencl_llm_studio.studio.ui.run.worker_lora import NOT_IMPORTED_WHY  # noqa: E402

TUNE = "\n\n".join(f"User: What is the code word {i}?\nAssistant: The code word {i} is {w}."
                   for i, w in enumerate(["amber", "basalt", "cobalt"]))


def _panel(qtbot):
    from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    return panel


def _open(panel, option):
    """The panel as after opening a small model whose worker says `option`."""
    cfg = ModelConfig(d_model=64, n_layer=2, n_head=4, context_length=64, vocab_size=512)
    panel.set_from_configs(cfg, TrainConfig(pretrain_steps=0, learning_rate=2e-4), "", option)
    return cfg


def test_tuning_method_is_off_for_a_new_model_and_a_model_lora_cannot_tune(qtbot):
    panel = _panel(qtbot)
    t = panel.tuning
    assert not t.combo.isEnabled() and t.combo.currentData() == "full"
    assert "imported from a GGUF" in t.combo.toolTip()
    assert not t.combo.isVisibleTo(panel)   # a new model: nothing LoRA could tune
    _open(panel, LoraOption(NOT_IMPORTED_WHY))   # a run trained here from scratch
    assert t.combo.isVisibleTo(panel) and not t.combo.isEnabled()
    assert NOT_IMPORTED_WHY in t.combo.toolTip()
    _open(panel, LoraOption("This run has trained 5 steps since."))
    assert not t.combo.isEnabled() and "trained 5 steps" in t.combo.toolTip()
    assert t.lora_config() is None and not t.rank.isVisibleTo(panel)


def test_lora_estimate_follows_the_choice_and_the_rank(qtbot):
    from opencl_llm_studio.studio.lora_estimate import lora_training_bytes
    from opencl_llm_studio.studio.ui.panels.settings_fields import human_bytes
    panel = _panel(qtbot)
    cfg = _open(panel, LoraOption(base_bytes=3_000_000, base_name="base-q8.gguf"))
    t, lr = panel.tuning, panel.spins["learningRateSpin"]
    assert t.combo.isEnabled()
    full = panel.estimate_label.text()
    t.combo.setCurrentIndex(t.combo.findData("lora"))
    assert t.rank.isVisibleTo(panel) and "base-q8.gguf" in t.note.text()
    assert lr.value() == pytest.approx(2e-4 * LORA_LR_FACTOR)   # the rate it will train at
    at8 = panel.estimate_label.text()
    batch = panel.spins["batchSizeSpin"].value()
    need = lora_training_bytes(cfg, LoraConfig(8, 16.0), batch, 3_000_000)[0]
    assert at8 != full and "LoRA parameters" in at8 and f"≈ {human_bytes(need)} to tune" in at8
    t.rank.setValue(64)
    assert t.alpha.value() == 128.0   # 2 x rank until set by hand
    assert panel.estimate_label.text() != at8
    assert t.job_lora() == LoraConfig(64, 128.0).to_dict()
    t.combo.setCurrentIndex(t.combo.findData("full"))
    assert lr.value() == pytest.approx(2e-4) and panel.estimate_label.text() == full
    assert t.job_lora() is None


def test_spin_boxes_are_the_limits_table(qtbot):
    from opencl_llm_studio.engine.limits import LIMITS
    t = _panel(qtbot).tuning
    assert (t.rank.minimum(), t.rank.maximum()) == LIMITS["lora_rank"].bounds(1.0)
    assert t.alpha.minimum() > 0 and t.alpha.maximum() == LIMITS["lora_alpha"].hi
    assert t.dropout.minimum() == 0 and t.dropout.maximum() < 1   # [0, 1)


def test_lora_layers_and_dropout_reach_the_job_and_the_estimate(qtbot):
    """The studio sets what the CLI's --lora-targets and --lora-dropout set: the layers row
    (shown with LoRA only) changes the adapters' count in the estimate and the job; a LoRA run
    made with other targets shows them, fixed."""
    from opencl_llm_studio.engine.config import LORA_TARGETS
    panel = _panel(qtbot)
    _open(panel, LoraOption(base_bytes=3_000_000, base_name="base-q8.gguf"))
    t = panel.tuning
    assert not t.layers.isVisibleTo(panel)
    t.combo.setCurrentIndex(t.combo.findData("lora"))
    assert t.layers.isVisibleTo(panel) and t.layers.isEnabled()
    assert t.job_lora()["targets"] == list(LORA_TARGETS) and t.job_lora()["dropout"] == 0
    every = panel.estimate_label.text()
    t.layers.setCurrentIndex(t.layers.findText("Attention q, v"))
    t.dropout.setValue(0.05)
    assert t.job_lora() == LoraConfig(8, 16.0, 0.05, ("attn_q", "attn_v")).to_dict()
    assert panel.estimate_label.text() != every and "q and v only" in t.note.text()
    kept = LoraConfig(4, 8.0, 0.1, ("attn_k", "ffn_down"))
    _open(panel, LoraOption(config=kept.to_dict(), base_name="base-q8.gguf"))
    assert t.fixed() and t.layers.currentText() == "attn_k, ffn_down"
    assert not t.layers.isEnabled() and t.dropout.value() == pytest.approx(0.1)
    assert t.lora_config() == kept


def test_lora_option_and_refusals_of_the_worker_part():
    """The reasons come from what the session is; a refusal changes nothing."""
    from types import SimpleNamespace
    from opencl_llm_studio.engine.progress import Monitor
    from opencl_llm_studio.studio.protocol import ModelSource
    from opencl_llm_studio.studio.ui.run.worker_lora import LoraTuning
    part = LoraTuning(Monitor(), lambda _: None)
    scratch = SimpleNamespace(lora=None, source=None, step=0)
    assert "not imported from a GGUF" in part.option(scratch).why_not
    part.opened(ModelSource.CHECKPOINT, "run")
    trained = SimpleNamespace(lora=None, source={"path": __file__}, step=5)
    assert "trained 5 steps" in part.option(trained).why_not
    holder = SimpleNamespace(session=trained)
    with pytest.raises(ConfigError, match="trained 5 steps"):
        part.adopt(holder, LoraConfig(4, 8.0).to_dict())
    assert holder.session is trained
    part.opened(ModelSource.GGUF, __file__)
    assert "File › Open model" in part.option(SimpleNamespace(lora=None, source={}, step=0)).why_not


@pytest.fixture
def imported_run(lora_base_gguf, tmp_path):
    """A run folder imported from the q8_0 GGUF (step 0) with a few dialogues."""
    from opencl_llm_studio.studio.cli import main
    tune = tmp_path / "tune.txt"
    tune.write_text(TUNE)
    run = tmp_path / "imported"
    assert main(["import", str(lora_base_gguf), str(run), "--tune", str(tune)]) == 0
    return run


def test_continue_with_lora_trains_a_lora_run_that_reopens_as_one(qtbot, window, imported_run,
                                                                  tmp_path):
    from opencl_llm_studio.engine.files import checkpoint
    from opencl_llm_studio.studio.lora_estimate import lora_model_bytes
    from tests.studio_helpers import open_model, train
    open_model(qtbot, window, imported_run)
    sp = window.settings_panel
    t = sp.tuning
    assert t.combo.isEnabled(), t.combo.toolTip()
    t.combo.setCurrentIndex(t.combo.findData("lora"))
    t.rank.setValue(4)
    t.layers.setCurrentIndex(t.layers.findText("Attention"))
    sp.set_value("tuneStepsSpin", 2)
    sp.set_value("batchSizeSpin", 2)
    c, jobs = window.controller, []
    send = c.continue_run
    c.continue_run = lambda job: (jobs.append(job), send(job))
    result = train(qtbot, window)
    attention = ("attn_q", "attn_k", "attn_v", "attn_output")
    assert jobs[0].lora == LoraConfig(4, 8.0, targets=attention).to_dict()
    assert result.step == 2 and result.lora.config["rank"] == 4
    header = checkpoint.load(imported_run)["header"]
    assert header["lora"]["rank"] == 4 and header["step"] == 2
    assert tuple(header["lora"]["targets"]) == attention
    s = window.controller.worker.session   # the engine's LoRA model, counted by the estimate
    M = 2 * s.training_window()
    assert lora_model_bytes(s.model_config, s.lora, s.model.base.nbytes, M)[0] == \
        s.model.own_bytes(M)[0]
    assert t.fixed() and not t.combo.isEnabled() and t.rank.value() == 4
    assert "keeps its adapters' shape" in t.combo.toolTip()
    with qtbot.waitSignal(window.exportFinished, timeout=60_000) as done:
        window.files.export_to(str(tmp_path / "adapter.gguf"), "adapter")
    assert done.args[0].path.is_file() and "--lora" in done.args[0].usage
    window.controller.forget_model()
    open_model(qtbot, window, imported_run)   # opened again: LoRA, rank 4, fixed
    assert t.combo.currentData() == "lora" and t.rank.value() == 4 and not t.rank.isEnabled()
    assert tuple(t.layers.currentData()) == attention and not t.layers.isEnabled()
    assert "LoRA parameters" in sp.estimate_label.text()


def test_export_dialog_offers_the_adapters_of_a_lora_run(qtbot, tmp_path):
    from opencl_llm_studio.studio.ui.dialogs.export_dialog import ExportDialog
    cfg = ModelConfig(d_model=64, n_layer=2, n_head=4, context_length=64, vocab_size=512)
    plain = ExportDialog(cfg, tmp_path / "m.gguf")
    qtbot.addWidget(plain)
    assert plain.format_combo.findData("adapter") < 0
    dialog = ExportDialog(cfg, tmp_path / "m.gguf", lora=LoraConfig(4, 8.0).to_dict())
    qtbot.addWidget(dialog)
    combo = dialog.format_combo
    assert [combo.itemData(i) for i in range(combo.count())] == ["gguf", "adapter", "peft", "hf"]
    combo.setCurrentIndex(combo.findData("adapter"))
    assert dialog.choice() == (str(tmp_path / "m.gguf"), "adapter")
    assert "--lora" in dialog.note.text() and not dialog.dtype_combo.isEnabled()
    combo.setCurrentIndex(combo.findData("peft"))
    assert dialog.choice() == (str(tmp_path / "m"), "peft")
    dialog.preset(str(tmp_path / "a.gguf"), "adapter")
    assert dialog.format() == "adapter"
