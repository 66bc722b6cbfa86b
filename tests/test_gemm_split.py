"""The split-K plan of the tiled GPU GEMM's weight gradients (engine.opencl.gemm_plan.k_slices), on the
H200's figures (132 compute units, 2 groups each): products whose tiles leave a wave partly
empty are split until the groups fill whole waves (measured: benchmarks/RESULTS.md)."""

import pytest

from engine.opencl.gemm_plan import GROUPS_PER_CU, k_slices

WAVE = GROUPS_PER_CU * 132  # an H200's 132 compute units


@pytest.mark.parametrize("n_tiles,K", [(192, 8192), (108, 8192), (36, 8192), (9, 16384),
                                       (12, 16384), (1, 4096), (24, 768), (3, 768)])
def test_split_fills_waves_and_keeps_slices_deep(n_tiles, K):
    wave = WAVE
    s = k_slices(wave, n_tiles, K)
    assert 1 <= s <= max(1, K // 256)  # every slice at least 256 deep
    groups = n_tiles * s
    # the last wave is at least 80% full, or the split is as deep as K allows
    fill = groups / (-(-groups // wave) * wave)
    assert fill >= 0.8 or s == max(1, K // 256), (s, fill)


def test_a_wave_and_a_bit_is_split_into_whole_waves():
    # gate_up dW of XL (4096 x 768, K 8192): 192 tiles; unsplit, 27% of the only wave idles
    # (it ran at 66% of cuBLAS); in 4 slices, 768 groups fill 2.9 waves
    assert k_slices(WAVE, 192, 8192) == 4


def test_no_split_when_k_is_short():
    assert k_slices(WAVE, 5, 300) == 1
    assert k_slices(WAVE, 5, 0) == 1
