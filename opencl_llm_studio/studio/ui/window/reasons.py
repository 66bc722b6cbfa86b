"""Why a control of the main window is off: the tooltips studio.ui.window.window_controls and the
Device menu (studio.ui.window.tune_actions) give. One module, so neither imports the other for them."""

# Why Export is off (its tooltip):
NO_MODEL_WHY = "No model yet: train one or open a checkpoint."
BUSY_MODEL_WHY = "Training is running: pause it to export the current weights."
TASK_WHY = ("Wait for the export, save, opening, kernel tuning or Auto's device measure in "
            "progress.")
NO_DEVICE_WHY = "No OpenCL device: see the Device box."
# Why an input of a run is off (its tooltip):
BUSY_WHY = "Fixed while a run is going (paused too): Stop it, or let it finish, to change this."
OPENED_WHY = ("The opened model fixes this: its step counts, batch size, learning rate and "
              "minutes more can change. New model (beside Continue) trains one from scratch "
              "with other settings.")
OPENED_DATA_WHY = ("The opened model keeps its texts. A model without dialogues can take a tune "
                   "file: its tuning stage then tunes on it.")
