"""Dialogue files from other trainers (engine.data.dialogue_json): a pretty-printed JSON array, JSONL
lines that are bare lists, OpenAI messages, ShareGPT conversations and Alpaca records become the
same dialogues as the text format, so the encoded ids and loss masks are the same; a record of
another structure is refused naming what was found and the formats read."""

import json

import pytest

from opencl_llm_studio.engine.data.dialogue import Message, encode_dialogue, parse_dialogues
from opencl_llm_studio.engine.errors import DataError

TEXT = ("System: Be brief.\nUser: What is the capital of France?\nAssistant: Paris.\n\n"
        "User: And of Japan?\nAssistant: Tokyo.\nUser: Thanks!\nAssistant: You are welcome.\n")
OPENAI = [{"messages": [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "What is the capital of France?"},
                        {"role": "assistant", "content": "Paris."}]},
          {"messages": [{"role": "user", "content": "And of Japan?"},
                        {"role": "assistant", "content": [{"type": "text", "text": "Tokyo."}]},
                        {"role": "user", "content": "Thanks!"},
                        {"role": "assistant", "content": "You are welcome."}]}]
SHAREGPT = [{"conversations": [{"from": "system", "value": "Be brief."},
                               {"from": "human", "value": "What is the capital of France?"},
                               {"from": "gpt", "value": "Paris."}]},
            {"conversations": [{"from": "human", "value": "And of Japan?"},
                               {"from": "gpt", "value": "Tokyo."},
                               {"from": "human", "value": "Thanks!"},
                               {"from": "gpt", "value": "You are welcome."}]}]
BARE = [r["messages"] for r in OPENAI]


def jsonl(records):
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n"


@pytest.mark.parametrize("text", [
    json.dumps(OPENAI, indent=2), jsonl(OPENAI),
    json.dumps(SHAREGPT, indent=2), jsonl(SHAREGPT),
    json.dumps(BARE, indent=2), jsonl(BARE),
    "\ufeff" + json.dumps(OPENAI),          # a BOM is gone after engine.data.textio; spaces too
], ids=["openai-json", "openai-jsonl", "sharegpt-json", "sharegpt-jsonl", "bare-json",
        "bare-jsonl", "one-line-json"])
def test_other_formats_give_the_text_formats_dialogues(text, tok):
    want = parse_dialogues(TEXT)
    got = parse_dialogues(text.lstrip("\ufeff"))
    assert got == want
    for a, b in zip(got, want):
        assert encode_dialogue(tok, a) == encode_dialogue(tok, b)   # same ids, same loss mask


def test_alpaca():
    records = [{"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
               {"instruction": "Name a colour.", "input": "", "output": "Blue.",
                "system": "Be brief."}]
    assert parse_dialogues(json.dumps(records, indent=1)) == [
        [Message("user", "Add the numbers.\n\n2 and 3"), Message("assistant", "5")],
        [Message("system", "Be brief."), Message("user", "Name a colour."),
         Message("assistant", "Blue.")]]


def test_one_dialogue_as_one_bare_list():
    assert parse_dialogues(json.dumps(BARE[1], indent=2)) == parse_dialogues(TEXT)[1:]


@pytest.mark.parametrize("text,says", [
    (json.dumps([{"text": "hello", "label": 1}], indent=2),
     "item 1: found an object with keys 'text', 'label', a structure this app does not read"),
    (jsonl([{"prompt": "a", "completion": "b"}]), "line 1: found an object with keys 'prompt'"),
    (json.dumps({"data": [1, 2]}), "found an object with keys 'data'"),
    (json.dumps(["just", "strings"]), "found the string 'just'"),
    (jsonl([{"conversations": [{"from": "narrator", "value": "x"}]}]),
     "unknown role 'narrator'"),
    (json.dumps([{"conversations": [{"from": "human", "value": "q"}]}]),
     "item 1: the dialogue ends without an 'Assistant:' answer"),
    (jsonl([{"instruction": "a", "output": 5}]), "the Alpaca field 'output' is not a string"),
    ('[{"messages": [}]', "not valid JSON"),
])
def test_unknown_structures_are_named_with_the_supported_formats(text, says):
    with pytest.raises(DataError, match=None) as info:
        parse_dialogues(text, "tune file 'x.json'")
    assert says in str(info.value), str(info.value)
    for name in ("OpenAI", "ShareGPT", "Alpaca", "User:"):
        assert name in info.value.hint


def test_the_cli_trains_on_a_sharegpt_file(tmp_path, capsys):
    from opencl_llm_studio.studio.cli import main
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(SHAREGPT * 4, indent=2), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--tune", str(path), "--d-model", "32",
                 "--n-layer", "1", "--n-head", "2", "--context-length", "48", "--vocab-size",
                 "400", "--batch-size", "2", "--steps", "2", "--tune-steps", "2", "--quiet"]) == 0
    from opencl_llm_studio.engine.training.opening import load_session
    s = load_session(out)
    assert s.tune.dialogues == parse_dialogues(TEXT) * 4
