"""Issue 20, "The text as written": the pretraining stream is the text itself, so a model
trained on text with blank lines writes blank lines (the old stream, [BOS] + paragraph + [EOS]
per paragraph, never showed it one: generation stopped at the paragraph's end)."""

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.generation.sampling import SamplingParams
from opencl_llm_studio.engine.training.opening import create_session

BLOCK = "def f():\n    pass\n\n"   # code-like: a blank line after every block


def test_a_model_trained_on_blank_lines_writes_them(rt):
    mc = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=32, vocab_size=512)
    tc = TrainConfig(pretrain_steps=120, tune_steps=0, batch_size=8, learning_rate=1e-2,
                     warmup_steps=10, eval_interval=1000, sample_interval=0,
                     evaluate_recall=False, val_fraction=0.0)
    s = create_session(mc, tc, BLOCK * 200, None, tokenizer_kind="char", runtime=rt)
    for _ in s.train():
        pass
    assert s.last_loss < 0.2, s.last_loss   # the text is periodic: learned, not guessed
    tok = s.tokenizer
    ids = s.generate_ids([tok.bos_id] + tok.encode("def f():\n    pass"), 30,
                         SamplingParams(greedy=True))
    out = tok.decode(ids)
    assert out.startswith("\n\n") and "pass\n\n" in out, repr(out)   # a blank line, twice
    assert s.last_finish == "length"   # no </s>: a paragraph's end is not the text's end
