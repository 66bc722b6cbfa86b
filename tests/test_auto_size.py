"""Auto (issue 36): the model, batch, learning rate and tokenizer for a text, a device's measured
speed and memory, and the minutes (engine.training.auto_size); `train --preset auto` and the
studio's preset box."""

import dataclasses

import pytest

from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.model.memory import fits
from opencl_llm_studio.engine.model.params import param_count
from opencl_llm_studio.engine.training import auto_size
from opencl_llm_studio.engine.training.auto_size import (AUTO, DeviceSpeed, choose,
                                                         predicted_loss, shape)
from opencl_llm_studio.studio.cli import main
from tests.helpers import RESOURCES, TEST_DEVICE

CPU = DeviceSpeed(flops_per_s=40e9, per_layer_s=2.5e-3)    # about this 2-core machine's
GPU = DeviceSpeed(flops_per_s=20e12, per_layer_s=0.2e-3)   # about a discrete GPU's


def n_params(choice) -> int:
    return choice.n_params


def test_the_law_prefers_more_parameters_more_data_and_fresh_data_to_repeats():
    assert predicted_loss(2e6, 1e7, 1e9) < predicted_loss(1e6, 1e7, 1e9)
    assert predicted_loss(1e6, 2e7, 1e9) < predicted_loss(1e6, 1e7, 1e9)
    # 10 M tokens of which 1 M are new are worth less than 10 M new ones, more than 1 M
    assert predicted_loss(1e6, 1e7, 1e7) < predicted_loss(1e6, 1e7, 1e6) \
        < predicted_loss(1e6, 1e6, 1e6)


@pytest.mark.parametrize("chars", [3_000, 100_000, 1_000_000, 30_000_000])
# (a text too small for the time gets the smallest shape of the law's flat minimum: below)
def test_more_minutes_or_a_faster_device_never_choose_a_smaller_model(chars):
    sizes = [n_params(choose(chars, s, CPU)) for s in (30, 60, 300, 1800)]
    assert sizes == sorted(sizes), sizes
    gpu = choose(chars, 300, GPU)
    if gpu.epochs <= auto_size.MAX_EPOCHS:   # else too small a text for a GPU's 5 minutes
        assert n_params(gpu) >= n_params(choose(chars, 300, CPU))


def test_parameters_past_what_the_text_supports_are_worth_less():
    """Muennighoff et al.'s N': doubling a model far past the compute-optimal size for its
    unique tokens gains less than doubling one below it, and a small text at a GPU's half hour
    gets a smaller model than a large text does (chinchilla alone would grow it without end)."""
    U = 1e5
    gain = lambda n: predicted_loss(n, 1e8, U) - predicted_loss(2 * n, 1e8, U)  # noqa: E731
    assert 0 <= gain(1e8) < gain(1e4) / 10 and gain(1e4) > 0
    small, big = choose(20_000, 1800, GPU), choose(30_000_000, 1800, GPU)
    assert small.n_params < big.n_params / 4
    assert small.train["dropout"] == 0.2 and small.epochs > big.epochs


def load(choice, chars) -> float:
    """Parameter-epochs per character of the text (auto_size.MAX_LOAD)."""
    return choice.epochs * choice.n_params / chars


def test_a_fast_device_on_a_small_text_stays_within_max_epochs_and_load():
    """The H100's measured speed on tinyshakespeare's 0.9 M training characters for 52 s: the
    law alone took d_model 256 x 4 at 97 epochs, which overfit (2.72 bits per byte against the
    gpu-discrete preset's 2.13 at 18); within MAX_EPOCHS alone it took 16 M parameters at 24
    epochs, and the held-out loss of such runs turned upward at a third of the time (the
    gpu-discrete preset, 10.8 M parameters: lowest at epoch 12 of 35). Within both limits the
    text supports about 20-40 s there, and the run is planned for that."""
    h100 = DeviceSpeed(flops_per_s=43e12, per_layer_s=0.8e-3)
    c = choose(903_000, 52, h100)
    assert c.epochs <= auto_size.MAX_EPOCHS and load(c, 903_000) <= auto_size.MAX_LOAD
    assert auto_size.MIN_SECONDS <= c.train["time_budget_s"] < 52
    assert any("the text supports about" in line for line in c.lines)


