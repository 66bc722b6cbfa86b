"""The desktop bundle's entry point: the `llm-studio` command (no argument: the window)."""

import sys

from opencl_llm_studio.studio.cli import main

if __name__ == "__main__":
    sys.exit(main())
