"""Which controls of the main window are on: the control table of the run state
(studio.protocol.CONTROLS, held by the RunController), narrowed by what the state does not know:
the settings, the data and the device on screen, the model at hand, a file task in progress.
A control that is off says why in its tooltip (or the run bar's hint, for Train)."""

from __future__ import annotations

from opencl_llm_studio.engine.errors import ConfigError, NothingToTrain
from opencl_llm_studio.engine.training.session import check_continuation
from opencl_llm_studio.studio.protocol import FileTask
from opencl_llm_studio.studio.ui.run.run_controller import RunController
from opencl_llm_studio.studio.ui.window.reasons import (BUSY_MODEL_WHY, BUSY_WHY, NO_DEVICE_WHY, NO_MODEL_WHY,
                                                 OPENED_DATA_WHY, OPENED_WHY, TASK_WHY)
from opencl_llm_studio.studio.ui.panels.run_bar import STOP_TIP, STOP_TUNING_TIP
from opencl_llm_studio.studio.ui.window.tune_actions import TuneActions
from opencl_llm_studio.studio.ui.widgets import enable_with_reason
from opencl_llm_studio.studio.ui.window.window_actions import FileMenu
from opencl_llm_studio.studio.ui.window.window_layout import Panels

class Guidance(str):
    """A reason Train waits that is the next step, not a fault (a run at its totals: raise
    them): the run bar shows it as a note rather than in red."""


class WindowControls:
    def __init__(self, panels: Panels, controller: RunController, menu: FileMenu,
                 tuning: TuneActions):
        self.panels = panels
        self.controller = controller
        self.menu = menu
        self.tuning = tuning   # the Device menu

    def update(self) -> None:
        """Apply the controls of the run state, narrowed (see the module)."""
        c, p, menu = self.controller, self.panels, self.menu
        rb = p.run_bar
        ctl, free = c.controls, c.task is FileTask.NONE
        why = self.train_problem()
        rb.train_button.setEnabled(ctl.train and free and why is None)
        rb.set_hint(why if ctl.hint else None, error=not isinstance(why, Guidance))
        rb.pause_button.setEnabled(ctl.pause)
        rb.pause_button.setText("Resume" if ctl.resume else "Pause")
        tuning = c.task is FileTask.TUNE   # Stop cancels it
        rb.stop_button.setEnabled(ctl.stop or tuning)
        rb.stop_button.setToolTip(STOP_TUNING_TIP if tuning else STOP_TIP)
        use = ctl.use_model and free and c.has_model
        for w in (menu.export_action, menu.save_action):
            w.setEnabled(use)
        enable_with_reason(rb.export_button, use, NO_MODEL_WHY if not c.has_model else
                           BUSY_MODEL_WHY if not ctl.use_model else TASK_WHY)
        self.apply_editable(ctl.edit)
        opening = ctl.open_model and free
        for w in [rb.new_button, *menu.open_actions]:
            w.setEnabled(opening)
        menu.new_model_action.setEnabled(opening and c.continue_from is not None)
        self.tuning.update()
        if use:
            p.chat_panel.set_available(True)
        else:
            p.chat_panel.set_available(
                False, ctl.chat_note or (TASK_WHY if c.has_model else NO_MODEL_WHY))

    def train_problem(self) -> str | None:
        """Why Train (or Continue) cannot start with what is on screen, or None."""
        sp = self.panels.settings_panel
        if not sp.is_valid():
            return "Fix the setting marked in red to train."
        if self.panels.device_panel.spec() is None:
            return NO_DEVICE_WHY
        if self.controller.continue_from is not None:
            return self.continue_problem()
        return self.panels.data_panel.problem(sp.spins["tuneStepsSpin"].value(),
                                              sp.spins["vocabSizeSpin"].value(),
                                              sp.tokenizer_kind())

    def continue_problem(self) -> str | None:
        """Why the opened model cannot be continued to the step counts on the left, or None:
        the engine's own rule (engine.training.session.check_continuation, as
        TrainingSession.continue_training and `llm-studio train --continue` apply it)."""
        r, tc = self.controller.continue_from, self.panels.settings_panel.train_config()
        if tc.time_budget_s > 0:   # "Train for N minutes": that much longer, by time
            return None
        # a model without dialogues gains a tuning stage on the open tune file (ContinueJob)
        has_tune = r.has_tune or bool(self.panels.data_panel.tune_text)
        try:
            check_continuation(r.step, r.pretrain_steps, r.tune_steps, has_tune,
                               tc.pretrain_steps, tc.tune_steps, require_more=True)
        except NothingToTrain as e:   # guidance, shown as a note
            return Guidance(e.describe().replace("\n", " "))
        except ConfigError as e:
            return e.describe().replace("\n", " ")
        return None

    def apply_editable(self, edit: bool) -> None:
        """The inputs of a run; an opened model fixes everything but how far to train it."""
        p, opened = self.panels, self.controller.continue_from
        only, why = None, {"": BUSY_WHY}
        if opened is not None:
            only = ("pretrainStepsSpin", "tuneStepsSpin", "batchSizeSpin", "learningRateSpin",
                    "trainMinutesSpin")
            if edit:
                why = {"": OPENED_WHY}
        p.settings_panel.set_editable(edit, only, why)
        # a model opened without dialogues can take a tune file (its tuning stage tunes on it)
        takes_tune = edit and (opened is None or not opened.has_tune)
        data_why = OPENED_DATA_WHY if opened is not None and edit else why[""]
        p.data_panel.set_editable(edit and opened is None, data_why, tune_on=takes_tune)
        p.device_panel.set_editable(edit and opened is None, why[""])
        pretrain_act, tune_act = self.menu.data_actions
        pretrain_act.setEnabled(edit and opened is None)
        tune_act.setEnabled(takes_tune)
        p.autosave_box.set_editable(edit, BUSY_WHY)
        # Continue in place or as a new run: a choice only for a model with its run folder
        p.run_bar.as_new_run_check.setEnabled(
            edit and opened is not None and opened.run_dir is not None)
