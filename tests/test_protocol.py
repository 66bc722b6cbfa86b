"""The typed thread protocol of the studio (issue 16, item 2): frozen jobs and results, one worker
signal per outcome, a RunState enum whose control table the window applies, a controller that
owns the run, and no string states or getattr hedges left."""

import dataclasses
import inspect
import os
import re
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from tests.helpers import TEST_DEVICE  # noqa: E402
from tests.studio_helpers import configure  # noqa: E402

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.errors import DeviceError  # noqa: E402
from opencl_llm_studio.engine.data.textio import read_text  # noqa: E402
from opencl_llm_studio.studio import protocol  # noqa: E402
from opencl_llm_studio.engine.data.textio import bundled_corpus  # noqa: E402
from opencl_llm_studio.studio.protocol import (CONTROLS, ContinuePoint, FileTask, Outcome, RunState,  # noqa: E402
                             TrainJob)
from opencl_llm_studio.studio.ui.run import worker as worker_mod  # noqa: E402
from opencl_llm_studio.studio.ui.run.worker import TrainingWorker  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAINING = {RunState.PREPARING, RunState.RUNNING, RunState.PAUSING, RunState.PAUSED}
OUTCOME_SIGNALS = ("finished", "stopped", "failed", "paused", "resumed")


# -- the control table ------------------------------------------------------------------------
def test_every_state_has_its_controls():
    assert set(CONTROLS) == set(RunState)
    assert {s for s, c in CONTROLS.items() if c.stop} == TRAINING
    assert {s for s, c in CONTROLS.items() if c.use_model} == {RunState.IDLE, RunState.PAUSED}
    assert {s for s, c in CONTROLS.items() if c.pause} == {RunState.RUNNING, RunState.PAUSED}
    assert {s for s, c in CONTROLS.items() if c.train or c.edit or c.open_model} == {
        RunState.IDLE}
    # chat is off while weights move, and the window says why
    assert all(c.chat_note for s, c in CONTROLS.items() if not c.use_model)


@pytest.mark.parametrize("has_model", [False, True])
def test_the_window_applies_the_table_in_every_state(window, has_model):  # noqa: F811
    c, rb = window.controller, window.run_bar
    c.has_model = has_model
    for state in RunState:
        c._set_state(state)
        assert rb.stop_button.isEnabled() == (state in TRAINING), state
        exports = (rb.export_button, window.menu.export_action, window.menu.save_action)
        usable = has_model and state in (RunState.IDLE, RunState.PAUSED)
        assert [w.isEnabled() for w in exports] == [usable] * 3, state
        assert window.chat_panel.send_button.isEnabled() == usable, state
        assert rb.pause_button.isEnabled() == (state in (RunState.RUNNING, RunState.PAUSED))
        assert (rb.pause_button.text() == "Resume") == (state is RunState.PAUSED)
        assert rb.train_button.isEnabled() == (state is RunState.IDLE), state
        assert window.settings_panel.spins["dModelSpin"].isEnabled() == (state is RunState.IDLE)
    c._set_state(RunState.IDLE)
    c.task = FileTask.EXPORT  # a file task in progress holds Train and the model controls
    window.update_actions()
    assert not rb.train_button.isEnabled() and not rb.export_button.isEnabled()
    c.task = FileTask.NONE


def test_an_opened_model_fixes_data_and_device(window):  # noqa: F811
    window.controller.continue_from = ContinuePoint(30, 20, 10, has_tune=False)
    window.update_actions()
    spins = window.settings_panel.spins
    # a run without dialogues can gain them: its Tuning steps and the tune file stay usable
    assert spins["pretrainStepsSpin"].isEnabled() and spins["tuneStepsSpin"].isEnabled()
    assert window.data_panel.tune.button.isEnabled()
    assert not window.device_panel.combo.isEnabled()
    assert not window.data_panel.pretrain.button.isEnabled()
    window.controller.continue_from = ContinuePoint(30, 20, 10, has_tune=True)
    window.update_actions()
    assert not window.data_panel.tune.button.isEnabled()


