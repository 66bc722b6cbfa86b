"""The Ollama Modelfile written beside an exported GGUF, in the words Ollama's parser reads.

Ollama's Modelfile parser (github.com/ollama/ollama, parser/parser.go, `ParseFile` and `unquote`)
reads a command's value up to a newline at which the value so far, with surrounding whitespace
trimmed, is complete: a value starting with `\"\"\"` is complete once it ends with `\"\"\"` (at
least 6 characters) and loses those three quotes at each end; one starting with `"` is complete
once it ends with `"` and loses one quote at each end; any other value is taken as it is. There
is no escape processing (`\\"` stays two characters), and characters Go's strconv.IsPrint
rejects (controls, format characters, spaces other than " ", except the tab and newlines it
keeps) are dropped. `modelfile_value` writes a string in a form that parser gives back
unchanged, or raises ExportError; tests/ollama_parser.py is a line-by-line port of ParseFile
that checks every value written here.
"""

from __future__ import annotations

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.errors import ExportError

# Ollama's Go-template twins of engine.data.dialogue.CHAT_TEMPLATES, without the BOS (Ollama adds it
# because tokenizer.ggml.add_bos_token is true). "{{-" trims the newline before it.
OLLAMA_TEMPLATES = {
    1: """{{- range .Messages }}
{{- if eq .Role "system" }}System: {{ .Content }}
{{ else if eq .Role "user" }}User: {{ .Content }}
Assistant:
{{- else if eq .Role "assistant" }} {{ .Content }}</s>
{{ end }}
{{- end }}""",
    2: """{{- range .Messages }}
{{- if eq .Role "system" }}System: {{ .Content }}
{{ else if eq .Role "user" }}User: {{ .Content }}
Assistant:
{{ else if eq .Role "assistant" }}{{ .Content }}</s>
{{ end }}
{{- end }}""",
}
OLLAMA_TEMPLATE = OLLAMA_TEMPLATES[2]
STOP_WORDS = ("</s>", "User:")   # the EOS piece, and a new question the model starts itself

_Q3 = '"""'


def _kept(c: str) -> bool:
    """Whether Ollama's parser keeps character c inside a value (Go's strconv.IsPrint is
    Python's str.isprintable: letters, marks, numbers, punctuation, symbols, ASCII space;
    the parser also keeps the tab and the newline it writes itself)."""
    return c.isprintable() or c in "\t\n"


def _complete(value: str) -> bool:
    """parser.go's unquote(...) ok: whether the value read so far ends the command."""
    if value.startswith(_Q3):
        return len(value) >= 6 and value.endswith(_Q3)
    if value.startswith('"'):
        return len(value) >= 2 and value.endswith('"')
    return True


def _reads_back(written: str, s: str) -> bool:
    """Whether the parser reads `written` (one command's value) back as s: complete at its end
    and at no newline before, and unquoted to s."""
    lines = written.split("\n")
    for k in range(1, len(lines)):
        if _complete("\n".join(lines[:k]).strip()):
            return False
    v = written.strip()
    if not _complete(v):
        return False
    if v.startswith(_Q3):
        v = v[3:-3]
    elif v.startswith('"'):
        v = v[1:-1]
    return v == s


def modelfile_value(s: str, what: str, bare: bool = False) -> str:
    """s as a Modelfile value Ollama's parser reads back exactly: "s" (bare s first when `bare`)
    or, first for multi-line text, \"\"\"s\"\"\"; the first form that reads back. what: how
    to name s in the error. Raises ExportError when s holds a character the parser drops (a
    control or format character, a carriage return) or no form reads back (e.g. a multi-line
    value holding \"\"\")."""
    bad = next((c for c in s if not _kept(c)), None)
    if bad is not None:
        raise ExportError(f"{what} contains the character {bad!r}, which Ollama's Modelfile "
                          "cannot hold.", "Remove it (rename the file) and export again.")
    forms = [f'"{s}"', f"{_Q3}{s}{_Q3}"]
    if "\n" in s:
        forms.reverse()
    for written in ([s] if bare else []) + forms:
        if _reads_back(written, s):
            return written
    raise ExportError(f"{what} ({s[:40]!r}) cannot be written so that Ollama reads it back "
                      "unchanged.", 'Avoid \'"""\' and lines ending in quotes in it.')


def from_value(gguf_name: str) -> str:
    """The FROM value for a GGUF file name in the Modelfile's folder ("./<name>": Ollama joins a
    relative path to the Modelfile's folder). ExportError when no form reads back."""
    return modelfile_value(f"./{gguf_name}", f"The file name {gguf_name!r}", bare=True)


def modelfile_text(gguf_name: str, config: ModelConfig, chat_format: int = 2,
                   chat=None) -> str:
    """Ollama Modelfile for a GGUF in the same folder: FROM, TEMPLATE (of `chat_format`, or an
    imported model's own: `chat`, an engine.files.ollama_template.OllamaChat, with its default
    SYSTEM prompt and its stop words), stop words, num_ctx (config.context_length). Raises
    ExportError (see modelfile_value)."""
    words = chat.stops if chat is not None else STOP_WORDS
    stops = "".join(f"PARAMETER stop {modelfile_value(w, 'A stop word')}\n" for w in words)
    go = chat.template if chat is not None else OLLAMA_TEMPLATES[chat_format]
    template = modelfile_value(go, "The chat template")
    system = (f"SYSTEM {modelfile_value(chat.system, 'The default system prompt')}\n"
              if chat is not None and chat.system else "")
    return (f"# Ollama: ollama create <name> -f <this file>; then ollama run <name>\n"
            f"FROM {from_value(gguf_name)}\n"
            f"TEMPLATE {template}\n"
            f"{system}"
            f"{stops}"
            f"PARAMETER num_ctx {config.context_length}\n")
