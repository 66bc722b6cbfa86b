"""What the model knows: fact recall after pretraining, trained answers after tuning.

Fact recall (issue 5): for each pretraining statement the model trained on, prompt with the
first half of its words and check that the greedy continuation reproduces the rest. Answer
accuracy: for each tune question, the greedy chat answer equals the trained answer. Text is
compared with whitespace collapsed; the continuation may go on past the expected end.

Both checks are bounded whatever the text (issue 11: a 20,000-word one-line document used to
be "recalled" by generating 10,000 words): at most MAX_FACTS documents / MAX_QUESTIONS
questions, a document is checked on its first RECALL_MAX_WORDS words (and RECALL_MAX_CHARS
characters), and at most RECALL_MAX_NEW_TOKENS tokens of the expected continuation or answer
are generated and compared. The greedy outputs are judged from one batched teacher-forced
forward pass where it decides them (engine.training.greedy_check), decoded token by token where
it does not. Each batch and each decoded item ticks `session.monitor` (progress, cancellation).
"""

from __future__ import annotations

from dataclasses import dataclass

from opencl_llm_studio.engine.data.corpus import FINAL_VAL_TOKENS
from opencl_llm_studio.engine.data.dialogue import (Message, answer_text, encode_dialogue,
                                                    encode_prompt)
from opencl_llm_studio.engine.training.greedy_check import (Case, fits, greedy_tokens, holds,
                                                            verdict)
from opencl_llm_studio.engine.metrics import ValScore
from opencl_llm_studio.engine.generation.sampling import SamplingParams


@dataclass
class Score:
    correct: int
    total: int

    @property
    def rate(self) -> float:
        return self.correct / max(self.total, 1)

    def to_dict(self) -> dict:
        return {"correct": self.correct, "total": self.total, "rate": round(self.rate, 4)}


MAX_FACTS = 64      # stage-end checks stay a few seconds however large the corpus
MAX_QUESTIONS = 64
RECALL_MAX_WORDS = 64         # a longer document is checked on its first 64 words
RECALL_MAX_CHARS = 2_048      # ... and its first 2,048 characters (text with few spaces)
RECALL_MAX_NEW_TOKENS = 32    # tokens of the expected continuation / answer compared, at most


