"""Tune-stage dialogues: parsing, the chat template, encoding with a loss mask, and batches.

Text format (docs/DESIGN.md), dialogues separated by blank lines, optional "System:" lines first:

    User: What is the capital of France?
    Assistant: Paris is the capital of France.
    User: And of Japan?
    Assistant: Tokyo.

A turn runs from its "User:"/"Assistant:"/"System:" line (tags in any letter case, at the very
start of the line) until the next such line or a blank line, so it may span several lines.
Or JSON / JSONL from other trainers (detected when the first non-blank character is "{" or
"["): OpenAI messages, ShareGPT conversations, Alpaca records, bare lists of messages
(engine.data.dialogue_json); they become the same Messages, so the encoding is the same.

Rendering (the GGUF `tokenizer.chat_template`, CHAT_TEMPLATE), chat format 2: BOS, then per
message user -> "User: {content}\\nAssistant:\\n", assistant -> "{content}" EOS "\\n",
system -> "System: {content}\\n". The answer starts a line, so the text the model writes has no
leading space: a runtime's answer (llama.cpp, Ollama, LM Studio) equals the studio's character for
character. The tokenizer puts a space at the start of a piece ("▁Paris"), so a separator space
after "Assistant:" would be generated as part of the answer (" Paris"), while one at the end of
the prompt would be a lone "▁" that the answer's first word never follows in the texts (words
after a space start with "▁"). A newline is the byte token <0x0A> and no piece spans it, so the
prompt and the answer tokenize the same whether encoded apart (training) or as one rendered text
(llama.cpp), and a line-initial word is as common in the texts as any.

Chat format 1 (runs saved before format 2) put the answer after "Assistant: " with the space
inside the answer: user -> "User: {content}\\nAssistant:", assistant -> " {content}" EOS "\\n".
Every function takes `chat_format` so that such a model is still tuned, prompted and exported the
way it was trained; `answer_text` removes its separator space.
"""

from __future__ import annotations

import os
import re

import numpy as np

from opencl_llm_studio.engine.data.chat_template import ChatFormat, Message  # noqa: F401 (Message: a turn, also used from here)
from opencl_llm_studio.engine.errors import DataError
from opencl_llm_studio.engine.data.tokenizer import Tokenizer
from opencl_llm_studio.engine.limits import LIMITS

TUNE_WHAT = "tune dialogues"  # how messages name a tune file

ROLES = ("system", "user", "assistant")
_TAG_LINE = re.compile(r"^(user|assistant|system):", re.IGNORECASE)   # "User:", "user:", ...
_FORMAT_HINT = ('Write each dialogue as lines "User: question" and "Assistant: answer" (a turn may '
                'continue on the following lines), with a blank line between dialogues.')

CHAT_FORMAT = 2          # what new runs are tuned with; saved with every checkpoint and GGUF
CHAT_FORMATS = (1, 2)

# Jinja2 (Hugging Face / llama.cpp chat template), one per chat format. One line each, so no
# stray whitespace is emitted.
CHAT_TEMPLATES = {
    1: ("{{ bos_token }}"
        "{% for message in messages %}"
        "{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\nAssistant:' }}"
        "{% elif message['role'] == 'assistant' %}"
        "{{ ' ' + message['content'] + eos_token + '\\n' }}"
        "{% elif message['role'] == 'system' %}{{ 'System: ' + message['content'] + '\\n' }}"
        "{% endif %}"
        "{% endfor %}"),
    2: ("{{ bos_token }}"
        "{% for message in messages %}"
        "{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\nAssistant:\\n' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + '\\n' }}"
        "{% elif message['role'] == 'system' %}{{ 'System: ' + message['content'] + '\\n' }}"
        "{% endif %}"
        "{% endfor %}"),
}
CHAT_TEMPLATE = CHAT_TEMPLATES[CHAT_FORMAT]


MODEL_FORMAT = "model"   # a pretrained open model's own chat template (engine.data.chat_template)


def check_chat_format(chat_format: int | str) -> int | str:
    """`chat_format` if known (1, 2, or MODEL_FORMAT for an imported model's own template), else
    DataError (a run saved by a newer studio)."""
    if chat_format != MODEL_FORMAT and chat_format not in CHAT_FORMATS:
        raise DataError(f"This model was tuned with chat format {chat_format}, which this version "
                        f"does not know (it knows {', '.join(map(str, CHAT_FORMATS))}).",
                        "Update OpenCL LLM Studio to chat with it.")
    return chat_format


# ---------------------------------------------------------------- parsing

