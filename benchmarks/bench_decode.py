"""Decode speed: KV-cache decoding against recomputing the whole window for every token.

Both paths run greedily from the same prompt on the same random-weight model, alternately,
and must produce the same tokens. Usage:
    python benchmarks/bench_decode.py [--device D] [--d-model 128 --n-layer 4 --n-head 4
                                       --context-length 64] [--tokens 48] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.opencl.runtime import Runtime  # noqa: E402
from opencl_llm_studio.engine.generation.sampling import SamplingParams  # noqa: E402
from opencl_llm_studio.engine.training.opening import create_session # noqa: E402
from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default=None)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--context-length", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    rt = Runtime(a.device)
    mc = ModelConfig(d_model=a.d_model, n_layer=a.n_layer, n_head=a.n_head,
                     context_length=a.context_length)
    s = create_session(mc, TrainConfig(), read_text(bundled_corpus("pretrain")),
                       read_text(bundled_corpus("tune")), runtime=rt)
    prompt = [s.tokenizer.bos_id] + s.tokenizer.encode("The human heart")
    greedy = SamplingParams(greedy=True)
    n = min(a.tokens, a.context_length - len(prompt))
    times = {True: [], False: []}
    outs = {}
    for _ in range(a.repeats + 1):  # the first round warms up (kernel compile, allocation)
        for kv in (True, False):
            t0 = time.perf_counter()
            outs[kv] = s.generate_ids(prompt, n, greedy, kv_cache=kv)
            times[kv].append(time.perf_counter() - t0)
    assert outs[True] == outs[False], "KV-cache and recompute decoding disagree"
    n_out = len(outs[True])
    print(f"device: {rt.info.name}; d_model {a.d_model}, n_layer {a.n_layer}, n_head {a.n_head}, "
          f"context {a.context_length}; {n_out} tokens after a {len(prompt)}-token prompt, "
          f"median of {a.repeats}")
    print("| decoding | tokens/s | ms/token |")
    print("|---|---|---|")
    for kv, name in ((True, "KV cache"), (False, "recompute window")):
        med = statistics.median(times[kv][1:])
        print(f"| {name} | {n_out / med:,.0f} | {1000 * med / max(n_out, 1):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
