"""A model card: what a person wants to know about a model before opening it as a run (name,
parameters, layers, heads / key-value heads, context, vocabulary, tokenizer, chat template, RoPE,
file type), as a dict for the studio and as text for the CLI; and `tokenizer_name`, the one
place a tokenizer kind is put in words (the studio's fields, the Runs list, `llm-studio runs`
and `import` read it, so a byte-level BPE is never called SentencePiece)."""

from __future__ import annotations
from opencl_llm_studio.engine.model.params import param_count

# engine.data.tokenizer kinds (the app's SentencePiece models, engine.config.TOKENIZER_KINDS, plus
# what an older or outside SentencePiece model reports) and engine.data.open_tokenizer.KINDS
TOKENIZER_NAMES = {
    "bpe": "SentencePiece BPE", "char": "SentencePiece characters",
    "unigram": "SentencePiece unigram", "word": "SentencePiece words",
    "byte_bpe": "byte-level BPE", "sentencepiece": "SentencePiece BPE (Llama-2 layout)",
}
TEMPLATE_LINES = 3   # chat template lines a card shows

# torch dtype names in a transformers config.json -> the GGUF type names people know
_HF_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def tokenizer_name(kind: str, pre: str = "") -> str:
    """A tokenizer kind in words: engine.data.tokenizer's "bpe"/"char" (the app's SentencePiece
    models) or engine.data.open_tokenizer's "byte_bpe"/"sentencepiece"; pre: a byte-level BPE's
    llama.cpp pre-tokenizer name (tokenizer.ggml.pre), shown after it. An unknown kind is
    returned as it is."""
    name = TOKENIZER_NAMES.get(kind, kind or "unknown")
    return f"{name}, pre-tokenizer {pre}" if kind == "byte_bpe" and pre else name


def file_type_name(source: dict) -> str:
    """The weights' stored type ("F32", "F16", "BF16", "Q8_0", "Q4_K_M", ...) from a bundle's
    metadata["source"] (engine.files.open_gguf: GGUF general.file_type's name; engine.files.hf.load: the
    folder's torch dtype); "" when unknown."""
    ft = source.get("file_type", "")
    if isinstance(ft, int):   # an import written before the name was kept
        import gguf
        try:
            ft = gguf.LlamaFileType(ft).name
        except ValueError:
            return ""
    ft = str(ft).removeprefix("MOSTLY_").removeprefix("ALL_")
    return _HF_DTYPES.get(str(source.get("dtype", "")), str(source.get("dtype", ""))) \
        if not ft else ft


def model_card(bundle) -> dict:
    """Facts of an engine.files.gguf_export.ModelBundle: name, parameters (elements), layers, d_model,
    heads, kv_heads, head_dim, ffn_dim, context_length (tokens), vocab_size, tokenizer (in
    words, tokenizer_name), tokenizer_kind and tokenizer_pre (as stored), tied_embeddings,
    rope_base, rope_scaling ("" or "llama3 xFACTOR"), chat_template (bool), template_head (its
    first TEMPLATE_LINES lines, "" for none), stop_tokens (their texts), file_type ("" when
    unknown) and path (a GGUF's absolute path, "" otherwise)."""
    from opencl_llm_studio.engine.data.open_tokenizer import OpenTokenizer
    c, tok = bundle.config, bundle.tokenizer
    source = bundle.metadata.get("source") or {}
    is_open = isinstance(tok, OpenTokenizer)   # else the app's SentencePiece (User:/Assistant:)
    pre = "" if tok.pre == "default" else tok.pre   # "default": a SentencePiece's
    scaling = f"{c.rope_scaling} x{c.rope_scaling_factor:g}" if c.rope_scaling else ""
    stops = tok.stop_ids if is_open else [tok.eos_id]
    template = tok.chat_template if is_open else ""
    return {
        "name": str(source.get("name") or bundle.metadata.get("name") or "model"),
        "parameters": param_count(c), "layers": c.n_layer, "d_model": c.d_model,
        "heads": c.n_head, "kv_heads": c.kv_heads, "head_dim": c.head_dim,
        "ffn_dim": c.hidden_dim, "context_length": c.context_length,
        "vocab_size": c.vocab_size, "tokenizer": tokenizer_name(tok.kind, pre),
        "tokenizer_kind": tok.kind, "tokenizer_pre": pre,
        "tied_embeddings": c.tie_embeddings, "rope_base": c.rope_base, "rope_scaling": scaling,
        "chat_template": bool(template) if is_open else True,
        "template_head": "\n".join(template.strip().splitlines()[:TEMPLATE_LINES]),
        "stop_tokens": [tok.id_to_piece(i) for i in stops],
        "file_type": file_type_name(source),
        # the file it came from (a GGUF's absolute path; "" for others): a LoRA run's base
        "path": str(source.get("path", "")) if source.get("format") == "gguf" else "",
    }


def parameters_text(n: int) -> str:
    """A parameter count as people write it: "135.0M", "1.24B"."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def format_card(card: dict) -> str:
    """The card as a few lines of text (CLI)."""
    p = card["parameters"]
    rope = f"RoPE base {card['rope_base']:g}" + (f", {card['rope_scaling']} scaling"
                                                  if card["rope_scaling"] else "")
    kind = f", {card['file_type']}" if card.get("file_type") else ""
    return "\n".join([
        f"{card['name']}: {parameters_text(p)} parameters ({p:,}){kind}",
        f"  layers {card['layers']}, d_model {card['d_model']}, heads {card['heads']} / "
        f"key-value heads {card['kv_heads']} (head_dim {card['head_dim']}), ffn {card['ffn_dim']}",
        f"  context {card['context_length']} tokens, {rope}, "
        f"{'tied' if card['tied_embeddings'] else 'untied'} embeddings",
        f"  vocabulary {card['vocab_size']}, tokenizer {card['tokenizer']}",
        f"  chat template: {'yes' if card['chat_template'] else 'none'}; stops on "
        + ", ".join(card["stop_tokens"])])
