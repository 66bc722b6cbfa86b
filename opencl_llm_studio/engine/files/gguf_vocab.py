"""A GGUF's vocabulary <-> engine.data.open_tokenizer.OpenTokenizer.

Read: `tokenizer_from_gguf` rebuilds the tokenizer llama.cpp would run from the
tokenizer.ggml.* keys (llama.cpp src/llama-vocab.cpp, llama_vocab::impl::load):
- model "gpt2": byte-level BPE from tokens and merges, with the pre-tokenizer regexes of
  tokenizer.ggml.pre (engine.data.open_tokenizer.PRE_REGEXES: smollm, llama-bpe, qwen2, gpt-2);
- model "llama": SentencePiece BPE with byte fallback; llama.cpp merges the adjacent pair whose
  joined piece has the highest score, which is a BPE whose merges are every split of each piece
  ranked by its score (transformers' SentencePieceExtractor: engine.files.hf.tokenizer_json).
Control (3) and user-defined (4) tokens are matched in the text first, as llama.cpp does.

Write: `add_tokenizer` puts the same keys into a gguf.GGUFWriter.
"""

from __future__ import annotations

from typing import Any, Callable

from opencl_llm_studio.engine.errors import ModelImportError
from opencl_llm_studio.engine.data.open_tokenizer import (IGNORE_MERGES, PRE_REGEXES, TOKEN_CONTROL, TOKEN_UNKNOWN,
                                   TOKEN_USER_DEFINED, OpenTokenizer, tokenizers_module,
                                   byte_bpe_pre_tokenizer)
from opencl_llm_studio.engine.data.open_folder_tokenizer import stop_ids_of

_WS = "\u2581"
_HINT = ("Open GGUFs with a byte-level BPE (tokenizer.ggml.model gpt2, pre "
         + ", ".join(PRE_REGEXES) + ") or a SentencePiece (llama) vocabulary.")
# GGUF model name <-> OpenTokenizer kind
GGUF_MODELS = {"gpt2": "byte_bpe", "llama": "sentencepiece"}


def _added_tokens(hf, tokens: list[str], types: list[int]) -> None:
    """Register control / unknown tokens as special and user-defined ones as plain added
    tokens, matched whole before the model sees the text."""
    t = tokenizers_module()
    special = [t.AddedToken(tok, special=True, normalized=False)
               for tok, ty in zip(tokens, types) if ty in (TOKEN_CONTROL, TOKEN_UNKNOWN)]
    user = [t.AddedToken(tok, special=False, normalized=False)
            for tok, ty in zip(tokens, types) if ty == TOKEN_USER_DEFINED]
    if special:
        hf.add_special_tokens(special)
    if user:
        hf.add_tokens(user)


def _byte_bpe(tokens: list[str], merges: list[str], pre: str):
    t = tokenizers_module()
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    model = t.models.BPE(vocab={tok: i for i, tok in enumerate(tokens)}, merges=pairs,
                         ignore_merges=pre in IGNORE_MERGES)
    hf = t.Tokenizer(model)
    hf.pre_tokenizer = byte_bpe_pre_tokenizer(pre)
    hf.decoder = t.decoders.ByteLevel()
    return hf


def _sentencepiece(tokens: list[str], scores: list[float], types: list[int], unk: int | None,
                   space_prefix: bool):
    from opencl_llm_studio.engine.files.hf.tokenizer_json import merges_from_scores
    t = tokenizers_module()
    model = t.models.BPE(vocab={tok: i for i, tok in enumerate(tokens)},
                         merges=merges_from_scores(tokens, scores, types),
                         unk_token=tokens[unk] if unk is not None else None,
                         byte_fallback=True, fuse_unk=True)
    hf = t.Tokenizer(model)
    replace = t.normalizers.Replace(" ", _WS)
    hf.normalizer = (t.normalizers.Sequence([t.normalizers.Prepend(_WS), replace])
                     if space_prefix else replace)
    steps = [t.decoders.Replace(_WS, " "), t.decoders.ByteFallback(), t.decoders.Fuse()]
    hf.decoder = t.decoders.Sequence(steps + ([t.decoders.Strip(" ", 1, 0)]
                                              if space_prefix else []))
    return hf


def _special_ids(get: Callable[[str, Any], Any], fname: str) -> dict:
    """{"bos", "eos", "unknown", "eot", "eom"} -> the GGUF's token id or None; ModelImportError
    when it names no end-of-sequence token."""
    ids = {k: get(f"tokenizer.ggml.{k}_token_id", None)
           for k in ("bos", "eos", "unknown", "eot", "eom")}
    ids = {k: None if v is None else int(v) for k, v in ids.items()}
    if ids["eos"] is None:
        raise ModelImportError(f"{fname} names no end-of-sequence token "
                               "(tokenizer.ggml.eos_token_id).", _HINT)
    return ids


