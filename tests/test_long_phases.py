"""Long phases (issue 11): bounded by a cap, reporting progress, cancellable within a token, a
batch or a chunk; the CLI saves on every way out (Ctrl-C, SIGTERM, SIGHUP)."""

import json
import os
import random
import signal

import pytest

import opencl_llm_studio.engine.generation.generator as generation_module
import opencl_llm_studio.engine.training.trainer as trainer_module
from opencl_llm_studio.engine.training import evaluate
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.data.corpus import PretrainData
from opencl_llm_studio.engine.data.longtext import ENCODE_CHUNK_CHARS, chunks, encode_text
from opencl_llm_studio.engine.progress import Cancelled, Monitor
from opencl_llm_studio.engine.training.opening import create_session, load_session
from opencl_llm_studio.engine.data.textio import read_text
from opencl_llm_studio.engine.data.tokenizer import TRAIN_SENTENCE_CHARS, Tokenizer, _sentences
from opencl_llm_studio.engine.data.textio import bundled_corpus
from opencl_llm_studio.studio.cli import main

MC = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=32, vocab_size=400)
TINY = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "32",
        "--vocab-size", "400", "--batch-size", "4", "--quiet"]


def _words(n: int, seed: int = 0) -> list[str]:
    vocab = read_text(bundled_corpus("pretrain")).split()
    rng = random.Random(seed)
    return [rng.choice(vocab) for _ in range(n)]


@pytest.fixture(scope="module")
def one_line_session():
    """A session on one 20,000-word line: one document, nothing held out."""
    text = " ".join(_words(20_000)) + "\n"
    tc = TrainConfig(pretrain_steps=2, tune_steps=0, batch_size=4, eval_interval=1,
                     sample_interval=1)
    return create_session(MC, tc, text)


def test_recall_of_a_one_line_document_is_bounded(one_line_session, monkeypatch):
    """The one document is checked on its first words: the batched pass's row and any
    token-by-token decoding stay within the caps, not half the document."""
    s = one_line_session
    asked, rows = [], []
    real, real_rows = s.generate_ids, evaluate.greedy_tokens

    def counting(prompt_ids, max_new_tokens, *a, **k):
        asked.append((len(prompt_ids), max_new_tokens))
        assert max_new_tokens <= evaluate.RECALL_MAX_NEW_TOKENS + 2  # not half the document
        return real(prompt_ids, max_new_tokens, *a, **k)

    def forced(model, ids, first, *a, **k):
        rows.extend(map(len, ids))
        return real_rows(model, ids, first, *a, **k)

    monkeypatch.setattr(s, "generate_ids", counting)
    monkeypatch.setattr(evaluate, "greedy_tokens", forced)
    score = evaluate.fact_recall(s)
    assert score.total == 1 and len(rows) + len(asked) == 1   # one item, judged once
    assert all(n <= evaluate.RECALL_MAX_WORDS * 4 + evaluate.RECALL_MAX_NEW_TOKENS for n in rows)
    for prompt_len, n_new in asked:
        assert prompt_len <= evaluate.RECALL_MAX_WORDS * 4 and n_new >= 3


def test_recall_case_keeps_short_documents_whole():
    tok = Tokenizer.train([read_text(bundled_corpus("pretrain"))], 400)
    prompt, rest, n = evaluate.recall_case(tok, "The capital of France is Paris.")
    assert prompt == "The capital of" and rest == " France is Paris."
    assert n == len(tok.encode(rest)) + 2


def _cancel_at(monitor: Monitor, phase: str, at: int, seen: list):
    def on_phase(name, done, total):
        seen.append((name, done))
        if name == phase and done >= at:
            monitor.cancel()
    return on_phase


# the run's only step is its last: its validation is the final one, over the whole held-out text
@pytest.mark.parametrize("phase", ["final validation", "generating samples", "checking recall"])
def test_a_stop_during_a_phase_ends_it_and_keeps_the_step(one_line_session, monkeypatch, phase):
    s = one_line_session
    s.monitor.clear()
    tokens, at_cancel = [], []
    real = generation_module.next_token
    monkeypatch.setattr(generation_module, "next_token", lambda *a: tokens.append(1) or real(*a))

    def on_phase(name, done, total):
        if name == phase and not at_cancel:
            at_cancel.append(len(tokens))
            s.monitor.cancel()
    s.monitor.on_phase = on_phase
    s.step, s.train_config = 0, s.train_config.replace(pretrain_steps=1)
    try:
        steps = s.train()
        m = next(steps)
        assert m.step == 1 and m.extra["interrupted"] == phase
        if phase != "final validation":
            assert m.val_loss is not None  # what was measured before the stop is kept
        assert s.history[-1]["extra"]["interrupted"] == phase
        assert len(tokens) - at_cancel[0] <= 1  # at most the token under way
        with pytest.raises((Cancelled, StopIteration)):
            next(steps)
    finally:
        s.monitor.clear()
        s.monitor.on_phase = None


