"""Throughput harness: the engine against the same model in PyTorch (see RESULTS.md)."""
