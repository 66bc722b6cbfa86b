/* Matrix products for CPUs in the GotoBLAS / BLIS scheme (Goto and van de Geijn, "Anatomy of
 * high-performance matrix multiplication", ACM TOMS 2008; Van Zee and van de Geijn, BLIS, 2015):
 * packed panels in cache, a register micro-kernel over them.
 *
 * One work-group is one work-item (PoCL runs one work-group per thread, so one work-item is one
 * core's loop nest and nothing is left to PoCL's work-item loops). It computes the C block of
 * rows [gm * mb, + mb) and columns [gn * nb, + nb) (mb, nb: launch arguments, multiples of the
 * micro-tile) and walks K in slices of PK_KC:
 *   1. packs the PK_KC x nb block of B into __local as NR-column panels, k-major
 *      (bpk[panel][k][0..NR)), zero-padded past N: L2-resident (PK_KC * PK_NB floats), read
 *      once per row block of A and reused by every micro-tile of the group;
 *   2. per PK_MR rows of A, packs their PK_MR x PK_KC slice k-major (apk[k][0..MR)),
 *      zero-padded past M: L1-resident, reused by every panel of B;
 *   3. per panel, the micro-kernel: PK_MR x NR of C in PK_MR x 2 vector accumulators, per k
 *      two aligned vector loads of B, PK_MR broadcasts of A, 2 * PK_MR FMAs; then
 *      C = tile + (beta on the first K slice, else 1) * C, in vectors inside C.
 * Packing copies each element of B once per row block (2 * mb flops per copy) and each of A
 * once per column block (2 * nb flops per copy).
 * Three forms through the strides of A and B: nn (A (M,K), B (K,N)), nt (B given as (N,K)),
 * tn (A given as (K,M)). Sizes (-D, engine/gemm_tiles.py packed_defines): VEC_W 8 or 16,
 * PK_MR rows per micro-tile, PK_KC depth of a K slice, PK_NB most columns of a group.
 * Built only where the engine picks it (CPUs; tests also run it under Oclgrind). */

#if !defined(PK_MR) || !defined(PK_KC) || !defined(PK_NB)
#error "matmul_packed.cl is built with -DPK_MR, -DPK_KC and -DPK_NB (engine/gemm_tiles.py)"
#endif
#define PK_NR (2 * VEC_W) /* columns per micro-tile: two vectors */
#define PK_MIN(a, b) ((a) < (b) ? (a) : (b)) /* PoCL 3.0 calls its min() out of line */

/* Step 1: B(k, n) = B[k * b_rs + n * b_cs] for pc <= k < pc + kc and the group's nb columns
 * from n_base, into bpk as panels of PK_NR columns (PK_KC * 2 vectors each). */
#define PK_PACK_B(B, b_rs, b_cs, N, pc, kc, n_base, nb)                                           \
    for (int p = 0; p < nb; p += PK_NR) {                                                          \
        __local vm_float* dst = bpk + (p / PK_NR) * (PK_KC * 2);                                   \
        const int n = n_base + p;                                                                  \
        if ((b_cs) == 1 && n + PK_NR <= N) {                                                       \
            for (int k = 0; k < kc; k++) {                                                         \
                const __global float* src = B + (size_t)(pc + k) * (b_rs) + n;                     \
                dst[2 * k] = *(const __global vm_float_u*)src;                                     \
                dst[2 * k + 1] = *(const __global vm_float_u*)(src + VEC_W);                       \
            }                                                                                      \
        } else {                                                                                   \
            __local float* d = (__local float*)dst; /* k outer: a whole row of d per k */          \
            for (int k = 0; k < kc; k++) {                                                         \
                const __global float* src = B + (size_t)(pc + k) * (b_rs);                         \
                _Pragma("unroll") for (int j = 0; j < PK_NR; j++)                                  \
                    d[k * PK_NR + j] = n + j < N ? src[(size_t)(n + j) * (b_cs)] : 0.0f;           \
            }                                                                                      \
        }                                                                                          \
    }

/* Step 2: A(m, k) = A[m * a_rs + k * a_cs] for PK_MR rows from m0 and pc <= k < pc + kc, into
 * apk k-major (apk[k * PK_MR + i]), rows past M as zeros (their sums are never stored). Read
 * in place instead, the PK_MR x PK_KC slice of a tn product's A (rows M floats apart) falls
 * into a few L1 sets (M = 768: 4 of 64) and is evicted between the panels that reuse it.
 * k outer, rows unrolled: one PK_MR-float store per k (row by row, the stores PK_MR floats
 * apart ran nn 2048^3 at 208-218 GFLOP/s against 253-263 this way). */
#define PK_PACK_A(A, a_rs, a_cs, M, pc, kc, m0)                                                    \
    for (int k = 0; k < kc; k++) {                                                                 \
        const __global float* src = A + (size_t)(pc + k) * (a_cs);                                 \
        _Pragma("unroll") for (int i = 0; i < PK_MR; i++)                                          \
            apk[k * PK_MR + i] = m0 + i < M ? src[(size_t)(m0 + i) * (a_rs)] : 0.0f;               \
    }

