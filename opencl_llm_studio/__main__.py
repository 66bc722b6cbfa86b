"""`python -m opencl_llm_studio ARGS`: the `llm-studio` command (the desktop bundle's entry too)."""

import sys

from opencl_llm_studio.studio.cli import main

if __name__ == "__main__":
    sys.exit(main())