def _check_dialogue(turns: list[tuple[str, Message]], source: str) -> list[Message]:
    """Validate the order of (where, message) turns ("line 3"); return the messages.

    Rules: system turns only before the first user turn; then user and assistant alternate,
    starting with user and ending with assistant; no empty turn.
    """
    seen_user = False
    prev = None
    for line, m in turns:
        where = f"{source}, {line}"
        if not m.content:
            raise DataError(f"{where}: the {m.role} turn is empty.",
                            "Write the text after the colon, or remove the line.")
        if m.role == "system":
            if seen_user:
                raise DataError(f"{where}: a System turn after the dialogue has started.",
                                "Put System lines only at the start of a dialogue.")
        elif m.role == "assistant" and not seen_user:
            raise DataError(f"{where}: an Assistant turn before any User turn.",
                            "Start each dialogue with a 'User:' line. " + _FORMAT_HINT)
        elif m.role == prev:
            want = "Assistant" if m.role == "user" else "User"
            raise DataError(f"{where}: two {m.role.capitalize()} turns in a row; expected "
                            f"'{want}:'.", "User and Assistant turns must alternate.")
        seen_user |= m.role == "user"
        prev = m.role
    line, last = turns[-1]
    if last.role != "assistant":
        raise DataError(f"{source}, {line}: the dialogue ends without an 'Assistant:' answer.",
                        "Add an 'Assistant:' line after the last question. " + _FORMAT_HINT)
    return [m for _, m in turns]


def _parse_text(text: str, source: str) -> list[list[Message]]:
    dialogues, turns = [], []   # turns: [line, role, [lines]] of the dialogue being read

    def close():
        if turns:
            msgs = [(f"line {n}", Message(role, "\n".join(body).strip()))
                    for n, role, body in turns]
            dialogues.append(_check_dialogue(msgs, source))
            turns.clear()

    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            close()
            continue
        m = _TAG_LINE.match(line)
        if m:
            turns.append([n, m.group(1).lower(), [line[m.end():]]])
        elif turns:
            turns[-1][2].append(line)
        else:
            raise DataError(f"{source}, line {n}: expected a line starting with 'User:' "
                            f"(or 'System:'), found {line[:40]!r}.", _FORMAT_HINT)
    close()
    return dialogues


def _parse_json(text: str, source: str) -> list[list[Message]]:
    """JSON or JSONL in the formats of other trainers (engine.data.dialogue_json), checked as text;
    an order error's hint is said in JSON's terms."""
    from opencl_llm_studio.engine.data.dialogue_json import ORDER_HINT, parse_json_records
    out = []
    for where, turns in parse_json_records(text, source):
        try:
            out.append(_check_dialogue([(where, Message(role, content.strip()))
                                        for role, content in turns], source))
        except DataError as e:
            raise DataError(str(e), ORDER_HINT) from None
    return out


def read_dialogues(path: str | os.PathLike,
                   notes: list[str] | None = None) -> tuple[str, list[list[Message]]]:
    """Read and check a tune file: (its text, parse_dialogues of it). Raises DataError naming
    the file, as engine.data.textio.read_text does (and the line, for a format error); notes: as
    read_text's."""
    from opencl_llm_studio.engine.data.textio import read_text
    text = read_text(path, TUNE_WHAT, notes=notes)
    return text, parse_dialogues(text, f"{TUNE_WHAT} file {str(path)!r}")


def parse_dialogues(text: str, source: str = "tune file") -> list[list[Message]]:
    """Parse dialogue text (User:/Assistant: format, or JSON / JSONL in the formats of
    engine.data.dialogue_json: OpenAI messages, ShareGPT, Alpaca, bare message lists) into
    dialogues of Messages.

    source: how to name the input in messages. Returns a non-empty list; each dialogue is
    [system*] (user, assistant)+. Raises DataError naming the line and what was expected:
    empty text, no "Assistant:" at all, text before the first role line, an Assistant turn
    before any User turn, turns out of order, an empty turn, a dialogue ending with a question,
    bad JSON, a JSON record of another structure (named, with the formats read), an unknown
    role.
    """
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise DataError(f"The {source} is empty.", _FORMAT_HINT)
    if lines[0].lstrip()[:1] in ("{", "["):
        return _parse_json(text, source)
    if not any(ln[:10].lower() == "assistant:" for ln in lines):
        raise DataError(f"The {source} has no line starting with 'Assistant:', so there is "
                        f"nothing for the model to learn to answer.", _FORMAT_HINT)
    return _parse_text(text, source)


# ---------------------------------------------------------------- rendering and encoding

