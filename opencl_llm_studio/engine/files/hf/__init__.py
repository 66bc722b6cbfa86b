"""Hugging Face transformers interchange (issue 14): a run becomes a `LlamaForCausalLM` folder
(`export_hf`), such a folder becomes a ModelBundle (`import_hf`), and `scale_out` packs a run for
multi-GPU training with torchrun. Needs the optional `[hf]` extra (safetensors, tokenizers); the
core engine imports nothing from it until one of these is called."""
