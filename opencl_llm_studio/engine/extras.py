"""Optional extras: which module comes with which `pip install "opencl-llm-studio[EXTRA]"`.

The base install trains, chats and exports GGUF. The Hugging Face round trip, pretrained open
models' tokenizers and chat templates, the torchrun script and TensorBoard files need packages a
person may not have (pyproject.toml's [project.optional-dependencies]). A missing one is a
user's fix, not a bug: `missing_extra(exc)` turns the ModuleNotFoundError into a StudioError that
names the extra and the command that installs it, for both front ends.
"""

from __future__ import annotations

from opencl_llm_studio.engine.errors import StudioError

DISTRIBUTION = "opencl-llm-studio"
# top-level module -> (extra, what it is for); mirrors pyproject.toml's extras
EXTRAS = {
    "safetensors": ("hf", "Hugging Face folders (export --format hf, import, scale-out)"),
    "tokenizers": ("hf", "the tokenizers of pretrained open models and Hugging Face folders"),
    "jinja2": ("hf", "the chat templates of pretrained open models"),
    "transformers": ("hf", "the transformers side of a Hugging Face round trip"),
    "torch": ("torch", "bfloat16 Hugging Face folders and the torchrun script"),
    "tensorboardX": ("tensorboard", "TensorBoard event files (train --tensorboard)"),
}


class MissingExtra(StudioError):
    """A feature whose optional package is not installed; the hint is the install command."""


def install_command(extra: str) -> str:
    """The pip command that adds `extra` to this installation."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def missing_extra(exc: BaseException) -> MissingExtra | None:
    """A MissingExtra for a ModuleNotFoundError of an optional extra's module, else None
    (a missing required package is a broken install, not a user's choice: left as it is)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    if top not in EXTRAS:
        return None
    extra, purpose = EXTRAS[top]
    return MissingExtra(
        f"This needs the Python package {top!r} ({purpose}), which is not installed.",
        f"Install the [{extra}] extra into the same environment: {install_command(extra)}")


def require(module: str) -> None:
    """Raise MissingExtra now when `module` (a key of EXTRAS) cannot be imported: a command
    checks before it starts work that would end in that import (train --tensorboard)."""
    try:
        __import__(module)
    except ModuleNotFoundError as e:
        raise (missing_extra(e) or e) from None
