"""The main window's training runs: Train (or Continue an opened model), Pause, Stop, New model,
and what comes back of a run (metrics, samples and stage-end recall, autosaves, the end of a
run, an opened model). A part of studio.ui.window.main_window.MainWindow, composed: it holds the panels,
the RunController and the window (studio.ui.window.window_face.WindowFace) it is given; clicks go to the
controller, and what the worker reports comes from the controller's signals.

Continue: after File › Open checkpoint (or an exported GGUF), the controller's `continue_from`
(studio.protocol.ContinuePoint) holds the opened model's step, step counts and run folder; Train
then asks the worker to `session.continue_training` to the step counts on the left and keep
going: in place, in the opened run folder (as `llm-studio train --out RUN --continue`), or, with
"as a new run" ticked (always for a GGUF or transformers folder), into a new run folder that
starts with the model's history (as `--continue-from RUN --out NEW`). The run's state lives in
studio.ui.run.run_controller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from opencl_llm_studio.engine.config import run_steps
from opencl_llm_studio.studio.protocol import (CONTROLS, ContinueJob, ModelSource, Outcome, RunPoint, RunResult,
                             RunState, SessionInfo, TrainJob)
from opencl_llm_studio.studio.run_folder import new_run_dir
from opencl_llm_studio.studio.ui.panels.chat_panel import CLEARED_NOTE
from opencl_llm_studio.studio.ui.run.run_controller import RunController
from opencl_llm_studio.studio.ui.window.window_face import WindowFace
from opencl_llm_studio.studio.ui.window.window_layout import Panels
from opencl_llm_studio.engine.model.params import param_count

NO_HISTORY = "no training curves in this file (weights only): they fill as you train it further"
# what the Continue of an opened run takes from the fields (the rest is the run's own)
RETRAIN = ("batch_size", "learning_rate")


class TrainingActions:
    def __init__(self, window: WindowFace, panels: Panels, controller: RunController,
                 autotune: Callable[[], bool] = lambda: False):
        self.window = window
        self.autotune = autotune   # Device › Tune kernels before training (the setting)
        self.panels = panels
        self.controller = c = controller
        rb = panels.run_bar
        rb.train_button.clicked.connect(self.start_training)
        rb.pause_button.clicked.connect(self.toggle_pause)
        rb.stop_button.clicked.connect(self.stop_training)
        rb.new_button.clicked.connect(self.new_model)
        panels.settings_panel.changed.connect(self.preview_run)
        for signal, slot in ((c.preparing, self._on_preparing), (c.metrics, self._on_metrics),
                             (c.autosaved, self._on_autosaved), (c.sessionReady, self._on_session),
                             (c.paused, self._on_paused), (c.resumed, self._on_resumed),
                             (c.ended, self._on_ended), (c.loaded, self._on_loaded)):
            signal.connect(slot)

    def preview_run(self) -> None:
        """Before the first run, frame the plots for the run the settings describe."""
        if self.controller.state is not RunState.IDLE or self.panels.plots.point_count():
            return
        if not self.panels.settings_panel.is_valid():   # not the last valid settings' plan
            self.panels.plots.summary.setText("Planned run: fix the setting marked in red.")
            return
        self.frame_run(preview=True)

    def frame_run(self, preview: bool = False) -> None:
        """Clear the plots and frame them for the run the settings describe: its total steps
        (engine.config.run_steps: no tuning stage without a dialogue text), stage boundary,
        ln(vocab) and clip threshold."""
        p = self.panels
        m, t = p.settings_panel.model_config(), p.settings_panel.train_config()
        tune = bool(p.data_panel.tune_text)
        p.plots.start_run(run_steps(t.pretrain_steps, t.tune_steps, tune), t.pretrain_steps,
                          t.tune_steps if tune else 0, m.vocab_size, t.grad_clip,
                          preview=preview, time_budget_s=t.time_budget_s)

    # -- Train / Continue, Pause, Stop -------------------------------------------------------
    def start_training(self) -> None:
        p, c = self.panels, self.controller
        if not p.run_bar.train_button.isEnabled():
            return
        sp = p.settings_panel
        mcfg, tcfg = sp.model_config(), sp.train_config()
        opened = c.continue_from
        if opened is not None and opened.run_dir and not p.run_bar.continue_as_new_run():
            run_dir = Path(opened.run_dir)   # Continue in place, as `train --continue`
        else:
            run_dir = new_run_dir(p.autosave_box.runs_root())
        every = p.autosave_box.every()
        p.run_bar.reset_pace()
        p.run_bar.show_run_folder(run_dir, None)
        p.tabs.setCurrentWidget(p.samples_panel)
        if c.continue_from is not None:  # the plots are reframed when sessionReady comes
            c.continue_run(ContinueJob(tcfg.pretrain_steps, tcfg.tune_steps, str(run_dir),
                                       every, more_seconds=tcfg.time_budget_s,
                                       autotune=self.autotune(),
                                       tune_text=p.data_panel.tune_text or None,
                                       retrain=tuple((k, getattr(tcfg, k)) for k in RETRAIN),
                                       lora=sp.tuning.job_lora()))
            return
        p.samples_panel.clear()
        if p.chat_panel.start_over():
            self.window.status(CLEARED_NOTE, 10000)
        self.frame_run()
        c.train(TrainJob(mcfg, tcfg, p.data_panel.pretrain_text, str(run_dir),
                         tune_text=p.data_panel.tune_text if tcfg.tune_steps else None,
                         device=p.device_panel.spec(), tokenizer_kind=sp.tokenizer_kind(),
                         checkpoint_every=every, autotune=self.autotune()))

    def toggle_pause(self) -> None:
        c = self.controller
        if c.state is RunState.RUNNING:
            c.pause()
            self.panels.run_bar.show_phase("pausing…")
        elif c.state is RunState.PAUSED:
            c.resume()

    def stop_training(self) -> None:
        if CONTROLS[self.controller.state].stop:
            self.panels.run_bar.show_phase("stopping and saving…")
            self.controller.stop()

    def new_model(self) -> None:
        """Leave continue mode: Train builds a new model from the settings and data."""
        c = self.controller
        if c.state is not RunState.IDLE or c.continue_from is None:
            return
        c.forget_model()
        self.panels.settings_panel.forget_opened()
        self.panels.run_bar.set_continue(None)
        self.window.status("Train now starts a new model from scratch.", 8000)

    # -- what the worker reports -------------------------------------------------------------
    def _on_preparing(self, text: str) -> None:
        """A long phase: before the first step (tokenizer, encoding), or inside a step."""
        state = self.controller.state
        if state is RunState.RUNNING:
            self.panels.run_bar.show_phase(text)
        elif state not in (RunState.PAUSING, RunState.STOPPING):  # their own text stays
            self.panels.run_bar.show_text(text, reset=True)

    def _adopt_model(self, info: SessionInfo) -> None:
        mc = info.model_config
        self.panels.plots.set_reference(mc.vocab_size)
        self.panels.data_panel.set_token_counts(info.pretrain_tokens, info.tune_tokens)
        lora = info.lora.config if info.lora else None   # a LoRA run: what trains
        self.window.status(
            f"Model ready: {param_count(mc):,} parameters, vocabulary {mc.vocab_size} on "
            f"{info.device.name}" + (f"; LoRA adapters of rank {lora['rank']} tune it, the "
                                     f"base {info.lora.base_name} kept quantized" if lora
                                     else ""), 10000)

    def _on_session(self, info: SessionInfo) -> None:
        """Before the state moves on to RUNNING (studio.ui.run.run_controller)."""
        self._adopt_model(info)
        if info.history is not None:  # continuing: frame the longer run, refill
            self._show_history(info, recall=False)
        if info.run_dir:
            self.panels.run_bar.show_run_folder(info.run_dir, None)

    def _show_history(self, info: SessionInfo, recall: bool) -> None:
        """Frame the session's run and plot its history (session.history as StepMetrics);
        recall: also list its stage-end recall results."""
        tc = info.train_config
        self.panels.plots.start_run(info.total_steps, tc.pretrain_steps,
                             tc.tune_steps if info.has_tune else 0,
                             info.model_config.vocab_size, tc.grad_clip,
                             time_budget_s=tc.time_budget_s)
        records = info.history or ()  # StepMetrics
        if records:
            self.panels.plots.add_metrics(records)
        else:   # a GGUF or a pretrained model: weights without curves; say so, not blank plots
            summary = self.panels.plots.summary
            summary.setText(f"{summary.full_text()} · {NO_HISTORY}")
        if recall:
            for m in records:
                if m.recall:
                    self.panels.samples_panel.add_recall(m.step, m.recall)
        self.panels.plots.redraw()

    def _on_metrics(self, records: list) -> None:
        self.panels.plots.add_metrics(records)
        for m in records:
            if m.samples:
                self.panels.samples_panel.add(m.step, m.stage, m.samples)
            if m.recall:
                line = self.panels.samples_panel.add_recall(m.step, m.recall)
                self.window.status(line, 20000)
        if self.controller.state in (RunState.RUNNING, RunState.PREPARING):
            self.panels.run_bar.show_step(records[-1])

    def _on_autosaved(self, folder: str, step: int) -> None:
        self.panels.run_bar.show_run_folder(folder, step)

    def _on_paused(self, point: RunPoint) -> None:
        self.panels.run_bar.pause_pace()
        self.panels.run_bar.show_text(f"Paused at step {point.step}",
                               note="Chat with the model or export it now, or Resume.")

    def _on_resumed(self, _point: RunPoint) -> None:
        self.panels.run_bar.resume_pace()  # the time paused does not count in the ETA

    def _on_ended(self, result: RunResult) -> None:
        """After the state went back to IDLE (studio.ui.run.run_controller); trainingFinished last."""
        self.panels.plots.redraw()
        run_dir, saved, step = result.run_dir, result.saved_step, result.step
        text, note = self._end_text(result)
        self.panels.run_bar.show_text(text, note=note)
        if run_dir:
            self.panels.run_bar.show_run_folder(run_dir, saved, saving=False)
        else:  # it never started: its folder was removed (studio.run_folder.RunRecorder.discard)
            self.panels.run_bar.hide_run_folder()
        opened = self.controller.continue_from
        if opened is not None and result.train_config is not None:
            # it goes on from here, and the fields show where it stands
            self.panels.run_bar.set_continue(step, opened.run_dir is not None)
            self.panels.settings_panel.show_run_totals(result.train_config)
            if result.lora is not None:   # a LoRA run now, or trained past LoRA's start
                self.panels.settings_panel.tuning.set_option(result.lora)
        if self.controller.has_model and result.outcome is not Outcome.FAILED:
            self.panels.tabs.setCurrentWidget(self.panels.samples_panel)
        self.window.trainingFinished.emit(result)

    def _end_text(self, result: RunResult) -> tuple[str, str | None]:
        """The run bar's status at a run's end (short: it fits the bar) and the note under it;
        chat and export are offered only with a model."""
        if result.run_dir is None:  # stopped or failed before its first step
            if result.outcome is Outcome.FAILED:
                return "Could not start training", "See the message for what to change."
            return "Stopped before the first step", "Nothing was trained."
        saved = result.saved_step
        where = f" · saved at step {saved}" if saved is not None else ""
        use = "Chat with the model or export it." if self.controller.has_model else None
        if result.outcome is Outcome.FAILED:
            return "Training stopped with an error" + where, "See the message."
        if result.outcome is Outcome.STOPPED:
            return f"Stopped at step {result.step}{where}", use
        return f"Finished {result.step} steps{where}", use

    def _on_loaded(self, info: SessionInfo | None) -> None:
        """A checkpoint, GGUF or HF folder was opened (None: it could not be; the error is
        shown); the controller holds it as the model Train continues."""
        if info is None:
            return
        self._adopt_model(info)
        self.panels.settings_panel.set_from_configs(info.model_config, info.train_config,
                                                    info.tokenizer, info.lora)
        self.panels.samples_panel.clear()
        cleared = self.panels.chat_panel.start_over()
        self._show_history(info, recall=True)
        self.panels.run_bar.set_continue(info.step,
                                         self.controller.continue_from.run_dir is not None)
        self._show_opened_folder(info)
        what = {ModelSource.GGUF: "GGUF", ModelSource.HF: "Hugging Face model"}.get(
            info.source, "Checkpoint")
        self.panels.run_bar.show_text(f"{what} opened at step {info.step}", reset=True,
                               note="Chat with it, export it, or Continue training."
                               + (f" {CLEARED_NOTE}" if cleared else ""))
        self.window.update_actions()
        self.window.modelOpened.emit(info)

    def _show_opened_folder(self, info: SessionInfo) -> None:
        """The opened checkpoint's run folder (Open folder, Copy path); a GGUF or transformers
        folder has none: the row of the last run trained here would name the wrong model."""
        if info.source is ModelSource.CHECKPOINT and info.path:
            p = Path(info.path)
            self.panels.run_bar.show_run_folder(p if p.is_dir() else p.parent, info.step,
                                                opened=True)
        else:
            self.panels.run_bar.hide_run_folder()
