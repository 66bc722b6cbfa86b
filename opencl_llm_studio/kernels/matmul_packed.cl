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
 *   2. packs A's PK_MR x PK_KC micro-panels k-major (apk[panel][k][0..MR)), zero-padded past
 *      M: tn a block of PK_MC rows at once (L2-resident), nn and nt one micro-panel before
 *      its use; each micro-panel is L1-resident while every panel of B reuses it;
 *   3. per micro-panel of A and panel of B, the micro-kernel: PK_MR x NR of C in PK_MR x 2
 *      vector accumulators, per k two aligned vector loads of B, PK_MR broadcasts of A,
 *      2 * PK_MR FMAs; then C = tile + (beta on the first K slice, else 1) * C, in vectors
 *      inside C.
 * Packing copies each element of B once per row block (2 * mb flops per copy) and each of A
 * once per column block (2 * nb flops per copy).
 * Three forms through the strides of A and B: nn (A (M,K), B (K,N)), nt (B given as (N,K)),
 * tn (A given as (K,M)). Sizes (-D, engine/opencl/gemm_tiles.py packed_defines): VEC_W 8 or 16,
 * PK_MR rows per micro-tile, PK_KC depth of a K slice, PK_NB most columns of a group, PK_MC
 * rows of A packed at once, PK_PREFETCH 1 for software prefetches (0 under Oclgrind).
 * Built only where the engine picks it (CPUs; tests also run it under Oclgrind). */

#if !defined(PK_MR) || !defined(PK_KC) || !defined(PK_NB) || !defined(PK_MC) || !defined(PK_PREFETCH)
#error "matmul_packed.cl needs -DPK_MR, PK_KC, PK_NB, PK_MC and PK_PREFETCH (gemm_tiles.py)"
#endif
#if PK_PREFETCH
#define PK_PF(p) __builtin_prefetch(p)
#else
#define PK_PF(p) /* Oclgrind cannot run llvm.prefetch */
#endif
#define PK_NR (2 * VEC_W) /* columns per micro-tile: two vectors */
#define PK_AP (PK_KC * PK_MR) /* floats from one packed micro-panel of A to the next */
/* tn: rows of A ahead that the packing of A prefetches (2-32 ran within the noise) */
#define PK_PF_ROWS 8
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

/* Step 2 for tn (A (K, M): A(m, k) = A[k * a_cs + m]): the mc rows from m0 for
 * pc <= k < pc + kc into apk as micro-panels of PK_MR rows, k-major (apk[(i / PK_MR) * PK_AP +
 * k * PK_MR + i % PK_MR]), rows past M as zeros (their sums are never stored): the whole block
 * at once, k by k, each k a run of mc floats, the run PK_PF_ROWS rows on prefetched
 * (__builtin_prefetch: prefetcht0; OpenCL's prefetch() is a no-op in PoCL). A's rows are M
 * floats apart, a new page per k that the hardware prefetcher does not follow: packed PK_MR
 * floats per k, or without the prefetch, tn 1408x256x4096 ran at 160-185 GFLOP/s against nn's
 * 250-260 on the same sizes; 215-240 this way (benchmarks/RESULTS.md, "tn products at nn's
 * speed"). */
#define PK_PACK_A_TN(A, a_cs, M, pc, kc, m0, mc)                                                  \
    for (int k = 0; k < kc; k++) {                                                                 \
        const __global float* src = A + (size_t)(pc + k) * (a_cs) + (m0);                          \
        if (PK_PREFETCH && k + PK_PF_ROWS < kc) { /* each 64-byte line PK_PF_ROWS rows on */     \
            const __global float* ahead = src + (size_t)PK_PF_ROWS * (a_cs);                       \
            for (int i = 0; i < mc; i += 16) PK_PF(ahead + i);                                     \
            PK_PF(ahead + mc - 1);                                                                 \
        }                                                                                          \
        for (int i = 0; i < mc; i += PK_MR) {                                                      \
            __local float* d = apk + (i / PK_MR) * PK_AP + k * PK_MR;                              \
            if (m0 + i + PK_MR <= M) { /* all loads before the stores: one vector each */      \
                float t[PK_MR];                                                                    \
                _Pragma("unroll") for (int j = 0; j < PK_MR; j++) t[j] = src[i + j];              \
                _Pragma("unroll") for (int j = 0; j < PK_MR; j++) d[j] = t[j];                    \
            } else {                                                                               \
                _Pragma("unroll") for (int j = 0; j < PK_MR; j++)                                  \
                    d[j] = m0 + i + j < M ? src[i + j] : 0.0f;                                     \
            }                                                                                      \
        }                                                                                          \
    }