def _segments(messages: list[Message], chat_format: int = CHAT_FORMAT
              ) -> list[tuple[str | None, int]]:
    """The template as (text, mask) segments; text None stands for EOS. No BOS."""
    sep = " " if chat_format == 1 else ""       # format 1: the answer carries the separator
    ask = "\nAssistant:" if chat_format == 1 else "\nAssistant:\n"
    segs: list[tuple[str | None, int]] = []
    for m in messages:
        if m.role == "user":
            segs.append((f"User: {m.content}{ask}", 0))
        elif m.role == "assistant":
            segs += [(sep + m.content, 1), (None, 1), ("\n", 0)]
        elif m.role == "system":
            segs.append((f"System: {m.content}\n", 0))
        else:
            raise ValueError(f"unknown role {m.role!r}")
    return segs


def answer_text(text: str, chat_format: int = CHAT_FORMAT) -> str:
    """The answer as the person reads it from the text the model wrote after the prompt:
    unchanged in format 2; format 1 drops the separator space its answers start with."""
    return text[1:] if chat_format == 1 and text.startswith(" ") else text


def render_prompt(messages: list[Message], eos_token: str = "</s>",
                  chat_format: int = CHAT_FORMAT) -> str:
    """CHAT_TEMPLATE's text after BOS, up to and including the final "Assistant:\\n".

    `messages` normally end with a user turn; a trailing assistant turn is left out. Earlier
    assistant turns end with `eos_token` as text: tokenize with `encode_prompt` (or llama.cpp
    with special-token parsing), not Tokenizer.encode, to get the EOS id there.
    """
    if messages and messages[-1].role == "assistant":
        messages = messages[:-1]
    return "".join(eos_token if t is None else t for t, _ in _segments(messages, chat_format))


def encode_dialogue(tokenizer: Tokenizer, messages: list[Message],
                    chat_format: int = CHAT_FORMAT) -> tuple[list[int], list[int]]:
    """Token ids of the rendered dialogue and its loss mask (same length).

    ids = [BOS] + the template's segments, each encoded on its own ("User: q\\nAssistant:\\n",
    "answer", EOS, "\\n", ...). loss_mask is 1 exactly on the assistant content tokens and the
    EOS that ends them, else 0. Encoding segments separately equals encoding the text between
    special tokens in one go, because no learned piece contains "\\n" or a space after another
    character (add_dummy_prefix=False; SentencePiece puts the space at the start of a piece).
    """
    if chat_format == MODEL_FORMAT:
        return _model_format(tokenizer).encode_dialogue(messages)
    ids, mask = [tokenizer.bos_id], [0]
    for text, m in _segments(messages, chat_format):
        seg = [tokenizer.eos_id] if text is None else tokenizer.encode(text)
        ids += seg
        mask += [m] * len(seg)
    return ids, mask


def encode_prompt(tokenizer: Tokenizer, messages: list[Message],
                  chat_format: int = CHAT_FORMAT) -> list[int]:
    """Ids of BOS + render_prompt(messages), with real EOS ids: what the model sees before it
    answers (the same ids as in training)."""
    if chat_format == MODEL_FORMAT:   # BOS and the generation prompt as the template has them
        return _model_format(tokenizer).prompt_ids(messages)
    if messages and messages[-1].role == "assistant":
        messages = messages[:-1]
    return encode_dialogue(tokenizer, messages, chat_format)[0]


def _model_format(tokenizer):
    """The engine.data.chat_template.ChatFormat of an imported model's tokenizer (its template)."""
    return ChatFormat(tokenizer)


# ---------------------------------------------------------------- training batches

WINDOW_STEP = 64   # tuning windows are multiples of this (GEMM tiles; few distinct shapes)


