"""Chat that remembers (issue 11): history is kept whenever it fits, dropping is reported, the
answer may run past the window correctly, and llama.cpp's chat completion on the exported GGUF
answers with exactly the engine's characters (no leading space) and stops at </s>."""

import numpy as np
import pytest

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.generation.chat import ChatReply, answer_reserve
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.data.dialogue import CHAT_TEMPLATES, Message, encode_prompt
from opencl_llm_studio.engine.files.gguf_import import import_gguf
from opencl_llm_studio.engine.training.opening import create_session, load_session, session_from_gguf
from tests.helpers import first_near_tie, trained_session

U, A = (lambda c: Message("user", c)), (lambda c: Message("assistant", c))


@pytest.fixture(scope="module")
def trained(rt, tmp_path_factory):
    """The defaults that matter here (context 64, vocab 512), a small fast model."""
    mc = ModelConfig(d_model=64, n_layer=2, n_head=4, context_length=64, vocab_size=512)
    tc = TrainConfig(pretrain_steps=150, tune_steps=100, batch_size=8, learning_rate=4e-3,
                     eval_interval=1000, sample_interval=0, evaluate_recall=False)
    s = trained_session(rt, mc, tc)
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    s.export_gguf(path)
    return s, path


def follow_ups(session):
    """(history up to a later user turn, its tuned answer) for every multi-turn dialogue."""
    return [(d[:i], d[i].content) for d in session.tune.dialogues
            for i in range(2, len(d)) if d[i].role == "assistant"]


def test_every_tuned_follow_up_keeps_its_history(trained):
    s, _ = trained
    T = s.model_config.context_length
    cases = follow_ups(s)
    assert len(cases) >= 3
    for history, _ in cases:
        assert s.fit_messages(history, 64) == history           # the defaults: max tokens 64
        reply = s.chat(history, greedy=True)
        if len(encode_prompt(s.tokenizer, history)) + reply.n_tokens <= T:
            assert reply.dropped_turns == 0, history
            assert not reply.notes()


def test_follow_up_is_answered_from_the_first_turn(trained):
    s, _ = trained
    reply = s.chat([U("What is the highest mountain?"), A("Mount Everest."), U("Where is it?")],
                   greedy=True)
    assert reply == "On the border of Nepal and China."
    assert (reply.dropped_turns, reply.finish_reason) == (0, "stop")


def test_reserve_is_a_normal_answer_not_max_tokens():
    assert answer_reserve(64, 64) == 8 and answer_reserve(64, 3) == 3
    assert answer_reserve(1, 64) == 1 and answer_reserve(2048, 64) == 64


def test_long_history_drops_whole_old_exchanges_and_says_so(trained):
    s, _ = trained
    history = []
    for d in s.tune.dialogues[:6]:
        history += d
    history.append(U("What is the capital of France?"))
    T = s.model_config.context_length
    reply = s.chat(history, greedy=True)
    kept = s.fit_messages(history, 64)
    assert kept[0].role == "user" and kept[-1] == history[-1]
    assert len(encode_prompt(s.tokenizer, kept)) <= T - answer_reserve(T, 64)
    assert reply.dropped_turns >= len(history) - len(kept) > 0
    assert f"left out to fit the {T}-token context" in reply.notes()[0]


def test_answer_past_the_window_drops_oldest_exchanges(rt):
    """Random weights rarely write </s>: the answer fills the window, the oldest exchange makes
    way (the prompt still starts at BOS, "User:"), and each token is the full forward's argmax
    over exactly that window; when only the question is left it stops ("context")."""
    text = "The cat sat on the mat. The dog sat on the log.\n" * 5
    cfg = ModelConfig(vocab_size=300, d_model=32, n_layer=2, n_head=4, context_length=32)
    s = create_session(cfg, TrainConfig(pretrain_steps=0, tune_steps=0,
                                                val_fraction=0.0), text, runtime=rt)
    history = [U("cat"), A("the mat"), U("dog"), A("the log"), U("bird")]
    reply = s.chat(history, max_new_tokens=200, greedy=True)
    kept, new = list(history), []
    while True:                                  # the reference: whole windows, float32 forward
        ctx = encode_prompt(s.tokenizer, kept) + new
        if len(ctx) > 32:
            if len(kept) == 1:
                break
            kept = kept[2:]
            continue
        nxt = int(s.model.logits(np.array([ctx], np.int32))[0, -1].argmax())
        if nxt == s.tokenizer.eos_id or len(new) == reply.n_tokens:
            break
        new.append(nxt)
    assert s.tokenizer.decode(new) == reply
    assert reply.n_tokens > 32 - len(encode_prompt(s.tokenizer, history))   # it went on
    assert reply.dropped_turns == len(history) - len(kept) > 0
    assert reply.finish_reason in ("context", "stop")


QUESTIONS = [[U("What is the capital of France?")], [U("Can penguins fly?")],
             [U("What do bees make?")], [U("What is the highest mountain?"),
                                         A("Mount Everest."), U("Where is it?")],
             [U("How many arms does an octopus have?"), A("Eight arms."),
              U("What else can it do?")], [U("Tell me about cats.")]]


