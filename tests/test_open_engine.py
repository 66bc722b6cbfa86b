"""Issue 21 on today's engine: an imported pretrained model with multi-head attention (the
engine's grouped-query attention is another branch's work) runs in a TrainingSession on the
OpenCL device, with its OpenTokenizer, and gives transformers' logits and greedy ids: the
import's weights, RoPE convention and tokenizer are what the engine expects."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from opencl_llm_studio.engine.config import SamplingParams, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.files.hf.load import import_hf  # noqa: E402
from opencl_llm_studio.engine.model.params import ParamTable  # noqa: E402
from tests.open_models import build, nmse  # noqa: E402

PROMPT = "Hello world! 12345 你好 def f(x): return x"
MHA = {"smollm2": {"num_key_value_heads": 6}, "tinyllama": {"num_key_value_heads": 8}}


@pytest.mark.parametrize("family", MHA)
def test_engine_gives_transformers_logits_and_greedy_ids(family, rt, tmp_path):
    from opencl_llm_studio.engine.training.session import TrainingSession
    folder = build(family, tmp_path / family, **MHA[family])
    bundle = import_hf(folder)[0]
    cfg = bundle.config.replace(context_length=64)
    s = TrainingSession(rt, cfg, TrainConfig(), bundle.tokenizer,
                        "A general text for the session.\n" * 20, None,
                        flat_weights=ParamTable(cfg).flatten(bundle.weights))
    tok = bundle.tokenizer
    ids = ([tok.bos_id] if tok.add_bos else []) + tok.encode(PROMPT)
    ours = s.model.logits(np.array([ids], np.int32)).reshape(len(ids), -1)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    with torch.no_grad():
        want = model.eval()(torch.tensor([ids])).logits[0].numpy()
    assert nmse(ours, want) < 1e-8
    greedy = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                            eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    got = s.generate_ids(ids, max_new_tokens=8, sampling=SamplingParams(greedy=True))
    assert got == greedy[:len(got)] and (len(got) == 8 or greedy[len(got)] == tok.eos_id)
