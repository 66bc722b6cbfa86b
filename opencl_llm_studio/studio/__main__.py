from opencl_llm_studio.studio.cli import main
import sys
sys.exit(main())