def training_documents(session, limit: int | None = None) -> list[str]:
    """The documents (paragraphs) of the pretraining text the model trained on, for the recall
    check: engine.data.corpus.PretrainData.train_documents (held-out text excluded: a paragraph cut
    by the split counts with its training part only), at most `limit` of them, evenly spaced
    through the text. Training itself reads the text as written, not these documents."""
    docs = session.pretrain.train_documents
    if limit and len(docs) > limit:
        docs = [docs[i * len(docs) // limit] for i in range(limit)]
    return docs


def _expected(tok, text: str) -> tuple[str, list[int], bool]:
    """The first RECALL_MAX_NEW_TOKENS tokens of `text` as text (a split character
    dropped), those tokens, and whether `text` was longer."""
    ids = tok.encode(text)
    kept = ids[:RECALL_MAX_NEW_TOKENS]
    return tok.decode(kept).rstrip("\ufffd"), kept, len(kept) < len(ids)


def _recall(tok, doc: str) -> tuple[str, str, list[int]] | None:
    """(prompt, expected continuation, its tokens) for one document: the first half of its
    first RECALL_MAX_WORDS words, and the rest capped at RECALL_MAX_NEW_TOKENS tokens. None
    for a document of fewer than two words."""
    words = doc[:RECALL_MAX_CHARS].split()[:RECALL_MAX_WORDS]
    if len(words) < 2:
        return None
    half = len(words) // 2
    expected, kept, _ = _expected(tok, " " + " ".join(words[half:]))
    return " ".join(words[:half]), expected, kept


def recall_case(tok, doc: str) -> tuple[str, str, int] | None:
    """(prompt, expected continuation, tokens to generate) for one document (_recall), or
    None for a document of fewer than two words."""
    parts = _recall(tok, doc)
    return None if parts is None else (parts[0], parts[1], len(parts[2]) + 2)


def _judge(session, phase: str, cases: list[Case], text_of, decode) -> int:
    """How many cases greedy decoding passes: one batched teacher-forced pass decides most
    (engine.training.greedy_check); decode(i) (the greedy output's text, decoded token by
    token) settles the rest. Ticks session.monitor with `phase` (raises Cancelled)."""
    ctx = session.model.cfg.context_length
    stops = set(session.tokenizer.stop_ids)
    forced = [i for i, c in enumerate(cases) if fits(c, ctx)]
    greedy = greedy_tokens(session.model, [cases[i].prompt + cases[i].forced for i in forced],
                           [len(cases[i].prompt) - 1 for i in forced],
                           session.train_config.batch_size,
                           lambda i, n: session.monitor.tick(phase, i, n))
    result: list[bool | None] = [None] * len(cases)
    for i, best in zip(forced, greedy):
        result[i] = verdict(cases[i], best, text_of, stops)
    left = [i for i, r in enumerate(result) if r is None]
    for k, i in enumerate(left):
        session.monitor.tick(phase, k, len(left))
        result[i] = holds(decode(i), cases[i])
    return sum(map(bool, result))


def fact_recall(session, max_facts: int | None = MAX_FACTS) -> Score:
    """Recall over (at most max_facts, evenly spaced) training documents: the greedy
    continuation of a document's first half starts with its rest (_judge).
    Raises engine.progress.Cancelled when a stop is asked for."""
    tok = session.tokenizer
    docs = training_documents(session, max_facts)
    cases = []
    for prompt, expected, kept in filter(None, (_recall(tok, doc) for doc in docs)):
        cases.append(Case([tok.bos_id] + tok.encode(prompt), kept, expected, False,
                          len(kept) + 2))
    correct = _judge(session, "checking recall", cases, tok.decode, lambda i: tok.decode(
        session.generate_ids(cases[i].prompt, cases[i].max_new, SamplingParams(greedy=True))))
    return Score(correct, len(docs))


def answer_accuracy(session, max_questions: int | None = MAX_QUESTIONS) -> Score:
    """Share of (at most max_questions, evenly spaced) tune questions whose greedy chat
    answer is the trained one (an answer longer than RECALL_MAX_NEW_TOKENS: starts with it),
    judged as fact_recall is. Raises Cancelled on a stop."""
    if not session.tune:
        return Score(0, 0)
    tok, fmt = session.tokenizer, session.chat_format
    qs = _questions(session, max_questions)
    cases = []
    for messages, expected in qs:
        want, kept, cut = _expected(tok, " " + expected)
        cases.append(_answer_case(session, messages, expected, want, cut, len(kept) + 2))
    correct = _judge(session, "checking answers", cases,
                     lambda ids: answer_text(tok.decode(ids), fmt),
                     lambda i: session.chat(qs[i][0], max_new_tokens=cases[i].max_new,
                                            greedy=True))
    return Score(correct, len(qs))


def _answer_case(session, messages, expected: str, want: str, cut: bool, max_new: int) -> Case:
    """The Case of one question: the chat's prompt ids, and the answer's ids as training
    encodes them (the masked tokens after the prompt, the end of turn left out)."""
    tok, fmt = session.tokenizer, session.chat_format
    prompt = encode_prompt(tok, session.fit_messages(messages, max_new), fmt)
    ids, mask = encode_dialogue(tok, list(messages) + [Message("assistant", expected)], fmt)
    answer = []
    if ids[:len(prompt)] == prompt:   # else no guess: the batched pass sees where it leaves
        stops = set(tok.stop_ids)
        for t, m in zip(ids[len(prompt):], mask[len(prompt):]):
            if not m or t in stops:
                break
            answer.append(t)
    return Case(prompt, answer[:max_new], want, not cut, max_new)


def _questions(session, max_questions: int | None = MAX_QUESTIONS) -> list:
    qs = session.tune.questions() if session.tune else []
    if max_questions and len(qs) > max_questions:
        qs = [qs[i * len(qs) // max_questions] for i in range(max_questions)]
    return qs


def recall_tokens(session, stage: str) -> int:
    """Tokens the stage-end check of `stage` generates at most (a prompt's prefill counted as
    one), under the caps fact_recall and answer_accuracy obey; the time budget prices the check
    with it (engine.training.budget) before it has run once."""
    tok = session.tokenizer
    cases = (recall_case(tok, doc) for doc in training_documents(session, MAX_FACTS))
    total = sum(case[2] + 1 for case in cases if case is not None)
    if stage == "tune":
        total += sum(len(_expected(tok, " " + expected)[1]) + 3
                     for _, expected in _questions(session))
    return total


def final_validation(session, max_tokens: int = FINAL_VAL_TOKENS) -> ValScore:
    """The end-of-run validation (issue 20): the whole held-out pretraining text scored, up to
    max_tokens targets (engine.data.corpus.FINAL_VAL_TOKENS), in batches of the run's batch_size:
    ValScore(loss in nats per token, bits per UTF-8 byte of that text, tokens, bytes). The
    periodic evaluations score at most train_config.eval_tokens of it. session.pretrain's
    val_source says whether the text is held out. Raises engine.progress.Cancelled on a stop."""
    return session.pretrain_val(max_tokens)


# ------------------------------------------------------------------ validation passes
MAX_TUNE_EVAL_BATCHES = 16  # dialogue loss on at most this many batches, evenly spaced


def pretrain_eval_tokens(session, max_tokens: int | None = None, stage: str = "pretrain") -> int:
    """Targets a pretraining validation pass in `stage` scores (session.pretrain_val's windows):
    at most max_tokens (None: train_config.eval_tokens)."""
    tc = session.train_config
    tokens = tc.eval_tokens if max_tokens is None else max_tokens
    return sum(int((y >= 0).sum()) for _, y in session.pretrain.val_batches(
        tc.batch_size, tokens, session.general_window(stage)))


def tune_eval_tokens(session) -> int:
    """Targets one dialogue-loss pass scores (tune_val_loss's batches; 0 without dialogues)."""
    if not session.has_tune:
        return 0
    batches = session.tune.eval_batches(session.train_config.batch_size, MAX_TUNE_EVAL_BATCHES)
    return sum(int((y >= 0).sum()) for _, y in batches)


def tune_val_loss(session) -> float:
    """Mean loss (nats per token) over the session's tune dialogues, assistant tokens only, in
    batches of batch_size: all of them, or MAX_TUNE_EVAL_BATCHES batches evenly spaced through
    a large set. Ticks session.monitor ("dialogue loss"; Cancelled on a stop)."""
    total = count = 0.0
    batches = session.tune.eval_batches(session.train_config.batch_size, MAX_TUNE_EVAL_BATCHES)
    for i, (x, y) in enumerate(batches):
        n = int((y >= 0).sum())
        session.monitor.tick("dialogue loss", i, len(batches))
        total += session.model.loss(x, y) * n
        count += n
    return total / max(count, 1)
