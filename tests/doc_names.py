"""Read the code names out of docs/ENGINE_API.md and check each against the engine.

The doc names things in backtick spans and fenced code blocks: file paths (`engine/x.py`),
calls with their arguments (`export_gguf(bundle, path, dtype="f32", force=False)`), dotted
names (`attention.TILES`, `engine.errors.StudioError`), attributes of the class named just
before in the same paragraph (`.validate()`, `.vocab_size`), class names and constants.
`problems(doc_text)` returns one line per name the code does not have, or a signature that
differs (a missing argument, an unknown one, a moved one, another default). tests/test_docs.py
runs it; this module is its parser, kept apart so the test file stays short.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from opencl_llm_studio import engine

ROOT = Path(__file__).resolve().parents[1]
# Names in the doc that are not the engine's: callbacks the caller passes in (their shape is
# documented, not defined), and other projects' names.
CALLBACKS = {"on_phase", "slide", "on_token", "loss_fn"}
EXTERNAL = {"tokenizers", "LlamaModel", "np", "cl", "gguf", "transformers"}
# How the doc refers to instances: `session.train()` is TrainingSession.train.
ALIASES = {"session": "opencl_llm_studio.engine.training.session.TrainingSession", "rt": "opencl_llm_studio.engine.opencl.runtime.Runtime",
           "monitor": "opencl_llm_studio.engine.progress.Monitor", "tok": "opencl_llm_studio.engine.data.tokenizer.Tokenizer"}
# Python's own names and the typing names a signature shows
PYTHON = set(dir(builtins)) | {"Path", "Iterator", "Optional", "Callable"}
SCRIPTS = {"opencl_llm_studio.engine.files.hf.train_ddp"}  # a standalone torchrun script (imports torch), not engine API
SKIP_CAPS = ("LLM_STUDIO_", "CL_")  # environment variables and OpenCL constants, not names

_FENCE = re.compile(r"```.*?\n(.*?)```", re.S)
_SPAN = re.compile(r"`([^`]+)`")
_CALL = re.compile(r"(\.?[A-Za-z_][\w./]*)\(")
_PATH = re.compile(r"^(?:engine|kernels|tests|studio|benchmarks|resources|docs)/(?:[\w/]*/|"
                   r"[\w/]+\.(?:py|cl|h|md|txt|sh|toml))$")
_DOTTED = re.compile(r"^\.?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


class Missing(Exception):
    """A doc name the code lacks; the message says which."""


def _index() -> tuple[dict, dict]:
    """(module short name -> module, defined name -> [objects]) over every engine module."""
    modules, names = {}, {}
    for info in pkgutil.walk_packages(engine.__path__, "opencl_llm_studio.engine."):
        if info.name in SCRIPTS:
            continue
        mod = importlib.import_module(info.name)
        modules[info.name.rsplit(".", 1)[1]] = mod
        for k, v in vars(mod).items():
            if getattr(v, "__module__", mod.__name__) == mod.__name__ and not k.startswith("_"):
                names.setdefault(k, []).append(v)
    return modules, names


def _import_dotted(path: str):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = _attr(obj, attr)
        return obj
    raise Missing(f"no module {path}")


def _attr(obj, name: str):
    """obj.name, or a marker for an instance attribute a class sets (dataclass field, NamedTuple
    field, `self.name = ...` / `.name =` in its module)."""
    if hasattr(obj, name):
        return getattr(obj, name)
    if inspect.isclass(obj):
        fields = ({f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj)
                  else set())
        src = inspect.getsource(inspect.getmodule(obj))
        if name in fields or re.search(rf"\bself\.{name}\b", src):
            return _InstanceAttr(obj, name)
    raise Missing(f"{getattr(obj, '__name__', obj)!s} has no attribute {name!r}")


@dataclasses.dataclass
class _InstanceAttr:
    owner: type
    name: str


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments of a call's text."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _arg_text(s: str, start: int) -> str:
    """The text between the '(' at s[start - 1] and its matching ')'."""
    depth = 1
    for i in range(start, len(s)):
        depth += s[i] == "("
        depth -= s[i] == ")"
        if depth == 0:
            return s[start:i]
    return s[start:]


def _literal(text: str):
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False, None


def _params(obj) -> list | None:
    """obj's parameters without self/cls, or None when it has no signature to check."""
    if isinstance(obj, _InstanceAttr):
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [p for p in sig.parameters.values() if p.name not in ("self", "cls")]


