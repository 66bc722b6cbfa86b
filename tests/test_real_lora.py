"""The real SmolLM2-135M-Instruct tuned with LoRA on its still-quantized Q4_1 base (issue 34):
`train --continue --lora-rank 8` on the 20 dialogues of invented facts at the run's defaults
learns them and keeps general facts; the studio's greedy answers equal llama.cpp's with the
exported adapter on the base (on the F32 copy: the same weights, so the same text up to a near
tie; on the Q4_1 file itself, where llama.cpp rounds the activations to 8 bits, the same
facts), llama.cpp's on the merged GGUF, and transformers + peft on the adapter folder over the
HF export of the base. (tests/test_lora_run.py proves the same files on a random model.)"""

import re

import pytest

from opencl_llm_studio.engine.config import SamplingParams
from opencl_llm_studio.engine.data.dialogue import Message, encode_prompt
from opencl_llm_studio.engine.training.opening import load_session
from opencl_llm_studio.studio.cli import main
from tests.helpers import first_near_tie, module_scratch
from tests.real_model import (FACTS, GENERAL, QUESTION, TAUGHT, answers, known,
                              llama_cpp_module)

# questions whose answers the four runtimes must agree on: two taught facts and a general one
CHECKED = [TAUGHT, "What is the capital of Veloria?", QUESTION]


@pytest.fixture(scope="module")
def lora_tuned(smollm2, tmp_path_factory):
    """(LoRA run, HF export of the untouched base, the facts known before tuning): SmolLM2
    imported with FACTS as its dialogues, exported to HF before tuning (the base PEFT loads
    over), then tuned 10 steps with LoRA rank 8 at the run's defaults."""
    with module_scratch(tmp_path_factory, "lora") as root:
        run, hf_base = root / "run", root / "hf-base"
        assert main(["import", str(smollm2), str(run), "--tune", str(FACTS)]) == 0
        assert main(["export", str(run), str(hf_base), "--format", "hf"]) == 0
        before = known(load_session(run))
        assert main(["train", "--out", str(run), "--continue", "--tune-steps", "10",
                     "--lora-rank", "8", "--quiet"]) == 0
        yield run, hf_base, before


@pytest.fixture(scope="module")
def studio(lora_tuned):
    """The tuned LoRA run reopened, and its greedy answers to CHECKED with their near ties."""
    s = load_session(lora_tuned[0])
    out = []
    for q in CHECKED:
        msgs = [Message("user", q)]
        out.append((s.chat(msgs, greedy=True, max_new_tokens=32).text,
                    first_near_tie(s, msgs, 32)))
    return s, out


def _same(theirs: str, ours: str, tie: str | None):
    """The same text, or up to the first near tie (either runtime may take either token)."""
    if tie is None:
        assert theirs == ours, (theirs, ours)
    else:
        assert theirs.startswith(tie) and ours.startswith(tie), (theirs, ours, tie)


def _llama_answers(path, lora=None) -> list[str]:
    from tests.gguf_helpers import load
    llm = load(llama_cpp_module(), path, n_ctx=256, repack=False, lora=lora)
    try:
        return [llm.create_chat_completion(messages=[{"role": "user", "content": q}],
                                           temperature=0.0, top_k=1, max_tokens=32)
                ["choices"][0]["message"]["content"] for q in CHECKED]
    finally:
        llm.close()


def test_lora_learns_the_invented_facts_and_keeps_general_ones(lora_tuned):
    """The run reopens as a LoRA run over the Q4_1 base; it answers facts it did not know
    (full fine-tuning at the same defaults: 9 of 20, tests/test_real_model.py) and still
    answers the general questions."""
    run, _, before = lora_tuned
    s = load_session(run)
    assert s.lora is not None and s.lora.rank == 8 and s.step == 10
    assert s.base_ref["name"].endswith("Q4_1.gguf")
    after = known(s)
    assert len(before) <= 2 and len(after) >= 7, (before, after)
    for (q, word), a in zip(GENERAL, answers(s, [q for q, _ in GENERAL])):
        assert word in a, (q, a)


def test_the_adapter_in_llama_cpp_answers_as_the_studio(lora_tuned, studio, smollm2, f32_copy,
                                                        tmp_path):
    """export --adapter: llama.cpp with the adapter on the F32 copy of the base gives the
    studio's text; on the Q4_1 file itself, the same facts."""
    run = lora_tuned[0]
    adapter = tmp_path / "adapter.gguf"
    assert main(["export", str(run), str(adapter), "--adapter"]) == 0
    _, ours = studio
    for theirs, (text, tie) in zip(_llama_answers(f32_copy, adapter), ours):
        _same(theirs, text, tie)
    keys = ("violet", "veloria", "paris")
    for theirs, (text, _), key in zip(_llama_answers(smollm2, adapter), ours, keys):
        assert key in theirs.lower() and key in text.lower(), (theirs, text)


def test_the_merged_gguf_in_llama_cpp_answers_as_the_studio(lora_tuned, studio, tmp_path):
    """The merged F32 export (base + s B A) gives the studio's text in llama.cpp."""
    path = tmp_path / "merged.gguf"
    assert main(["export", str(lora_tuned[0]), str(path), "--dtype", "f32"]) == 0
    for theirs, (text, tie) in zip(_llama_answers(path), studio[1]):
        _same(theirs, text, tie)


def test_peft_over_the_hf_base_answers_as_the_studio(lora_tuned, studio, tmp_path):
    """export --format peft: transformers' HF base + PeftModel.from_pretrained generates the
    studio's tokens; the folder names the base by its model, not a path on this machine."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    run, hf_base, _ = lora_tuned
    folder = tmp_path / "peft"
    assert main(["export", str(run), str(folder), "--format", "peft"]) == 0
    config = (folder / "adapter_config.json").read_text()
    assert re.search(r'"base_model_name_or_path": "[^"/]*smollm2', config, re.I), config
    s, ours = studio
    tok = transformers.AutoTokenizer.from_pretrained(str(hf_base))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_base),
                                                              dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(model, str(folder)).eval()
    stops = s.tokenizer.stop_ids
    for q, (text, tie) in zip(CHECKED, ours):
        ids = tok.apply_chat_template([{"role": "user", "content": q}],
                                      add_generation_prompt=True, tokenize=True,
                                      return_dict=True)["input_ids"]
        assert ids == encode_prompt(s.tokenizer, [Message("user", q)], s.chat_format)
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=32,
                                 do_sample=False, eos_token_id=stops,
                                 pad_token_id=0)[0, len(ids):].tolist()
        theirs = s.tokenizer.decode([t for t in out if t not in stops])
        _same(theirs, text, tie)
        assert s.tokenizer.decode(s.generate_ids(ids, 32, SamplingParams(greedy=True))) == text
