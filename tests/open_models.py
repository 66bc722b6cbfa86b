"""Small random models of the open families the studio imports, built locally (no downloads):
the real configs' layouts scaled down, each with its family's tokenizer kind (a byte-level BPE
trained here with the family's pre-tokenizer, or a SentencePiece BPE in the Llama-2 layout),
special tokens and chat template (tests/fixtures/templates/*.jinja).

    smollm2    SmolLM2-135M-Instruct: llama, 6 heads / 2 kv heads, tied, RoPE 100000, byte-level
               BPE (digits split one by one), ChatML
    llama32    Llama-3.2-1B-Instruct: llama, 8 / 2, tied, RoPE 500000 with llama3 scaling,
               byte-level BPE (Llama 3 regex), <|begin_of_text|> ... <|eot_id|>
    tinyllama  TinyLlama-1.1B-Chat: llama, 8 / 1, untied, SentencePiece (Llama-2 layout,
               add_dummy_prefix), Zephyr template
`build(family, folder)` writes a transformers folder (config.json, model.safetensors, tokenizer
files, generation_config.json); STRINGS are the texts ids are compared on. The session-wide
fixtures open_folders and open_ggufs built on them are in tests/conftest.py.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "tests" / "fixtures" / "templates"
STRINGS = [
    "Hello world", "Hello World! I'm fine, aren't you? They'll say we'd've", "",
    " ", "  leading spaces", "trailing spaces   ", "two\n\nnewlines\n", "\r\nwindows\r\n",
    "tab\tand\t\ttabs", "digits 1234567890 and 3.14159, 1,000,000", "你好，世界！日本語のテキスト",
    "emoji 🦙🚀👍🏽 done", "accents: café naïve ÅÉ ﬁ", "nbsp\u00a0here",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(12))\n",
    "<|im_start|>user\nhi<|im_end|>", "<s>[INST] tags </s>", "<|eot_id|> and <|begin_of_text|>",
    "User: What is the highest mountain?\nAssistant:\nMount Everest.", "a  b   c    d",
    "'s 'S 'll ' ''quoted'' \"double\"", "line\n  indented\n\ttabbed\n   \n",
]

FAMILIES = ("smollm2", "llama32", "tinyllama")
# qwen2: Qwen2.5's tokenizer (byte-level BPE, pre "qwen2", NFC, ChatML) on a llama model: the
# engine refuses qwen2 models (q/k/v biases) but reads and writes their tokenizer
TOKENIZER_FAMILIES = FAMILIES + ("qwen2",)

_LLAMA3_SPECIAL = (["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                    "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"])
_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_REGEX = _LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")


def corpus() -> list[str]:
    """Training lines: the bundled texts plus code, digits, CJK and emoji, so merges of each
    kind exist."""
    from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text
    lines = read_text(bundled_corpus("pretrain")).splitlines()[:3000]
    lines += read_text(bundled_corpus("tune")).splitlines()
    extra = ["def f(x):\n    return x ** 2", "for i in range(10):\n\tprint(i)", "你好世界 日本語",
             "🦙🚀 emoji 👍🏽", "3.14159 1234567890 2024-12-01", "café naïve ÅÉ",
             "I'm you're they'll we'd", "  indented  text  "]
    return lines + extra * 20


def _byte_bpe(pre_tokenizer, special: list[str], vocab_size: int, special_last: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=[] if special_last else special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    if special_last:   # Llama 3 keeps its special tokens after the learned vocabulary
        tok.add_special_tokens(special)
    return tok


def _sentencepiece_json(folder: Path):
    """A Llama-2-layout SentencePiece BPE (tokenizer.model) and the tokenizer.json TinyLlama
    ships for it (legacy LlamaTokenizerFast: Prepend + Replace normalizer, byte fallback)."""
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers
    from opencl_llm_studio.engine.files.hf.tokenizer_json import merges_from_scores
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=writer, model_type="bpe",
        vocab_size=700, byte_fallback=True, character_coverage=1.0, split_digits=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, allow_whitespace_only_pieces=True, unk_id=0, bos_id=1,
        eos_id=2, pad_id=-1, hard_vocab_limit=False, num_threads=1, minloglevel=2)
    (folder / "tokenizer.model").write_bytes(writer.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=writer.getvalue())
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    scores = [sp.get_score(i) for i in range(len(pieces))]
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1
             for i in range(len(pieces))]
    tok = Tokenizer(models.BPE(vocab={p: i for i, p in enumerate(pieces)},
                               merges=merges_from_scores(pieces, scores, types),
                               unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(p, special=True, normalized=False)
                            for p in ("<unk>", "<s>", "</s>")])
    return tok, sp


def build_tokenizer(family: str, folder: Path):
    """Write the family's tokenizer files into `folder`; returns (PreTrainedTokenizerFast,
    config overrides: bos/eos ids)."""
    from tokenizers import Regex, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    name = "smollm2" if family == "qwen2" else family   # ChatML
    template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    if family == "smollm2":
        pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                use_regex=True)])
        tok = _byte_bpe(pre, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 700, False)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                       eos_token="<|im_end|>", unk_token="<|endoftext|>",
                                       pad_token="<|im_end|>")
        gen = {"bos_token_id": 1, "eos_token_id": 2}
    elif family == "qwen2":
        pre = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok = _byte_bpe(pre, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 700, True)
        tok.normalizer = normalizers.NFC()
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                       pad_token="<|endoftext|>")
        gen = {"bos_token_id": tok.token_to_id("<|endoftext|>"),
               "eos_token_id": [tok.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>")]}
    elif family == "llama32":
        pre = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                     use_regex=False)])
        tok = _byte_bpe(pre, _LLAMA3_SPECIAL, 800, True)
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[("<|begin_of_text|>", bos)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                       eos_token="<|eot_id|>")
        gen = {"bos_token_id": bos, "eos_token_id": [tok.token_to_id(t) for t in (
            "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]}
    else:
        tok, _ = _sentencepiece_json(folder)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                       unk_token="<unk>", add_bos_token=True)
        gen = {"bos_token_id": 1, "eos_token_id": 2}
    fast.chat_template = template
    fast.save_pretrained(str(folder))
    (folder / "generation_config.json").write_text(json.dumps(gen))
    return fast, gen


CONFIGS = {   # the real models' settings, sizes scaled down
    "smollm2": dict(hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=6, num_key_value_heads=2, rope_theta=100000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=256),
    "llama32": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=8, num_key_value_heads=2, rope_theta=500000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=16384,
                    rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 8192}),
    "qwen2": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2, rope_theta=1000000.0,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=256),
    "tinyllama": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=1, rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=256),
}


def build(family: str, folder: Path, seed: int = 0, **overrides) -> Path:
    """A transformers folder of a random model of `family` (FAMILIES) in `folder`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fast, gen = build_tokenizer(family, folder)
    eos = gen["eos_token_id"]
    cfg = LlamaConfig(vocab_size=len(fast), bos_token_id=gen["bos_token_id"],
                      eos_token_id=eos, **{**CONFIGS[family], **overrides})
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():   # norms away from 1, so a swapped norm shows in the logits
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(str(folder), safe_serialization=True)
    (folder / "generation_config.json").write_text(json.dumps(gen))
    return folder


