"""The stage-end check judged from one batched teacher-forced pass (issue 34: 36 s of an 80 s
LoRA run decoded 56 answers token by token): its verdicts equal those of decoding each item,
it decodes only what the pass leaves open, and its argmaxes are the logits' on every row."""

import numpy as np
import pytest

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.generation.sampling import SamplingParams
from opencl_llm_studio.engine.model import activations
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.training import evaluate
from opencl_llm_studio.engine.training.greedy_check import Case, greedy_tokens, holds, verdict
from tests.helpers import trained_session

GREEDY = SamplingParams(greedy=True)


@pytest.fixture(scope="module")
def tuned(rt):
    """A small model that has learned some of the bundled dialogues (answers pass and fail)."""
    mc = ModelConfig(d_model=64, n_layer=2, n_head=4, context_length=64, vocab_size=512)
    tc = TrainConfig(pretrain_steps=60, tune_steps=80, batch_size=8, learning_rate=4e-3,
                     eval_interval=1000, sample_interval=0, evaluate_recall=False)
    return trained_session(rt, mc, tc)


# ------------------------------------------------------------------ verdict on toy pieces

PIECES = {1: "The", 2: " cap", 3: "ital", 4: " capital", 5: " is", 6: " Paris", 7: ".",
          8: " ", 9: "\ufffd", 10: " Rome", 0: "<stop>"}


def _text(ids):
    return "".join(PIECES[i] for i in ids)


def _case(forced, wanted, exact=False, max_new=10):
    return Case([1], forced, wanted, exact, max_new)


@pytest.mark.parametrize("forced, greedy, wanted, exact, expect", [
    ([4, 5, 6], [4, 5, 6, 7], " capital is Paris", False, True),      # followed to the end
    ([4, 5, 6], [4, 5, 10, 7], " capital is Paris", False, False),    # leaves: another word
    ([4, 5, 6], [2, 5, 6, 7], " capital is Paris", False, None),      # " cap"+...: same text?
    ([4, 5, 6], [4, 5, 6, 0], " capital is Paris", True, True),       # exact, then stops
    ([4, 5, 6], [4, 5, 6, 7], " capital is Paris", True, False),      # exact, goes on with "."
    ([4, 5, 6], [4, 5, 6, 8], " capital is Paris", True, None),       # a space: could stop next
    ([4, 5, 6], [4, 0, 6, 7], " capital is Paris", False, False),     # stops early
    ([4, 5, 6], [4, 9, 6, 7], " capital is Paris", False, None),      # a split character
    ([4, 5], [4, 6, 6], " capital is Paris", False, False),           # the guess is short: wrong
    ([4, 5], [4, 5, 6], " capital is Paris", False, True),            # short guess, next token
    ([4], [4, 5], " capital is Paris", False, None),                  # short guess: still open
    ([4, 5, 6, 7], [4, 5, 6, 7, 7], " capital is", False, True),     # already holds it
])
def test_verdict_on_pieces(forced, greedy, wanted, exact, expect):
    assert verdict(_case(forced, wanted, exact), np.array(greedy), _text, {0}) is expect


def test_verdict_stops_where_decoding_would_end():
    """max_new tokens generated: the output is the forced tokens up to there."""
    case = _case([4, 5, 6], " capital is Paris", exact=False, max_new=2)
    assert verdict(case, np.array([4, 5, 6, 7]), _text, {0}) is False
    case = _case([4, 5], " capital is", exact=True, max_new=2)
    assert verdict(case, np.array([4, 5, 6]), _text, {0}) is True


# ------------------------------------------------------------------ against real decoding

