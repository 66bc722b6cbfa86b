"""Where the studio keeps its settings and its runs: one answer for the window and for the
command line (`llm-studio runs` / `plot` list the runs the studio wrote), read without Qt.

Settings: one INI file, settings_path() = <user config>/OpenCL LLM Studio/studio.conf
(~/.config/... on Linux, the file QSettings(APP_NAME, "studio") always used there;
~/Library/Application Support/... on macOS, AppData/Local/... on Windows). The window writes it
through QSettings in IniFormat (studio.ui.window.settings_store.open_settings); the command line reads
the one value it needs, the runs folder, with read_setting (configparser plus QSettings'
quoting).
Runs: the folder saved under RUNS_DIR_KEY (Autosave › Runs folder), else
<user data>/OpenCL LLM Studio/runs (local, not roaming: checkpoints are big), the folder Qt's
GenericDataLocation names. Neither depends on how the running QApplication is named.
"""

from __future__ import annotations

import configparser
from pathlib import Path

import platformdirs

APP_NAME = "OpenCL LLM Studio"
RUNS_DIR_KEY = "autosave/runs_dir"
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            '"': '"', "'": "'", "\\": "\\", "?": "?"}


def settings_path() -> Path:
    """The studio's settings file (INI)."""
    return platformdirs.user_config_path(APP_NAME, appauthor=False, roaming=False) / "studio.conf"


def default_runs_root() -> Path:
    """The runs folder when none was chosen."""
    return platformdirs.user_data_path(APP_NAME, appauthor=False, roaming=False) / "runs"


def runs_root() -> Path:
    """The runs folder the studio uses: the one chosen in Autosave (saved in settings_path()),
    else default_runs_root()."""
    value = read_setting(RUNS_DIR_KEY)
    return Path(value) if value else default_runs_root()


def read_setting(key: str, path=None) -> str | None:
    """The string QSettings (IniFormat) saved under `key` ("group/name") in `path` (default
    settings_path()), read without Qt; None when the file or key is missing, unreadable, or
    holds something other than one string (a list, a QVariant)."""
    group, _, name = key.rpartition("/")
    ini = configparser.RawConfigParser(delimiters=("=",), comment_prefixes=(";",),
                                       strict=False, interpolation=None)
    ini.optionxform = str   # QSettings keys are case-sensitive
    try:
        ini.read(path or settings_path(), encoding="utf-8")
        raw = ini.get(group or "General", name)
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    return _qsettings_string(raw)


def _qsettings_string(raw: str) -> str | None:
    """A value as QSettings writes a QString into an INI file (QSettingsPrivate::
    iniEscapedString): "..." around text with leading/trailing spaces or , ; " =, C escapes
    (\\\\ \\" \\t \\xhhhh ...), a leading @ doubled. None for a list (an unquoted comma) or a
    variant (@Variant(...), @ByteArray(...))."""
    out, i, quoted = [], 0, False
    while i < len(raw):
        c = raw[i]
        if c == '"':
            quoted = not quoted
        elif c == "," and not quoted:
            return None
        elif c == "\\" and i + 1 < len(raw):
            i += 1
            c = raw[i]
            if c == "x":
                digits = _run(raw, i + 1, "0123456789abcdefABCDEF", 4)
                out.append(chr(int(digits or "0", 16)))
                i += len(digits)
            elif c in "01234567":
                digits = _run(raw, i, "01234567", 3)
                out.append(chr(int(digits, 8)))
                i += len(digits) - 1
            else:
                out.append(_ESCAPES.get(c, c))
        else:
            out.append(c)
        i += 1
    text = "".join(out)
    if text.startswith("@@"):
        return text[1:]
    return None if text.startswith("@") else text


def _run(text: str, start: int, allowed: str, limit: int) -> str:
    """The longest prefix of text[start:] of at most `limit` characters from `allowed`."""
    end = start
    while end < len(text) and end - start < limit and text[end] in allowed:
        end += 1
    return text[start:end]
