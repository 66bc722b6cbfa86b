"""Shared fixtures. Qt runs offscreen in tests; one OpenCL runtime per session (compiles once)."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def rt():
    """The test device: LLM_STUDIO_TEST_DEVICE, else the default device (PoCL CPU here)."""
    from engine.runtime import Runtime
    return Runtime(os.environ.get("LLM_STUDIO_TEST_DEVICE") or None)