@pytest.mark.parametrize("chars", [91_468, 100_000])
def test_more_minutes_on_a_small_text_plan_no_more_than_it_supports(chars):
    """91 KB of prose on 2 cores: Auto took d_model 96 x 2 (2.53 bits per byte) for a minute and
    d_model 128 x 7 (2.72, its held-out loss lowest at half the run) for five. Past MAX_LOAD
    more minutes give no larger load: the same choice, planned for the time the text supports."""
    hour = choose(chars, 3600, CPU)
    supported = hour.train["time_budget_s"]
    assert supported < 3600 and load(hour, chars) <= auto_size.MAX_LOAD * 1.02
    assert any("the text supports about" in line for line in hour.lines)
    for seconds in (2 * supported, 1800):
        more = choose(chars, seconds, CPU)
        assert (more.model, more.train) == (hour.model, hour.train)
    one = choose(chars, 60, CPU)
    assert one.train["time_budget_s"] == 60 and one.n_params <= hour.n_params
    # a large text is not cut short
    assert choose(30_000_000, 1800, CPU).train["time_budget_s"] == 1800


@pytest.mark.parametrize("speed", [CPU, GPU], ids=["cpu", "gpu"])
def test_a_text_too_small_for_the_time_gets_a_small_model(speed):
    """The studio's bundled 2,440-character text for 5 minutes: no shape stays within
    MAX_EPOCHS in MIN_STEPS, and the fewest epochs were a 28 M-parameter model making 56 steps
    of 4.8 s on 2 cores. The law is flat there; the smallest shape of its flat minimum is taken,
    for MIN_SECONDS (no time is within MAX_LOAD)."""
    tiny = choose(2_440, 300, speed)
    assert tiny.epochs > auto_size.MAX_EPOCHS
    assert tiny.train["time_budget_s"] == auto_size.MIN_SECONDS
    assert tiny.n_params < 1e6 and auto_size.MIN_SECONDS * 0.9 / tiny.step_s >= auto_size.MIN_STEPS


def test_the_tokenizer_follows_the_texts_size():
    assert choose(100_000, 60, CPU).tokenizer == "char"
    assert choose(auto_size.BPE_FROM_CHARS, 60, CPU).tokenizer == "bpe"


def test_the_choice_is_a_valid_config_with_the_rules_values():
    c = choose(1_000_000, 300, CPU)
    cfg = shape(c.model["d_model"], c.model["n_layer"], c.model["context_length"],
                c.model["vocab_size"]).validate()
    assert param_count(cfg) == c.n_params and cfg.n_head == c.model["n_head"]
    assert c.train["time_budget_s"] == 300 and 4 <= c.train["batch_size"]
    lo, hi = auto_size.TOKENS_PER_STEP
    assert lo / 2 <= c.train["batch_size"] * cfg.context_length <= hi * 2
    assert c.step_s == pytest.approx(CPU.step_s(cfg, c.train["batch_size"]))
    assert "d_model" in c.summary() and len(c.lines) == 3


def test_only_shapes_that_fit_the_devices_memory_are_chosen(rt):
    info = dataclasses.replace(rt.info, global_mem_bytes=64 << 20, type="GPU")
    free = choose(5_000_000, 3600, GPU)
    small = choose(5_000_000, 3600, GPU, info)
    assert small.n_params < free.n_params
    cfg = shape(small.model["d_model"], small.model["n_layer"],
                small.model["context_length"], small.model["vocab_size"])
    assert fits(cfg, small.train["batch_size"], info)
    none = dataclasses.replace(info, global_mem_bytes=1 << 20)
    with pytest.raises(ConfigError, match="fits"):
        choose(5_000_000, 3600, GPU, none)


@pytest.mark.parametrize("chars, seconds, match", [(100_000, 5, "at least"), (0, 60, "empty")])
def test_a_budget_too_short_or_an_empty_text_is_refused(chars, seconds, match):
    with pytest.raises(ConfigError, match=match):
        choose(chars, seconds, CPU)


