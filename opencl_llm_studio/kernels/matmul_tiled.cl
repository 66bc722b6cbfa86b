/* Matrix products for GPUs: local-memory tiled, 16x16 work-items per group, each computing an
 * RB x RB register block of a TL x TL output tile (TL = 64, RB = 4, or TL = 128, RB = 8 for
 * big products); K advances in slices of 16 staged in __local memory with coalesced loads,
 * double-buffered: the next slice is fetched into registers while the current one is
 * multiplied (CLBlast / Volkov-style SGEMM). Same contracts as matmul.cl:
 *   matmul_nn_tiled[128]:  C(M,N) = beta*C + A(M,K)   @ B(K,N)
 *   matmul_tn_tiled[128]:  C(M,N) = beta*C + A(K,M)^T @ B(K,N)
 * each over one slice of K per group z of the third grid dimension (split-K, see tn below).
 * Work-item (tx, ty) owns rows own(i, ty) and columns own(j, tx) (i, j < RB, see own()).
 * Edges are zero-filled on load and guarded on store.
 * Launch: global (TG * ceil(N/TL), TG * ceil(M/TL)), local (TG, TG); TG, TL_SMALL (64), TL_BIG
 * (128), TK and BMM_TL come from engine/opencl/gemm_tiles.py as -D options.
 * The tile edge is a literal at every call of the inline helpers below, so after inlining every
 * loop over a tile has a constant trip count, is unrolled, and the accumulators stay in
 * registers; only the loop over the K slice carries an unroll pragma (tile_fma). */

#if !defined(TK) || !defined(BMM_TL) || !defined(TL_SMALL) || !defined(TL_BIG) || !defined(TG)
#error "matmul_tiled.cl is built with -DTK, -DBMM_TL, -DTL_SMALL, -DTL_BIG, -DTG (engine/opencl/gemm_tiles.py)"
#endif
#if TG != 16 || TL_SMALL != 4 * TG || TL_BIG != 8 * TG
#error "the register blocks are 4x4 (TL_SMALL) and 8x8 (TL_BIG) per work-item of a TG = 16 group"
#endif
#define RB_MAX 8
#define LD_MAX (TK * TL_BIG / (TG * TG))  /* most elements of a tile a work-item fetches per slice */
/* Row stride of the __local tiles: 4 floats of padding keep float4 reads aligned and turn the
 * 16-way bank conflicts of the transposing A store (nn) into 2-way ones. */
#define LDS_STRIDE(tl) ((tl) + 4)

/* Register i of a work-item holds tile row (or column) own(i, t) for t = ty (or tx): blocks of
 * 4 consecutive rows at t * 4 and, for RB = 8, t * 4 + 64, so the RB values a work-item needs
 * at each k are 1 or 2 aligned float4 reads from __local memory (4x fewer reads than strided
 * scalars; the rows of a warp's 16 neighbours are contiguous, so the reads do not conflict). */
inline int own(int i, int t) { return (i / 4) * (4 * TG) + t * 4 + (i % 4); }

/* acc (RB x RB, row-major) += As[kk][own(i, ty)] * Bs[kk][own(j, tx)] for one kk. */
inline void fma_row(__local const float* As, __local const float* Bs, float* acc, int kk,
                    int tx, int ty, const int tl) {
    const int rb = tl / TG, ld = LDS_STRIDE(tl);
    float a[RB_MAX], b[RB_MAX];
    for (int q = 0; q < rb / 4; q++) {
        const float4 va = *(__local const float4*)(As + kk * ld + q * (4 * TG) + ty * 4);
        const float4 vb = *(__local const float4*)(Bs + kk * ld + q * (4 * TG) + tx * 4);
        a[q * 4] = va.x; a[q * 4 + 1] = va.y; a[q * 4 + 2] = va.z; a[q * 4 + 3] = va.w;
        b[q * 4] = vb.x; b[q * 4 + 1] = vb.y; b[q * 4 + 2] = vb.z; b[q * 4 + 3] = vb.w;
    }
    for (int i = 0; i < rb; i++)
        for (int j = 0; j < rb; j++) acc[i * rb + j] = MADD(a[i], b[j], acc[i * rb + j]);
}

