/* Matrix products for CPUs with 8- or 16-float SIMD registers: the register-blocked scheme of
 * matmul.cl with explicit vectors of VEC_W floats (a -D option: engine/opencl/ops.py builds this file
 * per vector width, engine/opencl/runtime.py picks it from what the device reports).
 *   VEC_W 16 (AVX-512): one work-item computes an 8 x 32 tile as 8 x 2 float16 accumulators
 *     (16 of the 32 zmm registers). PoCL's code for matmul.cl's scalar loops uses 8-float ymm
 *     registers only; written with float16 the same products use all 16 lanes
 *     (benchmarks/results/tuning-timings.md).
 *   VEC_W 8 (AVX2): a 6 x 16 tile as 6 x 2 float8 accumulators: 12 of the 16 ymm registers,
 *     leaving room for the two rows of B and the broadcast element of A.
 * Same contracts as matmul.cl; full tiles take the vector path, edge tiles the scalar one.
 * Built only where the engine picks these kernels (CPUs; tests also run them under Oclgrind),
 * so a GPU compiler that rejected the unaligned vector type is never asked. */

/* VM_TM x VM_TN: the tile, -D options from engine/opencl/gemm_tiles.py (VM_TN a multiple of VEC_W) */
#if !defined(VM_TM) || !defined(VM_TN)
#error "matmul_vec.cl is built with -DVM_TM and -DVM_TN (engine/opencl/gemm_tiles.py)"
#endif
/* vm_float, vm_float_u: VEC_W floats (kernels/common.h) */

/* The body of every kernel below, as a macro rather than an inline function: through an inline
 * helper PoCL ran the same loop about half as fast (benchmarks/results/tuning-timings.md).
 * For the tile at (m0, n0): C[m * ldc + n] = alpha * sum over kb <= k < ke of A(m, k) B(k, n)
 * + beta * C[m * ldc + n], A(m, k) = A[m * a_rs + k * a_cs], rows of B b_rs apart. Full tiles
 * use vm_float accumulators; edge tiles a scalar loop. The kernel has returned for tiles outside
 * (M, N). */
#define VEC_TILE(C, ldc, A, a_rs, a_cs, B, b_rs, M, N, kb, ke, alpha, beta, m0, n0)                \
    if (m0 + VM_TM <= M && n0 + VM_TN <= N) {                                                      \
        vm_float acc[VM_TM][2];                                                                    \
        _Pragma("unroll") for (int i = 0; i < VM_TM; i++) {                                        \
            acc[i][0] = (vm_float)(0.0f);                                                          \
            acc[i][1] = (vm_float)(0.0f);                                                          \
        }                                                                                          \
        for (int k = kb; k < ke; k++) {                                                            \
            const __global float* bp = B + (size_t)k * (b_rs) + n0;                                \
            const vm_float b0 = *(const __global vm_float_u*)bp;                                   \
            const vm_float b1 = *(const __global vm_float_u*)(bp + VEC_W);                         \
            _Pragma("unroll") for (int i = 0; i < VM_TM; i++) {                                    \
                const float a = A[(size_t)(m0 + i) * (a_rs) + (size_t)k * (a_cs)];                 \
                acc[i][0] = a * b0 + acc[i][0];                                                    \
                acc[i][1] = a * b1 + acc[i][1];                                                    \
            }                                                                                      \
        }                                                                                          \
        _Pragma("unroll") for (int i = 0; i < VM_TM; i++) {                                        \
            __global float* c = C + (size_t)(m0 + i) * (ldc) + n0;                                 \
            vm_float c0 = (alpha) * acc[i][0], c1 = (alpha) * acc[i][1];                           \
            if ((beta) != 0.0f) {                                                                  \
                c0 += (beta) * *(__global vm_float_u*)c;                                           \
                c1 += (beta) * *(__global vm_float_u*)(c + VEC_W);                                 \
            }                                                                                      \
            *(__global vm_float_u*)c = c0;                                                         \
            *(__global vm_float_u*)(c + VEC_W) = c1;                                               \
        }                                                                                          \
    } else {                                                                                       \
        for (int i = 0; i < min(VM_TM, M - m0); i++)                                               \
            for (int j = 0; j < min(VM_TN, N - n0); j++) {                                         \
                float s = 0.0f;                                                                    \
                for (int k = kb; k < ke; k++)                                                      \
                    s += A[(size_t)(m0 + i) * (a_rs) + (size_t)k * (a_cs)]                         \
                         * B[(size_t)k * (b_rs) + n0 + j];                                         \
                __global float* c = C + (size_t)(m0 + i) * (ldc) + n0 + j;                         \
                *c = (beta) == 0.0f ? (alpha) * s : (beta) * *c + (alpha) * s;                     \
            }                                                                                      \
    }

#define VEC_START                                                                                  \
    const int n0 = get_global_id(0) * VM_TN, m0 = get_global_id(1) * VM_TM;                        \
    if (n0 >= N || m0 >= M) return;

/* K slice [k0, k1) of C = beta*C + A(M,K) @ B(K,N): the launcher walks K in slices (beta 1
 * after the first) so the 32-column panel of B stays in cache (a 2048-deep panel did not:
 * benchmarks/results/tuning-timings.md). */
__kernel void matmul_nn_vec(__global float* C, __global const float* A, __global const float* B,
                            int M, int N, int K, float beta, int k0, int k1) {
    VEC_START
    VEC_TILE(C, N, A, K, 1, B, N, M, N, k0, k1, 1.0f, beta, m0, n0)
}

/* K slice [k0, k1) of C = beta*C + A(K,M)^T @ B(K,N), as matmul_tn. */
__kernel void matmul_tn_vec(__global float* C, __global const float* A, __global const float* B,
                            int M, int N, int K, float beta, int k0, int k1) {
    VEC_START
    VEC_TILE(C, N, A, 1, M, B, N, M, N, k0, k1, 1.0f, beta, m0, n0)
}

