"""The main window's training runs: Train (or Continue an opened model), Pause, Stop, and what
the worker reports back (metrics, stage-end recall, autosaves, the end of a run). A mixin of
studio.app.MainWindow, split out to keep each file near 300 lines.

Continue: after File › Open checkpoint (or an exported GGUF), `resume_info` holds the opened
model's step and step counts; Train then asks the worker to `session.extend` to the step counts
on the left and keep going, into a new run folder that starts with the model's history.
"""

from __future__ import annotations

from engine.errors import ConfigError
from engine.session import check_continuation
from studio.run_folder import new_run_dir


class TrainingActions:
    resume_info: dict | None = None  # step, pretrain_steps, tune_steps, has_tune, path

    # -- Train / Continue, Pause, Stop -------------------------------------------------------
    def start_training(self) -> None:
        if not self.run_bar.train_button.isEnabled():
            return
        sp = self.settings_panel
        mcfg, tcfg = sp.model_config(), sp.train_config()
        run_dir = new_run_dir(self.autosave_box.runs_root())
        job = {"run_dir": str(run_dir), "checkpoint_every": self.autosave_box.every()}
        self.run_bar.reset_pace()
        self.run_bar.show_run_folder(run_dir, None)
        self.tabs.setCurrentWidget(self.samples_panel)
        if self.resume_info is not None:
            job.update(pretrain_steps=tcfg.pretrain_steps, tune_steps=tcfg.tune_steps)
            self._set_state("preparing")
            self.host.proceed(job)  # the plots are reframed when the worker answers
            return
        self.samples_panel.clear()
        self.plots.start_run(tcfg.total_steps, tcfg.pretrain_steps, tcfg.tune_steps,
                             mcfg.vocab_size, tcfg.grad_clip)
        self.has_model = False
        self._set_state("preparing")
        job.update(model_config=mcfg, train_config=tcfg,
                   pretrain_text=self.data_panel.pretrain_text,
                   tune_text=self.data_panel.tune_text if tcfg.tune_steps else None,
                   device=self.device_panel.spec(), tokenizer_kind=sp.tokenizer_kind())
        self.host.start(job)

    def toggle_pause(self) -> None:
        if self.state == "running":
            self.host.pause()
            self.run_bar.pause_button.setEnabled(False)
            self.state = "pausing"
            self.run_bar.show_text(self.run_bar.progress.format() + " · pausing…")
        elif self.state == "paused":
            self.run_bar.resume_pace()
            self._set_state("running")
            self.host.resume()

    def stop_training(self) -> None:
        if self.state in ("preparing", "running", "pausing", "paused"):
            self.run_bar.show_text(self.run_bar.progress.format() + " · stopping and saving…")
            self._set_state("stopping")  # no Pause/Resume/Stop until the worker has finished
            self.host.stop()

    def new_model(self) -> None:
        """Leave continue mode: Train builds a new model from the settings and data."""
        if self.state != "idle" or self.resume_info is None:
            return
        self.resume_info = None
        self.run_bar.set_continue(None)
        self.statusBar().showMessage("Train now starts a new model from scratch.", 8000)
        self._update_actions()

    def _continue_problem(self) -> str | None:
        """Why the opened model cannot be continued to the step counts on the left, or None:
        the engine's own rule (engine.session.check_continuation, as TrainingSession.extend
        and `llm-studio train --resume` apply it)."""
        r, tc = self.resume_info, self.settings_panel.train_config()
        try:
            check_continuation(r["step"], r["pretrain_steps"], r["tune_steps"],
                               bool(r["has_tune"]), tc.pretrain_steps, tc.tune_steps,
                               require_more=True)
        except ConfigError as e:
            return e.describe().replace("\n", " ")
        return None

    # -- what the worker reports -------------------------------------------------------------
    def _on_preparing(self, text: str) -> None:
        """A long phase: before the first step (tokenizer, encoding), or inside a step."""
        if self.state == "running":
            self.run_bar.show_phase(text)
        elif self.state not in ("pausing", "stopping"):  # their own text stays
            self.run_bar.show_text(text, reset=True)

    def _adopt_model(self, info: dict) -> None:
        self.model_config = info["model_config"]
        self.has_model = True
        self.plots.set_reference(self.model_config.vocab_size)
        self.data_panel.set_token_counts(info.get("pretrain_tokens"), info.get("tune_tokens"))
        dev = info.get("device")
        self.statusBar().showMessage(
            f"Model ready: {self.model_config.param_count():,} parameters, vocabulary "
            f"{self.model_config.vocab_size} on {getattr(dev, 'name', dev)}", 10000)

    def _on_session(self, info: dict) -> None:
        self._adopt_model(info)
        if info.get("history") is not None:  # continuing: frame the longer run, refill
            self._show_history(info, recall=False)
        if info.get("run_dir"):
            self.run_bar.show_run_folder(info["run_dir"], None)
        if self.state == "preparing":
            self._set_state("running")

    def _show_history(self, info: dict, recall: bool) -> None:
        """Frame the session's run and plot its history (session.history as StepMetrics);
        recall: also list its stage-end recall results."""
        tc = info["train_config"]
        tune = tc.tune_steps if info.get("has_tune") else 0
        self.plots.start_run(tc.pretrain_steps + tune, tc.pretrain_steps, tune,
                             info["model_config"].vocab_size, tc.grad_clip)
        records = info.get("history") or []  # StepMetrics
        if records:
            self.plots.add_metrics(records)
        if recall:
            for m in records:
                if m.recall:
                    self.samples_panel.add_recall(m.step, m.recall)
        self.plots.redraw()

    def _on_metrics(self, records: list) -> None:
        self.plots.add_metrics(records)
        for m in records:
            if m.samples:
                self.samples_panel.add(m.step, m.stage, m.samples)
            if m.recall:
                line = self.samples_panel.add_recall(m.step, m.recall)
                self.statusBar().showMessage(line, 20000)
        if self.state in ("running", "preparing"):
            self.run_bar.show_step(records[-1])

    def _on_autosaved(self, folder: str, step: int) -> None:
        self.run_bar.show_run_folder(folder, step)

    def _on_paused(self, step: int) -> None:
        if self.state == "stopping":  # Stop came while pausing: finished follows
            return
        self._set_state("paused")
        self.run_bar.pause_pace()
        self.run_bar.show_text(f"Paused at step {step}: chat or export now, or Resume.")

    def _on_finished(self, result: dict) -> None:
        self.plots.redraw()
        run_dir, saved = result.get("run_dir"), result.get("saved_step")
        where = f" Saved (step {saved})." if run_dir and saved is not None else ""
        if result.get("failed"):
            text = "Training stopped with an error: see the message." + where
        elif result.get("stopped"):
            text = f"Stopped at step {result['step']}.{where} Chat with the model or export it."
        else:
            text = f"Finished {result['step']} steps.{where} Chat with the model or export it."
        self.run_bar.show_text(text)
        if run_dir:
            self.run_bar.show_run_folder(run_dir, saved, saving=False)
        tc = result.get("train_config")
        if self.resume_info is not None and tc is not None:  # Continue goes on from here
            self.resume_info.update(step=result["step"], pretrain_steps=tc.pretrain_steps,
                                    tune_steps=tc.tune_steps)
            self.run_bar.set_continue(result["step"])
        self._set_state("idle")
        if self.has_model and not result.get("failed"):
            self.tabs.setCurrentWidget(self.samples_panel)
        self.trainingFinished.emit(result)

    def _on_loaded(self, info: dict | None) -> None:
        """A checkpoint or GGUF was opened (None: it could not be; the error is shown)."""
        self._busy = ""
        if info is None:
            self._update_actions()
            return
        tc = info["train_config"]
        self.resume_info = {"step": info["step"], "pretrain_steps": tc.pretrain_steps,
                            "tune_steps": tc.tune_steps, "has_tune": info.get("has_tune"),
                            "path": info.get("path")}
        self._adopt_model(info)
        self.settings_panel.set_from_configs(info["model_config"], tc)
        self.samples_panel.clear()
        self._show_history(info, recall=True)
        self.run_bar.set_continue(info["step"])
        what = "GGUF" if info.get("source") == "gguf" else "Checkpoint"
        self.run_bar.show_text(f"{what} opened at step {info['step']}: chat, export, or "
                               "Continue training.", reset=True)
        self._update_actions()
        self.modelOpened.emit(info)