@pytest.mark.parametrize("k", range(len(QUESTIONS)))
def test_llama_cpp_answer_equals_the_studio_character_for_character(trained, k):
    llama_cpp = pytest.importorskip("llama_cpp")
    s, path = trained
    msgs = QUESTIONS[k]
    ours = s.chat(msgs, greedy=True, max_new_tokens=40)
    assert ours.finish_reason == "stop" and ours.dropped_turns == 0
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False, seed=0)
    r = llm.create_chat_completion(messages=[{"role": m.role, "content": m.content}
                                             for m in msgs],
                                   temperature=0.0, top_k=1, max_tokens=40)
    theirs = r["choices"][0]["message"]["content"]
    tie = first_near_tie(s, msgs)
    if tie is not None:   # two tokens within float rounding: either runtime may take either
        assert theirs.startswith(tie) and ours.text.startswith(tie), (theirs, ours.text, tie)
        return
    assert theirs == ours.text and not theirs.startswith(" ")
    assert r["choices"][0]["finish_reason"] == "stop"        # stopped at </s>
    assert r["usage"]["completion_tokens"] == ours.n_tokens   # the same tokens (</s> not counted)


def test_old_checkpoint_keeps_chat_format_1(trained, tmp_path, rt):
    """A run saved before chat formats were recorded was tuned with " answer" after
    "Assistant:": it loads as format 1, is tuned and exported that way, and its answers are
    shown without the separator space."""
    s, _ = trained
    s.save(tmp_path)
    ck = checkpoint.load(tmp_path)
    header = dict(ck["header"])
    assert header.pop("chat_format") == 2
    checkpoint.save(tmp_path, header, ck["params"], ck["adam_m"], ck["adam_v"], ck["tokenizer"],
                    ck["pretrain_text"], ck["tune_text"])
    old = load_session(tmp_path, runtime=rt)
    assert old.chat_format == 1 and old.tune.chat_format == 1
    assert old.tune.encoded[0][0][:-3] != s.tune.encoded[0][0][:-3]
    assert not old.chat([U("What is the capital of France?")], greedy=True).startswith(" ")
    b = old.bundle()
    assert b.metadata["chat_format"] == 1
    path = old.export_gguf(tmp_path / "old.gguf").path
    assert import_gguf(path).metadata["chat_format"] == 1
    import gguf
    f = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    assert bytes(f.parts[f.data[0]]).decode() == CHAT_TEMPLATES[1]
    assert session_from_gguf(path, s.pretrain_text, runtime=rt).chat_format == 1


def test_chat_reply_is_a_string_with_notes():
    r = ChatReply("Paris.", dropped_turns=2, finish_reason="context", n_tokens=3,
                  context_length=64)
    assert r == "Paris." and isinstance(r, str) and r.text == "Paris."
    assert r.notes() == ["The 2 oldest messages were left out to fit the 64-token context.",
                         "The answer was cut: the 64-token context is full."]
    assert ChatReply("x").notes() == []


def asked(qtbot, question):
    """A chat panel with `question` sent (no worker: the test answers it)."""
    from opencl_llm_studio.studio.ui.panels.chat_panel import ChatPanel
    panel = ChatPanel()
    qtbot.addWidget(panel)
    panel.set_available(True)
    panel.input.setText(question)
    panel.send()
    return panel


def test_chat_panel_shows_what_was_left_out(qtbot):
    panel = asked(qtbot, "Where is it?")
    panel.append_token("On the border")
    panel.append_token(" of Nepal.")
    panel.finish_answer(ChatReply("On the border of Nepal.", dropped_turns=2, n_tokens=6,
                                  context_length=64))
    note = "The 2 oldest messages were left out to fit the 64-token context."
    view = panel.view.toPlainText()
    assert "Model: On the border of Nepal.\n(" + note + ")" in view
    assert panel.status.text() == note
    assert panel.messages[-1] == {"role": "assistant", "content": "On the border of Nepal."}
    panel.input.setText("And?")
    panel.send()
    panel.finish_answer(ChatReply("Yes.", context_length=64))    # nothing left out: no note
    assert panel.view.toPlainText().endswith("Model: Yes.")
    assert panel.status.text() == "Chatting with the current weights."


def test_chat_panel_shows_the_engines_characters(qtbot):
    """The panel no longer strips what the engine sends: the studio shows the same characters
    as llama.cpp (a leading space too, should a model write one)."""
    panel = asked(qtbot, "Hi")
    panel.append_token(" Hello")
    panel.finish_answer(ChatReply(" Hello", context_length=64))
    assert panel.view.toPlainText().endswith("Model:  Hello")


def test_cli_chat_says_when_turns_are_left_out(trained, tmp_path, monkeypatch, capsys):
    from opencl_llm_studio.studio.cli import main
    s, _ = trained
    s.save(tmp_path)
    lines = iter(["What is the highest mountain?", "Where is it?",
                  "How long does sunlight take to reach the Earth?",
                  "What do plants make from sunlight?", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert main(["chat", str(tmp_path), "--greedy"]) == 0
    out = capsys.readouterr().out
    assert "Assistant: On the border of Nepal and China.\n" in out    # the first turn was kept
    assert "left out to fit the 64-token context.)" in out            # later, older turns go


def test_cli_tokenize_space_on_a_corpus_without_spaces(rt, tmp_path, capsys):
    """Issue 11: `llm-studio tokenize RUN "12 34"` showed <0xE2> <0x96> <0x81> for the space."""
    from opencl_llm_studio.studio.cli import main
    cfg = ModelConfig(vocab_size=300, d_model=32, n_layer=1, n_head=4, context_length=16)
    s = create_session(cfg, TrainConfig(pretrain_steps=0, tune_steps=0, val_fraction=0.0),
                       "0123456789\n31415926535\n" * 20, runtime=rt)
    s.save(tmp_path)
    assert main(["tokenize", str(tmp_path), "12 34"]) == 0
    ids, pieces, _ = capsys.readouterr().out.splitlines()
    assert pieces == "'1' '2' '▁' '3' '4'"
    assert s.tokenizer.decode([int(i) for i in ids.split()]) == "12 34"
