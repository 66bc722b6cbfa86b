"""Cold start: seconds from process start to the end of the first training step (issue 6).

Run it as a fresh process each time, e.g.
    python benchmarks/cold_start.py                       # PoCL kernel cache as it is (warm)
    POCL_KERNEL_CACHE=0 python benchmarks/cold_start.py   # every kernel compiled again
Prints the split: imports, tokenizer + data + device program, first step.
"""

import time

T0 = time.perf_counter()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.training.opening import create_session # noqa: E402
from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text  # noqa: E402

t_import = time.perf_counter()
s = create_session(ModelConfig(), TrainConfig(sample_interval=0, evaluate_recall=False),
                   read_text(bundled_corpus("pretrain")), read_text(bundled_corpus("tune")))
t_setup = time.perf_counter()
next(s.train())
t_step = time.perf_counter()
print(f"imports {t_import - T0:.2f} s, tokenizer+data+program {t_setup - t_import:.2f} s, "
      f"first step {t_step - t_setup:.2f} s; total to first step {t_step - T0:.2f} s "
      f"(device {s.rt.info.name})")