def test_the_measured_speed_predicts_another_shapes_step(rt):
    """The line fitted to the two probes predicts the cpu preset's step within 2.5x (a shared
    machine's noise is well inside that; a wrong FLOP count or launch cost is not)."""
    import time

    import numpy as np

    from opencl_llm_studio.engine.config import TrainConfig
    from opencl_llm_studio.engine.model.transformer import Model
    speed = auto_size.measure_speed(rt)
    assert speed.flops_per_s > 0 and speed.per_layer_s >= 0
    cfg = shape(128, 4, 64, 512)
    model, rng, times = Model(rt, cfg, seed=1), np.random.default_rng(1), []
    for k in range(4):
        ids = rng.integers(0, 512, size=(12, 65), dtype=np.int32)
        t0 = time.perf_counter()
        model.train_step(ids[:, :-1], ids[:, 1:], 1e-3, TrainConfig())
        rt.finish()
        times.append(time.perf_counter() - t0)
    ratio = speed.step_s(cfg, 12) / float(np.median(times[1:]))
    assert 1 / 2.5 < ratio < 2.5, (speed, times)


def test_cli_auto_needs_a_time_budget(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "run"), "--preset", AUTO, "--no-tune"]) != 0
    err = capsys.readouterr().err
    assert "--time-budget" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_cli_auto_ends_the_run_at_the_time_the_text_supports():
    """--time-budget 300 on the bundled text: the run's TrainConfig ends at Auto's plan."""
    from opencl_llm_studio.studio.cli import build_parser
    from opencl_llm_studio.studio.cli.options import configs
    args = build_parser().parse_args(["train", "--out", "x", "--preset", AUTO,
                                      "--time-budget", "300"])
    auto = choose(2_196, 300, CPU)
    _, tc = configs(args, auto)
    assert tc.time_budget_s == auto.train["time_budget_s"] == auto_size.MIN_SECONDS
    big = choose(30_000_000, 300, CPU)
    assert configs(args, big)[1].time_budget_s == 300


def test_cli_auto_says_its_choice_and_explicit_options_win(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", "--out", str(run), "--preset", AUTO, "--time-budget", "20", "--no-tune",
            "--pretrain", str(RESOURCES / "pretrain.txt"), "--d-model", "64", "--n-layer", "1",
            "--n-head", "2", "--quiet"] + (["--device", TEST_DEVICE] if TEST_DEVICE else [])
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "Auto chose: d_model" in err and "GFLOP/s" in err
    assert "given, so kept over Auto's: --d-model, --n-layer, --n-head" in err
    assert "Training on" in err and "d_model 64, n_layer 1, n_head 2" in err
    assert (run / "checkpoint.npz").exists() or any(run.glob("checkpoint*"))


def test_studio_auto_fills_the_fields_and_an_edit_makes_it_custom(qtbot, window):
    sp = window.settings_panel
    sp.spins["trainMinutesSpin"].setValue(0)
    i = sp.preset_combo.findData(AUTO)
    assert i >= 0
    with qtbot.waitSignal(window.controller.speedMeasured, timeout=120_000):
        sp.preset_combo.setCurrentIndex(i)
        sp.apply_preset(AUTO)
    qtbot.waitUntil(lambda: "Auto chose" in sp.auto_label.toolTip(), timeout=10_000)
    assert "M parameters" in sp.auto_label.text()
    assert sp.spins["trainMinutesSpin"].value() == 5   # Auto sizes for a time
    text = window.data_panel.pretrain_text
    report = window.auto.reports[window.device_panel.spec()]
    want = choose(int(len(text) * 0.9), 300, report.speed, report.device)
    assert sp.model_config().d_model == want.model["d_model"]
    assert sp.model_config().n_layer == want.model["n_layer"]
    assert sp.train_config().batch_size == want.train["batch_size"]
    assert sp.tokenizer_kind() == want.tokenizer
    assert sp.preset_combo.currentData() == AUTO and sp.auto_label.isVisible()
    # more minutes: chosen again from the kept speed, no second measure
    sp.spins["trainMinutesSpin"].setValue(30)
    want = choose(int(len(text) * 0.9), 1800, report.speed, report.device)
    assert sp.model_config().d_model == want.model["d_model"]
    # the bundled text cannot use 30 minutes: the run ends at Auto's plan, and the note says so
    assert sp.train_config().time_budget_s == want.train["time_budget_s"] < 1800
    assert "the text supports no more" in sp.auto_label.text()
    assert "time_budget_s" not in sp.extra_label.text()
    # an edit of a field: Custom, the note goes, the value stays the person's, and the
    # person's model gets their minutes
    sp.spins["batchSizeSpin"].setValue(sp.spins["batchSizeSpin"].value() + 1)
    assert sp.preset_combo.currentData() == "" and not sp.auto_label.isVisible()
    assert sp.train_config().time_budget_s == 1800
