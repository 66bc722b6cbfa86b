/* Matrix products for CPUs with 16-float SIMD registers (AVX-512: the device's native float
 * vector width is 16): the register-blocked scheme of matmul.cl with explicit float16 vectors.
 * One work-item computes a VM_TM x 32 tile as VM_TM x 2 float16 accumulators (16 zmm
 * registers), every loop unrolled. PoCL's code for matmul.cl's scalar loops uses 8-float ymm
 * registers only; written with float16 the same products ran ~2x faster on the 2-core AMD EPYC
 * (Zen 5) here (~480 vs ~240 GFLOP/s; measured FMA peak 540). With 8-float SIMD (AVX2) the 16
 * accumulators would not fit the 16 registers, so the engine uses matmul.cl there.
 * Same contracts as matmul.cl; full tiles take the vector path, edge tiles the scalar one.
 * Compiled for CPU devices only: GPUs never use them, and a GPU compiler that rejected the
 * unaligned float16 type would otherwise fail the whole program. */

#ifdef CPU_DEVICE

#define VM_TM 8
#define VM_TN 32

/* Unaligned float16 loads and stores: rows of B and C start at any float. */
typedef float16 __attribute__((aligned(4))) float16_u;

/* The body of every kernel below, as a macro rather than an inline function: through an inline
 * helper PoCL ran the same loop at ~250 instead of ~470 GFLOP/s (measured here). For the tile
 * at (m0, n0): C[m * ldc + n] = alpha * sum over kb <= k < ke of A(m, k) B(k, n)
 * + beta * C[m * ldc + n], A(m, k) = A[m * a_rs + k * a_cs], rows of B b_rs apart. Full tiles
 * use float16 accumulators; edge tiles a scalar loop. The kernel has returned for tiles outside
 * (M, N). */
#define VEC_TILE(C, ldc, A, a_rs, a_cs, B, b_rs, M, N, kb, ke, alpha, beta, m0, n0)           \
    if (m0 + VM_TM <= M && n0 + VM_TN <= N) {                                                  \
        float16 acc[VM_TM][2];                                                                 \
        _Pragma("unroll") for (int i = 0; i < VM_TM; i++) {                                    \
            acc[i][0] = (float16)(0.0f);                                                       \
            acc[i][1] = (float16)(0.0f);                                                       \
        }                                                                                      \
        for (int k = kb; k < ke; k++) {                                                        \
            const __global float* bp = B + (size_t)k * (b_rs) + n0;                            \
            const float16 b0 = *(const __global float16_u*)bp;                                 \
            const float16 b1 = *(const __global float16_u*)(bp + 16);                         \
            _Pragma("unroll") for (int i = 0; i < VM_TM; i++) {                                \
                const float a = A[(size_t)(m0 + i) * (a_rs) + (size_t)k * (a_cs)];             \
                acc[i][0] = a * b0 + acc[i][0];                                                \
                acc[i][1] = a * b1 + acc[i][1];                                                \
            }                                                                                  \
        }                                                                                      \
        _Pragma("unroll") for (int i = 0; i < VM_TM; i++) {                                    \
            __global float* c = C + (size_t)(m0 + i) * (ldc) + n0;                             \
            float16 c0 = (alpha) * acc[i][0], c1 = (alpha) * acc[i][1];                        \
            if ((beta) != 0.0f) {                                                              \
                c0 += (beta) * *(__global float16_u*)c;                                        \
                c1 += (beta) * *(__global float16_u*)(c + 16);                                 \
            }                                                                                  \
            *(__global float16_u*)c = c0;                                                      \
            *(__global float16_u*)(c + 16) = c1;                                               \
        }                                                                                      \
    } else {                                                                                   \
        for (int i = 0; i < min(VM_TM, M - m0); i++)                                           \
            for (int j = 0; j < min(VM_TN, N - n0); j++) {                                     \
                float s = 0.0f;                                                                \
                for (int k = kb; k < ke; k++)                                                  \
                    s += A[(size_t)(m0 + i) * (a_rs) + (size_t)k * (a_cs)]                     \
                         * B[(size_t)k * (b_rs) + n0 + j];                                     \
                __global float* c = C + (size_t)(m0 + i) * (ldc) + n0 + j;                     \
                *c = (beta) == 0.0f ? (alpha) * s : (beta) * *c + (alpha) * s;                 \
            }                                                                                  \
    }

#define VEC_START                                                                              \
    const int n0 = get_global_id(0) * VM_TN, m0 = get_global_id(1) * VM_TM;                    \
    if (n0 >= N || m0 >= M) return;

/* K slice [k0, k1) of C = beta*C + A(M,K) @ B(K,N): the launcher walks K in slices (beta 1
 * after the first) so the 32-column panel of B stays in cache (a 2048-deep panel did not:
 * 174 vs ~450 GFLOP/s on 2048^3 here). */
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

/* bmm_blocked (matmul.cl) in float16 vectors: the batched strided products of attention. */
__kernel void bmm_vec(__global float* C, __global const float* A, __global const float* B,
                      int M, int N, int K, int H, int a_off, int a_rs, int a_cs, int a_bs,
                      int a_hs, int b_off, int b_rs, int b_bs, int b_hs, int c_off, int c_rs,
                      int c_bs, int c_hs, float alpha, float beta, int causal) {
    VEC_START
    BMM_SLICE(VM_TM)
    VEC_TILE(Cz, c_rs, Az, a_rs, a_cs, Bz, b_rs, M, N, kb, ke, alpha, beta, m0, n0)
}

#endif  /* CPU_DEVICE */
