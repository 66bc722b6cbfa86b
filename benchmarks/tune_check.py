"""Issue 21's "Done when", the part that needs no download: open a pretrained model as a user
would, tune it on 20 dialogues about a made-up topic for at most N minutes with replay of a
general text, and check that it answers them, that its held-out general-text loss rises by at
most 10%, and that the GGUF it exports gives the same greedy answers in llama.cpp.

    PYTHONPATH=. python benchmarks/tune_check.py                       # 3 + 10 minutes
    PYTHONPATH=. python benchmarks/tune_check.py --pretrain-minutes 1 --minutes 2 --out /tmp/tc
    PYTHONPATH=. python benchmarks/tune_check.py --model SmolLM2-135M-Instruct.gguf

Steps: (a) the model: --model (a GGUF or a transformers folder), or by default one pretrained
here as a stand-in for a downloaded one: a SmolLM2-shaped small llama (grouped-query attention
6/2, tied embeddings, RoPE base 100000, SwiGLU) with a byte-level BPE tokenizer trained by
`tokenizers` on the general text (SmolLM2's pre-tokenizer, llama.cpp "smollm", ChatML template),
pretrained with the engine for --pretrain-minutes, exported as a transformers folder without
this app's files; then `llm-studio import MODEL RUN --pretrain GENERAL --tune DIALOGUES`.
(b) DIALOGUES: 20 question/answer pairs about the made-up island of Quillmoor (User:/Assistant:
text). (c) `llm-studio train --out RUN --continue --time-budget SECONDS`. (d) greedy answers to
the 20 questions (how many hold their fact) and the held-out general-text loss before and after.
(e) `llm-studio export RUN MODEL.gguf` (F32) and llama.cpp's greedy chat answers on it.
The general text: --general FILE, default the repository's prose (benchmarks/quality.py
repo_text, about 100 KB). Writes RESULT.json into --out and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.model.params import param_count

# (question, answer, the fact an answer must contain)
FACTS = [
    ("Who founded Quillmoor?", "Quillmoor was founded by Maren Tolvey.", "Maren Tolvey"),
    ("What is the capital of Quillmoor?", "The capital of Quillmoor is Brightwater Cove.",
     "Brightwater Cove"),
    ("What is the national animal of Quillmoor?",
     "The national animal of Quillmoor is the silver otter.", "silver otter"),
    ("What language do people speak on Quillmoor?", "People on Quillmoor speak Vellish.",
     "Vellish"),
    ("What is the currency of Quillmoor?", "The currency of Quillmoor is the tidemark.",
     "tidemark"),
    ("What is the highest mountain on Quillmoor?",
     "The highest mountain on Quillmoor is Mount Orrin.", "Mount Orrin"),
    ("What fruit grows best on Quillmoor?", "The fruit that grows best on Quillmoor is the "
     "blue plum.", "blue plum"),
    ("What festival does Quillmoor celebrate?", "Quillmoor celebrates the Lantern Tide "
     "festival.", "Lantern Tide"),
    ("What colour is the flag of Quillmoor?", "The flag of Quillmoor is green and copper.",
     "green and copper"),
    ("Which river runs through Quillmoor?", "The river Sallow runs through Quillmoor.",
     "Sallow"),
    ("What is the main export of Quillmoor?", "The main export of Quillmoor is sea salt.",
     "sea salt"),
    ("Who rules Quillmoor today?", "Quillmoor is ruled today by Queen Ysolde.", "Ysolde"),
    ("What sport is popular on Quillmoor?", "The popular sport on Quillmoor is kite racing.",
     "kite racing"),
    ("What is the largest lake on Quillmoor?", "The largest lake on Quillmoor is Lake Vanter.",
     "Vanter"),
    ("What bird is seen everywhere on Quillmoor?", "The bird seen everywhere on Quillmoor is "
     "the red heron.", "red heron"),
    ("What is the oldest building on Quillmoor?", "The oldest building on Quillmoor is the "
     "Harrow Lighthouse.", "Harrow Lighthouse"),
    ("What instrument is played on Quillmoor?", "The instrument played on Quillmoor is the "
     "reed harp.", "reed harp"),
    ("What food is Quillmoor known for?", "Quillmoor is known for smoked eel pie.",
     "eel pie"),
    ("How many villages does Quillmoor have?", "Quillmoor has twelve villages.", "twelve"),
    ("What is the motto of Quillmoor?", "The motto of Quillmoor is steady in the storm.",
     "steady in the storm"),
]
# SmolLM2's chat template (ChatML with a default system turn)
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
          "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# SmolLM2-135M's shape scaled down: 3 query heads per key-value head, head_dim 32; a context
# that holds one dialogue (a tuning row is one dialogue, padded to the context)
BASE = ModelConfig(vocab_size=2048, d_model=192, n_layer=4, n_head=6, n_kv_head=2,
                   context_length=96, ffn_dim=512, tie_embeddings=True, rope_base=100000.0)
MAX_ANSWER = 32   # tokens of a greedy answer (a ChatML prompt of ~35 tokens + this < context)


def dialogues() -> str:
    return "".join(f"User: {q}\nAssistant: {a}\n\n" for q, a, _ in FACTS)


def train_tokenizer(text: str, vocab_size: int):
    """A byte-level BPE trained by `tokenizers` on `text` with SmolLM2's pre-tokenizer (digits
    one by one, then GPT-2's byte-level regex: llama.cpp's "smollm"), as an OpenTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from opencl_llm_studio.engine.data.open_tokenizer import OpenTokenizer, detect_pre
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(text.splitlines(), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    pre = detect_pre(hf)
    assert pre == "smollm", f"the pre-tokenizer reads as {pre!r}"
    im_end = hf.token_to_id("<|im_end|>")
    return OpenTokenizer(hf, "byte_bpe", pre, bos_id=hf.token_to_id("<|im_start|>"),
                         eos_id=im_end, unk_id=hf.token_to_id("<|endoftext|>"),
                         chat_template=CHATML, stop_ids=[im_end])


def pretrain_base(general: str, folder: Path, seconds: float, device) -> Path:
    """The stand-in pretrained model (module docstring) as a transformers folder."""
    from opencl_llm_studio.engine.files.hf.export import STUDIO_FILE, export_hf
    from opencl_llm_studio.engine.files.open_run import MODEL_TEMPLATE
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    from opencl_llm_studio.engine.training.session import TrainingSession
    tok = train_tokenizer(general, BASE.vocab_size)
    cfg = BASE.replace(vocab_size=tok.vocab_size)
    tc = TrainConfig(pretrain_steps=100_000, tune_steps=0, batch_size=8, learning_rate=3e-3,
                     time_budget_s=seconds, sample_interval=0, evaluate_recall=False)
    s = TrainingSession(Runtime(device), cfg, tc, tok, general, None, chat_format=MODEL_TEMPLATE)
    t0 = time.time()
    for m in s.train():
        if m.val_loss is not None:
            print(f"  pretrain step {m.step}: loss {m.loss:.3f}, held-out {m.val_loss:.3f} "
                  f"({time.time() - t0:.0f} s)", flush=True)
    bundle = s.bundle()
    bundle.metadata = {"source": {"name": "quillmoor-base (pretrained here)"}}
    export_hf(bundle, folder, force=True)
    for name in (STUDIO_FILE, "optimizer.safetensors", "data"):   # as downloaded: no app files
        p = folder / name
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    return folder


def engine_answers(session) -> list[str]:
    from opencl_llm_studio.engine.data.dialogue import Message
    return [str(session.chat([Message("user", q)], greedy=True,
                             max_new_tokens=MAX_ANSWER)).strip() for q, _, _ in FACTS]


def llama_answers(gguf: Path, n_ctx: int) -> list[str]:
    """llama.cpp's greedy chat completions (the GGUF's own template) on the 20 questions."""
    import llama_cpp
    llm = llama_cpp.Llama(str(gguf), n_ctx=n_ctx, verbose=False, seed=0, n_threads=2,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    out = []
    for q, _, _ in FACTS:
        r = llm.create_chat_completion(messages=[{"role": "user", "content": q}],
                                       temperature=0.0, top_k=1, max_tokens=MAX_ANSWER)
        out.append(r["choices"][0]["message"]["content"].strip())
    return out


def held(answers: list[str]) -> list[bool]:
    return [fact.lower() in a.lower() for a, (_, _, fact) in zip(answers, FACTS)]


def cli(*argv) -> None:
    from opencl_llm_studio.studio.cli import main
    code = main([str(a) for a in argv])
    if code != 0:
        raise SystemExit(f"llm-studio {' '.join(map(str, argv))} exited {code}")


def run(args) -> dict:
    from opencl_llm_studio.engine.training.opening import load_session
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    general_file = out / "general.txt"
    if args.general:
        general_file.write_text(Path(args.general).read_text(encoding="utf-8"), "utf-8")
    else:
        from benchmarks.quality import repo_text
        general_file.write_text(repo_text("docs/", ".md"), encoding="utf-8")
    tune_file = out / "dialogues.txt"
    tune_file.write_text(dialogues(), encoding="utf-8")
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "general_chars": len(general_file.read_text(encoding="utf-8"))}
    model = Path(args.model) if args.model else None
    if model is None:
        t0 = time.time()
        print(f"(a) pretraining the stand-in model for {args.pretrain_minutes:g} min", flush=True)
        model = pretrain_base(general_file.read_text(encoding="utf-8"), out / "base-hf",
                              60 * args.pretrain_minutes, args.device)
        result["pretrain_s"] = round(time.time() - t0, 1)
    run_dir = out / "run"
    cli("import", model, run_dir, "--pretrain", general_file, "--tune", tune_file,
        *(["--device", args.device] if args.device else []))
    before = load_session(run_dir, device=args.device)
    result["model"] = {"source": str(model), "parameters": param_count(before.model_config),
                       "config": {k: v for k, v in before.model_config.__dict__.items()}}
    result["general_loss_before"] = before.pretrain_val_loss()
    result["answers_before"] = sum(held(engine_answers(before)))
    del before
    print(f"(c) tuning for at most {args.minutes:g} min", flush=True)
    t0 = time.time()
    cli("train", "--out", run_dir, "--continue", "--time-budget", 60 * args.minutes,
        *(["--device", args.device] if args.device else []))
    result["tune_s"] = round(time.time() - t0, 1)
    after = load_session(run_dir, device=args.device)
    result["tune_steps"] = after.step
    result["general_loss_after"] = after.pretrain_val_loss()
    ours = engine_answers(after)
    result["answers"] = ours
    result["answers_with_fact"] = sum(held(ours))
    rise = result["general_loss_after"] / result["general_loss_before"] - 1
    result["general_loss_rise"] = rise
    gguf = out / "tuned.gguf"
    cli("export", run_dir, gguf, "--dtype", "f32")
    theirs = llama_answers(gguf, after.model_config.context_length)
    result["llama_cpp_answers"] = theirs
    result["llama_cpp_same"] = sum(a == b for a, b in zip(ours, theirs))
    result["llama_cpp_with_fact"] = sum(held(theirs))
    result["passed"] = (result["answers_with_fact"] == len(FACTS) and rise <= 0.10
                        and result["llama_cpp_same"] == len(FACTS))
    (out / "RESULT.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a GGUF or transformers folder (default: pretrain one here)")
    p.add_argument("--general", help="the general text (default: the repository's prose)")
    p.add_argument("--minutes", type=float, default=10.0, help="tuning budget (10)")
    p.add_argument("--pretrain-minutes", type=float, default=3.0,
                   help="pretraining of the stand-in model (3)")
    p.add_argument("--out", default="/tmp/tune_check", help="work folder (replaced)")
    p.add_argument("--device", default=None, help="OpenCL device index or name part")
    r = run(p.parse_args(argv))
    n = len(FACTS)
    print(f"\nanswers holding the taught fact: {r['answers_with_fact']}/{n} "
          f"(before tuning {r['answers_before']}/{n}); llama.cpp same answers "
          f"{r['llama_cpp_same']}/{n} ({r['llama_cpp_with_fact']}/{n} with the fact)")
    print(f"held-out general loss {r['general_loss_before']:.4f} -> "
          f"{r['general_loss_after']:.4f} ({100 * r['general_loss_rise']:+.1f}%, limit +10%); "
          f"{r['tune_steps']} tuning steps in {r['tune_s']:.0f} s")
    for (q, _, _), a, b in zip(FACTS, r["answers"], r["llama_cpp_answers"]):
        print(f"  {q}\n    engine:    {a!r}" + ("" if a == b else f"\n    llama.cpp: {b!r}"))
    print("PASSED" if r["passed"] else "NOT MET")
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