def _byte_level(get: Callable[[str, Any], Any], fname: str, tokens: list) -> tuple:
    """(tokenizers.Tokenizer, pre-tokenizer name, add_bos default) of a byte-level BPE vocabulary
    (tokenizer.ggml.model "gpt2")."""
    pre = get("tokenizer.ggml.pre", "default") or "default"   # llama.cpp's fallback
    if pre not in PRE_REGEXES:
        raise ModelImportError(f"{fname} uses the {pre!r} pre-tokenizer, which the engine "
                               "does not know.", _HINT)
    return _byte_bpe(tokens, list(get("tokenizer.ggml.merges", [])), pre), pre, pre == "llama-bpe"


def _sentencepiece_vocab(get: Callable[[str, Any], Any], fname: str, tokens: list, types: list,
                         unk: int | None) -> tuple:
    """(tokenizers.Tokenizer, scores, unknown id) of a SentencePiece vocabulary
    (tokenizer.ggml.model "llama"); unk: the file's unknown token, else the one found by type."""
    scores = [float(s) for s in get("tokenizer.ggml.scores", [])]
    if len(scores) != len(tokens):
        raise ModelImportError(f"{fname} has {len(scores)} scores for {len(tokens)} "
                               "tokens.", "The file is damaged.")
    if unk is None:
        unk = types.index(TOKEN_UNKNOWN) if TOKEN_UNKNOWN in types else None
    return _sentencepiece(tokens, scores, types, unk,
                          bool(get("tokenizer.ggml.add_space_prefix", True))), scores, unk


def tokenizer_from_gguf(get: Callable[[str, Any], Any], fname: str) -> OpenTokenizer:
    """The OpenTokenizer of a GGUF; get(key, default) returns a key's value (default if absent).
    Raises ModelImportError for a vocabulary the engine cannot run."""
    model = get("tokenizer.ggml.model", "")
    if model not in GGUF_MODELS:
        raise ModelImportError(f"{fname} has a {model or 'missing'} tokenizer "
                               "(tokenizer.ggml.model), which the engine cannot run.", _HINT)
    tokens = list(get("tokenizer.ggml.tokens", []))
    if not tokens:
        raise ModelImportError(f"{fname} has no vocabulary (tokenizer.ggml.tokens).", _HINT)
    types = [int(x) for x in get("tokenizer.ggml.token_type", [1] * len(tokens))]
    ids = _special_ids(get, fname)
    template = get("tokenizer.chat_template", "") or ""
    if model == "gpt2":
        (hf, pre, add_bos_default), scores = _byte_level(get, fname, tokens), None
    else:
        hf, scores, ids["unknown"] = _sentencepiece_vocab(get, fname, tokens, types,
                                                          ids["unknown"])
        pre, add_bos_default = "default", True
    _added_tokens(hf, tokens, types)
    add_bos = bool(get("tokenizer.ggml.add_bos_token", add_bos_default))
    if add_bos and ids["bos"] is not None:   # as the folders' tokenizer.json add it
        bos = tokens[ids["bos"]]
        t = tokenizers_module()
        hf.post_processor = t.processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, ids["bos"])])
    eos_like = [i for i in (ids["eos"], ids["eot"], ids["eom"]) if i is not None]
    return OpenTokenizer(hf, GGUF_MODELS[model], pre, ids["bos"], ids["eos"], ids["unknown"],
                         add_bos, template,
                         stop_ids_of(hf, eos_like), scores)


def add_tokenizer(writer, tok: OpenTokenizer) -> None:
    """Write `tok` as tokenizer.ggml.* keys (and tokenizer.chat_template) into a GGUFWriter,
    the way llama.cpp's convert_hf_to_gguf.py writes these vocabularies."""
    model = {v: k for k, v in GGUF_MODELS.items()}[tok.kind]
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(tok.pre)
    writer.add_token_list(tok.pieces())
    writer.add_token_types(tok.token_types())
    if model == "gpt2":
        writer.add_token_merges(tok.merges())
    else:
        writer.add_token_scores(tok.scores())
        writer.add_add_space_prefix(tok.add_space_prefix)
    for setter, i in ((writer.add_bos_token_id, tok.bos_id), (writer.add_eos_token_id, tok.eos_id),
                      (writer.add_unk_token_id, tok.unk_id)):
        if i is not None:
            setter(i)
    others = [i for i in tok.stop_ids if i != tok.eos_id]
    eom = [i for i in others if tok.id_to_piece(i) == "<|eom_id|>"]
    eot = [i for i in others if i not in eom]
    if eot:   # the others llama.cpp finds by name, as stop_ids_of does on reading
        writer.add_eot_token_id(eot[0])
    if eom:
        writer.add_eom_token_id(eom[0])
    writer.add_add_bos_token(tok.add_bos)
    writer.add_add_eos_token(False)
    if tok.chat_template:
        writer.add_chat_template(tok.chat_template)
