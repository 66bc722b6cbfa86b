"""LoRA on a quantized base (engine.model.quant_base.QuantBase): the same numbers as on the
float32 weights the file's blocks stand for, with the base never expanded in memory."""

import gguf
import numpy as np
import pytest

from opencl_llm_studio.engine.config import LoraConfig, TrainConfig
from opencl_llm_studio.engine.generation.decode import KVDecoder
from opencl_llm_studio.engine.model.params import ParamTable
from tests.helpers import quant_lora_pair as _pair
from tests.helpers import tiny_config
from tests.kernel_helpers import batch, rel_err

T = gguf.GGMLQuantizationType
TC = TrainConfig(learning_rate=1e-9, weight_decay=0.0, grad_clip=0.0)


# one type throughout (q, k, v stacked into one matrix), and mixed types as Q4_K_M files mix
# them (each member of a fused group a matrix of its own)
TYPES = [{"*": T.Q8_0}, {"*": T.Q4_0}, {"*": T.Q4_1},
         {"attn_v": T.Q8_0, "ffn_down": T.F16, "token_embd": T.Q8_0, "*": T.Q4_1}]


@pytest.mark.parametrize("types", TYPES, ids=["q8_0", "q4_0", "q4_1", "mixed"])
def test_quantized_base_matches_its_dequantized_weights(rt, types):
    cfg = tiny_config(d_model=64, n_head=4, n_kv_head=2, ffn_dim=96, vocab_size=320)
    q, f, _ = _pair(rt, cfg, types, LoraConfig(rank=4))
    x, y = batch(cfg, 2, 9, seed=2)
    np.testing.assert_allclose(q.logits(x), f.logits(x), rtol=0, atol=1e-5)
    lq, _, _ = q.train_step(x, y, 1e-30, TC)
    lf, _, _ = f.train_step(x, y, 1e-30, TC)
    assert lq == pytest.approx(lf, abs=1e-5)
    assert rel_err(q.read_flat("grads"), f.read_flat("grads").astype(np.float64)) < 1e-4
    dq, df = KVDecoder(q), KVDecoder(f)
    np.testing.assert_allclose(dq.reset([3, 4, 5]), df.reset([3, 4, 5]), atol=1e-5)
    np.testing.assert_allclose(dq.step(7), df.step(7), atol=1e-5)


def test_quantized_base_is_compact_and_merges_exactly(rt):
    cfg = tiny_config(d_model=64, n_head=4, ffn_dim=128, vocab_size=512, tie_embeddings=False)
    q, f, exact = _pair(rt, cfg, {"*": T.Q4_1}, LoraConfig(rank=2))
    n = ParamTable(cfg).n_params
    assert q.base.nbytes < 0.25 * 4 * n   # 4-bit codes and scales, not float32
    base = q.base.weights()
    for name, v in exact.items():
        np.testing.assert_array_equal(base[name], v, err_msg=name)
    merged_q, merged_f = q.weights(), f.weights()
    for name in merged_f:
        np.testing.assert_allclose(merged_q[name], merged_f[name], atol=1e-6, err_msg=name)