def _documented(args: list[str]) -> list[tuple[str, str | None]]:
    """(name, default text or None) of each argument written as `name`, `name: type` or
    `name=default`; literals and `...` are skipped."""
    out = []
    for a in args:
        m = re.match(r"([A-Za-z_]\w*)\s*(?::[^=]*)?(?:=\s*(.+))?$", a)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def _argument_problems(name, params, documented, is_signature) -> tuple[list[str], list[int]]:
    """Unknown arguments and other defaults; returns them and the code positions seen."""
    pos = {p.name: i for i, p in enumerate(params)}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    problems, seen = [], []
    for arg, default in documented:
        if arg not in pos:
            if not var_kw:
                problems.append(f"{name}: no argument {arg!r} (has {', '.join(pos)})")
            continue
        seen.append(pos[arg])
        ok, value = _literal(default) if default else (False, None)
        if is_signature and ok and params[pos[arg]].default != value:
            problems.append(f"{name}: {arg} defaults to {params[pos[arg]].default!r}, "
                            f"not {value!r}")
    return problems, seen


def check_signature(name: str, obj, arg_text: str) -> list[str]:
    """Problems of the documented argument list `arg_text` against obj's signature. A list of
    bare names is a signature (every required argument must be there, defaults must match);
    one with literals or `...` is an example (only the names it uses are checked)."""
    params = _params(obj)
    if params is None:
        return []
    args = _split_args(arg_text)
    is_signature = any(re.fullmatch(r"\w+(\s*:.*)?", a) for a in args)
    example = any(a.startswith("...") or not re.match(r"[A-Za-z_]\w*\s*(?:[:=]|$)", a)
                  for a in args)
    documented = _documented(args)
    problems, seen = _argument_problems(name, params, documented, is_signature)
    if seen != sorted(seen):
        problems.append(f"{name}: arguments in another order than the code's "
                        f"({', '.join(p.name for p in params)})")
    if is_signature and not example:
        named = {arg for arg, _ in documented}
        problems += [f"{name}: required argument {p.name!r} not documented" for p in params
                     if p.default is p.empty and p.name not in named
                     and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return problems


class Checker:
    """Resolves the doc's names against the engine; `context` is the class a leading-dot name
    (`.validate()`) belongs to, reset at each paragraph."""

    def __init__(self):
        self.modules, self.names = _index()
        self.context = None
        self.problems: list[str] = []

    def resolve(self, dotted: str):
        """The object `dotted` names (candidates when a bare name is defined in several
        modules: the first that resolves wins). Raises Missing."""
        dotted = dotted.replace("/", ".").removesuffix(".py")
        if dotted.startswith("."):
            if self.context is None:
                raise Missing(f"{dotted}: no class named before it in the paragraph")
            return _walk(self.context, dotted[1:].split("."))
        head, *rest = dotted.split(".")
        if head == "engine":   # the doc names modules inside the one import package
            return _import_dotted("opencl_llm_studio." + dotted)
        if head in ALIASES:
            return _walk(_import_dotted(ALIASES[head]), rest)
        if head in self.modules:
            return _walk(self.modules[head], rest)
        if head in self.names:
            for cand in self.names[head]:
                try:
                    return _walk(cand, rest)
                except Missing:
                    pass
        raise Missing(f"{dotted}: not defined in the engine")

    def owner_of(self, dotted: str, obj):
        """The class later leading-dot names refer to after `dotted` names obj."""
        if inspect.isclass(obj):
            return obj
        if isinstance(obj, _InstanceAttr):
            return self.context
        head = dotted.replace("/", ".").split(".")[0]
        if head in ALIASES:
            return _import_dotted(ALIASES[head])
        qual = getattr(obj, "__qualname__", "")
        if "." in qual and inspect.getmodule(obj):
            return getattr(inspect.getmodule(obj), qual.split(".")[0], None)
        return None  # a module-level function: `.name` after it has no class

    def check_text(self, text: str) -> None:
        """Every call, then every other name, in one span or line of a code block. The class a
        span starts with (or a call's owner) becomes the context of later `.name`s."""
        calls, first = set(), True
        for m in _CALL.finditer(text):
            name = m.group(1)
            if m.start() and text[m.start() - 1] == ")":
                name = ")." + name.lstrip(".")  # KVDecoder(model).reset(...): the call's class
            arg_text = _arg_text(text, m.end())
            split = "/" in name and not name.startswith("engine/")
            for one in name.split("/") if split else [name]:  # rope_forward/rope_backward(...)
                calls.add(one)
                self._check_call(one, arg_text, set_context=first or one.startswith(")"))
            first = False
        first = True
        for token in re.split(r"[\s,;:()\[\]{}=|<>+*'\"-]+", text.strip()):
            token = token.rstrip(".")
            if _PATH.match(token):
                if not ((ROOT / token).exists() or (ROOT / "opencl_llm_studio" / token).exists()):
                    self.problems.append(f"{token}: no such file in the repository")
            elif "/" not in token:
                self._check_name(token, calls, first and text.lstrip().startswith(token))
            elif token.startswith("engine/"):  # engine/training/progress.Monitor
                self._check_name(token.replace("/", "."), calls, first)
            first = False

    def _found(self, name: str):
        """resolve(name), or None with the problem noted."""
        try:
            return self.resolve(name)
        except Missing as e:
            self.problems.append(str(e))
            return None

    def _check_call(self, name: str, arg_text: str, set_context: bool) -> None:
        name = name.removeprefix(")")
        head = name.lstrip(".").split(".")[0]
        if head in CALLBACKS or head in EXTERNAL or head in PYTHON:
            return
        obj = self._found(name)
        if obj is None:
            return
        if inspect.ismodule(obj):
            self.problems.append(f"{name}: a module, not a function")
            return
        self.problems += check_signature(name, obj, arg_text)
        if set_context and not name.startswith("."):
            self.context = self.owner_of(name, obj)

    def _check_name(self, token: str, calls: set, set_context: bool) -> None:
        if not token or token in calls or not _DOTTED.match(token):
            return
        if token.startswith(".") and not set_context:
            return  # blk.{i}.attn_q.weight: a tensor name, not an attribute
        head = token.lstrip(".").split(".")[0]
        if head in PYTHON:
            return
        checked = (token.startswith(".") or head in ALIASES or head == "engine"
                   or head in ("attention", "attention_gemm", "runtime")
                   or re.fullmatch(r"(?:[A-Z][a-z0-9]+)+", head)  # a class name
                   or (head.isupper() and len(head) > 2 and not head.startswith(SKIP_CAPS)))
        if not checked or head in EXTERNAL or token.endswith((".npz", ".jsonl", ".json")):
            return
        obj = self._found(token)
        if obj is not None and set_context and not token.startswith("."):
            self.context = self.owner_of(token, obj)


def _walk(obj, attrs):
    for a in attrs:
        obj = _attr(obj, a)
    return obj


def _logical_lines(code: str) -> list[str]:
    """Lines of code, a call continued over several lines joined into one."""
    out, cur = [], ""
    for line in code.splitlines():
        cur = f"{cur} {line.strip()}" if cur else line.strip()
        if cur.count("(") <= cur.count(")"):
            out.append(cur)
            cur = ""
    return out + ([cur] if cur else [])


def paragraphs(doc: str):
    """(text of each span or code block) grouped by paragraph; code blocks without comments."""
    for block in re.split(r"(```.*?```)", doc, flags=re.S):
        if block.startswith("```"):
            code = re.sub(r"#.*", "", _FENCE.match(block).group(1))
            yield _logical_lines(code)
            continue
        for para in re.split(r"\n\s*\n|\n(?=- )", block):  # paragraphs and list items
            yield _SPAN.findall(para)


def problems(doc: str) -> list[str]:
    """One line per doc name the code lacks or documents with another signature."""
    c = Checker()
    for spans in paragraphs(doc):
        c.context = None
        for s in spans:
            c.check_text(s)
    return list(dict.fromkeys(c.problems))