# -- frozen dataclasses ----------------------------------------------------------------------
def _protocol_dataclasses():
    return [t for _, t in inspect.getmembers(protocol, inspect.isclass)
            if dataclasses.is_dataclass(t) and t.__module__ == protocol.__name__]


def test_every_protocol_type_is_a_frozen_dataclass():
    names = {t.__name__ for t in _protocol_dataclasses()}
    assert {"TrainJob", "ContinueJob", "LoadJob", "ChatRequest", "ExportRequest",
            "SaveRequest", "SessionInfo", "RunResult", "RunPoint", "Controls"} <= names
    for t in _protocol_dataclasses():
        assert t.__dataclass_params__.frozen, t.__name__
    result = protocol.RunResult(Outcome.STOPPED, step=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.step = 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        CONTROLS[RunState.IDLE].stop = True


def test_chat_request_from_the_panel():
    req = protocol.ChatRequest.from_panel(
        [{"role": "user", "content": "Hi"}],
        {"temperature": 0.5, "top_k": 7, "top_p": 0.9, "max_new_tokens": 12})
    assert req.messages[0].role == "user" and req.messages[0].content == "Hi"
    assert req.sampling() == {"temperature": 0.5, "top_k": 7, "top_p": 0.9,
                              "max_new_tokens": 12}


# -- one worker signal per outcome -----------------------------------------------------------
def _tiny_job(tmp_path, steps=6) -> TrainJob:
    text = read_text(bundled_corpus("pretrain"))[:20_000]
    return TrainJob(ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=16,
                                vocab_size=300),
                    TrainConfig(pretrain_steps=steps, tune_steps=0, batch_size=2, warmup_steps=1,
                                eval_interval=1000, sample_interval=0, evaluate_recall=False),
                    text, str(tmp_path / "run"), device=TEST_DEVICE, tokenizer_kind="char",
                    checkpoint_every=0)


def _record(worker):
    """Every outcome signal the worker fires, in order, as (name, payload)."""
    seen = []
    for name in OUTCOME_SIGNALS:
        getattr(worker, name).connect(lambda payload, name=name: seen.append((name, payload)))
    return seen


def test_a_run_to_the_end_fires_finished_only(qtbot, tmp_path):
    worker = TrainingWorker()
    seen = _record(worker)
    worker.start(_tiny_job(tmp_path, steps=4))  # on this thread: returns when the run ended
    assert [n for n, _ in seen] == ["finished"]
    result = seen[0][1]
    assert result.outcome is Outcome.FINISHED and result.step == 4 and result.saved_step == 4
    assert result.run_dir == str(tmp_path / "run") and result.train_config.pretrain_steps == 4


