"""Honest validation numbers (issue 11 "Honest numbers", issue 12 item 1): held-out text
whenever the text allows it, "training text" said wherever it does not, and the validation
loss in bits per byte, checked against a hand computation."""

import json
import math

import numpy as np
import pytest

from opencl_llm_studio.engine.config import parse_val_split
from opencl_llm_studio.engine.data.corpus import FINAL_VAL_TOKENS, HELD_OUT, TRAINING_TEXT, PretrainData, token_bytes
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.metrics import bits_per_byte, score_validation
from opencl_llm_studio.engine.data.tokenizer import Tokenizer
from opencl_llm_studio.studio.cli import main

CATS = "Cats sleep a lot.\n\nDogs bark at night.\n"
ONE_LINE = " ".join(f"word{i % 37} is followed by word{(i * 7) % 37}." for i in range(200))


def test_issue_example_says_training_text():
    """The issue's file at context 8: nothing can be held out, and that is what it says."""
    tok = Tokenizer.train([CATS], 512)
    data = PretrainData(tok, CATS, 8)
    assert data.n_tokens < 2 * 9
    assert data.val_source == TRAINING_TEXT and data.val_is_train
    assert "nothing held out" in data.val_note and "training text" in data.val_note


def test_one_long_line_holds_out_its_tail():
    """One document (one long line): its last 10% of characters are held out, not trained on."""
    tok = Tokenizer.train([ONE_LINE], 512)
    data = PretrainData(tok, ONE_LINE, 16)
    assert len(data.documents) == 1 and data.val_source == HELD_OUT
    cut = int(len(ONE_LINE) * 0.9)
    assert data.train_text == ONE_LINE[:cut] and data.val_text == ONE_LINE[cut:]
    assert data.val_stream.tolist() == [tok.bos_id] + tok.encode(ONE_LINE[cut:])
    assert "the end of its only paragraph" in data.val_note
    # recall checks only what was trained on: the beginning of the line, not all of it
    assert data.train_documents == [ONE_LINE[:cut].strip()] and data.n_val_documents == 0


def test_small_documents_fall_back_to_tokens():
    """Two short documents at context 4: the last one is held out; at a context where one
    document is too short for a window, the tail tokens are held out instead."""
    tok = Tokenizer.train([CATS], 512)
    assert PretrainData(tok, CATS, 4).n_val_documents == 1
    text = "Cats sleep a lot and dream of mice all day long.\n\nDogs bark."
    tok = Tokenizer.train([text], 300, "char")
    data = PretrainData(tok, text, 16)
    assert data.val_source == HELD_OUT and data.val_stream.size >= 17
    assert data.train_stream.size >= 17


def test_a_short_first_paragraph_falls_back_to_the_tail():
    """docs: the last paragraph would leave too little to train on: the tail cut is used."""
    text = "Short.\n\n" + "A long second paragraph about the sea and the tides. " * 4
    tok = Tokenizer.train([text], 300, "char")
    data = PretrainData(tok, text, 16)
    cut = int(len(text) * 0.9)
    assert data.val_source == HELD_OUT and data.val_text == text[cut:]
    assert data.train_stream.size >= 17 and data.val_stream.size >= 17
    assert data.train_documents == ["Short.", text[8:cut].strip()] and data.n_val_documents == 0


def test_tail_split_is_nanogpts():
    """tail:0.1 with the char tokenizer: nanoGPT's split of the text, train = text[:int(n *
    0.9)], val = the rest, each encoded on its own (one token per character, blank lines too)."""
    text = "\n\n".join(f"Speaker {i}:\nLine number {i} of the play." for i in range(300))
    tok = Tokenizer.train([text], 512, "char")
    data = PretrainData(tok, text, 32, 0.1, val_split="tail")
    cut = int(len(text) * 0.9)
    assert data.train_stream.size == 1 + cut and data.val_stream.size == 1 + len(text) - cut
    assert tok.decode(data.val_stream[1:].tolist()) == text[cut:] == data.val_text
    assert data.val_source == HELD_OUT
    assert "held out" in data.val_note


def test_score_counts_the_held_out_texts_own_bytes():
    """Bits per byte of the whole held-out text: the bytes are its UTF-8 bytes exactly (the
    old stream counted a byte for each document mark and lost the blank lines)."""
    text = "".join(f"Ça {i}: naïve café 日本\n\n    indented {i}\n\n" for i in range(40))
    tok = Tokenizer.train([text], 300, "bpe")
    data = PretrainData(tok, text, 16, 0.25)
    assert data.val_source == HELD_OUT and data.val_text.startswith("Ça 30:")
    score = data.score(lambda x, y: 1.0, 3)
    assert score.tokens == data.val_stream.size - 1 == len(tok.encode(data.val_text))
    assert score.n_bytes == data.val_bytes == len(data.val_text.encode("utf-8"))
    assert score.bpb == pytest.approx(score.tokens / math.log(2) / data.val_bytes)
    assert data.summary()["val_bytes"] == data.val_bytes


def test_the_final_score_covers_up_to_its_cap():
    text = "".join(f"line {i} of a long text\n" for i in range(4000))
    tok = Tokenizer.train([text], 300, "char")
    data = PretrainData(tok, text, 16, 0.5, val_split="tail")
    assert data.score(lambda x, y: 1.0, 4).n_bytes == data.val_bytes   # FINAL_VAL_TOKENS
    capped = data.score(lambda x, y: 1.0, 4, max_tokens=160)
    assert capped.tokens == 160
    assert FINAL_VAL_TOKENS >= 1_000_000


