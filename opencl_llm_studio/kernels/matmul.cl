/* Matrix products for linear layers, forward and backward (docs/DESIGN.md "register-blocked GEMM").
 *
 * Two register-blocked micro-kernels, one work-item per MM_TM x MM_TN output tile, no local
 * memory, every loop unrolled so the compiler keeps the tile in registers and vectorises the
 * contiguous row of B:
 *   matmul_nn:  C(M,N) = beta*C + A(M,K)   @ B(K,N)     A, B, C row-major
 *   matmul_tn:  C(M,N) = beta*C + A(K,M)^T @ B(K,N)     (A stored K x M)
 * The third form a linear layer needs, X @ W^T, is a transpose of W into scratch plus matmul_nn:
 * the transpose moves N*K floats, the product does 2*M*N*K flops (for a few rows of X, as in
 * decoding, kernels/matvec.cl reads W in place instead).
 * Edge tiles take a guarded path, so no size needs to be a multiple of the tile.
 */

#if !defined(MM_TM) || !defined(MM_TN)
#error "matmul.cl is built with -DMM_TM and -DMM_TN (engine/opencl/gemm_tiles.py)"
#endif

/* C tile = beta * C + acc; with beta 0, C is never read (it may be uninitialised). */
inline void store_full_tile(__global float* C, float acc[MM_TM][MM_TN], int m0, int n0, int N,
                            float beta) {
    #pragma unroll
    for (int i = 0; i < MM_TM; i++) {
        __global float* c = C + (size_t)(m0 + i) * N + n0;
        if (beta == 0.0f) {
            #pragma unroll
            for (int j = 0; j < MM_TN; j++) c[j] = acc[i][j];
        } else {
            #pragma unroll
            for (int j = 0; j < MM_TN; j++) c[j] = beta * c[j] + acc[i][j];
        }
    }
}

/* The same for an edge tile of mt x nt valid elements. */
inline void store_edge_tile(__global float* C, float acc[MM_TM][MM_TN], int m0, int n0, int mt,
                            int nt, int N, float beta) {
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < nt; j++) {
            __global float* c = C + (size_t)(m0 + i) * N + n0 + j;
            *c = beta == 0.0f ? acc[i][j] : beta * *c + acc[i][j];
        }
}

/* The body of every product kernel below, a macro rather than an inline function (through an
 * inline helper with strides PoCL ran matmul_nn / matmul_tn 15-20% slower, measured here;
 * the macro expands to the same code as writing the loop out). For the tile at (m0, n0):
 * C[m * ldc + n] = alpha * sum over kb <= k < ke of A(m, k) B(k, n) + beta * C[m * ldc + n],
 * with A(m, k) = A[m * a_rs + k * a_cs] and B's rows b_rs apart; the kernels pass literal
 * strides where they have them. Full tiles keep MM_TM x MM_TN accumulators in registers;
 * edge tiles take a guarded loop. */
#define BLOCKED_TILE(C, ldc, A, a_rs, a_cs, B, b_rs, M, N, kb, ke, alpha, beta, m0, n0)       \
    float acc[MM_TM][MM_TN];                                                                   \
    _Pragma("unroll") for (int i = 0; i < MM_TM; i++)                                          \
        _Pragma("unroll") for (int j = 0; j < MM_TN; j++) acc[i][j] = 0.0f;                     \
    const bool full = m0 + MM_TM <= M && n0 + MM_TN <= N;                                      \
    if (full) {                                                                                \
        for (int k = kb; k < ke; k++) {                                                        \
            const __global float* bp = B + (size_t)k * (b_rs) + n0;                            \
            float av[MM_TM], bv[MM_TN];                                                        \
            _Pragma("unroll") for (int i = 0; i < MM_TM; i++)                                  \
                av[i] = A[(size_t)(m0 + i) * (a_rs) + (size_t)k * (a_cs)];                     \
            _Pragma("unroll") for (int j = 0; j < MM_TN; j++) bv[j] = bp[j];                   \
            _Pragma("unroll") for (int i = 0; i < MM_TM; i++)                                  \
                _Pragma("unroll") for (int j = 0; j < MM_TN; j++)                              \
                    acc[i][j] = av[i] * bv[j] + acc[i][j];                                     \
        }                                                                                      \
    } else {                                                                                   \
        for (int k = kb; k < ke; k++)                                                          \
            for (int i = 0; i < min(MM_TM, M - m0); i++) {                                     \
                const float a = A[(size_t)(m0 + i) * (a_rs) + (size_t)k * (a_cs)];             \
                for (int j = 0; j < min(MM_TN, N - n0); j++)                                   \
                    acc[i][j] += a * B[(size_t)k * (b_rs) + n0 + j];                           \
            }                                                                                  \
    }                                                                                          \
    if ((alpha) != 1.0f)                                                                       \
        _Pragma("unroll") for (int i = 0; i < MM_TM; i++)                                      \
            _Pragma("unroll") for (int j = 0; j < MM_TN; j++) acc[i][j] *= (alpha);            \
    if (full) store_full_tile(C, acc, m0, n0, ldc, beta);                                      \
    else store_edge_tile(C, acc, m0, n0, min(MM_TM, M - m0), min(MM_TN, N - n0), ldc, beta);

