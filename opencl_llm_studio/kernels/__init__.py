"""OpenCL C sources, one .cl file per layer family (docs/DESIGN.md). Data only."""
