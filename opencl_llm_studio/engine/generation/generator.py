"""Text generation and chat over a model: sampling from its last logits, with or without the KV
cache, sliding the context window, streaming whole UTF-8 characters. A TrainingSession holds
one `Generator` (composition; the session's generate / chat / generate_ids / fit_messages
call it), made from what it uses: the model, the tokenizer, the chat format and the monitor
(engine.progress.Monitor: a stop lands within one token). Generation sets last_finish ("stop",
"length" or "context").
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from opencl_llm_studio.engine.generation.chat import ChatReply, answer_reserve, drop_oldest_exchange
from opencl_llm_studio.engine.generation.chat import fit_messages as _fit_messages
from opencl_llm_studio.engine.generation.decode import KVDecoder
from opencl_llm_studio.engine.data.dialogue import Message, answer_text, encode_prompt
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.generation.sampling import MAX_NEW_TOKENS, SamplingParams, next_token
from opencl_llm_studio.engine.limits import LIMITS, check_fields

_SAMPLING = SamplingParams()  # the sampling defaults of generate and chat


class Generator:
    """generate_ids / generate / chat / fit_messages over `model` (engine.model.transformer.Model) with
    `tokenizer`, turns rendered in `chat_format` (engine.data.dialogue); `monitor` cancels."""

    def __init__(self, model, tokenizer, chat_format: int, monitor):
        self.model, self.tokenizer = model, tokenizer
        self.model_config = model.cfg
        self.chat_format, self.monitor = chat_format, monitor
        self._decoder: KVDecoder | None = None   # made on first use
        self.last_finish = "stop"   # why the last generate_ids ended: stop, length, context
        self._last_n_tokens = 0

    def reset_decoder(self) -> None:
        """Drop the KV decoder: the next generation makes one on the model's runtime now (its
        plan changed: TrainingSession.use_tuned_kernels)."""
        self._decoder = None

    def generate_ids(self, prompt_ids: list[int], max_new_tokens: int = MAX_NEW_TOKENS,
                     sampling: SamplingParams = _SAMPLING, seed: int | None = None,
                     on_token: Callable[[int], None] | None = None,
                     kv_cache: bool = True,
                     slide: Callable[[list[int], list[int]], list[int] | None] | None = None
                     ) -> list[int]:
        """Continue `prompt_ids` (BOS included by the caller) until `</s>` or max_new_tokens.

        The model sees a window of at most context_length (T) tokens: a longer prompt is seen by
        its last T. When the window is full and another token is wanted, `slide(window, new)`
        gives the next window (its last token the newest) or None to stop (self.last_finish is
        then "context"); the default keeps the newest T//2 + 1 tokens (RoPE positions restart
        at 0, as in a pretraining window that starts mid-text). kv_cache=False recomputes the
        whole window for every token (the slow reference path); both paths see the same windows.
        Returns the new ids (without `</s>`); self.last_finish is "stop", "length" or "context".
        """
        T = self.model_config.context_length
        rng = np.random.default_rng(seed)
        ctx = (list(prompt_ids) or [self.tokenizer.bos_id])[-T:]
        slide = slide or (lambda window, new: window[-(T // 2 + 1):])
        out: list[int] = []
        if kv_cache and self._decoder is None:
            self._decoder = KVDecoder(self.model)
        logits = self._prefill(ctx, kv_cache)
        self.last_finish = "length"
        stops = set(self.tokenizer.stop_ids)   # </s>, or an imported template's end of turn
        for i in range(max_new_tokens):
            self.monitor.check()  # a stop lands within one token
            tok = next_token(logits, sampling, rng, out)
            if tok in stops:
                self.last_finish = "stop"
                break
            out.append(tok)
            if on_token:
                on_token(tok)
            if i + 1 == max_new_tokens:
                break
            ctx.append(tok)
            if len(ctx) <= T:
                logits = self._decoder.step(tok) if kv_cache else self._prefill(ctx, False)
                continue
            ctx = slide(ctx, out)
            if ctx is None:
                self.last_finish = "context"
                break
            logits = self._prefill(ctx, kv_cache)
        return out

    def _prefill(self, ctx: list[int], kv_cache: bool) -> np.ndarray:
        """Logits (V,) after the window `ctx` (at most T ids), through the KV cache or not."""
        if kv_cache:
            return self._decoder.reset(ctx)
        window = np.zeros((1, self.model_config.context_length), np.int32)
        window[0, :len(ctx)] = ctx
        return self.model.last_logits(window, len(ctx))  # causal: the padding is unseen

    def _sampling(self, temperature, top_k, top_p, repetition_penalty, greedy):
        """SamplingParams; ConfigError (its .field the setting) for a value outside
        engine.limits.LIMITS."""
        sp = SamplingParams(temperature, top_k, top_p, repetition_penalty, greedy)
        check_fields(sp, ("temperature", "top_k", "top_p", "repetition_penalty"))
        return sp

    def generate(self, prompt: str, max_new_tokens: int = MAX_NEW_TOKENS,
                 temperature: float = _SAMPLING.temperature, top_k: int = _SAMPLING.top_k,
                 top_p: float = _SAMPLING.top_p,
                 repetition_penalty: float = _SAMPLING.repetition_penalty,
                 seed: int | None = None, greedy: bool = False,
                 on_token: Callable[[str], None] | None = None) -> str:
        """Plain continuation of `prompt`, BOS first where the model expects it: always for the
        app's models, for an open model as its tokenizer's add_bos says (llama.cpp's
        tokenizer.ggml.add_bos_token: SmolLM2 has none, and its "BOS" <|im_start|> before a
        plain text turned the continuation into a chat turn). on_token gets each new piece."""
        bos = [self.tokenizer.bos_id] if self.tokenizer.add_bos else []
        ids = bos + self.tokenizer.encode(prompt)
        return self._decode_stream(ids, max_new_tokens, self._sampling(
            temperature, top_k, top_p, repetition_penalty, greedy), seed, on_token)

    def chat(self, messages: list[Message], max_new_tokens: int = MAX_NEW_TOKENS,
             temperature: float = _SAMPLING.temperature, top_k: int = _SAMPLING.top_k,
             top_p: float = _SAMPLING.top_p,
             repetition_penalty: float = _SAMPLING.repetition_penalty,
             seed: int | None = None, greedy: bool = False,
             on_token: Callable[[str], None] | None = None) -> ChatReply:
        """Answer `messages` (last one from the user), rendered with the tune format / GGUF chat
        template (engine.data.dialogue); stops at `</s>`. The text is the model's own, not stripped:
        llama.cpp's chat completion on the exported GGUF returns the same characters. History is
        kept while the prompt leaves answer_reserve tokens free; when the answer fills the
        window, the oldest exchanges make way (engine.generation.chat). on_token gets each new piece of
        text. Returns a ChatReply: the answer (a str) with dropped_turns and finish_reason.
        Raises ConfigError for bad settings or when the last message is not the user's."""
        if not messages or messages[-1].role != "user":
            raise ConfigError("A chat needs the user's message last.")
        kept = self.fit_messages(messages, max_new_tokens)
        T, fmt = self.model_config.context_length, self.chat_format

        def slide(window, new):   # the answer fills the window: the oldest exchange makes way
            nonlocal kept
            while (shorter := drop_oldest_exchange(kept)) is not None:
                kept = shorter
                ids = encode_prompt(self.tokenizer, kept, fmt) + new
                if len(ids) <= T:
                    return ids
            return None

        shown = ""

        def stream(piece: str):   # format 1: hold back the separator space before the answer
            nonlocal shown
            text = answer_text(shown + piece, fmt)
            if on_token and len(text) > len(answer_text(shown, fmt)):
                on_token(text[len(answer_text(shown, fmt)):])
            shown += piece

        ids = encode_prompt(self.tokenizer, kept, fmt)
        text = self._decode_stream(ids, max_new_tokens, self._sampling(
            temperature, top_k, top_p, repetition_penalty, greedy), seed, stream, slide)
        return ChatReply(answer_text(text, fmt), len(messages) - len(kept), self.last_finish,
                         self._last_n_tokens, T)

    def fit_messages(self, messages: list[Message], max_new_tokens: int) -> list[Message]:
        """The newest turns whose prompt leaves room for the start of an answer
        (engine.generation.chat.answer_reserve): whole user/assistant exchanges are dropped from the front,
        so the prompt starts at BOS with "User:" as in training. The last user message is kept
        even when alone it is too long (the decoder then sees its end)."""
        T = self.model_config.context_length
        return _fit_messages(self.tokenizer, messages, T, answer_reserve(T, max_new_tokens),
                             self.chat_format)

    def _decode_stream(self, ids, max_new_tokens, sampling, seed, on_token, slide=None) -> str:
        LIMITS["max_new_tokens"].check(max_new_tokens)
        new: list[int] = []
        shown = ""

        def emit(tok):
            nonlocal shown
            new.append(tok)
            text = self.tokenizer.decode(new)
            if on_token and not text.endswith("\ufffd"):  # wait for whole UTF-8 characters
                on_token(text[len(shown):])
                shown = text

        self.generate_ids(ids, max_new_tokens, sampling, seed, emit, slide=slide)
        self._last_n_tokens = len(new)
        return self.tokenizer.decode(new)


def delegate(name: str):
    """A method that calls the same-named method of self.generator (signature and docstring
    kept, so the session's API reads as the Generator's)."""
    method = getattr(Generator, name)

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        return getattr(self.generator, name)(*args, **kwargs)
    return call
