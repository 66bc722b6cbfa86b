"""The compiler's output of a kernel build goes to the log, not to the person (issue 33: every
command printed pyopencl's CompilerWarning with a line of pyopencl's own source); a failed
build still says what the compiler said."""

import logging
import warnings

import pytest

from opencl_llm_studio.engine.errors import DeviceError
from opencl_llm_studio.engine.opencl.runtime import Built

NOISY = "#warning about something harmless\n__kernel void f(__global float *a) { a[0] = 1.0f; }\n"


def test_compiler_warnings_go_to_the_log_not_the_terminal(rt, caplog):
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # any warning reaching the caller fails the test
        with caplog.at_level(logging.DEBUG, logger="opencl_llm_studio"):
            built = Built(rt, NOISY, [])
    assert built.kernel("f") is not None
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "compiler output" in logged and "harmless" in logged, logged


def test_a_failed_build_says_what_the_compiler_said(rt):
    with pytest.raises(DeviceError) as e:
        Built(rt, "__kernel void f(__global float *a) { a[0] = undefined_name; }\n", [])
    assert "undefined_name" in e.value.hint