def test_generation_stops_within_one_token_of_a_cancel(one_line_session):
    s = one_line_session
    out = []

    def on_token(tok):
        out.append(tok)
        if len(out) == 3:
            s.monitor.cancel()
    try:
        with pytest.raises(Cancelled):
            s.generate_ids([s.tokenizer.bos_id], 1000, on_token=on_token)
    finally:
        s.monitor.clear()
    assert len(out) == 3


def test_encoding_a_long_document_reports_progress_and_can_be_cancelled():
    tok = Tokenizer.train([read_text(bundled_corpus("pretrain"))], 400)
    text = " ".join(_words(60_000))  # one ~380 KB line: several chunks
    seen, encoded = [], []
    monitor = Monitor()
    monitor.on_phase = _cancel_at(monitor, "encoding the pretraining text", 0, seen)
    real = tok.encode
    tok.encode = lambda t: encoded.append(len(t)) or real(t)
    with pytest.raises(Cancelled):
        PretrainData(tok, text, 32, monitor=monitor)
    assert seen == [("encoding the pretraining text", 0)]  # the first report, before any chunk
    assert len(encoded) == 1 and encoded[0] <= ENCODE_CHUNK_CHARS + 4096  # one chunk, then stop


def test_a_long_line_is_encoded_once_in_pieces_with_progress():
    """One ~1.3 MB line: train and held-out parts are encoded once each, chunk by chunk, the
    progress counts characters up to the whole text, and the ids are the whole text's."""
    tok = Tokenizer.train([read_text(bundled_corpus("pretrain"))], 400)
    text = " ".join(_words(200_000))
    seen, encoded = [], []
    real = tok.encode
    tok.encode = lambda t: encoded.append(len(t)) or real(t)
    data = PretrainData(tok, text, 64, monitor=Monitor(lambda *a: seen.append(a)))
    assert sum(encoded) == len(text) and max(encoded) <= ENCODE_CHUNK_CHARS + 4096
    done = [d for _, d, _ in seen]
    assert done == sorted(done) and seen[-1][1:] == (len(text), len(text))
    cut = int(len(text) * 0.9)
    assert data.val_text == text[cut:] and data.train_text == text[:cut]
    assert data.train_stream.tolist() == [tok.bos_id] + real(text[:cut])


def test_chunked_encoding_equals_the_whole_encoding():
    tok = Tokenizer.train([read_text(bundled_corpus("pretrain")), "a  b\t12 345  été 中文"], 500)
    rng = random.Random(3)
    alphabet = list("abc de  \t1234 é中.,\n") + [" "] * 5 + list("the cat sat")
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300)))
        for n in (1, 5, 40):
            parts = list(chunks(text, n))
            assert "".join(parts) == text
            assert [i for p in parts for i in tok.encode(p)] == tok.encode(text), (text, n)
    doc = " ".join(_words(30_000))
    assert encode_text(tok, doc).tolist() == [tok.bos_id] + tok.encode(doc)