@pytest.mark.parametrize("spec,want", [("tail:0.1", ("tail", 0.1)), ("docs", ("docs", 0.1)),
                                       ("docs:0.25", ("docs", 0.25)), ("tail:0", ("tail", 0.0))])
def test_parse_val_split(spec, want):
    assert parse_val_split(spec) == want


@pytest.mark.parametrize("spec", ["tail:1", "head:0.1", "tail:x", "tail:-0.1"])
def test_bad_val_split(spec):
    with pytest.raises(ConfigError, match="not understood") as info:
        parse_val_split(spec)
    assert "tail:0.1" in info.value.hint


def test_val_batches_cover_the_stream_once():
    text = "\n\n".join(f"Speaker {i}:\nLine number {i} of the play." for i in range(60))
    tok = Tokenizer.train([text], 512, "char")
    data = PretrainData(tok, text, 16, 0.3, val_split="tail")
    batches = data.val_batches(5, 10 ** 9)
    scored = np.concatenate([y[y >= 0] for _, y in batches])
    assert scored.size == data.val_stream.size - 1
    assert sorted(scored.tolist()) == sorted(data.val_stream[1:].tolist())
    assert all(x.shape == y.shape == (5, 16) for x, y in batches)
    capped = data.val_batches(5, 64)   # at most 64 targets: 4 windows of 16, evenly spaced
    assert sum(int((y >= 0).sum()) for _, y in capped) == 64
    assert data.val_batches(5, 64)[0][0].tolist() == capped[0][0].tolist()   # deterministic


def test_bits_per_byte_by_hand():
    """Loss of exactly ln 2 nats per token: bpb = tokens / bytes, bytes counted by hand."""
    text = "naïve café\n\nok"   # ï, é: 2 UTF-8 bytes each
    tok = Tokenizer.train([text], 300, "char")
    data = PretrainData(tok, text, 4, 0.5, val_split="tail")
    val_ids = data.val_stream[1:].tolist()          # the scored targets
    by_hand = 0
    for i in val_ids:
        by_hand += len(tok.decode([i]).encode("utf-8"))
    score = score_validation(data.val_batches(2, 10 ** 6), lambda x, y: math.log(2),
                             data.token_bytes)
    assert score.tokens == len(val_ids) and score.n_bytes == by_hand == data.val_bytes
    assert score.loss == pytest.approx(math.log(2))
    assert score.bpb == pytest.approx(len(val_ids) / by_hand)
    assert bits_per_byte(10 * math.log(2), 5) == pytest.approx(2.0)


def test_token_bytes_of_pieces():
    tok = Tokenizer.train(["héllo wörld"], 300, "char")
    nb = token_bytes(tok)
    assert nb[tok.unk_id] == nb[tok.bos_id] == nb[tok.eos_id] == 0   # they stand for no text
    assert nb[3:259].tolist() == [1] * 256
    assert nb[tok.encode("é")[0]] == 2 and nb[tok.encode(" ")[0]] == 1


def test_padded_batch_weighs_by_tokens():
    """A padded last batch counts its real targets only (not a mean of batch means)."""
    tb = np.ones(10, np.int64)
    y1 = np.array([[1, 2, 3, 4]]); y2 = np.array([[5, -1, -1, -1]])
    losses = iter([1.0, 3.0])
    s = score_validation([(y1, y1), (y2, y2)], lambda x, y: next(losses), tb)
    assert s.loss == pytest.approx((4 * 1.0 + 3.0) / 5) and s.tokens == 5


def test_cli_says_training_text(tmp_path, capsys):
    """The issue's example through the CLI: no line calls it val, metrics.jsonl says so."""
    pre = tmp_path / "cats.txt"
    pre.write_text(CATS)
    out = tmp_path / "run"
    rc = main(["train", "--out", str(out), "--pretrain", str(pre), "--no-tune",
               "--context-length", "8", "--steps", "3", "--d-model", "32", "--n-layer", "1"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "nothing held out" in err and "val on training text" in err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["val_source"] == "training text" and last["val_bpb"] > 0


def test_cli_tail_split_held_out(tmp_path, capsys):
    pre = tmp_path / "play.txt"
    pre.write_text("\n\n".join(f"Speaker {i}:\nLine number {i} of the play." for i in range(80)))
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--pretrain", str(pre), "--no-tune", "--tokenizer",
                 "char", "--val-split", "tail:0.1", "--context-length", "16", "--steps", "2",
                 "--d-model", "32", "--n-layer", "1"]) == 0
    err = capsys.readouterr().err
    assert "Validation: held out" in err and " val " in err and "bpb" in err
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["val_source"] == "held-out"
    # char tokenizer, ASCII text: one byte per token, so bpb = loss / ln 2
    assert last["val_bpb"] == pytest.approx(last["val_loss"] / math.log(2), rel=1e-6)


def test_cli_bad_val_split(tmp_path, capsys):
    rc = main(["train", "--out", str(tmp_path / "r"), "--val-split", "middle:0.1"])
    assert rc == 2 and "tail:0.1" in capsys.readouterr().err

