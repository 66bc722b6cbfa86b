"""What the model knows: fact recall after pretraining, trained answers after tuning.

Fact recall (issue 5): for each pretraining statement the model trained on, prompt with the
first half of its words and check that the greedy continuation reproduces the rest. Answer
accuracy: for each tune question, the greedy chat answer equals the trained answer. Text is
compared with whitespace collapsed; the continuation may go on past the expected end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.sampling import SamplingParams


def _norm(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Score:
    correct: int
    total: int
    failures: list = field(default_factory=list)  # (prompt, expected, got), a few

    @property
    def rate(self) -> float:
        return self.correct / max(self.total, 1)

    def to_dict(self) -> dict:
        return {"correct": self.correct, "total": self.total, "rate": round(self.rate, 4)}


MAX_FACTS = 64      # stage-end checks stay a few seconds however large the corpus
MAX_QUESTIONS = 64


def training_documents(session, limit: int | None = None) -> list[str]:
    """The pretraining text the model trained on, by document (held-out text excluded: a
    document cut by a token split counts with its training part only), at most `limit` of
    them, evenly spaced through the text."""
    docs = session.pretrain.train_documents
    if limit and len(docs) > limit:
        docs = [docs[i * len(docs) // limit] for i in range(limit)]
    return docs


def fact_recall(session, max_facts: int | None = MAX_FACTS) -> Score:
    """Recall over (at most max_facts, evenly spaced) training documents."""
    tok = session.tokenizer
    correct, failures, docs = 0, [], training_documents(session, max_facts)
    for doc in docs:
        words = doc.split()
        if len(words) < 2:
            continue
        half = max(1, len(words) // 2)
        prompt, rest = " ".join(words[:half]), " " + " ".join(words[half:])
        n = len(tok.encode(rest)) + 2
        ids = session.generate_ids([tok.bos_id] + tok.encode(prompt), n,
                                   SamplingParams(greedy=True))
        got = tok.decode(ids)
        if _norm(got).startswith(_norm(rest)):
            correct += 1
        elif len(failures) < 5:
            failures.append((prompt, rest.strip(), got.strip()))
    return Score(correct, len(docs), failures)


def answer_accuracy(session, max_questions: int | None = MAX_QUESTIONS) -> Score:
    """Share of (at most max_questions, evenly spaced) tune questions answered as trained."""
    if not session.tune:
        return Score(0, 0)
    qs = session.tune.questions()
    if max_questions and len(qs) > max_questions:
        qs = [qs[i * len(qs) // max_questions] for i in range(max_questions)]
    correct, failures = 0, []
    for messages, expected in qs:
        n = len(session.tokenizer.encode(" " + expected)) + 2
        got = session.chat(messages, max_new_tokens=n, greedy=True)
        if _norm(got) == _norm(expected):
            correct += 1
        elif len(failures) < 5:
            failures.append((messages[-1].content, expected, got))
    return Score(correct, len(qs), failures)
