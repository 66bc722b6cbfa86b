"""Ollama's Modelfile parser, ported line by line to Python for the tests: the judge of every
Modelfile the export writes (engine.files.modelfile).

Source: github.com/ollama/ollama, parser/parser.go (`ParseFile`, `parseRuneForState`,
`unquote`, `isSpace`, `isNewline`, `isValidCommand`), read 2026-12-01. Go's strconv.IsPrint
(letters, marks, numbers, punctuation, symbols and the ASCII space) is Python's
str.isprintable; Go's strings.TrimSpace is str.strip (the characters where they differ are not
printable, so never reach the buffer). Returns the commands as (name, args) pairs, FROM as
"model", PARAMETER as the parameter's name, as ParseFile's Modelfile.Commands.
"""

from __future__ import annotations

import re

NIL, NAME, VALUE, PARAMETER, MESSAGE, COMMENT = range(6)
COMMANDS = {"from", "license", "template", "system", "adapter", "draft", "renderer", "parser",
            "parameter", "message", "requires"}


class ParseError(ValueError):
    pass


def _is_space(r):
    return r in (" ", "\t")


def _is_newline(r):
    return r in ("\r", "\n")


def unquote(s):
    """parser.go unquote: (value, ok); one pair of quotes or triple quotes, no escapes."""
    if s[:3] == '"""':
        if len(s) >= 6 and s[-3:] == '"""':
            return s[3:-3], True
        return "", False
    if s[:1] == '"':
        if len(s) >= 2 and s[-1] == '"':
            return s[1:-1], True
        return "", False
    return s, True


def _next_state(r, cs):
    """parseRuneForState: (next state, rune to keep or "", error message or None)."""
    if cs == NIL:
        if r == "#":
            return COMMENT, "", None
        if _is_space(r) or _is_newline(r):
            return NIL, "", None
        return NAME, r, None
    if cs == NAME:
        if r.isascii() and r.isalpha():
            return NAME, r, None
        if _is_space(r):
            return VALUE, "", None
        return NIL, "", "invalid command"
    if cs == VALUE:
        if _is_newline(r) or _is_space(r):
            return NIL, r, None
        return VALUE, r, None
    if cs in (PARAMETER, MESSAGE):
        ok = r.isascii() and (r.isalpha() or (cs == PARAMETER and (r.isdigit() or r == "_")))
        if ok:
            return cs, r, None
        if _is_space(r):
            return VALUE, "", None
        return NIL, "", "unexpected EOF"
    if cs == COMMENT:
        return (NIL, "", None) if _is_newline(r) else (COMMENT, "", None)
    raise AssertionError(cs)


def parse(text: str) -> list[tuple[str, str]]:
    """parser.go ParseFile on a decoded text. Raises ParseError where Ollama refuses the file."""
    commands, b, curr, name, role, line = [], [], NIL, "", "", 1
    for r in text:
        if _is_newline(r):
            line += 1
        nxt, r, err = _next_state(r, curr)
        if err:
            raise ParseError(f"line {line}: {err}")
        if nxt != curr:
            buf = "".join(b)
            if curr == NAME:
                s = buf.lower()
                if s not in COMMANDS:
                    raise ParseError(f"line {line}: invalid command {buf!r}")
                if s == "parameter":
                    nxt = PARAMETER
                elif s == "message":
                    nxt, name = MESSAGE, s
                else:
                    name = "model" if s == "from" else s
            elif curr == PARAMETER:
                name = buf
            elif curr == MESSAGE:
                role = buf
            elif curr == VALUE:
                s, ok = unquote(buf.strip())
                if not ok or _is_space(r):
                    b.append(r)
                    continue
                if role:
                    s, role = f"{role}: {s}", ""
                commands.append((name, s))
            b = []
            curr = nxt
        if r and r.isprintable():
            b.append(r)
    if curr == VALUE:
        s, ok = unquote("".join(b).strip())
        if not ok:
            raise ParseError("unexpected EOF")
        commands.append((name, f"{role}: {s}" if role else s))
    elif curr not in (NIL, COMMENT):
        raise ParseError("unexpected EOF")
    if not any(n == "model" for n, _ in commands):
        raise ParseError("no FROM line")
    return commands


def render_go(template: str, messages: list[dict]) -> str:
    """The text Ollama's Go template engine makes of `template` for `messages` (role, content),
    for the templates of engine.files.ollama_template.FAMILIES only: one `range .Messages` loop over `.Role` and `.Content`,
    `{{-` trimming the whitespace before it. A check of the Modelfile (tests), not a general
    Go template engine."""
    text = re.sub(r"\s*\{\{-", "{{", template)
    head, rest = text.split("{{ range .Messages }}", 1)
    body, tail = rest.split("{{ end }}", 1)
    out = head
    for m in messages:
        out += body.replace("{{ .Role }}", m["role"]).replace("{{ .Content }}", m["content"])
    return out + tail