__kernel void matmul_nn(__global float* C, __global const float* A, __global const float* B,
                        int M, int N, int K, float beta) {
    const int n0 = get_global_id(0) * MM_TN, m0 = get_global_id(1) * MM_TM;
    if (n0 >= N || m0 >= M) return;
    BLOCKED_TILE(C, N, A, K, 1, B, N, M, N, 0, K, 1.0f, beta, m0, n0)
}

/* Only rows k0 <= k < k1 of A and B are summed: the launcher walks a long K (= B*T for a
 * weight gradient) in slices with beta = 1, so the slice of A and B stays in cache while
 * every tile passes over it (benchmarks/results/tuning-timings.md). */
__kernel void matmul_tn(__global float* C, __global const float* A, __global const float* B,
                        int M, int N, int K, float beta, int k0, int k1) {
    const int n0 = get_global_id(0) * MM_TN, m0 = get_global_id(1) * MM_TM;
    if (n0 >= N || m0 >= M) return;
    BLOCKED_TILE(C, N, A, 1, M, B, N, M, N, k0, k1, 1.0f, beta, m0, n0)
}

/* out(C, R) = in(R, C)^T, one work-item per 4x4 block. */
__kernel void transpose(__global float* out, __global const float* in, int R, int C) {
    const int c0 = get_global_id(0) * 4, r0 = get_global_id(1) * 4;
    if (c0 >= C || r0 >= R) return;
    const int rt = min(4, R - r0), ct = min(4, C - c0);
    for (int i = 0; i < rt; i++)
        for (int j = 0; j < ct; j++)
            out[(size_t)(c0 + j) * R + r0 + i] = in[(size_t)(r0 + i) * C + c0 + j];
}

/* Batched strided product for attention (CPU), one MM_TM x MM_TN tile per work-item and one
 * (b, h) per index z = b * H + h of the third dimension:
 *   C[z](M,N) = alpha * A[z](M,K) @ B[z](K,N) + beta * C[z],
 *   A[z](m, k) = A[a_off + b * a_bs + h * a_hs + m * a_rs + k * a_cs], B[z](k, n) likewise with
 *   unit column stride: B[b_off + b * b_bs + h * b_hs + k * b_rs + n]
 * (rows of B and C contiguous, so the MM_TN-wide row vectorises; the launcher transposes K or
 * V first where a product needs their transpose). causal: a CAUSAL_* mode (common.h). */
__kernel void bmm_blocked(__global float* C, __global const float* A, __global const float* B,
                          int M, int N, int K, int H, int a_off, int a_rs, int a_cs, int a_bs,
                          int a_hs, int b_off, int b_rs, int b_bs, int b_hs, int c_off, int c_rs,
                          int c_bs, int c_hs, float alpha, float beta, int causal) {
    const int n0 = get_global_id(0) * MM_TN, m0 = get_global_id(1) * MM_TM;
    if (n0 >= N || m0 >= M) return;
    BMM_SLICE(MM_TM)
    BLOCKED_TILE(Cz, c_rs, Az, a_rs, a_cs, Bz, b_rs, M, N, kb, ke, alpha, beta, m0, n0)
}

/* out[z](cols, rows) = in[z](rows, cols)^T for z = b * H + h, with in[z](r, c) at
 * in[i_off + b * i_bs + h * i_hs + r * i_rs + c]; out is dense (B*H, cols, rows). Lays K or V
 * of each head out as (head_dim, T) for bmm_blocked. One work-item per 4x4 block. */
__kernel void transpose_heads(__global float* out, __global const float* in, int rows, int cols,
                              int H, int i_off, int i_rs, int i_bs, int i_hs) {
    const int c0 = get_global_id(0) * 4, r0 = get_global_id(1) * 4, z = get_global_id(2);
    if (c0 >= cols || r0 >= rows) return;
    const __global float* src = in + i_off + (size_t)(z / H) * i_bs + (size_t)(z % H) * i_hs;
    __global float* dst = out + (size_t)z * rows * cols;
    const int rt = min(4, rows - r0), ct = min(4, cols - c0);
    for (int i = 0; i < rt; i++)
        for (int j = 0; j < ct; j++)
            dst[(size_t)(c0 + j) * rows + r0 + i] = src[(size_t)(r0 + i) * i_rs + c0 + j];
}
