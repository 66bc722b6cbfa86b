"""Bundled default corpora (pretrain.txt, tune.txt) and the app icon (icon.svg, icon.png): package
data, and the one function that finds it."""

from importlib import resources as _resources
from pathlib import Path


def path(name: str) -> Path:
    """The file `name` of this package, wherever the package is installed (a wheel, an editable
    checkout, the desktop bundle): never relative to a checkout. The file may not exist."""
    return Path(str(_resources.files(__name__))) / name
