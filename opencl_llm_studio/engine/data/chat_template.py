"""A pretrained model's own chat template: render conversations, tokenize them for tuning with a
loss mask on the assistant's tokens, and say which tokens end a turn.

Rendering follows transformers (`chat_template_utils._compile_jinja_template` and
`render_jinja_template`): jinja2's ImmutableSandboxedEnvironment (a downloaded template is
untrusted code: it cannot reach Python attributes or mutate its inputs) with trim_blocks and
lstrip_blocks, the loopcontrols extension, a `tojson` filter that keeps non-ASCII text, the
globals `raise_exception` and `strftime_now`, and the variables messages, tools (None),
documents (None), add_generation_prompt and the tokenizer's special tokens (bos_token,
eos_token, unk_token). `{% generation %}` blocks (transformers' AssistantTracker) render their
body. Tokenizing the text equals transformers' apply_chat_template(tokenize=True): special-token
texts become their ids and no other BOS is added.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Iterable

from opencl_llm_studio.engine.errors import DataError


@dataclass(frozen=True)
class Message:
    """One turn: role is "user", "assistant" or "system"; content is the stripped text."""
    role: str
    content: str


_HINT = ("The model's chat template could not render this conversation; check that turns "
         "alternate user / assistant (a system turn only first).")


def _environment():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}` renders its body (transformers marks the
        assistant's text with it; the mask here comes from rendering prefixes instead)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


@lru_cache(maxsize=8)
def _compiled(template: str):
    import jinja2
    try:
        return _environment().from_string(template)
    except jinja2.TemplateError as e:
        raise DataError(f"The model's chat template is not valid Jinja: {e}.",
                        "Import the model again, or give it a chat template that parses.") from None


def special_tokens(tokenizer) -> dict[str, str]:
    """{"bos_token": "<s>", "eos_token": ..., "unk_token": ...} for the ids the tokenizer has."""
    out = {}
    for name, i in (("bos_token", tokenizer.bos_id), ("eos_token", tokenizer.eos_id),
                    ("unk_token", tokenizer.unk_id)):
        if i is not None:
            out[name] = tokenizer.id_to_piece(i)
    return out


def render(template: str, messages: Iterable[Message | dict], add_generation_prompt: bool = False,
           **variables) -> str:
    """The conversation as the template writes it. messages: Message or {"role", "content"}
    dicts; variables: bos_token, eos_token, ... (special_tokens) and any the template reads.
    Raises DataError when the template raises or breaks the sandbox's rules."""
    import jinja2
    chat = [dict(m) if isinstance(m, dict) else {"role": m.role, "content": m.content}
            for m in messages]
    context = {"tools": None, "documents": None, **variables}
    try:
        return _compiled(template).render(messages=chat, add_generation_prompt=add_generation_prompt,
                                          **context)
    except jinja2.TemplateError as e:   # raise_exception, undefined names, sandbox violations
        raise DataError(f"The model's chat template refused the conversation: {e}.",
                        _HINT) from None


class ChatFormat:
    """A tokenizer with a chat template (engine.data.open_tokenizer.OpenTokenizer): prompts, tuning
    ids with their loss mask, and the stop ids. Raises DataError when it has no template."""

    def __init__(self, tokenizer, template: str | None = None):
        """tokenizer: an OpenTokenizer; template: Jinja text (default: the tokenizer's)."""
        self.tokenizer = tokenizer
        self.template = tokenizer.chat_template if template is None else template
        if not self.template:
            raise DataError("This model has no chat template.",
                            "Chat with a model tuned for chat (e.g. an -Instruct or -Chat "
                            "model), or give its template.")
        self.variables = special_tokens(tokenizer)

    @property
    def stop_ids(self) -> list[int]:
        """Token ids that end the assistant's turn (eos and the template's end-of-turn tokens)."""
        return list(self.tokenizer.stop_ids)

    def render(self, messages, add_generation_prompt: bool = False) -> str:
        return render(self.template, messages, add_generation_prompt, **self.variables)

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Ids the model sees before it answers: the conversation (a trailing assistant turn
        left out) and the template's generation prompt."""
        if messages and messages[-1].role == "assistant":
            messages = messages[:-1]
        return self.tokenizer.encode(self.render(messages, add_generation_prompt=True))

    def assistant_spans(self, messages: list[Message]) -> tuple[str, list[tuple[int, int]]]:
        """(text, character spans of each assistant turn in it): a turn's span runs from the
        end of the prefix rendered with the generation prompt to the end of the prefix that
        includes the turn, so it holds the answer and the end-of-turn text the template puts
        after it (the model learns to stop). Raises DataError for a template whose renders of
        a conversation's prefixes are not prefixes of the whole."""
        text = self.render(messages)
        spans = []
        for i, m in enumerate(messages):
            if m.role != "assistant":
                continue
            before = self.render(messages[:i], add_generation_prompt=True)
            upto = self.render(messages[:i + 1])
            if not (upto.startswith(before) and text.startswith(upto)):
                raise DataError("The model's chat template renders earlier turns differently "
                                "once later turns follow, so the assistant's tokens cannot be "
                                "found for tuning.", "Tune with single-turn dialogues.")
            spans.append((len(before), len(upto)))
        return text, spans

    def encode_dialogue(self, messages: list[Message]) -> tuple[list[int], list[int]]:
        """(ids, loss_mask) of a whole dialogue, as engine.data.dialogue.encode_dialogue: ids equal
        transformers' apply_chat_template(tokenize=True); the mask is 1 on the tokens that start
        inside an assistant span (assistant_spans), else 0."""
        text, spans = self.assistant_spans(messages)
        ids, offsets = self.tokenizer.encode_offsets(text)
        mask = [int(any(a <= start < b for a, b in spans)) for start, _ in offsets]
        return ids, mask
