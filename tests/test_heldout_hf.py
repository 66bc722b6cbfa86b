"""Issue 20, "honest numbers": the engine's loss and bits per byte of the held-out text agree
with an independent evaluation of the exported model (transformers + torch) on the same
windows, with the tokens from the exported tokenizer.json and the bytes counted on the text."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.training.evaluate import final_validation  # noqa: E402
from opencl_llm_studio.engine.files.hf.export import export_session  # noqa: E402
from opencl_llm_studio.engine.training.opening import create_session # noqa: E402

TEXT = "".join(f"Acte {i}, scène {i % 7}:\n    « Où est le café ? » dit-elle.\n\n"
               f"def f{i}(x):\n    return x * {i}\n\n" for i in range(120))


def windows(ids: list[int], T: int) -> list[tuple[list[int], list[int]]]:
    """nanoGPT-style consecutive windows of T targets over ids[1:], every target once; the
    last window ends at the end of the text and scores only the targets not yet scored."""
    out, start = [], 0
    while start + T + 1 <= len(ids):
        out.append((ids[start:start + T], ids[start + 1:start + T + 1]))
        start += T
    left = len(ids) - 1 - start
    if left:
        x, y = ids[-T - 1:-1], ids[-T:]
        out.append((x, [-1] * (T - left) + y[T - left:]))
    return out


# The held-out text, computed here from the text alone: the last 24 of its 240 paragraphs
# ("docs:0.1"), or nanoGPT's cut at 90% of the characters ("tail:0.1").
HELD_OUT = {"docs:0.1": TEXT[TEXT.index("Acte 108,"):], "tail:0.1": TEXT[int(len(TEXT) * 0.9):]}


@pytest.mark.parametrize("kind,split", [("bpe", "docs:0.1"), ("char", "tail:0.1")])
def test_transformers_scores_the_held_out_text_as_the_engine(rt, tmp_path, kind, split):
    mc = ModelConfig(d_model=32, n_layer=2, n_head=2, context_length=32, vocab_size=400)
    how, f = split.split(":")
    tc = TrainConfig(pretrain_steps=30, tune_steps=0, batch_size=8, learning_rate=5e-3,
                     eval_interval=1000, sample_interval=0, evaluate_recall=False,
                     val_split=how, val_fraction=float(f))
    s = create_session(mc, tc, TEXT, None, tokenizer_kind=kind, runtime=rt)
    for _ in s.train():
        pass
    ours = s.pretrain_val()     # the periodic validation: all of a text this small
    held = HELD_OUT[split]

    folder = export_session(s, tmp_path / "model")
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = transformers.AutoTokenizer.from_pretrained(folder)(held).input_ids   # BOS first
    nats, tokens = 0.0, 0
    with torch.no_grad():
        for x, y in windows(ids, mc.context_length):
            logits = model(torch.tensor([x])).logits[0].double()
            nats += torch.nn.functional.cross_entropy(
                logits, torch.tensor(y), ignore_index=-1, reduction="sum").item()
            tokens += sum(t >= 0 for t in y)
    n_bytes = len(held.encode("utf-8"))
    assert ours.loss == pytest.approx(nats / tokens, rel=1e-4)
    assert ours.bpb == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-4)
    assert ours.tokens == tokens == len(ids) - 1 and ours.n_bytes == n_bytes
    assert np.isfinite(ours.loss) and ours.loss < math.log(s.tokenizer.vocab_size)

    phases = []
    s.monitor.on_phase = lambda *a: phases.append(a[0])
    final = final_validation(s)          # what a run reports at its end: the same text
    assert "final validation" in phases
    assert (final.loss, final.bpb, final.n_bytes) == pytest.approx((ours.loss, ours.bpb, n_bytes))
