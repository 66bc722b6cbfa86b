"""The studio during long phases (issue 11): Stop ends the encoding of a large text at once,
the progress bar names the phase, and the ETA ignores paused time and steps of earlier runs."""

import random

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.progress import Pace
from opencl_llm_studio.engine.data.textio import read_text
from opencl_llm_studio.engine.data.textio import bundled_corpus
from opencl_llm_studio.studio.protocol import Outcome, TrainJob
from opencl_llm_studio.studio.ui.panels.run_bar import RunBar
from opencl_llm_studio.studio.ui.run.worker import TrainingWorker
from tests.fake_clock import FakeTime


class Record:
    def __init__(self, step, total):
        self.step, self.total_steps, self.stage, self.tokens_per_s = step, total, "pretrain", 1e3
        self.time_left_s = None   # a step plan: the ETA comes from the pace


def test_run_bar_eta_excludes_the_pause_and_names_the_phase(qtbot):
    bar = RunBar()
    qtbot.addWidget(bar)
    clock = FakeTime(50.0)
    bar._pace = Pace(clock=clock)
    bar.reset_pace()  # a continued run: earlier steps do not count
    for step in (300, 301, 302):
        bar.show_step(Record(step, 400))
        clock.t += 1
    bar.pause_pace()
    clock.t += 600
    bar.resume_pace()
    bar.show_step(Record(303, 400))
    assert bar.progress.format().endswith("ETA 1:37")  # 97 steps at 1 s
    bar.show_phase("Checking recall 3/64…")
    assert bar.progress.format() == "step 303 / 400 · Checking recall 3/64…"


def test_stop_while_a_large_text_is_encoded_ends_the_start_at_once(qtbot, tmp_path):
    vocab = read_text(bundled_corpus("pretrain")).split()
    rng = random.Random(0)
    text = " ".join(rng.choice(vocab) for _ in range(600_000))  # one ~4 MB line
    worker = TrainingWorker()
    texts, results = [], []

    def on_phase(text_):
        texts.append(text_)
        if text_.startswith("Encoding the pretraining text"):
            worker.request_stop()

    worker.preparing.connect(on_phase)
    for signal in (worker.finished, worker.stopped, worker.failed):
        signal.connect(results.append)
    worker.start(TrainJob(ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=32,
                                      vocab_size=400),
                          TrainConfig(pretrain_steps=5, tune_steps=0, batch_size=4),
                          text, run_dir=str(tmp_path / "run")))
    encoding = [t for t in texts if t.startswith("Encoding the pretraining text")]
    assert encoding and texts[-1] == encoding[0]  # nothing ran after the stop
    assert [r.outcome for r in results] == [Outcome.STOPPED]
    assert worker.session is None
