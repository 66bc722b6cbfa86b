"""Training step time of several source trees of the engine, side by side (issue 13).

Each tree (a checkout or `git archive` of some commit) runs in its own child process with
PYTHONPATH pointing at it, so two versions of the kernels can be compared on one busy machine:
the trees take turns, round after round, and each round times `--steps` steps of every tree, so
load drift lands on all of them. Reports the median ms/step of every (config, tree) over all
rounds. Environment variables after `--env` (NAME=VALUE) go to every child (e.g.
LLM_STUDIO_VECTOR_WIDTH=8, or PoCL options).

    git archive bc906ee | tar -x -C /tmp/old
    PYTHONPATH=. python benchmarks/bench_versions.py --trees /tmp/old,. --configs S,T1024
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

# Run inside a child: config name, steps -> JSON list of per-step seconds (after 2 warm-ups).
CHILD = r"""
import json, sys, time
import numpy as np
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.opencl.runtime import Runtime
name, steps, spec = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
spec = dict(spec)
B = spec.pop("batch")
cfg = ModelConfig(**spec).validate()
rt = Runtime(None)
model = Model(rt, cfg, seed=0)
rng = np.random.default_rng(0)
times = []
for i in range(steps + 2):
    x = rng.integers(0, cfg.vocab_size, size=(B, cfg.context_length)).astype(np.int32)
    t0 = time.perf_counter()
    model.train_step(x, np.roll(x, -1, 1), 1e-3, TrainConfig())
    if i >= 2:
        times.append(time.perf_counter() - t0)
print(json.dumps(times))
"""

# The configurations (benchmarks/common.py and bench_attention.py), V512 unless given.
SPECS = {
    "S": dict(d_model=128, n_layer=4, n_head=4, context_length=64, batch=12),
    "M": dict(d_model=256, n_layer=4, n_head=8, context_length=128, batch=32),
    "L6T256": dict(d_model=256, n_layer=6, n_head=4, context_length=256, batch=8,
                   vocab_size=2048),
    "T1024": dict(d_model=128, n_layer=4, n_head=4, context_length=1024, batch=8),
}


def run_child(tree: str, name: str, steps: int, env: dict) -> list[float]:
    spec = {"vocab_size": 512, **SPECS[name]}
    full = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()), **env)
    out = subprocess.run([sys.executable, "-c", CHILD, name, str(steps), json.dumps(spec)],
                         cwd=tree, env=full, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise SystemExit(f"{tree} {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", required=True, help="comma-separated source trees")
    p.add_argument("--configs", default="S,M,L6T256,T1024", help=f"subset of {','.join(SPECS)}")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=3, help="timed steps per round and tree")
    p.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for every child")
    args = p.parse_args(argv)
    env = dict(e.split("=", 1) for e in args.env)
    trees = args.trees.split(",")
    for name in args.configs.split(","):
        times = {t: [] for t in trees}
        for r in range(args.rounds):
            for t in (trees if r % 2 == 0 else trees[::-1]):
                times[t] += run_child(t, name, args.steps, env)
                print(f"  {name} round {r + 1} {t}: {1e3 * np.median(times[t]):.1f} ms/step",
                      file=sys.stderr, flush=True)
        cells = ", ".join(f"{t}: {1e3 * np.median(v):.1f} ms/step (n={len(v)})"
                          for t, v in times.items())
        print(f"{name}: {cells}", flush=True)


if __name__ == "__main__":
    main()
