"""Write a model as a Hugging Face transformers Llama folder (issue 14).

`export_hf(bundle, folder)` writes what `LlamaForCausalLM.from_pretrained(folder)` and
`AutoTokenizer.from_pretrained(folder)` load as is:
  config.json             LlamaConfig (transformers/models/llama/configuration_llama.py keys)
  model.safetensors       float32 weights under HF names; q/k rows in rotate-half order
  tokenizer.json          the same ids as the engine (engine.files.hf.tokenizer_json)
  tokenizer_config.json   special tokens and the chat template (engine.data.dialogue.CHAT_TEMPLATE)
  tokenizer.model         the SentencePiece model itself (as Llama folders ship it; the
                          importer and llama.cpp's convert_hf_to_gguf.py read it); not for
                          an imported pretrained model, whose tokenizer.json, template and
                          stop ids (generation_config.json) are its own
  generation_config.json  bos/eos ids
  studio.json             the training metadata (steps, data summary, configs) for the way back
  README.md               a model card with the training metadata
The folder is written under a temporary name beside the target and renamed into place, so an
interrupted export never leaves a half-written model folder; missing parent folders are made
(and removed again when the export fails). An existing folder is replaced only with force and
only when it holds a model (config.json): never a run folder or other files.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.errors import ExportError
from opencl_llm_studio.engine.fsutil import FolderSnapshot
from opencl_llm_studio.engine.files.hf.names import hf_name, to_hf_tensor
from opencl_llm_studio.engine.files.model_card import tokenizer_name
from opencl_llm_studio.engine.model.params import param_count

STUDIO_FILE = "studio.json"
# The training data a scale-out folder carries (engine.files.hf.scale_out writes them, engine.files.hf.load
# reads the texts back; train_ddp.py, standalone on purpose, reads the arrays by these names)
DATA = {"pretrain_text": "data/pretrain.txt", "tune_text": "data/tune.txt",
        "pretrain_train": "data/pretrain_train.npy", "val_inputs": "data/pretrain_val_inputs.npy",
        "val_targets": "data/pretrain_val_targets.npy", "token_bytes": "data/token_bytes.npy",
        "val_source": "data/val_source.txt", "tune_ids": "data/tune_ids.npy",
        "tune_mask": "data/tune_mask.npy"}
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "tokenizer.model", "generation_config.json", STUDIO_FILE, "README.md")


def hf_config(cfg, tokenizer) -> dict:
    """config.json for a ModelConfig: a LlamaConfig with no biases, num_key_value_heads
    kv_heads (grouped-query attention when below n_head), RoPE scaling as the config says."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
        "intermediate_size": cfg.hidden_dim, "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head, "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim, "max_position_embeddings": cfg.context_length,
        "rms_norm_eps": cfg.rms_eps, "rope_theta": cfg.rope_base,
        "rope_parameters": rope_parameters(cfg), **_rope_scaling(cfg),
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "attention_dropout": 0.0, "initializer_range": 0.02, "pretraining_tp": 1,
        "tie_word_embeddings": cfg.tie_embeddings, "use_cache": True,
        "bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id,
        "torch_dtype": "float32", "dtype": "float32",
    }


def rope_parameters(cfg) -> dict:
    """transformers' rope_parameters of cfg: default, or llama3 with its four settings."""
    params = {"rope_type": cfg.rope_scaling or "default", "rope_theta": cfg.rope_base}
    if cfg.rope_scaling == "llama3":
        params.update(factor=cfg.rope_scaling_factor, low_freq_factor=cfg.rope_low_freq_factor,
                      high_freq_factor=cfg.rope_high_freq_factor,
                      original_max_position_embeddings=cfg.rope_original_context)
    return params


def _rope_scaling(cfg) -> dict:
    """The older transformers key rope_scaling (before rope_parameters), for llama3 only."""
    if not cfg.rope_scaling:
        return {}
    return {"rope_scaling": {k: v for k, v in rope_parameters(cfg).items() if k != "rope_theta"}}


def hf_weights(bundle) -> dict[str, np.ndarray]:
    """HF name -> contiguous float32 array; q and k rows permuted to rotate-half order."""
    return {hf_name(name): np.ascontiguousarray(
        to_hf_tensor(name, np.asarray(w, np.float32), bundle.config))
        for name, w in bundle.weights.items()}


