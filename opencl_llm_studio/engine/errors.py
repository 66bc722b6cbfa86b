"""User-facing errors of the engine.

Every error a person can cause (a bad file, a bad setting, a missing device) is raised as a
subclass of `StudioError`. Its message says what is wrong; `hint` says how to fix it. The CLI
prints both and exits non-zero; the studio shows both in a dialog. Anything else is a bug.
Where the way out differs between the two front ends (a file dialog in the studio, an option on
the command line), `cli_hint` says it in the command line's words.
"""


class StudioError(Exception):
    """Base class: `str(err)` is what went wrong, `err.hint` what to do about it (the studio's
    words), `err.cli_hint` the same in the command line's words (`hint` when not given)."""

    def __init__(self, message: str, hint: str = "", cli_hint: str | None = None):
        super().__init__(message)
        self.hint = hint
        self.cli_hint = hint if cli_hint is None else cli_hint

    def describe(self) -> str:
        """Message and hint as one paragraph, for a terminal or a dialog."""
        text = str(self)
        return f"{text}\n{self.hint}" if self.hint else text


class ConfigError(StudioError):
    """An invalid model or training setting (e.g. d_model not divisible by n_head).

    `fields`: the engine.config field names at fault, the one the message is about first (a
    form puts the message under it and marks them all; engine.limits); () when no one field
    is. `field`: the first of them, or None."""

    def __init__(self, message: str, hint: str = "", cli_hint: str | None = None,
                 field: str | tuple[str, ...] = ()):
        super().__init__(message, hint, cli_hint)
        self.fields: tuple[str, ...] = (field,) if isinstance(field, str) else tuple(field)

    @property
    def field(self) -> str | None:
        return self.fields[0] if self.fields else None


class NothingToTrain(ConfigError):
    """A run already at its step totals: not a fault in what was given; the way on is to raise
    the totals (the studio shows it as a note, not as an error)."""


class DataError(StudioError):
    """A corpus or dialogue file that cannot be used (empty, binary, not text, malformed)."""


class DeviceError(StudioError):
    """No OpenCL device, an unknown device name or index, or the device failed / ran out of memory."""


class CheckpointError(StudioError):
    """A checkpoint that cannot be written or read (corrupted, truncated, wrong format)."""


class ExportError(StudioError):
    """A GGUF or Hugging Face export that cannot be written (reading one back raises
    ModelImportError)."""


class ModelImportError(StudioError):
    """A model file or folder to read (a GGUF, a Hugging Face folder) that the engine cannot
    read or run: missing, damaged, foreign, or with features the engine lacks."""


class TrainingDiverged(StudioError):
    """The loss or gradient stayed NaN/Inf; the last good state was restored."""
