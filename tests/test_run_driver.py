"""studio.run_driver.RunDriver: the one run loop of both front ends (issue 35: the CLI and the
studio's worker each drove the run loop, autosave and lock themselves)."""

import json
from pathlib import Path

import pytest

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.errors import CheckpointError
from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.training.opening import create_session
from opencl_llm_studio.studio.run_driver import RunDriver
from opencl_llm_studio.studio.run_folder import METRICS, RunRecorder
from tests.helpers import bundled_texts

ROOT = Path(__file__).resolve().parents[1]
MC = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=32, vocab_size=320)
TC = TrainConfig(pretrain_steps=5, tune_steps=0, batch_size=2, eval_interval=100,
                 sample_interval=0, evaluate_recall=False)


@pytest.fixture
def session(rt):
    return create_session(MC, TC, bundled_texts()[0], runtime=rt)


def test_each_step_is_recorded_and_checkpointed_when_due(session, tmp_path):
    saved = []
    recorder = RunRecorder(tmp_path / "run", every=2, live=True)
    driver = RunDriver(session, recorder, on_saved=saved.append)
    steps = []
    while (m := driver.step()) is not None:
        steps.append(m.step)
        lines = (tmp_path / "run" / METRICS).read_text().splitlines()
        assert json.loads(lines[-1])["step"] == m.step   # live: readable as it trains
    assert steps == [1, 2, 3, 4, 5] and not driver.running
    assert saved == [2, 4]
    assert driver.autosave() and saved == [2, 4, 5]       # the end: the last step kept
    assert driver.autosave() and saved == [2, 4, 5]       # nothing new: no second save
    recorder.close()
    header, _ = checkpoint.read_header(tmp_path / "run")
    assert header["step"] == 5


def test_a_checkpoint_that_fails_is_reported_or_raised(session, tmp_path, monkeypatch):
    def full_disk(*a, **k):
        raise CheckpointError("No space left on the device.", "Free disk space.")
    monkeypatch.setattr(type(session), "save", full_disk)
    errors = []
    recorder = RunRecorder(tmp_path / "a", every=1)
    driver = RunDriver(session, recorder, on_save_error=errors.append)
    assert driver.step().step == 1 and len(errors) == 1   # the studio: said, training goes on
    assert driver.step().step == 2
    driver.close()
    recorder.close()
    recorder = RunRecorder(tmp_path / "b", every=1)
    driver = RunDriver(session, recorder)                  # the command line: it ends there
    with pytest.raises(CheckpointError, match="No space"):
        driver.step()
    driver.close()
    recorder.close()


@pytest.mark.parametrize("front_end", ["studio/cli/train.py", "studio/ui/run/worker.py"])
def test_both_front_ends_drive_the_run_through_it(front_end):
    source = (ROOT / "opencl_llm_studio" / front_end).read_text(encoding="utf-8")
    assert "RunDriver(" in source
    # the command line takes --out's lock before it makes the folder, and hands it to the driver
    for own_loop in (".train()", "Trainer(", "MetricsLog(", ".save(out)", "rec.save("):
        assert own_loop not in source, (front_end, own_loop)
