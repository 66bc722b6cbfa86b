"""engine.data.dialogue: parsing, chat template, loss mask, tune batches."""

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from opencl_llm_studio.engine.data.dialogue import (CHAT_FORMAT, CHAT_FORMATS, CHAT_TEMPLATE, CHAT_TEMPLATES, Message,
                             TuneData, answer_text, check_chat_format, encode_dialogue,
                             encode_prompt, parse_dialogues, render_prompt)
from opencl_llm_studio.engine.errors import DataError

U, A, S = (lambda c: Message("user", c)), (lambda c: Message("assistant", c)), \
    (lambda c: Message("system", c))

MULTI = [U("What is the capital of France?"), A("Paris is the capital of France."),
         U("And of Japan?"), A("Tokyo is the capital of Japan.")]


@pytest.fixture(scope="module")
def tune_text(texts):
    return texts[1]


# ---------------------------------------------------------------- parsing

def test_parse_multi_turn_multi_line_and_system():
    text = ("System: Be brief.\nUser: What is the capital of France?\nAssistant: Paris.\n"
            "User: And of Japan?\nAssistant: Tokyo,\nthe largest city.\n\n\n"
            "User: Line one\n  line two\nAssistant:   spaced answer  \n")
    assert parse_dialogues(text) == [
        [S("Be brief."), U("What is the capital of France?"), A("Paris."), U("And of Japan?"),
         A("Tokyo,\nthe largest city.")],
        [U("Line one\n  line two"), A("spaced answer")],
    ]


def test_tags_in_any_case():
    assert parse_dialogues("user: hi\nASSISTANT: hello") == [[U("hi"), A("hello")]]
    assert parse_dialogues("User: a\nAssistant: b\nuser: c\nassistant: d") == \
        [[U("a"), A("b"), U("c"), A("d")]]        # not swallowed into the first answer


