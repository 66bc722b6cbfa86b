"""The `llm-studio` command line (Qt-free; tests/test_architecture.py checks that `runs`, `plot`
and `train` never load Qt):

  parser.py   the arguments and main(): parse, run the command, errors -> message and exit 2
  options.py  train options -> ModelConfig / TrainConfig (defaults are the engine's)
  train.py    `train` (new, --continue, --continue-from)
  models.py   `devices`, `sample`, `chat`, `tokenize`, `export`
  hf.py       `export --format hf`, `import`, `scale-out`
  runs.py     `runs`, `plot`, and train's health warnings / TensorBoard
  inputs.py   argument types (ranges); progress.py: the progress line
  run_names.py  a plain run name is a run in the runs folder (the window's Runs table)

Run folders and what a model path holds: studio.run_folder.
"""

from __future__ import annotations

import argparse

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """`llm-studio` (studio.cli.parser.main). The command modules (numpy, the engine: about
    0.3 s) load here rather than when the package is imported, so a Ctrl-C while they load is a
    stop, exit 130, like one at any later phase, not a KeyboardInterrupt traceback."""
    try:
        from opencl_llm_studio.studio.cli.parser import main as run
    except KeyboardInterrupt:
        return 130
    return run(argv)


def build_parser() -> argparse.ArgumentParser:
    """The whole argument parser (studio.cli.parser.build_parser)."""
    from opencl_llm_studio.studio.cli.parser import build_parser as build
    return build()