/* Step 3 for the micro-tile at (m0, n0) over panel `panel`: C = acc + bet * C. */
#define PK_MICRO(C, M, N, kc, m_at, n_at, panel, bet)                                                     \
    {                                                                                              \
        const int m0 = (m_at), n0 = (n_at);                                                        \
        vm_float acc[PK_MR][2];                                                                    \
        _Pragma("unroll") for (int i = 0; i < PK_MR; i++) {                                        \
            acc[i][0] = (vm_float)(0.0f);                                                          \
            acc[i][1] = (vm_float)(0.0f);                                                          \
        }                                                                                          \
        const __local vm_float* bp = bpk + (panel) * (PK_KC * 2);                                  \
        for (int k = 0; k < kc; k++) {                                                             \
            const vm_float b0 = bp[2 * k], b1 = bp[2 * k + 1];                                     \
            _Pragma("unroll") for (int i = 0; i < PK_MR; i++) {                                    \
                const float a = apk[k * PK_MR + i];                                                \
                acc[i][0] = a * b0 + acc[i][0];                                     \
                acc[i][1] = a * b1 + acc[i][1];                                     \
            }                                                                                      \
        }                                                                                          \
        if (m0 + PK_MR <= M && n0 + PK_NR <= N) {                                                  \
            _Pragma("unroll") for (int i = 0; i < PK_MR; i++) {                                    \
                __global float* c = C + (size_t)(m0 + i) * N + n0;                                 \
                vm_float c0 = acc[i][0], c1 = acc[i][1];                                           \
                if ((bet) != 0.0f) {                                                               \
                    c0 += (bet) * *(__global vm_float_u*)c;                                        \
                    c1 += (bet) * *(__global vm_float_u*)(c + VEC_W);                              \
                }                                                                                  \
                *(__global vm_float_u*)c = c0;                                                     \
                *(__global vm_float_u*)(c + VEC_W) = c1;                                           \
            }                                                                                      \
        } else { /* through __local: a private array indexed at run time would keep acc in   \
                    memory (PoCL's code: every FMA spilled) */                                     \
            _Pragma("unroll") for (int i = 0; i < PK_MR; i++) {                                    \
                ctile[2 * i] = acc[i][0];                                                          \
                ctile[2 * i + 1] = acc[i][1];                                                      \
            }                                                                                      \
            const __local float* t = (const __local float*)ctile;                                  \
            for (int i = 0; i < PK_MIN(PK_MR, M - m0); i++) {                                         \
                __global float* c = C + (size_t)(m0 + i) * N + n0;                                 \
                for (int j = 0; j < PK_MIN(PK_NR, N - n0); j++)                                       \
                    c[j] = (bet) == 0.0f ? t[i * PK_NR + j] : t[i * PK_NR + j] + (bet) * c[j];     \
            }                                                                                      \
        }                                                                                          \
    }

/* The whole loop nest of one work-group: C (M, N) = beta * C + A @ B with A(m, k) and B(k, n)
 * at the given strides. K 0 leaves beta * C. */
#define PK_GEMM(C, A, a_rs, a_cs, B, b_rs, b_cs, M, N, K, beta, mb, nb)                            \
    __local vm_float bpk[PK_KC * PK_NB / VEC_W];                                                   \
    __local float apk[PK_KC * PK_MR] __attribute__((aligned(64)));                                 \
    __local vm_float ctile[PK_MR * 2]; /* an edge micro-tile on its way to C */                    \
    const int n_base = get_group_id(0) * (nb), m_base = get_group_id(1) * (mb);                    \
    if (n_base >= N || m_base >= M) return;                                                        \
    const int n_len = PK_MIN(nb, N - n_base), m_end = PK_MIN(m_base + (mb), M);                          \
    for (int pc = 0; pc < K || pc == 0; pc += PK_KC) {                                             \
        const int kc = PK_MIN(PK_KC, K - pc);                                                         \
        const float bet = pc == 0 ? (beta) : 1.0f;                                                 \
        PK_PACK_B(B, b_rs, b_cs, N, pc, kc, n_base, n_len)                                         \
        for (int mi = m_base; mi < m_end; mi += PK_MR) {                                           \
            PK_PACK_A(A, a_rs, a_cs, M, pc, kc, mi)                                                \
            for (int p = 0; p < n_len; p += PK_NR)                                                 \
                PK_MICRO(C, M, N, kc, mi, n_base + p, p / PK_NR, bet)                              \
        }                                                                                          \
    }

/* C (M,N) = beta*C + A (M,K) @ B (K,N). Launch: local (1, 1), global (ceil(N / nb),
 * ceil(M / mb)); nb a multiple of 2 * VEC_W at most PK_NB, mb a multiple of PK_MR. */
__kernel void matmul_nn_packed(__global float* C, __global const float* A,
                               __global const float* B, int M, int N, int K, float beta, int mb,
                               int nb) {
    PK_GEMM(C, A, K, 1, B, N, 1, M, N, K, beta, mb, nb)
}

/* C (M,N) = beta*C + A (M,K) @ B^T with B stored (N,K) (a linear layer's weight). */
__kernel void matmul_nt_packed(__global float* C, __global const float* A,
                               __global const float* B, int M, int N, int K, float beta, int mb,
                               int nb) {
    PK_GEMM(C, A, K, 1, B, 1, K, M, N, K, beta, mb, nb)
}

/* C (M,N) = beta*C + A^T @ B with A stored (K,M) and B (K,N) (a weight gradient). */
__kernel void matmul_tn_packed(__global float* C, __global const float* A,
                               __global const float* B, int M, int N, int K, float beta, int mb,
                               int nb) {
    PK_GEMM(C, A, 1, M, B, N, 1, M, N, K, beta, mb, nb)
}
