"""The engine's SentencePiece tokenizer as a Hugging Face `tokenizers` BPE (tokenizer.json).

SentencePiece BPE merges the adjacent pair whose merged piece has the highest score; a
`tokenizers` BPE merges by rank. The merge list is made the way transformers' own converter
does it (`SentencePieceExtractor` in transformers/convert_slow_tokenizer.py): every split of a
normal piece into two pieces of the vocabulary, ranked by the merged piece's score. With the
engine's settings (identity normalization, no dummy prefix, byte fallback, no whitespace
pre-split) the normalizer only turns " " into "▁", and the decoder reverses it and joins byte
tokens (the same pipeline transformers uses for Llama tokenizers with `legacy=False`).
A character-level model is the same BPE with no merges.
"""

from __future__ import annotations

from opencl_llm_studio.engine.data.tokenizer import TOKEN_NORMAL, TOKEN_USER_DEFINED, Tokenizer

_WS = "\u2581"


def merges(tok: Tokenizer) -> list[tuple[str, str]]:
    """(left, right) pairs of `tok`, highest priority first (merges_from_scores)."""
    return merges_from_scores(tok.pieces(), tok.scores(), tok.token_types())


def merges_from_scores(pieces: list[str], scores: list[float],
                       types: list[int]) -> list[tuple[str, str]]:
    """(left, right) pairs, highest priority first: the splits of each normal piece into two
    pieces of the vocabulary, ordered by the merged piece's score (then by the ids of the
    parts, as transformers orders them). The inputs are index = id lists, as in a GGUF's
    tokenizer.ggml.tokens / scores / token_type (a SentencePiece vocabulary)."""
    vocab = {p: i for i, p in enumerate(pieces)}
    normal = {p for p, t in zip(pieces, types) if t == TOKEN_NORMAL}
    out = []
    for i, piece in enumerate(pieces):
        if types[i] != TOKEN_NORMAL or len(piece) < 2:
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in normal and piece[k:] in normal]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        out += [(left, right, scores[i]) for left, right in local]
    out.sort(key=lambda m: -m[2])   # stable: ties keep the id order above
    return [(left, right) for left, right, _ in out]


def build(tok: Tokenizer):
    """A `tokenizers.Tokenizer` that gives `tok.encode(s)`'s ids for every string s (without
    special tokens) and decodes them back; `<s> $A` as post-processor, as Llama's does.
    Raises ImportError when the `tokenizers` package (the [hf] extra) is missing."""
    from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models
    from tokenizers import normalizers, processors

    pieces, types = tok.pieces(), tok.token_types()
    vocab = {p: i for i, p in enumerate(pieces)}
    bpe = models.BPE(vocab=vocab, merges=merges(tok), unk_token=pieces[tok.unk_id],
                     byte_fallback=True, fuse_unk=True)
    hf = HFTokenizer(bpe)
    hf.normalizer = normalizers.Replace(" ", _WS)
    if tok.add_space_prefix:
        hf.normalizer = normalizers.Sequence([normalizers.Prepend(_WS), hf.normalizer])
    hf.decoder = decoders.Sequence([decoders.Replace(_WS, " "), decoders.ByteFallback(),
                                    decoders.Fuse()]
                                   + ([decoders.Strip(_WS, 1, 0)] if tok.add_space_prefix else []))
    special = [AddedToken(pieces[i], special=True, normalized=False)
               for i in (tok.unk_id, tok.bos_id, tok.eos_id)]
    hf.add_special_tokens(special)
    user = [AddedToken(p, special=False, normalized=False)
            for p, t in zip(pieces, types) if t == TOKEN_USER_DEFINED]
    if user:
        hf.add_tokens(user)
    bos = pieces[tok.bos_id]
    hf.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.bos_id)])
    return hf
