"""A model card: what a person wants to know about a model before opening it as a run (name,
parameters, layers, heads / key-value heads, context, vocabulary, tokenizer, chat template),
as a dict for the studio and as text for the CLI."""

from __future__ import annotations


def model_card(bundle) -> dict:
    """Facts of an engine.files.gguf_export.ModelBundle: name, parameters (elements), layers, d_model,
    heads, kv_heads, head_dim, ffn_dim, context_length (tokens), vocab_size, tokenizer (kind and
    pre-tokenizer), tied_embeddings, rope_base, rope_scaling ("" or "llama3 xFACTOR"),
    chat_template (bool) and stop_tokens (their texts)."""
    from engine.data.open_tokenizer import OpenTokenizer
    c, tok = bundle.config, bundle.tokenizer
    source = bundle.metadata.get("source") or {}
    is_open = isinstance(tok, OpenTokenizer)   # else the app's SentencePiece (User:/Assistant:)
    pre = tok.pre if is_open else ""
    scaling = f"{c.rope_scaling} x{c.rope_scaling_factor:g}" if c.rope_scaling else ""
    stops = tok.stop_ids if is_open else [tok.eos_id]
    return {
        "name": str(source.get("name") or bundle.metadata.get("name") or "model"),
        "parameters": c.param_count(), "layers": c.n_layer, "d_model": c.d_model,
        "heads": c.n_head, "kv_heads": c.kv_heads, "head_dim": c.head_dim,
        "ffn_dim": c.hidden_dim, "context_length": c.context_length,
        "vocab_size": c.vocab_size,
        "tokenizer": tok.kind + (f" ({pre})" if pre and pre != "default" else ""),
        "tied_embeddings": c.tie_embeddings, "rope_base": c.rope_base, "rope_scaling": scaling,
        "chat_template": bool(tok.chat_template) if is_open else True,
        "stop_tokens": [tok.id_to_piece(i) for i in stops],
    }


def format_card(card: dict) -> str:
    """The card as a few lines of text (CLI)."""
    p = card["parameters"]
    size = f"{p / 1e9:.2f}B" if p >= 1e9 else f"{p / 1e6:.1f}M"
    rope = f"RoPE base {card['rope_base']:g}" + (f", {card['rope_scaling']} scaling"
                                                  if card["rope_scaling"] else "")
    return "\n".join([
        f"{card['name']}: {size} parameters ({p:,})",
        f"  layers {card['layers']}, d_model {card['d_model']}, heads {card['heads']} / "
        f"key-value heads {card['kv_heads']} (head_dim {card['head_dim']}), ffn {card['ffn_dim']}",
        f"  context {card['context_length']} tokens, {rope}, "
        f"{'tied' if card['tied_embeddings'] else 'untied'} embeddings",
        f"  vocabulary {card['vocab_size']}, tokenizer {card['tokenizer']}",
        f"  chat template: {'yes' if card['chat_template'] else 'none'}; stops on "
        + ", ".join(card["stop_tokens"])])
