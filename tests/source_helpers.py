"""Reading the project's own sources and command line in tests (tests/test_one_source.py,
tests/test_limits.py): where a fact is spelled, and what a subcommand's arguments are."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("opencl_llm_studio/engine", "opencl_llm_studio/studio", "opencl_llm_studio/resources",
           "benchmarks")


def files_matching(pattern: str, dirs=PRODUCT + ("tests",), exclude: str | None = None) -> list[str]:
    """Python files under dirs whose text matches the regex, relative to the repository root;
    `exclude`: a file to leave out (a test passes its own __file__, whose rules spell the fact)."""
    rx = re.compile(pattern)
    skip = Path(exclude).resolve() if exclude else None
    return sorted(str(p.relative_to(ROOT)) for d in dirs for p in (ROOT / d).rglob("*.py")
                  if p.resolve() != skip and rx.search(p.read_text(encoding="utf-8")))


def subcommand_actions(name: str) -> dict:
    """dest -> argparse action of `llm-studio NAME`."""
    from opencl_llm_studio.studio.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {a.dest: a for a in sub.choices[name]._actions}