def _tokenizer_config(tok) -> dict:
    from opencl_llm_studio.engine.data.dialogue import CHAT_TEMPLATE   # dialogue imports the tokenizer module
    from opencl_llm_studio.engine.data.open_tokenizer import OpenTokenizer
    p = tok.pieces()
    if isinstance(tok, OpenTokenizer):   # a pretrained model's: its own specials and template
        name = lambda i: None if i is None else p[i]   # noqa: E731
        out = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": name(tok.bos_id),
               "eos_token": name(tok.eos_id), "unk_token": name(tok.unk_id),
               "clean_up_tokenization_spaces": False, "model_max_length": None,
               "chat_template": tok.chat_template or None}
        if tok.kind == "sentencepiece":   # byte-level BPEs add BOS in tokenizer.json, if at all
            out["add_bos_token"], out["add_eos_token"] = tok.add_bos, False
        return out
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": p[tok.bos_id],
            "eos_token": p[tok.eos_id], "unk_token": p[tok.unk_id], "pad_token": None,
            "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
            "model_max_length": None, "chat_template": CHAT_TEMPLATE}


def _cell(v) -> str:
    """v as text inside one Markdown (GFM) table cell or heading: "|" escaped, lines joined,
    a file name's undecodable bytes as U+FFFD (the card is written as UTF-8)."""
    from opencl_llm_studio.engine.files.gguf_export import gguf_text
    return " ".join(gguf_text(v).replace("\\", "\\\\").replace("|", "\\|").split())


def _card(bundle) -> str:
    meta = "\n".join(f"| {_cell(k)} | {_cell(v)} |" for k, v in sorted(bundle.metadata.items()))
    c = bundle.config
    source, tok = bundle.metadata.get("source") or {}, bundle.tokenizer
    origin = (f"{_cell(source['name'])}, tuned with OpenCL LLM Studio" if source.get("name")
              else "A Llama-style model trained from scratch with OpenCL LLM Studio")
    title = bundle.metadata.get("name") or source.get("name") or "OpenCL LLM Studio model"
    return (f"# {_cell(title)}\n\n{origin}.\n\n"
            f"d_model {c.d_model}, n_layer {c.n_layer}, n_head {c.n_head}, context_length "
            f"{c.context_length}, vocab_size {c.vocab_size} ({param_count(c):,} parameters), "
            f"tokenizer {tokenizer_name(tok.kind, tok.pre)}.\n\n"
            "```python\nfrom transformers import AutoTokenizer, LlamaForCausalLM\n"
            "tok = AutoTokenizer.from_pretrained(PATH)\n"
            "model = LlamaForCausalLM.from_pretrained(PATH)\n```\n\n"
            "Chat format: the tokenizer's chat template (tokenizer_config.json).\n\n"
            "## Training metadata\n\n| key | value |\n|---|---|\n" + meta + "\n")


