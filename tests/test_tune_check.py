"""benchmarks/tune_check.py's parts that need no training: its 20 dialogues parse as 20, each
answer holds its fact (and `held` finds it), and its stand-in tokenizer is a byte-level BPE
llama.cpp reads as "smollm" with ChatML's special tokens whole."""

import pytest

pytest.importorskip("tokenizers")

from benchmarks import tune_check as tc  # noqa: E402
from opencl_llm_studio.engine.data.dialogue import parse_dialogues  # noqa: E402


def test_the_dialogues_are_twenty_and_each_answer_holds_its_fact():
    dialogues = parse_dialogues(tc.dialogues())
    assert len(dialogues) == len(tc.FACTS) == 20
    answers = [d[-1].content for d in dialogues]
    assert tc.held(answers) == [True] * 20
    assert tc.held(answers[1:] + answers[:1]) == [False] * 20   # another question's answer
    assert len({fact for _, _, fact in tc.FACTS}) == 20


def test_the_stand_in_tokenizer_is_smollm2s_kind():
    from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text
    tok = tc.train_tokenizer(read_text(bundled_corpus("pretrain")) * 3, 600)
    assert (tok.kind, tok.pre) == ("byte_bpe", "smollm")
    ids = tok.encode("<|im_start|>user\nHello 123<|im_end|>")
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id == tok.stop_ids[0]
    assert tok.decode(tok.encode("Quillmoor 2026 \u00e9t\u00e9")) == "Quillmoor 2026 \u00e9t\u00e9"