/* acc += the K slice in __local. The loop over the slice is unrolled by 2 (by2, a literal at
 * every call) or not at all, as measured fastest per kernel on an H200 (benchmarks/RESULTS.md):
 * fully unrolled, nn took 157 registers and one group per SM, 20% slower. */
inline void tile_fma(__local const float* As, __local const float* Bs, float* acc,
                     int tx, int ty, const int tl, const int by2) {
    if (by2) {
        #pragma unroll 2
        for (int kk = 0; kk < TK; kk++) fma_row(As, Bs, acc, kk, tx, ty, tl);
    } else {
        #pragma unroll 1
        for (int kk = 0; kk < TK; kk++) fma_row(As, Bs, acc, kk, tx, ty, tl);
    }
}

/* C[m * ldc + n] = alpha * acc + beta * C (C not read when beta is 0) for the tile at m0, n0. */
inline void tile_store(__global float* C, const float* acc, int m0, int n0, int tx, int ty,
                       int M, int N, int ldc, float alpha, float beta, const int tl) {
    const int rb = tl / TG;
    for (int i = 0; i < rb; i++) {
        const int m = m0 + own(i, ty);
        if (m >= M) continue;
        for (int j = 0; j < rb; j++) {
            const int n = n0 + own(j, tx);
            if (n >= N) continue;
            __global float* c = C + (size_t)m * ldc + n;
            const float v = alpha * acc[i * rb + j];
            *c = beta == 0.0f ? v : beta * *c + v;
        }
    }
}

/* One output tile of a strided product, the core of every kernel below:
 *   C[m * ldc + n] = alpha * sum over kb <= k < ke of A(m, k) B(k, n) + beta * C[m * ldc + n]
 * with A(m, k) = A[m * a_rs + k * a_cs], B(k, n) = B[k * b_rs + n * b_cs], for the tile at
 * (m0, n0). Fetches walk the unit-stride side of each operand (a_cs == 1: along k, else along
 * m; b_cs == 1: along n, else along k) so neighbouring work-items read neighbouring words;
 * with literal strides of 1 the branches fold away. As / Bs: 2 buffers of TK rows each. */
inline void gemm_tile(__global float* C, int ldc, __global const float* A, int a_rs, int a_cs,
                      __global const float* B, int b_rs, int b_cs, int M, int N, int kb, int ke,
                      float alpha, float beta, int m0, int n0, __local float* As,
                      __local float* Bs, const int tl) {
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * TG + tx;
    const int ld = LDS_STRIDE(tl), per = TK * tl / (TG * TG);
    float acc[RB_MAX * RB_MAX], ra[LD_MAX], rb[LD_MAX];
    for (int i = 0; i < (tl / TG) * (tl / TG); i++) acc[i] = 0.0f;
    /* Tile coordinates of fetch r (element e = tid + 256 r of the TK x tl slice): affine in r,
     * since 256 is a multiple of both TK and tl. */
#define AM(r) (a_cs == 1 ? tid / TK + (r) * ((TG * TG) / TK) : tid % tl)
#define AK(r) (a_cs == 1 ? tid % TK : tid / tl + (r) * ((TG * TG) / tl))
#define BN(r) (b_cs == 1 ? tid % tl : tid / TK + (r) * ((TG * TG) / TK))
#define BK(r) (b_cs == 1 ? tid / tl + (r) * ((TG * TG) / tl) : tid % TK)
    for (int r = 0; r < per; r++) {  /* first slice */
        const int gm = m0 + AM(r), gk = kb + AK(r), gn = n0 + BN(r), gk2 = kb + BK(r);
        ra[r] = (gm < M && gk < ke) ? A[(size_t)gm * a_rs + (size_t)gk * a_cs] : 0.0f;
        rb[r] = (gk2 < ke && gn < N) ? B[(size_t)gk2 * b_rs + (size_t)gn * b_cs] : 0.0f;
    }
    for (int k0 = kb, buf = 0; k0 < ke; k0 += TK, buf ^= 1) {
        __local float* as = As + buf * TK * ld;
        __local float* bs = Bs + buf * TK * ld;
        for (int r = 0; r < per; r++) {
            as[AK(r) * ld + AM(r)] = ra[r];
            bs[BK(r) * ld + BN(r)] = rb[r];
        }
        /* One barrier per slice: the buffer written next was last read two slices ago, and
         * every work-item has passed this barrier since. */
        barrier(CLK_LOCAL_MEM_FENCE);
        const int k1 = k0 + TK;
        if (k1 < ke) {
            for (int r = 0; r < per; r++) {  /* next slice, in flight during the FMAs */
                const int gm = m0 + AM(r), gk = k1 + AK(r), gn = n0 + BN(r), gk2 = k1 + BK(r);
                ra[r] = (gm < M && gk < ke) ? A[(size_t)gm * a_rs + (size_t)gk * a_cs] : 0.0f;
                rb[r] = (gk2 < ke && gn < N) ? B[(size_t)gk2 * b_rs + (size_t)gn * b_cs] : 0.0f;
            }
        }
        tile_fma(as, bs, acc, tx, ty, tl, 1);
    }
    tile_store(C, acc, m0, n0, tx, ty, M, N, ldc, alpha, beta, tl);
#undef AM
#undef AK
#undef BN
#undef BK
}

