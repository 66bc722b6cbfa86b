"""OpenCL LLM Studio: train a small Llama-style language model from scratch on any OpenCL device.

The one import package the distribution `opencl-llm-studio` installs. Its parts (docs/DESIGN.md):
engine (the Qt-free trainer), studio (the window and the `llm-studio` command), kernels (OpenCL C
sources, package data) and resources (the bundled corpora and icon, package data).
"""

# The one place the version is written: pyproject.toml reads it (dynamic), `llm-studio --version`
# prints it, and the desktop bundle (which carries no package metadata) has it too.
__version__ = "0.2.0"