def numpy_logits(bundle, ids) -> np.ndarray:
    """(T, vocab) float64 logits of the bundle's weights in the engine's layout: RoPE on
    adjacent pairs (2i, 2i+1) with llama3 divisors, query head h reading key/value head
    h // (n_head / kv_heads) (Ainslie et al. 2023; llama.cpp and transformers group so)."""
    from opencl_llm_studio.engine.model.rope_scaling import llama3_factors
    from tests import reference as R
    c, w = bundle.config, {k: v.astype(np.float64) for k, v in bundle.weights.items()}
    T, hd, group = len(ids), c.head_dim, c.n_head // c.kv_heads
    factors = llama3_factors(c) if c.rope_scaling else np.ones(hd // 2)
    ang = np.arange(T)[:, None] * (c.rope_base ** (-np.arange(0, hd, 2) / hd) / factors)

    def rope(x, heads):   # (T, heads * hd) -> rotated
        xr = x.reshape(T, heads, hd // 2, 2)
        cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
        a, b = xr[..., 0], xr[..., 1]
        return np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(T, heads * hd)

    def heads(x, n):      # (T, n * hd) -> (T, n_head * hd), each kv head repeated `group` times
        return np.repeat(x.reshape(T, n, hd), group, axis=1).reshape(T, c.n_head * hd)

    x = w["token_embd.weight"][ids]
    for i in range(c.n_layer):
        p = f"blk.{i}."
        h = R.rmsnorm_forward(x, w[p + "attn_norm.weight"], c.rms_eps)[0]
        q = rope(h @ w[p + "attn_q.weight"].T, c.n_head)
        k = heads(rope(h @ w[p + "attn_k.weight"].T, c.kv_heads), c.kv_heads)
        v = heads(h @ w[p + "attn_v.weight"].T, c.kv_heads)
        y = R.attention_forward(q[None], k[None], v[None], c.n_head)[0][0]
        x = x + y @ w[p + "attn_output.weight"].T
        h = R.rmsnorm_forward(x, w[p + "ffn_norm.weight"], c.rms_eps)[0]
        g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + R.swiglu_forward(g, u) @ w[p + "ffn_down.weight"].T
    x = R.rmsnorm_forward(x, w["output_norm.weight"], c.rms_eps)[0]
    return x @ w["token_embd.weight" if c.tie_embeddings else "output.weight"].T


def nmse(got, want) -> float:
    """Normalized mean squared error sum((got - want)^2) / sum(want^2)."""
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


def llama_vocab(path):
    """llama.cpp (llama-cpp-python) with only the vocabulary of the GGUF at `path` loaded."""
    import llama_cpp
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def llama_model(path, n_ctx: int = 128):
    """llama.cpp with the whole model, float32 KV cache (so its logits are float32 exact), all
    positions' logits kept, CPU weight repacking off (its Q8_0 path segfaults on this CPU:
    tests/test_gguf_export.load)."""
    import llama_cpp
    from tests.gguf_helpers import load
    return load(llama_cpp, path, n_ctx=n_ctx, repack=False)