/* The same tile with float4 fetches (one 128-bit load where the scalar path issues four), for
 * products whose row strides, M, N, K and offsets are multiples of 4 floats (the launcher
 * checks): every float4 is then wholly inside or wholly outside the operand, and aligned.
 * P(t, k) is operand element (tile index t, depth k): P[t * ld + k] when kmajor is 0 (rows run
 * along k: nn's A), else P[k * ld + t] (rows run along the tile edge: tn's A, and B). */
inline void fetch4(__global const float* P, int ld, int kmajor, int t0, int lim, int k0,
                   int ke, float4* r, int tid, const int tl) {
    for (int q = 0; q < TK * tl / (4 * TG * TG); q++) {
        const int e = tid + TG * TG * q;
        const int t = kmajor ? t0 + 4 * (e % (tl / 4)) : t0 + e / (TK / 4);
        const int k = kmajor ? k0 + e / (tl / 4) : k0 + 4 * (e % (TK / 4));
        r[q] = (t < lim && k < ke)
            ? *(__global const float4*)(P + (kmajor ? (size_t)k * ld + t : (size_t)t * ld + k))
            : (float4)(0.0f);
    }
}

/* Store fetch4's registers into a __local TK x LDS_STRIDE(tl) slice laid out [k][t]: a
 * float4 store when the fetch ran along t, four scalar stores (a transpose) when along k. */
inline void stage4(__local float* s, const float4* r, int kmajor, int tid, const int tl) {
    const int ld = LDS_STRIDE(tl);
    for (int q = 0; q < TK * tl / (4 * TG * TG); q++) {
        const int e = tid + TG * TG * q;
        if (kmajor) {
            *(__local float4*)(s + (e / (tl / 4)) * ld + 4 * (e % (tl / 4))) = r[q];
        } else {
            const int t = e / (TK / 4), k = 4 * (e % (TK / 4));
            s[k * ld + t] = r[q].x; s[(k + 1) * ld + t] = r[q].y;
            s[(k + 2) * ld + t] = r[q].z; s[(k + 3) * ld + t] = r[q].w;
        }
    }
}

/* gemm_tile for float4-aligned operands: A(m, k) is A[m * lda + k] (a_kmajor 0) or
 * A[k * lda + m] (a_kmajor 1); B(k, n) is always B[k * ldb + n]. */
inline void gemm_tile4(__global float* C, int ldc, __global const float* A, int lda,
                       int a_kmajor, __global const float* B, int ldb, int M, int N, int kb,
                       int ke, float beta, int m0, int n0, __local float* As,
                       __local float* Bs, const int tl) {
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * TG + tx;
    const int ld = LDS_STRIDE(tl);
    float acc[RB_MAX * RB_MAX];
    float4 ra[LD_MAX / 4], rb[LD_MAX / 4];
    for (int i = 0; i < (tl / TG) * (tl / TG); i++) acc[i] = 0.0f;
    fetch4(A, lda, a_kmajor, m0, M, kb, ke, ra, tid, tl);
    fetch4(B, ldb, 1, n0, N, kb, ke, rb, tid, tl);
    for (int k0 = kb, buf = 0; k0 < ke; k0 += TK, buf ^= 1) {
        __local float* as = As + buf * TK * ld;
        __local float* bs = Bs + buf * TK * ld;
        stage4(as, ra, a_kmajor, tid, tl);
        stage4(bs, rb, 1, tid, tl);
        barrier(CLK_LOCAL_MEM_FENCE);  /* one per slice, as in gemm_tile */
        if (k0 + TK < ke) {
            fetch4(A, lda, a_kmajor, m0, M, k0 + TK, ke, ra, tid, tl);
            fetch4(B, ldb, 1, n0, N, k0 + TK, ke, rb, tid, tl);
        }
        tile_fma(as, bs, acc, tx, ty, tl, a_kmajor);  /* nn (A along k): not unrolled */
    }
    tile_store(C, acc, m0, n0, tx, ty, M, N, ldc, 1.0f, beta, tl);
}

