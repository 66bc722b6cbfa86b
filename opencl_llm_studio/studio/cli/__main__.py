import sys

from opencl_llm_studio.studio.cli import main

sys.exit(main())