/* Step 2 for nn and nt (a_cs 1): the micro-panel of PK_MR rows from m0 into d, the first slot
 * of apk, just before the micro-kernels use it: it stays in L1 (packed a block ahead like tn's,
 * or each into its own slot, nn and nt ran 1-6% slower). */
#define PK_PACK_A_ROWS(A, a_rs, M, pc, kc, m0, d)                                                  \
    for (int k = 0; k < kc; k++) {                                                                 \
        _Pragma("unroll") for (int j = 0; j < PK_MR; j++)                                          \
            (d)[k * PK_MR + j] = m0 + j < M ? A[(size_t)(m0 + j) * (a_rs) + pc + k] : 0.0f;        \
    }

/* Step 3 for the micro-tile at (m0, n0) over panel `panel`: C = acc + bet * C. */
#define PK_MICRO(C, M, N, kc, m_at, n_at, ap, panel, bet)                                          \
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
                const float a = (ap)[k * PK_MR + i];                                                \
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
#define PK_GEMM(C, A, a_rs, a_cs, B, b_rs, b_cs, M, N, K, beta, mb, nb, kz)                        \
    __local vm_float bpk[PK_KC * PK_NB / VEC_W];                                                   \
    __local float apk[PK_AP * (PK_MC / PK_MR)] __attribute__((aligned(64)));                       \
    __local vm_float ctile[PK_MR * 2]; /* an edge micro-tile on its way to C */                    \
    const int n_base = get_group_id(0) * (nb), m_base = get_group_id(1) * (mb);                    \
    if (n_base >= N || m_base >= M) return;                                                        \
    const int n_len = PK_MIN(nb, N - n_base), m_end = PK_MIN(m_base + (mb), M);                    \
    const int k_lo = get_group_id(2) * (kz), k_hi = PK_MIN(K, k_lo + (kz));                        \
    __global float* Cz = C + (size_t)get_group_id(2) * M * N; /* K range z's partial product */  \
    for (int pc = k_lo; pc < k_hi || pc == k_lo; pc += PK_KC) {                                    \
        const int kc = PK_MIN(PK_KC, k_hi - pc);                                                   \
        const float bet = pc == k_lo ? (beta) : 1.0f;                                              \
        PK_PACK_B(B, b_rs, b_cs, N, pc, kc, n_base, n_len)                                         \
        for (int ic = m_base; ic < m_end; ic += PK_MC) {                                           \
            const int mc = PK_MIN(PK_MC, m_end - ic);                                              \
            if ((a_rs) == 1) PK_PACK_A_TN(A, a_cs, M, pc, kc, ic, mc)                              \
            for (int ir = 0; ir < mc; ir += PK_MR) {                                               \
                __local float* ap = apk + ((a_rs) == 1 ? ir / PK_MR * PK_AP : 0); /* nn, nt: one */\
                if ((a_rs) != 1) PK_PACK_A_ROWS(A, a_rs, M, pc, kc, ic + ir, ap)                   \
                for (int p = 0; p < n_len; p += PK_NR)                                             \
                    PK_MICRO(Cz, M, N, kc, ic + ir, n_base + p, ap, p / PK_NR, bet)                \
            }                                                                                      \
        }                                                                                          \
    }

/* C (M,N) = beta*C + A (M,K) @ B (K,N). Launch: local (1, 1, 1), global (ceil(N / nb),
 * ceil(M / mb), ceil(K / kz)); nb a multiple of 2 * VEC_W at most PK_NB, mb a multiple of
 * PK_MR; work-group z sums K rows [z * kz, (z + 1) * kz) into C + z * M * N (more than one
 * K range: C is a scratch of partial products, beta 0, engine/opencl/gemm_packed.py). */
__kernel void matmul_nn_packed(__global float* C, __global const float* A,
                               __global const float* B, int M, int N, int K, float beta, int mb,
                               int nb, int kz) {
    PK_GEMM(C, A, K, 1, B, N, 1, M, N, K, beta, mb, nb, kz)
}

/* C (M,N) = beta*C + A (M,K) @ B^T with B stored (N,K) (a linear layer's weight). */
__kernel void matmul_nt_packed(__global float* C, __global const float* A,
                               __global const float* B, int M, int N, int K, float beta, int mb,
                               int nb, int kz) {
    PK_GEMM(C, A, K, 1, B, 1, K, M, N, K, beta, mb, nb, kz)
}

/* C (M,N) = beta*C + A^T @ B with A stored (K,M) and B (K,N) (a weight gradient). */
__kernel void matmul_tn_packed(__global float* C, __global const float* A,
                               __global const float* B, int M, int N, int K, float beta, int mb,
                               int nb, int kz) {
    PK_GEMM(C, A, 1, M, B, N, 1, M, N, K, beta, mb, nb, kz)
}