/* The kernels: 64x64 tiles (4x4 per work-item) and 128x128 tiles (8x8) for products with
 * enough tiles to fill the GPU (engine/opencl/ops.py picks). The __local tiles As4, Bs4 (2 buffers x
 * TK rows x LDS_STRIDE(tl) floats each) are launch arguments, not arrays in the kernels: a
 * program's static __local arrays are counted together by some implementations (Oclgrind
 * refused every kernel once the 128 tiles existed), and the launcher checks the size against
 * the device (the 128 tiles need 33 KiB; OpenCL guarantees 32). */
#define TILES __local float* As = (__local float*)As4; __local float* Bs = (__local float*)Bs4

/* nn: C(M,N) = beta*C + A(M,K) @ B(K,N), split over K as tn below where its tiles leave
 * compute units idle (a tied output head's dX per chunk of rows: 256 x 576 x 49152 is 36 tiles
 * of 64 on a GPU with 132 compute units). */
__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void matmul_nn_tiled(__global float* C, __global const float* A, __global const float* B,
                     int M, int N, int K, float beta, int kslice, __local float4* As4,
                     __local float4* Bs4) {
    TILES;
    const int z = get_group_id(2), kb = z * kslice;
    gemm_tile(C + (size_t)z * M * N, N, A, K, 1, B, N, 1, M, N, kb, min(K, kb + kslice), 1.0f,
              beta, get_group_id(1) * TL_SMALL, get_group_id(0) * TL_SMALL, As, Bs, TL_SMALL);
}

__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void matmul_nn_tiled128(__global float* C, __global const float* A, __global const float* B,
                        int M, int N, int K, float beta, int kslice, __local float4* As4,
                        __local float4* Bs4) {
    TILES;
    const int z = get_group_id(2), kb = z * kslice;
    gemm_tile(C + (size_t)z * M * N, N, A, K, 1, B, N, 1, M, N, kb, min(K, kb + kslice), 1.0f,
              beta, get_group_id(1) * TL_BIG, get_group_id(0) * TL_BIG, As, Bs, TL_BIG);
}

/* tn: C(M,N) = beta*C + A(K,M)^T @ B(K,N), split over K: group z of the third grid dimension
 * sums rows [z * kslice, (z+1) * kslice) into C + z * M * N (with beta when there is one
 * slice; scratch slices are then added up by sum_slices). A weight gradient has a small M x N
 * and a long K = B*T: unsplit, a 256 x 256 gradient is 16 work-groups on a GPU with 132
 * compute units. */
__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void matmul_tn_tiled(__global float* C, __global const float* A, __global const float* B,
                     int M, int N, int K, float beta, int kslice,
                     __local float4* As4, __local float4* Bs4) {
    TILES;
    const int z = get_group_id(2), kb = z * kslice;
    gemm_tile(C + (size_t)z * M * N, N, A, 1, M, B, N, 1, M, N, kb, min(K, kb + kslice), 1.0f,
              beta, get_group_id(1) * TL_SMALL, get_group_id(0) * TL_SMALL, As, Bs, TL_SMALL);
}

__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void matmul_tn_tiled128(__global float* C, __global const float* A, __global const float* B,
                        int M, int N, int K, float beta, int kslice,
                        __local float4* As4, __local float4* Bs4) {
    TILES;
    const int z = get_group_id(2), kb = z * kslice;
    gemm_tile(C + (size_t)z * M * N, N, A, 1, M, B, N, 1, M, N, kb, min(K, kb + kslice), 1.0f,
              beta, get_group_id(1) * TL_BIG, get_group_id(0) * TL_BIG, As, Bs, TL_BIG);
}