def test_a_line_longer_than_sentencepiece_accepts_is_used():
    """SentencePiece drops a sentence above max_sentence_length: a 17 MB one-line text used to
    leave it nothing to train on; the line is cut into sentences instead."""
    line = " ".join(_words(400)) + " "
    text = line * (17_000_000 // len(line)) + "жук"  # the end of the line is used too
    pieces = _sentences([text])
    assert "".join(pieces) == text
    assert max(map(len, pieces)) <= 2 * TRAIN_SENTENCE_CHARS
    tok = Tokenizer.train([text], 400)
    assert tok.vocab_size > 300
    assert all(i >= 259 for i in tok.encode("жук"))  # its letters are pieces, not bytes


# ---------------------------------------------------------------- the CLI saves on every stop

def test_sigint_during_recall_stops_at_once_and_saves(tmp_path, monkeypatch):
    """The signal lands as the stage-end recall starts (on a 3,000-word one-line document the
    old check generated ~2,000 tokens after it); the CLI keeps the step and its metrics."""
    text = tmp_path / "one.txt"
    text.write_text(" ".join(_words(3_000)) + "\n")
    real_recall = trainer_module.fact_recall
    tokens = []

    def recall_after_ctrl_c(s, *a, **k):
        os.kill(os.getpid(), signal.SIGINT)
        tokens.clear()
        return real_recall(s, *a, **k)

    real_next = generation_module.next_token
    monkeypatch.setattr(trainer_module, "fact_recall", recall_after_ctrl_c)
    monkeypatch.setattr(generation_module, "next_token",
                        lambda *a: tokens.append(1) or real_next(*a))
    out = tmp_path / "run"
    rc = main(["train", "--out", str(out), "--pretrain", str(text), "--no-tune", "--steps", "2",
               *TINY])
    assert rc == 130
    assert len(tokens) <= 1
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[-1]["extra"]["interrupted"] == "checking recall"
    assert load_session(out).step == 2


def test_ctrl_c_that_breaks_a_kernel_build_is_a_stop(tmp_path, monkeypatch, capsys):
    """Ctrl-C reaches the whole process group, so the OpenCL compiler PoCL runs can die of it
    and the build fail: that is the user's stop (exit 130, nothing left in --out), not
    "The OpenCL kernels failed to compile ... Pick another device" (exit 2, as before)."""
    import opencl_llm_studio.engine.opencl.runtime as runtime_module
    from opencl_llm_studio.engine.errors import DeviceError

    class BrokenByCtrlC:
        def __init__(self, *a, **k):
            os.kill(os.getpid(), signal.SIGINT)
            raise DeviceError("The OpenCL kernels failed to compile on this device.",
                              "Pick another device.")

    monkeypatch.setattr(runtime_module, "Built", BrokenByCtrlC)
    out = tmp_path / "run"
    # Python's own handler, or SIG_IGN where the tests run as a background job of a shell
    handler = signal.getsignal(signal.SIGINT)
    rc = main(["train", "--out", str(out), "--steps", "2", "--no-tune", *TINY])
    err = capsys.readouterr().err
    assert rc == 130, err
    assert "Stopped before training began" in err and "failed to compile" not in err
    assert not out.exists()
    assert signal.getsignal(signal.SIGINT) is handler   # the command gave it back


@pytest.mark.parametrize("continued", [False, True])
def test_ctrl_c_before_the_first_step_leaves_the_folder_as_it_was(tmp_path, monkeypatch,
                                                                  capsys, continued):
    """Ctrl-C after the run is set up but before its first (new) step: nothing is saved, so a
    new run leaves no folder (the same command works again) and a continued one keeps its
    checkpoint and metrics byte for byte (was: "Stopped at step 0; saved to ...", a step-0
    run folder that the same `train --out` then refused as "already holds a training run")."""
    out = tmp_path / "run"
    if continued:
        assert main(["train", "--out", str(out), "--steps", "2", "--no-tune", *TINY]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()} if continued else None
    from opencl_llm_studio.engine.training.trainer import Trainer
    real_run = Trainer.run

    def ctrl_c_then_run(self, *a, **k):   # the run is set up; its steps are about to start
        os.kill(os.getpid(), signal.SIGINT)
        return real_run(self, *a, **k)
    monkeypatch.setattr(Trainer, "run", ctrl_c_then_run)
    capsys.readouterr()
    argv = (["--continue", "--steps", "4"] if continued else ["--steps", "4", "--no-tune"])
    rc = main(["train", "--out", str(out), *argv, *TINY])
    err = capsys.readouterr().err
    assert rc == 130, err
    assert "Stopped before training began" in err and "saving" not in err, err
    if continued:
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    else:
        assert not out.exists()


def test_a_kernel_build_broken_by_ctrl_c_in_the_first_step_is_a_stop(tmp_path, monkeypatch,
                                                                     capsys):
    """Ctrl-C while the first step builds its kernels: the compiler gets the signal too and the
    build fails. That is the person's stop, not a device fault: exit 130, "Stopped before
    training began", the folder left as it was (was: exit 2, "The OpenCL kernels failed to
    compile", seen in a full test run on a 2-core AMD machine)."""
    from opencl_llm_studio.engine.errors import DeviceError
    from opencl_llm_studio.engine.training.trainer import Trainer

    def ctrl_c_breaks_the_build(self, *a, **k):
        os.kill(os.getpid(), signal.SIGINT)
        raise DeviceError("The OpenCL kernels failed to compile on this device.",
                          "Give another --device.")
        yield   # a generator, as Trainer.run
    monkeypatch.setattr(Trainer, "run", ctrl_c_breaks_the_build)
    out = tmp_path / "run"
    rc = main(["train", "--out", str(out), "--steps", "4", "--no-tune", *TINY])
    err = capsys.readouterr().err
    assert rc == 130, err
    assert "Stopped before training began" in err and "failed to compile" not in err, err
    assert not out.exists()

