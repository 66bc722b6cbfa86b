"""OpenCL C sources, one .cl file per layer family (DESIGN.md). Data only."""