def export_hf(bundle, folder, force: bool = False, studio: dict | None = None,
              extra_files: dict | None = None, card_extra: str = "") -> Path:
    """Write `bundle` (engine.files.gguf_export.ModelBundle) as a transformers Llama folder.

    studio: more keys for studio.json (configs, step, history: what continuing needs).
    extra_files: {relative path: str | bytes} written into the folder too (scale-out data).
    card_extra: markdown appended to the model card.
    Raises ExportError: the folder exists and is not empty (unless force), cannot be written,
    the weights are not finite, or the [hf] extra (safetensors, tokenizers) is missing.
    """
    try:
        from safetensors.numpy import save_file
        from opencl_llm_studio.engine.files.hf.tokenizer_json import build
        from opencl_llm_studio.engine.data.open_tokenizer import OpenTokenizer
        is_open = isinstance(bundle.tokenizer, OpenTokenizer)
        hf_tok = bundle.tokenizer.hf if is_open else build(bundle.tokenizer)
    except ImportError as e:
        raise ExportError(f"Hugging Face export needs the optional packages ({e.name} missing).",
                          'Install them with: pip install "opencl-llm-studio[hf]"') from None
    folder = Path(folder)
    _check_target(folder, force)
    weights = hf_weights(bundle)
    bad = [n for n, w in weights.items() if not np.all(np.isfinite(w))]
    if bad:
        raise ExportError(f"The weights contain NaN or Inf ({bad[0]}); nothing was written.",
                          "Export an earlier checkpoint, or lower the learning rate and retrain.")
    cfg_json = hf_config(bundle.config, bundle.tokenizer)
    tok = bundle.tokenizer
    texts = {
        "config.json": json.dumps(cfg_json, indent=2),
        "tokenizer_config.json": json.dumps(_tokenizer_config(tok), indent=2),
        "generation_config.json": json.dumps({"bos_token_id": tok.bos_id,
                                              "eos_token_id": tok.stop_ids if is_open
                                              else tok.eos_id,
                                              "max_length": bundle.config.context_length}, indent=2),
        STUDIO_FILE: json.dumps({"format": "opencl-llm-studio-hf/1", "tokenizer_kind": tok.kind,
                                 "metadata": bundle.metadata, **(studio or {})},
                                indent=2, default=str),
        "README.md": _card(bundle) + card_extra,
        **(extra_files or {}),
    }
    tmp = folder.parent / f".{folder.name}.{secrets.token_hex(4)}.tmp"
    made = FolderSnapshot(folder.parent, only=())   # missing parents are made, as tools do
    try:
        tmp.mkdir(parents=True)
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        hf_tok.save(str(tmp / "tokenizer.json"))
        if not is_open:   # the app's SentencePiece model (an open model keeps tokenizer.json)
            (tmp / "tokenizer.model").write_bytes(tok.to_bytes())
        for rel, content in texts.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        replace_folder(tmp, folder)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        made.undo()   # refused means nothing changed: no folder made for it stays
        raise ExportError(f"Writing {folder} failed: {e.strerror or e}.",
                          "Choose a folder you can write to and check free disk space.",
                          "Give a folder you can write to and check free disk space.") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _check_target(folder: Path, force: bool) -> None:
    """ExportError unless `folder` is new, empty, or (with force) a model folder to replace: a
    file, or a folder of other things (a run folder, documents), is never replaced."""
    if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
        raise ExportError(f"{folder} is a file, not a folder.",
                          "Give a new folder name for the Hugging Face model.")
    if not folder.exists() or not any(folder.iterdir()):
        return
    if not force:
        raise ExportError(f"{folder} already exists and is not an empty folder.",
                          "Choose a new folder, or allow overwriting.",
                          "Give a new folder, or add --force to replace it.")
    if not (folder / "config.json").is_file():
        raise ExportError(f"{folder} holds other files, not a Hugging Face model folder "
                          "(no config.json), so it is not replaced, even with --force.",
                          "Choose a new folder.", "Give a new folder.")


def replace_folder(tmp: Path, folder: Path) -> None:
    """Rename tmp onto folder; an existing folder (force) is moved aside first and removed only
    after the new one is in place. Raises OSError (then the old folder is back in place), or
    ExportError when the new folder is in place but the old copy could not all be removed."""
    old = None
    if folder.exists():
        old = folder.parent / f".{folder.name}.{secrets.token_hex(4)}.old"
        os.replace(folder, old)
    try:
        os.replace(tmp, folder)
    except OSError:
        if old is not None:
            os.replace(old, folder)
        raise
    if old is not None:
        try:
            shutil.rmtree(old)
        except OSError as e:
            raise ExportError(f"Wrote {folder}, but its old copy {old} could not be removed: "
                              f"{e.strerror or e}.", f"Delete {old} by hand.") from None


def studio_state(session) -> dict:
    """What studio.json needs to continue a run exactly: configs, step, history, and the chat
    format its dialogues were tuned in."""
    return {"model_config": session.model_config.__dict__,
            "train_config": session.run_config().__dict__, "step": session.step,
            "history": session.history, "chat_format": session.chat_format}


def export_session(session, folder, force: bool = False) -> Path:
    """export_hf for a TrainingSession, with what continuing the run needs in studio.json."""
    return export_hf(session.bundle(), folder, force=force, studio=studio_state(session))


def export_result(folder: Path):
    """The folder as an engine.files.gguf_export.ExportResult (size = all files), for callers that
    report GGUF and HF exports alike."""
    from opencl_llm_studio.engine.files.gguf_export import ExportResult
    folder = Path(folder)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return ExportResult(folder, size, None, "hf")
