"""The kernel tests again under Oclgrind, an OpenCL simulator that reports out-of-bounds
accesses, data races and API misuse (docs/DESIGN.md; issue 7). Zero reports are allowed.

Oclgrind comes from Debian's `oclgrind` package (.ci/run installs it). Without it this test
skips, unless LLM_STUDIO_REQUIRE_OCLGRIND=1 (set by CI), where a missing Oclgrind fails.
Oclgrind's experimental uninitialized-value plugin is not used: with it on, correct kernels
(rope_forward) returned different results, so its reports cannot be trusted here.
Oclgrind presents itself as a GPU, so this also exercises the GPU work-group sizes.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ICD_LIBS = ["/usr/lib/oclgrind/liboclgrind-rt-icd.so", "/usr/lib/x86_64-linux-gnu/liboclgrind-rt-icd.so",
            "/usr/local/lib/liboclgrind-rt-icd.so"]
REPORT = re.compile(r"Invalid (read|write)|data race|Uninitialized|Invalid .* argument|"
                    r"Oclgrind - |work-group divergence|out of bounds", re.I)
ROOT = Path(__file__).resolve().parent.parent


# The awkward shapes of every kernel (odd sizes, batch 1, T=1), grouped-query attention
# (9 heads / 3 kv, 6 / 1) and KV-cache decoding (one prompt length, multi-head and grouped:
# each simulated decode run takes ~1.5 minutes). Kernel variants of other devices run too
# (test fixtures force them): the CPU's float8/float16 GEMMs and register-blocked attention
# (1-37-2-40: head_dim 40 takes its vector pairs, single vectors and scalar tail), and the
# GPU's tiled kernels (kernels/attention_flash.cl: T 1, T 65 across 64-row tiles, groups of 2;
# attention.cl's one-row kernels, which run where a small local memory does not hold the flash
# tiles: "12-mixed"); the blocked kernels' transposed rows in __local memory (every blocked
# test whose rows fit Oclgrind's 32 KiB) and in the scratch ("rows_in_scratch"), and a forward
# shared by several work-items per head ("splits_agree"); AdamW with bfloat16 moments, both forms. Each term is a pytest -k expression that must select a test of FILES.
FILES = ("tests/test_kernels.py", "tests/test_attention.py", "tests/test_attention_gemm.py",
         "tests/test_decode.py", "tests/test_dropout.py", "tests/test_gemm_packed.py",
         "tests/test_attention_flash.py")
CHOSEN = ("1-1-1", "7-13", "37-50", "2-5-3-4", "1-19-2-6", "2-7-11-9", "1-17-2-6", "13-31",
          "9-300", "1000", "nonfinite", "residual", "kv_cache and 5", "2-33-2-10",
          "split_launches", "same_mask and 7-0.1", "1-37-2-40", "2-5-6-4-1", "1-1-9-2-3",
          "2-7-6-4-1", "kv_heads_equal", "flash_edges and 1-1-2-16-1",
          "flash_edges and 2-65-4-16-2", "runs_the_flash", "small_local_memory and 12-mixed",
          "matvec and 2-33-257", "rows_in_scratch", "splits_agree and 5-",
          "bf16_moments and 17")


def collected_ids() -> list[str]:
    """The node ids of FILES' tests as pytest collects them (no device needed)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *FILES], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def matches(term: str, node_id: str) -> bool:
    """Whether `pytest -k term` selects the test `node_id`: each name in the expression is a
    case-insensitive substring of a part of the id (its folder, file or test name)."""
    from _pytest.mark.expression import Expression  # the parser pytest's -k itself uses
    parts = node_id.replace("::", "/").split("/")
    return Expression.compile(term).evaluate(
        lambda name, **_: any(name.lower() in p.lower() for p in parts))


def selection(ids: list[str], chosen=CHOSEN) -> str:
    """The -k expression of the chosen terms. Raises AssertionError naming each term that
    selects no test of `ids` (a typo or a renamed test used to select nothing, silently)."""
    idle = [term for term in chosen if not any(matches(term, i) for i in ids)]
    assert not idle, (f"the Oclgrind selection terms {idle} match no test in {FILES}: fix them "
                      "to name the renamed tests (or drop them)")
    return " or ".join(f"({term})" for term in chosen)


@pytest.fixture(scope="module")
def ids():
    return collected_ids()


def test_every_chosen_term_selects_a_test(ids):
    """Runs without Oclgrind: each term of the selection names a test that exists."""
    for term in CHOSEN:
        assert sum(matches(term, i) for i in ids) >= 1, term
    assert selection(ids).count(" or ") == len(CHOSEN) - 1


def test_a_term_that_selects_nothing_fails_the_selection(ids):
    with pytest.raises(AssertionError, match=r"\['test_matmul_forwrd'\] match no test"):
        selection(ids, CHOSEN + ("test_matmul_forwrd",))
    with pytest.raises(AssertionError, match="nonfinite and 1-1-1"):
        selection(ids, ("nonfinite and 1-1-1",))      # each name matches; together nothing
    assert matches("kv_cache and 5", "tests/test_decode.py::test_kv_cache[5-1]")
    assert not matches("kv_cache and 5", "tests/test_decode.py::test_kv_cache[7-1]")


def _icd_lib():
    return next((p for p in ICD_LIBS if os.path.exists(p)), None)


def test_kernels_under_oclgrind_have_no_reports(tmp_path, ids):
    lib = _icd_lib()
    if lib is None:
        if os.environ.get("LLM_STUDIO_REQUIRE_OCLGRIND") == "1":
            pytest.fail("Oclgrind is required here but not installed (apt-get install oclgrind)")
        pytest.skip("Oclgrind is not installed (Debian: apt-get install oclgrind)")
    (tmp_path / "oclgrind.icd").write_text(lib + "\n")
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path), LLM_STUDIO_TEST_DEVICE="Oclgrind",
               OCLGRIND_DATA_RACES="1", OCLGRIND_CHECK_API="1")
    subset = selection(ids)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider",
         *FILES, "-k", subset],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    out = proc.stdout + proc.stderr
    # pyopencl probes device properties that OpenCL 1.2 lacks; Oclgrind's API checker reports
    # each probe as clGetDeviceInfo CL_INVALID_VALUE. Those are queries, not kernel faults.
    out = re.sub(r"Oclgrind - OpenCL runtime error detected\s+Function: clGetDeviceInfo\s+"
                 r"Error:\s+CL_INVALID_VALUE\s+For argument 'param_name'", "", out)
    reports = [line for line in out.splitlines() if REPORT.search(line)]
    assert proc.returncode == 0, out[-4000:]
    assert re.search(r"\d+ passed", out), out[-2000:]
    assert "Oclgrind" in subprocess.run(
        [sys.executable, "-c", "from opencl_llm_studio.engine.opencl.runtime import Runtime; print(Runtime('Oclgrind').info.name)"],
        cwd=ROOT, env=env, capture_output=True, text=True).stdout
    assert not reports, "\n".join(reports[:40])