def test_pause_resume_stop_fire_their_own_signals(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(worker_mod, "EMIT_INTERVAL_S", 0.0)  # one metrics signal per step
    worker = TrainingWorker()
    seen = _record(worker)
    steps = []

    def on_metrics(batch):
        steps.extend(m.step for m in batch)
        if len(steps) == 2:
            worker.request_pause()
        elif len(steps) >= 3:
            worker.request_stop()
    worker.metrics.connect(on_metrics)
    worker.start(_tiny_job(tmp_path, steps=400))
    assert [n for n, _ in seen] == ["paused"]      # returned to the event loop, run kept
    assert seen[0][1].step == 2 and seen[0][1].saved_step == 2  # a pause autosaves
    worker.cancel_pause()  # as WorkerHost.resume: the flag is cleared on the GUI thread
    worker.resume()
    assert [n for n, _ in seen] == ["paused", "resumed", "stopped"]
    stopped = seen[-1][1]
    assert stopped.outcome is Outcome.STOPPED and 3 <= stopped.step < 400
    assert stopped.saved_step == stopped.step


def test_a_failing_job_fires_failed_only(qtbot, tmp_path, monkeypatch):
    from opencl_llm_studio.engine.training import opening

    def broken(*args, **kwargs):
        raise DeviceError("The device ran out of memory.", "Choose a smaller model.")
    monkeypatch.setattr(opening, "create_session", broken)
    worker = TrainingWorker()
    seen, errors = _record(worker), []
    worker.error.connect(lambda title, text: errors.append(text))
    worker.start(_tiny_job(tmp_path))
    assert [n for n, _ in seen] == ["failed"]
    assert seen[0][1].outcome is Outcome.FAILED and seen[0][1].run_dir is None
    assert len(errors) == 1 and "smaller model" in errors[0]


def test_stop_through_the_controller_ends_with_stopped_not_finished(qtbot, window):  # noqa: F811
    c = window.controller
    states, outcomes = [], []
    c.changed.connect(lambda: states.append(c.state))
    for name in ("finished", "stopped", "failed"):
        getattr(c, name).connect(lambda result, name=name: outcomes.append(name))
    configure(window, pretrainStepsSpin=5000, tuneStepsSpin=0)
    window.run_bar.train_button.click()
    qtbot.waitUntil(lambda: window.plots.point_count() >= 2, timeout=120_000)
    with qtbot.waitSignal(c.ended, timeout=60_000) as blocker:
        window.run_bar.stop_button.click()
    assert outcomes == ["stopped"] and blocker.args[0].outcome is Outcome.STOPPED
    assert states == [RunState.PREPARING, RunState.RUNNING, RunState.STOPPING, RunState.IDLE]
    assert c.has_model and window.run_bar.export_button.isEnabled()


# -- no string states, no hedges ---------------------------------------------------------------
STUDIO_RUN_FILES = ("app.py", "window/main_window.py", "window/training_actions.py",
                    "window/window_actions.py", "window/window_controls.py",
                    "window/runs_actions.py", "run/run_controller.py", "run/worker.py",
                    "run/worker_host.py", "run/worker_tasks.py")


def test_the_window_has_no_string_states(window):  # noqa: F811
    assert window.controller.state is RunState.IDLE and not isinstance(window.controller.state,
                                                                        str)
    for gone in ("state", "_busy", "resume_info", "_set_state"):
        assert not hasattr(window, gone), gone
    words = "|".join(s.value for s in RunState) + "|export|save|load|done"
    literal = re.compile(rf"""["']({words})["']""")
    for name in STUDIO_RUN_FILES:
        source = (ROOT / "opencl_llm_studio" / "studio" / "ui" / name).read_text(encoding="utf-8")
        assert not literal.findall(source), (name, literal.findall(source))


def test_no_getattr_hedges_around_the_session():
    for name in STUDIO_RUN_FILES:
        source = (ROOT / "opencl_llm_studio" / "studio" / "ui" / name).read_text(encoding="utf-8")
        hedged = {"s", "session", "self.session", "rec", "result", "info", "dev", "m", "getattr"}
        targets = set(re.findall(r"getattr\(([\w.]+)", source))
        assert not targets & hedged, (name, targets & hedged)


def test_update_actions_stays_simple():
    radon = pytest.importorskip("radon.complexity")
    source = (ROOT / "opencl_llm_studio" / "studio" / "ui" / "window" / "window_controls.py").read_text(encoding="utf-8")
    blocks = {b.fullname: b.complexity for b in radon.cc_visit(source)}
    assert blocks["WindowControls.update"] <= 20  # rank C at most


def test_the_protocol_loads_without_qt():
    """The jobs, results and control table are plain Python (the contract in pyproject.toml,
    and at run time): a headless tool or test can build and read them."""
    import json
    import subprocess
    import sys
    code = ("import sys, json, opencl_llm_studio.studio.protocol\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('PySide6', 'pyqtgraph', 'shiboken6'))))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
