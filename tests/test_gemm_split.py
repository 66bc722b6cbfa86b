"""The split-K plan of the tiled GPU GEMM (engine.opencl.gemm_plan.k_slices, GemmPlan.launch_for), on
the H200's figures (132 compute units, 2 groups each): products whose tiles leave a wave partly
empty are split until the groups fill whole waves (measured: benchmarks/RESULTS.md)."""

import pytest

from opencl_llm_studio.engine.opencl.gemm_plan import GROUPS_PER_CU, k_slices

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


def _h200_plan():
    from opencl_llm_studio.engine.opencl.gemm_plan import DeviceLimits, default_plan
    return default_plan(DeviceLimits(is_cpu=False, is_intel_cpu_runtime=False, compute_units=132,
                                     local_mem_bytes=48 * 1024, max_work_group_size=1024,
                                     native_float_width=1))


def test_nn_is_split_where_its_tiles_leave_the_gpu_idle():
    # a tied output head's dX per chunk of 256 rows (SmolLM2: 576 x vocabulary 49152): 36 tiles
    # of 64 on 132 compute units; unsplit it ran at 6.3 TFLOP/s on an H200
    launch = _h200_plan().launch_for("nn", 256, 576, 49152)
    tiles = -(-256 // launch.edge) * -(-576 // launch.edge)
    assert launch.grid[2] > 1 and tiles * launch.grid[2] >= 0.8 * WAVE
    assert launch.kslice * launch.grid[2] >= 49152 > launch.kslice * (launch.grid[2] - 1)


@pytest.mark.parametrize("M,N,K,edge", [
    (4096, 960, 576, 128),    # 256 groups of 128: 34% faster than 960 of 64 (H200)
    (4096, 576, 1536, 128),   # 160 tiles of 128 in 3 slices of K: 18% faster than 64s
    (4096, 576, 576, 64),     # 160 tiles of 128, K too short to split: 13% slower than 64s
    (768, 384, 128, 64)])     # config S: 18 tiles of 128
def test_nn_takes_big_tiles_where_their_groups_fill_most_of_a_wave(M, N, K, edge):
    assert _h200_plan().launch_for("nn", M, N, K).edge == edge


@pytest.mark.parametrize("M,N,K", [(8192, 768, 768), (8192, 768, 4096), (16384, 384, 1152),
                                   (8192, 4096, 768)])
def test_nn_filling_a_wave_is_not_split(M, N, K):
    # XL's and L's products (384 tiles of 128 and more): split in two they ran 2-12% slower
    launch = _h200_plan().launch_for("nn", M, N, K)
    assert launch.grid[2] == 1 and launch.kslice >= K