def tune_window(lengths, context_length: int) -> int:
    """The tuning window W for dialogues of `lengths` tokens each (BOS and EOS included): the
    longest one's inputs (length - 1) rounded up to a multiple of WINDOW_STEP, at most
    context_length. Every row is then cut to W + 1 tokens rather than padded to the model's
    window: ten 60-token dialogues beside a 1,024-token model train 64 positions a row, not
    1,024 (a 135M model's step in 1/16 of the activations)."""
    longest = max(max(lengths) - 1, 1)
    return min(context_length, -(-longest // WINDOW_STEP) * WINDOW_STEP)


class TuneData:
    """Encoded dialogues and tune-stage batches, one dialogue per row, in a window of their own.

    tokenizer: trained Tokenizer. text_or_dialogues: dialogue text (parsed with
    parse_dialogues) or already parsed list[list[Message]]. context_length: T, the longest
    window a row may have (the model's). seed: seeds the generator `train_batch` uses when given
    no rng. chat_format: the rendering (CHAT_FORMAT for a new run; a continued run keeps the one
    it was tuned with).
    Attributes: dialogues, encoded (list of (ids, loss_mask)), window (W = tune_window(...) <=
    T: the width of every batch), n_truncated (dialogues longer than T+1 tokens, cut at T+1).
    Raises DataError (via parse_dialogues) for malformed text, or when truncation leaves no
    assistant token to learn in any dialogue; ConfigError for a context_length outside
    engine.limits.LIMITS.
    """

    def __init__(self, tokenizer: Tokenizer, text_or_dialogues: str | list[list[Message]],
                 context_length: int, seed: int = 0, chat_format: int = CHAT_FORMAT):
        LIMITS["context_length"].check(context_length)
        if isinstance(text_or_dialogues, str):
            self.dialogues = parse_dialogues(text_or_dialogues)
        else:
            self.dialogues = [list(d) for d in text_or_dialogues]
            if not self.dialogues:
                raise DataError("There are no tune dialogues.", _FORMAT_HINT)
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.rng = np.random.default_rng(seed)
        self.chat_format = check_chat_format(chat_format)
        self.encoded = [encode_dialogue(tokenizer, d, chat_format) for d in self.dialogues]
        n = context_length + 1
        self.n_truncated = sum(len(ids) > n for ids, _ in self.encoded)
        first_answer = [mask.index(1) for _, mask in self.encoded]  # T >= this to learn a token
        if min(first_answer) > context_length:
            raise DataError(
                f"With context_length {context_length}, every tune dialogue is cut before its "
                f"first answer (the shortest question takes {min(first_answer)} tokens).",
                f"Use a context length of at least {max(first_answer)}, or shorter questions.")
        self.window = tune_window([len(ids) for ids, _ in self.encoded], context_length)
        n = self.window + 1
        # Rows (N, W+1) padded with EOS up to the longest dialogue; loss mask 0 on padding.
        self._ids = np.full((len(self.encoded), n), tokenizer.eos_id, dtype=np.int32)
        self._mask = np.zeros((len(self.encoded), n), dtype=bool)
        for r, (ids, mask) in enumerate(self.encoded):
            k = min(len(ids), n)
            self._ids[r, :k] = ids[:k]
            self._mask[r, :k] = np.asarray(mask[:k], dtype=bool)

    @property
    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids int32 (N, W+1), loss mask bool (N, W+1)): one dialogue per row, padded with EOS,
        mask 1 on assistant content and its EOS (what train_batch draws from; read-only views)."""
        ids, mask = self._ids.view(), self._mask.view()
        ids.flags.writeable = mask.flags.writeable = False
        return ids, mask

    def train_batch(self, rng: np.random.Generator | None, batch_size: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        """B dialogues drawn at random (with replacement): (inputs, targets) int32 (B, W).
        inputs = the dialogue's first W ids, padded with EOS; targets[b, t] = the next id, or
        -1 where that id is not assistant content / its EOS (prompt, padding): no loss there."""
        rng = self.rng if rng is None else rng
        rows = rng.integers(0, len(self.encoded), size=batch_size)
        ids, mask = self._ids[rows], self._mask[rows]
        targets = np.where(mask[:, 1:], ids[:, 1:], -1).astype(np.int32)
        return ids[:, :-1].copy(), targets

    def eval_batches(self, batch_size: int, max_batches: int | None = None
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every dialogue once, in order: (inputs, targets) int32 (B, W) as in train_batch; the
        last batch is filled up with EOS rows whose targets are all -1 (one shape throughout).
        max_batches: of a set of k > max_batches batches only batches i * k // max_batches
        (i < max_batches), evenly spaced, are built (engine/files/hf/train_ddp.py picks the same)."""
        n, B = len(self.encoded), batch_size
        k = -(-n // B)
        picked = range(k) if max_batches is None or k <= max_batches else \
            [i * k // max_batches for i in range(max_batches)]
        rows = (np.asarray(picked)[:, None] * B + np.arange(B)).ravel()
        real, src = (rows < n)[:, None], np.minimum(rows, n - 1)   # (R, 1) real row?, (R,)
        ids = np.where(real, self._ids[src], self.tokenizer.eos_id)
        mask = self._mask[src] & real
        targets = np.where(mask[:, 1:], ids[:, 1:], -1).astype(np.int32)
        inputs = ids[:, :-1].astype(np.int32)
        return [(inputs[i:i + B], targets[i:i + B]) for i in range(0, len(rows), B)]

    def questions(self) -> list[tuple[list[Message], str]]:
        """(messages before the answer, expected answer text) for every assistant turn."""
        return [(d[:i], m.content) for d in self.dialogues
                for i, m in enumerate(d) if m.role == "assistant"]

    def __repr__(self) -> str:
        return (f"TuneData({len(self.dialogues)} dialogues, W={self.window} of "
                f"T={self.context_length}, "
                f"{self.n_truncated} truncated)")
