"""Dialogue files from other trainers: JSON and JSONL in the formats people bring.

A tune file whose first non-blank character is "[" or "{" is read as JSON: the whole text as one
JSON value (a pretty-printed .json file: an array of records, or one record), else one record
per line (JSONL). A record is one dialogue in any of these formats:

  OpenAI chat      {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}]}
                   (content may also be a list of {"type": "text", "text": "..."} parts)
  ShareGPT         {"conversations": [{"from": "system"|"human"|"gpt", "value": "..."}]}
  Alpaca           {"instruction": "...", "input": "..." (optional), "output": "...",
                    "system": "..." (optional)}: User = instruction, a blank line, input
  a bare list      [{"role": ..., "content": ...}, ...] (also with "from"/"value")

Everything becomes engine.data.dialogue.Message turns, checked by the same rules as the text format,
so a dialogue is encoded in the one chat format whatever file it came from. A record in another
structure is refused naming what was found and the formats read here.
"""

from __future__ import annotations

import json
from typing import Any

from opencl_llm_studio.engine.errors import DataError

FORMATS_HINT = (
    'Supported: a JSON array or JSONL of OpenAI {"messages": [{"role", "content"}]}, ShareGPT '
    '{"conversations": [{"from": "human"/"gpt", "value"}]}, Alpaca {"instruction", "input", '
    '"output"} records, or bare lists of messages; or the text format of "User:" and '
    '"Assistant:" lines.')
ORDER_HINT = ("Each dialogue is optional system messages, then user and assistant messages in "
              "turn, ending with an assistant answer; none is empty. " + FORMATS_HINT)
# role names of ShareGPT and OpenAI files -> our roles
ROLE_NAMES = {"system": "system", "user": "user", "human": "user", "assistant": "assistant",
              "gpt": "assistant", "chatgpt": "assistant", "model": "assistant", "bot": "assistant"}

Turn = tuple[str, str]   # (role, content)


def parse_json_records(text: str, source: str) -> list[tuple[str, list[Turn]]]:
    """(where, turns) per dialogue of a JSON or JSONL tune text; where names the record ("line
    3", "item 2") for messages. Raises DataError: invalid JSON (line and column), a record of
    an unknown structure (its keys and the supported formats), a message without a role or
    text, an unknown role."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list) and whole and all(isinstance(x, (dict, list)) for x in whole) \
            and not _is_message(whole[0]):
        return [(f"item {k + 1}", record_turns(r, f"{source}, item {k + 1}"))
                for k, r in enumerate(whole)]
    if isinstance(whole, (dict, list)):   # one record (a one-line JSONL file too)
        first = next(n for n, line in enumerate(text.split("\n"), 1) if line.strip())
        return [(f"line {first}", record_turns(whole, f"{source}, line {first}"))]
    out = []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{source}, line {n}: not valid JSON ({e.msg} at column {e.colno}).",
                            "Each line of a JSONL file is one JSON record. " + FORMATS_HINT) \
                from None
        out.append((f"line {n}", record_turns(record, f"{source}, line {n}")))
    return out


def record_turns(record: Any, where: str) -> list[Turn]:
    """The (role, content) turns of one record in any supported format; DataError otherwise."""
    if isinstance(record, list):
        return _messages(record, where)
    if not isinstance(record, dict):
        raise DataError(f"{where}: found {_describe(record)}, not a dialogue.", FORMATS_HINT)
    for key in ("messages", "conversations"):
        if key in record:
            return _messages(record[key], f"{where}, {key!r}")
    if "instruction" in record and "output" in record:
        return _alpaca(record, where)
    raise DataError(f"{where}: found {_describe(record)}, a structure this app does not read.",
                    FORMATS_HINT)


def _alpaca(record: dict, where: str) -> list[Turn]:
    fields = {k: record.get(k) or "" for k in ("system", "instruction", "input", "output")}
    bad = [k for k, v in fields.items() if not isinstance(v, str)]
    if bad:
        raise DataError(f"{where}: the Alpaca field {bad[0]!r} is not a string.", FORMATS_HINT)
    question = fields["instruction"].strip()
    if fields["input"].strip():
        question += "\n\n" + fields["input"].strip()
    system = [("system", fields["system"])] if fields["system"].strip() else []
    return system + [("user", question), ("assistant", fields["output"])]


def _messages(msgs: Any, where: str) -> list[Turn]:
    if not isinstance(msgs, list) or not msgs:
        raise DataError(f"{where}: expected a non-empty list of messages, found "
                        f"{_describe(msgs)}.", FORMATS_HINT)
    return [_message(m, f"{where}, message {k + 1}") for k, m in enumerate(msgs)]


def _message(m: Any, where: str) -> Turn:
    role = m.get("role", m.get("from")) if isinstance(m, dict) else None
    content = m.get("content", m.get("value")) if isinstance(m, dict) else None
    if isinstance(content, list):   # OpenAI content parts: the text ones, in order
        content = _text_parts(content)
    if not isinstance(role, str) or not isinstance(content, str):
        raise DataError(f'{where}: a message needs "role" and "content" (or ShareGPT\'s "from" '
                        f'and "value") strings; found {_describe(m)}.', FORMATS_HINT)
    if role.strip().lower() not in ROLE_NAMES:
        raise DataError(f"{where}: unknown role {role!r}; expected one of "
                        f"{', '.join(sorted(ROLE_NAMES))}.", FORMATS_HINT)
    return ROLE_NAMES[role.strip().lower()], content


def _text_parts(parts: list) -> str | None:
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    return "".join(texts) if texts and all(isinstance(t, str) for t in texts) else None


def _is_message(x: Any) -> bool:
    """Whether x looks like one message (so a list of them is one dialogue, not a file of them)."""
    return isinstance(x, dict) and ("role" in x or "from" in x)


def _describe(x: Any) -> str:
    """What a JSON value is, for a message: its keys, its length, its start."""
    if isinstance(x, dict):
        return "an object with keys " + (", ".join(repr(k) for k in list(x)[:6]) or "none")
    if isinstance(x, list):
        return f"a list of {len(x)} items"
    if isinstance(x, str):
        return f"the string {x[:30]!r}"
    return f"the value {json.dumps(x)[:30]}"
