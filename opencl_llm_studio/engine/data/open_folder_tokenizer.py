"""Read a transformers model folder's tokenizer into an engine.data.open_tokenizer.OpenTokenizer.

Files, as transformers writes them (PreTrainedTokenizerFast.save_pretrained): tokenizer.json
(the `tokenizers` pipeline), tokenizer_config.json (bos/eos/unk tokens, chat_template,
add_bos_token), chat_template.jinja (newer transformers keep the template there), and the
model's generation_config.json (eos_token_id: one id or a list; all of them end a turn).
"""

from __future__ import annotations

import json
from pathlib import Path

from opencl_llm_studio.engine.errors import ModelImportError
from opencl_llm_studio.engine.data.open_tokenizer import END_OF_TURN, OpenTokenizer, detect_pre, tokenizers_module

_HINT = ("Open models need a tokenizer.json (byte-level BPE, as SmolLM2 and Llama 3, or "
         "SentencePiece-style BPE with byte fallback, as TinyLlama).")


def _json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelImportError(f"{path} cannot be read: {e}.", "The folder is damaged.") from None


def _token_text(value) -> str | None:
    """tokenizer_config.json writes a token as a string or as {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def chat_template_of(folder: Path, config: dict) -> str:
    """The folder's default chat template: chat_template.jinja, else tokenizer_config.json's
    chat_template (a string, or a list of {"name", "template"}: the one named "default")."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    t = config.get("chat_template") or ""
    if isinstance(t, list):
        named = {d.get("name"): d.get("template", "") for d in t if isinstance(d, dict)}
        t = named.get("default") or next(iter(named.values()), "")
    return t


def _kind(spec: dict) -> str:
    """"byte_bpe" or "sentencepiece" for a tokenizer.json dict; ModelImportError otherwise."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise ModelImportError(f"The tokenizer is a {model.get('type')} model, which the engine "
                               "does not read.", _HINT)
    text = json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])
    if '"ByteLevel"' in text:
        return "byte_bpe"
    if model.get("byte_fallback"):
        return "sentencepiece"
    raise ModelImportError("The tokenizer is a BPE without byte-level pre-tokenizer or byte "
                           "fallback, so some text could not be encoded.", _HINT)


def stop_ids_of(hf, eos_ids: list[int]) -> list[int]:
    """Ids that end a turn: `eos_ids`, and every special (added) token of the vocabulary named
    in END_OF_TURN, as llama.cpp marks end-of-generation tokens by these names
    (llama_vocab::impl::load)."""
    added = {t.content for t in hf.get_added_tokens_decoder().values() if t.special}
    return sorted(set(eos_ids) | {hf.token_to_id(n) for n in END_OF_TURN if n in added})


def _adds_bos(hf, bos: int | None) -> bool:
    """Whether tokenizer.json's post-processor puts BOS before a text (Llama 3, TinyLlama)."""
    plain = hf.encode("a", add_special_tokens=False).ids
    full = hf.encode("a", add_special_tokens=True).ids
    return bos is not None and full == [bos] + plain


def read_folder(folder) -> OpenTokenizer:
    """The tokenizer of a transformers model folder (tokenizer.json, tokenizer_config.json,
    optional chat_template.jinja and generation_config.json). Raises ModelImportError when
    tokenizer.json is missing or of a kind the engine cannot run."""
    folder = Path(folder)
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise ModelImportError(f"{folder} has no tokenizer.json.", _HINT)
    t = tokenizers_module()
    try:
        text = path.read_text(encoding="utf-8")
        spec, hf = json.loads(text), t.Tokenizer.from_str(text)
    except Exception as e:   # json and tokenizers' own (plain) Exception
        raise ModelImportError(f"{path} cannot be read: {e}.", "The folder is damaged.") from None
    kind = _kind(spec)
    config = _json(folder / "tokenizer_config.json")
    ids = {}
    for role in ("bos", "eos", "unk"):
        name = _token_text(config.get(f"{role}_token"))
        ids[role] = hf.token_to_id(name) if name else None
    gen = _json(folder / "generation_config.json")
    gen_eos = gen.get("eos_token_id")
    gen_eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
    if ids["eos"] is None:
        if not gen_eos:
            raise ModelImportError("The tokenizer names no end-of-sequence token.",
                                   "tokenizer_config.json needs an eos_token.")
        ids["eos"] = gen_eos[0]
    if ids["bos"] is None and gen.get("bos_token_id") is not None:
        ids["bos"] = int(gen["bos_token_id"])
    add_bos = bool(config.get("add_bos_token", _adds_bos(hf, ids["bos"])))
    template = chat_template_of(folder, config)
    pre = detect_pre(hf) if kind == "byte_bpe" else "default"
    return OpenTokenizer(hf, kind, pre, ids["bos"], ids["eos"], ids["unk"], add_bos, template,
               stop_ids_of(hf, [ids["eos"]] + gen_eos))
