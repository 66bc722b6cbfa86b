"""The GGUF export types and their size rules, light enough for the CLI's parser to import
(engine.files.gguf_export, which writes the files, loads the gguf package and numpy).

F32 is exact; F16 halves the 2-D weights; Q8_0 stores each row in blocks of 32 values with one
f16 scale (34 bytes a block: ggml's block_q8_0, gguf.GGML_QUANT_SIZES). 1-D norm weights stay
F32 in every type.
"""

from __future__ import annotations

import math

from opencl_llm_studio.engine.config import ModelConfig

# export type -> (values per block, bytes per block) of the 2-D weights, as
# gguf.GGML_QUANT_SIZES gives them for F32, F16 and Q8_0 (tests/test_one_source.py compares)
BLOCKS = {"f32": (1, 4), "f16": (1, 2), "q8_0": (32, 34)}
DTYPE_NAMES = tuple(BLOCKS)   # what `llm-studio export --dtype` and the export dialog offer
DEFAULT_DTYPE = "f32"         # exact: the file gives the engine's logits
QK8_0 = BLOCKS["q8_0"][0]
# Which export to give transformers (README, the export dialog; tests/test_export_consumers.py
# checks both halves): its GGUF loader (from_pretrained(..., gguf_file=...), transformers
# integrations/gguf) builds a LlamaTokenizer that always puts "▁" before the first word,
# ignoring tokenizer.ggml.add_space_prefix = false, so its ids and answers differ.
TRANSFORMERS_NOTE = ("For transformers, export the Hugging Face folder: transformers' own GGUF "
                     "loader (gguf_file=) ignores the GGUF's add_space_prefix = false and cuts "
                     "the first word into other tokens.")


def _shapes(config: ModelConfig) -> list[tuple[int, ...]]:
    from opencl_llm_studio.engine.model.params import ParamTable
    return list(ParamTable(config).shapes().values())


def q8_0_fits(config: ModelConfig) -> bool:
    """Whether `config` can be exported as Q8_0: every 2-D weight's rows (d_model, ffn_dim)
    are whole blocks of QK8_0 values."""
    return all(shape[-1] % QK8_0 == 0 for shape in _shapes(config) if len(shape) == 2)


def estimated_bytes(config: ModelConfig, dtype: str = DEFAULT_DTYPE) -> int:
    """Size of the GGUF engine.files.gguf_export writes, before training: every tensor in its stored
    type (1-D F32, 2-D `dtype`), the tokenizer (~40 B per piece: its text, score and type in
    the token lists and again in the embedded SentencePiece model, base64; measured) and ~4 KiB
    of keys. KeyError for an unknown dtype."""
    block, block_bytes = BLOCKS[dtype]
    total = 0
    for shape in _shapes(config):
        n = math.prod(shape)
        total += 4 * n if len(shape) == 1 else -(-n // block) * block_bytes
    return total + 40 * config.vocab_size + 4096
