/* Matrix products for linear layers, forward and backward (DESIGN.md "register-blocked GEMM").
 *
 * Two register-blocked micro-kernels, one work-item per MM_TM x MM_TN output tile, no local
 * memory, every loop unrolled so the compiler keeps the tile in registers and vectorises the
 * contiguous row of B:
 *   matmul_nn:  C(M,N) = beta*C + A(M,K)   @ B(K,N)     A, B, C row-major
 *   matmul_tn:  C(M,N) = beta*C + A(K,M)^T @ B(K,N)     (A stored K x M)
 * The third form a linear layer needs, X @ W^T, is a transpose of W into scratch plus matmul_nn:
 * the transpose moves N*K floats, the product does 2*M*N*K flops.
 * Edge tiles take a guarded path, so no size needs to be a multiple of the tile.
 */

#ifndef MM_TM
#define MM_TM 6
#endif
#ifndef MM_TN
#define MM_TN 16
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

__kernel void matmul_nn(__global float* C, __global const float* A, __global const float* B,
                        int M, int N, int K, float beta) {
    const int n0 = get_global_id(0) * MM_TN;
    const int m0 = get_global_id(1) * MM_TM;
    if (n0 >= N || m0 >= M) return;
    float acc[MM_TM][MM_TN];
    #pragma unroll
    for (int i = 0; i < MM_TM; i++)
        #pragma unroll
        for (int j = 0; j < MM_TN; j++) acc[i][j] = 0.0f;
    if (m0 + MM_TM <= M && n0 + MM_TN <= N) {
        for (int k = 0; k < K; k++) {
            const __global float* b = B + (size_t)k * N + n0;
            float bv[MM_TN];
            #pragma unroll
            for (int j = 0; j < MM_TN; j++) bv[j] = b[j];
            #pragma unroll
            for (int i = 0; i < MM_TM; i++) {
                const float a = A[(size_t)(m0 + i) * K + k];
                #pragma unroll
                for (int j = 0; j < MM_TN; j++) acc[i][j] = a * bv[j] + acc[i][j];
            }
        }
        store_full_tile(C, acc, m0, n0, N, beta);
    } else {
        const int mt = min(MM_TM, M - m0), nt = min(MM_TN, N - n0);
        for (int k = 0; k < K; k++) {
            for (int i = 0; i < mt; i++) {
                const float a = A[(size_t)(m0 + i) * K + k];
                for (int j = 0; j < nt; j++) acc[i][j] += a * B[(size_t)k * N + n0 + j];
            }
        }
        store_edge_tile(C, acc, m0, n0, mt, nt, N, beta);
    }
}

/* Only rows k0 <= k < k1 of A and B are summed: the launcher walks a long K (= B*T for a
 * weight gradient) in slices with beta = 1, so the slice of A and B stays in cache while
 * every tile passes over it (1.7x faster on M shapes, ~5x on L, measured here). */
__kernel void matmul_tn(__global float* C, __global const float* A, __global const float* B,
                        int M, int N, int K, float beta, int k0, int k1) {
    const int n0 = get_global_id(0) * MM_TN;
    const int m0 = get_global_id(1) * MM_TM;
    if (n0 >= N || m0 >= M) return;
    float acc[MM_TM][MM_TN];
    #pragma unroll
    for (int i = 0; i < MM_TM; i++)
        #pragma unroll
        for (int j = 0; j < MM_TN; j++) acc[i][j] = 0.0f;
    if (m0 + MM_TM <= M && n0 + MM_TN <= N) {
        for (int k = k0; k < k1; k++) {
            const __global float* a = A + (size_t)k * M + m0;
            const __global float* b = B + (size_t)k * N + n0;
            float av[MM_TM], bv[MM_TN];
            #pragma unroll
            for (int i = 0; i < MM_TM; i++) av[i] = a[i];
            #pragma unroll
            for (int j = 0; j < MM_TN; j++) bv[j] = b[j];
            #pragma unroll
            for (int i = 0; i < MM_TM; i++)
                #pragma unroll
                for (int j = 0; j < MM_TN; j++) acc[i][j] = av[i] * bv[j] + acc[i][j];
        }
        store_full_tile(C, acc, m0, n0, N, beta);
    } else {
        const int mt = min(MM_TM, M - m0), nt = min(MM_TN, N - n0);
        for (int k = k0; k < k1; k++)
            for (int i = 0; i < mt; i++) {
                const float a = A[(size_t)k * M + m0 + i];
                for (int j = 0; j < nt; j++) acc[i][j] += a * B[(size_t)k * N + n0 + j];
            }
        store_edge_tile(C, acc, m0, n0, mt, nt, N, beta);
    }
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
