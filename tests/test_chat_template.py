"""Issue 21: chats in the model's own template. Rendering and ids equal transformers'
apply_chat_template for SmolLM2 (ChatML), Llama 3.2 and TinyLlama (Zephyr); the assistant mask
equals transformers' {% generation %} mask; the user's dialogue file renders the same; the
sandbox stops a template that reaches for Python internals."""

import pytest

pytest.importorskip("transformers")
pytest.importorskip("jinja2")

from opencl_llm_studio.engine.data.chat_template import ChatFormat, render  # noqa: E402
from opencl_llm_studio.engine.data.dialogue import Message, parse_dialogues  # noqa: E402
from opencl_llm_studio.engine.errors import DataError  # noqa: E402
from opencl_llm_studio.engine.data.open_folder_tokenizer import read_folder  # noqa: E402
from tests.open_models import FAMILIES, TEMPLATES  # noqa: E402

CHATS = [
    [Message("user", "What is 2 + 2?")],
    [Message("user", "Hi"), Message("assistant", "Hello! How can I help?")],
    [Message("system", "You answer briefly."), Message("user", "Capital of France?"),
     Message("assistant", "Paris."), Message("user", "And of Japan? 日本"),
     Message("assistant", "Tokyo 🗼\n  (東京)")],
]
DIALOGUE_FILE = ("User: Who built the Zorblat engine?\nAssistant: Mira Quell, in 2031.\n\n"
                 "User: What does it run on?\nAssistant: Compressed starlight.\n"
                 "User: Really?\nAssistant: Yes.\n")
DIALOGUE_JSONL = ('{"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", '
                  '"content": "Zorblat?"}, {"role": "assistant", "content": "An engine."}]}\n'
                  '{"messages": [{"role": "user", "content": "Who?"}, {"role": "assistant", '
                  '"content": "Mira."}]}\n')


def _dicts(chat):
    return [{"role": m.role, "content": m.content} for m in chat]


@pytest.fixture(scope="module")
def pairs(open_folders):
    from transformers import AutoTokenizer
    return {f: (ChatFormat(read_folder(p)), AutoTokenizer.from_pretrained(str(p)))
            for f, p in open_folders.items()}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("gen", [False, True])
def test_render_and_ids_equal_transformers(family, gen, pairs):
    fmt, ref = pairs[family]
    chats = CHATS + parse_dialogues(DIALOGUE_FILE) + parse_dialogues(DIALOGUE_JSONL)
    for chat in chats:
        want = ref.apply_chat_template(_dicts(chat), tokenize=False, add_generation_prompt=gen)
        assert fmt.render(chat, add_generation_prompt=gen) == want
        ids = ref.apply_chat_template(_dicts(chat), tokenize=True, add_generation_prompt=gen,
                                      return_dict=True)["input_ids"]
        assert fmt.tokenizer.encode(want) == list(ids)
        if not gen and chat[-1].role == "assistant":
            assert fmt.encode_dialogue(chat)[0] == list(ids)
    prompt = ref.apply_chat_template(_dicts(CHATS[2][:-1]), tokenize=True,
                                     add_generation_prompt=True, return_dict=True)["input_ids"]
    assert fmt.prompt_ids(CHATS[2]) == list(prompt)   # the trailing answer is left out


def _with_generation_tags(template: str) -> str:
    """The ChatML template with the assistant's turn (content, <|im_end|> and newline) inside
    {% generation %}, which transformers' return_assistant_tokens_mask reads."""
    body = ("{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
            "{% generation %}{{ message['content'] + '<|im_end|>' + '\n' }}{% endgeneration %}"
            "{% else %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
            "'<|im_end|>' + '\n'}}{% endif %}")
    old = "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    assert old in template
    return template.replace(old, body)


def test_assistant_mask_equals_transformers_generation_mask(pairs):
    fmt, ref = pairs["smollm2"]
    template = _with_generation_tags((TEMPLATES / "smollm2.jinja").read_text(encoding="utf-8"))
    tagged = ChatFormat(fmt.tokenizer, template)
    for chat in CHATS[1:] + parse_dialogues(DIALOGUE_FILE):
        out = ref.apply_chat_template(_dicts(chat), chat_template=template, tokenize=True,
                                      return_dict=True, return_assistant_tokens_mask=True)
        ids, mask = tagged.encode_dialogue(chat)
        assert ids == list(out["input_ids"])
        assert mask == list(out["assistant_masks"])
        # the untagged template gives the same mask: it comes from rendering prefixes
        assert fmt.encode_dialogue(chat) == (ids, mask)


@pytest.mark.parametrize("family", FAMILIES)
def test_masked_tokens_are_the_answers_and_their_end_of_turn(family, pairs):
    fmt, _ = pairs[family]
    chat = CHATS[2]
    ids, mask = fmt.encode_dialogue(chat)
    assert len(ids) == len(mask) and 0 < sum(mask) < len(ids)
    text = fmt.tokenizer.decode([i for i, m in zip(ids, mask) if m])
    for m in chat:
        assert (m.content.strip() in text) == (m.role == "assistant")
    runs, run = [], []
    for i, m in zip(ids, mask):   # the masked runs of tokens, one per answer
        if m:
            run.append(i)
        elif run:
            runs, run = runs + [run], []
    runs += [run] if run else []
    # each answer's run holds an end-of-turn token: the model learns to stop
    assert len(runs) == 2 and all(set(fmt.stop_ids) & set(r) for r in runs)


def test_sandbox_refuses_python_internals_and_raise_exception_is_a_data_error():
    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(DataError, match="refused"):
        render(evil, [Message("user", "hi")])
    strict = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
    with pytest.raises(DataError, match="user first"):
        render(strict, [Message("assistant", "hi")])
    with pytest.raises(DataError, match="not valid Jinja"):
        render("{% for %}", [])
    mutate = "{% set x = messages.append({'role': 'user'}) %}"
    with pytest.raises(DataError):
        render(mutate, [Message("user", "hi")])


def test_tojson_keeps_unicode_and_a_model_without_template_is_refused(pairs):
    assert render("{{ messages[0]['content'] | tojson }}", [Message("user", "日本 é")]) == \
        '"日本 é"'
    tok = pairs["smollm2"][0].tokenizer
    with pytest.raises(DataError, match="no chat template"):
        ChatFormat(tok, "")