def _cases(s):
    """Cases over the tuned model's own greedy outputs: passes (its output, a prefix of it),
    fails (one character changed, a word added), exact and not, with good and poor guesses."""
    tok, out = s.tokenizer, []
    prompts = [[tok.bos_id] + tok.encode(q[0][-1].content) for q in s.tune.questions()[:10]]
    prompts += [[tok.bos_id] + tok.encode(d[:40]) for d in s.pretrain.train_documents[:10]]
    for k, prompt in enumerate(prompts):
        g = s.generate_ids(prompt, 12, GREEDY)
        text = tok.decode(g)
        changed = text[:len(text) // 2] + ("x" if text[len(text) // 2:][:1] != "x" else "y") \
            + text[len(text) // 2 + 1:]
        for wanted in (text, text[:len(text) // 2], changed, text + " more"):
            for forced in (g, tok.encode(wanted)[:12], g[:k % 4]):
                out += [Case(prompt, forced, wanted, exact, 12) for exact in (False, True)]
    return out


def test_verdicts_equal_decoding_each_case(tuned):
    s = tuned
    cases = _cases(s)
    greedy = greedy_tokens(s.model, [c.prompt + c.forced for c in cases],
                           [len(c.prompt) - 1 for c in cases], batch=5)
    stops = set(s.tokenizer.stop_ids)
    decided, passed = 0, 0
    for case, best in zip(cases, greedy):
        v = verdict(case, best, s.tokenizer.decode, stops)
        output = s.generate_ids(case.prompt, case.max_new, GREEDY)
        truth = holds(s.tokenizer.decode(output), case)
        passed += truth
        if v is not None:
            decided += 1
            assert v == truth, case
        if case.forced == output:   # the right guess always decides
            assert v is not None, case
    assert len(cases) // 5 < passed < len(cases) * 4 // 5   # passes and fails both tried
    assert decided >= len(cases) // 2   # poor guesses ([], a few tokens) leave some open


def _decoded_each(s):
    """The stage-end check as it was: every item decoded token by token."""
    tok = s.tokenizer
    recall = 0
    for doc in evaluate.training_documents(s, evaluate.MAX_FACTS):
        case = evaluate.recall_case(tok, doc)
        if case:
            got = tok.decode(s.generate_ids([tok.bos_id] + tok.encode(case[0]), case[2], GREEDY))
            recall += holds(got, Case([], [], case[1], False, 0))
    answers = 0
    for messages, expected in evaluate._questions(s):
        want, kept, cut = evaluate._expected(tok, " " + expected)
        got = s.chat(messages, max_new_tokens=len(kept) + 2, greedy=True)
        answers += holds(got, Case([], [], want, not cut, 0))
    return recall, answers


def test_stage_end_check_equals_decoding_and_decodes_little(tuned, monkeypatch):
    s = tuned
    recall, answers = _decoded_each(s)
    assert answers > 0   # some answers pass: the check is not all fails
    decoded = []
    real = s.generate_ids
    monkeypatch.setattr(s, "generate_ids", lambda *a, **k: decoded.append(1) or real(*a, **k))
    facts, tuned_answers = evaluate.fact_recall(s), evaluate.answer_accuracy(s)
    assert (facts.correct, tuned_answers.correct) == (recall, answers)
    items = facts.total + tuned_answers.total
    assert len(decoded) <= items // 4, f"{len(decoded)} of {items} items decoded one by one"


# ------------------------------------------------------------------ the argmaxes themselves

@pytest.mark.parametrize("chunk", [False, True])
def test_greedy_tokens_are_the_argmax_of_each_rows_logits(rt, monkeypatch, chunk):
    """Rows of awkward lengths (1, odd, a whole window) in batches of 3, the logits whole or
    in chunks of 128 rows: each asked position's token is its own row's logits' argmax."""
    if chunk:
        monkeypatch.setattr(activations, "LOGITS_FLOATS", 1)
    cfg = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=160, vocab_size=300)
    model = Model(rt, cfg, seed=3)
    rng = np.random.default_rng(1)
    rows = [list(rng.integers(0, 300, n)) for n in (1, 7, 160, 33, 64, 2, 129)]
    first = [0, 3, 150, 0, 63, 1, 5]
    got = greedy_tokens(model, rows, first, batch=3)
    for row, f, best in zip(rows, first, got):
        logits = model.logits(np.array([row], np.int32))[0]
        assert best.shape == (len(row) - f,)
        top = logits[np.arange(f, len(row)), best]
        np.testing.assert_allclose(top, logits[f:].max(axis=1), atol=1e-5)

