"""The panels of the window: settings, data, device, run bar, plots, samples, chat, runs, autosave."""
