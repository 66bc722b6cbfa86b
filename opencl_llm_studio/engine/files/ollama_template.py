"""An imported model's chat template in Ollama's terms, for the Modelfile beside its export.

Without a Modelfile, Ollama picks the nearest template it knows by matching the GGUF's Jinja
template, and drops the template's default system prompt (SmolLM2's "You are a helpful AI
assistant named SmolLM, trained by Hugging Face"), so it answered otherwise than the studio.
Here the model's Jinja template is recognised by its turn markers as one of the families open
models use, written as Ollama's own Go template of that family (ollama/ollama, template/*.gotmpl:
chatml, llama3-instruct, zephyr), and its default system prompt is found by rendering the Jinja
template with one user message (engine.data.chat_template.render) and reading the system turn it
adds. Stop words are the tokenizer's end-of-turn pieces.

`ollama_chat(tokenizer)` returns OllamaChat(template, system, stops) or None for a template of
no known family (the export then writes no Modelfile, and says why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# family -> (marker in the Jinja text, Ollama Go template, regex of a rendered system turn)
FAMILIES = {
    "chatml": ("<|im_start|>",
               "{{- range .Messages }}<|im_start|>{{ .Role }}\n"
               "{{ .Content }}<|im_end|>\n"
               "{{ end }}<|im_start|>assistant\n",
               r"<\|im_start\|>system\n(.*?)<\|im_end\|>"),
    "llama3": ("<|start_header_id|>",
               "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
               "{{ .Content }}<|eot_id|>\n"
               "{{- end }}<|start_header_id|>assistant<|end_header_id|>\n\n",
               r"<\|start_header_id\|>system<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>"),
    "zephyr": ("<|user|>",
               "{{- range .Messages }}<|{{ .Role }}|>\n"
               "{{ .Content }}</s>\n"
               "{{ end }}<|assistant|>\n",
               r"<\|system\|>\n(.*?)</s>"),
}
PROBE = "Hello"   # the one user message the template is rendered with


@dataclass(frozen=True)
class OllamaChat:
    """family: a key of FAMILIES; template: Ollama Go template text; system: the template's
    default system prompt ("" when it adds none); stops: end-of-turn pieces."""
    family: str
    template: str
    system: str
    stops: tuple[str, ...]


def family_of(jinja: str) -> str | None:
    """The FAMILIES key whose turn marker the Jinja template writes, or None."""
    for name, (marker, _, _) in FAMILIES.items():
        if marker in jinja:
            return name
    return None


def ollama_chat(tokenizer) -> OllamaChat | None:
    """The Ollama form of an engine.data.open_tokenizer.OpenTokenizer's chat template (see the
    module), or None when it has no template or one of no known family."""
    from opencl_llm_studio.engine.data.chat_template import render, special_tokens
    jinja = tokenizer.chat_template
    family = family_of(jinja) if jinja else None
    if family is None:
        return None
    _, template, system_rx = FAMILIES[family]
    rendered = render(jinja, [{"role": "user", "content": PROBE}], add_generation_prompt=True,
                      **special_tokens(tokenizer))
    found = re.search(system_rx, rendered, re.S)
    stops = tuple(dict.fromkeys(tokenizer.id_to_piece(i) for i in tokenizer.stop_ids))
    return OllamaChat(family, template, found.group(1) if found else "", stops)
