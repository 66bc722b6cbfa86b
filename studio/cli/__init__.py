"""The `llm-studio` command line (Qt-free; tests/test_architecture.py checks that `runs`, `plot`
and `train` never load Qt):

  parser.py   the arguments and main(): parse, run the command, errors -> message and exit 2
  options.py  train options -> ModelConfig / TrainConfig (defaults are the engine's)
  train.py    `train` (new, --continue, --continue-from)
  models.py   `devices`, `sample`, `chat`, `tokenize`, `export`
  hf.py       `export --format hf`, `import`, `scale-out`
  runs.py     `runs`, `plot`, and train's health warnings / TensorBoard
  inputs.py   argument types (ranges); progress.py: the progress line

Run folders and what a model path holds: studio.run_folder.
"""

from studio.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