def test_parse_jsonl():
    rows = [{"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": " Hi "}, {"role": "assistant", "content": "Hello."}]},
            {"messages": [{"role": "User", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}]
    text = "\n" + "\n".join(json.dumps(r) for r in rows) + "\n\n"
    assert parse_dialogues(text) == [[S("Be brief."), U("Hi"), A("Hello.")], [U("2+2?"), A("4")]]


def test_bundled_tune_file(tune_text):
    dialogues = parse_dialogues(tune_text)
    assert len(dialogues) >= 16
    assert sum(len(d) > 2 for d in dialogues) >= 3, "a few multi-turn dialogues"
    assert all(d[-1].role == "assistant" for d in dialogues)


@pytest.mark.parametrize("text,match", [
    ("", "is empty"),
    ("\n  \n", "is empty"),
    ("User: hi\nUser: anyone?\n", "no line starting with 'Assistant:'"),
    ("Hello there\nUser: hi\nAssistant: hey", "line 1: expected a line starting with 'User:'"),
    ("User: a\nAssistant: b\n\nAssistant: c\nUser: d\nAssistant: e",
     "line 4: an Assistant turn before any User"),
    ("System: s\nAssistant: b", "line 2: an Assistant turn before any User"),
    ("User: a\nUser: b\nAssistant: c", "line 2: two User turns in a row; expected 'Assistant:'"),
    ("User: a\nAssistant: b\nAssistant: c", "line 3: two Assistant turns in a row; expected 'User:'"),
    ("User: a\nAssistant: b\nUser: c\n\nUser: d\nAssistant: e", "line 3: the dialogue ends without"),
    ("User: a\nAssistant:\n", "line 2: the assistant turn is empty"),
    ("User:  \nAssistant: b", "line 1: the user turn is empty"),
    ("User: a\nAssistant: b\nSystem: c\nUser: d\nAssistant: e", "line 3: a System turn after"),
])
def test_text_format_errors(text, match):
    with pytest.raises(DataError, match=match) as info:
        parse_dialogues(text, source="tune file")
    hint = info.value.hint      # what to write instead: a line, a turn or the whole format
    assert any(w in hint for w in ("'User:'", "'Assistant:'", "colon", "System", "alternate",
                                   '"User: question"')), hint


@pytest.mark.parametrize("lines,match", [
    (['{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}',
      '{"messages": [}'], "line 2: not valid JSON"),
    (['{"messages": [{"role": "robot", "content": "a"}]}'],
     "line 1, 'messages', message 1: unknown role 'robot'"),
    (['{"msgs": []}'], "line 1: found an object with keys 'msgs', a structure this app does not"),
    (['{"messages": [{"role": "user"}]}'],
     'line 1, \'messages\', message 1: a message needs "role" and "content"'),
    (['{"messages": [{"role": "user", "content": "a"}]}'], "line 1: the dialogue ends without"),
    (['', '{"messages": [{"role": "assistant", "content": "a"}]}'], "line 2: an Assistant turn"),
])
def test_jsonl_errors(lines, match):
    with pytest.raises(DataError, match=match):
        parse_dialogues("\n".join(lines), source="chat.jsonl")


def test_source_is_named():
    with pytest.raises(DataError, match="^my.txt, line 1"):
        parse_dialogues("oops\nAssistant: x", source="my.txt")


# ---------------------------------------------------------------- rendering

def test_render_prompt_exact():
    # Format 2: the answer starts its own line, so the model's text has no leading space.
    assert render_prompt([S("Be brief."), U("Hi")]) == "System: Be brief.\nUser: Hi\nAssistant:\n"
    assert render_prompt(MULTI[:3]) == ("User: What is the capital of France?\nAssistant:\nParis "
                                        "is the capital of France.</s>\nUser: And of Japan?\n"
                                        "Assistant:\n")
    assert render_prompt(MULTI) == render_prompt(MULTI[:3])   # a trailing answer is left out


def test_render_prompt_format_1_kept_for_old_runs():
    assert render_prompt(MULTI[:3], chat_format=1) == (
        "User: What is the capital of France?\nAssistant: Paris is the capital of France.</s>\n"
        "User: And of Japan?\nAssistant:")
    assert answer_text(" Paris.", 1) == "Paris." and answer_text(" Paris.", 2) == " Paris."
    with pytest.raises(DataError, match="chat format 3"):
        check_chat_format(3)


@pytest.mark.parametrize("fmt", CHAT_FORMATS)
def test_chat_template_matches_rendering(fmt):
    jinja2 = pytest.importorskip("jinja2")
    tpl = jinja2.Environment().from_string(CHAT_TEMPLATES[fmt])
    sep = " " if fmt == 1 else "\n"
    msgs = [{"role": m.role, "content": m.content} for m in [S("Be brief.")] + MULTI]
    full = tpl.render(messages=msgs, bos_token="<s>", eos_token="</s>", add_generation_prompt=True)
    assert full == (f"<s>System: Be brief.\nUser: What is the capital of France?\nAssistant:{sep}"
                    f"Paris is the capital of France.</s>\nUser: And of Japan?\nAssistant:{sep}"
                    f"Tokyo is the capital of Japan.</s>\n")
    prefix = tpl.render(messages=msgs[:4], bos_token="<s>", eos_token="</s>",
                        add_generation_prompt=True)
    assert prefix == "<s>" + render_prompt([S("Be brief.")] + MULTI[:3], chat_format=fmt)
    assert CHAT_TEMPLATE == CHAT_TEMPLATES[CHAT_FORMAT] == CHAT_TEMPLATES[2]


# ---------------------------------------------------------------- encoding

def test_loss_mask_multi_turn(tok):
    ids, mask = encode_dialogue(tok, MULTI)
    enc = tok.encode
    want_ids, want_mask = [tok.bos_id], [0]
    for text, m in [("User: What is the capital of France?\nAssistant:\n", 0),
                    ("Paris is the capital of France.", 1), (None, 1), ("\n", 0),
                    ("User: And of Japan?\nAssistant:\n", 0),
                    ("Tokyo is the capital of Japan.", 1), (None, 1), ("\n", 0)]:
        seg = [tok.eos_id] if text is None else enc(text)
        want_ids += seg
        want_mask += [m] * len(seg)
    assert ids == want_ids and mask == want_mask
    learned = [i for i, m in zip(ids, mask) if m]
    assert tok.decode(learned) == "Paris is the capital of France.Tokyo is the capital of Japan."
    assert learned.count(tok.eos_id) == 2
    assert [i for i, m in zip(ids, mask) if m and i == tok.eos_id] == \
        [i for i in ids if i == tok.eos_id]        # every EOS is learned, nothing else special


def split_at_specials(ids, specials):
    parts, cur = [], []
    for i in ids:
        if i in specials:
            parts.append(cur)
            cur = []
        else:
            cur.append(i)
    return parts + [cur]


_CONTENT = st.text(st.characters(blacklist_categories=("Cs", "Cc")),
                   min_size=1, max_size=30).map(str.strip).filter(lambda s: s and "</s>" not in s)


@pytest.mark.parametrize("fmt", CHAT_FORMATS)
@settings(max_examples=100, deadline=None)
@given(turns=st.lists(st.tuples(_CONTENT, _CONTENT), min_size=1, max_size=3))
def test_segments_equal_encoding_between_specials(tok, fmt, turns):
    msgs = [m for q, a in turns for m in (U(q), A(a))]
    ids, _ = encode_dialogue(tok, msgs, fmt)
    sep = " " if fmt == 1 else ""
    text = "<s>" + render_prompt(msgs, chat_format=fmt) + sep + msgs[-1].content + "</s>\n"
    texts = text[len("<s>"):].split("</s>")
    assert split_at_specials(ids[1:], {tok.bos_id, tok.eos_id}) == [tok.encode(t) for t in texts]


def test_encode_prompt(tok):
    ids, mask = encode_dialogue(tok, MULTI)
    prompt = encode_prompt(tok, MULTI[:3])
    assert prompt == encode_prompt(tok, MULTI)
    assert ids[:len(prompt)] == prompt and mask[len(prompt)] == 1
    assert tok.decode(prompt) == render_prompt(MULTI).replace("</s>", "")


# ---------------------------------------------------------------- TuneData

def test_tune_batch(tok, tune_text):
    data = TuneData(tok, tune_text, context_length=64, seed=0)
    x, y = data.train_batch(np.random.default_rng(0), 16)
    assert x.shape == y.shape == (16, 64) and x.dtype == y.dtype == np.int32
    assert all(sum(m[:65]) == sum(m) for _, m in data.encoded)   # no answer token is cut
    expected = []       # per dialogue: (inputs, targets) built by hand, T = 64
    for ids, mask in data.encoded:
        pad = 65 - len(ids)
        full, m = ids + [tok.eos_id] * pad, mask + [0] * pad            # EOS padding, no loss
        full, m = full[:65], m[:65]                                       # a row holds T + 1
        expected.append((full[:64], [t if k else -1 for t, k in zip(full[1:], m[1:])]))
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        assert row_x[0] == tok.bos_id
        assert (row_x, row_y) in expected
    assert (y != -1).any() and (y == -1).any()
    ids, mask = data.rows     # the rows batches are drawn from (scale-out writes them)
    assert ids.shape == mask.shape == (len(data.encoded), 65) and mask.dtype == bool
    for r, (e_ids, e_mask) in enumerate(data.encoded):
        k = min(len(e_ids), 65)
        assert ids[r, :k].tolist() == e_ids[:k] and (ids[r, k:] == tok.eos_id).all()
        assert mask[r, :k].tolist() == [bool(v) for v in e_mask[:k]] and not mask[r, k:].any()
    with pytest.raises(ValueError):
        ids[0, 0] = 7     # read-only: a caller cannot change what training draws


def test_tune_truncation_and_determinism(tok, tune_text):
    data = TuneData(tok, tune_text, context_length=40, seed=5)
    assert data.n_truncated == sum(len(ids) > 41 for ids, _ in data.encoded) > 0
    a = data.train_batch(np.random.default_rng(3), 8)
    b = data.train_batch(np.random.default_rng(3), 8)
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    c = TuneData(tok, tune_text, 40, seed=5).train_batch(None, 8)
    d = TuneData(tok, tune_text, 40, seed=5).train_batch(None, 8)
    assert np.array_equal(c[1], d[1])


def test_eval_batches_cover_every_dialogue_once(tok, tune_text):
    data = TuneData(tok, tune_text, 64)
    n = len(data.dialogues)
    batches = data.eval_batches(8)
    assert len(batches) == -(-n // 8)
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    assert all(b[0].shape == b[1].shape == (8, 64) and b[1].dtype == np.int32 for b in batches)
    assert [r[0] for r in x[:n]] == [tok.bos_id] * n
    assert (x[n:] == tok.eos_id).all() and (y[n:] == -1).all()
    n_answer = sum(sum(m[1:65]) for _, m in data.encoded)
    assert int((y >= 0).sum()) == n_answer
    ids0, mask0 = data.encoded[0]
    assert y[0].tolist()[:len(ids0) - 1] == [t if k else -1 for t, k in zip(ids0[1:], mask0[1:])]


def test_tune_from_parsed_dialogues(tok):
    data = TuneData(tok, [MULTI], context_length=128)
    x, y = data.train_batch(np.random.default_rng(0), 2)
    assert np.array_equal(x[0], x[1]) and data.dialogues == [MULTI]


def test_context_too_short_for_any_answer(tok):
    with pytest.raises(DataError, match="cut before its first answer") as info:
        TuneData(tok, [MULTI], context_length=4)
    assert "context length of at least" in info.value.hint


def test_questions(tok, tune_text):
    data = TuneData(tok, tune_text, 64)
    qs = data.questions()
    assert len(qs) == sum(m.role == "assistant" for d in data.dialogues for m in d)
    assert all(prefix[-1].role == "user" for prefix, _ in qs)
    assert TuneData(tok, [MULTI], 64).questions() == [(MULTI[:1], MULTI[1].content),
                                                      (MULTI[:3], MULTI[3].content)]


def test_tune_malformed_text(tok):
    with pytest.raises(DataError, match="no line starting with 'Assistant:'"):
        TuneData(tok, "User: only questions here", 64)


def test_a_capped_evaluation_builds_only_the_batches_it_scores(tok, tune_text):
    """Of k > max_batches batches, batches i * k // max_batches; each equals that batch of
    the full evaluation (the last one EOS-padded as before)."""
    data = TuneData(tok, "\n\n".join([tune_text] * 6), 64)
    full = data.eval_batches(4)
    k, cap = len(full), 5
    assert k > cap
    capped = data.eval_batches(4, cap)
    assert len(capped) == cap
    for i, (x, y) in enumerate(capped):
        fx, fy = full[i * k // cap]
        assert (x == fx).all() and (y == fy).all()
    assert len(data.eval_batches(4, k)) == k