/* The float4-fetch forms of the four kernels above (same arguments and launch), for aligned
 * products (engine/opencl/ops.py: M, N, K multiples of 4). Written out, not generated by a macro:
 * engine.runtime reads each kernel's signature from this source. */
__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void matmul_nn_tiled_v4(__global float* C, __global const float* A, __global const float* B,
                        int M, int N, int K, float beta, int kslice, __local float4* As4,
                        __local float4* Bs4) {
    TILES;
    const int z = get_group_id(2), kb = z * kslice;
    gemm_tile4(C + (size_t)z * M * N, N, A, K, 0, B, N, M, N, kb, min(K, kb + kslice), beta,
               get_group_id(1) * TL_SMALL, get_group_id(0) * TL_SMALL, As, Bs, TL_SMALL);
}

__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void matmul_nn_tiled128_v4(__global float* C, __global const float* A, __global const float* B,
                           int M, int N, int K, float beta, int kslice, __local float4* As4,
                           __local float4* Bs4) {
    TILES;
    const int z = get_group_id(2), kb = z * kslice;
    gemm_tile4(C + (size_t)z * M * N, N, A, K, 0, B, N, M, N, kb, min(K, kb + kslice), beta,
               get_group_id(1) * TL_BIG, get_group_id(0) * TL_BIG, As, Bs, TL_BIG);
}

__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void matmul_tn_tiled_v4(__global float* C, __global const float* A, __global const float* B,
                        int M, int N, int K, float beta, int kslice,
                        __local float4* As4, __local float4* Bs4) {
    TILES;
    const int z = get_group_id(2), kb = z * kslice;
    gemm_tile4(C + (size_t)z * M * N, N, A, M, 1, B, N, M, N, kb, min(K, kb + kslice), beta,
               get_group_id(1) * TL_SMALL, get_group_id(0) * TL_SMALL, As, Bs, TL_SMALL);
}

__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void matmul_tn_tiled128_v4(__global float* C, __global const float* A, __global const float* B,
                           int M, int N, int K, float beta, int kslice,
                           __local float4* As4, __local float4* Bs4) {
    TILES;
    const int z = get_group_id(2), kb = z * kslice;
    gemm_tile4(C + (size_t)z * M * N, N, A, M, 1, B, N, M, N, kb, min(K, kb + kslice), beta,
               get_group_id(1) * TL_BIG, get_group_id(0) * TL_BIG, As, Bs, TL_BIG);
}

/* C[i] = beta * C[i] + sum over z < n_slices of parts[z * n + i] (the split-K partial sums). */
__kernel void sum_slices(__global float* C, __global const float* parts, int n_slices, int n,
                         float beta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    float acc = 0.0f;
    for (int z = 0; z < n_slices; z++) acc += parts[(size_t)z * n + i];
    C[i] = beta == 0.0f ? acc : beta * C[i] + acc;
}


/* Batched strided product for attention (GPU), one (b, h) per group of the third grid
 * dimension z = b * H + h:  C[z](M,N) = alpha * A[z](M,K) @ B[z](K,N) + beta * C[z], with
 *   A[z](m, k) = A[a_off + b * a_bs + h * a_hs + m * a_rs + k * a_cs]   (likewise B; C has unit
 *   column stride). The offsets pick q, k or v out of the fused qkv rows.
 * causal: a CAUSAL_* mode (common.h). */
__kernel __attribute__((reqd_work_group_size(TG, TG, 1)))
void bmm_tiled(__global float* C, __global const float* A, __global const float* B,
               int M, int N, int K, int H, int a_off, int a_rs, int a_cs, int a_bs, int a_hs,
               int b_off, int b_rs, int b_cs, int b_bs, int b_hs, int c_off, int c_rs, int c_bs,
               int c_hs, float alpha, float beta, int causal, __local float4* As4,
               __local float4* Bs4) {
    TILES;
    const int n0 = get_group_id(0) * BMM_TL, m0 = get_group_id(1) * BMM_TL;
    BMM_SLICE(BMM_TL)  /* (common.h) a whole work-group returns or none: before any barrier */
    gemm_tile(Cz, c_rs, Az, a_rs, a_cs, Bz, b_rs, b_cs, M, N, kb, ke, alpha, beta, m0, n0, As,
              Bs, BMM_TL);
}
