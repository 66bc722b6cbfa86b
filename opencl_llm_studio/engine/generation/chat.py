"""Chat turns in a fixed context window: which history the prompt keeps, and the reply record.

The model sees at most context_length (T) tokens: the prompt (BOS, the kept turns, the new
question, "Assistant:") and the answer written so far. History is kept whenever the prompt
leaves room for the start of an answer (`answer_reserve`); if the answer then fills the window,
the oldest whole exchange makes way and the answer goes on (`TrainingSession.chat`), so a
conversation whose prompt and answer fit in T is answered on its whole history, as llama.cpp
does when given the whole history. Turns are dropped only as whole user/assistant exchanges from
the front, so the prompt always starts at BOS with "User:" (or "System:") as in training.
"""

from __future__ import annotations

from opencl_llm_studio.engine.data.dialogue import Message, encode_prompt
from opencl_llm_studio.engine.data.tokenizer import Tokenizer

RESERVE_FRACTION = 8   # 1/8 of the window is kept free for the start of an answer


class ChatReply(str):
    """One answer: the text itself (a str, so callers that want only the text use it as one),
    as the person reads it (llama.cpp's chat completion returns the same characters for the
    same history), with what happened around it:
    dropped_turns: messages of the history left out of the prompt (0 = it saw the whole history);
    finish_reason: "stop" (the model wrote </s>), "length" (max_new_tokens reached) or
    "context" (the window is full and only the question is left in it);
    n_tokens: tokens generated; context_length: the window, in tokens."""

    dropped_turns: int
    finish_reason: str
    n_tokens: int
    context_length: int

    def __new__(cls, text: str, dropped_turns: int = 0, finish_reason: str = "stop",
                n_tokens: int = 0, context_length: int = 0) -> "ChatReply":
        self = super().__new__(cls, text)
        self.dropped_turns, self.finish_reason = dropped_turns, finish_reason
        self.n_tokens, self.context_length = n_tokens, context_length
        return self

    @property
    def text(self) -> str:
        return str(self)

    def notes(self) -> list[str]:
        """What the person should know about this answer, one sentence each (may be empty)."""
        out = []
        if self.dropped_turns:
            out.append(f"The {self.dropped_turns} oldest message"
                       f"{'s were' if self.dropped_turns > 1 else ' was'} left out to fit the "
                       f"{self.context_length}-token context.")
        if self.finish_reason == "context":
            out.append(f"The answer was cut: the {self.context_length}-token context is full.")
        return out


def answer_reserve(context_length: int, max_new_tokens: int) -> int:
    """Tokens the prompt must leave free: 1/8 of the window (8 of 64; the bundled tune answers
    take 4-38 tokens at vocab 512, and a longer one makes older turns give way as it grows),
    never more than max_new_tokens, at least 1."""
    return max(1, min(max_new_tokens, context_length // RESERVE_FRACTION))


def drop_oldest_exchange(messages: list[Message]) -> list[Message] | None:
    """`messages` without the oldest user turn and the answer after it (system turns first
    go with it); None when only the last user turn is left."""
    cut = 1
    while cut < len(messages) and messages[cut].role != "user":
        cut += 1
    if cut >= len(messages):
        return None
    return messages[cut:]


def fit_messages(tokenizer: Tokenizer, messages: list[Message], context_length: int,
                 reserve: int, chat_format: int) -> list[Message]:
    """The newest turns whose prompt leaves `reserve` tokens of the window free. The last user
    message is kept even when alone it is longer (the decoder then sees its end)."""
    msgs = list(messages)
    budget = max(context_length - reserve, 1)
    while len(encode_prompt(tokenizer, msgs, chat_format)) > budget:
        shorter = drop_oldest_exchange(msgs)
        if shorter is None:
            break
        msgs = shorter
    return msgs
